//! torchvision ResNet-18/34/50/101/152 (v1.5) as ONNX, with synthetic weights.
//!
//! The topology is torchvision's: stem `conv1` 7×7/2 pad 3 → `bn1` → ReLU →
//! MaxPool 3×3/2 pad 1; four stages `layer1..layer4` of BasicBlocks (18, 34) or
//! Bottlenecks (50, 101, 152, stride on the 3×3 conv); the first block of a
//! stage gets a `downsample` (1×1 conv with the block's stride, then BN) when
//! the stride or the channel count changes; GlobalAveragePool → Flatten(axis 1)
//! → Gemm(transB = 1) with `fc.weight` `[1000, C]` and `fc.bias`. Convs carry no
//! bias and every BatchNormalization (epsilon 1e-5) is kept unfolded, so that
//! the compiler's folding pass has work to do. Initializers carry torchvision's
//! parameter names; nodes are named after the module that produced them
//! (`layer2.0.conv1`, `layer2.0.relu2`, `layer2.0.add`), and each node's output
//! value has the node's name, except the final `output`.
//!
//! Every initializer is filled by [`fill`](super::fill::fill) with seed
//! `fnv1a64(name) ^ model_seed` and a `(center, half_width)` chosen so that
//! activations stay well inside fp16 range through ResNet-152:
//!
//! | tensor | center | half-width |
//! | --- | --- | --- |
//! | conv `weight` | 0 | `sqrt(6 / fan_in)` (He-uniform: variance `2 / fan_in`) |
//! | BN `weight` (gamma) | 1.0 | 0.25 |
//! | BN `weight` of a residual branch's last BN | 0.1 | 0.05 |
//! | BN `bias` (beta) | 0 | 0.1 |
//! | BN `running_mean` | 0 | 0.1 |
//! | BN `running_var` | 1.0 | 0.25 (so in `[0.75, 1.25)`, strictly positive) |
//! | `fc.weight`, `fc.bias` | 0 | `1 / sqrt(C)` (torch's `nn.Linear` default) |
//!
//! Because the BN statistics are not measured, BN acts as a per-channel affine
//! map of gain about 1, and He init keeps the pre-activation variance about
//! constant across convs. The small gamma of each branch's last BN (as
//! torchvision's `zero_init_residual`, but non-zero) keeps the residual stream
//! from growing across the 36 blocks of ResNet-152's third stage. Half-widths
//! are computed in f64 (`sqrt` is correctly rounded) and rounded once to f32,
//! so the bytes are the same on every machine.

use std::fmt;
use std::str::FromStr;

use onnx_ir::Message;

use super::fill::{fill, tensor_seed};
use super::onnx_writer::{attr_float, attr_int, attr_ints, Dim, GraphWriter, ModelHeader};
use super::ZooError;

/// The seed [`write_resnet`](super::write_resnet) and the `aotune-zoo` tool use
/// unless told otherwise. With seed 0 a tensor's seed is `fnv1a64(name)`, the
/// same rule as the torchvision fixtures.
pub const DEFAULT_SEED: u64 = 0;

/// ONNX opset of the default domain that the zoo writes.
pub const OPSET: i64 = 17;
/// ONNX IR version that the zoo writes.
pub const IR_VERSION: i64 = 8;
/// `producer_name` of the written models.
pub const PRODUCER_NAME: &str = "aotune-zoo";
/// Version of this writer's output, recorded as `producer_version`; bump it
/// when the bytes for a given depth and seed change.
pub const ZOO_FORMAT_VERSION: &str = "1";

const BN_EPSILON: f32 = 1e-5;
const NUM_CLASSES: usize = 1000;
const IMAGE_SIZE: i64 = 224;

/// The five torchvision ResNets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResNetDepth {
    R18,
    R34,
    R50,
    R101,
    R152,
}

/// The residual block a ResNet is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Two 3×3 convs (ResNet-18/34), expansion 1.
    Basic,
    /// 1×1, 3×3 (strided), 1×1 convs (ResNet-50/101/152), expansion 4.
    Bottleneck,
}

impl BlockKind {
    /// Output channels of a block over its `planes`.
    pub fn expansion(self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

impl ResNetDepth {
    /// All depths, shallowest first.
    pub const ALL: [ResNetDepth; 5] = [
        ResNetDepth::R18,
        ResNetDepth::R34,
        ResNetDepth::R50,
        ResNetDepth::R101,
        ResNetDepth::R152,
    ];

    /// torchvision's name: `resnet18`, …, `resnet152`.
    pub fn name(self) -> &'static str {
        match self {
            ResNetDepth::R18 => "resnet18",
            ResNetDepth::R34 => "resnet34",
            ResNetDepth::R50 => "resnet50",
            ResNetDepth::R101 => "resnet101",
            ResNetDepth::R152 => "resnet152",
        }
    }

    /// Blocks in `layer1..layer4`.
    pub fn layers(self) -> [usize; 4] {
        match self {
            ResNetDepth::R18 => [2, 2, 2, 2],
            ResNetDepth::R34 | ResNetDepth::R50 => [3, 4, 6, 3],
            ResNetDepth::R101 => [3, 4, 23, 3],
            ResNetDepth::R152 => [3, 8, 36, 3],
        }
    }

    /// The block type.
    pub fn block(self) -> BlockKind {
        match self {
            ResNetDepth::R18 | ResNetDepth::R34 => BlockKind::Basic,
            _ => BlockKind::Bottleneck,
        }
    }

    /// Number of trainable parameters (conv and fc weights, fc bias, BN gamma
    /// and beta; not the running statistics): torchvision's
    /// `sum(p.numel() for p in model.parameters())`.
    pub fn parameter_count(self) -> u64 {
        build(self)
            .1
            .iter()
            .filter(|t| t.role.is_trainable())
            .map(|t| t.numel() as u64)
            .sum()
    }

    /// The names accepted by [`FromStr`], comma-separated.
    pub fn known_names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

impl fmt::Display for ResNetDepth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for ResNetDepth {
    type Err = ZooError;

    /// Accepts `resnet50`, `ResNet-50` and similar (case and one `-` or `_`
    /// after `resnet` are ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let digits = lower
            .strip_prefix("resnet")
            .map(|rest| rest.trim_start_matches(['-', '_']));
        let depth = match digits {
            Some("18") => ResNetDepth::R18,
            Some("34") => ResNetDepth::R34,
            Some("50") => ResNetDepth::R50,
            Some("101") => ResNetDepth::R101,
            Some("152") => ResNetDepth::R152,
            _ => {
                return Err(ZooError::UnknownModel {
                    name: s.to_string(),
                    known: Self::known_names(),
                })
            }
        };
        Ok(depth)
    }
}

/// What an initializer is, which sets its fill range.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    ConvWeight { fan_in: usize },
    BnGamma { residual_last: bool },
    BnBeta,
    BnMean,
    BnVar,
    FcWeight { fan_in: usize },
    FcBias { fan_in: usize },
}

impl Role {
    fn is_trainable(self) -> bool {
        !matches!(self, Role::BnMean | Role::BnVar)
    }

    /// `(center, half_width)` of the fill; see the table in the module docs.
    fn range(self) -> (f32, f32) {
        match self {
            Role::ConvWeight { fan_in } => (0.0, (6.0 / fan_in as f64).sqrt() as f32),
            Role::BnGamma {
                residual_last: false,
            } => (1.0, 0.25),
            Role::BnGamma {
                residual_last: true,
            } => (0.1, 0.05),
            Role::BnBeta | Role::BnMean => (0.0, 0.1),
            Role::BnVar => (1.0, 0.25),
            Role::FcWeight { fan_in } | Role::FcBias { fan_in } => {
                (0.0, (1.0 / fan_in as f64).sqrt() as f32)
            }
        }
    }
}

/// One initializer before it is filled.
#[derive(Debug, Clone)]
struct TensorSpec {
    name: String,
    dims: Vec<usize>,
    role: Role,
}

impl TensorSpec {
    fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// Walks the topology, writing nodes and collecting initializer specs.
struct Builder {
    graph: GraphWriter,
    tensors: Vec<TensorSpec>,
}

impl Builder {
    fn tensor(&mut self, name: String, dims: Vec<usize>, role: Role) -> String {
        self.tensors.push(TensorSpec {
            name: name.clone(),
            dims,
            role,
        });
        name
    }

    /// A bias-free 2-D convolution named `name` (weight `{name}.weight`).
    fn conv(&mut self, name: &str, x: &str, shape: ConvShape) -> String {
        let ConvShape {
            cin,
            cout,
            kernel,
            stride,
            pad,
        } = shape;
        let weight = self.tensor(
            format!("{name}.weight"),
            vec![cout, cin, kernel, kernel],
            Role::ConvWeight {
                fan_in: cin * kernel * kernel,
            },
        );
        let (k, s, p) = (kernel as i64, stride as i64, pad as i64);
        self.graph.node(
            "Conv",
            name,
            &[x, &weight],
            &[name],
            vec![
                attr_ints("dilations", &[1, 1]),
                attr_int("group", 1),
                attr_ints("kernel_shape", &[k, k]),
                attr_ints("pads", &[p, p, p, p]),
                attr_ints("strides", &[s, s]),
            ],
        );
        name.to_string()
    }

    /// An inference-mode BatchNormalization over `channels` named `name`.
    fn batch_norm(&mut self, name: &str, x: &str, channels: usize, residual_last: bool) -> String {
        let gamma = self.tensor(
            format!("{name}.weight"),
            vec![channels],
            Role::BnGamma { residual_last },
        );
        let beta = self.tensor(format!("{name}.bias"), vec![channels], Role::BnBeta);
        let mean = self.tensor(format!("{name}.running_mean"), vec![channels], Role::BnMean);
        let var = self.tensor(format!("{name}.running_var"), vec![channels], Role::BnVar);
        self.graph.node(
            "BatchNormalization",
            name,
            &[x, &gamma, &beta, &mean, &var],
            &[name],
            vec![attr_float("epsilon", BN_EPSILON)],
        );
        name.to_string()
    }

    fn relu(&mut self, name: &str, x: &str) -> String {
        self.graph.node("Relu", name, &[x], &[name], Vec::new());
        name.to_string()
    }

    fn add(&mut self, name: &str, a: &str, b: &str) -> String {
        self.graph.node("Add", name, &[a, b], &[name], Vec::new());
        name.to_string()
    }

    /// One residual block `prefix` (e.g. `layer2.0`); returns its output.
    fn block(&mut self, prefix: &str, x: &str, kind: BlockKind, io: BlockShape) -> String {
        let BlockShape {
            inplanes,
            planes,
            stride,
        } = io;
        let out_channels = planes * kind.expansion();
        let branch = match kind {
            BlockKind::Basic => {
                let y = self.conv(
                    &format!("{prefix}.conv1"),
                    x,
                    ConvShape::new(inplanes, planes, 3, stride, 1),
                );
                let y = self.batch_norm(&format!("{prefix}.bn1"), &y, planes, false);
                let y = self.relu(&format!("{prefix}.relu1"), &y);
                let y = self.conv(
                    &format!("{prefix}.conv2"),
                    &y,
                    ConvShape::new(planes, planes, 3, 1, 1),
                );
                self.batch_norm(&format!("{prefix}.bn2"), &y, planes, true)
            }
            BlockKind::Bottleneck => {
                // torchvision v1.5: the stride sits on the 3×3 conv.
                let width = planes;
                let y = self.conv(
                    &format!("{prefix}.conv1"),
                    x,
                    ConvShape::new(inplanes, width, 1, 1, 0),
                );
                let y = self.batch_norm(&format!("{prefix}.bn1"), &y, width, false);
                let y = self.relu(&format!("{prefix}.relu1"), &y);
                let y = self.conv(
                    &format!("{prefix}.conv2"),
                    &y,
                    ConvShape::new(width, width, 3, stride, 1),
                );
                let y = self.batch_norm(&format!("{prefix}.bn2"), &y, width, false);
                let y = self.relu(&format!("{prefix}.relu2"), &y);
                let y = self.conv(
                    &format!("{prefix}.conv3"),
                    &y,
                    ConvShape::new(width, out_channels, 1, 1, 0),
                );
                self.batch_norm(&format!("{prefix}.bn3"), &y, out_channels, true)
            }
        };
        let identity = if stride != 1 || inplanes != out_channels {
            let d = self.conv(
                &format!("{prefix}.downsample.0"),
                x,
                ConvShape::new(inplanes, out_channels, 1, stride, 0),
            );
            self.batch_norm(&format!("{prefix}.downsample.1"), &d, out_channels, false)
        } else {
            x.to_string()
        };
        let sum = self.add(&format!("{prefix}.add"), &branch, &identity);
        let last_relu = match kind {
            BlockKind::Basic => "relu2",
            BlockKind::Bottleneck => "relu3",
        };
        self.relu(&format!("{prefix}.{last_relu}"), &sum)
    }
}

#[derive(Debug, Clone, Copy)]
struct ConvShape {
    cin: usize,
    cout: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
}

impl ConvShape {
    fn new(cin: usize, cout: usize, kernel: usize, stride: usize, pad: usize) -> Self {
        Self {
            cin,
            cout,
            kernel,
            stride,
            pad,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct BlockShape {
    inplanes: usize,
    planes: usize,
    stride: usize,
}

/// The graph (nodes, inputs, outputs) and the initializers, unfilled.
fn build(depth: ResNetDepth) -> (GraphWriter, Vec<TensorSpec>) {
    let mut b = Builder {
        graph: GraphWriter::new(depth.name()),
        tensors: Vec::new(),
    };
    b.graph.input_f32(
        "input",
        &[
            Dim::Param("batch"),
            Dim::Value(3),
            Dim::Value(IMAGE_SIZE),
            Dim::Value(IMAGE_SIZE),
        ],
    );

    let x = b.conv("conv1", "input", ConvShape::new(3, 64, 7, 2, 3));
    let x = b.batch_norm("bn1", &x, 64, false);
    let x = b.relu("relu", &x);
    b.graph.node(
        "MaxPool",
        "maxpool",
        &[&x],
        &["maxpool"],
        vec![
            attr_int("ceil_mode", 0),
            attr_ints("dilations", &[1, 1]),
            attr_ints("kernel_shape", &[3, 3]),
            attr_ints("pads", &[1, 1, 1, 1]),
            attr_ints("strides", &[2, 2]),
        ],
    );

    let kind = depth.block();
    let mut x = "maxpool".to_string();
    let mut inplanes = 64;
    for (stage, &blocks) in depth.layers().iter().enumerate() {
        let planes = 64 << stage;
        for i in 0..blocks {
            let stride = if stage > 0 && i == 0 { 2 } else { 1 };
            let io = BlockShape {
                inplanes,
                planes,
                stride,
            };
            x = b.block(&format!("layer{}.{i}", stage + 1), &x, kind, io);
            inplanes = planes * kind.expansion();
        }
    }

    b.graph.node(
        "GlobalAveragePool",
        "avgpool",
        &[&x],
        &["avgpool"],
        Vec::new(),
    );
    b.graph.node(
        "Flatten",
        "flatten",
        &["avgpool"],
        &["flatten"],
        vec![attr_int("axis", 1)],
    );
    let weight = b.tensor(
        "fc.weight".into(),
        vec![NUM_CLASSES, inplanes],
        Role::FcWeight { fan_in: inplanes },
    );
    let bias = b.tensor(
        "fc.bias".into(),
        vec![NUM_CLASSES],
        Role::FcBias { fan_in: inplanes },
    );
    b.graph.node(
        "Gemm",
        "fc",
        &["flatten", &weight, &bias],
        &["output"],
        vec![
            attr_float("alpha", 1.0),
            attr_float("beta", 1.0),
            attr_int("transB", 1),
        ],
    );
    b.graph.output_f32(
        "output",
        &[Dim::Param("batch"), Dim::Value(NUM_CLASSES as i64)],
    );
    (b.graph, b.tensors)
}

/// The serialized ONNX model of `depth` with weights from `seed`.
/// Deterministic: the same `(depth, seed)` gives the same bytes everywhere.
pub fn resnet_onnx(depth: ResNetDepth, seed: u64) -> Vec<u8> {
    let (mut graph, tensors) = build(depth);
    for t in &tensors {
        let (center, half_width) = t.role.range();
        let values = fill(tensor_seed(&t.name, seed), center, half_width, t.numel());
        graph.initializer_f32(&t.name, &t.dims, &values);
    }
    let model = graph.finish(ModelHeader {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer_name: PRODUCER_NAME.to_string(),
        producer_version: ZOO_FORMAT_VERSION.to_string(),
        // Part of the model's bytes (ZOO_FORMAT_VERSION 1): the crate name it
        // gives is the fill rule's original home, today aotune_compiler's.
        doc_string: format!(
            "torchvision {name} (v1.5) topology with synthetic weights, BatchNormalization \
             not folded. Initializer t holds fill(fnv1a64(t.name) ^ {seed}, center, half_width) \
             (splitmix64 rule of aotune_spec::zoo::fill).",
            name = depth.name()
        ),
        metadata: vec![
            ("aotune.zoo.model".to_string(), depth.name().to_string()),
            ("aotune.zoo.seed".to_string(), seed.to_string()),
        ],
    });
    // Serializing an in-memory message only fails for messages over 2 GiB;
    // ResNet-152 is about 240 MB.
    model
        .write_to_bytes()
        .expect("a ResNet model is far below protobuf's 2 GiB limit")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zoo::fill::fnv1a64;
    use onnx_ir::{ModelProto, NodeType, OnnxGraphBuilder};

    fn expected_convs(depth: ResNetDepth) -> usize {
        let blocks: usize = depth.layers().iter().sum();
        let per_block = match depth.block() {
            BlockKind::Basic => 2,
            BlockKind::Bottleneck => 3,
        };
        let downsamples = match depth.block() {
            BlockKind::Basic => 3,
            BlockKind::Bottleneck => 4,
        };
        1 + blocks * per_block + downsamples
    }

    #[test]
    fn parameter_counts_match_torchvision() {
        assert_eq!(ResNetDepth::R18.parameter_count(), 11_689_512);
        assert_eq!(ResNetDepth::R34.parameter_count(), 21_797_672);
        assert_eq!(ResNetDepth::R50.parameter_count(), 25_557_032);
        assert_eq!(ResNetDepth::R101.parameter_count(), 44_549_160);
        assert_eq!(ResNetDepth::R152.parameter_count(), 60_192_808);
    }

    #[test]
    fn conv_counts() {
        assert_eq!(expected_convs(ResNetDepth::R18), 20);
        assert_eq!(expected_convs(ResNetDepth::R50), 53);
        assert_eq!(expected_convs(ResNetDepth::R152), 155);
    }

    #[test]
    fn names_parse_and_display() {
        for depth in ResNetDepth::ALL {
            assert_eq!(depth.name().parse::<ResNetDepth>().ok(), Some(depth));
            assert_eq!(depth.to_string(), depth.name());
        }
        assert_eq!(
            "ResNet-50".parse::<ResNetDepth>().ok(),
            Some(ResNetDepth::R50)
        );
        let err = "resnet51".parse::<ResNetDepth>().unwrap_err().to_string();
        assert!(
            err.contains("resnet51") && err.contains("resnet152"),
            "{err}"
        );
    }

    /// Header, initializer names and the stored bytes of one tensor, read back
    /// with protobuf.
    #[test]
    fn resnet18_header_and_initializers() {
        let bytes = resnet_onnx(ResNetDepth::R18, DEFAULT_SEED);
        let model = ModelProto::parse_from_bytes(&bytes).expect("parse");
        assert_eq!(model.ir_version, 8);
        assert_eq!(model.producer_name, "aotune-zoo");
        assert_eq!(model.opset_import.len(), 1);
        assert_eq!(
            (
                model.opset_import[0].domain.as_str(),
                model.opset_import[0].version
            ),
            ("", 17)
        );
        let graph = model.graph.as_ref().expect("graph");
        assert_eq!(graph.input.len(), 1);
        assert_eq!(graph.input[0].name, "input");
        let dims = &graph.input[0].type_.tensor_type().shape.dim;
        assert_eq!(dims[0].dim_param(), "batch");
        assert_eq!(
            dims[1..].iter().map(|d| d.dim_value()).collect::<Vec<_>>(),
            [3, 224, 224]
        );
        assert_eq!(graph.output[0].name, "output");

        let names: Vec<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
        for expected in [
            "conv1.weight",
            "bn1.running_mean",
            "layer1.0.conv1.weight",
            "layer2.0.downsample.0.weight",
            "layer2.0.downsample.1.running_var",
            "fc.weight",
            "fc.bias",
        ] {
            assert!(names.contains(&expected), "{expected} missing");
        }
        assert!(!names.iter().any(|n| n.starts_with("layer1.0.downsample")));

        let fc = graph
            .initializer
            .iter()
            .find(|t| t.name == "fc.weight")
            .expect("fc.weight");
        assert_eq!(fc.dims, [1000, 512]);
        let first: Vec<f32> = fc.raw_data[..12]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let half = (1.0f64 / 512.0).sqrt() as f32;
        assert_eq!(first, fill(fnv1a64(b"fc.weight"), 0.0, half, 3));

        for t in &graph.initializer {
            if t.name.ends_with("running_var") {
                let min = t
                    .raw_data
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .fold(f32::INFINITY, f32::min);
                assert!(min > 0.5, "{}: {min}", t.name);
            }
        }
    }

    /// Every depth parses with onnx-ir, with torchvision's op counts and
    /// parameter count.
    #[test]
    fn every_depth_parses_with_onnx_ir() {
        for depth in ResNetDepth::ALL {
            let bytes = resnet_onnx(depth, DEFAULT_SEED);
            let model = ModelProto::parse_from_bytes(&bytes).expect("protobuf");
            let graph = model.graph.as_ref().expect("graph");
            let trainable: u64 = graph
                .initializer
                .iter()
                .filter(|t| !t.name.contains(".running_"))
                .map(|t| t.dims.iter().product::<i64>() as u64)
                .sum();
            assert_eq!(trainable, depth.parameter_count(), "{depth}");
            drop(model);

            let parsed = OnnxGraphBuilder::new()
                .parse_bytes(&bytes)
                .unwrap_or_else(|e| panic!("{depth}: {e}"));
            let count = |ty: NodeType| parsed.nodes.iter().filter(|n| n.node_type() == ty).count();
            let convs = expected_convs(depth);
            assert_eq!(count(NodeType::Conv2d), convs, "{depth}");
            assert_eq!(count(NodeType::BatchNormalization), convs, "{depth}");
            assert_eq!(
                count(NodeType::Linear) + count(NodeType::Gemm),
                1,
                "{depth}"
            );
            assert_eq!(count(NodeType::MaxPool2d), 1, "{depth}");
            assert_eq!(count(NodeType::GlobalAveragePool), 1, "{depth}");
            let blocks: usize = depth.layers().iter().sum();
            assert_eq!(count(NodeType::Add), blocks, "{depth}");
        }
    }

    /// A change to the writer, the topology or the fill ranges changes these
    /// hashes; update them (and `ZOO_FORMAT_VERSION`) deliberately.
    #[test]
    fn bytes_are_deterministic() {
        let r18 = resnet_onnx(ResNetDepth::R18, DEFAULT_SEED);
        assert_eq!(r18, resnet_onnx(ResNetDepth::R18, DEFAULT_SEED));
        assert_eq!(fnv1a64(&r18), 17_468_743_817_539_323_641);
        let r50 = resnet_onnx(ResNetDepth::R50, DEFAULT_SEED);
        assert_eq!(fnv1a64(&r50), 13_705_534_472_787_024_960);
        assert_ne!(r18, resnet_onnx(ResNetDepth::R18, 1));
    }
}

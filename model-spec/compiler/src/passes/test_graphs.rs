//! Small graphs built by hand for the pass tests: a builder that infers
//! shapes, deterministic pseudo-random constants, and a ResNet-like network
//! (stem, a bottleneck with downsample, an identity bottleneck, the head).

use crate::ir::{
    infer_shape, verify, BinaryOp, Conv2d, Graph, Node, Op, Pool2d, Precision, UnaryOp, Value,
    ValueId, ValueKind,
};

/// The passes `optimize` runs before the input conversions are rewritten
/// (`space_to_depth_input`, `pad_input_channels`), on `graph`, at
/// `precision`.
pub fn prepared(graph: &Graph, precision: Precision) -> Graph {
    let mut g = graph.clone();
    super::fold_batch_norm(&mut g).unwrap();
    super::fuse_epilogue(&mut g).unwrap();
    super::lower_dense(&mut g).unwrap();
    super::to_channels_last(&mut g).unwrap();
    super::apply_precision(&mut g, precision).unwrap();
    g
}

/// Builds a [`Graph`] node by node, inferring each output's shape.
pub struct Builder {
    pub graph: Graph,
    state: u64,
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            graph: Graph {
                values: Vec::new(),
                nodes: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                precision: Precision::Fp32,
            },
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }

    pub fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let id = self.graph.add_value(Value {
            kind: ValueKind::Input,
            ..Value::activation(name, shape.to_vec())
        });
        self.graph.inputs.push(id);
        id
    }

    pub fn constant(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> ValueId {
        self.graph
            .add_value(Value::constant(name, shape.to_vec(), data))
    }

    /// Uniform in `[lo, hi)`, from a splitmix64 stream.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let unit = (z >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * unit
    }

    pub fn random(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> ValueId {
        let data = (0..shape.iter().product::<usize>())
            .map(|_| self.uniform(lo, hi))
            .collect();
        self.constant(name, shape, data)
    }

    /// Input data for `value`, in `[-1, 1)`.
    pub fn data_for(&mut self, value: ValueId) -> Vec<f32> {
        (0..self.graph.value(value).numel())
            .map(|_| self.uniform(-1.0, 1.0))
            .collect()
    }

    pub fn node(&mut self, name: &str, op: Op, inputs: &[ValueId]) -> ValueId {
        let shapes: Vec<&[usize]> = inputs
            .iter()
            .map(|&v| self.graph.value(v).shape.as_slice())
            .collect();
        let shape = infer_shape(&op, &shapes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let output = self
            .graph
            .add_value(Value::activation(format!("{name}_out"), shape));
        self.graph.nodes.push(Node {
            name: name.to_string(),
            op,
            inputs: inputs.to_vec(),
            output,
        });
        output
    }

    pub fn output(&mut self, value: ValueId) {
        self.graph.outputs.push(value);
    }

    pub fn finish(self) -> Graph {
        if let Err(e) = verify(&self.graph) {
            panic!("test graph is invalid: {e}");
        }
        self.graph
    }

    /// Square conv with random weights (and a random bias when `bias`),
    /// stride `stride` and padding `kernel / 2` on every side.
    pub fn conv(
        &mut self,
        name: &str,
        x: ValueId,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        bias: bool,
    ) -> ValueId {
        let pad = kernel / 2;
        let in_channels = self.graph.value(x).shape[1];
        let fan_in = (in_channels * kernel * kernel) as f32;
        let bound = (3.0 / fan_in).sqrt();
        let w = self.random(
            &format!("{name}.weight"),
            &[out_channels, in_channels, kernel, kernel],
            -bound,
            bound,
        );
        let mut inputs = vec![x, w];
        if bias {
            inputs.push(self.random(&format!("{name}.bias"), &[out_channels], -0.1, 0.1));
        }
        let conv = Conv2d {
            kernel: [kernel, kernel],
            strides: [stride, stride],
            pads: [pad; 4],
            dilations: [1, 1],
            groups: 1,
        };
        self.node(name, Op::Conv(conv), &inputs)
    }

    /// BatchNormalization with random statistics (var in [0.5, 1.5)).
    pub fn batch_norm(&mut self, name: &str, x: ValueId) -> ValueId {
        let c = self.graph.value(x).shape[1];
        let scale = self.random(&format!("{name}.weight"), &[c], 0.5, 1.5);
        let bias = self.random(&format!("{name}.bias"), &[c], -0.2, 0.2);
        let mean = self.random(&format!("{name}.running_mean"), &[c], -0.2, 0.2);
        let var = self.random(&format!("{name}.running_var"), &[c], 0.5, 1.5);
        self.node(
            name,
            Op::BatchNorm { epsilon: 1e-5 },
            &[x, scale, bias, mean, var],
        )
    }

    pub fn relu(&mut self, name: &str, x: ValueId) -> ValueId {
        self.node(name, Op::Unary(UnaryOp::Relu), &[x])
    }

    fn conv_bn(&mut self, name: &str, x: ValueId, k: usize, size: usize, stride: usize) -> ValueId {
        let c = self.conv(&format!("{name}.conv"), x, k, size, stride, false);
        self.batch_norm(&format!("{name}.bn"), c)
    }

    /// torchvision's Bottleneck: 1x1 → 3x3 (stride) → 1x1 (×4 channels), each
    /// followed by BatchNorm, ReLU after the first two and after the residual Add.
    pub fn bottleneck(&mut self, name: &str, x: ValueId, width: usize, stride: usize) -> ValueId {
        let in_channels = self.graph.value(x).shape[1];
        let out_channels = width * 4;
        let a = self.conv_bn(&format!("{name}.1"), x, width, 1, 1);
        let a = self.relu(&format!("{name}.relu1"), a);
        let b = self.conv_bn(&format!("{name}.2"), a, width, 3, stride);
        let b = self.relu(&format!("{name}.relu2"), b);
        let c = self.conv_bn(&format!("{name}.3"), b, out_channels, 1, 1);
        let skip = if stride != 1 || in_channels != out_channels {
            self.conv_bn(&format!("{name}.downsample"), x, out_channels, 1, stride)
        } else {
            x
        };
        let sum = self.node(
            &format!("{name}.add"),
            Op::Binary(BinaryOp::Add),
            &[c, skip],
        );
        self.relu(&format!("{name}.relu3"), sum)
    }

    /// torchvision's stem: 7x7/2 conv, BN, ReLU, 3x3/2 max pool.
    fn stem(&mut self, x: ValueId, channels: usize) -> ValueId {
        let stem = self.conv_bn("stem", x, channels, 7, 2);
        let stem = self.relu("stem.relu", stem);
        let pool = Pool2d {
            kernel: [3, 3],
            strides: [2, 2],
            pads: [1; 4],
            dilations: [1, 1],
            ceil_mode: false,
        };
        self.node("maxpool", Op::MaxPool(pool), &[stem])
    }

    /// The classifier: GlobalAveragePool → Flatten(1) → Gemm(transB=1, bias)
    /// as the classic exporter writes it, or ReduceMean(axes [2,3],
    /// keepdims) → Reshape([N, C]) → Gemm as the dynamo exporter does.
    pub fn head(&mut self, x: ValueId, classes: usize, dynamo: bool) -> ValueId {
        let [n, c] = [self.graph.value(x).shape[0], self.graph.value(x).shape[1]];
        let flat = if dynamo {
            let mean = Op::ReduceMean {
                axes: vec![2, 3],
                keepdims: true,
            };
            let pooled = self.node("mean", mean, &[x]);
            let shape = vec![n as i64, c as i64];
            let reshape = Op::Reshape {
                shape,
                allowzero: false,
            };
            self.node("view", reshape, &[pooled])
        } else {
            let pooled = self.node("avgpool", Op::GlobalAveragePool, &[x]);
            self.node("flatten", Op::Flatten { axis: 1 }, &[pooled])
        };
        let bound = 1.0 / (c as f32).sqrt();
        let fc_w = self.random("fc.weight", &[classes, c], -bound, bound);
        let fc_b = self.random("fc.bias", &[classes], -bound, bound);
        let gemm = Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        };
        self.node("fc", gemm, &[flat, fc_w, fc_b])
    }

    /// Stem, a bottleneck with downsample, an identity bottleneck, the head;
    /// returns the graph and an input for it.
    pub fn resnet_like(
        batch: usize,
        size: usize,
        classes: usize,
        dynamo: bool,
    ) -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let x = b.input("input", &[batch, 3, size, size]);
        let pooled = b.stem(x, 8);
        let block1 = b.bottleneck("layer1.0", pooled, 4, 2);
        let block2 = b.bottleneck("layer1.1", block1, 4, 1);
        let logits = b.head(block2, classes, dynamo);
        b.output(logits);
        let data = b.data_for(x);
        (b.finish(), data)
    }

    /// ResNet-50's topology (torchvision v1.5: stride on the 3x3 conv) with
    /// its real widths, on a `size`×`size` image, unfolded BatchNorm.
    pub fn resnet50(size: usize) -> (Graph, Vec<f32>) {
        let mut b = Builder::new();
        let x = b.input("input", &[1, 3, size, size]);
        let mut y = b.stem(x, 64);
        for (layer, (blocks, width)) in [(3, 64), (4, 128), (6, 256), (3, 512)]
            .into_iter()
            .enumerate()
        {
            for block in 0..blocks {
                let stride = if layer > 0 && block == 0 { 2 } else { 1 };
                y = b.bottleneck(&format!("layer{}.{block}", layer + 1), y, width, stride);
            }
        }
        let logits = b.head(y, 1000, false);
        b.output(logits);
        let data = b.data_for(x);
        (b.finish(), data)
    }
}

pub use crate::reference::rel_l2;

/// Occurrences of each op kind, sorted by kind.
pub fn op_counts(graph: &Graph) -> Vec<(&'static str, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for node in &graph.nodes {
        *counts.entry(node.op.kind()).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

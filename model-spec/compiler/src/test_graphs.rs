//! Graphs for tests, built by hand: one [`Builder`] that adds inputs,
//! constants and nodes (inferring each output's shape with [`infer_shape`])
//! and runs the IR verifier on the result, so tests only see graphs the rest
//! of the compiler would accept. The reference executor's, the passes', the
//! planner's and the code generator's tests all build with it. On top of it:
//!
//! - one-op graphs over inputs of any storage type and layout ([`one_op`],
//!   [`In`]), planned, for the code generator's tests and the template
//!   sweeps, with deterministic [`values`];
//! - the networks the pass tests run on ([`Builder::resnet_like`],
//!   [`Builder::resnet50`]: random weights, BatchNorm unfolded) and the
//!   passes `optimize` runs before the input rewrites ([`prepared`]);
//! - the graphs the planner's tests run on: a chain, a diamond, random DAGs,
//!   and a ResNet-50 and ConvNeXt-T first stage with the real activation
//!   sizes and tiny grouped weights ([`resnet50_grouped`],
//!   [`convnext_stage`]).
//!
//! Compiled for the crate's tests and, with the `test-support` feature, for
//! the workspace's integration tests (`tests/common/template_cases.rs`).

use crate::ir::{
    infer_shape, verify, Activation, BinaryOp, Conv2d, DType, Epilogue, Graph, Layout, Node, Op,
    Pool2d, Precision, UnaryOp, Value, ValueId, ValueKind,
};
use crate::plan::{plan_memory, MemoryPlan};

pub use crate::reference::rel_l2;

/// Builds a [`Graph`] value by value and node by node.
///
/// Inputs, constants and node outputs get the builder's storage type (the
/// precision's, f32 for [`Builder::new`]) and row-major layout unless a
/// method says otherwise. A node's output value is named `<node>_out`, or
/// after the node itself with [`Builder::outputs_named_as_nodes`].
pub struct Builder {
    pub graph: Graph,
    dtype: DType,
    output_suffix: &'static str,
    /// splitmix64 state of [`Builder::uniform`].
    state: u64,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// An fp32 graph.
    pub fn new() -> Self {
        Self::with_precision(Precision::Fp32)
    }

    /// A graph at `precision`, its values in the precision's storage type.
    pub fn with_precision(precision: Precision) -> Self {
        Builder {
            graph: Graph {
                values: Vec::new(),
                nodes: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                precision,
            },
            dtype: precision.storage(),
            output_suffix: "_out",
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Names each node's output after the node (`relu`, not `relu_out`).
    pub fn outputs_named_as_nodes(mut self) -> Self {
        self.output_suffix = "";
        self
    }

    pub fn shape(&self, id: ValueId) -> &[usize] {
        &self.graph.value(id).shape
    }

    /// A graph input.
    pub fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        self.input_as(name, shape, self.dtype, Layout::RowMajor)
    }

    /// A graph input of `dtype` stored in `layout`.
    pub fn input_as(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        layout: Layout,
    ) -> ValueId {
        let id = self.graph.add_value(Value {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
            layout,
            kind: ValueKind::Input,
        });
        self.graph.inputs.push(id);
        id
    }

    /// A constant holding `data` (row-major).
    pub fn constant(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> ValueId {
        self.constant_as(name, shape, data, self.dtype, Layout::RowMajor)
    }

    /// A constant of `dtype` stored in `layout`; `data` is in that physical
    /// order.
    pub fn constant_as(
        &mut self,
        name: &str,
        shape: &[usize],
        data: Vec<f32>,
        dtype: DType,
        layout: Layout,
    ) -> ValueId {
        self.graph.add_value(Value {
            dtype,
            layout,
            ..Value::constant(name, shape.to_vec(), data)
        })
    }

    /// A constant of zeros.
    pub fn zeros(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let n = shape.iter().product();
        self.constant(name, shape, vec![0.0; n])
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

    /// A constant uniform in `[lo, hi)` ([`Builder::uniform`]).
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

    /// Node `name` computing `op` over `inputs`; returns its output.
    pub fn node(&mut self, name: &str, op: Op, inputs: &[ValueId]) -> ValueId {
        self.node_as(name, op, inputs, self.dtype, Layout::RowMajor)
    }

    /// [`Builder::node`] named after its op kind and position (`relu3`).
    pub fn op(&mut self, op: Op, inputs: &[ValueId]) -> ValueId {
        let name = format!("{}{}", op.kind().to_lowercase(), self.graph.nodes.len());
        self.node(&name, op, inputs)
    }

    /// [`Builder::node`] with an output of `dtype` stored in `layout`.
    pub fn node_as(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[ValueId],
        dtype: DType,
        layout: Layout,
    ) -> ValueId {
        let shapes: Vec<&[usize]> = inputs.iter().map(|&v| self.shape(v)).collect();
        let shape = infer_shape(&op, &shapes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let output = self.graph.add_value(Value {
            dtype,
            layout,
            ..Value::activation(format!("{name}{}", self.output_suffix), shape)
        });
        self.graph.nodes.push(Node {
            name: name.to_string(),
            op,
            inputs: inputs.to_vec(),
            output,
        });
        output
    }

    /// Sets a value's layout and dtype.
    pub fn set(&mut self, id: ValueId, layout: Layout, dtype: DType) {
        let value = self.graph.value_mut(id);
        value.layout = layout;
        value.dtype = dtype;
    }

    /// Marks `value` as the next graph output.
    pub fn output(&mut self, value: ValueId) {
        self.graph.outputs.push(value);
    }

    /// The graph, which must verify.
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

    /// A `kernel`×`kernel` convolution to `k` channels with the largest group
    /// count that divides both channel counts (tiny weights of zeros, real
    /// activation sizes). Fused: one `FusedConv` with the residual and ReLU
    /// in its epilogue. Unfused: `Conv`, then `Relu` when asked (no
    /// residual).
    #[allow(clippy::too_many_arguments)]
    pub fn grouped_conv(
        &mut self,
        name: &str,
        x: ValueId,
        k: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        residual: Option<ValueId>,
        relu: bool,
        fused: bool,
    ) -> ValueId {
        let c = self.shape(x)[1];
        let groups = gcd(c, k);
        let w = self.zeros(&format!("{name}.weight"), &[k, c / groups, kernel, kernel]);
        let conv = Conv2d {
            kernel: [kernel, kernel],
            strides: [stride, stride],
            pads: [pad; 4],
            dilations: [1, 1],
            groups,
        };
        if fused {
            let epilogue = Epilogue {
                bias: false,
                residual: residual.is_some(),
                activation: if relu {
                    Activation::Relu
                } else {
                    Activation::None
                },
            };
            let mut inputs = vec![x, w];
            inputs.extend(residual);
            let op = Op::FusedConv {
                conv,
                epilogue,
                shortcut: None,
                pool: None,
                norm: None,
            };
            self.node(name, op, &inputs)
        } else {
            assert!(residual.is_none(), "unfused convs take no residual");
            let y = self.node(name, Op::Conv(conv), &[x, w]);
            if relu {
                self.node(&format!("{name}.relu"), Op::Unary(UnaryOp::Relu), &[y])
            } else {
                y
            }
        }
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
        self.node("maxpool", Op::MaxPool(max_pool_3x3_s2()), &[stem])
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
        self.node("fc", fc_gemm(), &[flat, fc_w, fc_b])
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

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// ResNet's max pool: 3×3, stride 2, padding 1.
fn max_pool_3x3_s2() -> Pool2d {
    Pool2d {
        kernel: [3, 3],
        strides: [2, 2],
        pads: [1; 4],
        dilations: [1, 1],
        ceil_mode: false,
    }
}

/// The classifier's `Gemm(transB = 1)`.
fn fc_gemm() -> Op {
    Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
    }
}

// ---- one-op graphs -------------------------------------------------------------

/// An input of a one-op test graph.
#[derive(Debug, Clone)]
pub struct In {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub layout: Layout,
    /// `Some(data)` (physical order) for a constant.
    pub constant: Option<Vec<f32>>,
}

impl In {
    pub fn act(shape: &[usize], dtype: DType, layout: Layout) -> Self {
        In {
            shape: shape.to_vec(),
            dtype,
            layout,
            constant: None,
        }
    }

    /// A constant with deterministic values in [-1, 1), rounded to `dtype`.
    pub fn constant(shape: &[usize], dtype: DType, layout: Layout, seed: u64) -> Self {
        let n: usize = shape.iter().product();
        let data = values(n, seed)
            .into_iter()
            .map(|v| dtype.round(v))
            .collect();
        In {
            shape: shape.to_vec(),
            dtype,
            layout,
            constant: Some(data),
        }
    }
}

/// Deterministic values in [-1, 1) (splitmix64).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let base = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..n as u64)
        .map(|i| {
            let z = crate::zoo::splitmix64(base.wrapping_add(i));
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A graph at `precision` computing `op` over `inputs` (values `in<i>`;
/// the non-constant ones are graph inputs) into one output (node `node0`)
/// of `out_dtype` and `out_layout`, and its memory plan.
pub fn one_op(
    op: Op,
    inputs: &[In],
    out_dtype: DType,
    out_layout: Layout,
    precision: Precision,
) -> (Graph, MemoryPlan) {
    let mut b = Builder::with_precision(precision);
    let ids: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let name = format!("in{i}");
            match &x.constant {
                Some(data) => b.constant_as(&name, &x.shape, data.clone(), x.dtype, x.layout),
                None => b.input_as(&name, &x.shape, x.dtype, x.layout),
            }
        })
        .collect();
    let out = b.node_as("node0", op, &ids, out_dtype, out_layout);
    b.output(out);
    let g = b.finish();
    let plan = plan_memory(&g).expect("test graph plans");
    (g, plan)
}

// ---- for the pass tests ----------------------------------------------------------

/// The passes `optimize` runs before the input conversions are rewritten
/// (`space_to_depth_input`, `pad_input_channels`), on `graph`, at
/// `precision`.
pub fn prepared(graph: &Graph, precision: Precision) -> Graph {
    use crate::passes::{apply_precision, fold_batch_norm, fuse_epilogue, lower_dense};
    let mut g = graph.clone();
    fold_batch_norm(&mut g).unwrap();
    fuse_epilogue(&mut g).unwrap();
    lower_dense(&mut g).unwrap();
    crate::passes::to_channels_last(&mut g).unwrap();
    apply_precision(&mut g, precision).unwrap();
    g
}

/// Occurrences of each op kind, sorted by kind.
pub fn op_counts(graph: &Graph) -> Vec<(&'static str, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for node in &graph.nodes {
        *counts.entry(node.op.kind()).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

// ---- for the planner's tests -----------------------------------------------------

/// `input → relu → … → relu` (`n` relus), each value of `shape`.
pub fn chain(n: usize, shape: &[usize]) -> Graph {
    let mut b = Builder::new().outputs_named_as_nodes();
    let mut x = b.input("x", shape);
    for i in 0..n {
        x = b.relu(&format!("relu{i}"), x);
    }
    b.output(x);
    b.finish()
}

/// `a = relu(x); b = relu(a); c = relu(b); y = a + c`: `a` lives across the
/// branch until the Add.
pub fn diamond(shape: &[usize]) -> Graph {
    let mut g = Builder::new().outputs_named_as_nodes();
    let x = g.input("x", shape);
    let a = g.relu("a", x);
    let b = g.relu("b", a);
    let c = g.relu("c", b);
    let y = g.node("y", Op::Binary(BinaryOp::Add), &[a, c]);
    g.output(y);
    g.finish()
}

/// A ResNet-50 v1.5 at batch 1, 224×224 (values named after their nodes):
/// the stem (64×112×112), max pool, 3/4/6/3 bottleneck blocks of widths
/// 64/128/256/512 (outputs ×4) with the stride on the 3×3 conv and a 1×1
/// downsample conv on each stage's first block, global average pool,
/// Flatten (a view) and the 1000-way Gemm. Convolutions are
/// [`Builder::grouped_conv`]s: tiny weights, real activation sizes.
///
/// `fused = false` is the shape of an export with BatchNorm already folded:
/// `Conv, Relu, Conv, Relu, Conv, [downsample Conv], Add, Relu`, so the block
/// input stays alive until the Add. `fused = true` is the graph after the
/// epilogue pass: `FusedConv` ×3 with the residual and ReLU in the last one,
/// and the downsample just before it.
pub fn resnet50_grouped(precision: Precision, fused: bool) -> Graph {
    let mut b = Builder::with_precision(precision).outputs_named_as_nodes();
    let input = b.input("input", &[1, 3, 224, 224]);
    let mut h = b.grouped_conv("conv1", input, 64, 7, 2, 3, None, true, fused);
    h = b.node("maxpool", Op::MaxPool(max_pool_3x3_s2()), &[h]);
    for (stage, (blocks, width, stride)) in [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..blocks {
            let name = format!("layer{}.{block}", stage + 1);
            let s = if block == 0 { stride } else { 1 };
            let c1 = b.grouped_conv(
                &format!("{name}.conv1"),
                h,
                width,
                1,
                1,
                0,
                None,
                true,
                fused,
            );
            let c2 = b.grouped_conv(
                &format!("{name}.conv2"),
                c1,
                width,
                3,
                s,
                1,
                None,
                true,
                fused,
            );
            let block_input = h;
            let downsample = |b: &mut Builder| {
                let n = format!("{name}.downsample");
                b.grouped_conv(&n, block_input, width * 4, 1, s, 0, None, false, fused)
            };
            let n = format!("{name}.conv3");
            h = if fused {
                let identity = if block == 0 { downsample(&mut b) } else { h };
                b.grouped_conv(&n, c2, width * 4, 1, 1, 0, Some(identity), true, true)
            } else {
                let c3 = b.grouped_conv(&n, c2, width * 4, 1, 1, 0, None, false, false);
                let identity = if block == 0 { downsample(&mut b) } else { h };
                let sum = b.node(
                    &format!("{name}.add"),
                    Op::Binary(BinaryOp::Add),
                    &[c3, identity],
                );
                b.relu(&format!("{name}.relu"), sum)
            };
        }
    }
    let pooled = b.node("avgpool", Op::GlobalAveragePool, &[h]);
    let flat = b.node("flatten", Op::Flatten { axis: 1 }, &[pooled]);
    let w = b.zeros("fc.weight", &[1000, 2048]);
    let bias = b.zeros("fc.bias", &[1000]);
    let logits = b.node("fc", fc_gemm(), &[flat, w, bias]);
    b.output(logits);
    b.finish()
}

/// ConvNeXt-T's first stage at batch 1, 224×224: the 4×4 stride-4 stem to
/// 96×56×56, then `blocks` blocks of a 7×7 depthwise conv, a norm (a unary
/// op here), the 1×1 conv to 384 channels, GELU, the 1×1 conv back to 96 and
/// the residual Add. The block input lives until that Add, across the two
/// 384-channel values: the lower bound is 9 × 96×56×56 elements (two MLP
/// values of four units and the residual), reached only when consecutive
/// residuals alternate between the bottom and the top of the arena.
pub fn convnext_stage(precision: Precision, blocks: usize) -> Graph {
    let mut b = Builder::with_precision(precision).outputs_named_as_nodes();
    // A stride-1 unfused conv to `k` channels, `kernel`×`kernel`, same padding.
    let conv = |b: &mut Builder, name: String, x, k, kernel: usize| {
        b.grouped_conv(&name, x, k, kernel, 1, kernel / 2, None, false, false)
    };
    let input = b.input("input", &[1, 3, 224, 224]);
    let mut h = b.grouped_conv("stem", input, 96, 4, 4, 0, None, false, false);
    for block in 0..blocks {
        let name = format!("stage1.{block}");
        let dw = conv(&mut b, format!("{name}.dwconv"), h, 96, 7);
        let norm = b.relu(&format!("{name}.norm"), dw);
        let pw1 = conv(&mut b, format!("{name}.pwconv1"), norm, 384, 1);
        let gelu = UnaryOp::Gelu { tanh: false };
        let act = b.node(&format!("{name}.gelu"), Op::Unary(gelu), &[pw1]);
        let pw2 = conv(&mut b, format!("{name}.pwconv2"), act, 96, 1);
        h = b.node(&format!("{name}.add"), Op::Binary(BinaryOp::Add), &[h, pw2]);
    }
    b.output(h);
    b.finish()
}

/// One step of a random DAG: an op kind, two picks among earlier values and
/// a parameter (all reduced modulo what is available).
pub type RandomStep = (u8, usize, usize, usize);

/// Largest activation of a random DAG, in elements.
const RANDOM_MAX_ELEMENTS: usize = 1 << 16;

/// A random DAG over `[1, C, H, W]` inputs of elementwise ops (Relu, Add of
/// equal shapes), channel-changing 1×1 convs (sometimes strided) and views
/// (Flatten, Reshape back to 4-D, Identity), with the last value and the
/// picked ones as outputs. Always verifies.
pub fn random_dag(inputs: &[(usize, usize)], steps: &[RandomStep], outputs: &[usize]) -> Graph {
    let mut b = Builder::new().outputs_named_as_nodes();
    let mut pool: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, &(c, hw))| b.input(&format!("in{i}"), &[1, c, hw, hw]))
        .collect();
    for (i, &(kind, pick_a, pick_b, param)) in steps.iter().enumerate() {
        let x = pool[pick_a % pool.len()];
        let shape = b.shape(x).to_vec();
        let name = format!("v{i}");
        let y = match (kind % 5, shape.len()) {
            (1, _) => {
                let same: Vec<ValueId> = pool
                    .iter()
                    .copied()
                    .filter(|&v| b.shape(v) == shape.as_slice())
                    .collect();
                let other = same[pick_b % same.len()];
                b.node(&name, Op::Binary(BinaryOp::Add), &[x, other])
            }
            (2, 4) => {
                let c = shape[1];
                let divisors: Vec<usize> = (1..=c).filter(|&d| (c / d) * d == c).collect();
                let g = divisors[pick_b % divisors.len()];
                let stride = if param % 8 == 7 && shape[2] > 1 { 2 } else { 1 };
                let out_hw = shape[2].div_ceil(stride);
                let per_channel = out_hw * out_hw;
                let q = (1 + param % 4).min((RANDOM_MAX_ELEMENTS / per_channel / g).max(1));
                let k = g * q;
                let w = b.zeros(&format!("{name}.w"), &[k, c / g, 1, 1]);
                let conv = Conv2d {
                    kernel: [1, 1],
                    strides: [stride, stride],
                    pads: [0; 4],
                    dilations: [1, 1],
                    groups: g,
                };
                b.node(&name, Op::Conv(conv), &[x, w])
            }
            (3, 4) => b.node(&name, Op::Flatten { axis: 1 }, &[x]),
            (3, _) => {
                let n: usize = shape.iter().product();
                let reshape = Op::Reshape {
                    shape: vec![1, n as i64, 1, 1],
                    allowzero: false,
                };
                b.node(&name, reshape, &[x])
            }
            (4, _) => b.node(&name, Op::Identity, &[x]),
            _ => b.relu(&name, x),
        };
        pool.push(y);
    }
    for &p in outputs {
        b.output(pool[p % pool.len()]);
    }
    if let Some(&last) = pool.last() {
        b.output(last);
    }
    b.finish()
}

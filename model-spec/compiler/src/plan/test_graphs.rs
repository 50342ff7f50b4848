//! Graphs the planner's tests run on: a chain, a diamond, random DAGs, and a
//! synthetic ResNet-50 and ConvNeXt-T first stage with the real activation
//! sizes.
//!
//! Every graph is built through [`Builder`], which infers each output shape
//! with [`infer_shape`] and runs the IR verifier on the result, so the tests
//! plan only graphs the rest of the compiler would accept. Convolutions use
//! the largest group count that divides both channel counts, which keeps
//! weights tiny (a few thousand elements) while activations keep the sizes
//! of the real network; the planner only sees activations.

use crate::ir::{
    infer_shape, verify, Activation, BinaryOp, Conv2d, DType, Epilogue, Graph, Node, Op, Pool2d,
    Precision, UnaryOp, Value, ValueId, ValueKind,
};

pub(super) struct Builder {
    pub graph: Graph,
    dtype: DType,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Builder {
    pub fn new(precision: Precision) -> Self {
        Builder {
            graph: Graph {
                values: vec![],
                nodes: vec![],
                inputs: vec![],
                outputs: vec![],
                precision,
            },
            dtype: precision.storage(),
        }
    }

    pub fn shape(&self, id: ValueId) -> &[usize] {
        &self.graph.value(id).shape
    }

    pub fn input(&mut self, name: &str, shape: Vec<usize>) -> ValueId {
        let id = self.graph.add_value(Value {
            kind: ValueKind::Input,
            dtype: self.dtype,
            ..Value::activation(name, shape)
        });
        self.graph.inputs.push(id);
        id
    }

    pub fn constant(&mut self, name: &str, shape: Vec<usize>) -> ValueId {
        let n = shape.iter().product();
        self.graph.add_value(Value {
            dtype: self.dtype,
            ..Value::constant(name, shape, vec![0.0; n])
        })
    }

    pub fn op(&mut self, name: &str, op: Op, inputs: &[ValueId]) -> ValueId {
        let shapes: Vec<&[usize]> = inputs.iter().map(|&v| self.shape(v)).collect();
        let shape = infer_shape(&op, &shapes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let output = self.graph.add_value(Value {
            dtype: self.dtype,
            ..Value::activation(name, shape)
        });
        self.graph.nodes.push(Node {
            name: name.into(),
            op,
            inputs: inputs.to_vec(),
            output,
        });
        output
    }

    /// A `kernel`×`kernel` convolution to `k` channels with the largest group
    /// count that divides both channel counts (tiny weights, real activation
    /// sizes). Fused: one `FusedConv` with the residual and ReLU in its
    /// epilogue. Unfused: `Conv`, then `Relu` when asked (no residual).
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
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
        let w = self.constant(
            &format!("{name}.weight"),
            vec![k, c / groups, kernel, kernel],
        );
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
            };
            self.op(name, op, &inputs)
        } else {
            assert!(residual.is_none(), "unfused convs take no residual");
            let y = self.op(name, Op::Conv(conv), &[x, w]);
            if relu {
                self.op(&format!("{name}.relu"), Op::Unary(UnaryOp::Relu), &[y])
            } else {
                y
            }
        }
    }

    /// Marks the outputs and returns the graph, which must verify.
    pub fn finish(mut self, outputs: &[ValueId]) -> Graph {
        self.graph.outputs = outputs.to_vec();
        if let Err(e) = verify(&self.graph) {
            panic!("test graph does not verify: {e}");
        }
        self.graph
    }
}

/// `input → relu → … → relu` (`n` relus), each value of `shape`.
pub(super) fn chain(n: usize, shape: Vec<usize>) -> Graph {
    let mut b = Builder::new(Precision::Fp32);
    let mut x = b.input("x", shape);
    for i in 0..n {
        x = b.op(&format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[x]);
    }
    b.finish(&[x])
}

/// `a = relu(x); b = relu(a); c = relu(b); y = a + c`: `a` lives across the
/// branch until the Add (step 4).
pub(super) fn diamond(shape: Vec<usize>) -> Graph {
    let mut g = Builder::new(Precision::Fp32);
    let x = g.input("x", shape);
    let a = g.op("a", Op::Unary(UnaryOp::Relu), &[x]);
    let b = g.op("b", Op::Unary(UnaryOp::Relu), &[a]);
    let c = g.op("c", Op::Unary(UnaryOp::Relu), &[b]);
    let y = g.op("y", Op::Binary(BinaryOp::Add), &[a, c]);
    g.finish(&[y])
}

/// A ResNet-50 v1.5 at batch 1, 224×224: the stem (64×112×112), max pool,
/// 3/4/6/3 bottleneck blocks of widths 64/128/256/512 (outputs ×4) with the
/// stride on the 3×3 conv and a 1×1 downsample conv on each stage's first
/// block, global average pool, Flatten (a view) and the 1000-way Gemm.
///
/// `fused = false` is the shape of an export with BatchNorm already folded:
/// `Conv, Relu, Conv, Relu, Conv, [downsample Conv], Add, Relu`, so the block
/// input stays alive until the Add. `fused = true` is the graph after the
/// epilogue pass: `FusedConv` ×3 with the residual and ReLU in the last one,
/// and the downsample just before it.
pub(super) fn resnet50(precision: Precision, fused: bool) -> Graph {
    let mut b = Builder::new(precision);
    let input = b.input("input", vec![1, 3, 224, 224]);
    let mut h = b.conv("conv1", input, 64, 7, 2, 3, None, true, fused);
    let pool = Pool2d {
        kernel: [3, 3],
        strides: [2, 2],
        pads: [1; 4],
        dilations: [1, 1],
        ceil_mode: false,
    };
    h = b.op("maxpool", Op::MaxPool(pool), &[h]);
    for (stage, (blocks, width, stride)) in [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..blocks {
            let name = format!("layer{}.{block}", stage + 1);
            let s = if block == 0 { stride } else { 1 };
            let c1 = b.conv(
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
            let c2 = b.conv(
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
                b.conv(&n, block_input, width * 4, 1, s, 0, None, false, fused)
            };
            let n = format!("{name}.conv3");
            h = if fused {
                let identity = if block == 0 { downsample(&mut b) } else { h };
                b.conv(&n, c2, width * 4, 1, 1, 0, Some(identity), true, true)
            } else {
                let c3 = b.conv(&n, c2, width * 4, 1, 1, 0, None, false, false);
                let identity = if block == 0 { downsample(&mut b) } else { h };
                let sum = b.op(
                    &format!("{name}.add"),
                    Op::Binary(BinaryOp::Add),
                    &[c3, identity],
                );
                b.op(&format!("{name}.relu"), Op::Unary(UnaryOp::Relu), &[sum])
            };
        }
    }
    let pooled = b.op("avgpool", Op::GlobalAveragePool, &[h]);
    let flat = b.op("flatten", Op::Flatten { axis: 1 }, &[pooled]);
    let w = b.constant("fc.weight", vec![1000, 2048]);
    let bias = b.constant("fc.bias", vec![1000]);
    let gemm = Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
    };
    let logits = b.op("fc", gemm, &[flat, w, bias]);
    b.finish(&[logits])
}

/// ConvNeXt-T's first stage at batch 1, 224×224: the 4×4 stride-4 stem to
/// 96×56×56, then `blocks` blocks of a 7×7 depthwise conv, a norm (a unary
/// op here), the 1×1 conv to 384 channels, GELU, the 1×1 conv back to 96 and
/// the residual Add. The block input lives until that Add, across the two
/// 384-channel values: the lower bound is 9 × 96×56×56 elements (two MLP
/// values of four units and the residual), reached only when consecutive
/// residuals alternate between the bottom and the top of the arena.
pub(super) fn convnext_stage(precision: Precision, blocks: usize) -> Graph {
    let mut b = Builder::new(precision);
    // A stride-1 unfused conv to `k` channels, `kernel`×`kernel`, same padding.
    let conv = |b: &mut Builder, name: String, x, k, kernel: usize| {
        b.conv(&name, x, k, kernel, 1, kernel / 2, None, false, false)
    };
    let input = b.input("input", vec![1, 3, 224, 224]);
    let mut h = b.conv("stem", input, 96, 4, 4, 0, None, false, false);
    for block in 0..blocks {
        let name = format!("stage1.{block}");
        let dw = conv(&mut b, format!("{name}.dwconv"), h, 96, 7);
        let norm = b.op(&format!("{name}.norm"), Op::Unary(UnaryOp::Relu), &[dw]);
        let pw1 = conv(&mut b, format!("{name}.pwconv1"), norm, 384, 1);
        let gelu = UnaryOp::Gelu { tanh: false };
        let act = b.op(&format!("{name}.gelu"), Op::Unary(gelu), &[pw1]);
        let pw2 = conv(&mut b, format!("{name}.pwconv2"), act, 96, 1);
        h = b.op(&format!("{name}.add"), Op::Binary(BinaryOp::Add), &[h, pw2]);
    }
    b.finish(&[h])
}

/// One step of a random DAG: an op kind, two picks among earlier values and
/// a parameter (all reduced modulo what is available).
pub(super) type RandomStep = (u8, usize, usize, usize);

/// Largest activation of a random DAG, in elements.
const RANDOM_MAX_ELEMENTS: usize = 1 << 16;

/// A random DAG over `[1, C, H, W]` inputs of elementwise ops (Relu, Add of
/// equal shapes), channel-changing 1×1 convs (sometimes strided) and views
/// (Flatten, Reshape back to 4-D, Identity), with the last value and the
/// picked ones as outputs. Always verifies.
pub(super) fn random_dag(
    inputs: &[(usize, usize)],
    steps: &[RandomStep],
    outputs: &[usize],
) -> Graph {
    let mut b = Builder::new(Precision::Fp32);
    let mut pool: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, &(c, hw))| b.input(&format!("in{i}"), vec![1, c, hw, hw]))
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
                b.op(&name, Op::Binary(BinaryOp::Add), &[x, other])
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
                let w = b.constant(&format!("{name}.w"), vec![k, c / g, 1, 1]);
                let conv = Conv2d {
                    kernel: [1, 1],
                    strides: [stride, stride],
                    pads: [0; 4],
                    dilations: [1, 1],
                    groups: g,
                };
                b.op(&name, Op::Conv(conv), &[x, w])
            }
            (3, 4) => b.op(&name, Op::Flatten { axis: 1 }, &[x]),
            (3, _) => {
                let n: usize = shape.iter().product();
                let reshape = Op::Reshape {
                    shape: vec![1, n as i64, 1, 1],
                    allowzero: false,
                };
                b.op(&name, reshape, &[x])
            }
            (4, _) => b.op(&name, Op::Identity, &[x]),
            _ => b.op(&name, Op::Unary(UnaryOp::Relu), &[x]),
        };
        pool.push(y);
    }
    let mut outs: Vec<ValueId> = outputs.iter().map(|&p| pool[p % pool.len()]).collect();
    if let Some(&last) = pool.last() {
        outs.push(last);
    }
    b.finish(&outs)
}

//! One conversion per supported ONNX operator: onnx-ir's typed config →
//! [`Op`], keeping every attribute and rejecting values aotune cannot honour
//! with an error naming the node, op and attribute.

use super::convert::GraphBuilder;
use super::error::{ImportError, SUPPORTED_OPS};
use crate::ir::{BinaryOp, Conv2d, Op, Pool2d, UnaryOp, ValueId};
use onnx_ir::node::padding::{AutoPad, PaddingConfig2d};
use onnx_ir::{Argument, Node};

/// What a node became.
pub enum Converted {
    Value(ValueId),
    /// Nothing to compute (a Constant node: its users read the value directly).
    Nothing,
}

struct Ctx<'a> {
    node: &'a str,
    op: String,
}

impl Ctx<'_> {
    fn attr(&self, attribute: &str, value: impl std::fmt::Debug, reason: &str) -> ImportError {
        ImportError::UnsupportedAttribute {
            node: self.node.to_string(),
            op: self.op.clone(),
            attribute: attribute.to_string(),
            value: format!("{value:?}"),
            reason: reason.to_string(),
        }
    }

    fn input(&self, input: &str, message: impl Into<String>) -> ImportError {
        ImportError::BadNodeInput {
            node: self.node.to_string(),
            op: self.op.clone(),
            input: input.to_string(),
            message: message.into(),
        }
    }
}

/// Resolves `auto_pad` and explicit pads to (top, left, bottom, right).
fn resolve_pads(
    auto_pad: &AutoPad,
    padding: &PaddingConfig2d,
    input_hw: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
) -> [usize; 4] {
    match auto_pad {
        AutoPad::SameUpper | AutoPad::SameLower => {
            let mut pads = [0; 4];
            for axis in 0..2 {
                let size = input_hw[axis];
                let stride = strides[axis].max(1);
                let out = size.div_ceil(stride);
                let span = dilations[axis] * (kernel[axis].saturating_sub(1)) + 1;
                let total = ((out.saturating_sub(1)) * stride + span).saturating_sub(size);
                let (begin, end) = if matches!(auto_pad, AutoPad::SameUpper) {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
                pads[axis] = begin;
                pads[axis + 2] = end;
            }
            pads
        }
        AutoPad::Valid => [0; 4],
        AutoPad::NotSet => match padding {
            PaddingConfig2d::Valid => [0; 4],
            PaddingConfig2d::Explicit(t, l, b, r) => [*t, *l, *b, *r],
        },
    }
}

fn spatial(b: &GraphBuilder, x: ValueId, ctx: &Ctx) -> Result<[usize; 2], ImportError> {
    let shape = b.shape(x);
    if shape.len() != 4 {
        return Err(ctx.input(
            "X",
            format!("must be 4-D (N, C, H, W), has shape {shape:?}"),
        ));
    }
    Ok([shape[2], shape[3]])
}

fn positive(ctx: &Ctx, name: &str, v: [usize; 2]) -> Result<(), ImportError> {
    if v.contains(&0) {
        return Err(ctx.attr(name, v, "must be positive"));
    }
    Ok(())
}

/// Data inputs of a node (optional inputs dropped), as values.
fn inputs(
    b: &mut GraphBuilder,
    args: &[Argument],
    ctx: &Ctx,
    range: std::ops::RangeInclusive<usize>,
) -> Result<Vec<ValueId>, ImportError> {
    let present: Vec<&Argument> = args.iter().filter(|a| !a.is_optional()).collect();
    if !range.contains(&present.len()) {
        return Err(ctx.input(
            "(count)",
            format!("expects {range:?} inputs, got {}", present.len()),
        ));
    }
    present
        .into_iter()
        .map(|a| b.value_of(a, ctx.node, &ctx.op))
        .collect()
}

fn single_output(node: &Node, ctx: &Ctx) -> Result<String, ImportError> {
    let outputs = node.outputs();
    let used: Vec<&Argument> = outputs.iter().filter(|a| !a.name.is_empty()).collect();
    match used.as_slice() {
        [one] => Ok(one.name.clone()),
        [] => Err(ctx.input("(outputs)", "node has no output")),
        _ => Err(ctx.attr(
            "outputs",
            used.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
            "only the first output is supported (e.g. MaxPool Indices, BatchNormalization training outputs)",
        )),
    }
}

/// Converts one onnx-ir node, appending to the builder.
pub fn convert_node(
    b: &mut GraphBuilder,
    node: &Node,
    opset: i64,
) -> Result<Converted, ImportError> {
    let ctx = Ctx {
        node: node.name(),
        op: node.node_type().to_string(),
    };
    if let Node::Constant(_) = node {
        return Ok(Converted::Nothing);
    }
    let out_name = single_output(node, &ctx)?;
    let args = node.inputs();
    let (op, ins) = match node {
        Node::Conv2d(n) => {
            let c = &n.config;
            let ins = inputs(b, args, &ctx, 2..=3)?;
            let hw = spatial(b, ins[0], &ctx)?;
            positive(&ctx, "strides", c.stride)?;
            positive(&ctx, "dilations", c.dilation)?;
            positive(&ctx, "kernel_shape", c.kernel_size)?;
            if c.groups == 0 {
                return Err(ctx.attr("group", c.groups, "must be at least 1"));
            }
            let pads = resolve_pads(
                &c.auto_pad,
                &c.padding,
                hw,
                c.kernel_size,
                c.stride,
                c.dilation,
            );
            let conv = Conv2d {
                kernel: c.kernel_size,
                strides: c.stride,
                pads,
                dilations: c.dilation,
                groups: c.groups,
            };
            (Op::Conv(conv), ins)
        }
        Node::BatchNormalization(n) => {
            let epsilon = match &n.config {
                onnx_ir::node::batch_norm::BatchNormConfig::Static(c) => c.epsilon,
                onnx_ir::node::batch_norm::BatchNormConfig::Runtime(c) => c.epsilon,
            };
            (
                Op::BatchNorm {
                    epsilon: epsilon as f32,
                },
                inputs(b, args, &ctx, 5..=5)?,
            )
        }
        Node::Relu(_) => (Op::Unary(UnaryOp::Relu), inputs(b, args, &ctx, 1..=1)?),
        Node::Sigmoid(_) => (Op::Unary(UnaryOp::Sigmoid), inputs(b, args, &ctx, 1..=1)?),
        Node::Clip(n) => {
            use onnx_ir::node::clip::ClipInput;
            let bound = |v: &Option<ClipInput>, name: &str, default: f32| match v {
                None => Ok(default),
                Some(ClipInput::Static(x)) => Ok(*x as f32),
                Some(ClipInput::Runtime(_)) => {
                    Err(ctx.attr(name, "runtime input", "Clip bounds must be constants"))
                }
            };
            let min = bound(&n.config.min, "min", f32::NEG_INFINITY)?;
            let max = bound(&n.config.max, "max", f32::INFINITY)?;
            let x = b.value_of(&args[0], ctx.node, &ctx.op)?;
            (Op::Unary(UnaryOp::Clip { min, max }), vec![x])
        }
        Node::Add(_) => (Op::Binary(BinaryOp::Add), inputs(b, args, &ctx, 2..=2)?),
        Node::Sub(_) => (Op::Binary(BinaryOp::Sub), inputs(b, args, &ctx, 2..=2)?),
        Node::Mul(_) => (Op::Binary(BinaryOp::Mul), inputs(b, args, &ctx, 2..=2)?),
        Node::Div(_) => (Op::Binary(BinaryOp::Div), inputs(b, args, &ctx, 2..=2)?),
        Node::Sum(_) => (Op::Sum, inputs(b, args, &ctx, 1..=usize::MAX)?),
        Node::MaxPool2d(n) => {
            let c = &n.config;
            let ins = inputs(b, args, &ctx, 1..=1)?;
            let hw = spatial(b, ins[0], &ctx)?;
            positive(&ctx, "strides", c.strides)?;
            positive(&ctx, "dilations", c.dilation)?;
            positive(&ctx, "kernel_shape", c.kernel_size)?;
            if c.storage_order != 0 {
                return Err(ctx.attr(
                    "storage_order",
                    c.storage_order,
                    "only row-major (0) is supported",
                ));
            }
            let pads = resolve_pads(
                &c.auto_pad,
                &c.padding,
                hw,
                c.kernel_size,
                c.strides,
                c.dilation,
            );
            let pool = Pool2d {
                kernel: c.kernel_size,
                strides: c.strides,
                pads,
                dilations: c.dilation,
                ceil_mode: c.ceil_mode,
            };
            (Op::MaxPool(pool), ins)
        }
        Node::AveragePool2d(n) => {
            let c = &n.config;
            let ins = inputs(b, args, &ctx, 1..=1)?;
            let hw = spatial(b, ins[0], &ctx)?;
            positive(&ctx, "strides", c.strides)?;
            positive(&ctx, "dilations", c.dilation)?;
            positive(&ctx, "kernel_shape", c.kernel_size)?;
            let pads = resolve_pads(
                &c.auto_pad,
                &c.padding,
                hw,
                c.kernel_size,
                c.strides,
                c.dilation,
            );
            let pool = Pool2d {
                kernel: c.kernel_size,
                strides: c.strides,
                pads,
                dilations: c.dilation,
                ceil_mode: c.ceil_mode,
            };
            (
                Op::AveragePool {
                    pool,
                    count_include_pad: c.count_include_pad,
                },
                ins,
            )
        }
        Node::GlobalAveragePool(_) => (Op::GlobalAveragePool, inputs(b, args, &ctx, 1..=1)?),
        Node::GlobalMaxPool(_) => (Op::GlobalMaxPool, inputs(b, args, &ctx, 1..=1)?),
        Node::ReduceMean(n) => {
            use onnx_ir::node::reduce::ReduceAxes;
            let x = b.value_of(&args[0], ctx.node, &ctx.op)?;
            let rank = b.shape(x).len();
            let mut axes = match &n.config.axes {
                ReduceAxes::Static(axes) => axes.clone(),
                ReduceAxes::Runtime(_) => {
                    return Err(ctx.attr(
                        "axes",
                        "runtime input",
                        "ReduceMean axes must be constants",
                    ))
                }
            };
            if axes.is_empty() {
                if n.config.noop_with_empty_axes {
                    return Ok(Converted::Value(b.push(
                        ctx.node,
                        Op::Identity,
                        vec![x],
                        &out_name,
                    )?));
                }
                axes = (0..rank).collect();
            }
            axes.sort_unstable();
            axes.dedup();
            (
                Op::ReduceMean {
                    axes,
                    keepdims: n.config.keepdims,
                },
                vec![x],
            )
        }
        Node::Flatten(n) => (
            Op::Flatten {
                axis: n.config.axis,
            },
            vec![b.value_of(&args[0], ctx.node, &ctx.op)?],
        ),
        Node::Reshape(n) => {
            use onnx_ir::node::reshape::ReshapeInput;
            let shape = match &n.config.shape {
                ReshapeInput::Static(s) => s.clone(),
                ReshapeInput::Runtime(_) => {
                    return Err(ctx.attr(
                        "shape",
                        "runtime input",
                        "the target shape must be a constant (an initializer)",
                    ))
                }
            };
            let x = b.value_of(&args[0], ctx.node, &ctx.op)?;
            (
                Op::Reshape {
                    shape,
                    allowzero: false,
                },
                vec![x],
            )
        }
        Node::Gemm(n) => {
            let c = &n.config;
            (
                Op::Gemm {
                    alpha: c.alpha,
                    beta: c.beta,
                    trans_a: c.trans_a != 0,
                    trans_b: c.trans_b != 0,
                },
                inputs(b, args, &ctx, 2..=3)?,
            )
        }
        Node::Linear(n) => {
            // onnx-ir turns Gemm(transA=0, alpha=1, beta=1) and MatMul+Add into Linear.
            let ins = inputs(b, args, &ctx, 2..=3)?;
            if b.shape(ins[0]).len() == 2 {
                let op = Op::Gemm {
                    alpha: 1.0,
                    beta: 1.0,
                    trans_a: false,
                    trans_b: n.config.transpose_weight,
                };
                (op, ins)
            } else {
                return linear_as_matmul(b, &ctx, ins, n.config.transpose_weight, &out_name);
            }
        }
        Node::MatMul(_) => (Op::MatMul, inputs(b, args, &ctx, 2..=2)?),
        Node::Identity(_) => (Op::Identity, inputs(b, args, &ctx, 1..=1)?),
        Node::Concat(n) => (
            Op::Concat {
                axis: n.config.axis,
            },
            inputs(b, args, &ctx, 1..=usize::MAX)?,
        ),
        Node::Softmax(n) => {
            let ins = inputs(b, args, &ctx, 1..=1)?;
            let rank = b.shape(ins[0]).len();
            if opset < 13 && n.config.axis + 1 != rank {
                return Err(ctx.attr(
                    "axis",
                    n.config.axis,
                    "before opset 13 Softmax flattens to 2-D at the axis; only the last axis is supported there",
                ));
            }
            (
                Op::Softmax {
                    axis: n.config.axis,
                },
                ins,
            )
        }
        Node::Conv1d(_) | Node::Conv3d(_) => {
            return Err(ctx.attr(
                "kernel_shape",
                "1-D or 3-D",
                "only 2-D convolutions are supported",
            ))
        }
        Node::MaxPool1d(_)
        | Node::MaxPool3d(_)
        | Node::AveragePool1d(_)
        | Node::AveragePool3d(_) => {
            return Err(ctx.attr(
                "kernel_shape",
                "1-D or 3-D",
                "only 2-D pooling is supported",
            ))
        }
        Node::Custom(c) => {
            return Err(ImportError::UnsupportedOp {
                node: ctx.node.to_string(),
                op: format!("{}::{}", c.domain, c.op_type),
                supported: SUPPORTED_OPS,
            })
        }
        _ => {
            return Err(ImportError::UnsupportedOp {
                node: ctx.node.to_string(),
                op: ctx.op.clone(),
                supported: SUPPORTED_OPS,
            })
        }
    };
    Ok(Converted::Value(b.push(ctx.node, op, ins, &out_name)?))
}

/// `Linear` on a rank > 2 input: MatMul with a [in, out] weight, then Add bias.
fn linear_as_matmul(
    b: &mut GraphBuilder,
    ctx: &Ctx,
    ins: Vec<ValueId>,
    transpose_weight: bool,
    out_name: &str,
) -> Result<Converted, ImportError> {
    let mut weight = ins[1];
    if transpose_weight {
        let (shape, data) = match (b.shape(weight), b.constant(weight)) {
            ([n, k], Some(data)) => {
                let (n, k) = (*n, *k);
                let mut t = vec![0.0; n * k];
                for i in 0..n {
                    for j in 0..k {
                        t[j * n + i] = data[i * k + j];
                    }
                }
                (vec![k, n], t)
            }
            _ => return Err(ctx.input("B", "a transposed Linear weight must be a 2-D constant")),
        };
        weight = b.graph.add_value(crate::ir::Value::constant(
            format!("{}_weight_t", ctx.node),
            shape,
            data,
        ));
    }
    let matmul_name = if ins.len() == 3 {
        format!("{out_name}_matmul")
    } else {
        out_name.to_string()
    };
    let y = b.push(ctx.node, Op::MatMul, vec![ins[0], weight], &matmul_name)?;
    if ins.len() == 3 {
        let name = format!("{}_bias", ctx.node);
        return Ok(Converted::Value(b.push(
            &name,
            Op::Binary(BinaryOp::Add),
            vec![y, ins[2]],
            out_name,
        )?));
    }
    Ok(Converted::Value(y))
}

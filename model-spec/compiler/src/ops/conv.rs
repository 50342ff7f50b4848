//! ONNX `Conv`, 2-D only: [`Op::Conv`] with strides, explicit pads or
//! `auto_pad`, dilations and groups (depthwise included), and an optional
//! bias input. onnx-ir names it `Conv2d` (`Conv1d`/`Conv3d` for other
//! kernel ranks, which are rejected).
//!
//! Inputs x `[N, C, H, W]`, w `[K, C/groups, R, S]`, optional bias `[K]`;
//! output `[N, K, P, Q]` ([`Conv2d::output_hw`]). The CPU reference is the
//! convolution kernel of [`Op::FusedConv`] with an epilogue of just the bias.

use super::window::{positive, resolve_pads, spatial};
use super::OpDef;
use crate::ir::{arity, rank4, Conv2d, Epilogue, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Conv"],
    summary: "Conv (2-D; strides, pads incl. `auto_pad`, dilations, groups incl. depthwise, \
              optional bias)",
    node_types: &[NodeType::Conv2d, NodeType::Conv1d, NodeType::Conv3d],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let node = cx.node;
    let c = match node {
        Node::Conv2d(n) => &n.config,
        Node::Conv1d(_) | Node::Conv3d(_) => {
            return Err(cx.attr_error(
                "kernel_shape",
                "1-D or 3-D",
                "only 2-D convolutions are supported",
            ))
        }
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(2..=3)?;
    let hw = spatial(cx, ins[0])?;
    positive(cx, "strides", c.stride)?;
    positive(cx, "dilations", c.dilation)?;
    positive(cx, "kernel_shape", c.kernel_size)?;
    if c.groups == 0 {
        return Err(cx.attr_error("group", c.groups, "must be at least 1"));
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
    cx.push(Op::Conv(conv), ins)
}

/// Output shape of [`Op::Conv`]: inputs x, w, optional bias.
pub(crate) fn infer_shape(conv: &Conv2d, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 2, 3)?;
    conv_shape(conv, inputs[0], inputs[1], inputs.get(2).copied())
}

/// Output shape of a convolution of `x` by `w` (plus `bias`), checking
/// that channels, groups, kernel and bias agree; also the main product of
/// [`Op::FusedConv`].
pub(crate) fn conv_shape(
    conv: &Conv2d,
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
) -> Result<Vec<usize>, String> {
    let x = rank4(x, "conv input")?;
    let w = rank4(w, "conv weight")?;
    let g = conv.groups;
    if g == 0 || x[1] % g != 0 || w[0] % g != 0 {
        return Err(format!(
            "groups={g} must divide input channels {} and output channels {}",
            x[1], w[0]
        ));
    }
    if w[1] * g != x[1] {
        return Err(format!(
            "weight {w:?} expects {} input channels (×{g} groups), input has {}",
            w[1] * g,
            x[1]
        ));
    }
    if [w[2], w[3]] != conv.kernel {
        return Err(format!(
            "kernel_shape {:?} disagrees with weight {w:?}",
            conv.kernel
        ));
    }
    if let Some(b) = bias {
        if b != [w[0]] {
            return Err(format!("bias shape {b:?} must be [{}]", w[0]));
        }
    }
    let [p, q] = conv
        .output_hw(x[2], x[3])
        .ok_or_else(|| format!("kernel {:?} does not fit input {x:?}", conv.kernel))?;
    Ok(vec![x[0], w[0], p, q])
}

/// CPU reference of [`Op::Conv`]: a third input is the bias.
pub(crate) fn reference(
    ctx: &Ctx,
    geometry: &Conv2d,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let epilogue = Epilogue {
        bias: inputs.len() == 3,
        ..Epilogue::NONE
    };
    let fused = reference::conv::Fused {
        epilogue: &epilogue,
        shortcut: None,
        norm: None,
    };
    reference::conv::conv(ctx, geometry, fused, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Conv",
            opset: 17,
            inputs: &[Data(&[1, 3, 8, 8]), Weight(&[4, 3, 3, 3]), Weight(&[4])],
            attrs: &[
                Ints("kernel_shape", &[3, 3]),
                Ints("pads", &[1, 1, 1, 1]),
                Ints("dilations", &[1, 1]),
            ],
            output: &[1, 4, 8, 8],
            ir: &["Conv"],
        },
        // auto_pad, strides and no kernel_shape (inferred from the weight).
        Example {
            op_type: "Conv",
            opset: 11,
            inputs: &[Data(&[2, 2, 7, 7]), Weight(&[6, 2, 3, 3])],
            attrs: &[Str("auto_pad", "SAME_UPPER"), Ints("strides", &[2, 2])],
            output: &[2, 6, 4, 4],
            ir: &["Conv"],
        },
        // Depthwise, dilated.
        Example {
            op_type: "Conv",
            opset: 13,
            inputs: &[Data(&[1, 4, 9, 9]), Weight(&[4, 1, 3, 3]), Weight(&[4])],
            attrs: &[Int("group", 4), Ints("dilations", &[2, 2])],
            output: &[1, 4, 5, 5],
            ir: &["Conv"],
        },
    ];
}

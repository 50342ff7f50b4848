//! ONNX `LayerNormalization` (opset 17): [`Op::LayerNorm`]. Each
//! `x[i, ..]` over the axes `axis..` (negative `axis` counts from the end,
//! default −1) is normalized by its mean and variance plus `epsilon`, then
//! multiplied by `Scale` and shifted by the optional `B`, both broadcasting
//! to `x.shape[axis..]`. Statistics are computed in the accumulation type
//! (f32 or f64), never below f32, so `stash_type` must be its only defined
//! value, 1 (float). Only the output `Y` is supported: a node whose `Mean`
//! or `InvStdDev` output is used is refused at import.

use super::OpDef;
use crate::ir::{arity, broadcast, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["LayerNormalization"],
    summary: "LayerNormalization (`axis` incl. negative, `epsilon`, optional bias, \
              `stash_type` 1; output `Y` only)",
    node_types: &[NodeType::LayerNormalization],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::LayerNormalization(n) = cx.node else {
        return Err(cx.unsupported());
    };
    if !n.config.full_precision {
        return Err(cx.attr_error(
            "stash_type",
            "not 1",
            "statistics are computed in float (stash_type 1), the only defined value",
        ));
    }
    let ins = cx.inputs(2..=3)?;
    let rank = cx.shape(ins[0]).len() as i64;
    let axis = n.config.axis;
    if axis < -rank || axis >= rank {
        return Err(cx.attr_error("axis", axis, &format!("out of range for rank {rank}")));
    }
    let op = Op::LayerNorm {
        axis: axis.rem_euclid(rank) as usize,
        epsilon: n.config.epsilon as f32,
    };
    cx.push(op, ins)
}

/// Output shape of [`Op::LayerNorm`]: x's; scale and bias must broadcast
/// to `x.shape[axis..]`.
pub(crate) fn infer_shape(axis: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 2, 3)?;
    let x = inputs[0];
    if axis >= x.len() {
        return Err(format!("LayerNorm axis {axis} out of range for {x:?}"));
    }
    let norm = &x[axis..];
    for (what, s) in ["scale", "bias"].iter().zip(&inputs[1..]) {
        if s.len() > norm.len() || broadcast(norm, s)? != norm {
            return Err(format!(
                "LayerNorm {what} {s:?} does not broadcast to the normalized shape {norm:?}"
            ));
        }
    }
    Ok(x.to_vec())
}

/// CPU reference of [`Op::LayerNorm`] (statistics in the accumulation type).
pub(crate) fn reference(ctx: &Ctx, axis: usize, epsilon: f32, inputs: &[Tensor]) -> OpResult {
    reference::normalize::layer_norm(ctx, axis, epsilon, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // PyTorch's nn.LayerNorm: the last axis, constant scale and bias.
        Example {
            op_type: "LayerNormalization",
            opset: 17,
            inputs: &[Data(&[2, 5, 8]), Weight(&[8]), Weight(&[8])],
            attrs: &[Int("axis", -1), Float("epsilon", 1e-6)],
            output: &[2, 5, 8],
            ir: &["LayerNormalization"],
        },
        // Several normalized axes, no bias, runtime scale.
        Example {
            op_type: "LayerNormalization",
            opset: 17,
            inputs: &[Data(&[2, 3, 4]), Data(&[3, 4])],
            attrs: &[Int("axis", 1)],
            output: &[2, 3, 4],
            ir: &["LayerNormalization"],
        },
    ];

    #[test]
    fn scale_must_broadcast_to_the_normalized_axes() {
        assert!(infer_shape(1, &[&[2, 3, 4], &[4]]).is_ok());
        assert!(infer_shape(2, &[&[2, 3, 4], &[3, 4]]).is_err());
        assert!(infer_shape(1, &[&[2, 3, 4], &[4], &[2, 4]]).is_err());
    }
}

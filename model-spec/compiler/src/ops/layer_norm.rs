//! ONNX `LayerNormalization` (opset 17): [`Op::LayerNorm`]. Each
//! `x[i, ..]` over the axes `axis..` (negative `axis` counts from the end,
//! default −1) is normalized by its mean and variance plus `epsilon`, then
//! multiplied by `Scale` and shifted by the optional `B`, both broadcasting
//! to `x.shape[axis..]`. Statistics are computed in the accumulation type
//! (f32 or f64), never below f32, so `stash_type` must be its only defined
//! value, 1 (float). The optional outputs `Mean` and `InvStdDev` (shape
//! `x.shape[..axis]` then ones) are computed by their own nodes
//! (ReduceMean, and `1 / sqrt(mean((x − mean)²) + epsilon)`).

use super::OpDef;
use crate::ir::{arity, broadcast, BinaryOp, Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["LayerNormalization"],
    summary: "LayerNormalization (`axis` incl. negative, `epsilon`, optional bias, \
              `stash_type` 1; outputs `Y`, `Mean`, `InvStdDev`)",
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
    let (axis, epsilon) = (axis.rem_euclid(rank) as usize, n.config.epsilon as f32);
    let names = cx.output_names();
    let used = |k: usize| names.get(k).is_some_and(|n| !n.is_empty());
    let y = cx.push(Op::LayerNorm { axis, epsilon }, ins.clone())?;
    if !used(1) && !used(2) {
        return Ok(y);
    }
    let (mean, inv_std) = statistics(cx, ins[0], axis, epsilon, &names)?;
    cx.bind_output(0, y);
    cx.bind_output(1, mean);
    cx.bind_output(2, inv_std);
    Ok([y, mean, inv_std][(0..3).find(|&k| used(k)).unwrap_or(0)])
}

/// LayerNormalization's `Mean` and `InvStdDev` outputs over the axes
/// `axis..` of `x`, kept as ones.
fn statistics(
    cx: &mut NodeImport,
    x: ValueId,
    axis: usize,
    epsilon: f32,
    names: &[&str],
) -> Result<(ValueId, ValueId), ImportError> {
    let node = cx.name().to_string();
    let output = |k: usize, what: &str| match names.get(k).filter(|n| !n.is_empty()) {
        Some(name) => name.to_string(),
        None => format!("{node}/{what}"),
    };
    let axes: Vec<usize> = (axis..cx.shape(x).len()).collect();
    let mean_op = || Op::ReduceMean {
        axes: axes.clone(),
        keepdims: true,
    };
    let step = |cx: &mut NodeImport, what: &str, op: Op, ins: Vec<ValueId>| {
        cx.push_named(
            &format!("{node}/{what}"),
            op,
            ins,
            &format!("{node}/{what}"),
        )
    };
    let mean = cx.push_named(
        &format!("{node}/mean"),
        mean_op(),
        vec![x],
        &output(1, "mean"),
    )?;
    let centered = step(cx, "centered", Op::Binary(BinaryOp::Sub), vec![x, mean])?;
    let squared = step(
        cx,
        "squared",
        Op::Binary(BinaryOp::Mul),
        vec![centered, centered],
    )?;
    let variance = step(cx, "variance", mean_op(), vec![squared])?;
    let eps = cx.add_constant(format!("{node}/epsilon"), Vec::new(), vec![epsilon]);
    let shifted = step(
        cx,
        "shifted",
        Op::Binary(BinaryOp::Add),
        vec![variance, eps],
    )?;
    let std = step(cx, "std", Op::Unary(UnaryOp::Sqrt), vec![shifted])?;
    let inv_std = cx.push_named(
        &format!("{node}/inv_std"),
        Op::Unary(UnaryOp::Reciprocal),
        vec![std],
        &output(2, "inv_std"),
    )?;
    Ok((mean, inv_std))
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

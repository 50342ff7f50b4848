//! ONNX `LpNormalization` ([`Op::LpNorm`]: each slice along `axis`,
//! default −1, divided by its L1 or L2 norm, `p` 1 or 2; an all-zero slice
//! gives NaN as ONNX's reference does) and `MeanVarianceNormalization`
//! ([`Op::MeanVarianceNorm`]: `(x − mean) / (sqrt(var) + 1e-9)` over `axes`,
//! default `[0, 2, 3]`, as its ONNX function body computes it).

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["LpNormalization", "MeanVarianceNormalization"],
    summary: "LpNormalization (`axis`, `p` 1 or 2), MeanVarianceNormalization (`axes`)",
    node_types: &[
        NodeType::LpNormalization,
        NodeType::MeanVarianceNormalization,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let op = match cx.node {
        Node::LpNormalization(n) => {
            let p = match n.config.p {
                1 => 1,
                2 => 2,
                p => return Err(cx.attr_error("p", p, "ONNX defines p = 1 or 2 only")),
            };
            Op::LpNorm {
                axis: n.config.axis,
                p,
            }
        }
        Node::MeanVarianceNormalization(n) => {
            let mut axes = n.config.axes.clone();
            axes.sort_unstable();
            axes.dedup();
            Op::MeanVarianceNorm { axes }
        }
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(1..=1)?;
    cx.push(op, ins)
}

/// Output shape of [`Op::LpNorm`]: its input's.
pub(crate) fn infer_lp_shape(axis: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if axis >= inputs[0].len() {
        return Err(format!(
            "LpNorm axis {axis} out of range for {:?}",
            inputs[0]
        ));
    }
    Ok(inputs[0].to_vec())
}

/// Output shape of [`Op::MeanVarianceNorm`]: its input's.
pub(crate) fn infer_mvn_shape(axes: &[usize], inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if let Some(bad) = axes.iter().find(|&&a| a >= inputs[0].len()) {
        return Err(format!("MVN axis {bad} out of range for {:?}", inputs[0]));
    }
    Ok(inputs[0].to_vec())
}

/// CPU reference of [`Op::LpNorm`] (norms in the accumulation type).
pub(crate) fn lp_reference(ctx: &Ctx, axis: usize, p: u8, inputs: &[Tensor]) -> OpResult {
    reference::normalize::lp_norm(ctx, axis, p, inputs)
}

/// CPU reference of [`Op::MeanVarianceNorm`] (statistics in the
/// accumulation type).
pub(crate) fn mvn_reference(ctx: &Ctx, axes: &[usize], inputs: &[Tensor]) -> OpResult {
    reference::normalize::mean_variance_norm(ctx, axes, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "LpNormalization",
            opset: 1,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", 1), Int("p", 1)],
            output: &[2, 3, 4],
            ir: &["LpNormalization"],
        },
        Example {
            op_type: "LpNormalization",
            opset: 1,
            inputs: &[Data(&[2, 3])],
            attrs: &[],
            output: &[2, 3],
            ir: &["LpNormalization"],
        },
        // The default axes [0, 2, 3].
        Example {
            op_type: "MeanVarianceNormalization",
            opset: 13,
            inputs: &[Data(&[2, 3, 4, 4])],
            attrs: &[],
            output: &[2, 3, 4, 4],
            ir: &["MeanVarianceNormalization"],
        },
        Example {
            op_type: "MeanVarianceNormalization",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Ints("axes", &[-1])],
            output: &[2, 3, 4],
            ir: &["MeanVarianceNormalization"],
        },
    ];
}

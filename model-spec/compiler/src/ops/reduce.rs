//! ONNX reductions: `ReduceMean` ([`Op::ReduceMean`], which passes and
//! codegen know) and `ReduceSum`, `ReduceMax`, `ReduceMin`, `ReduceProd`,
//! `ReduceL1`, `ReduceL2`, `ReduceSumSquare`, `ReduceLogSum`,
//! `ReduceLogSumExp` ([`Op::Reduce`] with its [`ReduceKind`]), each over a
//! set of axes, keeping them as 1s with `keepdims`.
//!
//! The axes come as an attribute (ReduceSum before opset 13, the others
//! before 18) or as the second input from then on; either way they must be
//! constants. Negative axes count from the end. No axes means every axis,
//! or nothing with `noop_with_empty_axes` (then the node is an
//! [`Op::Identity`]). Inputs are float (bool and integer graph inputs are
//! refused at import, as everywhere).

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ReduceKind, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::node::reduce::{ReduceAxes, ReduceConfig};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &[
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceSumSquare",
        "ReduceLogSum",
        "ReduceLogSumExp",
    ],
    summary: "ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, \
              ReduceSumSquare, ReduceLogSum, ReduceLogSumExp (constant axes as attribute or \
              input, `keepdims`, `noop_with_empty_axes`)",
    node_types: &[
        NodeType::ReduceMean,
        NodeType::ReduceSum,
        NodeType::ReduceMax,
        NodeType::ReduceMin,
        NodeType::ReduceProd,
        NodeType::ReduceL1,
        NodeType::ReduceL2,
        NodeType::ReduceSumSquare,
        NodeType::ReduceLogSum,
        NodeType::ReduceLogSumExp,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

/// The node's config and its kind (`None`: the mean).
fn config(node: &Node) -> Option<(&ReduceConfig, Option<ReduceKind>)> {
    Some(match node {
        Node::ReduceMean(n) => (&n.config, None),
        Node::ReduceSum(n) => (&n.config, Some(ReduceKind::Sum)),
        Node::ReduceMax(n) => (&n.config, Some(ReduceKind::Max)),
        Node::ReduceMin(n) => (&n.config, Some(ReduceKind::Min)),
        Node::ReduceProd(n) => (&n.config, Some(ReduceKind::Prod)),
        Node::ReduceL1(n) => (&n.config, Some(ReduceKind::L1)),
        Node::ReduceL2(n) => (&n.config, Some(ReduceKind::L2)),
        Node::ReduceSumSquare(n) => (&n.config, Some(ReduceKind::SumSquare)),
        Node::ReduceLogSum(n) => (&n.config, Some(ReduceKind::LogSum)),
        Node::ReduceLogSumExp(n) => (&n.config, Some(ReduceKind::LogSumExp)),
        _ => return None,
    })
}

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Some((config, kind)) = config(cx.node) else {
        return Err(cx.unsupported());
    };
    let x = cx.input(0)?;
    if cx.shape(x).contains(&0) {
        return Err(cx.attr_error(
            "data",
            cx.shape(x).to_vec(),
            "an empty input: aotune values are never zero-sized",
        ));
    }
    let rank = cx.shape(x).len();
    let mut axes = match &config.axes {
        ReduceAxes::Static(axes) => axes.clone(),
        ReduceAxes::Runtime(r) => const_input::required_ints(cx, r.input_index, "axes")?
            .into_iter()
            .map(|a| {
                let axis = if a < 0 { a + rank as i64 } else { a };
                usize::try_from(axis)
                    .ok()
                    .filter(|&axis| axis < rank)
                    .ok_or_else(|| cx.attr_error("axes", a, "out of range for the input"))
            })
            .collect::<Result<_, _>>()?,
    };
    if axes.is_empty() {
        if config.noop_with_empty_axes {
            return cx.push(Op::Identity, vec![x]);
        }
        axes = (0..rank).collect();
    }
    axes.sort_unstable();
    axes.dedup();
    let keepdims = config.keepdims;
    let op = match kind {
        None => Op::ReduceMean { axes, keepdims },
        Some(kind) => Op::Reduce {
            kind,
            axes,
            keepdims,
        },
    };
    cx.push(op, vec![x])
}

/// Output shape of [`Op::ReduceMean`] and [`Op::Reduce`]: the input's, each
/// reduced axis 1 (`keepdims`) or dropped.
pub(crate) fn infer_shape(
    axes: &[usize],
    keepdims: bool,
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = inputs[0];
    if let Some(&bad) = axes.iter().find(|&&a| a >= x.len()) {
        return Err(format!("reduction axis {bad} out of range for {x:?}"));
    }
    Ok(x.iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect())
}

/// CPU reference of [`Op::ReduceMean`] (sums in the accumulation type).
pub(crate) fn mean_reference(
    ctx: &Ctx,
    axes: &[usize],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    reference::reduce::reduce_mean(ctx, axes, inputs, out)
}

/// CPU reference of [`Op::Reduce`].
pub(crate) fn reference(
    ctx: &Ctx,
    kind: ReduceKind,
    axes: &[usize],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    reference::reduce::reduce(ctx, kind, axes, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // Axes as an attribute (before opset 18).
        Example {
            op_type: "ReduceMean",
            opset: 13,
            inputs: &[Data(&[2, 3, 4, 4])],
            attrs: &[Ints("axes", &[-1, 2]), Int("keepdims", 0)],
            output: &[2, 3],
            ir: &["ReduceMean"],
        },
        // Axes as an input (opset 18 on).
        Example {
            op_type: "ReduceMean",
            opset: 18,
            inputs: &[Data(&[2, 3, 4]), Int64s(&[1])],
            attrs: &[],
            output: &[2, 1, 4],
            ir: &["ReduceMean"],
        },
        // No axes: every axis.
        Example {
            op_type: "ReduceMean",
            opset: 13,
            inputs: &[Data(&[2, 3])],
            attrs: &[],
            output: &[1, 1],
            ir: &["ReduceMean"],
        },
        // No axes with noop_with_empty_axes: an Identity.
        Example {
            op_type: "ReduceMean",
            opset: 18,
            inputs: &[Data(&[2, 3])],
            attrs: &[Int("noop_with_empty_axes", 1)],
            output: &[2, 3],
            ir: &["Identity"],
        },
        // ReduceSum: axes as an attribute before opset 13, an input from 13.
        Example {
            op_type: "ReduceSum",
            opset: 11,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Ints("axes", &[1]), Int("keepdims", 0)],
            output: &[2, 4],
            ir: &["ReduceSum"],
        },
        Example {
            op_type: "ReduceSum",
            opset: 13,
            inputs: &[Data(&[2, 3, 4]), Int64s(&[-1])],
            attrs: &[],
            output: &[2, 3, 1],
            ir: &["ReduceSum"],
        },
        Example {
            op_type: "ReduceMax",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Ints("axes", &[0, 2])],
            output: &[1, 3, 1],
            ir: &["ReduceMax"],
        },
        Example {
            op_type: "ReduceMin",
            opset: 18,
            inputs: &[Data(&[2, 3, 4]), Int64s(&[0])],
            attrs: &[Int("keepdims", 0)],
            output: &[3, 4],
            ir: &["ReduceMin"],
        },
        Example {
            op_type: "ReduceProd",
            opset: 13,
            inputs: &[Data(&[2, 3])],
            attrs: &[Ints("axes", &[1])],
            output: &[2, 1],
            ir: &["ReduceProd"],
        },
        Example {
            op_type: "ReduceL1",
            opset: 18,
            inputs: &[Data(&[2, 3]), Int64s(&[1])],
            attrs: &[],
            output: &[2, 1],
            ir: &["ReduceL1"],
        },
        Example {
            op_type: "ReduceL2",
            opset: 13,
            inputs: &[Data(&[2, 3])],
            attrs: &[Ints("axes", &[0])],
            output: &[1, 3],
            ir: &["ReduceL2"],
        },
        Example {
            op_type: "ReduceSumSquare",
            opset: 13,
            inputs: &[Data(&[2, 3])],
            attrs: &[],
            output: &[1, 1],
            ir: &["ReduceSumSquare"],
        },
        Example {
            op_type: "ReduceLogSum",
            opset: 18,
            inputs: &[Data(&[2, 3]), Int64s(&[1])],
            attrs: &[Int("keepdims", 0)],
            output: &[2],
            ir: &["ReduceLogSum"],
        },
        Example {
            op_type: "ReduceLogSumExp",
            opset: 13,
            inputs: &[Data(&[2, 3])],
            attrs: &[Ints("axes", &[1]), Int("keepdims", 0)],
            output: &[2],
            ir: &["ReduceLogSumExp"],
        },
    ];
}

//! ONNX `ReduceMean`: [`Op::ReduceMean`], the mean over a set of axes,
//! keeping them as 1s with `keepdims`. The axes come as an attribute before
//! opset 18 and as an input from opset 18; either way they must be
//! constants. Negative axes count from the end; no axes means every axis,
//! or nothing with `noop_with_empty_axes` (then the node is an
//! [`Op::Identity`]).

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::node::reduce::ReduceAxes;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["ReduceMean"],
    summary: "ReduceMean (constant axes, `keepdims`)",
    node_types: &[NodeType::ReduceMean],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::ReduceMean(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let x = cx.input(0)?;
    let rank = cx.shape(x).len();
    let mut axes = match &n.config.axes {
        ReduceAxes::Static(axes) => axes.clone(),
        ReduceAxes::Runtime(_) => {
            return Err(cx.attr_error("axes", "runtime input", "ReduceMean axes must be constants"))
        }
    };
    if axes.is_empty() {
        if n.config.noop_with_empty_axes {
            return cx.push(Op::Identity, vec![x]);
        }
        axes = (0..rank).collect();
    }
    axes.sort_unstable();
    axes.dedup();
    let op = Op::ReduceMean {
        axes,
        keepdims: n.config.keepdims,
    };
    cx.push(op, vec![x])
}

/// Output shape of [`Op::ReduceMean`]: the input's, each reduced axis 1
/// (`keepdims`) or dropped.
pub(crate) fn infer_shape(
    axes: &[usize],
    keepdims: bool,
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = inputs[0];
    if let Some(&bad) = axes.iter().find(|&&a| a >= x.len()) {
        return Err(format!("ReduceMean axis {bad} out of range for {x:?}"));
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
pub(crate) fn reference(ctx: &Ctx, axes: &[usize], inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::reduce::reduce_mean(ctx, axes, inputs, out)
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
    ];
}

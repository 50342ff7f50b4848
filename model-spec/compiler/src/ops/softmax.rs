//! ONNX `Softmax`: [`Op::Softmax`] with opset ≥ 13 semantics, each slice
//! along `axis` normalized on its own. Before opset 13 Softmax flattens the
//! input to 2-D at `axis`, which matches only when `axis` is the last one,
//! so other axes are rejected there.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Softmax"],
    summary: "Softmax (any axis from opset 13, the last one before)",
    node_types: &[NodeType::Softmax],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Softmax(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let ins = cx.inputs(1..=1)?;
    let rank = cx.shape(ins[0]).len();
    let axis = n.config.axis;
    if cx.opset < 13 && axis + 1 != rank {
        return Err(cx.attr_error(
            "axis",
            axis,
            "before opset 13 Softmax flattens to 2-D at the axis; only the last axis is \
             supported there",
        ));
    }
    cx.push(Op::Softmax { axis }, ins)
}

/// Output shape of [`Op::Softmax`]: its input's.
pub(crate) fn infer_shape(axis: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if axis >= inputs[0].len() {
        return Err(format!(
            "Softmax axis {axis} out of range for {:?}",
            inputs[0]
        ));
    }
    Ok(inputs[0].to_vec())
}

/// CPU reference of [`Op::Softmax`] (in the accumulation type).
pub(crate) fn reference(ctx: &Ctx, axis: usize, inputs: &[Tensor]) -> OpResult {
    reference::softmax::softmax(ctx, axis, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Softmax",
            opset: 13,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[Int("axis", 1)],
            output: &[2, 3, 4],
            ir: &["Softmax"],
        },
        // Before opset 13: the last axis only (the default there is 1).
        Example {
            op_type: "Softmax",
            opset: 11,
            inputs: &[Data(&[2, 5])],
            attrs: &[],
            output: &[2, 5],
            ir: &["Softmax"],
        },
    ];
}

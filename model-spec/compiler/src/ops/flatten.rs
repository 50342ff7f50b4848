//! ONNX `Flatten`: [`Op::Flatten`], the input as a 2-D matrix
//! `[d0·…·d(axis−1), d(axis)·…]` (negative `axis` counts from the end).
//! A view: it copies its row-major input and the memory plan may alias it.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Flatten"],
    summary: "Flatten",
    node_types: &[NodeType::Flatten],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Flatten(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let op = Op::Flatten {
        axis: n.config.axis,
    };
    let x = cx.input(0)?;
    cx.push(op, vec![x])
}

/// Output shape of [`Op::Flatten`].
pub(crate) fn infer_shape(axis: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = inputs[0];
    if axis > x.len() {
        return Err(format!("Flatten axis {axis} out of range for {x:?}"));
    }
    Ok(vec![x[..axis].iter().product(), x[axis..].iter().product()])
}

/// CPU reference of [`Op::Flatten`]: a row-major copy.
pub(crate) fn reference(inputs: &[Tensor]) -> OpResult {
    reference::shape_ops::copy(inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Flatten",
            opset: 13,
            inputs: &[Data(&[2, 3, 4, 5])],
            attrs: &[],
            output: &[2, 60],
            ir: &["Flatten"],
        },
        Example {
            op_type: "Flatten",
            opset: 11,
            inputs: &[Data(&[2, 3, 4, 5])],
            attrs: &[Int("axis", -2)],
            output: &[6, 20],
            ir: &["Flatten"],
        },
    ];
}

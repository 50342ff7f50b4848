//! ONNX `Relu`, `Sigmoid` and `Clip`: [`Op::Unary`], elementwise on one
//! input of any shape.
//!
//! `Clip` takes its bounds as attributes `min`/`max` before opset 11 and as
//! optional inputs from opset 11; either way they must be constants (a
//! missing bound is ±∞).

use super::OpDef;
use crate::ir::{arity, Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::clip::ClipInput;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Relu", "Clip", "Sigmoid"],
    summary: "Relu, Clip (constant `min`/`max`), Sigmoid",
    node_types: &[NodeType::Relu, NodeType::Sigmoid, NodeType::Clip],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let node = cx.node;
    let (op, ins) = match node {
        Node::Relu(_) => (UnaryOp::Relu, cx.inputs(1..=1)?),
        Node::Sigmoid(_) => (UnaryOp::Sigmoid, cx.inputs(1..=1)?),
        Node::Clip(n) => {
            let bound = |v: &Option<ClipInput>, name: &str, default: f32| match v {
                None => Ok(default),
                Some(ClipInput::Static(x)) => Ok(*x as f32),
                Some(ClipInput::Runtime(_)) => {
                    Err(cx.attr_error(name, "runtime input", "Clip bounds must be constants"))
                }
            };
            let min = bound(&n.config.min, "min", f32::NEG_INFINITY)?;
            let max = bound(&n.config.max, "max", f32::INFINITY)?;
            (UnaryOp::Clip { min, max }, vec![cx.input(0)?])
        }
        _ => return Err(cx.unsupported()),
    };
    cx.push(Op::Unary(op), ins)
}

/// Output shape of [`Op::Unary`]: its input's.
pub(crate) fn infer_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    Ok(inputs[0].to_vec())
}

/// CPU reference of [`Op::Unary`] (on the physical elements, any layout).
pub(crate) fn reference(op: UnaryOp, inputs: &[Tensor]) -> OpResult {
    reference::elementwise::unary(op, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Relu",
            opset: 14,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[],
            output: &[2, 3, 4],
            ir: &["Relu"],
        },
        Example {
            op_type: "Sigmoid",
            opset: 13,
            inputs: &[Data(&[5])],
            attrs: &[],
            output: &[5],
            ir: &["Sigmoid"],
        },
        // Bounds as inputs (opset 11 on), max omitted.
        Example {
            op_type: "Clip",
            opset: 13,
            inputs: &[Data(&[1, 8]), Scalar(0.0)],
            attrs: &[],
            output: &[1, 8],
            ir: &["Clip"],
        },
        Example {
            op_type: "Clip",
            opset: 13,
            inputs: &[Data(&[1, 8]), Omitted, Scalar(6.0)],
            attrs: &[],
            output: &[1, 8],
            ir: &["Clip"],
        },
        // Bounds as attributes (before opset 11).
        Example {
            op_type: "Clip",
            opset: 6,
            inputs: &[Data(&[2, 2])],
            attrs: &[Float("min", 0.0), Float("max", 6.0)],
            output: &[2, 2],
            ir: &["Clip"],
        },
    ];
}

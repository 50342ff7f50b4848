//! ONNX `Add`, `Sub`, `Mul`, `Div` ([`Op::Binary`]) and the n-ary `Sum`
//! ([`Op::Sum`]), all with numpy broadcasting: the output has the
//! broadcast shape of the inputs. `Sum` accumulates left to right.

use super::OpDef;
use crate::ir::{arity, broadcast, BinaryOp, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Add", "Sub", "Mul", "Div", "Sum"],
    summary: "Add, Sub, Mul, Div, Sum (broadcasting)",
    node_types: &[
        NodeType::Add,
        NodeType::Sub,
        NodeType::Mul,
        NodeType::Div,
        NodeType::Sum,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let op = match cx.node {
        Node::Add(_) => BinaryOp::Add,
        Node::Sub(_) => BinaryOp::Sub,
        Node::Mul(_) => BinaryOp::Mul,
        Node::Div(_) => BinaryOp::Div,
        Node::Sum(_) => {
            let ins = cx.inputs(1..=usize::MAX)?;
            return cx.push(Op::Sum, ins);
        }
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(2..=2)?;
    cx.push(Op::Binary(op), ins)
}

/// Output shape of [`Op::Binary`]: the broadcast of its two inputs.
pub(crate) fn infer_binary_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 2, 2)?;
    broadcast(inputs[0], inputs[1])
}

/// Output shape of [`Op::Sum`]: the broadcast of all its inputs.
pub(crate) fn infer_sum_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, usize::MAX)?;
    inputs[1..]
        .iter()
        .try_fold(inputs[0].to_vec(), |acc, s| broadcast(&acc, s))
}

/// CPU reference of [`Op::Binary`].
pub(crate) fn binary_reference(op: BinaryOp, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::elementwise::binary(op, inputs, out)
}

/// CPU reference of [`Op::Sum`] (in the accumulation type).
pub(crate) fn sum_reference(ctx: &Ctx, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::elementwise::sum(ctx, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    /// `op_type` of a 3-D input and a `[3, 1]` weight, imported as `ir`.
    const fn binary(op_type: &'static str, ir: &'static [&'static str]) -> Example {
        Example {
            op_type,
            opset: 14,
            inputs: &[Data(&[2, 3, 4]), Weight(&[3, 1])],
            attrs: &[],
            output: &[2, 3, 4],
            ir,
        }
    }

    pub(crate) const EXAMPLES: &[Example] = &[
        binary("Add", &["Add"]),
        binary("Sub", &["Sub"]),
        binary("Mul", &["Mul"]),
        binary("Div", &["Div"]),
        Example {
            op_type: "Sum",
            opset: 13,
            inputs: &[Data(&[2, 1, 4]), Data(&[3, 1]), Weight(&[4])],
            attrs: &[],
            output: &[2, 3, 4],
            ir: &["Sum"],
        },
        Example {
            op_type: "Sum",
            opset: 8,
            inputs: &[Data(&[3])],
            attrs: &[],
            output: &[3],
            ir: &["Sum"],
        },
    ];
}

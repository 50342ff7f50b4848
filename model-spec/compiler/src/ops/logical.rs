//! ONNX `And`, `Or`, `Xor` ([`Op::Binary`], numpy broadcasting) and `Not`
//! ([`Op::Unary`]). Booleans are f32 at runtime: any non-zero value reads
//! as true, and the results are 1.0 / 0.0.

use super::OpDef;
use crate::ir::{BinaryOp, Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["And", "Or", "Xor", "Not"],
    summary: "And, Or, Xor (broadcasting), Not (bool as 1.0/0.0)",
    node_types: &[NodeType::And, NodeType::Or, NodeType::Xor, NodeType::Not],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let op = match cx.node {
        Node::And(_) => BinaryOp::And,
        Node::Or(_) => BinaryOp::Or,
        Node::Xor(_) => BinaryOp::Xor,
        Node::Not(_) => {
            let ins = cx.inputs(1..=1)?;
            return cx.push(Op::Unary(UnaryOp::Not), ins);
        }
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(2..=2)?;
    cx.push(Op::Binary(op), ins)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    /// `op_type` of a 2-D input and a broadcast `[3]` weight.
    const fn logical(op_type: &'static str, ir: &'static [&'static str]) -> Example {
        Example {
            op_type,
            opset: 7,
            inputs: &[Data(&[2, 3]), Weight(&[3])],
            attrs: &[],
            output: &[2, 3],
            ir,
        }
    }

    pub(crate) const EXAMPLES: &[Example] = &[
        logical("And", &["And"]),
        logical("Or", &["Or"]),
        logical("Xor", &["Xor"]),
        Example {
            op_type: "Not",
            opset: 1,
            inputs: &[Data(&[2, 3])],
            attrs: &[],
            output: &[2, 3],
            ir: &["Not"],
        },
    ];
}

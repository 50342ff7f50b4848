//! ONNX `Equal`, `Less`, `LessOrEqual`, `Greater` and `GreaterOrEqual`:
//! [`Op::Binary`] with numpy broadcasting, giving 1.0 where the comparison
//! holds and 0.0 elsewhere (ONNX's bool output as f32). Operands compare as
//! their f32 values: integer inputs are exact up to 2^24. String operands
//! are refused where their data are read (an unsupported tensor type).

use super::OpDef;
use crate::ir::{BinaryOp, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"],
    summary: "Equal, Less, LessOrEqual, Greater, GreaterOrEqual (broadcasting; 1.0/0.0 out)",
    node_types: &[
        NodeType::Equal,
        NodeType::Less,
        NodeType::LessOrEqual,
        NodeType::Greater,
        NodeType::GreaterOrEqual,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let op = match cx.node {
        Node::Equal(_) => BinaryOp::Equal,
        Node::Less(_) => BinaryOp::Less,
        Node::LessOrEqual(_) => BinaryOp::LessOrEqual,
        Node::Greater(_) => BinaryOp::Greater,
        Node::GreaterOrEqual(_) => BinaryOp::GreaterOrEqual,
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(2..=2)?;
    cx.push(Op::Binary(op), ins)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    /// `op_type` of a 3-D input and a broadcast `[4]` weight at `opset`.
    const fn compare(op_type: &'static str, opset: i64) -> Example {
        Example {
            op_type,
            opset,
            inputs: &[Data(&[2, 3, 4]), Weight(&[4])],
            attrs: &[],
            output: &[2, 3, 4],
            ir: &[],
        }
    }

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            ir: &["Equal"],
            ..compare("Equal", 13)
        },
        Example {
            ir: &["Less"],
            ..compare("Less", 9)
        },
        Example {
            ir: &["LessOrEqual"],
            ..compare("LessOrEqual", 16)
        },
        Example {
            ir: &["Greater"],
            ..compare("Greater", 13)
        },
        Example {
            ir: &["GreaterOrEqual"],
            ..compare("GreaterOrEqual", 12)
        },
    ];
}

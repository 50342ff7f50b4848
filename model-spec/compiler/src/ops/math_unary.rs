//! ONNX's elementwise math functions `Erf`, `Tanh`, `Exp`, `Log`, `Sqrt`,
//! `Reciprocal`, `Neg`, `Abs`, `Floor`, `Ceil`, `Sin`, `Cos` and `Sign`:
//! [`Op::Unary`] on one input of any shape, no attributes.
//!
//! Values are f32; the transcendental ones are evaluated in f64 and rounded
//! once (`reference::math`), so `Erf` is f32-exact as the decomposed GELU
//! (`x·0.5·(1 + erf(x/√2))`) needs. Out-of-domain inputs give IEEE results
//! (`Log(-1)` and `Sqrt(-1)` are NaN, `Reciprocal(0)` is ∞). Integer-typed
//! inputs (`Abs`, `Neg`, `Sign` of int tensors) compute on their f32 values.

use super::OpDef;
use crate::ir::{Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &[
        "Erf",
        "Tanh",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Floor",
        "Ceil",
        "Sin",
        "Cos",
        "Sign",
    ],
    summary: "Erf, Tanh, Exp, Log, Sqrt, Reciprocal, Neg, Abs, Floor, Ceil, Sin, Cos, Sign",
    node_types: &[
        NodeType::Erf,
        NodeType::Tanh,
        NodeType::Exp,
        NodeType::Log,
        NodeType::Sqrt,
        NodeType::Reciprocal,
        NodeType::Neg,
        NodeType::Abs,
        NodeType::Floor,
        NodeType::Ceil,
        NodeType::Sin,
        NodeType::Cos,
        NodeType::Sign,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let op = match cx.node {
        Node::Erf(_) => UnaryOp::Erf,
        Node::Tanh(_) => UnaryOp::Tanh,
        Node::Exp(_) => UnaryOp::Exp,
        Node::Log(_) => UnaryOp::Log,
        Node::Sqrt(_) => UnaryOp::Sqrt,
        Node::Reciprocal(_) => UnaryOp::Reciprocal,
        Node::Neg(_) => UnaryOp::Neg,
        Node::Abs(_) => UnaryOp::Abs,
        Node::Floor(_) => UnaryOp::Floor,
        Node::Ceil(_) => UnaryOp::Ceil,
        Node::Sin(_) => UnaryOp::Sin,
        Node::Cos(_) => UnaryOp::Cos,
        Node::Sign(_) => UnaryOp::Sign,
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(1..=1)?;
    cx.push(Op::Unary(op), ins)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    /// `op_type` on a 3-D input at `opset`.
    const fn unary(op_type: &'static str, opset: i64, ir: &'static [&'static str]) -> Example {
        Example {
            op_type,
            opset,
            inputs: &[Data(&[2, 3, 4])],
            attrs: &[],
            output: &[2, 3, 4],
            ir,
        }
    }

    pub(crate) const EXAMPLES: &[Example] = &[
        unary("Erf", 13, &["Erf"]),
        unary("Erf", 9, &["Erf"]),
        unary("Tanh", 13, &["Tanh"]),
        unary("Exp", 13, &["Exp"]),
        unary("Log", 13, &["Log"]),
        unary("Sqrt", 13, &["Sqrt"]),
        unary("Reciprocal", 13, &["Reciprocal"]),
        unary("Neg", 13, &["Neg"]),
        unary("Abs", 13, &["Abs"]),
        unary("Floor", 13, &["Floor"]),
        unary("Ceil", 13, &["Ceil"]),
        unary("Sin", 7, &["Sin"]),
        unary("Cos", 7, &["Cos"]),
        unary("Sign", 13, &["Sign"]),
    ];
}

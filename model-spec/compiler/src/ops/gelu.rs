//! ONNX `Gelu` (opset 20): [`Op::Unary`] with [`UnaryOp::Gelu`], elementwise
//! on one input of any shape. `approximate = "none"` (the default) is the
//! exact `x/2 · (1 + erf(x/√2))`; `"tanh"` is
//! `x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))`. Both are evaluated in f64
//! and rounded once. Older exports spell GELU out as `Div`/`Erf`/`Add`/
//! `Mul` nodes, which import op by op (`Erf` in `math_unary`).

use super::OpDef;
use crate::ir::{Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::node::gelu::GeluApproximate;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Gelu"],
    summary: "Gelu (`approximate` none or tanh)",
    node_types: &[NodeType::Gelu],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Gelu(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let tanh = match n.config.approximate {
        GeluApproximate::Exact => false,
        GeluApproximate::Tanh => true,
    };
    let ins = cx.inputs(1..=1)?;
    cx.push(Op::Unary(UnaryOp::Gelu { tanh }), ins)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Gelu",
            opset: 20,
            inputs: &[Data(&[2, 5])],
            attrs: &[],
            output: &[2, 5],
            ir: &["Gelu"],
        },
        Example {
            op_type: "Gelu",
            opset: 20,
            inputs: &[Data(&[2, 5])],
            attrs: &[Str("approximate", "tanh")],
            output: &[2, 5],
            ir: &["Gelu"],
        },
    ];

    #[test]
    fn approximate_selects_the_formula() {
        use crate::ir::{Op, UnaryOp};
        use crate::onnx::{import_bytes, ImportOptions};
        for (example, tanh) in EXAMPLES.iter().zip([false, true]) {
            let g = import_bytes(&example.model(), "gelu", &ImportOptions::default()).unwrap();
            assert_eq!(g.graph.nodes[0].op, Op::Unary(UnaryOp::Gelu { tanh }));
        }
    }
}

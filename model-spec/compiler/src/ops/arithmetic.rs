//! ONNX `Add`, `Sub`, `Mul`, `Div`, `Pow`, `Mod` ([`Op::Binary`]), the
//! n-ary `Sum` ([`Op::Sum`]) and the n-ary `Max`/`Min`, all with numpy
//! broadcasting: the output has the broadcast shape of the inputs. `Sum`
//! accumulates left to right. `Max`/`Min` of n inputs import as a left to
//! right chain of n − 1 binary nodes (one input: `Identity`), split before
//! onnx-ir parses them ([`split_variadic_extrema`]); they propagate NaN like
//! numpy's `maximum`. `Pow` is computed in f64 and
//! rounded once. `Mod` honours `fmod`: 1 is C's `fmod` (sign of the
//! dividend), 0 the integer `Mod` (sign of the divisor), applied to the f32
//! values (integer inputs are exact up to 2^24). `Div` of integer tensors
//! truncates toward zero (a `Div` then an integer `Cast`).

use super::OpDef;
use crate::ir::{arity, broadcast, BinaryOp, CastTarget, Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::{GraphProto, Node, NodeProto, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &[
        "Add", "Sub", "Mul", "Div", "Sum", "Pow", "Max", "Min", "Mod",
    ],
    summary: "Add, Sub, Mul, Div, Sum, Pow, Max, Min, Mod (`fmod`) (broadcasting; \
              Sum/Max/Min n-ary)",
    node_types: &[
        NodeType::Add,
        NodeType::Sub,
        NodeType::Mul,
        NodeType::Div,
        NodeType::Sum,
        NodeType::Pow,
        NodeType::Max,
        NodeType::Min,
        NodeType::Mod,
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
        Node::Pow(_) => BinaryOp::Pow,
        Node::Mod(n) => BinaryOp::Mod {
            fmod: n.config.fmod,
        },
        Node::Sum(_) => {
            let ins = cx.inputs(1..=usize::MAX)?;
            return cx.push(Op::Sum, ins);
        }
        Node::Max(_) => BinaryOp::Max,
        Node::Min(_) => BinaryOp::Min,
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(2..=2)?;
    // onnx-ir types shape arithmetic (`Shape` → `Div`) as a shape: int64.
    let int_out = cx.node.outputs().first().is_some_and(|o| match &o.ty {
        onnx_ir::ArgType::Shape(_) => true,
        t => t.elem_type().is_int() || t.elem_type().is_uint(),
    });
    if op == BinaryOp::Div && int_out {
        // Integer division truncates: the f32 quotient of integers below
        // 2^24 is never rounded onto an integer it is not, so truncating
        // it is exact.
        let (name, output) = (
            format!("{}_quotient", cx.name()),
            format!("{}_quotient", cx.output_name()),
        );
        let q = cx.push_named(&name, Op::Binary(op), ins, &output)?;
        return cx.push(Op::Unary(UnaryOp::Cast(CastTarget::Int)), vec![q]);
    }
    cx.push(Op::Binary(op), ins)
}

/// Rewrites every default-domain `Max`/`Min` node of `graph` that does
/// not have two inputs, before onnx-ir (which takes exactly two) parses it:
/// one input becomes `Identity`, n > 2 a left-to-right chain of n − 1
/// two-input nodes, the last keeping the node's name and output, the others
/// named `<node>_<i>` writing `<output>_<op><i>`. Order is kept, so the
/// graph stays topologically sorted.
pub(crate) fn split_variadic_extrema(graph: &mut GraphProto) {
    let nodes = std::mem::take(&mut graph.node);
    for mut node in nodes {
        let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
        let extremum = node.op_type == "Max" || node.op_type == "Min";
        let n = node.input.len();
        if !default_domain || !extremum || n == 2 || node.output.is_empty() {
            graph.node.push(node);
            continue;
        }
        if n == 1 {
            node.op_type = "Identity".into();
            graph.node.push(node);
            continue;
        }
        let inputs = std::mem::take(&mut node.input);
        let mut acc = inputs[0].clone();
        for (i, x) in inputs[1..n - 1].iter().enumerate() {
            let output = format!("{}_{}{}", node.output[0], node.op_type, i + 1);
            graph.node.push(NodeProto {
                name: format!("{}_{}", node.name, i + 1),
                input: vec![acc, x.clone()],
                output: vec![output.clone()],
                ..node.clone()
            });
            acc = output;
        }
        node.input = vec![acc, inputs[n - 1].clone()];
        graph.node.push(node);
    }
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
    use crate::ops::example::{Attr::*, Example, Input::*};

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
        binary("Pow", &["Pow"]),
        Example {
            op_type: "Pow",
            opset: 7,
            inputs: &[Data(&[2, 3]), Scalar(2.0)],
            attrs: &[],
            output: &[2, 3],
            ir: &["Pow"],
        },
        binary("Mod", &["Mod"]),
        Example {
            op_type: "Mod",
            opset: 13,
            inputs: &[Data(&[2, 3]), Weight(&[3])],
            attrs: &[Int("fmod", 1)],
            output: &[2, 3],
            ir: &["Mod"],
        },
        binary("Max", &["Max"]),
        binary("Min", &["Min"]),
        Example {
            op_type: "Max",
            opset: 13,
            inputs: &[Data(&[3]), Data(&[2, 1]), Weight(&[3])],
            attrs: &[],
            output: &[2, 3],
            ir: &["Max", "Max"],
        },
        Example {
            op_type: "Min",
            opset: 8,
            inputs: &[Data(&[4])],
            attrs: &[],
            output: &[4],
            ir: &["Identity"],
        },
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

    #[test]
    fn mod_keeps_fmod_and_max_chains_left_to_right() {
        use crate::ir::{BinaryOp, Op};
        use crate::onnx::{import_bytes, ImportOptions};
        let import = |e: &Example| {
            import_bytes(&e.model(), "arith", &ImportOptions::default())
                .unwrap()
                .graph
        };
        let fmod = EXAMPLES
            .iter()
            .find(|e| e.op_type == "Mod" && !e.attrs.is_empty());
        let g = import(fmod.unwrap());
        assert_eq!(g.nodes[0].op, Op::Binary(BinaryOp::Mod { fmod: true }));
        let g = import(&binary("Mod", &["Mod"]));
        assert_eq!(g.nodes[0].op, Op::Binary(BinaryOp::Mod { fmod: false }));
        let max3 = EXAMPLES
            .iter()
            .find(|e| e.op_type == "Max" && e.inputs.len() == 3);
        let g = import(max3.unwrap());
        // The second node reads the first's output and the third input.
        assert_eq!(g.nodes[1].inputs[0], g.nodes[0].output);
        assert_eq!(g.value(g.nodes[0].inputs[0]).shape, [3]);
        assert_eq!(g.value(g.nodes[1].inputs[1]).shape, [3]);
    }
}

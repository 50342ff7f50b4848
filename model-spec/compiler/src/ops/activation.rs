//! ONNX's pointwise activations `Relu`, `Sigmoid`, `Clip`, `HardSigmoid`,
//! `HardSwish`, `LeakyRelu`, `Elu`, `Selu`, `Softplus`, `Softsign` and
//! `Mish`: [`Op::Unary`], elementwise on one input of any shape.
//!
//! `Clip` takes its bounds as attributes `min`/`max` before opset 11 and as
//! optional inputs from opset 11; either way they must be constants (a
//! missing bound is ±∞). `HardSigmoid` (`alpha`, `beta`), `LeakyRelu` and
//! `Elu` (`alpha`) and `Selu` (`alpha`, `gamma`) keep their attributes,
//! with the spec's defaults where absent (onnx-ir fills them in). The
//! smooth ones are evaluated in f64 and rounded once (`reference::math`).

use super::{const_input, OpDef};
use crate::ir::{arity, Op, UnaryOp, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::clip::ClipInput;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &[
        "Relu",
        "Clip",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "LeakyRelu",
        "Elu",
        "Selu",
        "Softplus",
        "Softsign",
        "Mish",
    ],
    summary: "Relu, Clip (constant `min`/`max`), Sigmoid, HardSigmoid, HardSwish, LeakyRelu, \
              Elu, Selu, Softplus, Softsign, Mish",
    node_types: &[
        NodeType::Relu,
        NodeType::Sigmoid,
        NodeType::Clip,
        NodeType::HardSigmoid,
        NodeType::HardSwish,
        NodeType::LeakyRelu,
        NodeType::Elu,
        NodeType::Selu,
        NodeType::Softplus,
        NodeType::Softsign,
        NodeType::Mish,
    ],
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
            let min = clip_bound(cx, &n.config.min, "min", f32::NEG_INFINITY)?;
            let max = clip_bound(cx, &n.config.max, "max", f32::INFINITY)?;
            (UnaryOp::Clip { min, max }, vec![cx.input(0)?])
        }
        Node::HardSigmoid(n) => {
            let (alpha, beta) = (n.config.alpha as f32, n.config.beta as f32);
            (UnaryOp::HardSigmoid { alpha, beta }, cx.inputs(1..=1)?)
        }
        Node::HardSwish(_) => (UnaryOp::HardSwish, cx.inputs(1..=1)?),
        Node::LeakyRelu(n) => {
            let alpha = n.config.alpha as f32;
            (UnaryOp::LeakyRelu { alpha }, cx.inputs(1..=1)?)
        }
        Node::Elu(n) => {
            let alpha = n.config.alpha as f32;
            (UnaryOp::Elu { alpha }, cx.inputs(1..=1)?)
        }
        Node::Selu(n) => {
            let (alpha, gamma) = (n.config.alpha as f32, n.config.gamma as f32);
            (UnaryOp::Selu { alpha, gamma }, cx.inputs(1..=1)?)
        }
        Node::Softplus(_) => (UnaryOp::Softplus, cx.inputs(1..=1)?),
        Node::Softsign(_) => (UnaryOp::Softsign, cx.inputs(1..=1)?),
        Node::Mish(_) => (UnaryOp::Mish, cx.inputs(1..=1)?),
        _ => return Err(cx.unsupported()),
    };
    cx.push(Op::Unary(op), ins)
}

/// Output shape of [`Op::Unary`] (every unary op of every module): its
/// input's.
pub(crate) fn infer_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    Ok(inputs[0].to_vec())
}

/// CPU reference of [`Op::Unary`] (on the physical elements, any layout).
pub(crate) fn reference(op: UnaryOp, inputs: &[Tensor]) -> OpResult {
    reference::elementwise::unary(op, inputs)
}

/// One of Clip's bounds: absent (`default`), an attribute or a constant
/// input holding one number.
fn clip_bound(
    cx: &mut NodeImport,
    bound: &Option<ClipInput>,
    name: &str,
    default: f32,
) -> Result<f32, ImportError> {
    match bound {
        None => Ok(default),
        Some(ClipInput::Static(x)) => Ok(*x as f32),
        Some(ClipInput::Runtime(r)) => match const_input::floats(cx, r.input_index, name)?[..] {
            [v] => Ok(v),
            ref v => Err(cx.attr_error(name, v, "a Clip bound is one number")),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    /// `op_type` with `attrs` on a 4-D input at `opset`.
    const fn act(
        op_type: &'static str,
        opset: i64,
        attrs: &'static [crate::ops::example::Attr],
    ) -> Example {
        Example {
            op_type,
            opset,
            inputs: &[Data(&[1, 3, 2, 2])],
            attrs,
            output: &[1, 3, 2, 2],
            ir: &[],
        }
    }

    /// [`act`] importing as the IR op of the same name.
    const fn named(
        op_type: &'static str,
        ir: &'static [&'static str],
        opset: i64,
        attrs: &'static [crate::ops::example::Attr],
    ) -> Example {
        Example {
            ir,
            ..act(op_type, opset, attrs)
        }
    }

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
        named("HardSigmoid", &["HardSigmoid"], 6, &[]),
        named(
            "HardSigmoid",
            &["HardSigmoid"],
            6,
            &[Float("alpha", 0.5), Float("beta", 0.6)],
        ),
        named("HardSwish", &["HardSwish"], 14, &[]),
        named("LeakyRelu", &["LeakyRelu"], 16, &[]),
        named("LeakyRelu", &["LeakyRelu"], 6, &[Float("alpha", 0.1)]),
        named("Elu", &["Elu"], 6, &[Float("alpha", 2.0)]),
        named("Selu", &["Selu"], 6, &[]),
        named(
            "Selu",
            &["Selu"],
            6,
            &[Float("alpha", 2.0), Float("gamma", 3.0)],
        ),
        named("Softplus", &["Softplus"], 1, &[]),
        named("Softsign", &["Softsign"], 1, &[]),
        named("Mish", &["Mish"], 18, &[]),
    ];

    #[test]
    fn attributes_and_defaults_reach_the_ir() {
        use crate::ir::{Op, UnaryOp};
        use crate::onnx::{import_bytes, ImportOptions};
        let op_of = |e: &Example| {
            let g = import_bytes(&e.model(), "act", &ImportOptions::default()).unwrap();
            g.graph.nodes[0].op.clone()
        };
        let hs = named("HardSigmoid", &[], 6, &[]);
        assert_eq!(
            op_of(&hs),
            Op::Unary(UnaryOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.5
            })
        );
        let leaky = named("LeakyRelu", &[], 16, &[]);
        assert_eq!(op_of(&leaky), Op::Unary(UnaryOp::LeakyRelu { alpha: 0.01 }));
        let elu = named("Elu", &[], 6, &[]);
        assert_eq!(op_of(&elu), Op::Unary(UnaryOp::Elu { alpha: 1.0 }));
        let selu = named("Selu", &[], 6, &[Float("alpha", 2.0), Float("gamma", 3.0)]);
        assert_eq!(
            op_of(&selu),
            Op::Unary(UnaryOp::Selu {
                alpha: 2.0,
                gamma: 3.0
            })
        );
    }
}

//! ONNX `BatchNormalization`, inference form: [`Op::BatchNorm`],
//! `y = (x − mean) / sqrt(var + epsilon) · scale + bias` per channel
//! (axis 1). Inputs x `[N, C, …]`, then scale, bias, mean and var, each
//! `[C]`; the training outputs (running mean and var) are rejected.
//!
//! `epsilon` defaults to 1e-5 by the spec but to 0 in onnx-ir 0.22, so
//! [`fix_proto`] writes the spec's default on nodes that omit it.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, Tensor};
use onnx_ir::node::batch_norm::BatchNormConfig;
use onnx_ir::{Node, NodeProto, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["BatchNormalization"],
    summary: "BatchNormalization (inference form)",
    node_types: &[NodeType::BatchNormalization],
    import,
    fix_proto: Some(fix_proto),
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

/// ONNX's default `epsilon` (1e-5), written where the node omits it.
fn fix_proto(node: &mut NodeProto) {
    if !node.attribute.iter().any(|a| a.name == "epsilon") {
        node.attribute.push(onnx_ir::AttributeProto {
            name: "epsilon".into(),
            type_: onnx_ir::AttributeType::FLOAT.into(),
            f: 1e-5,
            ..Default::default()
        });
    }
}

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::BatchNormalization(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let epsilon = match &n.config {
        BatchNormConfig::Static(c) => c.epsilon,
        BatchNormConfig::Runtime(c) => c.epsilon,
    };
    let op = Op::BatchNorm {
        epsilon: epsilon as f32,
    };
    let ins = cx.inputs(5..=5)?;
    cx.push(op, ins)
}

/// Output shape of [`Op::BatchNorm`]: x's, each parameter `[C]`.
pub(crate) fn infer_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 5, 5)?;
    let x = inputs[0];
    if x.len() < 2 {
        return Err(format!("BatchNormalization input {x:?} needs rank ≥ 2"));
    }
    for (i, p) in inputs[1..].iter().enumerate() {
        if *p != [x[1]] {
            return Err(format!(
                "BatchNormalization parameter {} has shape {p:?}, expected [{}]",
                i + 1,
                x[1]
            ));
        }
    }
    Ok(x.to_vec())
}

/// CPU reference of [`Op::BatchNorm`].
pub(crate) fn reference(ctx: &Ctx, epsilon: f32, inputs: &[Tensor]) -> OpResult {
    reference::elementwise::batch_norm(ctx, epsilon, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    const PARAMS: [crate::ops::example::Input; 4] =
        [Weight(&[3]), Weight(&[3]), Weight(&[3]), Weight(&[3])];

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "BatchNormalization",
            opset: 15,
            inputs: &[
                Data(&[2, 3, 4, 4]),
                PARAMS[0],
                PARAMS[1],
                PARAMS[2],
                PARAMS[3],
            ],
            attrs: &[Float("epsilon", 1e-3)],
            output: &[2, 3, 4, 4],
            ir: &["BatchNormalization"],
        },
        // No epsilon: the spec's 1e-5, written by `fix_proto`.
        Example {
            op_type: "BatchNormalization",
            opset: 9,
            inputs: &[Data(&[1, 3, 5]), PARAMS[0], PARAMS[1], PARAMS[2], PARAMS[3]],
            attrs: &[],
            output: &[1, 3, 5],
            ir: &["BatchNormalization"],
        },
    ];

    #[test]
    fn a_missing_epsilon_gets_the_specs_default() {
        let mut node = onnx_ir::NodeProto::default();
        super::fix_proto(&mut node);
        assert_eq!(node.attribute.len(), 1);
        assert_eq!(
            (node.attribute[0].name.as_str(), node.attribute[0].f),
            ("epsilon", 1e-5)
        );
        super::fix_proto(&mut node);
        assert_eq!(node.attribute.len(), 1);
    }
}

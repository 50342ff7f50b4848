//! ONNX `Concat`: [`Op::Concat`], its inputs joined along `axis`
//! (negative counts from the end); every other dimension must agree.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, OutSpec, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Concat"],
    summary: "Concat",
    node_types: &[NodeType::Concat],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Concat(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let op = Op::Concat {
        axis: n.config.axis,
    };
    let mut ins = cx.inputs(1..=usize::MAX)?;
    // ONNX has no rank-0 Concat inputs; one here is a shape element whose
    // `Reshape(s, [-1])` onnx-ir dropped as a no-op (seen in dynamo exports
    // with a dynamic batch). Among vectors it is the one-element vector.
    let vectors = ins.iter().any(|&v| cx.shape(v).len() == 1);
    for (k, v) in ins.iter_mut().enumerate() {
        if vectors && cx.shape(*v).is_empty() {
            let reshape = Op::Reshape {
                shape: vec![1],
                allowzero: false,
            };
            let name = format!("{}/vector{k}", cx.name());
            *v = cx.push_named(&name.clone(), reshape, vec![*v], &name)?;
        }
    }
    // Empty constants (sliced-off shape vectors) add nothing.
    if ins.len() > 1 {
        let empty = |cx: &NodeImport, v| cx.constant(v).is_some() && cx.shape(v).contains(&0);
        let kept: Vec<ValueId> = ins.iter().copied().filter(|&v| !empty(cx, v)).collect();
        if !kept.is_empty() {
            ins = kept;
        }
    }
    cx.push(op, ins)
}

/// Output shape of [`Op::Concat`]: the first input's, with the sum of the
/// inputs' `axis` dimensions.
pub(crate) fn infer_shape(axis: usize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, usize::MAX)?;
    let first = inputs[0];
    if axis >= first.len() {
        return Err(format!("Concat axis {axis} out of range for {first:?}"));
    }
    let mut out = first.to_vec();
    for s in &inputs[1..] {
        let same_rest = s.len() == first.len()
            && s.iter()
                .zip(first)
                .enumerate()
                .all(|(i, (a, b))| i == axis || a == b);
        if !same_rest {
            return Err(format!(
                "Concat inputs {first:?} and {s:?} differ off axis {axis}"
            ));
        }
        out[axis] += s[axis];
    }
    Ok(out)
}

/// CPU reference of [`Op::Concat`] (row-major).
pub(crate) fn reference(axis: usize, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::shape_ops::concat(axis, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Concat",
            opset: 13,
            inputs: &[Data(&[2, 3, 4]), Data(&[2, 1, 4]), Weight(&[2, 2, 4])],
            attrs: &[Int("axis", 1)],
            output: &[2, 6, 4],
            ir: &["Concat"],
        },
        Example {
            op_type: "Concat",
            opset: 11,
            inputs: &[Data(&[2, 3]), Data(&[2, 5])],
            attrs: &[Int("axis", -1)],
            output: &[2, 8],
            ir: &["Concat"],
        },
    ];
}

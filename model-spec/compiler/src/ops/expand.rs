//! ONNX `Expand` with a constant shape: [`Op::Expand`], the input
//! broadcast (numpy rules) against the shape; the output shape is the
//! broadcast of both, so a 1 in the shape keeps the input's dimension.

use super::{const_input, OpDef};
use crate::ir::{arity, broadcast, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::expand::ExpandConfig;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Expand"],
    summary: "Expand (constant shape)",
    node_types: &[NodeType::Expand],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Expand(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let target = match &n.config {
        ExpandConfig::Static(shape) => shape.clone(),
        ExpandConfig::Runtime(r) => const_input::required_ints(cx, r.input_index, "shape")?,
    };
    let x = cx.input(0)?;
    let dims: Vec<usize> = target
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| cx.attr_error("shape", &target, "dimensions must be at least 1"))?;
    let shape = broadcast(cx.shape(x), &dims).map_err(|e| cx.attr_error("shape", &target, &e))?;
    cx.push(Op::Expand { shape }, vec![x])
}

/// Output shape of [`Op::Expand`]: `shape`, which the input must
/// broadcast to.
pub(crate) fn infer_shape(shape: &[usize], inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    if broadcast(inputs[0], shape)? != shape {
        return Err(format!("{:?} does not expand to {shape:?}", inputs[0]));
    }
    Ok(shape.to_vec())
}

/// CPU reference of [`Op::Expand`]: a strided copy, broadcast axes with
/// stride 0.
pub(crate) fn reference(shape: &[usize], inputs: &[Tensor]) -> OpResult {
    reference::strided::expand(shape, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[Example {
        op_type: "Expand",
        opset: 13,
        inputs: &[Data(&[3, 1]), Int64s(&[2, 1, 4])],
        attrs: &[],
        output: &[2, 3, 4],
        ir: &["Expand"],
    }];

    #[test]
    fn expand_shape_must_be_the_broadcast() {
        assert_eq!(infer_shape(&[2, 3, 4], &[&[3, 1]]), Ok(vec![2, 3, 4]));
        assert!(infer_shape(&[3, 1], &[&[3, 4]]).is_err());
    }
}

//! ONNX `Identity`: [`Op::Identity`], its input unchanged. A view: the
//! memory plan may alias it. The importer also adds one where a graph
//! output would otherwise be a graph input or a constant.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Identity"],
    summary: "Identity",
    node_types: &[NodeType::Identity],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Identity(_) = cx.node else {
        return Err(cx.unsupported());
    };
    let ins = cx.inputs(1..=1)?;
    cx.push(Op::Identity, ins)
}

/// Output shape of [`Op::Identity`]: its input's.
pub(crate) fn infer_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    Ok(inputs[0].to_vec())
}

/// CPU reference of [`Op::Identity`]: a row-major copy.
pub(crate) fn reference(inputs: &[Tensor]) -> OpResult {
    reference::shape_ops::copy(inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[Example {
        op_type: "Identity",
        opset: 16,
        inputs: &[Data(&[3, 2])],
        attrs: &[],
        output: &[3, 2],
        ir: &["Identity"],
    }];
}

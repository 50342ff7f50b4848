//! ONNX `GlobalAveragePool` and `GlobalMaxPool`: [`Op::GlobalAveragePool`]
//! and [`Op::GlobalMaxPool`], the mean or max over every spatial position.
//! Input x `[N, C, D1, …]` (rank ≥ 3); output `[N, C, 1, …]`.

use super::OpDef;
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::pool::{global_pool, Global};
use crate::reference::{Ctx, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["GlobalAveragePool", "GlobalMaxPool"],
    summary: "GlobalAveragePool, GlobalMaxPool",
    node_types: &[NodeType::GlobalAveragePool, NodeType::GlobalMaxPool],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let op = match cx.node {
        Node::GlobalAveragePool(_) => Op::GlobalAveragePool,
        Node::GlobalMaxPool(_) => Op::GlobalMaxPool,
        _ => return Err(cx.unsupported()),
    };
    let ins = cx.inputs(1..=1)?;
    cx.push(op, ins)
}

/// Output shape of both global pools: every spatial dimension becomes 1.
pub(crate) fn infer_shape(inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = inputs[0];
    if x.len() < 3 {
        return Err(format!("global pool input {x:?} needs rank ≥ 3"));
    }
    let mut out = x.to_vec();
    out[2..].iter_mut().for_each(|d| *d = 1);
    Ok(out)
}

/// CPU reference of [`Op::GlobalAveragePool`] (sums in the accumulation type).
pub(crate) fn average_reference(ctx: &Ctx, inputs: &[Tensor]) -> OpResult {
    global_pool(ctx, Global::Average, inputs)
}

/// CPU reference of [`Op::GlobalMaxPool`].
pub(crate) fn max_reference(ctx: &Ctx, inputs: &[Tensor]) -> OpResult {
    global_pool(ctx, Global::Max, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "GlobalAveragePool",
            opset: 1,
            inputs: &[Data(&[2, 3, 5, 5])],
            attrs: &[],
            output: &[2, 3, 1, 1],
            ir: &["GlobalAveragePool"],
        },
        Example {
            op_type: "GlobalMaxPool",
            opset: 1,
            inputs: &[Data(&[1, 4, 3, 2, 2])],
            attrs: &[],
            output: &[1, 4, 1, 1, 1],
            ir: &["GlobalMaxPool"],
        },
    ];
}

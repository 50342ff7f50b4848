//! ONNX `GatherND` with constant indices and `batch_dims` 0:
//! [`Op::GatherNd`], the slices of `data` addressed by index tuples (the
//! last axis of `indices`). Exporters write it for table lookups with a
//! constant index (Swin V2's relative position bias), folded at import when
//! the table is constant too.

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["GatherND"],
    summary: "GatherND (constant indices, `batch_dims` 0)",
    node_types: &[NodeType::GatherND],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::GatherND(n) = cx.node else {
        return Err(cx.unsupported());
    };
    if n.config.batch_dims != 0 {
        return Err(cx.attr_error("batch_dims", n.config.batch_dims, "only 0 is supported"));
    }
    let data = cx.input(0)?;
    let (indices_shape, indices) = const_input::ints(cx, 1, "indices")?
        .ok_or_else(|| cx.input_error("indices", "GatherND needs its indices"))?;
    let op = Op::GatherNd {
        indices,
        indices_shape,
    };
    cx.push(op, vec![data])
}

/// Output shape of [`Op::GatherNd`]: `indices_shape[..-1] ++ data[k..]`
/// for index tuples of `k` entries.
pub(crate) fn infer_shape(
    indices: &[i64],
    indices_shape: &[usize],
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let data = inputs[0];
    crate::ops::scatter_nd::offsets(data, indices, indices_shape)?;
    let k = *indices_shape.last().unwrap_or(&0);
    let out = [&indices_shape[..indices_shape.len() - 1], &data[k..]].concat();
    if out.contains(&0) {
        return Err(format!(
            "GatherND of indices {indices_shape:?} from {data:?} is empty"
        ));
    }
    Ok(out)
}

/// CPU reference of [`Op::GatherNd`].
pub(crate) fn reference(indices: &[i64], indices_shape: &[usize], inputs: &[Tensor]) -> OpResult {
    reference::gather::gather_nd(indices, indices_shape, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[Example {
        op_type: "GatherND",
        opset: 13,
        inputs: &[Data(&[4, 3]), Int64s(&[2])],
        attrs: &[],
        output: &[3],
        ir: &["GatherND"],
    }];

    #[test]
    fn the_output_is_the_index_batch_then_the_slice() {
        assert_eq!(
            infer_shape(&[1, 3, 0, 2], &[2, 2], &[&[4, 5, 6]]),
            Ok(vec![2, 6])
        );
        assert_eq!(infer_shape(&[1], &[1, 1], &[&[4, 5]]), Ok(vec![1, 5]));
        assert!(infer_shape(&[9], &[1, 1], &[&[4, 5]]).is_err());
    }
}

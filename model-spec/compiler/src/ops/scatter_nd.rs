//! ONNX `ScatterND` with constant indices: [`Op::ScatterNd`], a copy of
//! `data` with the slices addressed by `indices` replaced by (or reduced
//! with) `updates`. Exporters write it for masked assignment (`m[:, a:b] =
//! v`, Swin's shifted-window mask), which is folded at import when `data`
//! and `updates` are constants too.

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ScatterReduction, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::scatter_nd::ScatterNDReduction;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["ScatterND"],
    summary: "ScatterND (constant indices; reductions none, add, mul, max, min)",
    node_types: &[NodeType::ScatterND],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::ScatterND(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let reduction = match n.config.reduction {
        ScatterNDReduction::None => ScatterReduction::None,
        ScatterNDReduction::Add => ScatterReduction::Add,
        ScatterNDReduction::Mul => ScatterReduction::Mul,
        ScatterNDReduction::Max => ScatterReduction::Max,
        ScatterNDReduction::Min => ScatterReduction::Min,
    };
    let data = cx.input(0)?;
    let (indices_shape, indices) = const_input::ints(cx, 1, "indices")?
        .ok_or_else(|| cx.input_error("indices", "ScatterND needs its indices"))?;
    let updates = cx.input(2)?;
    let op = Op::ScatterNd {
        indices,
        indices_shape,
        reduction,
    };
    cx.push(op, vec![data, updates])
}

/// Output shape of [`Op::ScatterNd`]: `data`'s, once the indices and the
/// updates are checked against it.
pub(crate) fn infer_shape(
    indices: &[i64],
    indices_shape: &[usize],
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 2, 2)?;
    let (data, updates) = (inputs[0], inputs[1]);
    offsets(data, indices, indices_shape)?;
    let (q, k) = (indices_shape.len(), *indices_shape.last().unwrap_or(&0));
    let want = [&indices_shape[..q - 1], &data[k..]].concat();
    if updates != want.as_slice() {
        return Err(format!(
            "updates of shape {updates:?} for indices {indices_shape:?} into {data:?} (want {want:?})"
        ));
    }
    Ok(data.to_vec())
}

/// The row-major offset of each addressed slice of `data`, its indices
/// resolved (negative count from the end) and range-checked.
pub(crate) fn offsets(
    data: &[usize],
    indices: &[i64],
    indices_shape: &[usize],
) -> Result<Vec<usize>, String> {
    let Some(&k) = indices_shape.last() else {
        return Err("ScatterND indices must have rank ≥ 1".into());
    };
    if k == 0 || k > data.len() {
        return Err(format!(
            "indices of shape {indices_shape:?} address {k} axes of a rank-{} input",
            data.len()
        ));
    }
    if indices.len() != indices_shape.iter().product::<usize>() {
        return Err(format!(
            "{} indices for an index shape {indices_shape:?}",
            indices.len()
        ));
    }
    let slice: usize = data[k..].iter().product();
    indices
        .chunks(k)
        .map(|tuple| {
            tuple.iter().zip(data).try_fold(0usize, |acc, (&i, &dim)| {
                let r = crate::ops::gather::resolve(i, dim)
                    .ok_or_else(|| format!("index {i} out of range for an axis of {dim}"))?;
                Ok(acc * dim + r)
            })
        })
        .map(|r| r.map(|o: usize| o * slice))
        .collect()
}

/// CPU reference of [`Op::ScatterNd`].
pub(crate) fn reference(
    indices: &[i64],
    indices_shape: &[usize],
    reduction: ScatterReduction,
    inputs: &[Tensor],
) -> OpResult {
    reference::scatter::scatter_nd(indices, indices_shape, reduction, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[Example {
        op_type: "ScatterND",
        opset: 16,
        inputs: &[Data(&[4, 3]), Int64s(&[1, 2]), Scalar(5.0)],
        attrs: &[],
        output: &[4, 3],
        ir: &["ScatterND"],
    }];

    #[test]
    fn indices_and_updates_are_checked_against_the_data() {
        assert_eq!(
            infer_shape(&[1, 3], &[2, 1], &[&[4, 3], &[2, 3]]),
            Ok(vec![4, 3])
        );
        assert_eq!(
            infer_shape(&[1, 2], &[1, 2], &[&[4, 3], &[1]]),
            Ok(vec![4, 3])
        );
        assert!(infer_shape(&[4], &[1, 1], &[&[4, 3], &[1, 3]]).is_err());
        assert!(infer_shape(&[1], &[1, 1], &[&[4, 3], &[2, 3]]).is_err());
        assert_eq!(offsets(&[4, 3], &[1, -1], &[2, 1]), Ok(vec![3, 9]));
    }
}

//! Gather along one axis: output block `(outer, j)` is input block
//! `(outer, indices[j])`, each block the `inner` elements after the axis,
//! on the input's logical row-major data.

use super::op_io::{input, OpError, OpResult, Output, Tensor};

/// `x` indexed by `indices` (negative count from the end) along `axis`.
pub(crate) fn gather(axis: usize, indices: &[i64], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let dim = *x
        .shape
        .get(axis)
        .ok_or_else(|| OpError(format!("axis {axis} out of range for {:?}", x.shape)))?;
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let rows: Vec<usize> = indices
        .iter()
        .map(|&i| {
            crate::ops::gather::resolve(i, dim)
                .ok_or_else(|| OpError(format!("index {i} out of range for {dim} elements")))
        })
        .collect::<Result<_, _>>()?;
    let data = x.row_major();
    let mut out = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &r in &rows {
            out.extend_from_slice(&data[(o * dim + r) * inner..][..inner]);
        }
    }
    Ok(Output::row_major(out))
}

/// ONNX GatherND (`batch_dims` 0): the slice of `x` each index tuple (the
/// last axis of `indices`) addresses, in index order.
pub(crate) fn gather_nd(indices: &[i64], indices_shape: &[usize], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let offsets =
        crate::ops::scatter_nd::offsets(x.shape, indices, indices_shape).map_err(OpError)?;
    let k = indices_shape.last().copied().unwrap_or(0);
    let slice: usize = x.shape[k..].iter().product();
    let data = x.row_major();
    let mut out = Vec::with_capacity(offsets.len() * slice);
    for at in offsets {
        out.extend_from_slice(&data[at..at + slice]);
    }
    Ok(Output::row_major(out))
}

#[cfg(test)]
mod tests {
    use crate::ir::Op;
    use crate::reference::testing::run1;
    use crate::test_graphs::Builder;

    #[test]
    fn gathers_rows_of_the_middle_axis() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 2]);
        let op = Op::Gather {
            axis: 1,
            indices: vec![2, -3],
            indices_shape: vec![2],
        };
        let y = b.op(op, &[x]);
        b.output(y);
        let graph = b.finish();
        let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let want = [4.0, 5.0, 0.0, 1.0, 10.0, 11.0, 6.0, 7.0];
        assert_eq!(run1(&graph, &[&data]), want);
    }
}

//! ScatterND: a copy of `data` whose addressed slices are replaced by, or
//! reduced with, the rows of `updates`, in index order.

use super::op_io::{input, OpError, OpResult, Output, Tensor};
use crate::ir::ScatterReduction;
use crate::ops::scatter_nd::offsets;

/// `inputs` are data and updates; `indices` (shape `indices_shape`) are
/// tuples addressing `data`'s leading axes.
pub(crate) fn scatter_nd(
    indices: &[i64],
    indices_shape: &[usize],
    reduction: ScatterReduction,
    inputs: &[Tensor],
) -> OpResult {
    let (data, updates) = (input(inputs, 0)?, input(inputs, 1)?);
    let offsets = offsets(data.shape, indices, indices_shape).map_err(OpError)?;
    let mut out = data.row_major().into_owned();
    let updates = updates.row_major();
    let slice = updates.len().checked_div(offsets.len()).unwrap_or(0);
    for (row, &at) in offsets.iter().enumerate() {
        let src = &updates[row * slice..][..slice];
        for (o, &u) in out[at..at + slice].iter_mut().zip(src) {
            *o = reduction.apply(*o, u);
        }
    }
    Ok(Output::row_major(out))
}

#[cfg(test)]
mod tests {
    use crate::ir::{Op, ScatterReduction};
    use crate::test_graphs::Builder;

    #[test]
    fn rows_are_replaced_or_added_in_index_order() {
        let mut b = Builder::new();
        let data = b.input("data", &[3, 2]);
        let updates = b.input("updates", &[2, 2]);
        let op = |reduction| Op::ScatterNd {
            indices: vec![2, 2],
            indices_shape: vec![2, 1],
            reduction,
        };
        let y = b.op(op(ScatterReduction::None), &[data, updates]);
        let z = b.op(op(ScatterReduction::Add), &[data, updates]);
        b.output(y);
        b.output(z);
        let graph = b.finish();
        let (d, u) = ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [10.0, 20.0, 30.0, 40.0]);
        let out = crate::reference::run(&graph, &[&d, &u], &Default::default()).unwrap();
        assert_eq!(out[0], [0.0, 1.0, 2.0, 3.0, 30.0, 40.0]);
        assert_eq!(out[1], [0.0, 1.0, 2.0, 3.0, 44.0, 65.0]);
    }
}

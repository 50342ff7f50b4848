//! numpy broadcasting of a row-major source onto a row-major output shape:
//! shapes align at the right, a source axis of size 1 (or a missing one) is
//! repeated. [`Broadcast::apply`] walks the output one innermost row at a
//! time (in parallel), so the index arithmetic is paid once per row.

use super::op_io::OpError;
use rayon::prelude::*;

/// How a source of one shape maps onto an output shape.
pub(crate) struct Broadcast {
    out_shape: Vec<usize>,
    /// Source element stride of each output axis (0 where repeated).
    strides: Vec<usize>,
    /// The source already has the output's shape.
    same: bool,
}

impl Broadcast {
    pub(crate) fn new(src: &[usize], out: &[usize]) -> Result<Self, OpError> {
        if src.len() > out.len() {
            return Err(OpError(format!("{src:?} does not broadcast to {out:?}")));
        }
        let lead = out.len() - src.len();
        let mut strides = vec![0; out.len()];
        let mut stride = 1;
        for i in (0..src.len()).rev() {
            let (s, o) = (src[i], out[lead + i]);
            if s == o {
                strides[lead + i] = if s == 1 { 0 } else { stride };
            } else if s != 1 {
                return Err(OpError(format!("{src:?} does not broadcast to {out:?}")));
            }
            stride *= s;
        }
        let same = src.iter().product::<usize>() == out.iter().product::<usize>();
        Ok(Broadcast {
            out_shape: out.to_vec(),
            strides,
            same,
        })
    }

    fn row_len(&self) -> usize {
        self.out_shape.last().copied().unwrap_or(1)
    }

    /// Source offset of the first element of output row `row` (rows are the
    /// innermost axis).
    fn row_base(&self, mut row: usize) -> usize {
        let rank = self.out_shape.len();
        let mut base = 0;
        for axis in (0..rank.saturating_sub(1)).rev() {
            let dim = self.out_shape[axis];
            base += (row % dim) * self.strides[axis];
            row /= dim;
        }
        base
    }

    /// Source offset of every output element, in output row-major order.
    pub(crate) fn offsets(&self) -> Vec<usize> {
        let total: usize = self.out_shape.iter().product();
        let len = self.row_len();
        let last = self.strides.last().copied().unwrap_or(0);
        let mut out = Vec::with_capacity(total);
        for row in 0..total / len.max(1) {
            let base = self.row_base(row);
            out.extend((0..len).map(|j| base + j * last));
        }
        out
    }

    /// Calls `f(&mut out[i], src[offset(i)])` for every output element.
    pub(crate) fn apply<T: Send>(
        &self,
        out: &mut [T],
        src: &[f32],
        f: impl Fn(&mut T, f32) + Sync,
    ) {
        if self.same {
            out.par_iter_mut()
                .with_min_len(1 << 12)
                .zip(src.par_iter())
                .for_each(|(o, &s)| f(o, s));
            return;
        }
        let len = self.row_len().max(1);
        let last = self.strides.last().copied().unwrap_or(0);
        out.par_chunks_mut(len)
            .with_min_len((1 << 12) / len + 1)
            .enumerate()
            .for_each(|(row, values)| {
                let base = self.row_base(row);
                for (j, o) in values.iter_mut().enumerate() {
                    f(o, src[base + j * last]);
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_numpy() {
        // [3, 1] onto [2, 3, 4]: element (i, j, k) reads source j.
        let b = Broadcast::new(&[3, 1], &[2, 3, 4]).unwrap();
        let offsets = b.offsets();
        assert_eq!(offsets.len(), 24);
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    assert_eq!(offsets[(i * 3 + j) * 4 + k], j);
                }
            }
        }
        assert_eq!(Broadcast::new(&[], &[2, 2]).unwrap().offsets(), vec![0; 4]);
        assert!(Broadcast::new(&[3], &[2, 4]).is_err());
    }
}

//! Strided views: how a fused op reads a logical 4-D operand straight out of
//! another value's storage (or writes its result into one) instead of
//! through a copy. Element `[i0, i1, i2, i3]` of the logical operand lives
//! at flat element `offset + Σ ik·strides[k]` of the value's row-major
//! storage. `passes::attention_views` finds them; the CPU reference, the
//! direct evaluator and the attention kernels read and write through them.

use serde::{Deserialize, Serialize};

/// A logical 4-D operand of `dims` at `offset + Σ ik·strides[k]` in a
/// row-major value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StridedView {
    pub dims: [usize; 4],
    pub offset: usize,
    pub strides: [usize; 4],
}

impl StridedView {
    /// The view of a row-major value of `dims` itself.
    pub fn contiguous(dims: [usize; 4]) -> Self {
        StridedView {
            dims,
            offset: 0,
            strides: [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1],
        }
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// The flat element of the last logical element (the view's reach);
    /// `None` for an empty view.
    pub fn last_index(&self) -> Option<usize> {
        if self.numel() == 0 {
            return None;
        }
        Some(
            self.offset
                + (0..4)
                    .map(|k| (self.dims[k] - 1) * self.strides[k])
                    .sum::<usize>(),
        )
    }

    /// Flat storage positions of the logical elements, in logical
    /// row-major order.
    pub fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        let [d0, d1, d2, d3] = self.dims;
        let [s0, s1, s2, s3] = self.strides;
        (0..d0).flat_map(move |a| {
            (0..d1).flat_map(move |b| {
                (0..d2).flat_map(move |c| {
                    (0..d3).map(move |d| self.offset + a * s0 + b * s1 + c * s2 + d * s3)
                })
            })
        })
    }

    /// The logical operand, row-major, read out of `storage`. Fails when the
    /// view reaches past it.
    pub fn gather(&self, storage: &[f32]) -> Result<Vec<f32>, String> {
        self.check_within(storage.len())?;
        Ok(self.positions().map(|p| storage[p]).collect())
    }

    /// A value of `len` elements holding the row-major `logical` operand at
    /// the view's positions. Fails unless the view covers every element of
    /// the value exactly once (an output view must define the whole value).
    pub fn scatter(&self, logical: &[f32], len: usize) -> Result<Vec<f32>, String> {
        self.check_bijection(len)?;
        if logical.len() != self.numel() {
            return Err(format!(
                "{} elements for a view of {:?}",
                logical.len(),
                self.dims
            ));
        }
        let mut out = vec![0.0; len];
        for (p, &x) in self.positions().zip(logical) {
            out[p] = x;
        }
        Ok(out)
    }

    /// Ok when the view stays inside a value of `len` elements.
    pub fn check_within(&self, len: usize) -> Result<(), String> {
        match self.last_index() {
            Some(last) if last >= len => Err(format!(
                "view {self:?} reaches element {last} of a value of {len}"
            )),
            _ => Ok(()),
        }
    }

    /// Ok when the view visits each element of a value of `len` elements
    /// exactly once: offset 0 and its non-unit axes, sorted by stride, a
    /// row-major layout of `len` elements (a permutation of the axes; the
    /// views transposes make).
    pub fn check_bijection(&self, len: usize) -> Result<(), String> {
        if self.numel() != len {
            return Err(format!(
                "view of {:?} ({} elements) over a value of {len}",
                self.dims,
                self.numel()
            ));
        }
        let mut axes: Vec<(usize, usize)> = (0..4)
            .filter(|&k| self.dims[k] > 1)
            .map(|k| (self.strides[k], self.dims[k]))
            .collect();
        axes.sort_unstable();
        let mut expect = 1;
        for &(stride, n) in &axes {
            if stride != expect {
                return Err(format!(
                    "view {} does not cover a value of {len} exactly once",
                    self.describe()
                ));
            }
            expect *= n;
        }
        if self.offset != 0 {
            return Err(format!("view {} starts past element 0", self.describe()));
        }
        Ok(())
    }

    /// `offset+strides` for printing.
    pub fn describe(&self) -> String {
        format!("{:?}@{}+{:?}", self.dims, self.offset, self.strides)
    }
}

/// The operands of an [`crate::ir::Op::Attention`] read or written through
/// strided views. An operand without a view is its value itself (4-D, or
/// 3-D as `[1, N, S, D]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionViews {
    pub q: Option<StridedView>,
    pub k: Option<StridedView>,
    pub v: Option<StridedView>,
    /// The output written through a view; the output value then has
    /// `out_shape` (a value the view covers exactly).
    pub out: Option<(StridedView, Vec<usize>)>,
}

impl AttentionViews {
    /// The view of input `i` (0 q, 1 k, 2 v).
    pub fn input(&self, i: usize) -> Option<&StridedView> {
        match i {
            0 => self.q.as_ref(),
            1 => self.k.as_ref(),
            2 => self.v.as_ref(),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_none() && self.k.is_none() && self.v.is_none() && self.out.is_none()
    }

    /// The views for printing, e.g. `q=[1,12,197,64]@0+[..]`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, v) in [("q", &self.q), ("k", &self.k), ("v", &self.v)] {
            if let Some(v) = v {
                parts.push(format!("{name}={}", v.describe()));
            }
        }
        if let Some((v, _)) = &self.out {
            parts.push(format!("out={}", v.describe()));
        }
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposed_view_gathers_and_scatters_back() {
        // storage [2 rows, 3 cols] read as the logical [1, 1, 3, 2] transpose.
        let view = StridedView {
            dims: [1, 1, 3, 2],
            offset: 0,
            strides: [0, 0, 1, 3],
        };
        let storage = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let logical = view.gather(&storage).unwrap();
        assert_eq!(logical, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(view.scatter(&logical, 6).unwrap(), storage);
    }

    #[test]
    fn views_that_overlap_or_overreach_are_refused() {
        let overlapping = StridedView {
            dims: [1, 1, 2, 2],
            offset: 0,
            strides: [0, 0, 1, 1],
        };
        assert!(overlapping.check_bijection(4).is_err());
        let overreaching = StridedView {
            offset: 3,
            ..StridedView::contiguous([1, 1, 2, 2])
        };
        assert!(overreaching.check_within(6).is_err());
        assert!(overreaching.check_within(7).is_ok());
    }
}

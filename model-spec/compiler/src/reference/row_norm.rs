//! The row normalization of a Dense carrying a [`RowNorm`]: the statistics
//! of each row of x, exact to f64 (two passes over the stored values), and
//! the step `acc ← r·(acc − μ·s)` that turns the product of the
//! unnormalized rows into the product of the normalized ones, before the
//! epilogue's bias, residual and activation. The step runs in the
//! accumulation type (f32: what the GPU epilogue does, with μ and r rounded
//! to f32; f64: the tighter oracle).

use super::normalize::moments;
use super::op_io::OpError;
use super::scalar::Scalar;
use crate::ir::RowNorm;
use std::borrow::Cow;

/// The statistics of every row of x and the column sums s of one Dense.
pub(crate) struct RowFold<'a> {
    /// Per row: the mean μ and `r = 1/sqrt(var + ε)`.
    stats: Vec<[f64; 2]>,
    /// `s[n]`, one per output column.
    sums: Cow<'a, [f32]>,
}

impl<'a> RowFold<'a> {
    /// The fold of the rows of `x` (row-major `[M, k]`) with column sums
    /// `sums` (`[N]`, `n` of them).
    pub(crate) fn new(
        norm: &RowNorm,
        x: &[f32],
        k: usize,
        sums: Cow<'a, [f32]>,
        n: usize,
    ) -> Result<Self, OpError> {
        if sums.len() != n || (k > 0 && x.len() % k != 0) {
            return Err(OpError(format!(
                "a row norm needs {n} column sums and whole rows of {k}, got {} and {} elements",
                sums.len(),
                x.len()
            )));
        }
        let stats = x
            .chunks(k.max(1))
            .map(|row| {
                let (mean, rstd) = moments(
                    row.iter().map(|&v| f64::from(v)),
                    row.len().max(1) as f64,
                    norm.epsilon,
                );
                [mean, rstd]
            })
            .collect();
        Ok(RowFold { stats, sums })
    }

    /// `values[n] ← r·(values[n] − μ·s[n])` for row `row` of the product.
    pub(crate) fn apply<T: Scalar>(&self, row: usize, values: &mut [T]) {
        let Some(&[mean, rstd]) = self.stats.get(row) else {
            return;
        };
        let (mean, rstd) = (T::of_f64(mean), T::of_f64(rstd));
        for (v, &s) in values.iter_mut().zip(self.sums.iter()) {
            *v = rstd * (*v - mean * T::of(s));
        }
    }
}

#[cfg(test)]
#[path = "row_norm_tests.rs"]
mod tests;

//! The accumulation scalar: every reduction (conv, gemm, matmul, pool sums,
//! softmax, means) is generic over [`Scalar`], implemented by `f32` (what the
//! GPU does) and `f64` (a tighter oracle). Values are always *stored* as f32
//! rounded to their dtype; only the arithmetic in between changes.
//!
//! [`Scalar::operand`] also applies tf32 rounding to matrix-product operands,
//! so the rounding happens once, where an operand enters a product.

use crate::ir::round_tf32;
use rayon::prelude::*;
use std::borrow::Cow;
use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

/// Below this many elements conversions run on one thread.
const PARALLEL_MIN: usize = 1 << 15;

pub(crate) trait Scalar:
    Copy
    + Default
    + Debug
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
    + 'static
{
    const ZERO: Self;
    fn of(x: f32) -> Self;
    /// `x` in this type (rounded to nearest for f32).
    fn of_f64(x: f64) -> Self;
    fn of_usize(n: usize) -> Self;
    fn to_f32(self) -> f32;
    fn exp(self) -> Self;
    fn sqrt(self) -> Self;
    fn ln(self) -> Self;

    /// A matrix-product operand in this type, rounded to tf32 first when
    /// `tf32`; borrows when nothing changes.
    fn operand(data: Cow<'_, [f32]>, tf32: bool) -> Cow<'_, [Self]>;

    /// Values of this type rounded to f32 (a move for f32).
    fn into_f32(values: Vec<Self>) -> Vec<f32>;

    /// `C = alpha·A·B + beta·C` with arbitrary strides (matrixmultiply's
    /// `sgemm` / `dgemm`).
    ///
    /// # Safety
    /// Every element addressed through the pointers, dimensions and strides
    /// must lie inside live allocations, and the elements of C must be
    /// distinct and not overlap A or B.
    #[allow(clippy::too_many_arguments)] // mirrors the BLAS signature
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

fn round_all(values: &mut [f32]) {
    if values.len() >= PARALLEL_MIN {
        values
            .par_chunks_mut(PARALLEL_MIN)
            .for_each(|chunk| chunk.iter_mut().for_each(|x| *x = round_tf32(*x)));
    } else {
        values.iter_mut().for_each(|x| *x = round_tf32(*x));
    }
}

impl Scalar for f32 {
    const ZERO: f32 = 0.0;
    fn of(x: f32) -> f32 {
        x
    }
    fn of_f64(x: f64) -> f32 {
        x as f32
    }
    fn of_usize(n: usize) -> f32 {
        n as f32
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn exp(self) -> f32 {
        f32::exp(self)
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    fn ln(self) -> f32 {
        f32::ln(self)
    }
    fn operand(data: Cow<'_, [f32]>, tf32: bool) -> Cow<'_, [f32]> {
        if !tf32 {
            return data;
        }
        let mut owned = data.into_owned();
        round_all(&mut owned);
        Cow::Owned(owned)
    }
    fn into_f32(values: Vec<f32>) -> Vec<f32> {
        values
    }
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract.
        unsafe { matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc) }
    }
}

impl Scalar for f64 {
    const ZERO: f64 = 0.0;
    fn of(x: f32) -> f64 {
        f64::from(x)
    }
    fn of_f64(x: f64) -> f64 {
        x
    }
    fn of_usize(n: usize) -> f64 {
        n as f64
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn ln(self) -> f64 {
        f64::ln(self)
    }
    fn operand(data: Cow<'_, [f32]>, tf32: bool) -> Cow<'_, [f64]> {
        let convert = |x: &f32| f64::from(if tf32 { round_tf32(*x) } else { *x });
        let converted: Vec<f64> = if data.len() >= PARALLEL_MIN {
            data.par_iter()
                .with_min_len(PARALLEL_MIN)
                .map(convert)
                .collect()
        } else {
            data.iter().map(convert).collect()
        };
        Cow::Owned(converted)
    }
    fn into_f32(values: Vec<f64>) -> Vec<f32> {
        if values.len() >= PARALLEL_MIN {
            values
                .par_iter()
                .with_min_len(PARALLEL_MIN)
                .map(|&x| x as f32)
                .collect()
        } else {
            values.iter().map(|&x| x as f32).collect()
        }
    }
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract.
        unsafe { matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_round_to_tf32_only_when_asked() {
        let x = [1.0 + f32::EPSILON * 3.0, 0.1];
        assert_eq!(&*f32::operand(Cow::Borrowed(&x), false), &x);
        assert!(matches!(
            f32::operand(Cow::Borrowed(&x), false),
            Cow::Borrowed(_)
        ));
        let r = f32::operand(Cow::Borrowed(&x), true);
        assert_eq!(r[0], 1.0);
        assert_eq!(r[1], round_tf32(0.1));
        let d = f64::operand(Cow::Borrowed(&x), true);
        assert_eq!(d[0], 1.0);
        assert_eq!(d[1], f64::from(round_tf32(0.1)));
    }
}

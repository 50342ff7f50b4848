//! Moving data between physical orders. A value's elements sit in memory in
//! the order its [`Layout`] gives for its logical shape; the only reordering
//! there is is rank-4 NCHW ⇄ NHWC (OIHW ⇄ OHWI for weights). Two layouts
//! whose physical orders coincide (e.g. channels-last with one channel) need
//! no copy, which [`same_order`] detects.

use crate::ir::{is_row_major_bytes, Layout};
use rayon::prelude::*;
use std::borrow::Cow;

/// True when a value of `shape` has the same element order in `a` and `b`.
pub(crate) fn same_order(shape: &[usize], a: Layout, b: Layout) -> bool {
    a == b || (is_row_major_bytes(shape, a) && is_row_major_bytes(shape, b))
}

/// Reorders physical `data` of a value of logical `shape` from layout `from`
/// to layout `to`, borrowing when the orders coincide.
pub(crate) fn relayout<'a>(
    data: Cow<'a, [f32]>,
    shape: &[usize],
    from: Layout,
    to: Layout,
) -> Cow<'a, [f32]> {
    if same_order(shape, from, to) || shape.len() != 4 {
        return data;
    }
    let dims = [shape[0], shape[1], shape[2], shape[3]];
    Cow::Owned(match to {
        Layout::ChannelsLast => nchw_to_nhwc(&data, dims),
        Layout::RowMajor => nhwc_to_nchw(&data, dims),
    })
}

/// [`relayout`] of an owned vector.
pub(crate) fn relayout_vec(data: Vec<f32>, shape: &[usize], from: Layout, to: Layout) -> Vec<f32> {
    relayout(Cow::Owned(data), shape, from, to).into_owned()
}

/// Logical row-major data of a value held in `layout`.
pub(crate) fn to_row_major<'a>(
    data: Cow<'a, [f32]>,
    shape: &[usize],
    layout: Layout,
) -> Cow<'a, [f32]> {
    relayout(data, shape, layout, Layout::RowMajor)
}

/// `[N, C, H, W]` row-major → `[N, H, W, C]`.
pub(crate) fn nchw_to_nhwc<T: Copy + Default + Send + Sync>(
    x: &[T],
    [n, c, h, w]: [usize; 4],
) -> Vec<T> {
    let total = n * c * h * w;
    let mut out = vec![T::default(); total];
    if total == 0 || x.len() < total {
        return out;
    }
    let hw = h * w;
    // One output row is one (n, h): w pixels of c channels.
    out.par_chunks_mut(w * c)
        .enumerate()
        .for_each(|(row, dst)| {
            let (img, hh) = (row / h, row % h);
            let base = img * c * hw + hh * w;
            for (ww, px) in dst.chunks_exact_mut(c).enumerate() {
                for (cc, d) in px.iter_mut().enumerate() {
                    *d = x[base + cc * hw + ww];
                }
            }
        });
    out
}

/// `[N, H, W, C]` → `[N, C, H, W]` row-major.
pub(crate) fn nhwc_to_nchw<T: Copy + Default + Send + Sync>(
    x: &[T],
    [n, c, h, w]: [usize; 4],
) -> Vec<T> {
    let total = n * c * h * w;
    let mut out = vec![T::default(); total];
    if total == 0 || x.len() < total {
        return out;
    }
    // One output row is one (n, c, h): w elements.
    out.par_chunks_mut(w).enumerate().for_each(|(row, dst)| {
        let (img, cc, hh) = (row / (c * h), (row / h) % c, row % h);
        let base = (img * h + hh) * w * c + cc;
        for (ww, d) in dst.iter_mut().enumerate() {
            *d = x[base + ww * c];
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_matches_strides() {
        let shape = [2usize, 3, 4, 5];
        let x: Vec<f32> = (0..120).map(|i| i as f32).collect();
        let nhwc = nchw_to_nhwc(&x, shape);
        let strides = Layout::ChannelsLast.strides(&shape);
        for n in 0..2 {
            for c in 0..3 {
                for h in 0..4 {
                    for w in 0..5 {
                        let logical = ((n * 3 + c) * 4 + h) * 5 + w;
                        let physical =
                            n * strides[0] + c * strides[1] + h * strides[2] + w * strides[3];
                        assert_eq!(nhwc[physical], x[logical]);
                    }
                }
            }
        }
        assert_eq!(nhwc_to_nchw(&nhwc, shape), x);
    }

    #[test]
    fn single_channel_needs_no_copy() {
        let x = vec![1.0f32, 2.0, 3.0, 4.0];
        let out = relayout(
            Cow::Borrowed(&x),
            &[1, 1, 2, 2],
            Layout::RowMajor,
            Layout::ChannelsLast,
        );
        assert!(matches!(out, Cow::Borrowed(_)));
    }
}

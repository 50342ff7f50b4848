//! Resize, one axis at a time: along each resized axis, output coordinate
//! `j` maps to input coordinate `x` by the [`CoordinateMode`]; nearest
//! reads the element `x` rounds to, linear blends `⌊x⌋` and `⌊x⌋ + 1` by
//! the fraction; indices outside the input clamp to its edge (ONNX's
//! edge padding). Resizing the axes in turn is the separable
//! (bi)linear interpolation ONNX defines. Works on logical row-major data.

use super::op_io::{input, OpError, OpResult, Output, Tensor};
use crate::ir::{Resize, ResizeMode};

/// The input elements (index, weight) output coordinate `j` of one axis
/// blends.
fn taps(resize: &Resize, axis: usize, len_in: usize, j: usize) -> Vec<(usize, f32)> {
    let len_out = resize.sizes[axis];
    let x = resize
        .coordinate
        .source(j, resize.scales[axis], len_in, len_out);
    let clamp = |i: f32| (i.max(0.0) as usize).min(len_in - 1);
    match resize.mode {
        ResizeMode::Nearest(mode) => vec![(clamp(mode.round(x)), 1.0)],
        ResizeMode::Linear => {
            let x0 = x.floor();
            let r = x - x0;
            vec![(clamp(x0), 1.0 - r), (clamp(x0 + 1.0), r)]
        }
    }
}

/// `data` of `shape` resampled along `axis` to `resize.sizes[axis]`.
fn resize_axis(resize: &Resize, axis: usize, data: &[f32], shape: &[usize]) -> Vec<f32> {
    let (len_in, len_out) = (shape[axis], resize.sizes[axis]);
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let taps: Vec<Vec<(usize, f32)>> = (0..len_out)
        .map(|j| taps(resize, axis, len_in, j))
        .collect();
    let mut out = vec![0.0f32; outer * len_out * inner];
    for o in 0..outer {
        let src = &data[o * len_in * inner..][..len_in * inner];
        let dst = &mut out[o * len_out * inner..][..len_out * inner];
        for (j, taps) in taps.iter().enumerate() {
            let row = &mut dst[j * inner..][..inner];
            for &(i, w) in taps {
                if w == 0.0 {
                    continue;
                }
                for (d, &s) in row.iter_mut().zip(&src[i * inner..][..inner]) {
                    *d += w * s;
                }
            }
        }
    }
    out
}

/// `x` resized to `resize.sizes`.
pub(crate) fn resize(resize: &Resize, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let rank = x.shape.len();
    if resize.sizes.len() != rank || resize.scales.len() != rank {
        return Err(OpError(format!("{resize} does not fit {:?}", x.shape)));
    }
    let mut shape = x.shape.to_vec();
    let mut data = x.row_major().into_owned();
    for axis in 0..rank {
        if shape[axis] == resize.sizes[axis] && resize.scales[axis] == 1.0 {
            continue;
        }
        data = resize_axis(resize, axis, &data, &shape);
        shape[axis] = resize.sizes[axis];
    }
    Ok(Output::row_major(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{CoordinateMode, NearestMode, Op};
    use crate::reference::testing::run1;
    use crate::test_graphs::Builder;

    fn run(resize: Resize, shape: &[usize], data: &[f32]) -> Vec<f32> {
        let mut b = Builder::new();
        let x = b.input("x", shape);
        let y = b.op(Op::Resize(resize), &[x]);
        b.output(y);
        let graph = b.finish();
        run1(&graph, &[data])
    }

    #[test]
    fn nearest_doubles_each_pixel() {
        let resize = Resize {
            mode: ResizeMode::Nearest(NearestMode::RoundPreferFloor),
            coordinate: CoordinateMode::Asymmetric,
            scales: vec![1.0, 1.0, 2.0, 2.0],
            sizes: vec![1, 1, 2, 4],
        };
        let got = run(resize, &[1, 1, 1, 2], &[1.0, 2.0]);
        assert_eq!(got, [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]);
    }

    /// ONNX's test_resize_upsample_scales_linear: 2×2 → 4×4, half_pixel.
    #[test]
    fn bilinear_half_pixel_matches_onnx() {
        let resize = Resize {
            mode: ResizeMode::Linear,
            coordinate: CoordinateMode::HalfPixel,
            scales: vec![1.0, 1.0, 2.0, 2.0],
            sizes: vec![1, 1, 4, 4],
        };
        let got = run(resize, &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let want = [
            1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn align_corners_keeps_the_corners() {
        let resize = Resize {
            mode: ResizeMode::Linear,
            coordinate: CoordinateMode::AlignCorners,
            scales: vec![1.0, 1.0, 1.0, 1.5],
            sizes: vec![1, 1, 1, 3],
        };
        assert_eq!(run(resize, &[1, 1, 1, 2], &[1.0, 3.0]), [1.0, 2.0, 3.0]);
    }
}

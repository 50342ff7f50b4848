//! Pooling, computed in the input's layout (NCHW: one output plane per task;
//! NHWC: one output row per task, vectorized over channels).
//!
//! Windows follow ONNX exactly: output size from [`Pool2d::output_hw`]
//! (pads, strides, dilations, `ceil_mode`); window tap `r` of output row `p`
//! reads input row `p·stride − pad_top + r·dilation`. MaxPool ignores taps
//! outside the input. AveragePool sums the taps inside the input and divides
//! by the number of taps inside the input (`count_include_pad = 0`) or inside
//! the *explicitly padded* extent `[−pad_top, H + pad_bottom)`
//! (`count_include_pad = 1`): taps that exist only because `ceil_mode`
//! added a window past the end padding are never counted. Global pools
//! reduce every axis after the first two (rank ≥ 3).

use super::op_io::{dims4, input, Ctx, OpResult, OutSpec, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use crate::ir::{Layout, Pool2d};
use rayon::prelude::*;

/// The valid taps of one window axis: `(tap index, input position)` pairs
/// inside `[0, size)`, and how many taps an average divides by.
struct Taps {
    taps: Vec<(usize, usize)>,
    count_valid: usize,
    count_padded: usize,
}

/// Taps of output position `o` along one axis.
fn taps(
    o: usize,
    size: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
) -> Taps {
    let mut taps = Vec::with_capacity(kernel);
    let mut count_padded = 0;
    for t in 0..kernel {
        // Position in padded coordinates (input row 0 is at pad_begin).
        let padded = o * stride + t * dilation;
        if padded < size + pad_begin + pad_end {
            count_padded += 1;
        }
        if let Some(pos) = padded.checked_sub(pad_begin).filter(|&p| p < size) {
            taps.push((t, pos));
        }
    }
    Taps {
        count_valid: taps.len(),
        taps,
        count_padded,
    }
}

/// Taps of every output row and column.
fn window_taps(pool: &Pool2d, [h, w]: [usize; 2], [p, q]: [usize; 2]) -> (Vec<Taps>, Vec<Taps>) {
    let rows = (0..p)
        .map(|o| {
            taps(
                o,
                h,
                pool.kernel[0],
                pool.strides[0],
                pool.dilations[0],
                pool.pads[0],
                pool.pads[2],
            )
        })
        .collect();
    let cols = (0..q)
        .map(|o| {
            taps(
                o,
                w,
                pool.kernel[1],
                pool.strides[1],
                pool.dilations[1],
                pool.pads[1],
                pool.pads[3],
            )
        })
        .collect();
    (rows, cols)
}

/// What a window reduces to.
#[derive(Clone, Copy)]
enum Window {
    Max,
    Average { count_include_pad: bool },
}

pub(crate) fn max_pool(pool: &Pool2d, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    pool2d::<f32>(pool, Window::Max, inputs, out)
}

pub(crate) fn average_pool(
    ctx: &Ctx,
    pool: &Pool2d,
    count_include_pad: bool,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let window = Window::Average { count_include_pad };
    match ctx.accumulate {
        Accumulate::F32 => pool2d::<f32>(pool, window, inputs, out),
        Accumulate::F64 => pool2d::<f64>(pool, window, inputs, out),
    }
}

fn pool2d<T: Scalar>(pool: &Pool2d, window: Window, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let x = input(inputs, 0)?;
    let [n, c, h, w] = dims4(x.shape, "pool input")?;
    let [_, _, p, q] = dims4(out.shape, "pool output")?;
    let (rows, cols) = window_taps(pool, [h, w], [p, q]);
    let divisor = |r: &Taps, s: &Taps| match window {
        Window::Average {
            count_include_pad: true,
        } => T::of_usize(r.count_padded * s.count_padded),
        _ => T::of_usize(r.count_valid * s.count_valid),
    };
    let mut data = vec![0.0f32; n * c * p * q];
    let x = &x.data;
    match x_layout(inputs) {
        Layout::RowMajor => {
            data.par_chunks_mut((p * q).max(1))
                .enumerate()
                .for_each(|(plane, out)| {
                    let x_plane = &x[plane * h * w..][..h * w];
                    for (pp, r) in rows.iter().enumerate() {
                        for (qq, s) in cols.iter().enumerate() {
                            out[pp * q + qq] = match window {
                                Window::Max => {
                                    let mut m = f32::NEG_INFINITY;
                                    for &(_, hh) in &r.taps {
                                        for &(_, ww) in &s.taps {
                                            m = m.max(x_plane[hh * w + ww]);
                                        }
                                    }
                                    m
                                }
                                Window::Average { .. } => {
                                    let mut sum = T::ZERO;
                                    for &(_, hh) in &r.taps {
                                        for &(_, ww) in &s.taps {
                                            sum += T::of(x_plane[hh * w + ww]);
                                        }
                                    }
                                    (sum / divisor(r, s)).to_f32()
                                }
                            };
                        }
                    }
                });
        }
        Layout::ChannelsLast => {
            data.par_chunks_mut((q * c).max(1))
                .enumerate()
                .for_each_with(vec![T::ZERO; c], |sums, (row, out)| {
                    let (img, pp) = (row / p, row % p);
                    let r = &rows[pp];
                    for (qq, s) in cols.iter().enumerate() {
                        let px = &mut out[qq * c..][..c];
                        match window {
                            Window::Max => {
                                px.fill(f32::NEG_INFINITY);
                                for &(_, hh) in &r.taps {
                                    for &(_, ww) in &s.taps {
                                        let x_px = &x[((img * h + hh) * w + ww) * c..][..c];
                                        for (m, &v) in px.iter_mut().zip(x_px) {
                                            *m = m.max(v);
                                        }
                                    }
                                }
                            }
                            Window::Average { .. } => {
                                sums.fill(T::ZERO);
                                for &(_, hh) in &r.taps {
                                    for &(_, ww) in &s.taps {
                                        let x_px = &x[((img * h + hh) * w + ww) * c..][..c];
                                        for (a, &v) in sums.iter_mut().zip(x_px) {
                                            *a += T::of(v);
                                        }
                                    }
                                }
                                let div = divisor(r, s);
                                for (o, &a) in px.iter_mut().zip(sums.iter()) {
                                    *o = (a / div).to_f32();
                                }
                            }
                        }
                    }
                });
        }
    }
    Ok(Output {
        data,
        layout: x_layout(inputs),
    })
}

fn x_layout(inputs: &[Tensor]) -> Layout {
    inputs.first().map_or(Layout::RowMajor, |x| x.layout)
}

/// Which global pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Global {
    Average,
    Max,
}

pub(crate) fn global_pool(ctx: &Ctx, kind: Global, inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => global_pool_in::<f32>(kind, inputs),
        Accumulate::F64 => global_pool_in::<f64>(kind, inputs),
    }
}

fn global_pool_in<T: Scalar>(kind: Global, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    if x.shape.len() < 3 {
        return Err(format!("input {:?} needs rank ≥ 3", x.shape).into());
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let spatial: usize = x.shape[2..].iter().product();
    let count = T::of_usize(spatial);
    let data: Vec<f32> = if x.layout == Layout::ChannelsLast && x.shape.len() == 4 {
        // NHWC: each image is [spatial, C]; reduce its rows.
        let mut data = vec![0.0f32; n * c];
        data.par_chunks_mut(c.max(1))
            .enumerate()
            .for_each(|(img, out)| {
                let x_img = &x.data[img * spatial * c..][..spatial * c];
                match kind {
                    Global::Max => {
                        out.fill(f32::NEG_INFINITY);
                        for px in x_img.chunks_exact(c) {
                            out.iter_mut().zip(px).for_each(|(m, &v)| *m = m.max(v));
                        }
                    }
                    Global::Average => {
                        let mut sums = vec![T::ZERO; c];
                        for px in x_img.chunks_exact(c) {
                            sums.iter_mut().zip(px).for_each(|(a, &v)| *a += T::of(v));
                        }
                        out.iter_mut()
                            .zip(sums)
                            .for_each(|(o, a)| *o = (a / count).to_f32());
                    }
                }
            });
        data
    } else {
        (0..n * c)
            .into_par_iter()
            .map(|plane| {
                let values = &x.data[plane * spatial..][..spatial];
                match kind {
                    Global::Max => values.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)),
                    Global::Average => {
                        let sum = values.iter().fold(T::ZERO, |a, &v| a + T::of(v));
                        (sum / count).to_f32()
                    }
                }
            })
            .collect()
    };
    Ok(Output::row_major(data))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{run1, Rng};
    use super::super::{rel_l2, run, Accumulate, RunOptions};
    use crate::ir::{DType, Graph, Layout, Op, Pool2d};
    use crate::test_graphs::Builder;

    fn pool2d(
        kernel: [usize; 2],
        strides: [usize; 2],
        pads: [usize; 4],
        dilations: [usize; 2],
        ceil_mode: bool,
    ) -> Pool2d {
        Pool2d {
            kernel,
            strides,
            pads,
            dilations,
            ceil_mode,
        }
    }

    fn geometries() -> Vec<Pool2d> {
        vec![
            pool2d([3, 3], [2, 2], [1; 4], [1, 1], false),
            pool2d([2, 2], [2, 2], [0; 4], [1, 1], false),
            pool2d([3, 3], [2, 2], [0; 4], [1, 1], true),
            pool2d([3, 2], [2, 1], [1, 0, 2, 1], [1, 1], true),
            pool2d([2, 2], [1, 2], [1, 1, 1, 1], [2, 2], false),
            pool2d([3, 3], [3, 3], [1, 1, 1, 1], [1, 1], true),
        ]
    }

    /// Direct ONNX definition on logical NCHW data; `avg = Some(count_include_pad)`.
    fn naive_pool(
        x: &[f32],
        [n, c, h, w]: [usize; 4],
        pool: &Pool2d,
        avg: Option<bool>,
    ) -> Vec<f32> {
        let [p, q] = pool.output_hw(h, w).unwrap();
        let (pt, pl, pb, pr) = (
            pool.pads[0] as isize,
            pool.pads[1] as isize,
            pool.pads[2] as isize,
            pool.pads[3] as isize,
        );
        let mut out = Vec::new();
        for plane in 0..n * c {
            for pp in 0..p {
                for qq in 0..q {
                    let (mut sum, mut max, mut valid, mut padded) =
                        (0.0f64, f32::NEG_INFINITY, 0, 0);
                    for r in 0..pool.kernel[0] {
                        for s in 0..pool.kernel[1] {
                            let hh = (pp * pool.strides[0] + r * pool.dilations[0]) as isize - pt;
                            let ww = (qq * pool.strides[1] + s * pool.dilations[1]) as isize - pl;
                            if hh >= -pt
                                && hh < h as isize + pb
                                && ww >= -pl
                                && ww < w as isize + pr
                            {
                                padded += 1;
                            }
                            if hh >= 0 && ww >= 0 && hh < h as isize && ww < w as isize {
                                let v = x[plane * h * w + hh as usize * w + ww as usize];
                                valid += 1;
                                sum += f64::from(v);
                                max = max.max(v);
                            }
                        }
                    }
                    out.push(match avg {
                        None => max,
                        Some(true) => (sum / f64::from(padded)) as f32,
                        Some(false) => (sum / f64::from(valid)) as f32,
                    });
                }
            }
        }
        out
    }

    fn pool_graph(op: Op, x: &[usize; 4], layout: Layout) -> Graph {
        let mut b = Builder::new();
        let input = b.input("x", x);
        let mut y = input;
        if layout == Layout::ChannelsLast {
            y = b.op(Op::Convert, &[input]);
            b.set(y, layout, DType::F32);
        }
        let out = b.op(op, &[y]);
        b.set(out, layout, DType::F32);
        b.output(out);
        b.finish()
    }

    #[test]
    fn max_and_average_pools_match_naive() {
        let shape = [2, 3, 9, 8];
        let x = Rng::new(3).vec(shape.iter().product());
        for (i, pool) in geometries().iter().enumerate() {
            for layout in [Layout::RowMajor, Layout::ChannelsLast] {
                let got = run1(&pool_graph(Op::MaxPool(*pool), &shape, layout), &[&x]);
                assert_eq!(got, naive_pool(&x, shape, pool, None), "max {i} {layout:?}");
                for count_include_pad in [false, true] {
                    let op = Op::AveragePool {
                        pool: *pool,
                        count_include_pad,
                    };
                    let graph = pool_graph(op, &shape, layout);
                    let want = naive_pool(&x, shape, pool, Some(count_include_pad));
                    let err = rel_l2(&run1(&graph, &[&x]), &want);
                    assert!(
                        err < 1e-6,
                        "avg {i} {layout:?} include_pad={count_include_pad}: {err}"
                    );
                    let opts = RunOptions {
                        accumulate: Accumulate::F64,
                        ..RunOptions::default()
                    };
                    let got = run(&graph, &[&x], &opts).unwrap().remove(0);
                    assert_eq!(got, want, "avg f64 {i} {layout:?}");
                }
            }
        }
    }

    #[test]
    fn ceil_mode_window_past_the_padding_is_not_counted() {
        // 5×5 ones, kernel 3, stride 2, pads bottom/right 1, ceil_mode: the
        // last window covers rows 4 (input), 5 (explicit pad), 6 (past it).
        let pool = pool2d([3, 3], [2, 2], [0, 0, 1, 1], [1, 1], true);
        assert_eq!(pool.output_hw(5, 5), Some([3, 3]));
        let x = vec![1.0f32; 25];
        let avg = |count_include_pad| {
            let op = Op::AveragePool {
                pool,
                count_include_pad,
            };
            run1(&pool_graph(op, &[1, 1, 5, 5], Layout::RowMajor), &[&x])
        };
        let with_pad = avg(true);
        assert_eq!(with_pad[0], 1.0);
        assert_eq!(with_pad[2], 3.0 / 6.0); // rows 0-2 valid, cols 4 valid + 5 padded
        assert_eq!(with_pad[8], 1.0 / 4.0); // 1 valid of 2×2 counted
        assert_eq!(avg(false), vec![1.0; 9]);
    }

    #[test]
    fn global_pools_match_naive() {
        let shape = [2, 5, 4, 3];
        let x = Rng::new(4).vec(shape.iter().product());
        for layout in [Layout::RowMajor, Layout::ChannelsLast] {
            let mean = run1(&pool_graph(Op::GlobalAveragePool, &shape, layout), &[&x]);
            let max = run1(&pool_graph(Op::GlobalMaxPool, &shape, layout), &[&x]);
            for plane in 0..10 {
                let values = &x[plane * 12..][..12];
                let want = (values.iter().map(|&v| f64::from(v)).sum::<f64>() / 12.0) as f32;
                assert!((mean[plane] - want).abs() < 1e-6, "{layout:?}");
                assert_eq!(
                    max[plane],
                    values.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                );
            }
        }
        // Rank 3.
        let mut b = Builder::new();
        let input = b.input("x", &[2, 3, 4]);
        let y = b.op(Op::GlobalAveragePool, &[input]);
        b.output(y);
        let graph = b.finish();
        let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
        assert_eq!(run1(&graph, &[&x]), vec![1.5, 5.5, 9.5, 13.5, 17.5, 21.5]);
    }
}

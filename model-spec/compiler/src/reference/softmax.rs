//! Softmax, LogSoftmax and Hardmax with ONNX opset ≥ 13 semantics: along
//! one axis, each slice on its own. Softmax is numerically stable
//! (`exp(x − max) / Σ exp(x − max)`), LogSoftmax likewise
//! (`x − max − log Σ exp(x − max)`); the exponentials and their sum are in
//! the accumulation type. Hardmax is 1 at the first maximum of each slice
//! (the first NaN if there is one) and 0 elsewhere.

use super::op_io::{input, Ctx, OpResult, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use rayon::prelude::*;

pub(crate) fn softmax(ctx: &Ctx, axis: usize, inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => softmax_in::<f32>(axis, false, inputs),
        Accumulate::F64 => softmax_in::<f64>(axis, false, inputs),
    }
}

pub(crate) fn log_softmax(ctx: &Ctx, axis: usize, inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => softmax_in::<f32>(axis, true, inputs),
        Accumulate::F64 => softmax_in::<f64>(axis, true, inputs),
    }
}

/// The size of `axis` and the product of the dims after it.
fn axis_dims(shape: &[usize], axis: usize) -> Result<(usize, usize), String> {
    let dim = *shape
        .get(axis)
        .ok_or_else(|| format!("axis {axis} out of range for {shape:?}"))?;
    Ok((dim, shape[axis + 1..].iter().product()))
}

pub(crate) fn hardmax(axis: usize, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let (dim, inner) = axis_dims(x.shape, axis)?;
    let data = x.row_major();
    let mut out = vec![0.0f32; data.len()];
    for (dst, src) in out
        .chunks_mut((dim * inner).max(1))
        .zip(data.chunks((dim * inner).max(1)))
    {
        for i in 0..inner {
            let mut best = 0;
            for d in 1..dim {
                let (v, b) = (src[d * inner + i], src[best * inner + i]);
                if !b.is_nan() && (v.is_nan() || v > b) {
                    best = d;
                }
            }
            dst[best * inner + i] = 1.0;
        }
    }
    Ok(Output::row_major(out))
}

fn softmax_in<T: Scalar>(axis: usize, log: bool, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let (dim, inner) = axis_dims(x.shape, axis)?;
    let data = x.row_major();
    let mut out = vec![0.0f32; data.len()];
    // One block is one outer index: `dim` rows of `inner` elements.
    out.par_chunks_mut((dim * inner).max(1))
        .zip(data.par_chunks((dim * inner).max(1)))
        .for_each(|(dst, src)| {
            let mut exps = vec![T::ZERO; dim];
            for i in 0..inner {
                let max = (0..dim)
                    .map(|d| src[d * inner + i])
                    .fold(f32::NEG_INFINITY, f32::max);
                let mut sum = T::ZERO;
                for (d, e) in exps.iter_mut().enumerate() {
                    *e = (T::of(src[d * inner + i]) - T::of(max)).exp();
                    sum += *e;
                }
                for (d, &e) in exps.iter().enumerate() {
                    dst[d * inner + i] = if log {
                        (T::of(src[d * inner + i]) - T::of(max) - sum.ln()).to_f32()
                    } else {
                        (e / sum).to_f32()
                    };
                }
            }
        });
    Ok(Output::row_major(out))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{run1, Rng};
    use super::super::{rel_l2, run, Accumulate, RunOptions};
    use crate::ir::Op;
    use crate::test_graphs::Builder;

    #[test]
    fn softmax_normalizes_each_slice_along_the_axis() {
        let shape = [2, 3, 4];
        let x: Vec<f32> = Rng::new(31).vec(24).iter().map(|v| v * 5.0).collect();
        for axis in 0..3 {
            let mut b = Builder::new();
            let input = b.input("x", &shape);
            let y = b.op(Op::Softmax { axis }, &[input]);
            b.output(y);
            let graph = b.finish();
            let stride: usize = shape[axis + 1..].iter().product();
            let dim = shape[axis];
            let want: Vec<f32> = (0..24)
                .map(|i| {
                    let base = i - ((i / stride) % dim) * stride;
                    let denom: f64 = (0..dim)
                        .map(|d| f64::from(x[base + d * stride]).exp())
                        .sum();
                    (f64::from(x[i]).exp() / denom) as f32
                })
                .collect();
            assert!(rel_l2(&run1(&graph, &[&x]), &want) < 1e-6, "axis {axis}");
            let opts = RunOptions {
                accumulate: Accumulate::F64,
                ..RunOptions::default()
            };
            assert!(rel_l2(&run(&graph, &[&x], &opts).unwrap()[0], &want) < 1e-7);
        }
    }

    #[test]
    fn log_softmax_and_hardmax_along_an_axis() {
        let shape = [2, 3, 4];
        let mut x: Vec<f32> = Rng::new(5).vec(24).iter().map(|v| v * 5.0).collect();
        x[4] = x[0]; // a tie along axis 1: the first wins
        for axis in 0..3 {
            let stride: usize = shape[axis + 1..].iter().product();
            let dim = shape[axis];
            let slice = |i: usize| {
                let base = i - ((i / stride) % dim) * stride;
                (0..dim).map(move |d| base + d * stride)
            };
            let log_want: Vec<f32> = (0..24)
                .map(|i| {
                    let lse: f64 = slice(i).map(|j| f64::from(x[j]).exp()).sum::<f64>().ln();
                    (f64::from(x[i]) - lse) as f32
                })
                .collect();
            let hard_want: Vec<f32> = (0..24)
                .map(|i| {
                    let first = slice(i).fold(None::<usize>, |best, j| match best {
                        Some(b) if x[b] >= x[j] => Some(b),
                        _ => Some(j),
                    });
                    f32::from(first == Some(i))
                })
                .collect();
            for (op, want) in [
                (Op::LogSoftmax { axis }, log_want),
                (Op::Hardmax { axis }, hard_want),
            ] {
                let mut b = Builder::new();
                let input = b.input("x", &shape);
                let y = b.op(op.clone(), &[input]);
                b.output(y);
                let graph = b.finish();
                let got = run1(&graph, &[&x]);
                assert!(rel_l2(&got, &want) < 1e-6, "{op:?}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn softmax_is_stable_for_large_inputs() {
        let mut b = Builder::new();
        let input = b.input("x", &[1, 3]);
        let y = b.op(Op::Softmax { axis: 1 }, &[input]);
        b.output(y);
        let graph = b.finish();
        let got = run1(&graph, &[&[1000.0, 1000.0, -1000.0]]);
        assert_eq!(got, vec![0.5, 0.5, 0.0]);
    }
}

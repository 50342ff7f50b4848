//! Softmax with ONNX opset ≥ 13 semantics: along one axis, each slice
//! normalized on its own, numerically stable (`exp(x − max) / Σ exp(x − max)`).
//! The exponentials and their sum are in the accumulation type.

use super::execute::{input, Ctx, OpResult, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use rayon::prelude::*;

pub(crate) fn softmax(ctx: &Ctx, axis: usize, inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => softmax_in::<f32>(axis, inputs),
        Accumulate::F64 => softmax_in::<f64>(axis, inputs),
    }
}

fn softmax_in<T: Scalar>(axis: usize, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let dim = *x
        .shape
        .get(axis)
        .ok_or_else(|| format!("axis {axis} out of range for {:?}", x.shape))?;
    let inner: usize = x.shape[axis + 1..].iter().product();
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
                    dst[d * inner + i] = (e / sum).to_f32();
                }
            }
        });
    Ok(Output::row_major(out))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{run1, Builder, Rng};
    use super::super::{rel_l2, run, Accumulate, RunOptions};
    use crate::ir::Op;

    #[test]
    fn softmax_normalizes_each_slice_along_the_axis() {
        let shape = [2, 3, 4];
        let x: Vec<f32> = Rng::new(31).vec(24).iter().map(|v| v * 5.0).collect();
        for axis in 0..3 {
            let mut b = Builder::new();
            let input = b.input("x", &shape);
            let y = b.node(Op::Softmax { axis }, &[input]);
            let graph = b.finish(&[y]);
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
    fn softmax_is_stable_for_large_inputs() {
        let mut b = Builder::new();
        let input = b.input("x", &[1, 3]);
        let y = b.node(Op::Softmax { axis: 1 }, &[input]);
        let graph = b.finish(&[y]);
        let got = run1(&graph, &[&[1000.0, 1000.0, -1000.0]]);
        assert_eq!(got, vec![0.5, 0.5, 0.0]);
    }
}

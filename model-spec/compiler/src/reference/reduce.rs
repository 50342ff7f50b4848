//! ReduceMean over a set of axes of a row-major tensor. Each input element
//! is added to the output element it reduces into (its index with the
//! reduced axes dropped), walking the input once in row-major order, then
//! every sum is divided by the number of elements it reduced. An empty axis
//! list reduces nothing (the mean of one element is itself).

use super::execute::{input, Ctx, OpResult, OutSpec, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use rayon::prelude::*;

pub(crate) fn reduce_mean(ctx: &Ctx, axes: &[usize], inputs: &[Tensor], out: &OutSpec) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => reduce_mean_in::<f32>(axes, inputs, out),
        Accumulate::F64 => reduce_mean_in::<f64>(axes, inputs, out),
    }
}

fn reduce_mean_in<T: Scalar>(axes: &[usize], inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let x = input(inputs, 0)?;
    let shape = x.shape;
    if let Some(&bad) = axes.iter().find(|&&a| a >= shape.len()) {
        return Err(format!("axis {bad} out of range for {shape:?}").into());
    }
    let reduced: Vec<bool> = (0..shape.len()).map(|i| axes.contains(&i)).collect();
    // Output element stride of each input axis (0 for reduced axes).
    let mut out_strides = vec![0; shape.len()];
    let mut stride = 1;
    for i in (0..shape.len()).rev() {
        if !reduced[i] {
            out_strides[i] = stride;
            stride *= shape[i];
        }
    }
    let out_len = stride;
    let count: usize = (0..shape.len())
        .filter(|&i| reduced[i])
        .map(|i| shape[i])
        .product();
    let total: usize = out.shape.iter().product();
    if total != out_len {
        return Err(format!("internal: output {:?} has the wrong size", out.shape).into());
    }
    let data = x.row_major();
    let mut sums = vec![T::ZERO; out_len];
    // Walk the input with an odometer over its axes.
    let mut index = vec![0usize; shape.len()];
    let mut target = 0usize;
    for &v in data.iter() {
        sums[target] += T::of(v);
        for axis in (0..shape.len()).rev() {
            index[axis] += 1;
            target += out_strides[axis];
            if index[axis] < shape[axis] {
                break;
            }
            target -= out_strides[axis] * shape[axis];
            index[axis] = 0;
        }
    }
    let count = T::of_usize(count);
    let mean: Vec<f32> = sums.into_par_iter().map(|s| (s / count).to_f32()).collect();
    Ok(Output::row_major(mean))
}

#[cfg(test)]
mod tests {
    use super::super::rel_l2;
    use super::super::testing::{run1, Builder, Rng};
    use crate::ir::Op;

    #[test]
    fn reduce_mean_over_axes_with_and_without_keepdims() {
        let shape = [2, 3, 4];
        let x = Rng::new(41).vec(24);
        let at = |i: usize, j: usize, k: usize| f64::from(x[(i * 3 + j) * 4 + k]);
        let cases: [(&[usize], Vec<f64>); 4] = [
            (
                &[1],
                (0..2)
                    .flat_map(|i| (0..4).map(move |k| (i, k)))
                    .map(|(i, k)| (0..3).map(|j| at(i, j, k)).sum::<f64>() / 3.0)
                    .collect(),
            ),
            (
                &[0, 2],
                (0..3)
                    .map(|j| {
                        (0..2)
                            .flat_map(|i| (0..4).map(move |k| (i, k)))
                            .map(|(i, k)| at(i, j, k))
                            .sum::<f64>()
                            / 8.0
                    })
                    .collect(),
            ),
            (
                &[0, 1, 2],
                vec![x.iter().map(|&v| f64::from(v)).sum::<f64>() / 24.0],
            ),
            (&[], x.iter().map(|&v| f64::from(v)).collect()),
        ];
        for (axes, want) in cases {
            for keepdims in [true, false] {
                let mut b = Builder::new();
                let input = b.input("x", &shape);
                let y = b.node(
                    Op::ReduceMean {
                        axes: axes.to_vec(),
                        keepdims,
                    },
                    &[input],
                );
                let graph = b.finish(&[y]);
                let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
                let got = run1(&graph, &[&x]);
                assert!(
                    rel_l2(&got, &want) < 1e-6,
                    "axes {axes:?} keepdims={keepdims}"
                );
            }
        }
    }
}

//! Reductions over a set of axes of a row-major tensor: the mean
//! ([`reduce_mean`]) and every [`ReduceKind`] ([`reduce`]). Each input
//! element is folded into the output element it reduces into (its index
//! with the reduced axes dropped), walking the input once in row-major
//! order. Sums, products and the sums of `|x|`, `x²` and `exp` are in the
//! accumulation type; max and min are exact in f32 and propagate NaN. The
//! log-sum-exp subtracts each output's max first (a second walk), so it
//! does not overflow. An empty axis list reduces nothing (every output is
//! its one input element, transformed as the kind says).

use super::op_io::{input, Ctx, OpError, OpResult, OutSpec, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use crate::ir::ReduceKind;

pub(crate) fn reduce_mean(ctx: &Ctx, axes: &[usize], inputs: &[Tensor], out: &OutSpec) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => mean_in::<f32>(axes, inputs, out),
        Accumulate::F64 => mean_in::<f64>(axes, inputs, out),
    }
}

pub(crate) fn reduce(
    ctx: &Ctx,
    kind: ReduceKind,
    axes: &[usize],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => reduce_in::<f32>(kind, axes, inputs, out),
        Accumulate::F64 => reduce_in::<f64>(kind, axes, inputs, out),
    }
}

/// Where each input element lands: the output index of every row-major
/// input element, the output length and the count reduced into each.
pub(super) struct Targets {
    pub of_input: Vec<usize>,
    pub out_len: usize,
    pub count: usize,
}

pub(super) fn targets(shape: &[usize], axes: &[usize]) -> Result<Targets, OpError> {
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
    let count = (0..shape.len())
        .filter(|&i| reduced[i])
        .map(|i| shape[i])
        .product();
    let total: usize = shape.iter().product();
    let mut of_input = Vec::with_capacity(total);
    // Walk the input with an odometer over its axes.
    let mut index = vec![0usize; shape.len()];
    let mut target = 0usize;
    for _ in 0..total {
        of_input.push(target);
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
    Ok(Targets {
        of_input,
        out_len,
        count,
    })
}

/// [`targets`] for a reduction writing `out`, which must have their size.
fn targets_of(shape: &[usize], axes: &[usize], out: &OutSpec) -> Result<Targets, OpError> {
    let t = targets(shape, axes)?;
    if out.shape.iter().product::<usize>() != t.out_len {
        return Err(format!("internal: output {:?} has the wrong size", out.shape).into());
    }
    Ok(t)
}

/// Σ `f(x)` into each output element, in `T`.
pub(super) fn sums<T: Scalar>(data: &[f32], t: &Targets, f: impl Fn(f32) -> T) -> Vec<T> {
    let mut sums = vec![T::ZERO; t.out_len];
    for (&v, &target) in data.iter().zip(&t.of_input) {
        sums[target] += f(v);
    }
    sums
}

/// The max (or min) of each output's elements; NaN if any is NaN.
fn extreme(data: &[f32], t: &Targets, max: bool) -> Vec<f32> {
    let init = if max {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    };
    let mut acc = vec![init; t.out_len];
    for (&v, &target) in data.iter().zip(&t.of_input) {
        let a = &mut acc[target];
        if v.is_nan() || (!a.is_nan() && ((max && v > *a) || (!max && v < *a))) {
            *a = v;
        }
    }
    acc
}

fn mean_in<T: Scalar>(axes: &[usize], inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let x = input(inputs, 0)?;
    let t = targets_of(x.shape, axes, out)?;
    let data = x.row_major();
    let count = T::of_usize(t.count);
    let mean = sums(&data, &t, T::of)
        .into_iter()
        .map(|s| (s / count).to_f32())
        .collect();
    Ok(Output::row_major(mean))
}

fn reduce_in<T: Scalar>(
    kind: ReduceKind,
    axes: &[usize],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let x = input(inputs, 0)?;
    let t = targets_of(x.shape, axes, out)?;
    let data = x.row_major();
    let sq = |v: f32| T::of(v) * T::of(v);
    let finish = |s: Vec<T>, f: fn(T) -> T| s.into_iter().map(|v| f(v).to_f32()).collect();
    let result: Vec<f32> = match kind {
        ReduceKind::Sum => finish(sums(&data, &t, T::of), |v| v),
        ReduceKind::L1 => finish(sums(&data, &t, |v| T::of(v.abs())), |v| v),
        ReduceKind::L2 => finish(sums(&data, &t, sq), T::sqrt),
        ReduceKind::SumSquare => finish(sums(&data, &t, sq), |v| v),
        ReduceKind::LogSum => finish(sums(&data, &t, T::of), T::ln),
        ReduceKind::Max => extreme(&data, &t, true),
        ReduceKind::Min => extreme(&data, &t, false),
        ReduceKind::Prod => {
            let mut prods = vec![T::of(1.0); t.out_len];
            for (&v, &target) in data.iter().zip(&t.of_input) {
                prods[target] = prods[target] * T::of(v);
            }
            finish(prods, |v| v)
        }
        ReduceKind::LogSumExp => {
            let max = extreme(&data, &t, true);
            let mut sums = vec![T::ZERO; t.out_len];
            for (&v, &target) in data.iter().zip(&t.of_input) {
                if max[target].is_finite() {
                    sums[target] += (T::of(v) - T::of(max[target])).exp();
                }
            }
            // An infinite (or NaN) max is the result: log Σ exp is +inf
            // with a +inf element, -inf when every element is -inf.
            max.iter()
                .zip(sums)
                .map(|(&m, s)| {
                    if m.is_finite() {
                        (s.ln() + T::of(m)).to_f32()
                    } else {
                        m
                    }
                })
                .collect()
        }
    };
    Ok(Output::row_major(result))
}

#[cfg(test)]
mod tests {
    use super::super::rel_l2;
    use super::super::testing::{run1, Rng};
    use crate::ir::{Op, ReduceKind};
    use crate::test_graphs::Builder;

    /// `f` over the elements of `x [2, 3, 4]` reducing into each output
    /// element, for `axes`, in f64.
    fn oracle(x: &[f32], axes: &[usize], f: impl Fn(&[f64]) -> f64) -> Vec<f32> {
        let kept: Vec<usize> = (0..3).filter(|a| !axes.contains(a)).collect();
        let mut groups: std::collections::BTreeMap<Vec<usize>, Vec<f64>> = Default::default();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let idx = [i, j, k];
                    let key: Vec<usize> = kept.iter().map(|&a| idx[a]).collect();
                    groups
                        .entry(key)
                        .or_default()
                        .push(f64::from(x[(i * 3 + j) * 4 + k]));
                }
            }
        }
        groups.values().map(|g| f(g) as f32).collect()
    }

    fn run_reduce(op: Op, x: &[f32]) -> Vec<f32> {
        let mut b = Builder::new();
        let input = b.input("x", &[2, 3, 4]);
        let y = b.op(op, &[input]);
        b.output(y);
        let graph = b.finish();
        run1(&graph, &[x])
    }

    #[test]
    fn reduce_mean_over_axes_with_and_without_keepdims() {
        let x = Rng::new(41).vec(24);
        for axes in [&[1][..], &[0, 2], &[0, 1, 2], &[]] {
            let want = oracle(&x, axes, |g| g.iter().sum::<f64>() / g.len() as f64);
            for keepdims in [true, false] {
                let op = Op::ReduceMean {
                    axes: axes.to_vec(),
                    keepdims,
                };
                let got = run_reduce(op, &x);
                assert!(rel_l2(&got, &want) < 1e-6, "axes {axes:?} {keepdims}");
            }
        }
    }

    #[test]
    fn every_kind_matches_its_definition() {
        let x: Vec<f32> = Rng::new(7).vec(24).iter().map(|v| v * 2.0 + 0.1).collect();
        let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.5).collect();
        type F = fn(&[f64]) -> f64;
        let cases: [(ReduceKind, F, bool); 9] = [
            (ReduceKind::Sum, |g| g.iter().sum(), false),
            (
                ReduceKind::Max,
                |g| g.iter().copied().fold(f64::MIN, f64::max),
                false,
            ),
            (
                ReduceKind::Min,
                |g| g.iter().copied().fold(f64::MAX, f64::min),
                false,
            ),
            (ReduceKind::Prod, |g| g.iter().product(), false),
            (ReduceKind::L1, |g| g.iter().map(|v| v.abs()).sum(), false),
            (
                ReduceKind::L2,
                |g| g.iter().map(|v| v * v).sum::<f64>().sqrt(),
                false,
            ),
            (
                ReduceKind::SumSquare,
                |g| g.iter().map(|v| v * v).sum(),
                false,
            ),
            (ReduceKind::LogSum, |g| g.iter().sum::<f64>().ln(), true),
            (
                ReduceKind::LogSumExp,
                |g| g.iter().map(|v| v.exp()).sum::<f64>().ln(),
                false,
            ),
        ];
        for (kind, f, positive) in cases {
            let x = if positive { &pos } else { &x };
            for axes in [&[1][..], &[0, 2], &[0, 1, 2], &[]] {
                let want = oracle(x, axes, f);
                let op = Op::Reduce {
                    kind,
                    axes: axes.to_vec(),
                    keepdims: axes.len() == 1,
                };
                let got = run_reduce(op, x);
                assert!(rel_l2(&got, &want) < 1e-6, "{kind:?} axes {axes:?}");
            }
        }
    }

    #[test]
    fn log_sum_exp_does_not_overflow_and_max_propagates_nan() {
        let mut x = vec![0.0f32; 24];
        x[0] = 1000.0;
        x[1] = 1000.0;
        x[5] = f32::NAN;
        let lse = run_reduce(
            Op::Reduce {
                kind: ReduceKind::LogSumExp,
                axes: vec![2],
                keepdims: false,
            },
            &x,
        );
        assert!((lse[0] - (1000.0 + 2f32.ln())).abs() < 1e-3, "{lse:?}");
        let max = run_reduce(
            Op::Reduce {
                kind: ReduceKind::Max,
                axes: vec![2],
                keepdims: false,
            },
            &x,
        );
        assert!(
            max[1].is_nan() && max[0] == 1000.0 && max[2] == 0.0,
            "{max:?}"
        );
    }
}

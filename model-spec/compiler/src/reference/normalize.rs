//! Normalizations: LayerNormalization ([`layer_norm`]), Group- and
//! InstanceNormalization ([`group_norm`]), MeanVarianceNormalization
//! ([`mean_variance_norm`]) and LpNormalization ([`lp_norm`]).
//!
//! The first three normalize groups of elements by their own statistics:
//! the mean, then the variance as the mean of squared deviations from it
//! (two passes, both in the accumulation type), and write
//! `(x − mean) · 1/sqrt(var + ε) · scale + bias` in that type, rounded to
//! f32 once. MeanVarianceNormalization follows its ONNX function body:
//! `(x − mean) / (sqrt(var) + 1e-9)`, no scale. LpNormalization divides each
//! slice along its axis by `(Σ |x|^p)^(1/p)` (p = 1 or 2); an all-zero slice
//! gives NaN, as ONNX's reference does.

use super::broadcast::Broadcast;
use super::op_io::{input, Ctx, OpError, OpResult, Output, Tensor};
use super::reduce::targets;
use super::scalar::Scalar;
use super::Accumulate;
use rayon::prelude::*;

/// Normalizes each row of `cols` elements of `data` in place (as f32
/// results), `affine(row, col)` giving each element's scale and bias.
fn normalize_rows<T: Scalar>(
    data: &[f32],
    cols: usize,
    epsilon: f32,
    affine: impl Fn(usize, usize) -> (f32, f32) + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0f32; data.len()];
    let count = T::of_usize(cols);
    out.par_chunks_mut(cols.max(1))
        .zip(data.par_chunks(cols.max(1)))
        .enumerate()
        .for_each(|(row, (dst, src))| {
            let (mean, inv_std) = moments(src.iter().map(|&v| T::of(v)), count, epsilon);
            for (col, (o, &v)) in dst.iter_mut().zip(src).enumerate() {
                let (scale, bias) = affine(row, col);
                *o = normalized(T::of(v), mean, inv_std, scale, bias).to_f32();
            }
        });
    out
}

/// The mean of `values` (`count` of them) and `1/sqrt(var + ε)`, the
/// variance the mean of squared deviations from the mean: two passes in T.
pub(crate) fn moments<T: Scalar>(
    values: impl Iterator<Item = T> + Clone,
    count: T,
    epsilon: f32,
) -> (T, T) {
    let mut sum = T::ZERO;
    for v in values.clone() {
        sum += v;
    }
    let mean = sum / count;
    let mut squares = T::ZERO;
    for v in values {
        let d = v - mean;
        squares += d * d;
    }
    (mean, T::of(1.0) / (squares / count + T::of(epsilon)).sqrt())
}

/// `(v − mean) · inv_std · scale + bias`, in T.
pub(crate) fn normalized<T: Scalar>(v: T, mean: T, inv_std: T, scale: f32, bias: f32) -> T {
    (v - mean) * inv_std * T::of(scale) + T::of(bias)
}

/// `src` broadcast to `shape`, row-major.
fn expand(src: &Tensor, shape: &[usize]) -> Result<Vec<f32>, OpError> {
    let data = src.row_major();
    Ok(Broadcast::new(src.shape, shape)?
        .offsets()
        .into_iter()
        .map(|i| data[i])
        .collect())
}

/// LayerNormalization over the axes `axis..` of `x`; inputs x, scale,
/// [bias], scale and bias broadcasting to `x.shape[axis..]`.
pub(crate) fn layer_norm(ctx: &Ctx, axis: usize, epsilon: f32, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    if axis >= x.shape.len() {
        return Err(format!("axis {axis} out of range for {:?}", x.shape).into());
    }
    let norm_shape = &x.shape[axis..];
    let cols: usize = norm_shape.iter().product();
    let scale = expand(input(inputs, 1)?, norm_shape)?;
    let bias = match inputs.get(2) {
        Some(b) => expand(b, norm_shape)?,
        None => vec![0.0; cols],
    };
    let data = x.row_major();
    let affine = |_: usize, col: usize| (scale[col], bias[col]);
    let out = match ctx.accumulate {
        Accumulate::F32 => normalize_rows::<f32>(&data, cols, epsilon, affine),
        Accumulate::F64 => normalize_rows::<f64>(&data, cols, epsilon, affine),
    };
    Ok(Output::row_major(out))
}

/// GroupNormalization of `x [N, C, ...]` in `groups` groups of channels;
/// inputs x, scale, bias, each of C (per channel) or `groups` (per group)
/// elements.
pub(crate) fn group_norm(ctx: &Ctx, groups: usize, epsilon: f32, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let (scale, bias) = (input(inputs, 1)?, input(inputs, 2)?);
    let &[n, c, ..] = x.shape else {
        return Err(format!("input must be at least 2-D, got {:?}", x.shape).into());
    };
    if groups == 0 || c % groups != 0 {
        return Err(format!("{c} channels do not split into {groups} groups").into());
    }
    let numel = |t: &Tensor| t.shape.iter().product::<usize>();
    let per_group = numel(scale) == groups && numel(bias) == groups;
    if !per_group && (numel(scale) != c || numel(bias) != c) {
        return Err(format!(
            "scale {:?} and bias {:?} must have {c} (per channel) or {groups} (per group) \
             elements",
            scale.shape, bias.shape
        )
        .into());
    }
    let spatial: usize = x.shape[2..].iter().product();
    let cols = c / groups * spatial;
    let (scale, bias) = (scale.row_major(), bias.row_major());
    let affine = |row: usize, col: usize| {
        let group = row % groups;
        let k = if per_group {
            group
        } else {
            group * (c / groups) + col / spatial
        };
        (scale[k], bias[k])
    };
    let data = x.row_major();
    debug_assert_eq!(data.len(), n * groups * cols);
    let out = match ctx.accumulate {
        Accumulate::F32 => normalize_rows::<f32>(&data, cols, epsilon, affine),
        Accumulate::F64 => normalize_rows::<f64>(&data, cols, epsilon, affine),
    };
    Ok(Output::row_major(out))
}

/// MeanVarianceNormalization over `axes` (sorted, non-negative).
pub(crate) fn mean_variance_norm(ctx: &Ctx, axes: &[usize], inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => mvn_in::<f32>(axes, inputs),
        Accumulate::F64 => mvn_in::<f64>(axes, inputs),
    }
}

fn mvn_in<T: Scalar>(axes: &[usize], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let t = targets(x.shape, axes)?;
    let data = x.row_major();
    let count = T::of_usize(t.count);
    let mut means = vec![T::ZERO; t.out_len];
    for (&v, &g) in data.iter().zip(&t.of_input) {
        means[g] += T::of(v);
    }
    means.iter_mut().for_each(|m| *m = *m / count);
    let mut vars = vec![T::ZERO; t.out_len];
    for (&v, &g) in data.iter().zip(&t.of_input) {
        let d = T::of(v) - means[g];
        vars[g] += d * d;
    }
    let denoms: Vec<T> = vars
        .into_iter()
        .map(|v| (v / count).sqrt() + T::of(1e-9))
        .collect();
    let out = data
        .iter()
        .zip(&t.of_input)
        .map(|(&v, &g)| ((T::of(v) - means[g]) / denoms[g]).to_f32())
        .collect();
    Ok(Output::row_major(out))
}

/// LpNormalization along `axis` with `p` 1 or 2.
pub(crate) fn lp_norm(ctx: &Ctx, axis: usize, p: u8, inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => lp_in::<f32>(axis, p, inputs),
        Accumulate::F64 => lp_in::<f64>(axis, p, inputs),
    }
}

fn lp_in<T: Scalar>(axis: usize, p: u8, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    if axis >= x.shape.len() || !(p == 1 || p == 2) {
        return Err(format!("axis {axis}, p {p} unsupported for {:?}", x.shape).into());
    }
    let t = targets(x.shape, &[axis])?;
    let data = x.row_major();
    let mut norms = vec![T::ZERO; t.out_len];
    for (&v, &g) in data.iter().zip(&t.of_input) {
        norms[g] += if p == 1 {
            T::of(v.abs())
        } else {
            T::of(v) * T::of(v)
        };
    }
    if p == 2 {
        norms.iter_mut().for_each(|n| *n = n.sqrt());
    }
    let out = data
        .iter()
        .zip(&t.of_input)
        .map(|(&v, &g)| (T::of(v) / norms[g]).to_f32())
        .collect();
    Ok(Output::row_major(out))
}

#[cfg(test)]
mod tests {
    use super::super::rel_l2;
    use super::super::testing::{run1, Rng};
    use crate::ir::Op;
    use crate::test_graphs::Builder;

    /// `(x − mean) / sqrt(var + eps)` of each chunk of `len`, in f64.
    fn standardize(x: &[f32], len: usize, eps: f64) -> Vec<f64> {
        x.chunks(len)
            .flat_map(|c| {
                let n = c.len() as f64;
                let mean = c.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
                let var = c
                    .iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / n;
                c.iter()
                    .map(move |&v| (f64::from(v) - mean) / (var + eps).sqrt())
            })
            .collect()
    }

    #[test]
    fn layer_norm_normalizes_from_the_axis_and_broadcasts_scale() {
        let x: Vec<f32> = Rng::new(3).vec(24).iter().map(|v| v * 4.0 + 1.0).collect();
        let scale = Rng::new(4).vec(4);
        let bias = Rng::new(5).vec(3 * 4);
        let mut b = Builder::new();
        let xi = b.input("x", &[2, 3, 4]);
        let s = b.constant("scale", &[4], scale.clone());
        let bi = b.constant("bias", &[3, 4], bias.clone());
        let y = b.op(
            Op::LayerNorm {
                axis: 1,
                epsilon: 1e-3,
            },
            &[xi, s, bi],
        );
        b.output(y);
        let graph = b.finish();
        let want: Vec<f32> = standardize(&x, 12, 1e-3)
            .iter()
            .enumerate()
            .map(|(i, &v)| (v * f64::from(scale[i % 4]) + f64::from(bias[i % 12])) as f32)
            .collect();
        assert!(rel_l2(&run1(&graph, &[&x]), &want) < 1e-6);
    }

    #[test]
    fn group_norm_per_channel_and_per_group() {
        // x [2, 4, 3]: 2 groups of 2 channels × 3 positions.
        let x: Vec<f32> = Rng::new(8).vec(24).iter().map(|v| v * 3.0).collect();
        let norm = standardize(&x, 6, 1e-5);
        for per_group in [false, true] {
            let len = if per_group { 2 } else { 4 };
            let scale = Rng::new(9).vec(len);
            let bias = Rng::new(10).vec(len);
            let mut b = Builder::new();
            let xi = b.input("x", &[2, 4, 3]);
            let s = b.constant("scale", &[len], scale.clone());
            let bi = b.constant("bias", &[len], bias.clone());
            let y = b.op(
                Op::GroupNorm {
                    groups: 2,
                    epsilon: 1e-5,
                },
                &[xi, s, bi],
            );
            b.output(y);
            let graph = b.finish();
            let want: Vec<f32> = (0..24)
                .map(|i| {
                    let channel = (i / 3) % 4;
                    let k = if per_group { channel / 2 } else { channel };
                    (norm[i] * f64::from(scale[k]) + f64::from(bias[k])) as f32
                })
                .collect();
            assert!(rel_l2(&run1(&graph, &[&x]), &want) < 1e-6, "{per_group}");
        }
    }

    #[test]
    fn mean_variance_and_lp_normalization() {
        // [2, 3, 2] over axes [0, 2]: each channel j over 4 elements.
        let x: Vec<f32> = Rng::new(11).vec(12).iter().map(|v| v * 2.0 + 0.3).collect();
        let at = |i: usize, j: usize, k: usize| f64::from(x[(i * 3 + j) * 2 + k]);
        let mut b = Builder::new();
        let xi = b.input("x", &[2, 3, 2]);
        let y = b.op(Op::MeanVarianceNorm { axes: vec![0, 2] }, &[xi]);
        b.output(y);
        let graph = b.finish();
        let want: Vec<f32> = (0..12)
            .map(|e| {
                let j = (e / 2) % 3;
                let g: Vec<f64> = (0..2)
                    .flat_map(|i| (0..2).map(move |k| (i, k)))
                    .map(|(i, k)| at(i, j, k))
                    .collect();
                let mean = g.iter().sum::<f64>() / 4.0;
                let std = (g.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
                ((f64::from(x[e]) - mean) / (std + 1e-9)) as f32
            })
            .collect();
        assert!(rel_l2(&run1(&graph, &[&x]), &want) < 1e-6);
        for p in [1u8, 2] {
            let mut b = Builder::new();
            let xi = b.input("x", &[2, 3, 2]);
            let y = b.op(Op::LpNorm { axis: 1, p }, &[xi]);
            b.output(y);
            let graph = b.finish();
            let want: Vec<f32> = (0..12)
                .map(|e| {
                    let (i, k) = (e / 6, e % 2);
                    let norm = (0..3)
                        .map(|j| at(i, j, k).abs().powi(i32::from(p)))
                        .sum::<f64>()
                        .powf(1.0 / f64::from(p));
                    (f64::from(x[e]) / norm) as f32
                })
                .collect();
            assert!(rel_l2(&run1(&graph, &[&x]), &want) < 1e-6, "p={p}");
        }
    }
}

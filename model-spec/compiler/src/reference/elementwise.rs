//! Elementwise ops. Unary ops and BatchNormalization work on the physical
//! elements directly (any layout: only the channel of an element matters);
//! Add/Sub/Mul/Div and the n-ary Sum broadcast row-major operands with numpy
//! rules. BatchNormalization is the inference form
//! `(x − mean) / sqrt(var + eps) · scale + bias` per channel (axis 1).

use super::broadcast::Broadcast;
use super::op_io::{input, Ctx, OpError, OpResult, OutSpec, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use crate::ir::{Activation, BinaryOp, Layout, UnaryOp};
use rayon::prelude::*;

const CHUNK: usize = 1 << 14;

pub(crate) fn unary(op: UnaryOp, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let mut data = x.data.to_vec();
    data.par_chunks_mut(CHUNK)
        .for_each(|chunk| chunk.iter_mut().for_each(|v| *v = op.apply(*v)));
    Ok(Output {
        data,
        layout: x.layout,
    })
}

pub(crate) fn binary(op: BinaryOp, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
    let (a_data, b_data) = (a.row_major(), b.row_major());
    let total: usize = out.shape.iter().product();
    let data = if a_data.len() == total && b_data.len() == total {
        a_data
            .par_iter()
            .with_min_len(CHUNK)
            .zip(b_data.par_iter())
            .map(|(&x, &y)| op.apply(x, y))
            .collect()
    } else {
        let mut data = vec![0.0f32; total];
        Broadcast::new(a.shape, out.shape)?.apply(&mut data, &a_data, |o, v| *o = v);
        Broadcast::new(b.shape, out.shape)?.apply(&mut data, &b_data, |o, v| *o = op.apply(*o, v));
        data
    };
    Ok(Output::row_major(data))
}

/// n-ary broadcast sum, accumulated left to right.
pub(crate) fn sum(ctx: &Ctx, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => sum_in::<f32>(inputs, out),
        Accumulate::F64 => sum_in::<f64>(inputs, out),
    }
}

fn sum_in<T: Scalar>(inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let total: usize = out.shape.iter().product();
    let mut acc = vec![T::ZERO; total];
    for (i, x) in inputs.iter().enumerate() {
        let data = x.row_major();
        let map = Broadcast::new(x.shape, out.shape)?;
        if i == 0 {
            map.apply(&mut acc, &data, |o, v| *o = T::of(v));
        } else {
            map.apply(&mut acc, &data, |o, v| *o += T::of(v));
        }
    }
    Ok(Output::row_major(T::into_f32(acc)))
}

pub(crate) fn batch_norm(ctx: &Ctx, epsilon: f32, inputs: &[Tensor]) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => batch_norm_in::<f32>(epsilon, inputs),
        Accumulate::F64 => batch_norm_in::<f64>(epsilon, inputs),
    }
}

fn batch_norm_in<T: Scalar>(epsilon: f32, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let c = *x
        .shape
        .get(1)
        .ok_or_else(|| OpError(format!("input {:?} needs rank ≥ 2", x.shape)))?;
    // Per channel: (mean, sqrt(var + eps), scale, bias).
    let mut params = Vec::with_capacity(4);
    for i in 1..5 {
        let p = input(inputs, i)?;
        if p.data.len() != c {
            return Err(OpError(format!(
                "parameter {i} has shape {:?}, expected [{c}]",
                p.shape
            )));
        }
        params.push(&p.data);
    }
    let (scale, bias, mean, var) = (params[0], params[1], params[2], params[3]);
    let channel: Vec<[T; 4]> = (0..c)
        .map(|j| {
            let denom = (T::of(var[j]) + T::of(epsilon)).sqrt();
            [T::of(mean[j]), denom, T::of(scale[j]), T::of(bias[j])]
        })
        .collect();
    let norm = |v: f32, [mean, denom, scale, bias]: [T; 4]| {
        ((T::of(v) - mean) / denom * scale + bias).to_f32()
    };
    let mut data = x.data.to_vec();
    let channels_last = x.layout == Layout::ChannelsLast && x.shape.len() == 4;
    if channels_last {
        // A row is one pixel's C channels.
        data.par_chunks_mut(c.max(1))
            .with_min_len(64)
            .for_each(|px| {
                for (v, &p) in px.iter_mut().zip(&channel) {
                    *v = norm(*v, p);
                }
            });
    } else {
        // A row is one (n, c) plane.
        let inner: usize = x.shape[2..].iter().product();
        data.par_chunks_mut(inner.max(1))
            .with_min_len((CHUNK / inner.max(1)).max(1))
            .enumerate()
            .for_each(|(row, plane)| {
                let p = channel[row % c];
                plane.iter_mut().for_each(|v| *v = norm(*v, p));
            });
    }
    Ok(Output {
        data,
        layout: x.layout,
    })
}

/// Applies the epilogue's activation to the f32 sum `acc + bias + residual`
/// (an f64 accumulator is rounded to f32 first, which ReLU and Clip commute
/// with; GELU then sees the f32 sum the GPU epilogue sees), before the store
/// rounds the result to the output dtype.
pub(crate) fn activate(data: &mut [f32], activation: Activation) {
    if activation == Activation::None {
        return;
    }
    data.par_chunks_mut(1 << 14)
        .for_each(|chunk| chunk.iter_mut().for_each(|x| *x = activation.apply(*x)));
}

#[cfg(test)]
mod tests {
    use super::super::testing::{run1, Rng};
    use super::super::{run, Accumulate, RunOptions};
    use crate::ir::{broadcast, BinaryOp, DType, Layout, Op, UnaryOp};
    use crate::test_graphs::Builder;

    /// Value of a row-major tensor of `shape` at output index `idx` under numpy broadcasting.
    fn at(data: &[f32], shape: &[usize], out_shape: &[usize], idx: usize) -> f32 {
        let mut rem = idx;
        let mut coords = vec![0; out_shape.len()];
        for axis in (0..out_shape.len()).rev() {
            coords[axis] = rem % out_shape[axis];
            rem /= out_shape[axis];
        }
        let lead = out_shape.len() - shape.len();
        let mut offset = 0;
        for (i, &d) in shape.iter().enumerate() {
            offset = offset * d + if d == 1 { 0 } else { coords[lead + i] };
        }
        data[offset]
    }

    const SHAPE_PAIRS: [(&[usize], &[usize]); 7] = [
        (&[2, 3, 4], &[2, 3, 4]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 4], &[3, 1]),
        (&[], &[2, 2]),
        (&[1], &[3, 1, 2]),
        (&[5, 1, 1], &[1, 2, 3]),
        (&[2, 3, 1, 1], &[2, 3, 4, 5]),
    ];

    #[test]
    fn binary_ops_broadcast_like_numpy() {
        let mut rng = Rng::new(11);
        for (a_shape, b_shape) in SHAPE_PAIRS {
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
                for (sa, sb) in [(a_shape, b_shape), (b_shape, a_shape)] {
                    let mut b = Builder::new();
                    let (x, y) = (b.input("a", sa), b.input("b", sb));
                    let z = b.op(Op::Binary(op), &[x, y]);
                    b.output(z);
                    let graph = b.finish();
                    let out_shape = broadcast(sa, sb).unwrap();
                    let da = rng.vec(sa.iter().product());
                    let db: Vec<f32> = rng
                        .vec(sb.iter().product())
                        .iter()
                        .map(|v| v + 2.0)
                        .collect();
                    let got = run1(&graph, &[&da, &db]);
                    let total: usize = out_shape.iter().product();
                    let want: Vec<f32> = (0..total)
                        .map(|i| op.apply(at(&da, sa, &out_shape, i), at(&db, sb, &out_shape, i)))
                        .collect();
                    assert_eq!(got, want, "{op:?} {sa:?} {sb:?}");
                }
            }
        }
    }

    #[test]
    fn sum_broadcasts_n_inputs_left_to_right() {
        let shapes: [&[usize]; 4] = [&[2, 3], &[3], &[2, 1], &[1, 1, 1]];
        let mut rng = Rng::new(12);
        let mut b = Builder::new();
        let ids: Vec<_> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| b.input(&format!("x{i}"), s))
            .collect();
        let y = b.op(Op::Sum, &ids);
        b.output(y);
        let graph = b.finish();
        let data: Vec<Vec<f32>> = shapes.iter().map(|s| rng.vec(s.iter().product())).collect();
        let feeds: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
        let got = run1(&graph, &feeds);
        let out_shape = [1, 2, 3];
        let want: Vec<f32> = (0..6)
            .map(|i| {
                let mut acc = at(&data[0], shapes[0], &out_shape, i);
                for k in 1..4 {
                    acc += at(&data[k], shapes[k], &out_shape, i);
                }
                acc
            })
            .collect();
        assert_eq!(got, want);
        let opts = RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        };
        let got64 = run(&graph, &feeds, &opts).unwrap().remove(0);
        assert!(super::super::rel_l2(&got64, &want) < 1e-6);
    }

    #[test]
    fn unary_ops_keep_the_layout() {
        let shape = [2, 3, 4, 5];
        let x: Vec<f32> = Rng::new(13).vec(120).iter().map(|v| v * 4.0).collect();
        for op in [
            UnaryOp::Relu,
            UnaryOp::Sigmoid,
            UnaryOp::Clip {
                min: -1.0,
                max: 0.5,
            },
        ] {
            for layout in [Layout::RowMajor, Layout::ChannelsLast] {
                let mut b = Builder::new();
                let input = b.input("x", &shape);
                b.set(input, layout, DType::F32);
                let y = b.op(Op::Unary(op), &[input]);
                b.set(y, layout, DType::F32);
                b.output(y);
                let graph = b.finish();
                let want: Vec<f32> = x.iter().map(|&v| op.apply(v)).collect();
                assert_eq!(run1(&graph, &[&x]), want, "{op:?} {layout:?}");
            }
        }
    }

    #[test]
    fn batch_norm_matches_formula_per_channel() {
        let mut rng = Rng::new(14);
        for shape in [vec![2, 3, 4, 5], vec![4, 3], vec![2, 3, 7]] {
            for layout in [Layout::RowMajor, Layout::ChannelsLast] {
                if layout == Layout::ChannelsLast && shape.len() != 4 {
                    continue;
                }
                let c = shape[1];
                let x = rng.vec(shape.iter().product());
                let params: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(c)).collect();
                let var: Vec<f32> = params[3].iter().map(|v| v.abs() + 0.1).collect();
                let mut b = Builder::new();
                let input = b.input("x", &shape);
                b.set(input, layout, DType::F32);
                let mut ids: Vec<_> = ["scale", "bias", "mean"]
                    .iter()
                    .enumerate()
                    .map(|(i, n)| b.constant(n, &[c], params[i].clone()))
                    .collect();
                ids.push(b.constant("var", &[c], var.clone()));
                let y = b.op(
                    Op::BatchNorm { epsilon: 1e-5 },
                    &[input, ids[0], ids[1], ids[2], ids[3]],
                );
                b.set(y, layout, DType::F32);
                b.output(y);
                let graph = b.finish();
                let inner: usize = shape[2..].iter().product();
                let want: Vec<f32> = x
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let ch = (i / inner) % c;
                        (v - params[2][ch]) / (var[ch] + 1e-5).sqrt() * params[0][ch]
                            + params[1][ch]
                    })
                    .collect();
                // Logical row-major input in, logical row-major output out.
                assert_eq!(run1(&graph, &[&x]), want, "{shape:?} {layout:?}");
            }
        }
    }
}

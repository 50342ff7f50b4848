//! Scaled dot-product attention ([`crate::ir::Op::Attention`]) on the CPU:
//! per (batch, head), scores = q·kᵀ·scale (+ mask, batch `b` reading mask
//! batch `b mod G`), softmax along the key axis (stable: `exp(s − max)`),
//! times v. With 16-bit operands the probabilities `exp(s − max)` are
//! rounded to the operands' type before the product with v and their sum,
//! as the tensor-core kernel rounds them for its second product (it rounds
//! against the running maximum of its key tiles, this against the row's). Products and sums accumulate in the accumulation type; tf32
//! rounding applies to the operands of both products as it does for MatMul.

use super::broadcast::Broadcast;
use super::op_io::{input, Ctx, OpError, OpResult, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use crate::ir::{AttentionViews, DType, Layout};
use rayon::prelude::*;
use std::borrow::Cow;

/// Attention of `inputs` (q, k, v, optional mask); operands with a view
/// are gathered into their logical `[B, H, S, D]` first, and the output
/// scattered through its view.
pub(crate) fn attention(
    ctx: &Ctx,
    scale: f32,
    causal: bool,
    views: Option<&AttentionViews>,
    inputs: &[Tensor],
) -> OpResult {
    let probabilities = match ctx.operands {
        DType::F16 | DType::BF16 => Some(ctx.operands),
        _ => None,
    };
    let Some(views) = views else {
        return attention_of(ctx, scale, causal, probabilities, inputs);
    };
    let mut gathered = Vec::with_capacity(3);
    for (i, t) in inputs.iter().enumerate().take(3) {
        gathered.push(match views.input(i) {
            Some(view) => Some((view.gather(&t.row_major())?, view.dims)),
            None => None,
        });
    }
    let logical: Vec<Tensor> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| match gathered.get(i).and_then(Option::as_ref) {
            Some((data, dims)) => Tensor {
                data: Cow::Borrowed(data.as_slice()),
                shape: dims.as_slice(),
                layout: Layout::RowMajor,
            },
            None => Tensor {
                data: Cow::Borrowed(&t.data),
                shape: t.shape,
                layout: t.layout,
            },
        })
        .collect();
    let out = attention_of(ctx, scale, causal, probabilities, &logical)?;
    match &views.out {
        Some((view, shape)) => Ok(Output::row_major(
            view.scatter(&out.data, shape.iter().product())?,
        )),
        None => Ok(out),
    }
}

/// Attention of row-major or laid-out operands; `probabilities`: the type
/// the probabilities are rounded to before the product with v.
fn attention_of(
    ctx: &Ctx,
    scale: f32,
    causal: bool,
    probabilities: Option<DType>,
    inputs: &[Tensor],
) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => attention_in::<f32>(ctx, scale, causal, probabilities, inputs),
        Accumulate::F64 => attention_in::<f64>(ctx, scale, causal, probabilities, inputs),
    }
}

/// Dimensions of one call: q `[b, h, sq, d]`, k/v `[b, hkv, skv, d|dv]`.
struct Dims {
    b: usize,
    h: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
}

fn dims(inputs: &[Tensor]) -> Result<Dims, OpError> {
    let (q, k, v) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let four = |s: &[usize], what: &str| -> Result<[usize; 4], OpError> {
        crate::ops::attention::as_4d(s).ok_or_else(|| {
            OpError(format!(
                "{what} must be 4-D [B, H, S, D] or 3-D [N, S, D], got {s:?}"
            ))
        })
    };
    let ([b, h, sq, d], [kb, hkv, skv, kd], [vb, vh, vs, dv]) = (
        four(q.shape, "q")?,
        four(k.shape, "k")?,
        four(v.shape, "v")?,
    );
    if kb != b || vb != b || vh != hkv || vs != skv || kd != d || hkv == 0 || h % hkv != 0 {
        return Err(OpError(format!(
            "q {:?}, k {:?}, v {:?} do not fit one attention",
            q.shape, k.shape, v.shape
        )));
    }
    Ok(Dims {
        b,
        h,
        hkv,
        sq,
        skv,
        d,
        dv,
    })
}

fn attention_in<T: Scalar>(
    ctx: &Ctx,
    scale: f32,
    causal: bool,
    probabilities: Option<DType>,
    inputs: &[Tensor],
) -> OpResult {
    let n = dims(inputs)?;
    let q = T::operand(inputs[0].row_major(), ctx.tf32);
    let k = T::operand(inputs[1].row_major(), ctx.tf32);
    let v = T::operand(inputs[2].row_major(), ctx.tf32);
    // The mask broadcast to [G, H, Sq, Skv]; batch b reads mask batch b mod G.
    let mask: Option<(usize, Vec<f32>)> = match inputs.get(3) {
        Some(m) => {
            let m4 = crate::ops::attention::mask_4d(m.shape, [n.b, n.h, n.sq, n.skv])
                .map_err(OpError)?;
            let full = [m4[0], n.h, n.sq, n.skv];
            let mut out = vec![0.0f32; full.iter().product()];
            Broadcast::new(&m4, &full)?.apply(&mut out, &m.row_major(), |o, x| *o = x);
            Some((m4[0], out))
        }
        None => None,
    };
    let group = n.h / n.hkv;
    let scale = T::of(scale);
    let mut out = vec![0.0f32; n.b * n.h * n.sq * n.dv];
    out.par_chunks_mut(n.sq * n.dv)
        .enumerate()
        .for_each(|(bh, dst)| {
            let (batch, head) = (bh / n.h, bh % n.h);
            let q = &q[bh * n.sq * n.d..][..n.sq * n.d];
            let kv = batch * n.hkv + head / group;
            let k = &k[kv * n.skv * n.d..][..n.skv * n.d];
            let v = &v[kv * n.skv * n.dv..][..n.skv * n.dv];
            let mut scores = vec![T::ZERO; n.skv];
            let mut row = vec![T::ZERO; n.dv];
            for i in 0..n.sq {
                let qi = &q[i * n.d..][..n.d];
                let visible = if causal { (i + 1).min(n.skv) } else { n.skv };
                for (j, s) in scores.iter_mut().enumerate() {
                    if j >= visible {
                        *s = T::ZERO;
                        continue;
                    }
                    let kj = &k[j * n.d..][..n.d];
                    let mut dot = T::ZERO;
                    for (&a, &b) in qi.iter().zip(kj) {
                        dot += a * b;
                    }
                    *s = dot * scale;
                    if let Some((groups, mask)) = &mask {
                        let row = ((batch % groups) * n.h + head) * n.sq + i;
                        *s += T::of(mask[row * n.skv + j]);
                    }
                }
                let max = scores[..visible]
                    .iter()
                    .map(|s| s.to_f32())
                    .fold(f32::NEG_INFINITY, f32::max);
                let mut sum = T::ZERO;
                for s in &mut scores[..visible] {
                    *s = (*s - T::of(max)).exp();
                    if let Some(dtype) = probabilities {
                        *s = T::of(dtype.round(s.to_f32()));
                    }
                    sum += *s;
                }
                row.iter_mut().for_each(|r| *r = T::ZERO);
                for (j, &p) in scores[..visible].iter().enumerate() {
                    let w = p / sum;
                    for (r, &x) in row.iter_mut().zip(&v[j * n.dv..][..n.dv]) {
                        *r += w * x;
                    }
                }
                for (o, &r) in dst[i * n.dv..][..n.dv].iter_mut().zip(&row) {
                    *o = r.to_f32();
                }
            }
        });
    Ok(Output::row_major(out))
}

#[cfg(test)]
mod tests {
    use super::super::testing::Rng;
    use super::super::{rel_l2, run, RunOptions};
    use crate::ir::{BinaryOp, Op};
    use crate::test_graphs::Builder;

    /// Attention against the same computation written as the decomposed
    /// graph exporters emit: MatMul(q, kᵀ) → Mul(scale) → Softmax → MatMul(v).
    #[test]
    fn attention_equals_its_decomposition() {
        let (b, h, s, d) = (2, 3, 5, 4);
        let mut rng = Rng::new(7);
        let (q, k, v) = (
            rng.vec(b * h * s * d),
            rng.vec(b * h * s * d),
            rng.vec(b * h * s * d),
        );
        let scale = 0.5f32;

        let mut g = Builder::new();
        let (qi, ki, vi) = (
            g.input("q", &[b, h, s, d]),
            g.input("k", &[b, h, d, s]),
            g.input("v", &[b, h, s, d]),
        );
        let qk = g.op(Op::MatMul, &[qi, ki]);
        let c = g.constant("scale", &[1], vec![scale]);
        let scaled = g.op(Op::Binary(BinaryOp::Mul), &[qk, c]);
        let p = g.op(Op::Softmax { axis: 3 }, &[scaled]);
        let y = g.op(Op::MatMul, &[p, vi]);
        g.output(y);
        let decomposed = g.finish();
        // kᵀ for the decomposed graph: [b, h, d, s].
        let mut kt = vec![0.0; k.len()];
        for bh in 0..b * h {
            for i in 0..s {
                for j in 0..d {
                    kt[bh * s * d + j * s + i] = k[bh * s * d + i * d + j];
                }
            }
        }
        let want = run(&decomposed, &[&q, &kt, &v], &RunOptions::default()).unwrap();

        let mut g = Builder::new();
        let (qi, ki, vi) = (
            g.input("q", &[b, h, s, d]),
            g.input("k", &[b, h, s, d]),
            g.input("v", &[b, h, s, d]),
        );
        let y = g.op(
            Op::Attention {
                scale,
                causal: false,
                views: None,
            },
            &[qi, ki, vi],
        );
        g.output(y);
        let fused = g.finish();
        let got = run(&fused, &[&q, &k, &v], &RunOptions::default()).unwrap();
        assert!(rel_l2(&got[0], &want[0]) < 1e-6);
    }

    /// A mask of G = 2 batches over B = 6 is read at batch b mod 2: the same
    /// as the mask tiled to all 6 batches.
    #[test]
    fn a_mask_with_fewer_batches_repeats_over_the_batch() {
        let (b, h, s, d, g) = (6, 2, 3, 4, 2);
        let mut rng = Rng::new(11);
        let (q, k, v) = (
            rng.vec(b * h * s * d),
            rng.vec(b * h * s * d),
            rng.vec(b * h * s * d),
        );
        let mask = rng.vec(g * s * s);
        let tiled: Vec<f32> = (0..b)
            .flat_map(|i| mask[(i % g) * s * s..][..s * s].to_vec())
            .collect();
        let run_with = |mask_shape: &[usize], mask: &[f32]| {
            let mut gb = Builder::new();
            let (qi, ki, vi) = (
                gb.input("q", &[b, h, s, d]),
                gb.input("k", &[b, h, s, d]),
                gb.input("v", &[b, h, s, d]),
            );
            let mi = gb.input("mask", mask_shape);
            let op = Op::Attention {
                scale: 0.5,
                causal: false,
                views: None,
            };
            let y = gb.op(op, &[qi, ki, vi, mi]);
            gb.output(y);
            let graph = gb.finish();
            run(&graph, &[&q, &k, &v, mask], &RunOptions::default()).unwrap()
        };
        let periodic = run_with(&[g, 1, s, s], &mask);
        let full = run_with(&[b, 1, s, s], &tiled);
        assert_eq!(periodic, full);
    }

    /// Causal attention: query 0 sees key 0 only, so its output is v's row 0.
    #[test]
    fn causal_attention_hides_later_keys() {
        let (s, d) = (3, 2);
        let mut rng = Rng::new(3);
        let (q, k, v) = (rng.vec(s * d), rng.vec(s * d), rng.vec(s * d));
        let mut g = Builder::new();
        let (qi, ki, vi) = (
            g.input("q", &[1, 1, s, d]),
            g.input("k", &[1, 1, s, d]),
            g.input("v", &[1, 1, s, d]),
        );
        let y = g.op(
            Op::Attention {
                scale: 1.0,
                causal: true,
                views: None,
            },
            &[qi, ki, vi],
        );
        g.output(y);
        let graph = g.finish();
        let got = run(&graph, &[&q, &k, &v], &RunOptions::default()).unwrap();
        assert_eq!(&got[0][..d], &v[..d]);
    }
}

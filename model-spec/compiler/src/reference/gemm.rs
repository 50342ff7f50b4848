//! Matrix products: the safe strided GEMM every product goes through
//! ([`matmul_into`], over matrixmultiply's `sgemm` / `dgemm`, which take
//! arbitrary row and column strides, so transposes are just strides), and
//! the ops Gemm (`alpha·op(A)·op(B) + beta·C`, C broadcast), MatMul (numpy
//! semantics: 1-D promotion, batch broadcasting) and Dense
//! (`act(x·wᵀ + bias + residual)`, its rows of x first layer-normalized
//! with a [`RowNorm`]). With tf32 precision both operands are
//! rounded to tf32 first; accumulation stays f32 (or f64).

use super::broadcast::Broadcast;
use super::elementwise::activate;
use super::op_io::{input, Ctx, OpError, OpResult, OutSpec, Output, Tensor};
use super::row_norm::RowFold;
use super::scalar::Scalar;
use super::Accumulate;
use crate::ir::{Epilogue, RowNorm};
use rayon::prelude::*;

/// A read-only strided matrix inside a slice.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a, T> {
    data: &'a [T],
    offset: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a, T> Operand<'a, T> {
    pub(crate) fn new(data: &'a [T], offset: usize, row_stride: usize, col_stride: usize) -> Self {
        Operand {
            data,
            offset,
            row_stride,
            col_stride,
        }
    }
}

/// A strided output matrix inside a slice.
pub(crate) struct OperandMut<'a, T> {
    data: &'a mut [T],
    offset: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a, T> OperandMut<'a, T> {
    pub(crate) fn new(
        data: &'a mut [T],
        offset: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        OperandMut {
            data,
            offset,
            row_stride,
            col_stride,
        }
    }
}

/// Checks that a `rows × cols` matrix at `offset` with the given strides lies
/// inside `len` elements; returns the strides as `isize` (0 where the
/// dimension is 1, so huge unused strides cannot overflow).
fn check(
    what: &str,
    len: usize,
    offset: usize,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
) -> Result<(isize, isize), OpError> {
    let rs = if rows > 1 { rs } else { 0 };
    let cs = if cols > 1 { cs } else { 0 };
    let last = (rows - 1)
        .checked_mul(rs)
        .and_then(|a| (cols - 1).checked_mul(cs).and_then(|b| a.checked_add(b)))
        .and_then(|a| a.checked_add(offset));
    match last {
        Some(last) if last < len => Ok((rs as isize, cs as isize)),
        _ => Err(OpError(format!(
            "internal: {what} matrix {rows}×{cols} at offset {offset} (strides {rs}, {cs}) exceeds {len} elements"
        ))),
    }
}

/// `C = A·B` for `[m, k, n]`, overwriting C (zeros when `k = 0`).
pub(crate) fn matmul_into<T: Scalar>(
    [m, k, n]: [usize; 3],
    a: Operand<T>,
    b: Operand<T>,
    c: OperandMut<T>,
) -> Result<(), OpError> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (rsc, csc) = check(
        "C",
        c.data.len(),
        c.offset,
        m,
        n,
        c.row_stride,
        c.col_stride,
    )?;
    // Distinct (i, j) must address distinct elements of C.
    let (ursc, ucsc) = (rsc as usize, csc as usize);
    let distinct = (m == 1 || ursc > 0)
        && (n == 1 || ucsc > 0)
        && (m == 1 || n == 1 || ursc >= n * ucsc || ucsc >= m * ursc);
    if !distinct {
        return Err(OpError(format!(
            "internal: output strides ({rsc}, {csc}) overlap for a {m}×{n} matrix"
        )));
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                c.data[c.offset + i * ursc + j * ucsc] = T::ZERO;
            }
        }
        return Ok(());
    }
    let (rsa, csa) = check(
        "A",
        a.data.len(),
        a.offset,
        m,
        k,
        a.row_stride,
        a.col_stride,
    )?;
    let (rsb, csb) = check(
        "B",
        b.data.len(),
        b.offset,
        k,
        n,
        b.row_stride,
        b.col_stride,
    )?;
    // SAFETY: `check` proved every addressed element of A, B and C lies in its
    // slice; C's elements are distinct, and C is a `&mut` borrow, so it
    // overlaps neither A nor B.
    unsafe {
        T::gemm_raw(
            m,
            k,
            n,
            a.data.as_ptr().add(a.offset),
            rsa,
            csa,
            b.data.as_ptr().add(b.offset),
            rsb,
            csb,
            c.data.as_mut_ptr().add(c.offset),
            rsc,
            csc,
        );
    }
    Ok(())
}

fn dims2(shape: &[usize], what: &str) -> Result<[usize; 2], OpError> {
    match *shape {
        [a, b] => Ok([a, b]),
        _ => Err(OpError(format!("{what} must be 2-D, got {shape:?}"))),
    }
}

/// ONNX Gemm: `y = alpha·op(A)·op(B) + beta·C`.
pub(crate) fn gemm(
    ctx: &Ctx,
    scale: [f32; 2],
    trans: [bool; 2],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => gemm_in::<f32>(ctx, scale, trans, inputs, out),
        Accumulate::F64 => gemm_in::<f64>(ctx, scale, trans, inputs, out),
    }
}

fn gemm_in<T: Scalar>(
    ctx: &Ctx,
    [alpha, beta]: [f32; 2],
    [trans_a, trans_b]: [bool; 2],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
    let [a0, a1] = dims2(a.shape, "Gemm A")?;
    let [b0, b1] = dims2(b.shape, "Gemm B")?;
    // op(A)[i][j] = A[j][i] when transposed: just swap the strides.
    let (m, k, sa) = if trans_a {
        (a1, a0, (1, a1))
    } else {
        (a0, a1, (a1, 1))
    };
    let (n, sb) = if trans_b {
        (b0, (1, b1))
    } else {
        (b1, (b1, 1))
    };
    let a_data = T::operand(a.row_major(), ctx.tf32);
    let b_data = T::operand(b.row_major(), ctx.tf32);
    let mut acc = vec![T::ZERO; m * n];
    matmul_into(
        [m, k, n],
        Operand::new(&a_data, 0, sa.0, sa.1),
        Operand::new(&b_data, 0, sb.0, sb.1),
        OperandMut::new(&mut acc, 0, n, 1),
    )?;
    let alpha = T::of(alpha);
    if alpha != T::of(1.0) {
        acc.par_iter_mut()
            .with_min_len(1 << 14)
            .for_each(|v| *v = alpha * *v);
    }
    if let Some(c) = inputs.get(2) {
        let beta = T::of(beta);
        let c_data = c.row_major();
        Broadcast::new(c.shape, out.shape)?
            .apply(&mut acc, &c_data, |y, cv| *y += beta * T::of(cv));
    }
    Ok(Output::row_major(T::into_f32(acc)))
}

/// numpy matmul: 1-D operands are promoted (and the added axis dropped from
/// the result), batch axes broadcast.
pub(crate) fn matmul(ctx: &Ctx, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => matmul_in::<f32>(ctx, inputs, out),
        Accumulate::F64 => matmul_in::<f64>(ctx, inputs, out),
    }
}

fn matmul_in<T: Scalar>(ctx: &Ctx, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(OpError("MatMul inputs must have rank ≥ 1".into()));
    }
    let a_shape: Vec<usize> = if a.shape.len() == 1 {
        vec![1, a.shape[0]]
    } else {
        a.shape.to_vec()
    };
    let b_shape: Vec<usize> = if b.shape.len() == 1 {
        vec![b.shape[0], 1]
    } else {
        b.shape.to_vec()
    };
    let (a_batch, a_mat) = a_shape.split_at(a_shape.len() - 2);
    let (b_batch, b_mat) = b_shape.split_at(b_shape.len() - 2);
    let (m, k, n) = (a_mat[0], a_mat[1], b_mat[1]);
    if b_mat[0] != k {
        return Err(OpError(format!(
            "inner dims differ: {:?} × {:?}",
            a.shape, b.shape
        )));
    }
    let batch = crate::ir::broadcast(a_batch, b_batch)?;
    let batches: usize = batch.iter().product();
    let a_offsets = Broadcast::new(a_batch, &batch)?.offsets();
    let b_offsets = Broadcast::new(b_batch, &batch)?.offsets();
    let a_data = T::operand(a.row_major(), ctx.tf32);
    let b_data = T::operand(b.row_major(), ctx.tf32);
    let mut acc = vec![T::ZERO; batches * m * n];
    if acc.len() != out.shape.iter().product::<usize>() {
        return Err(OpError(format!(
            "internal: output {:?} has the wrong size",
            out.shape
        )));
    }
    for (i, (ao, bo)) in a_offsets.into_iter().zip(b_offsets).enumerate() {
        matmul_into(
            [m, k, n],
            Operand::new(&a_data, ao * m * k, k, 1),
            Operand::new(&b_data, bo * k * n, n, 1),
            OperandMut::new(&mut acc, i * m * n, n, 1),
        )?;
    }
    Ok(Output::row_major(T::into_f32(acc)))
}

/// `y[M,N] = act(x[M,K]·w[N,K]ᵀ + bias + residual)`; with `norm`,
/// `act(r_m·(x·wᵀ − μ_m·s) + bias + residual)` ([`RowNorm`]).
pub(crate) fn dense(
    ctx: &Ctx,
    epilogue: &Epilogue,
    norm: Option<&RowNorm>,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => dense_in::<f32>(ctx, epilogue, norm, inputs, out),
        Accumulate::F64 => dense_in::<f64>(ctx, epilogue, norm, inputs, out),
    }
}

fn dense_in<T: Scalar>(
    ctx: &Ctx,
    epilogue: &Epilogue,
    norm: Option<&RowNorm>,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let [m, k] = dims2(x.shape, "Dense x")?;
    let [n, k2] = dims2(w.shape, "Dense w")?;
    if k != k2 || out.shape != [m, n] {
        return Err(OpError(format!(
            "Dense shapes {:?} × {:?}ᵀ → {:?}",
            x.shape, w.shape, out.shape
        )));
    }
    // The statistics read x as stored (never tf32-rounded); s is last.
    let sums_at = 2 + usize::from(epilogue.bias) + usize::from(epilogue.residual);
    let fold = match norm {
        Some(norm) => {
            let sums = input(inputs, sums_at)?.row_major();
            Some(RowFold::new(norm, &x.row_major(), k, sums, n)?)
        }
        None => None,
    };
    let x_data = T::operand(x.row_major(), ctx.tf32);
    let w_data = T::operand(w.row_major(), ctx.tf32);
    let mut acc = vec![T::ZERO; m * n];
    matmul_into(
        [m, k, n],
        Operand::new(&x_data, 0, k, 1),
        Operand::new(&w_data, 0, 1, k),
        OperandMut::new(&mut acc, 0, n, 1),
    )?;
    let bias = match epilogue.bias {
        true => Some(input(inputs, 2)?.row_major()),
        false => None,
    };
    let residual = match epilogue.residual {
        true => Some(input(inputs, 2 + usize::from(epilogue.bias))?.row_major()),
        false => None,
    };
    if bias.as_ref().is_some_and(|b| b.len() != n)
        || residual.as_ref().is_some_and(|r| r.len() != m * n)
    {
        return Err(OpError(format!(
            "bias or residual does not match output {:?}",
            out.shape
        )));
    }
    if bias.is_some() || residual.is_some() || fold.is_some() {
        acc.par_chunks_mut(n.max(1))
            .enumerate()
            .for_each(|(row, values)| {
                if let Some(fold) = &fold {
                    fold.apply(row, values);
                }
                for (j, v) in values.iter_mut().enumerate() {
                    if let Some(b) = &bias {
                        *v += T::of(b[j]);
                    }
                    if let Some(r) = &residual {
                        *v += T::of(r[row * n + j]);
                    }
                }
            });
    }
    let mut data = T::into_f32(acc);
    activate(&mut data, epilogue.activation);
    Ok(Output::row_major(data))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{run1, Rng};
    use super::super::{rel_l2, run, Accumulate, RunOptions};
    use crate::ir::{round_tf32, Activation, DType, Epilogue, Layout, Op, Precision};
    use crate::test_graphs::Builder;

    /// Row-major `[m, n]` product of element functions, f64 accumulation.
    fn naive(
        m: usize,
        k: usize,
        n: usize,
        a: impl Fn(usize, usize) -> f32,
        b: impl Fn(usize, usize) -> f32,
    ) -> Vec<f64> {
        let mut out = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                out.push(
                    (0..k)
                        .map(|t| f64::from(a(i, t)) * f64::from(b(t, j)))
                        .sum(),
                );
            }
        }
        out
    }

    #[test]
    fn gemm_handles_transposes_scales_and_c_broadcast() {
        let (m, k, n) = (5, 7, 4);
        let mut rng = Rng::new(21);
        let c_shapes: [Option<&[usize]>; 6] = [
            None,
            Some(&[5, 4]),
            Some(&[4]),
            Some(&[5, 1]),
            Some(&[1]),
            Some(&[]),
        ];
        for trans_a in [false, true] {
            for trans_b in [false, true] {
                for c_shape in c_shapes {
                    let a_shape = if trans_a { [k, m] } else { [m, k] };
                    let b_shape = if trans_b { [n, k] } else { [k, n] };
                    let (alpha, beta) = (0.5, -1.5);
                    let mut g = Builder::new();
                    let a = g.input("a", &a_shape);
                    let b = g.input("b", &b_shape);
                    let a_data = rng.vec(m * k);
                    let b_data = rng.vec(k * n);
                    let mut inputs = vec![a, b];
                    let c_data = c_shape.map(|s| rng.vec(s.iter().product()));
                    if let (Some(s), Some(d)) = (c_shape, &c_data) {
                        inputs.push(g.constant("c", s, d.clone()));
                    }
                    let op = Op::Gemm {
                        alpha,
                        beta,
                        trans_a,
                        trans_b,
                    };
                    let y = g.op(op, &inputs);
                    g.output(y);
                    let graph = g.finish();
                    let av = |i, t| {
                        if trans_a {
                            a_data[t * m + i]
                        } else {
                            a_data[i * k + t]
                        }
                    };
                    let bv = |t, j| {
                        if trans_b {
                            b_data[j * k + t]
                        } else {
                            b_data[t * n + j]
                        }
                    };
                    let prod = naive(m, k, n, av, bv);
                    let want: Vec<f32> = (0..m * n)
                        .map(|e| {
                            let (i, j) = (e / n, e % n);
                            let c = match (c_shape, &c_data) {
                                (Some(s), Some(d)) => match s.len() {
                                    2 if s[1] == 1 => d[i],
                                    2 => d[e],
                                    1 if s[0] == n && n != 1 => d[j],
                                    _ => d[0],
                                },
                                _ => 0.0,
                            };
                            (f64::from(alpha) * prod[e] + f64::from(beta) * f64::from(c)) as f32
                        })
                        .collect();
                    let got = run1(&graph, &[&a_data, &b_data]);
                    let err = rel_l2(&got, &want);
                    assert!(
                        err < 1e-6,
                        "transA={trans_a} transB={trans_b} C={c_shape:?}: {err}"
                    );
                }
            }
        }
    }

    #[test]
    fn matmul_promotes_vectors_and_broadcasts_batches() {
        let cases: [(&[usize], &[usize]); 7] = [
            (&[3, 4], &[4, 5]),
            (&[4], &[4, 3]),
            (&[2, 3, 4], &[4]),
            (&[1, 3, 4], &[5, 4, 2]),
            (&[2, 1, 3, 4], &[3, 4, 5]),
            (&[3], &[3]),
            (&[6, 1], &[1, 2]),
        ];
        let mut rng = Rng::new(22);
        for (sa, sb) in cases {
            let mut g = Builder::new();
            let (a, b) = (g.input("a", sa), g.input("b", sb));
            let y = g.op(Op::MatMul, &[a, b]);
            g.output(y);
            let graph = g.finish();
            let (da, db) = (rng.vec(sa.iter().product()), rng.vec(sb.iter().product()));
            // numpy semantics spelled out: promote, broadcast batch, multiply.
            let pa: Vec<usize> = if sa.len() == 1 {
                vec![1, sa[0]]
            } else {
                sa.to_vec()
            };
            let pb: Vec<usize> = if sb.len() == 1 {
                vec![sb[0], 1]
            } else {
                sb.to_vec()
            };
            let (m, k, n) = (pa[pa.len() - 2], pa[pa.len() - 1], pb[pb.len() - 1]);
            let batch = crate::ir::broadcast(&pa[..pa.len() - 2], &pb[..pb.len() - 2]).unwrap();
            let batches: usize = batch.iter().product();
            let batch_offset = |shape: &[usize], bi: usize| {
                // Index of batch `bi` (of `batch`) in a tensor whose batch dims are `shape`.
                let mut rem = bi;
                let mut coords = vec![0; batch.len()];
                for axis in (0..batch.len()).rev() {
                    coords[axis] = rem % batch[axis];
                    rem /= batch[axis];
                }
                let lead = batch.len() - shape.len();
                shape.iter().enumerate().fold(0, |acc, (i, &d)| {
                    acc * d + if d == 1 { 0 } else { coords[lead + i] }
                })
            };
            let mut want = Vec::new();
            for bi in 0..batches {
                let ao = batch_offset(&pa[..pa.len() - 2], bi) * m * k;
                let bo = batch_offset(&pb[..pb.len() - 2], bi) * k * n;
                let prod = naive(
                    m,
                    k,
                    n,
                    |i, t| da[ao + i * k + t],
                    |t, j| db[bo + t * n + j],
                );
                want.extend(prod.iter().map(|&v| v as f32));
            }
            let got = run1(&graph, &[&da, &db]);
            assert_eq!(got.len(), graph.value(y).numel());
            assert!(rel_l2(&got, &want) < 1e-6, "{sa:?} × {sb:?}");
        }
    }

    #[test]
    fn dense_epilogue_and_tf32() {
        let (m, k, n) = (3, 33, 10);
        let mut rng = Rng::new(23);
        let (xd, wd, bd, rd) = (rng.vec(m * k), rng.vec(n * k), rng.vec(n), rng.vec(m * n));
        let mut g = Builder::new();
        let x = g.input("x", &[m, k]);
        let w = g.constant("w", &[n, k], wd.clone());
        let b = g.constant("b", &[n], bd.clone());
        let r = g.input("r", &[m, n]);
        let epilogue = Epilogue {
            bias: true,
            residual: true,
            activation: Activation::Relu,
        };
        let y = g.op(
            Op::Dense {
                epilogue,
                norm: None,
            },
            &[x, w, b, r],
        );
        g.output(y);
        let graph = g.finish();
        let expect = |x: &[f32], w: &[f32]| -> Vec<f32> {
            let prod = naive(m, k, n, |i, t| x[i * k + t], |t, j| w[j * k + t]);
            (0..m * n)
                .map(|e| ((prod[e] as f32 + bd[e % n]) + rd[e]).max(0.0))
                .collect()
        };
        let got = run1(&graph, &[&xd, &rd]);
        assert!(rel_l2(&got, &expect(&xd, &wd)) < 1e-6);
        let opts = RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        };
        let got64 = run(&graph, &[&xd, &rd], &opts).unwrap().remove(0);
        assert!(rel_l2(&got64, &expect(&xd, &wd)) < 1e-6);
        let mut tf32 = graph.clone();
        tf32.precision = Precision::Tf32;
        let got_tf32 = run1(&tf32, &[&xd, &rd]);
        assert_ne!(got_tf32, got);
        assert!(rel_l2(&got_tf32, &got) < 2e-3);
        let round = |v: &[f32]| v.iter().map(|&e| round_tf32(e)).collect::<Vec<_>>();
        assert!(rel_l2(&got_tf32, &expect(&round(&xd), &round(&wd))) < 1e-6);
    }

    /// A GELU epilogue runs on the f32 sum and the store rounds once: an
    /// f16 output is `round(gelu(acc + bias))`, not the unfused Dense →
    /// Gelu's `round(gelu(round(acc + bias)))`.
    #[test]
    fn gelu_epilogue_runs_before_the_rounding_to_storage() {
        let (m, k, n) = (4, 24, 16);
        let mut rng = Rng::new(25);
        let (xd, wd, bd) = (rng.vec(m * k), rng.vec(n * k), rng.vec(n));
        for tanh in [false, true] {
            let gelu = Activation::Gelu { tanh };
            let mut g = Builder::new();
            let x = g.input("x", &[m, k]);
            let w = g.constant("w", &[n, k], wd.clone());
            let b = g.constant("b", &[n], bd.clone());
            let epilogue = Epilogue {
                bias: true,
                residual: false,
                activation: gelu,
            };
            let y = g.op(
                Op::Dense {
                    epilogue,
                    norm: None,
                },
                &[x, w, b],
            );
            g.set(y, Layout::RowMajor, DType::F16);
            g.output(y);
            let graph = g.finish();
            let prod = naive(m, k, n, |i, t| xd[i * k + t], |t, j| wd[j * k + t]);
            let sum: Vec<f32> = (0..m * n)
                .map(|e| (prod[e] + f64::from(bd[e % n])) as f32)
                .collect();
            let once: Vec<f32> = sum
                .iter()
                .map(|&v| DType::F16.round(gelu.apply(v)))
                .collect();
            let twice: Vec<f32> = sum
                .iter()
                .map(|&v| DType::F16.round(gelu.apply(DType::F16.round(v))))
                .collect();
            let opts = RunOptions {
                accumulate: Accumulate::F64,
                ..RunOptions::default()
            };
            let got = run(&graph, &[&xd], &opts).unwrap().remove(0);
            assert_eq!(got, once, "tanh {tanh}");
            assert_ne!(
                got, twice,
                "tanh {tanh}: the test should tell the two apart"
            );
        }
    }

    #[test]
    fn f64_accumulation_is_closer_on_long_reductions() {
        // A long dot product of values that cancel: f32 accumulation drifts.
        let k = 20_000;
        let mut rng = Rng::new(24);
        let a: Vec<f32> = rng.vec(k).iter().map(|v| v * 1000.0).collect();
        let b: Vec<f32> = rng.vec(k);
        let mut g = Builder::new();
        let (x, w) = (g.input("a", &[1, k]), g.input("b", &[k, 1]));
        let y = g.op(Op::MatMul, &[x, w]);
        g.output(y);
        let graph = g.finish();
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum();
        let opts = RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        };
        let got64 = run(&graph, &[&a, &b], &opts).unwrap()[0][0];
        assert_eq!(got64, exact as f32);
        let got32 = run1(&graph, &[&a, &b])[0];
        assert!((f64::from(got32) - exact).abs() >= (f64::from(got64) - exact).abs());
    }
}

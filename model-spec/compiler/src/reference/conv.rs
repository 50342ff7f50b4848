//! 2-D convolution (Conv and FusedConv), computed in the input's layout.
//!
//! Channels-last input (NHWC, with the weight moved to OHWI): per image and
//! group, im2col rows are output pixels, `col[P·Q, R·S·C/g] × Wᵀ` lands
//! directly in the NHWC output (row stride K); a 1×1 stride-1 unpadded conv
//! needs no im2col (the input *is* the matrix, for the whole batch at once).
//! Row-major input (NCHW, OIHW weight): per image and group,
//! `W[K/g, C/g·R·S] × col[C/g·R·S, P·Q]`. Depthwise convs (one input channel
//! per group) run as direct loops instead of thousands of tiny GEMMs. The
//! epilogue `act(acc + bias + residual)` is applied to the accumulator, which
//! is rounded to the output type once, at the store; a [`ChannelNorm`]
//! normalizes each pixel's channels of `acc + bias` first, in the
//! accumulation type.

use super::elementwise::activate;
use super::gemm::{matmul_into, Operand, OperandMut};
use super::normalize::{moments, normalized};
use super::op_io::{dims4, input, Ctx, OpError, OpResult, OutSpec, Output, Tensor};
use super::scalar::Scalar;
use super::Accumulate;
use crate::ir::{ChannelNorm, Conv2d, Epilogue, Layout, Shortcut};
use rayon::prelude::*;
use std::borrow::Cow;

/// What a FusedConv (or a Conv, as the epilogue of just its bias) adds to
/// the convolution's products.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fused<'a> {
    pub epilogue: &'a Epilogue,
    pub shortcut: Option<&'a Shortcut>,
    /// A norm over each pixel's channels; γ and β are the last two inputs.
    pub norm: Option<&'a ChannelNorm>,
}

pub(crate) fn conv(
    ctx: &Ctx,
    geometry: &Conv2d,
    fused: Fused,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    match ctx.accumulate {
        Accumulate::F32 => conv_in::<f32>(ctx, geometry, fused, inputs, out),
        Accumulate::F64 => conv_in::<f64>(ctx, geometry, fused, inputs, out),
    }
}

/// Sizes of one convolution (logical NCHW names).
#[derive(Debug, Clone, Copy)]
struct Dims {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    /// Input channels per group.
    cg: usize,
    /// Output channels per group.
    kg: usize,
    r: usize,
    s: usize,
    p: usize,
    q: usize,
    groups: usize,
    stride: [usize; 2],
    dilation: [usize; 2],
    /// Top and left padding.
    pad: [usize; 2],
}

impl Dims {
    /// Input row read by output row `pp` at kernel row `rr`, if not padding.
    fn in_row(&self, pp: usize, rr: usize) -> Option<usize> {
        let hh = (pp * self.stride[0] + rr * self.dilation[0]).checked_sub(self.pad[0])?;
        (hh < self.h).then_some(hh)
    }

    fn in_col(&self, qq: usize, ss: usize) -> Option<usize> {
        let ww = (qq * self.stride[1] + ss * self.dilation[1]).checked_sub(self.pad[1])?;
        (ww < self.w).then_some(ww)
    }

    /// Reduction length of one group: C/g·R·S.
    fn crs(&self) -> usize {
        self.cg * self.r * self.s
    }

    fn pointwise(&self) -> bool {
        self.r == 1
            && self.s == 1
            && self.stride == [1, 1]
            && self.p == self.h
            && self.q == self.w
            && self.pad == [0, 0]
    }
}

fn conv_in<T: Scalar>(
    ctx: &Ctx,
    geometry: &Conv2d,
    fused: Fused,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let Fused {
        epilogue,
        shortcut,
        norm,
    } = fused;
    let x = input(inputs, 0)?;
    let w = input(inputs, 1)?;
    let bias = match epilogue.bias {
        true => Some(input(inputs, 2)?),
        false => None,
    };
    let residual = match epilogue.residual {
        true => Some(input(inputs, 2 + usize::from(epilogue.bias))?),
        false => None,
    };
    let [n, c, h, wd] = dims4(x.shape, "conv input")?;
    let [k, w_channels, r, s] = dims4(w.shape, "conv weight")?;
    // With a shortcut the weight's first C input channels are the main
    // conv's (1×1, so both layouts store it as [K][C + Cs] rows).
    let cg = if shortcut.is_some() { c } else { w_channels };
    let [_, _, p, q] = dims4(out.shape, "conv output")?;
    let groups = geometry.groups;
    if groups == 0 || cg * groups != c || k % groups != 0 {
        return Err(OpError(format!(
            "groups={groups} does not fit input {:?} and weight {:?}",
            x.shape, w.shape
        )));
    }
    let d = Dims {
        n,
        c,
        h,
        w: wd,
        k,
        cg,
        kg: k / groups,
        r,
        s,
        p,
        q,
        groups,
        stride: geometry.strides,
        dilation: geometry.dilations,
        pad: [geometry.pads[0], geometry.pads[1]],
    };
    // Compute in the input's physical order; the weight follows it.
    let layout = x.layout;
    let xs = T::operand(Cow::Borrowed(&x.data), ctx.tf32);
    let mut ws = T::operand(w.in_layout(layout), ctx.tf32);
    let mut short = None;
    if let Some(shortcut) = shortcut {
        let xs_slot = 2 + usize::from(epilogue.bias) + usize::from(epilogue.residual);
        let (main_w, short_w) = split_rows(&ws, k, c);
        let xs_in = input(inputs, xs_slot)?;
        short = Some(shortcut_gemm(ctx, &d, shortcut, xs_in, layout, &short_w)?);
        ws = Cow::Owned(main_w);
    }
    let mut acc = vec![T::ZERO; n * k * p * q];
    match (layout, cg == 1 && groups > 1) {
        (Layout::ChannelsLast, true) => depthwise_nhwc(&d, &xs, &ws, &mut acc),
        (Layout::RowMajor, true) => depthwise_nchw(&d, &xs, &ws, &mut acc),
        (Layout::ChannelsLast, false) => gemm_nhwc(&d, &xs, &ws, &mut acc)?,
        (Layout::RowMajor, false) => gemm_nchw(&d, &xs, &ws, &mut acc)?,
    }
    if let Some(short) = short {
        acc.par_iter_mut()
            .zip(short.par_iter())
            .with_min_len(1 << 12)
            .for_each(|(a, b)| *a += *b);
    }
    let residual = residual.map(|t| t.in_layout(layout));
    let bias = bias.map(|t| &*t.data);
    if bias.is_some_and(|b| b.len() != k) || residual.as_ref().is_some_and(|r| r.len() != acc.len())
    {
        return Err(OpError(format!(
            "bias or residual does not match output {:?}",
            out.shape
        )));
    }
    add_bias_residual(&mut acc, layout, &d, bias, residual.as_deref());
    if let Some(norm) = norm {
        let at = inputs.len().saturating_sub(2);
        let (gamma, beta) = (input(inputs, at)?, input(inputs, at + 1)?);
        let (gamma, beta) = (gamma.row_major(), beta.row_major());
        if gamma.len() != k || beta.len() != k {
            return Err(OpError(format!(
                "the channel norm's scale and shift must have {k} elements"
            )));
        }
        normalize_channels(&mut acc, layout, &d, norm.epsilon, &gamma, &beta);
    }
    let mut data = T::into_f32(acc);
    activate(&mut data, epilogue.activation);
    Ok(Output { data, layout })
}

/// `[K][C + Cs]` weight rows split into `[K][C]` and `[K][Cs]`.
fn split_rows<T: Scalar>(w: &[T], k: usize, c: usize) -> (Vec<T>, Vec<T>) {
    let row = w.len() / k.max(1);
    let (mut main, mut short) = (
        Vec::with_capacity(k * c),
        Vec::with_capacity(w.len() - k * c),
    );
    for r in w.chunks_exact(row.max(1)) {
        main.extend_from_slice(&r[..c]);
        short.extend_from_slice(&r[c..]);
    }
    (main, short)
}

/// The shortcut's strided 1×1 conv of `xs` onto the main conv's output
/// grid `d`, in `layout` (the accumulator the main conv then adds to).
fn shortcut_gemm<T: Scalar>(
    ctx: &Ctx,
    d: &Dims,
    shortcut: &Shortcut,
    xs: &Tensor,
    layout: Layout,
    w: &[T],
) -> Result<Vec<T>, OpError> {
    let [n, cs, hs, ws] = dims4(xs.shape, "shortcut input")?;
    let ds = Dims {
        n,
        c: cs,
        h: hs,
        w: ws,
        k: d.k,
        cg: cs,
        kg: d.k,
        r: 1,
        s: 1,
        p: d.p,
        q: d.q,
        groups: 1,
        stride: shortcut.strides,
        dilation: [1, 1],
        pad: [0, 0],
    };
    let x = T::operand(xs.in_layout(layout), ctx.tf32);
    let mut acc = vec![T::ZERO; d.n * d.k * d.p * d.q];
    match layout {
        Layout::ChannelsLast => gemm_nhwc(&ds, &x, w, &mut acc)?,
        Layout::RowMajor => gemm_nchw(&ds, &x, w, &mut acc)?,
    }
    Ok(acc)
}

/// `acc = (acc + bias) + residual`, in the accumulation type.
fn add_bias_residual<T: Scalar>(
    acc: &mut [T],
    layout: Layout,
    d: &Dims,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) {
    if bias.is_none() && residual.is_none() {
        return;
    }
    // A row holds K channels of one pixel (NHWC) or one channel's P·Q pixels (NCHW).
    let channels_last = layout == Layout::ChannelsLast;
    let row_len = if channels_last { d.k } else { d.p * d.q };
    let k = d.k;
    acc.par_chunks_mut(row_len.max(1))
        .with_min_len(64)
        .enumerate()
        .for_each(|(row, values)| {
            let res = residual.map(|r| &r[row * row_len..][..values.len()]);
            for (j, a) in values.iter_mut().enumerate() {
                if let Some(b) = bias {
                    *a += T::of(b[if channels_last { j } else { row % k }]);
                }
                if let Some(r) = res {
                    *a += T::of(r[j]);
                }
            }
        });
}

/// Normalizes each output pixel's K accumulators (bias included) over its
/// channels, in place and in T: [`moments`] then [`normalized`] with the
/// channel's `gamma` and `beta`, as LayerNormalization over the channels
/// of the stored output would compute them, without the store's rounding
/// in between.
fn normalize_channels<T: Scalar>(
    acc: &mut [T],
    layout: Layout,
    d: &Dims,
    epsilon: f32,
    gamma: &[f32],
    beta: &[f32],
) {
    let (k, pq) = (d.k, d.p * d.q);
    let count = T::of_usize(k);
    match layout {
        // A pixel's channels are one row of K.
        Layout::ChannelsLast => acc.par_chunks_mut(k.max(1)).for_each(|px| {
            let (mean, inv_std) = moments(px.iter().copied(), count, epsilon);
            for (c, v) in px.iter_mut().enumerate() {
                *v = normalized(*v, mean, inv_std, gamma[c], beta[c]);
            }
        }),
        // An image's K planes of P·Q: a pixel's channels are P·Q apart.
        Layout::RowMajor => acc.par_chunks_mut((k * pq).max(1)).for_each(|image| {
            for px in 0..pq {
                let channel = |c: usize| image[c * pq + px];
                let (mean, inv_std) = moments((0..k).map(channel), count, epsilon);
                for c in 0..k {
                    let v = &mut image[c * pq + px];
                    *v = normalized(*v, mean, inv_std, gamma[c], beta[c]);
                }
            }
        }),
    }
}

fn gemm_nhwc<T: Scalar>(d: &Dims, x: &[T], w: &[T], acc: &mut [T]) -> Result<(), OpError> {
    let crs = d.crs();
    if d.pointwise() {
        // Every pixel of every image is a row of the input: one GEMM per group.
        for g in 0..d.groups {
            let a = Operand::new(x, g * d.cg, d.c, 1);
            let b = Operand::new(w, g * d.kg * crs, 1, crs);
            let c = OperandMut::new(acc, g * d.kg, d.k, 1);
            matmul_into([d.n * d.h * d.w, crs, d.kg], a, b, c)?;
        }
        return Ok(());
    }
    let image = d.h * d.w * d.c;
    let mut col = vec![T::ZERO; d.p * d.q * crs];
    for img in 0..d.n {
        let x_img = &x[img * image..][..image];
        for g in 0..d.groups {
            im2col_nhwc(d, x_img, g, &mut col);
            let a = Operand::new(&col, 0, crs, 1);
            let b = Operand::new(w, g * d.kg * crs, 1, crs);
            let c = OperandMut::new(acc, img * d.p * d.q * d.k + g * d.kg, d.k, 1);
            matmul_into([d.p * d.q, crs, d.kg], a, b, c)?;
        }
    }
    Ok(())
}

/// `col[(p, q), (r, s, c)]` of group `g` for one NHWC image.
fn im2col_nhwc<T: Scalar>(d: &Dims, x_img: &[T], g: usize, col: &mut [T]) {
    let crs = d.crs();
    col.par_chunks_mut((d.q * crs).max(1))
        .enumerate()
        .for_each(|(pp, block)| {
            for (qq, row) in block.chunks_exact_mut(crs.max(1)).enumerate() {
                for rr in 0..d.r {
                    let hh = d.in_row(pp, rr);
                    for ss in 0..d.s {
                        let dst = &mut row[(rr * d.s + ss) * d.cg..][..d.cg];
                        match (hh, d.in_col(qq, ss)) {
                            (Some(hh), Some(ww)) => {
                                let src = (hh * d.w + ww) * d.c + g * d.cg;
                                dst.copy_from_slice(&x_img[src..src + d.cg]);
                            }
                            _ => dst.fill(T::ZERO),
                        }
                    }
                }
            }
        });
}

fn gemm_nchw<T: Scalar>(d: &Dims, x: &[T], w: &[T], acc: &mut [T]) -> Result<(), OpError> {
    let crs = d.crs();
    let (hw, pq) = (d.h * d.w, d.p * d.q);
    let pointwise = d.pointwise();
    let mut col = match pointwise {
        true => Vec::new(),
        false => vec![T::ZERO; crs * pq],
    };
    for img in 0..d.n {
        for g in 0..d.groups {
            let b = if pointwise {
                Operand::new(x, (img * d.c + g * d.cg) * hw, hw, 1)
            } else {
                im2col_nchw(d, &x[img * d.c * hw..][..d.c * hw], g, &mut col);
                Operand::new(&col, 0, pq, 1)
            };
            let a = Operand::new(w, g * d.kg * crs, crs, 1);
            let c = OperandMut::new(acc, (img * d.k + g * d.kg) * pq, pq, 1);
            matmul_into([d.kg, crs, pq], a, b, c)?;
        }
    }
    Ok(())
}

/// `col[(c, r, s), (p, q)]` of group `g` for one NCHW image.
fn im2col_nchw<T: Scalar>(d: &Dims, x_img: &[T], g: usize, col: &mut [T]) {
    let hw = d.h * d.w;
    col.par_chunks_mut((d.p * d.q).max(1))
        .enumerate()
        .for_each(|(j, row)| {
            let (cc, rr, ss) = (j / (d.r * d.s), (j / d.s) % d.r, j % d.s);
            let plane = &x_img[(g * d.cg + cc) * hw..][..hw];
            for (pp, dst) in row.chunks_exact_mut(d.q.max(1)).enumerate() {
                let Some(hh) = d.in_row(pp, rr) else {
                    dst.fill(T::ZERO);
                    continue;
                };
                let src = &plane[hh * d.w..][..d.w];
                for (qq, v) in dst.iter_mut().enumerate() {
                    *v = d.in_col(qq, ss).map_or(T::ZERO, |ww| src[ww]);
                }
            }
        });
}

/// One input channel per group, NHWC: each output pixel accumulates its
/// R·S taps over all K channels at once (vectorizes over channels).
fn depthwise_nhwc<T: Scalar>(d: &Dims, x: &[T], w: &[T], acc: &mut [T]) {
    let (k, rs) = (d.k, d.r * d.s);
    // OHWI weight [K, R, S, 1] → [R·S, K].
    let mut wt = vec![T::ZERO; rs * k];
    for kk in 0..k {
        for t in 0..rs {
            wt[t * k + kk] = w[kk * rs + t];
        }
    }
    acc.par_chunks_mut((d.q * k).max(1))
        .enumerate()
        .for_each(|(row, block)| {
            let (img, pp) = (row / d.p, row % d.p);
            for (qq, px) in block.chunks_exact_mut(k.max(1)).enumerate() {
                for rr in 0..d.r {
                    let Some(hh) = d.in_row(pp, rr) else { continue };
                    for ss in 0..d.s {
                        let Some(ww) = d.in_col(qq, ss) else { continue };
                        let x_px = &x[((img * d.h + hh) * d.w + ww) * d.c..][..d.c];
                        let w_tap = &wt[(rr * d.s + ss) * k..][..k];
                        if d.kg == 1 {
                            for ((o, &xv), &wv) in px.iter_mut().zip(x_px).zip(w_tap) {
                                *o += xv * wv;
                            }
                        } else {
                            for (kk, (o, &wv)) in px.iter_mut().zip(w_tap).enumerate() {
                                *o += x_px[kk / d.kg] * wv;
                            }
                        }
                    }
                }
            }
        });
}

/// One input channel per group, NCHW: one output plane per task.
fn depthwise_nchw<T: Scalar>(d: &Dims, x: &[T], w: &[T], acc: &mut [T]) {
    let (hw, rs) = (d.h * d.w, d.r * d.s);
    acc.par_chunks_mut((d.p * d.q).max(1))
        .enumerate()
        .for_each(|(plane, out)| {
            let (img, kk) = (plane / d.k, plane % d.k);
            let x_plane = &x[(img * d.c + kk / d.kg) * hw..][..hw];
            let w_k = &w[kk * rs..][..rs];
            for (pp, out_row) in out.chunks_exact_mut(d.q.max(1)).enumerate() {
                for (qq, o) in out_row.iter_mut().enumerate() {
                    let mut sum = T::ZERO;
                    for rr in 0..d.r {
                        let Some(hh) = d.in_row(pp, rr) else { continue };
                        for ss in 0..d.s {
                            let Some(ww) = d.in_col(qq, ss) else { continue };
                            sum += x_plane[hh * d.w + ww] * w_k[rr * d.s + ss];
                        }
                    }
                    *o = sum;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::super::testing::{conv2d, naive_conv, physical, run1, Rng};
    use super::super::{rel_l2, run, Accumulate, RunOptions};
    use crate::ir::{
        Activation, ChannelNorm, Conv2d, DType, Epilogue, Graph, Layout, Op, Precision, Value,
    };
    use crate::test_graphs::Builder;

    /// `x [N,C,H,W]`, K output channels, geometry.
    struct Case {
        x: [usize; 4],
        k: usize,
        geometry: Conv2d,
    }

    fn cases() -> Vec<Case> {
        let case = |x, k, kernel, strides, pads, dilations, groups| Case {
            x,
            k,
            geometry: conv2d(kernel, strides, pads, dilations, groups),
        };
        vec![
            case([2, 8, 5, 6], 6, [1, 1], [1, 1], [0; 4], [1, 1], 1),
            case([1, 4, 7, 7], 5, [3, 3], [1, 1], [1; 4], [1, 1], 1),
            case([2, 3, 9, 8], 4, [3, 3], [2, 2], [1, 0, 2, 1], [1, 1], 1),
            case([1, 4, 9, 9], 3, [3, 3], [1, 1], [2; 4], [2, 2], 1),
            case([2, 8, 6, 5], 6, [3, 3], [1, 1], [1; 4], [1, 1], 2),
            case([1, 8, 7, 6], 6, [1, 1], [1, 1], [0; 4], [1, 1], 2),
            case([2, 8, 7, 7], 8, [3, 3], [2, 2], [1; 4], [1, 1], 8),
            case([1, 4, 6, 6], 8, [3, 3], [1, 1], [1, 2, 0, 1], [2, 1], 4),
            case([1, 8, 8, 8], 6, [1, 1], [2, 2], [0; 4], [1, 1], 1),
            case([1, 3, 16, 16], 4, [7, 7], [2, 2], [3; 4], [1, 1], 1),
            case([1, 5, 6, 9], 3, [2, 3], [1, 2], [0, 1, 1, 0], [1, 1], 1),
        ]
    }

    fn weight_shape(case: &Case) -> [usize; 4] {
        let g = &case.geometry;
        [case.k, case.x[1] / g.groups, g.kernel[0], g.kernel[1]]
    }

    /// x (row-major input) → [Convert to `layout`] → conv → output in `layout`.
    fn conv_graph(
        case: &Case,
        layout: Layout,
        bias: bool,
        epilogue: Option<Epilogue>,
        seed: u64,
    ) -> (Graph, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let ws = weight_shape(case);
        let mut b = Builder::new();
        let x = b.input("x", &case.x);
        let mut xin = x;
        if layout == Layout::ChannelsLast {
            xin = b.op(Op::Convert, &[x]);
            b.set(xin, Layout::ChannelsLast, DType::F32);
        }
        let wdata = physical(rng.vec(ws.iter().product()), &ws, layout);
        let w = b.constant_as("w", &ws, wdata, DType::F32, layout);
        let mut inputs = vec![xin, w];
        if bias {
            inputs.push(b.constant("b", &[case.k], rng.vec(case.k)));
        }
        let op = match epilogue {
            None => Op::Conv(case.geometry),
            Some(e) => {
                if e.residual {
                    let [n, _, h, wd] = case.x;
                    let [p, q] = case.geometry.output_hw(h, wd).unwrap();
                    let shape = [n, case.k, p, q];
                    let data = physical(rng.vec(n * case.k * p * q), &shape, layout);
                    let res = b.constant_as("res", &shape, data, DType::F32, layout);
                    inputs.push(res);
                }
                Op::FusedConv {
                    conv: case.geometry,
                    epilogue: e,
                    shortcut: None,
                    pool: None,
                    norm: None,
                }
            }
        };
        let y = b.op(op, &inputs);
        b.set(y, layout, DType::F32);
        b.output(y);
        let graph = b.finish();
        let xdata = rng.vec(case.x.iter().product());
        (graph, xdata)
    }

    /// The logical OIHW weight, bias and residual of a graph built above.
    fn params(graph: &Graph, name: &str) -> Option<Vec<f32>> {
        let v = graph.values.iter().find(|v| v.name == name)?;
        let data = v.constant_data()?.to_vec();
        Some(super::super::layout::to_row_major(data.into(), &v.shape, v.layout).into_owned())
    }

    fn naive_for(graph: &Graph, case: &Case, x: &[f32]) -> Vec<f32> {
        let w = params(graph, "w").unwrap();
        let bias = params(graph, "b");
        naive_conv(
            x,
            case.x,
            &w,
            weight_shape(case),
            &case.geometry,
            bias.as_deref(),
        )
    }

    #[test]
    fn conv_matches_naive_in_both_layouts() {
        for (i, case) in cases().iter().enumerate() {
            for layout in [Layout::RowMajor, Layout::ChannelsLast] {
                for bias in [false, true] {
                    let (graph, x) = conv_graph(case, layout, bias, None, i as u64);
                    let want = naive_for(&graph, case, &x);
                    let got = run1(&graph, &[&x]);
                    let err = rel_l2(&got, &want);
                    assert!(err < 1e-5, "case {i} {layout:?} bias={bias}: rel err {err}");
                    let f64_opts = RunOptions {
                        accumulate: Accumulate::F64,
                        ..RunOptions::default()
                    };
                    let got64 = run(&graph, &[&x], &f64_opts).unwrap().remove(0);
                    let err64 = rel_l2(&got64, &want);
                    assert!(err64 < 1e-7, "case {i} {layout:?} f64: rel err {err64}");
                }
            }
        }
    }

    /// A depthwise conv with bias and a [`ChannelNorm`] is the naive conv
    /// normalized per pixel over its channels (f64 here), in both layouts.
    #[test]
    fn channel_norm_normalizes_each_pixel_of_the_conv_output() {
        let case = Case {
            x: [2, 8, 6, 7],
            k: 8,
            geometry: conv2d([3, 3], [1, 2], [1, 1, 1, 0], [1, 1], 8),
        };
        let bias = Epilogue {
            bias: true,
            ..Epilogue::NONE
        };
        for layout in [Layout::RowMajor, Layout::ChannelsLast] {
            let (mut graph, x) = conv_graph(&case, layout, true, Some(bias), 7);
            let mut rng = Rng::new(8);
            let gamma: Vec<f32> = rng.vec(8).iter().map(|v| 1.0 + v).collect();
            let beta = rng.vec(8);
            let g = graph.add_value(Value::constant("gamma", vec![8], gamma.clone()));
            let b = graph.add_value(Value::constant("beta", vec![8], beta.clone()));
            let node = graph.nodes.last_mut().expect("the conv");
            let Op::FusedConv { norm, .. } = &mut node.op else {
                panic!("the conv is last");
            };
            *norm = Some(ChannelNorm { epsilon: 1e-3 });
            node.inputs.extend([g, b]);
            crate::ir::verify(&graph).unwrap();
            let conv = naive_for(&graph, &case, &x);
            let [p, q] = case.geometry.output_hw(6, 7).unwrap();
            let [n, k] = [2, 8];
            assert_eq!(conv.len(), n * k * p * q);
            let mut want = vec![0.0f32; conv.len()];
            for img in 0..n {
                for px in 0..p * q {
                    let at = |c: usize| (img * k + c) * p * q + px;
                    let v: Vec<f64> = (0..k).map(|c| conv[at(c)] as f64).collect();
                    let mean = v.iter().sum::<f64>() / k as f64;
                    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / k as f64;
                    let rstd = 1.0 / (var + 1e-3).sqrt();
                    for c in 0..k {
                        let y = (v[c] - mean) * rstd * gamma[c] as f64 + beta[c] as f64;
                        want[at(c)] = y as f32;
                    }
                }
            }
            let err = rel_l2(&run1(&graph, &[&x]), &want);
            assert!(err < 1e-5, "{layout:?}: rel err {err}");
            let f64_opts = RunOptions {
                accumulate: Accumulate::F64,
                ..RunOptions::default()
            };
            let got64 = run(&graph, &[&x], &f64_opts).unwrap().remove(0);
            let err64 = rel_l2(&got64, &want);
            assert!(err64 < 1e-7, "{layout:?} f64: rel err {err64}");
        }
    }

    #[test]
    fn nchw_and_nhwc_agree() {
        for (i, case) in cases().iter().enumerate() {
            let (nchw, x) = conv_graph(case, Layout::RowMajor, true, None, 100 + i as u64);
            let (nhwc, x2) = conv_graph(case, Layout::ChannelsLast, true, None, 100 + i as u64);
            assert_eq!(x, x2);
            let (a, b) = (run1(&nchw, &[&x]), run1(&nhwc, &[&x]));
            let err = rel_l2(&b, &a);
            assert!(err < 1e-6, "case {i}: NHWC vs NCHW rel err {err}");
            // With f64 accumulation both round the same exact sums.
            let opts = RunOptions {
                accumulate: Accumulate::F64,
                ..RunOptions::default()
            };
            let a = run(&nchw, &[&x], &opts).unwrap();
            let b = run(&nhwc, &[&x], &opts).unwrap();
            assert!(rel_l2(&b[0], &a[0]) < 1e-7, "case {i} f64");
        }
    }

    #[test]
    fn fused_epilogue_is_act_of_acc_plus_bias_plus_residual() {
        let activations = [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: -0.5,
                max: 0.75,
            },
            Activation::Gelu { tanh: false },
            Activation::Gelu { tanh: true },
        ];
        for (i, case) in cases().iter().enumerate() {
            for layout in [Layout::RowMajor, Layout::ChannelsLast] {
                for (j, &activation) in activations.iter().enumerate() {
                    for (bias, residual) in [(true, true), (false, true), (true, false)] {
                        let epilogue = Epilogue {
                            bias,
                            residual,
                            activation,
                        };
                        let (graph, x) =
                            conv_graph(case, layout, bias, Some(epilogue), (i * 10 + j) as u64);
                        let conv = naive_for(&graph, case, &x);
                        let res = params(&graph, "res");
                        let want: Vec<f32> = conv
                            .iter()
                            .enumerate()
                            .map(|(e, &v)| activation.apply(v + res.as_ref().map_or(0.0, |r| r[e])))
                            .collect();
                        let got = run1(&graph, &[&x]);
                        let err = rel_l2(&got, &want);
                        assert!(err < 1e-5, "case {i} {layout:?} {epilogue}: rel err {err}");
                    }
                }
            }
        }
    }

    #[test]
    fn f16_output_is_rounded_once_at_the_store() {
        let case = &cases()[1];
        for layout in [Layout::RowMajor, Layout::ChannelsLast] {
            let (graph, x) = conv_graph(case, layout, true, None, 7);
            let full = run1(&graph, &[&x]);
            for dtype in [DType::F16, DType::BF16] {
                let mut g = graph.clone();
                let out = g.outputs[0];
                g.value_mut(out).dtype = dtype;
                let got = run1(&g, &[&x]);
                let want: Vec<f32> = full.iter().map(|&v| dtype.round(v)).collect();
                assert_eq!(got, want, "{layout:?} {dtype}");
                assert_ne!(got, full);
            }
        }
    }

    #[test]
    fn f16_input_storage_rounds_the_input() {
        let case = &cases()[0];
        let (graph, x) = conv_graph(case, Layout::RowMajor, false, None, 8);
        let mut g = graph.clone();
        let input = g.inputs[0];
        g.value_mut(input).dtype = DType::F16;
        let rounded: Vec<f32> = x.iter().map(|&v| DType::F16.round(v)).collect();
        assert_eq!(run1(&g, &[&x]), run1(&graph, &[&rounded]));
    }

    #[test]
    fn tf32_rounds_operands_and_stays_close() {
        for (i, case) in cases().iter().enumerate() {
            for layout in [Layout::RowMajor, Layout::ChannelsLast] {
                let (graph, x) = conv_graph(case, layout, true, None, 50 + i as u64);
                let exact = run1(&graph, &[&x]);
                let mut tf32 = graph.clone();
                tf32.precision = Precision::Tf32;
                let got = run1(&tf32, &[&x]);
                assert_ne!(got, exact, "case {i}: tf32 should change the result");
                let err = rel_l2(&got, &exact);
                assert!(err < 2e-3, "case {i}: tf32 rel err {err}");
                // Naive conv on rounded operands (bias is not an operand).
                let round = |v: &[f32]| {
                    v.iter()
                        .map(|&e| crate::ir::round_tf32(e))
                        .collect::<Vec<_>>()
                };
                let w = round(&params(&graph, "w").unwrap());
                let bias = params(&graph, "b");
                let want = naive_conv(
                    &round(&x),
                    case.x,
                    &w,
                    weight_shape(case),
                    &case.geometry,
                    bias.as_deref(),
                );
                let err = rel_l2(&got, &want);
                assert!(
                    err < 1e-5,
                    "case {i} {layout:?}: tf32 vs naive on rounded operands {err}"
                );
            }
        }
    }

    #[test]
    fn weight_layout_may_differ_from_input_layout() {
        // NCHW input with an OHWI weight, NHWC output: the op re-lays out both.
        let case = &cases()[2];
        let (graph, x) = conv_graph(case, Layout::RowMajor, true, None, 9);
        let want = run1(&graph, &[&x]);
        let mut g = graph.clone();
        let w = g.values.iter().position(|v| v.name == "w").unwrap();
        let logical = params(&graph, "w").unwrap();
        let shape = g.values[w].shape.clone();
        let cl = super::super::layout::relayout_vec(
            logical,
            &shape,
            Layout::RowMajor,
            Layout::ChannelsLast,
        );
        g.values[w].kind = crate::ir::ValueKind::Constant(std::sync::Arc::new(cl));
        g.values[w].layout = Layout::ChannelsLast;
        let out = g.outputs[0];
        g.value_mut(out).layout = Layout::ChannelsLast;
        crate::ir::verify(&g).unwrap();
        assert!(rel_l2(&run1(&g, &[&x]), &want) < 1e-6);
    }
}

//! Direct-loop evaluation of small graphs, for checking that a pass keeps
//! what a graph computes.
//!
//! Deliberately simple and independent of `crate::reference`: every value is
//! held as logical (row-major) f32 data. Constants are read through their
//! declared layout (so a wrongly packed weight shows), every node's result
//! is rounded to its output's dtype, and arithmetic accumulates in f64.
//! Layouts of activations do not change semantics and are ignored (the IR
//! verifier checks that bytes are read in an order the op understands).

use crate::ir::{broadcast, Conv2d, Epilogue, Graph, Layout, Op, Pool2d, Value, ValueKind};

/// Logical data of a value held in `value.layout` order.
fn logical(value: &Value, physical: &[f32]) -> Vec<f32> {
    if value.layout == Layout::RowMajor {
        return physical.to_vec();
    }
    let strides = value.layout.strides(&value.shape);
    let mut out = vec![0.0; physical.len()];
    for (i, slot) in out.iter_mut().enumerate() {
        let mut rest = i;
        let mut offset = 0;
        for axis in (0..value.shape.len()).rev() {
            offset += (rest % value.shape[axis]) * strides[axis];
            rest /= value.shape[axis];
        }
        *slot = physical[offset];
    }
    out
}

/// Runs `graph` on `inputs` (logical f32 data, one per graph input).
pub fn evaluate(graph: &Graph, inputs: &[&[f32]]) -> Vec<Vec<f32>> {
    let mut data: Vec<Option<Vec<f32>>> = vec![None; graph.values.len()];
    for (&id, &input) in graph.inputs.iter().zip(inputs) {
        let dtype = graph.value(id).dtype;
        data[id.index()] = Some(input.iter().map(|&x| dtype.round(x)).collect());
    }
    for (i, value) in graph.values.iter().enumerate() {
        if let ValueKind::Constant(c) = &value.kind {
            data[i] = Some(logical(value, c));
        }
    }
    for node in &graph.nodes {
        let args: Vec<&[f32]> = node
            .inputs
            .iter()
            .map(|v| data[v.index()].as_deref().expect("value computed"))
            .collect();
        let shapes: Vec<&[usize]> = node
            .inputs
            .iter()
            .map(|&v| graph.value(v).shape.as_slice())
            .collect();
        let out = graph.value(node.output);
        let result = eval_node(&node.op, &args, &shapes, &out.shape);
        assert_eq!(result.len(), out.numel(), "{}", node.name);
        data[node.output.index()] = Some(result.into_iter().map(|x| out.dtype.round(x)).collect());
    }
    graph
        .outputs
        .iter()
        .map(|v| data[v.index()].clone().expect("output computed"))
        .collect()
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Index into a row-major tensor of `shape` broadcast to `out_shape`.
fn broadcast_index(shape: &[usize], out_shape: &[usize], mut flat: usize) -> usize {
    let mut index = 0;
    let mut stride = 1;
    let offset = out_shape.len() - shape.len();
    for axis in (0..out_shape.len()).rev() {
        let coord = flat % out_shape[axis];
        flat /= out_shape[axis];
        if axis >= offset {
            let dim = shape[axis - offset];
            if dim != 1 {
                index += coord * stride;
            }
            stride *= dim;
        }
    }
    index
}

fn conv(c: &Conv2d, x: &[f32], xs: &[usize], w: &[f32], ws: &[usize], out: &[usize]) -> Vec<f32> {
    let (n, ci, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (k, cg, r, s) = (ws[0], ws[1], ws[2], ws[3]);
    let (p, q) = (out[2], out[3]);
    let kg = k / c.groups;
    let mut y = vec![0.0; numel(out)];
    for b in 0..n {
        for o in 0..k {
            let g = o / kg;
            for oy in 0..p {
                for ox in 0..q {
                    let mut acc = 0.0f64;
                    for cc in 0..cg {
                        let ch = g * cg + cc;
                        for ky in 0..r {
                            for kx in 0..s {
                                let iy = (oy * c.strides[0] + ky * c.dilations[0]) as isize
                                    - c.pads[0] as isize;
                                let ix = (ox * c.strides[1] + kx * c.dilations[1]) as isize
                                    - c.pads[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xv = x[((b * ci + ch) * h + iy as usize) * wd + ix as usize];
                                let wv = w[((o * cg + cc) * r + ky) * s + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((b * k + o) * p + oy) * q + ox] = acc as f32;
                }
            }
        }
    }
    y
}

fn pool(
    pool: &Pool2d,
    x: &[f32],
    xs: &[usize],
    out: &[usize],
    max: bool,
    count_pad: bool,
) -> Vec<f32> {
    let (h, w) = (xs[2], xs[3]);
    let (p, q) = (out[2], out[3]);
    let mut y = vec![0.0; numel(out)];
    for plane in 0..xs[0] * xs[1] {
        for oy in 0..p {
            for ox in 0..q {
                let (mut best, mut sum, mut count) = (f32::NEG_INFINITY, 0.0f64, 0usize);
                for ky in 0..pool.kernel[0] {
                    for kx in 0..pool.kernel[1] {
                        let iy = (oy * pool.strides[0] + ky * pool.dilations[0]) as isize
                            - pool.pads[0] as isize;
                        let ix = (ox * pool.strides[1] + kx * pool.dilations[1]) as isize
                            - pool.pads[1] as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            count += count_pad as usize;
                            continue;
                        }
                        let v = x[(plane * h + iy as usize) * w + ix as usize];
                        best = best.max(v);
                        sum += v as f64;
                        count += 1;
                    }
                }
                y[(plane * p + oy) * q + ox] = if max {
                    best
                } else {
                    (sum / count as f64) as f32
                };
            }
        }
    }
    y
}

/// `act(acc + bias + residual)` over `[rows, columns]`-shaped `acc` with the
/// bias indexed by `column(i)`.
fn epilogue(
    e: &Epilogue,
    mut acc: Vec<f32>,
    args: &[&[f32]],
    first_extra: usize,
    column: impl Fn(usize) -> usize,
) -> Vec<f32> {
    let bias = e.bias.then(|| args[first_extra]);
    let residual = e.residual.then(|| args[first_extra + e.bias as usize]);
    for (i, v) in acc.iter_mut().enumerate() {
        let mut x = *v as f64;
        if let Some(b) = bias {
            x += b[column(i)] as f64;
        }
        if let Some(r) = residual {
            x += r[i] as f64;
        }
        *v = e.activation.apply(x as f32);
    }
    acc
}

/// `op(a)[m,k] · op(b)[k,n]`, `op` transposing the stored matrix when asked.
fn matmul(a: &[f32], b: &[f32], [m, k, n]: [usize; 3], [ta, tb]: [bool; 2]) -> Vec<f32> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let acc: f64 = (0..k)
                .map(|p| {
                    let av = if ta { a[p * m + i] } else { a[i * k + p] };
                    let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                    av as f64 * bv as f64
                })
                .sum();
            y[i * n + j] = acc as f32;
        }
    }
    y
}

fn eval_node(op: &Op, args: &[&[f32]], shapes: &[&[usize]], out: &[usize]) -> Vec<f32> {
    let plane = |shape: &[usize]| numel(&shape[2..]);
    match op {
        Op::FusedConv {
            conv: c,
            epilogue: e,
            shortcut,
            pool: Some(_),
            norm: None,
        } => {
            // The convolution over its full output, then the mean of each
            // plane (the intermediate is not rounded to the storage dtype
            // here; the result is, as every node's).
            let [p, q] = c
                .output_hw(shapes[0][2], shapes[0][3])
                .expect("a pooled conv's geometry fits its input");
            let full = [out[0], out[1], p, q];
            let unpooled = Op::FusedConv {
                conv: *c,
                epilogue: *e,
                shortcut: *shortcut,
                pool: None,
                norm: None,
            };
            let y = eval_node(&unpooled, args, shapes, &full);
            y.chunks(p * q)
                .map(|px| (px.iter().map(|&v| v as f64).sum::<f64>() / (p * q) as f64) as f32)
                .collect()
        }
        Op::Conv(c) => {
            let y = conv(c, args[0], shapes[0], args[1], shapes[1], out);
            let e = Epilogue {
                bias: args.len() == 3,
                ..Epilogue::NONE
            };
            epilogue(&e, y, args, 2, |i| (i / plane(out)) % out[1])
        }
        Op::FusedConv {
            conv: c,
            epilogue: e,
            shortcut: None,
            pool: None,
            norm: None,
        } => {
            let y = conv(c, args[0], shapes[0], args[1], shapes[1], out);
            epilogue(e, y, args, 2, |i| (i / plane(out)) % out[1])
        }
        Op::FusedConv {
            conv: c,
            epilogue: e,
            shortcut: Some(sc),
            pool: None,
            norm: None,
        } => {
            // Weight rows [C | Cs]: the main 1×1 conv, then the strided one.
            let last = args.len() - 1;
            let (k, cin, cs) = (shapes[1][0], shapes[0][1], shapes[last][1]);
            let row = |o: usize| &args[1][o * (cin + cs)..(o + 1) * (cin + cs)];
            let wm: Vec<f32> = (0..k).flat_map(|o| row(o)[..cin].to_vec()).collect();
            let wsc: Vec<f32> = (0..k).flat_map(|o| row(o)[cin..].to_vec()).collect();
            let strided = Conv2d {
                strides: sc.strides,
                ..*c
            };
            let mut y = conv(c, args[0], shapes[0], &wm, &[k, cin, 1, 1], out);
            let ys = conv(
                &strided,
                args[last],
                shapes[last],
                &wsc,
                &[k, cs, 1, 1],
                out,
            );
            y.iter_mut().zip(ys).for_each(|(a, b)| *a += b);
            epilogue(e, y, args, 2, |i| (i / plane(out)) % out[1])
        }
        Op::Dense {
            epilogue: e,
            norm: None,
        } => {
            let (m, k, n) = (shapes[0][0], shapes[0][1], shapes[1][0]);
            let y = matmul(args[0], args[1], [m, k, n], [false, true]);
            epilogue(e, y, args, 2, |i| i % n)
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => {
            let (m, n) = (out[0], out[1]);
            let k = shapes[0][0] * shapes[0][1] / m;
            let y = matmul(args[0], args[1], [m, k, n], [*trans_a, *trans_b]);
            y.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let c = args
                        .get(2)
                        .map_or(0.0, |c| c[broadcast_index(shapes[2], out, i)] as f64);
                    (*alpha as f64 * v as f64 + *beta as f64 * c) as f32
                })
                .collect()
        }
        Op::MatMul if shapes[1].len() > 2 => {
            batched_matmul(args[0], args[1], shapes[0], shapes[1], out)
        }
        Op::Softmax { axis } => softmax(args[0], shapes[0], *axis),
        Op::Attention {
            scale,
            causal,
            views,
        } => attention_viewed(args, shapes, *scale, *causal, views.as_deref()),
        Op::MatMul => {
            // `[.., K] · [K, N]`: the leading axes are rows.
            assert!(
                shapes[0].len() >= 2 && shapes[1].len() == 2,
                "direct_eval: MatMul by a 2-D matrix only"
            );
            let k = shapes[1][0];
            let mkn = [numel(shapes[0]) / k, k, shapes[1][1]];
            matmul(args[0], args[1], mkn, [false, false])
        }
        Op::BatchNorm { epsilon } => {
            let c = shapes[0][1];
            let inner = numel(&shapes[0][2..]);
            args[0]
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let ch = (i / inner) % c;
                    let s = args[1][ch] as f64 / (args[4][ch] as f64 + *epsilon as f64).sqrt();
                    ((x as f64 - args[3][ch] as f64) * s + args[2][ch] as f64) as f32
                })
                .collect()
        }
        Op::Unary(u) => args[0].iter().map(|&x| u.apply(x)).collect(),
        Op::Binary(b) => (0..numel(out))
            .map(|i| {
                b.apply(
                    args[0][broadcast_index(shapes[0], out, i)],
                    args[1][broadcast_index(shapes[1], out, i)],
                )
            })
            .collect(),
        Op::Where => (0..numel(out))
            .map(|i| {
                let at = |k: usize| args[k][broadcast_index(shapes[k], out, i)];
                if at(0) != 0.0 {
                    at(1)
                } else {
                    at(2)
                }
            })
            .collect(),
        Op::Sum => (0..numel(out))
            .map(|i| {
                let sum: f64 = args
                    .iter()
                    .zip(shapes)
                    .map(|(a, s)| a[broadcast_index(s, out, i)] as f64)
                    .sum();
                sum as f32
            })
            .collect(),
        Op::MaxPool(p) => pool(p, args[0], shapes[0], out, true, false),
        Op::AveragePool {
            pool: p,
            count_include_pad,
        } => pool(p, args[0], shapes[0], out, false, *count_include_pad),
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            let inner = plane(shapes[0]);
            args[0]
                .chunks(inner)
                .map(|c| match op {
                    Op::GlobalMaxPool => c.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                    _ => (c.iter().map(|&x| x as f64).sum::<f64>() / inner as f64) as f32,
                })
                .collect()
        }
        Op::ReduceMean { axes, .. } => {
            let x = shapes[0];
            let kept: Vec<usize> = x
                .iter()
                .enumerate()
                .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
                .collect();
            let mut sums = vec![0.0f64; numel(&kept)];
            for (i, &v) in args[0].iter().enumerate() {
                let (mut rest, mut index, mut stride) = (i, 0, 1);
                for axis in (0..x.len()).rev() {
                    let coord = rest % x[axis];
                    rest /= x[axis];
                    if !axes.contains(&axis) {
                        index += coord * stride;
                        stride *= x[axis];
                    }
                }
                sums[index] += v as f64;
            }
            let count = (numel(x) / numel(&kept)) as f64;
            sums.into_iter().map(|s| (s / count) as f32).collect()
        }
        Op::Flatten { .. } | Op::Reshape { .. } | Op::Identity | Op::Convert => args[0].to_vec(),
        Op::PadChannels { channels } => {
            let [n, c] = [shapes[0][0], shapes[0][1]];
            let hw = plane(shapes[0]);
            let mut y = vec![0.0; n * channels * hw];
            for (b, image) in args[0].chunks(c * hw).enumerate() {
                y[b * channels * hw..][..c * hw].copy_from_slice(image);
            }
            y
        }
        Op::SpaceToDepth {
            block,
            pad_top,
            pad_left,
            ..
        } => {
            // One output element at a time, from its coordinates.
            let [_, c, h, w] = [shapes[0][0], shapes[0][1], shapes[0][2], shapes[0][3]];
            let [channels, oh, ow] = [out[1], out[2], out[3]];
            (0..numel(out))
                .map(|i| {
                    let (j, i_) = (i % ow, i / ow);
                    let (row, i_) = (i_ % oh, i_ / oh);
                    let (k, b) = (i_ % channels, i_ / channels);
                    let (offset, ch) = (k / c, k % c);
                    if offset >= block * block {
                        return 0.0;
                    }
                    let y = (block * row + offset / block) as isize - *pad_top as isize;
                    let x = (block * j + offset % block) as isize - *pad_left as isize;
                    if y < 0 || x < 0 || y >= h as isize || x >= w as isize {
                        return 0.0;
                    }
                    args[0][((b * c + ch) * h + y as usize) * w + x as usize]
                })
                .collect()
        }
        Op::Transpose { perm } => {
            // Output element i reads the input at its permuted coordinates.
            let x = shapes[0];
            let mut strides = vec![1usize; x.len()];
            for k in (0..x.len().saturating_sub(1)).rev() {
                strides[k] = strides[k + 1] * x[k + 1];
            }
            (0..numel(out))
                .map(|i| {
                    let (mut rest, mut at) = (i, 0);
                    for k in (0..out.len()).rev() {
                        at += rest % out[k] * strides[perm[k]];
                        rest /= out[k];
                    }
                    args[0][at]
                })
                .collect()
        }
        Op::Concat { .. }
        | Op::Slice { .. }
        | Op::Gather { .. }
        | Op::ScatterNd { .. }
        | Op::GatherNd { .. }
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::Pad { .. }
        | Op::Resize(_)
        | Op::Reduce { .. }
        | Op::LogSoftmax { .. }
        | Op::Hardmax { .. }
        | Op::FusedConv { norm: Some(_), .. }
        | Op::Dense { norm: Some(_), .. }
        | Op::LayerNorm { .. }
        | Op::GroupNorm { .. }
        | Op::LpNorm { .. }
        | Op::MeanVarianceNorm { .. }
        | Op::Einsum { .. } => {
            // This oracle covers the ops the pass tests generate; the CPU
            // reference executor is the oracle for the rest.
            panic!(
                "direct_eval does not evaluate {}: the pass tests never generate it",
                op.kind()
            )
        }
    }
}

/// `MatMul` of `[.., m, k]` by `[.., k, n]` (both rank ≥ 2), batch axes
/// broadcast.
fn batched_matmul(a: &[f32], b: &[f32], sa: &[usize], sb: &[usize], out: &[usize]) -> Vec<f32> {
    let (ra, rb) = (sa.len(), sb.len());
    let [m, k, n] = [sa[ra - 2], sa[ra - 1], sb[rb - 1]];
    let batch = &out[..out.len() - 2];
    let mut y = Vec::with_capacity(numel(out));
    for z in 0..numel(batch) {
        let za = broadcast_index(&sa[..ra - 2], batch, z);
        let zb = broadcast_index(&sb[..rb - 2], batch, z);
        let pa = &a[za * m * k..][..m * k];
        let pb = &b[zb * k * n..][..k * n];
        y.extend(matmul(pa, pb, [m, k, n], [false, false]));
    }
    y
}

fn softmax(x: &[f32], shape: &[usize], axis: usize) -> Vec<f32> {
    let (dim, inner) = (shape[axis], numel(&shape[axis + 1..]));
    let mut y = vec![0.0; x.len()];
    for outer in 0..numel(&shape[..axis]) {
        for i in 0..inner {
            let at = |j: usize| outer * dim * inner + j * inner + i;
            let max = (0..dim)
                .map(|j| x[at(j)] as f64)
                .fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..dim).map(|j| (x[at(j)] as f64 - max).exp()).sum();
            for j in 0..dim {
                y[at(j)] = ((x[at(j)] as f64 - max).exp() / sum) as f32;
            }
        }
    }
    y
}

/// [`attention`] with operands read (and the output written) through
/// their views.
fn attention_viewed(
    args: &[&[f32]],
    shapes: &[&[usize]],
    scale: f32,
    causal: bool,
    views: Option<&crate::ir::AttentionViews>,
) -> Vec<f32> {
    let Some(views) = views else {
        return attention(args, shapes, scale, causal);
    };
    let gathered: Vec<Option<(Vec<f32>, [usize; 4])>> = (0..3)
        .map(|i| {
            views
                .input(i)
                .map(|v| (v.gather(args[i]).expect("view within its value"), v.dims))
        })
        .collect();
    let mut a: Vec<&[f32]> = args.to_vec();
    let mut s: Vec<&[usize]> = shapes.to_vec();
    for (i, g) in gathered.iter().enumerate() {
        if let Some((data, dims)) = g {
            a[i] = data;
            s[i] = dims;
        }
    }
    let y = attention(&a, &s, scale, causal);
    match &views.out {
        Some((view, shape)) => view
            .scatter(&y, shape.iter().product())
            .expect("output view covers its value"),
        None => y,
    }
}

/// [`Op::Attention`] from its contract: 3-D inputs as `[1, N, S, D]`, the
/// mask `[G, Hm, Sqm, Skvm]` read at batch `b mod G`.
fn attention(args: &[&[f32]], shapes: &[&[usize]], scale: f32, causal: bool) -> Vec<f32> {
    let four = |s: &[usize]| crate::ops::attention::as_4d(s).expect("3-D or 4-D attention input");
    let ([b, h, sq, d], [_, hkv, skv, _], [.., dv]) =
        (four(shapes[0]), four(shapes[1]), four(shapes[2]));
    let mask = shapes.get(3).map(|&m| {
        crate::ops::attention::mask_4d(m, [b, h, sq, skv]).expect("mask fits the scores")
    });
    let (q, k, v) = (args[0], args[1], args[2]);
    let mut y = vec![0.0; b * h * sq * dv];
    for (batch, head) in (0..b).flat_map(|x| (0..h).map(move |y| (x, y))) {
        let kv = batch * hkv + head / (h / hkv);
        for i in 0..sq {
            let keys = if causal { (i + 1).min(skv) } else { skv };
            let scores: Vec<f64> = (0..keys)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|c| {
                            let qv = q[((batch * h + head) * sq + i) * d + c] as f64;
                            qv * k[(kv * skv + j) * d + c] as f64
                        })
                        .sum();
                    let added = mask.map_or(0.0, |[g, mh, mq, mk]| {
                        let at = |x: usize, n: usize| if n == 1 { 0 } else { x };
                        let row = ((batch % g) * mh + at(head, mh)) * mq + at(i, mq);
                        args[3][row * mk + at(j, mk)] as f64
                    });
                    dot * scale as f64 + added
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for c in 0..dv {
                let acc: f64 = (0..keys)
                    .map(|j| weights[j] * v[(kv * skv + j) * dv + c] as f64)
                    .sum();
                y[((batch * h + head) * sq + i) * dv + c] = (acc / sum) as f32;
            }
        }
    }
    y
}

#[test]
fn broadcast_index_follows_numpy() {
    let out = broadcast(&[2, 3], &[3]).unwrap();
    assert_eq!(broadcast_index(&[3], &out, 4), 1);
    assert_eq!(broadcast_index(&[2, 1], &out, 4), 1);
    assert_eq!(broadcast_index(&[], &out, 5), 0);
}

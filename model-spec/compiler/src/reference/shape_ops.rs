//! Ops that move data without arithmetic. Flatten, Reshape and Identity copy
//! their row-major input (the logical order does not change, only the
//! shape); Convert hands its input over in its physical order and lets the
//! store re-lay it out and round it to the output's dtype (PadChannels
//! likewise, after appending zero channels, and SpaceToDepth after moving
//! pixels into channels); Concat joins row-major inputs along one axis.

use super::op_io::{dims4, input, OpResult, OutSpec, Output, Tensor};

/// Flatten, Reshape, Identity.
pub(crate) fn copy(inputs: &[Tensor]) -> OpResult {
    Ok(Output::row_major(
        input(inputs, 0)?.row_major().into_owned(),
    ))
}

/// Layout and dtype change: the executor's store does the work.
pub(crate) fn convert(inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    Ok(Output {
        data: x.data.to_vec(),
        layout: x.layout,
    })
}

/// [`crate::ir::Op::PadChannels`]: the input's channels, then zeros up to
/// the output's channel count, built row-major (the store re-lays it out
/// and rounds it like a `Convert`).
pub(crate) fn pad_channels(inputs: &[Tensor], out: &OutSpec) -> OpResult {
    let x = input(inputs, 0)?;
    let [n, c, h, w] = dims4(x.shape, "PadChannels input")?;
    let [on, channels, oh, ow] = dims4(out.shape, "PadChannels output")?;
    if [on, oh, ow] != [n, h, w] || channels < c {
        return Err(format!("cannot pad {:?} to {:?}", x.shape, out.shape).into());
    }
    let plane = h * w;
    let logical = x.row_major();
    let mut data = vec![0.0; n * channels * plane];
    for (image, src) in logical.chunks_exact(c * plane).enumerate() {
        data[image * channels * plane..][..c * plane].copy_from_slice(src);
    }
    Ok(Output::row_major(data))
}

/// [`crate::ir::Op::SpaceToDepth`], built row-major from the input's
/// logical elements (the store re-lays it out and rounds it like a
/// `Convert`): output channel `(bh·block + bw)·C + c` of pixel `(i, j)` is
/// input channel `c` at `(block·i + bh − pad_top, block·j + bw − pad_left)`,
/// zero outside the image and in the channels beyond `block²·C`.
pub(crate) fn space_to_depth(
    block: usize,
    [pad_top, pad_left]: [usize; 2],
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let x = input(inputs, 0)?;
    let [n, c, h, w] = dims4(x.shape, "SpaceToDepth input")?;
    let [on, channels, oh, ow] = dims4(out.shape, "SpaceToDepth output")?;
    if on != n || block == 0 || channels < block * block * c {
        return Err(format!(
            "cannot move {block}x{block} blocks of {:?} into {:?}",
            x.shape, out.shape
        )
        .into());
    }
    let logical = x.row_major();
    let mut data = vec![0.0; n * channels * oh * ow];
    // Source coordinate of output row/column `i` in block offset `b`, if
    // it lies inside the image.
    let source = |i: usize, b: usize, pad: usize, size: usize| {
        (block * i + b).checked_sub(pad).filter(|&s| s < size)
    };
    for image in 0..n {
        for bh in 0..block {
            for bw in 0..block {
                for ch in 0..c {
                    let k = (bh * block + bw) * c + ch;
                    let src = &logical[(image * c + ch) * h * w..][..h * w];
                    let dst = &mut data[(image * channels + k) * oh * ow..][..oh * ow];
                    for i in 0..oh {
                        let Some(y) = source(i, bh, pad_top, h) else {
                            continue;
                        };
                        for j in 0..ow {
                            if let Some(x) = source(j, bw, pad_left, w) {
                                dst[i * ow + j] = src[y * w + x];
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(Output::row_major(data))
}

pub(crate) fn concat(axis: usize, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    if axis >= out.shape.len() {
        return Err(format!("axis {axis} out of range for {:?}", out.shape).into());
    }
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let parts: Vec<_> = inputs.iter().map(|t| t.row_major()).collect();
    let blocks: Vec<usize> = inputs
        .iter()
        .map(|t| t.shape.get(axis).copied().unwrap_or(0) * inner)
        .collect();
    let mut data = Vec::with_capacity(out.shape.iter().product());
    for o in 0..outer {
        for (part, &block) in parts.iter().zip(&blocks) {
            let src = part
                .get(o * block..(o + 1) * block)
                .ok_or_else(|| format!("input of {} elements is too short", part.len()))?;
            data.extend_from_slice(src);
        }
    }
    Ok(Output::row_major(data))
}

#[cfg(test)]
mod tests {
    use super::super::testing::run1;
    use crate::ir::{DType, Layout, Op};
    use crate::test_graphs::Builder;

    fn iota(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn concat_joins_along_the_axis() {
        let mut b = Builder::new();
        let x0 = b.input("a", &[2, 1, 3]);
        let x1 = b.input("b", &[2, 2, 3]);
        let x2 = b.input("c", &[2, 1, 3]);
        let y = b.op(Op::Concat { axis: 1 }, &[x0, x1, x2]);
        b.output(y);
        let graph = b.finish();
        let (a, bb, c) = (
            iota(6),
            iota(12).iter().map(|v| v + 100.0).collect::<Vec<_>>(),
            iota(6).iter().map(|v| v + 200.0).collect::<Vec<_>>(),
        );
        let got = run1(&graph, &[&a, &bb, &c]);
        let mut want = Vec::new();
        for n in 0..2 {
            want.extend_from_slice(&a[n * 3..][..3]);
            want.extend_from_slice(&bb[n * 6..][..6]);
            want.extend_from_slice(&c[n * 3..][..3]);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn views_keep_the_row_major_order() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 2, 2]);
        let f = b.op(Op::Flatten { axis: 1 }, &[x]);
        let r = b.op(
            Op::Reshape {
                shape: vec![4, -1],
                allowzero: false,
            },
            &[f],
        );
        let i = b.op(Op::Identity, &[r]);
        b.output(f);
        b.output(r);
        b.output(i);
        let graph = b.finish();
        let x = iota(24);
        let outs = super::super::run(&graph, &[&x], &Default::default()).unwrap();
        assert!(outs.iter().all(|o| *o == x));
    }

    #[test]
    fn pad_channels_appends_zero_channels_through_the_layout() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 1, 2]);
        let y = b.op(Op::PadChannels { channels: 4 }, &[x]);
        b.set(y, Layout::ChannelsLast, DType::F16);
        let z = b.op(Op::Convert, &[y]);
        b.output(z);
        let graph = b.finish();
        let data = iota(12);
        let mut want = Vec::new();
        for n in 0..2 {
            want.extend_from_slice(&data[n * 6..][..6]);
            want.extend_from_slice(&[0.0, 0.0]);
        }
        assert_eq!(run1(&graph, &[&data]), want);
    }

    /// A 2×2 image of 2 channels, one row and column of padding at the
    /// top/left: each output pixel gathers its 2×2 block (zeros in the
    /// padding and beyond the image), then the zero channels.
    #[test]
    fn space_to_depth_gathers_blocks_through_the_layout() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 2, 2, 3]);
        let op = Op::SpaceToDepth {
            block: 2,
            pad_top: 1,
            pad_left: 1,
            channels: 10,
            height: 2,
            width: 2,
        };
        let y = b.op(op, &[x]);
        b.set(y, Layout::ChannelsLast, DType::F16);
        let z = b.op(Op::Convert, &[y]);
        b.output(z);
        let graph = b.finish();
        // x[c, h, w] = 100·c + 10·h + w + 1 (0 marks a zero of the output).
        let data: Vec<f32> = (0..2)
            .flat_map(|c| {
                (0..2).flat_map(move |h| (0..3).map(move |w| (100 * c + 10 * h + w + 1) as f32))
            })
            .collect();
        // Output [1, 10, 2, 2] row-major: channel k = (bh·2 + bw)·2 + c.
        // Pixel (i, j) reads rows 2i + bh − 1 and columns 2j + bw − 1.
        let at = |c: usize, h: isize, w: isize| {
            if (0..2).contains(&h) && (0..3).contains(&w) {
                (100 * c as isize + 10 * h + w + 1) as f32
            } else {
                0.0
            }
        };
        let mut want = vec![0.0; 10 * 4];
        for bh in 0..2 {
            for bw in 0..2 {
                for c in 0..2 {
                    for i in 0..2 {
                        for j in 0..2 {
                            let k = (bh * 2 + bw) * 2 + c;
                            let h = 2 * i as isize + bh as isize - 1;
                            let w = 2 * j as isize + bw as isize - 1;
                            want[k * 4 + i * 2 + j] = at(c, h, w);
                        }
                    }
                }
            }
        }
        // Spot checks of the formula: pixel (0, 0) holds x[·, 0, 0] in
        // block (1, 1) only; pixel (1, 1) reads row 2 (beyond the image)
        // in block row 1, and columns 1, 2.
        assert_eq!(want[(3 * 2) * 4], 1.0);
        assert_eq!(want[(3 * 2 + 1) * 4], 101.0);
        assert_eq!(want[3], 12.0);
        assert_eq!(want[(2 * 2) * 4 + 3], 0.0);
        assert!(want[8 * 4..].iter().all(|&v| v == 0.0));
        assert_eq!(run1(&graph, &[&data]), want);
    }

    #[test]
    fn convert_changes_layout_and_dtype() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 2, 2]);
        let y = b.op(Op::Convert, &[x]);
        b.set(y, Layout::ChannelsLast, DType::F16);
        let z = b.op(Op::Convert, &[y]);
        b.output(z);
        let graph = b.finish();
        let data: Vec<f32> = (0..12).map(|i| 1.0 + i as f32 / 3000.0).collect();
        let want: Vec<f32> = data.iter().map(|&v| DType::F16.round(v)).collect();
        assert_ne!(want, data);
        assert_eq!(run1(&graph, &[&data]), want);
    }
}

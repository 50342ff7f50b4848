//! Ops that move data without arithmetic. Flatten, Reshape and Identity copy
//! their row-major input (the logical order does not change, only the
//! shape); Convert hands its input over in its physical order and lets the
//! store re-lay it out and round it to the output's dtype (PadChannels
//! likewise, after appending zero channels); Concat joins row-major inputs
//! along one axis.

use super::execute::{dims4, input, OpResult, OutSpec, Output, Tensor};

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
    use super::super::testing::{run1, Builder};
    use crate::ir::{DType, Layout, Op};

    fn iota(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn concat_joins_along_the_axis() {
        let mut b = Builder::new();
        let x0 = b.input("a", &[2, 1, 3]);
        let x1 = b.input("b", &[2, 2, 3]);
        let x2 = b.input("c", &[2, 1, 3]);
        let y = b.node(Op::Concat { axis: 1 }, &[x0, x1, x2]);
        let graph = b.finish(&[y]);
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
        let f = b.node(Op::Flatten { axis: 1 }, &[x]);
        let r = b.node(
            Op::Reshape {
                shape: vec![4, -1],
                allowzero: false,
            },
            &[f],
        );
        let i = b.node(Op::Identity, &[r]);
        let graph = b.finish(&[f, r, i]);
        let x = iota(24);
        let outs = super::super::run(&graph, &[&x], &Default::default()).unwrap();
        assert!(outs.iter().all(|o| *o == x));
    }

    #[test]
    fn pad_channels_appends_zero_channels_through_the_layout() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 1, 2]);
        let y = b.node(Op::PadChannels { channels: 4 }, &[x]);
        b.set(y, Layout::ChannelsLast, DType::F16);
        let z = b.node(Op::Convert, &[y]);
        let graph = b.finish(&[z]);
        let data = iota(12);
        let mut want = Vec::new();
        for n in 0..2 {
            want.extend_from_slice(&data[n * 6..][..6]);
            want.extend_from_slice(&[0.0, 0.0]);
        }
        assert_eq!(run1(&graph, &[&data]), want);
    }

    #[test]
    fn convert_changes_layout_and_dtype() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 2, 2]);
        let y = b.node(Op::Convert, &[x]);
        b.set(y, Layout::ChannelsLast, DType::F16);
        let z = b.node(Op::Convert, &[y]);
        let graph = b.finish(&[z]);
        let data: Vec<f32> = (0..12).map(|i| 1.0 + i as f32 / 3000.0).collect();
        let want: Vec<f32> = data.iter().map(|&v| DType::F16.round(v)).collect();
        assert_ne!(want, data);
        assert_eq!(run1(&graph, &[&data]), want);
    }
}

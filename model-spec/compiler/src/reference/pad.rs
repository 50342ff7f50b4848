//! Pad: each output coordinate `i` of an axis with `before` added elements
//! reads input coordinate `i − before` when it lies inside the input;
//! outside, `mode` decides: the constant, the nearest edge element, or the
//! input mirrored at its edge (period `2·(d − 1)`). Works on the input's
//! logical row-major data.

use super::op_io::{input, OpError, OpResult, Output, Tensor};
use super::strided::row_major_strides;
use crate::ir::PadMode;

/// The input coordinate output coordinate `i` reads on an axis of `dim`
/// elements with `before` padding, `None` for the constant.
fn source(i: usize, before: usize, dim: usize, mode: PadMode) -> Option<usize> {
    let x = i as i64 - before as i64;
    let d = dim as i64;
    if (0..d).contains(&x) {
        return Some(x as usize);
    }
    match mode {
        PadMode::Constant { .. } => None,
        PadMode::Edge => Some(x.clamp(0, d - 1) as usize),
        PadMode::Reflect if d == 1 => Some(0),
        PadMode::Reflect => {
            let period = 2 * (d - 1);
            let m = x.rem_euclid(period);
            Some(if m < d { m } else { period - m } as usize)
        }
    }
}

/// `x` padded by `pads[k] = (before, after)` on each axis `k`.
pub(crate) fn pad(pads: &[(usize, usize)], mode: PadMode, inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    if pads.len() != x.shape.len() {
        return Err(OpError(format!("{} pads for {:?}", pads.len(), x.shape)));
    }
    let fill = match mode {
        PadMode::Constant { value } => value,
        _ => 0.0,
    };
    let strides = row_major_strides(x.shape);
    // Per axis: the offset each output coordinate reads, None for the fill.
    let maps: Vec<Vec<Option<usize>>> = (0..pads.len())
        .map(|k| {
            let (before, after) = pads[k];
            (0..x.shape[k] + before + after)
                .map(|i| source(i, before, x.shape[k], mode).map(|s| s * strides[k] as usize))
                .collect()
        })
        .collect();
    let data = x.row_major();
    let total: usize = maps.iter().map(Vec::len).product();
    let mut out = Vec::with_capacity(total);
    let rank = maps.len();
    if rank == 0 {
        out.push(data[0]);
        return Ok(Output::row_major(out));
    }
    let mut index = vec![0usize; rank - 1];
    loop {
        // The outer axes' offset, None when one of them reads the fill.
        let outer = index
            .iter()
            .zip(&maps)
            .try_fold(0usize, |acc, (&i, map)| map[i].map(|o| acc + o));
        match outer {
            None => out.extend(std::iter::repeat_n(fill, maps[rank - 1].len())),
            Some(base) => out.extend(maps[rank - 1].iter().map(|o| match o {
                Some(o) => data[base + o],
                None => fill,
            })),
        }
        let mut k = rank - 1;
        loop {
            if k == 0 {
                return Ok(Output::row_major(out));
            }
            k -= 1;
            index[k] += 1;
            if index[k] < maps[k].len() {
                break;
            }
            index[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Op;
    use crate::reference::testing::run1;
    use crate::test_graphs::Builder;

    #[test]
    fn sources_of_each_mode() {
        let at = |mode| (0..9).map(|i| source(i, 3, 4, mode)).collect::<Vec<_>>();
        let constant = at(PadMode::Constant { value: 1.0 });
        assert_eq!(constant[..4], [None, None, None, Some(0)]);
        assert_eq!(constant[7..], [None, None]);
        let edge: Vec<_> = at(PadMode::Edge).into_iter().flatten().collect();
        assert_eq!(edge, [0, 0, 0, 0, 1, 2, 3, 3, 3]);
        let reflect: Vec<_> = at(PadMode::Reflect).into_iter().flatten().collect();
        assert_eq!(reflect, [3, 2, 1, 0, 1, 2, 3, 2, 1]);
    }

    #[test]
    fn pads_a_matrix_with_a_constant() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 2]);
        let op = Op::Pad {
            pads: vec![(1, 0), (0, 1)],
            mode: PadMode::Constant { value: 9.0 },
        };
        let y = b.op(op, &[x]);
        b.output(y);
        let graph = b.finish();
        let got = run1(&graph, &[&[1.0, 2.0, 3.0, 4.0]]);
        assert_eq!(got, [9.0, 9.0, 9.0, 1.0, 2.0, 9.0, 3.0, 4.0, 9.0]);
    }
}

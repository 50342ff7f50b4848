//! Strided copies: the one kernel behind Transpose, Slice, Expand and Tile.
//! Output element `(i_0, …, i_{r-1})` of a row-major output of `shape` is
//! `src[base + Σ i_k · strides[k]]`: a transpose permutes the source's
//! row-major strides, a slice scales them by its steps (negative for a
//! backward walk) and starts at its first element, a broadcast axis has
//! stride 0. The source is the input's logical row-major data.

use super::op_io::{input, OpError, OpResult, Output, Tensor};

/// Row-major strides of `shape`, in elements.
pub(crate) fn row_major_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![1isize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1] as isize;
    }
    strides
}

/// The row-major output of `shape` whose element `i` is
/// `src[base + Σ i_k · strides[k]]`; an error (never a panic) when some
/// element would read outside `src`.
pub(crate) fn strided_copy(
    src: &[f32],
    shape: &[usize],
    strides: &[isize],
    base: isize,
) -> Result<Vec<f32>, OpError> {
    if shape.len() != strides.len() {
        return Err(OpError(format!(
            "internal: {} strides for shape {shape:?}",
            strides.len()
        )));
    }
    let total: usize = shape.iter().product();
    if total == 0 {
        return Ok(Vec::new());
    }
    // The lowest and highest offsets any element reads.
    let (mut lo, mut hi) = (base, base);
    for (&d, &s) in shape.iter().zip(strides) {
        let span = (d as isize - 1) * s;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 || hi >= src.len() as isize {
        return Err(OpError(format!(
            "strided read [{lo}, {hi}] outside the input's {} elements",
            src.len()
        )));
    }
    let rank = shape.len();
    let mut out = Vec::with_capacity(total);
    if rank == 0 {
        out.push(src[base as usize]);
        return Ok(out);
    }
    let (inner, inner_stride) = (shape[rank - 1], strides[rank - 1]);
    let mut index = vec![0usize; rank - 1];
    let mut offset = base;
    loop {
        let mut at = offset;
        for _ in 0..inner {
            out.push(src[at as usize]);
            at += inner_stride;
        }
        // Odometer over the outer axes.
        let mut k = rank - 1;
        loop {
            if k == 0 {
                return Ok(out);
            }
            k -= 1;
            index[k] += 1;
            offset += strides[k];
            if index[k] < shape[k] {
                break;
            }
            offset -= strides[k] * shape[k] as isize;
            index[k] = 0;
        }
    }
}

/// [`strided_copy`] of input 0's logical data, as an op's row-major output.
pub(crate) fn strided_op(
    inputs: &[Tensor],
    shape: &[usize],
    strides: &[isize],
    base: isize,
) -> OpResult {
    let x = input(inputs, 0)?;
    let data = x.row_major();
    Ok(Output::row_major(strided_copy(
        &data, shape, strides, base,
    )?))
}

/// Transpose: output axis `i` is input axis `perm[i]`.
pub(crate) fn transpose(perm: &[usize], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let src = row_major_strides(x.shape);
    let (shape, strides): (Vec<usize>, Vec<isize>) = perm
        .iter()
        .map(|&p| match (x.shape.get(p), src.get(p)) {
            (Some(&d), Some(&s)) => Ok((d, s)),
            _ => Err(OpError(format!(
                "perm {perm:?} out of range for {:?}",
                x.shape
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    strided_op(inputs, &shape, &strides, 0)
}

/// Slice: axis `k` of the output takes `count` elements of input axis `k`
/// from `first`, `step` apart (`ranges[k] = (first, step, count)`).
pub(crate) fn slice(ranges: &[(usize, i64, usize)], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let src = row_major_strides(x.shape);
    if ranges.len() != src.len() {
        return Err(OpError(format!(
            "{} ranges for {:?}",
            ranges.len(),
            x.shape
        )));
    }
    let base = ranges
        .iter()
        .zip(&src)
        .map(|(&(first, _, _), &s)| first as isize * s)
        .sum();
    let strides: Vec<isize> = ranges
        .iter()
        .zip(&src)
        .map(|(&(_, step, _), &s)| step as isize * s)
        .collect();
    let shape: Vec<usize> = ranges.iter().map(|&(_, _, count)| count).collect();
    strided_op(inputs, &shape, &strides, base)
}

/// Expand: the input broadcast (numpy rules, right-aligned) to `shape`;
/// input axes of size 1 read with stride 0.
pub(crate) fn expand(shape: &[usize], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    let lead = shape.len().checked_sub(x.shape.len()).ok_or_else(|| {
        OpError(format!(
            "cannot expand {:?} to fewer axes {shape:?}",
            x.shape
        ))
    })?;
    let src = row_major_strides(x.shape);
    let strides: Vec<isize> = (0..shape.len())
        .map(|k| match k.checked_sub(lead) {
            Some(i) if x.shape[i] == shape[k] => Ok(src[i]),
            Some(i) if x.shape[i] == 1 => Ok(0),
            None => Ok(0),
            Some(_) => Err(OpError(format!("cannot expand {:?} to {shape:?}", x.shape))),
        })
        .collect::<Result<_, _>>()?;
    strided_op(inputs, shape, &strides, 0)
}

/// Tile: the input repeated `repeats[k]` times along axis `k`. Read as the
/// row-major `[r_0, d_0, r_1, d_1, …]` whose repeat axes have stride 0.
pub(crate) fn tile(repeats: &[usize], inputs: &[Tensor]) -> OpResult {
    let x = input(inputs, 0)?;
    if repeats.len() != x.shape.len() {
        return Err(OpError(format!(
            "{} repeats for {:?}",
            repeats.len(),
            x.shape
        )));
    }
    let src = row_major_strides(x.shape);
    let mut shape = Vec::with_capacity(2 * repeats.len());
    let mut strides = Vec::with_capacity(2 * repeats.len());
    for ((&r, &d), &s) in repeats.iter().zip(x.shape).zip(&src) {
        shape.extend([r, d]);
        strides.extend([0, s]);
    }
    strided_op(inputs, &shape, &strides, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn strides_of_a_row_major_shape() {
        assert_eq!(row_major_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(row_major_strides(&[]), Vec::<isize>::new());
    }

    #[test]
    fn a_transpose_permutes_the_strides() {
        // [2, 3] → [3, 2].
        let got = strided_copy(&iota(6), &[3, 2], &[1, 3], 0).unwrap();
        assert_eq!(got, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    }

    #[test]
    fn negative_strides_walk_backwards_and_zero_strides_repeat() {
        let got = strided_copy(&iota(5), &[3], &[-2], 4).unwrap();
        assert_eq!(got, vec![4.0, 2.0, 0.0]);
        let got = strided_copy(&iota(2), &[3, 2], &[0, 1], 0).unwrap();
        assert_eq!(got, vec![0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
        assert_eq!(strided_copy(&[7.0], &[], &[], 0).unwrap(), vec![7.0]);
    }

    #[test]
    fn reads_outside_the_source_are_errors() {
        assert!(strided_copy(&iota(5), &[3], &[2], 1).is_err());
        assert!(strided_copy(&iota(5), &[3], &[-2], 3).is_err());
        assert!(strided_copy(&iota(5), &[3], &[1, 1], 0).is_err());
    }
}

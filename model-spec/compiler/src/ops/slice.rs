//! ONNX `Slice` with constant starts, ends, axes and steps (attributes
//! before opset 10, constant inputs from 10): [`Op::Slice`], one
//! `(start, end, step)` per input axis. Negative starts, ends and axes
//! count from the end; out-of-range starts and ends clamp as ONNX says;
//! negative steps walk backwards. A slice that selects no element is
//! rejected (aotune values have no zero-sized dimensions).

use super::{const_input, OpDef};
use crate::ir::{arity, Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::slice::SliceInput;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Slice"],
    summary: "Slice (constant starts/ends/axes/steps, negative steps, clamping)",
    node_types: &[NodeType::Slice],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Slice(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let x = cx.input(0)?;
    let shape = cx.shape(x).to_vec();
    let rank = shape.len() as i64;
    let constant = |cx: &mut NodeImport, what: &str, input: &SliceInput| match input {
        SliceInput::Static(v) => Ok(v.clone()),
        SliceInput::Runtime(r) => const_input::required_ints(cx, r.input_index, what),
    };
    let starts = constant(cx, "starts", &n.config.starts)?;
    let ends = constant(cx, "ends", &n.config.ends)?;
    let axes = match &n.config.axes {
        Some(a) => constant(cx, "axes", a)?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps = match &n.config.steps {
        Some(s) => constant(cx, "steps", s)?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.attr_error(
            "starts",
            (&starts, &ends, &axes, &steps),
            "starts, ends, axes and steps must have one entry each per sliced axis",
        ));
    }
    let (mut fs, mut fe, mut fst) = (
        vec![0; shape.len()],
        vec![i64::MAX; shape.len()],
        vec![1; shape.len()],
    );
    let mut seen = vec![false; shape.len()];
    for (i, &axis) in axes.iter().enumerate() {
        let a = if axis < 0 { axis + rank } else { axis };
        let slot = usize::try_from(a).ok().filter(|&a| a < shape.len());
        let Some(a) = slot.filter(|&a| !seen[a]) else {
            return Err(cx.attr_error("axes", &axes, "axes must be distinct input axes"));
        };
        seen[a] = true;
        if steps[i] == 0 {
            return Err(cx.attr_error("steps", &steps, "a step must not be 0"));
        }
        let (_, count) = axis_range(shape[a], starts[i], ends[i], steps[i])
            .map_err(|e| cx.attr_error("steps", &steps, &e))?;
        if count == 0 && cx.constant(x).is_some() {
            // Shape arithmetic (`s[2:]` of a 2-element shape): an empty
            // constant, which only Concat may read (it drops it).
            let mut empty = shape.clone();
            empty[a] = 0;
            let name = cx.output_name().to_string();
            return Ok(cx.add_constant(name, empty, Vec::new()));
        }
        if count == 0 {
            return Err(cx.attr_error(
                "starts",
                (&starts, &ends),
                &format!(
                    "the slice selects no element of axis {a} (size {}); aotune values have \
                     no zero-sized dimensions",
                    shape[a]
                ),
            ));
        }
        (fs[a], fe[a], fst[a]) = (starts[i], ends[i], steps[i]);
    }
    let op = Op::Slice {
        starts: fs,
        ends: fe,
        steps: fst,
    };
    cx.push(op, vec![x])
}

/// The elements one axis of `dim` elements keeps, ONNX's way: `(first,
/// count)`, the elements being `first + j·step` for `j < count`. Negative
/// `start`/`end` count from the end; both clamp to `[0, dim]` for positive
/// steps and `[−1, dim − 1]` (start `[0, dim − 1]`) for negative ones.
pub(crate) fn axis_range(
    dim: usize,
    start: i64,
    end: i64,
    step: i64,
) -> Result<(usize, usize), String> {
    if step == 0 {
        return Err("slice step 0".into());
    }
    let (d, step) = (dim as i128, step as i128);
    let wrap = |v: i64| {
        let v = v as i128;
        if v < 0 {
            v + d
        } else {
            v
        }
    };
    let (start, end) = (wrap(start), wrap(end));
    let (first, count) = if step > 0 {
        let (s, e) = (start.clamp(0, d), end.clamp(0, d));
        (s, if e > s { (e - s + step - 1) / step } else { 0 })
    } else {
        let (s, e) = (start.clamp(0, d - 1), end.clamp(-1, d - 1));
        (s, if s > e { (s - e - step - 1) / -step } else { 0 })
    };
    Ok((first.max(0) as usize, count as usize))
}

/// Per-axis `(first, step, count)` of an [`Op::Slice`] over `shape`.
fn ranges(
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
    shape: &[usize],
) -> Result<Vec<(usize, i64, usize)>, String> {
    if starts.len() != shape.len() || ends.len() != shape.len() || steps.len() != shape.len() {
        return Err(format!(
            "Slice needs one start, end and step per axis of {shape:?}"
        ));
    }
    (0..shape.len())
        .map(|k| {
            let (first, count) = axis_range(shape[k], starts[k], ends[k], steps[k])?;
            Ok((first, steps[k], count))
        })
        .collect()
}

/// Output shape of [`Op::Slice`]: the count of each axis's range.
pub(crate) fn infer_shape(
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
    inputs: &[&[usize]],
) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let ranges = ranges(starts, ends, steps, inputs[0])?;
    Ok(ranges.iter().map(|&(_, _, count)| count).collect())
}

/// CPU reference of [`Op::Slice`]: a strided copy.
pub(crate) fn reference(
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
    inputs: &[Tensor],
) -> OpResult {
    let shape = inputs
        .first()
        .map(|t| t.shape)
        .ok_or_else(|| "Slice has no input".to_string())?;
    let ranges = ranges(starts, ends, steps, shape)?;
    reference::strided::slice(&ranges, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // Opset 10+: starts, ends, axes, steps as inputs.
        Example {
            op_type: "Slice",
            opset: 13,
            inputs: &[
                Data(&[4, 6]),
                Int64s(&[1, -1]),
                Int64s(&[3, -5]),
                Int64s(&[0, 1]),
                Int64s(&[1, -2]),
            ],
            attrs: &[],
            output: &[2, 2],
            ir: &["Slice"],
        },
        // Opset 1: attributes, axes defaulting to the leading ones.
        Example {
            op_type: "Slice",
            opset: 1,
            inputs: &[Data(&[4, 6])],
            attrs: &[Ints("starts", &[1]), Ints("ends", &[1000])],
            output: &[3, 6],
            ir: &["Slice"],
        },
    ];

    #[test]
    fn ranges_clamp_and_walk_backwards() {
        assert_eq!(axis_range(10, 1, 1000, 1), Ok((1, 9)));
        assert_eq!(axis_range(10, -3, i64::MAX, 1), Ok((7, 3)));
        assert_eq!(axis_range(10, 0, 10, 3), Ok((0, 4)));
        assert_eq!(axis_range(10, 20, -1000, -1), Ok((9, 10)));
        assert_eq!(axis_range(10, -1, i64::MIN, -3), Ok((9, 4)));
        assert_eq!(axis_range(10, 5, 5, 1), Ok((5, 0)));
        assert_eq!(axis_range(10, 1000, 2000, 1).map(|r| r.1), Ok(0));
        assert!(axis_range(10, 0, 1, 0).is_err());
    }

    #[test]
    fn slice_shape_is_the_counts() {
        let shape = infer_shape(&[0, 5], &[2, 0], &[1, -2], &[&[3, 6]]);
        assert_eq!(shape, Ok(vec![2, 3]));
        assert!(infer_shape(&[0], &[2], &[1], &[&[3, 6]]).is_err());
    }
}

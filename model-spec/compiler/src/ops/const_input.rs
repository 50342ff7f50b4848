//! Reading a node's constant input (Gather's indices, Reshape's shape,
//! Slice's starts, …) at import. A constant is an initializer or a
//! `Constant` (onnx-ir then carries its data), or a value aotune folded at
//! import: shape arithmetic on static shapes such as the TorchScript
//! exporter's `Shape → Gather → Unsqueeze → Concat → Reshape`, which onnx-ir
//! reports as a runtime input.

use crate::onnx::{ImportError, NodeImport};
use onnx_ir::TensorDataExt;

/// A constant integer tensor: its shape and its row-major values.
pub(crate) type Ints = (Vec<usize>, Vec<i64>);

const NOT_CONSTANT: &str =
    "must be a constant: an initializer, or computed from initializers and static shapes";

/// The node's `index`-th input as integers with their shape: `None` when
/// the input is absent (omitted), an error naming `what` when it is not a
/// constant (a refusal: aotune has no runtime integer inputs) or does not
/// hold integers.
pub(crate) fn ints(
    cx: &mut NodeImport,
    index: usize,
    what: &str,
) -> Result<Option<Ints>, ImportError> {
    let Some(arg) = cx.node.inputs().get(index).filter(|a| !a.is_optional()) else {
        return Ok(None);
    };
    if let Some(data) = arg.value() {
        let values = data
            .to_i64_vec()
            .map_err(|e| cx.input_error(what, format!("cannot be read as integers: {e:?}")))?;
        return Ok(Some((data.shape().to_vec(), values)));
    }
    let (shape, data) = folded(cx, index, what)?;
    let values = data
        .iter()
        .map(|&v| to_i64(v).ok_or(v))
        .collect::<Result<Vec<i64>, f32>>()
        .map_err(|v| cx.input_error(what, format!("holds {v}, not an integer")))?;
    Ok(Some((shape, values)))
}

/// Like [`ints`], for an input that must be present: the values alone.
pub(crate) fn required_ints(
    cx: &mut NodeImport,
    index: usize,
    what: &str,
) -> Result<Vec<i64>, ImportError> {
    match ints(cx, index, what)? {
        Some((_, values)) => Ok(values),
        None => Err(cx.input_error(what, "is missing")),
    }
}

/// The node's `index`-th input as floats, for a constant onnx-ir reports as
/// a runtime input (Clip's bounds, Pad's value computed at import).
pub(crate) fn floats(
    cx: &mut NodeImport,
    index: usize,
    what: &str,
) -> Result<Vec<f32>, ImportError> {
    if let Some(data) = cx.node.inputs().get(index).and_then(|a| a.value()) {
        return data
            .to_f32_vec()
            .map_err(|e| cx.input_error(what, format!("cannot be read as numbers: {e:?}")));
    }
    Ok(folded(cx, index, what)?.1)
}

/// A value folded at import: its shape and data, or the refusal.
fn folded(
    cx: &mut NodeImport,
    index: usize,
    what: &str,
) -> Result<(Vec<usize>, Vec<f32>), ImportError> {
    let id = cx.input(index)?;
    match cx.constant(id) {
        Some(data) => Ok((cx.shape(id).to_vec(), data.to_vec())),
        None => Err(cx.attr_error(what, "runtime input", NOT_CONSTANT)),
    }
}

/// An integer held as f32 (folded constants are f32): saturating at the
/// i64 range, so `i64::MAX` sentinels (Slice's "to the end") survive.
fn to_i64(v: f32) -> Option<i64> {
    (v.is_finite() && v.fract() == 0.0 || v.is_infinite()).then_some(v as i64)
}

#[cfg(test)]
mod tests {
    use super::to_i64;

    #[test]
    fn folded_integers_convert_and_fractions_do_not() {
        assert_eq!(to_i64(3.0), Some(3));
        assert_eq!(to_i64(-1.0), Some(-1));
        assert_eq!(to_i64(9.223_372e18), Some(i64::MAX));
        assert_eq!(to_i64(0.5), None);
        assert_eq!(to_i64(f32::NAN), None);
    }
}

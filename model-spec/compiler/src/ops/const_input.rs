//! Reading a node's constant integer input (Gather's indices, Expand's
//! shape, …) at import, for the converters whose onnx-ir config does not
//! carry it already.

use crate::onnx::{ImportError, NodeImport};
use onnx_ir::TensorDataExt;

/// A constant integer tensor: its shape and its row-major values.
pub(crate) type Ints = (Vec<usize>, Vec<i64>);

/// The node's `index`-th input as integers with their shape: `None` when
/// the input is absent (omitted), an error naming `what` when it is not a
/// constant (a refusal: aotune has no runtime integer inputs) or does not
/// hold integers.
pub(crate) fn ints(cx: &NodeImport, index: usize, what: &str) -> Result<Option<Ints>, ImportError> {
    let Some(arg) = cx.node.inputs().get(index).filter(|a| !a.is_optional()) else {
        return Ok(None);
    };
    let data = arg.value().ok_or_else(|| {
        cx.attr_error(what, "runtime input", "must be a constant (an initializer)")
    })?;
    let values = data
        .to_i64_vec()
        .map_err(|e| cx.input_error(what, format!("cannot be read as integers: {e:?}")))?;
    Ok(Some((data.shape().to_vec(), values)))
}

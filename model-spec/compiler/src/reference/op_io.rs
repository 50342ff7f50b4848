//! What an op kernel sees and returns: its inputs as [`Tensor`]s, the
//! numeric settings ([`Ctx`]), the output it writes ([`OutSpec`]) and its
//! result ([`Output`] or an [`OpError`]). The interpreter loop
//! (`execute.rs`) and every kernel import these from here.

use super::layout::{relayout, to_row_major};
use super::Accumulate;
use crate::ir::{DType, Layout};
use std::borrow::Cow;

/// Numeric settings every op sees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub accumulate: Accumulate,
    /// Round matrix-product operands to tf32 (`Precision::Tf32`).
    pub tf32: bool,
    /// Storage type of the node's first input (f32 for a node without
    /// inputs): the type a fused kernel rounds its own intermediates to.
    pub operands: DType,
}

/// An op input: f32 elements in the physical order of `layout`.
pub(crate) struct Tensor<'a> {
    pub data: Cow<'a, [f32]>,
    pub shape: &'a [usize],
    pub layout: Layout,
}

impl Tensor<'_> {
    /// The elements in logical row-major order.
    pub(crate) fn row_major(&self) -> Cow<'_, [f32]> {
        to_row_major(Cow::Borrowed(&self.data), self.shape, self.layout)
    }

    /// The elements in the physical order of `layout`.
    pub(crate) fn in_layout(&self, layout: Layout) -> Cow<'_, [f32]> {
        relayout(Cow::Borrowed(&self.data), self.shape, self.layout, layout)
    }
}

/// The value an op writes (its logical shape; the loop handles its layout).
pub(crate) struct OutSpec<'a> {
    pub shape: &'a [usize],
    pub dtype: DType,
}

/// An op's result: f32 elements in the physical order of `layout` (not yet
/// rounded to the output's dtype).
pub(crate) struct Output {
    pub data: Vec<f32>,
    pub layout: Layout,
}

impl Output {
    pub(crate) fn row_major(data: Vec<f32>) -> Self {
        Output {
            data,
            layout: Layout::RowMajor,
        }
    }
}

/// Why an op failed; the loop adds the node.
#[derive(Debug)]
pub(crate) struct OpError(pub String);

impl From<String> for OpError {
    fn from(message: String) -> Self {
        OpError(message)
    }
}

pub(crate) type OpResult = Result<Output, OpError>;

/// The `i`-th input, or a typed error when the node has fewer.
pub(crate) fn input<'t, 'a>(inputs: &'t [Tensor<'a>], i: usize) -> Result<&'t Tensor<'a>, OpError> {
    inputs
        .get(i)
        .ok_or_else(|| OpError(format!("missing input {i} (has {})", inputs.len())))
}

/// A rank-4 shape as an array.
pub(crate) fn dims4(shape: &[usize], what: &str) -> Result<[usize; 4], OpError> {
    match *shape {
        [a, b, c, d] => Ok([a, b, c, d]),
        _ => Err(OpError(format!("{what} must be 4-D, got {shape:?}"))),
    }
}

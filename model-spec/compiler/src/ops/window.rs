//! Import of 2-D window geometry, shared by [`super::conv`] and
//! [`super::pool`]: the 4-D input's spatial size, positivity of kernel,
//! strides and dilations, and `auto_pad` resolved to explicit pads.
//!
//! `SAME_UPPER`/`SAME_LOWER` follow ONNX: the output is `ceil(size /
//! stride)` and the total padding that needs is split evenly, the odd pixel
//! going to the end (`SAME_UPPER`) or the beginning (`SAME_LOWER`).

use crate::ir::ValueId;
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::node::padding::{AutoPad, PaddingConfig2d};

/// Resolves `auto_pad` and explicit pads to (top, left, bottom, right).
pub(crate) fn resolve_pads(
    auto_pad: &AutoPad,
    padding: &PaddingConfig2d,
    input_hw: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
) -> [usize; 4] {
    match auto_pad {
        AutoPad::SameUpper | AutoPad::SameLower => {
            let mut pads = [0; 4];
            for axis in 0..2 {
                let size = input_hw[axis];
                let stride = strides[axis].max(1);
                let out = size.div_ceil(stride);
                let span = dilations[axis] * (kernel[axis].saturating_sub(1)) + 1;
                let total = ((out.saturating_sub(1)) * stride + span).saturating_sub(size);
                let (begin, end) = if matches!(auto_pad, AutoPad::SameUpper) {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
                pads[axis] = begin;
                pads[axis + 2] = end;
            }
            pads
        }
        AutoPad::Valid => [0; 4],
        AutoPad::NotSet => match padding {
            PaddingConfig2d::Valid => [0; 4],
            PaddingConfig2d::Explicit(t, l, b, r) => [*t, *l, *b, *r],
        },
    }
}

/// The spatial size (H, W) of the 4-D input `x`.
pub(crate) fn spatial(cx: &NodeImport, x: ValueId) -> Result<[usize; 2], ImportError> {
    let shape = cx.shape(x);
    if shape.len() != 4 {
        return Err(cx.input_error(
            "X",
            format!("must be 4-D (N, C, H, W), has shape {shape:?}"),
        ));
    }
    Ok([shape[2], shape[3]])
}

/// Rejects a zero in the attribute `name`.
pub(crate) fn positive(cx: &NodeImport, name: &str, v: [usize; 2]) -> Result<(), ImportError> {
    if v.contains(&0) {
        return Err(cx.attr_error(name, v, "must be positive"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_upper_puts_the_odd_pixel_at_the_end() {
        let pads = |auto_pad| {
            resolve_pads(
                &auto_pad,
                &PaddingConfig2d::Valid,
                [224, 224],
                [3, 3],
                [2, 2],
                [1, 1],
            )
        };
        assert_eq!(pads(AutoPad::SameUpper), [0, 0, 1, 1]);
        assert_eq!(pads(AutoPad::SameLower), [1, 1, 0, 0]);
        assert_eq!(pads(AutoPad::Valid), [0; 4]);
    }
}

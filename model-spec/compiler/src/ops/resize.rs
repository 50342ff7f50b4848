//! ONNX `Resize` (opset 11+) of a 4-D NCHW image over H and W, with
//! constant `scales` or `sizes`: [`Op::Resize`]. Modes `nearest` (every
//! `nearest_mode`) and `linear` (bilinear); coordinate transformations
//! `half_pixel`, `pytorch_half_pixel`, `align_corners`, `asymmetric`.
//! Refused: cubic, `tf_crop_and_resize`, `tf_half_pixel_for_nn`, resizing
//! N or C, other ranks, runtime scales or sizes, opset 10; onnx-ir itself
//! refuses `antialias`, `axes`, `keep_aspect_ratio_policy` and a non-empty
//! `roi`.

use super::{const_input, OpDef};
use crate::ir::{arity, CoordinateMode, NearestMode, Op, Resize, ResizeMode, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, OpResult, Tensor};
use onnx_ir::node::resize::{
    CoordinateTransformMode, NearestMode as OnnxNearest, ResizeMode as OnnxMode,
};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Resize"],
    summary: "Resize (4-D NCHW over H, W; constant scales or sizes; nearest with every \
              `nearest_mode`, bilinear; `half_pixel`, `pytorch_half_pixel`, \
              `align_corners`, `asymmetric`)",
    node_types: &[NodeType::Resize],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Resize(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let c = &n.config;
    if cx.opset < 11 {
        return Err(cx.attr_error(
            "(opset)",
            cx.opset,
            "Resize before opset 11 (its coordinate rules differ) is not supported",
        ));
    }
    let mode = match c.mode {
        OnnxMode::Nearest => ResizeMode::Nearest(match c.nearest_mode {
            OnnxNearest::RoundPreferFloor => NearestMode::RoundPreferFloor,
            OnnxNearest::RoundPreferCeil => NearestMode::RoundPreferCeil,
            OnnxNearest::Floor => NearestMode::Floor,
            OnnxNearest::Ceil => NearestMode::Ceil,
        }),
        OnnxMode::Linear => ResizeMode::Linear,
        OnnxMode::Cubic => {
            return Err(cx.attr_error("mode", "cubic", "only nearest and linear are supported"))
        }
    };
    let coordinate = match c.coordinate_transformation_mode {
        CoordinateTransformMode::HalfPixel => CoordinateMode::HalfPixel,
        CoordinateTransformMode::PytorchHalfPixel => CoordinateMode::PytorchHalfPixel,
        CoordinateTransformMode::AlignCorners => CoordinateMode::AlignCorners,
        CoordinateTransformMode::Asymmetric => CoordinateMode::Asymmetric,
        ref other => {
            return Err(cx.attr_error(
                "coordinate_transformation_mode",
                other,
                "supported: half_pixel, pytorch_half_pixel, align_corners, asymmetric",
            ))
        }
    };
    let x = cx.input(0)?;
    let shape = cx.shape(x).to_vec();
    if shape.len() != 4 {
        return Err(cx.input_error(
            "X",
            format!("Resize supports 4-D NCHW images, got shape {shape:?}"),
        ));
    }
    // onnx-ir keeps only the H, W entries; read the whole constant.
    let constant = |cx: &mut NodeImport, index: usize| -> Result<Option<Vec<f32>>, ImportError> {
        if cx.node.inputs().get(index).is_none_or(|a| a.is_optional()) {
            return Ok(None);
        }
        let what = ["X", "roi", "scales", "sizes"][index];
        let values = const_input::floats(cx, index, what)?;
        Ok(Some(values).filter(|v| !v.is_empty()))
    };
    let (scales, sizes) = match (constant(cx, 2)?, constant(cx, 3)?) {
        (Some(scales), None) if scales.len() == 4 && scales.iter().all(|&s| s > 0.0) => {
            let sizes = shape
                .iter()
                .zip(&scales)
                .map(|(&d, &s)| (d as f32 * s).floor() as usize)
                .collect();
            (scales, sizes)
        }
        (None, Some(sizes)) if sizes.len() == 4 && sizes.iter().all(|&s| s >= 1.0) => {
            let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
            let scales = sizes
                .iter()
                .zip(&shape)
                .map(|(&o, &i)| o as f32 / i as f32)
                .collect();
            (scales, sizes)
        }
        other => {
            return Err(cx.input_error(
                "scales",
                format!(
                    "needs 4 positive scales or 4 sizes of at least 1 (one of the two), got \
                     {other:?}"
                ),
            ))
        }
    };
    if scales[..2] != [1.0, 1.0] || sizes[..2] != shape[..2] {
        return Err(cx.input_error(
            "scales",
            format!("only H and W are resized; scales {scales:?} change N or C"),
        ));
    }
    if sizes.contains(&0) {
        return Err(cx.input_error("scales", format!("scales {scales:?} empty {shape:?}")));
    }
    let op = Op::Resize(Resize {
        mode,
        coordinate,
        scales,
        sizes,
    });
    cx.push(op, vec![x])
}

/// Output shape of [`Op::Resize`]: its sizes, one per input axis.
pub(crate) fn infer_shape(resize: &Resize, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let rank = inputs[0].len();
    if resize.sizes.len() != rank || resize.scales.len() != rank {
        return Err(format!("{resize} does not fit {:?}", inputs[0]));
    }
    if resize.scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
        return Err(format!("{resize}: scales must be positive"));
    }
    Ok(resize.sizes.clone())
}

/// CPU reference of [`Op::Resize`].
pub(crate) fn reference(resize: &Resize, inputs: &[Tensor]) -> OpResult {
    reference::resize::resize(resize, inputs)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        // What torch.nn.Upsample(scale_factor=2) exports.
        Example {
            op_type: "Resize",
            opset: 13,
            inputs: &[Data(&[1, 2, 3, 4]), Omitted, Floats(&[1.0, 1.0, 2.0, 2.0])],
            attrs: &[Str("mode", "nearest")],
            output: &[1, 2, 6, 8],
            ir: &["Resize"],
        },
        Example {
            op_type: "Resize",
            opset: 13,
            inputs: &[Data(&[1, 2, 3, 4]), Omitted, Omitted, Int64s(&[1, 2, 5, 7])],
            attrs: &[
                Str("mode", "linear"),
                Str("coordinate_transformation_mode", "align_corners"),
            ],
            output: &[1, 2, 5, 7],
            ir: &["Resize"],
        },
    ];
}

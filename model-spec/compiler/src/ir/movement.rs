//! Attribute types of the data-movement ops ([`Op::Pad`](super::Op::Pad),
//! [`Op::Resize`](super::Op::Resize)): how a pad fills the border and how a
//! resize maps output coordinates to input ones and interpolates.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What [`Op::Pad`](super::Op::Pad) writes outside its input (ONNX `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum PadMode {
    /// The constant `value`.
    Constant { value: f32 },
    /// The input mirrored at its edge, the edge itself not repeated.
    Reflect,
    /// The edge element repeated.
    Edge,
}

impl fmt::Display for PadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadMode::Constant { value } => write!(f, "constant({value})"),
            PadMode::Reflect => f.write_str("reflect"),
            PadMode::Edge => f.write_str("edge"),
        }
    }
}

/// How [`Op::Resize`](super::Op::Resize) turns an output coordinate into an
/// input coordinate (ONNX `coordinate_transformation_mode`), with `scale`
/// the axis's output/input ratio, `len_in`/`len_out` its sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CoordinateMode {
    /// `(x + 0.5) / scale − 0.5`.
    HalfPixel,
    /// Like `HalfPixel`, but 0 where `len_out` is 1.
    PytorchHalfPixel,
    /// `x · (len_in − 1) / (len_out − 1)`, 0 where `len_out` is 1.
    AlignCorners,
    /// `x / scale`.
    Asymmetric,
}

impl CoordinateMode {
    /// The input coordinate of output coordinate `x` along one axis.
    /// `align_corners` divides by the unrounded resized length
    /// `len_in · scale` (ONNX's reference; with `sizes` it is `len_out`).
    pub fn source(self, x: usize, scale: f32, len_in: usize, len_out: usize) -> f32 {
        let x = x as f32;
        let resized = len_in as f32 * scale;
        match self {
            CoordinateMode::HalfPixel => (x + 0.5) / scale - 0.5,
            CoordinateMode::PytorchHalfPixel if len_out > 1 => (x + 0.5) / scale - 0.5,
            CoordinateMode::PytorchHalfPixel => 0.0,
            CoordinateMode::AlignCorners if len_out > 1 && resized > 1.0 => {
                x * (len_in as f32 - 1.0) / (resized - 1.0)
            }
            CoordinateMode::AlignCorners => 0.0,
            CoordinateMode::Asymmetric => x / scale,
        }
    }
}

/// How a nearest-neighbour resize rounds an input coordinate (ONNX
/// `nearest_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    Floor,
    Ceil,
}

impl NearestMode {
    /// `x` rounded to an index as the mode says (before clamping).
    pub fn round(self, x: f32) -> f32 {
        let (floor, ratio) = (x.floor(), x - x.floor());
        let up = match self {
            NearestMode::RoundPreferFloor => ratio > 0.5,
            NearestMode::RoundPreferCeil => ratio >= 0.5,
            NearestMode::Floor => false,
            NearestMode::Ceil => ratio > 0.0,
        };
        if up {
            floor + 1.0
        } else {
            floor
        }
    }
}

/// How [`Op::Resize`](super::Op::Resize) interpolates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResizeMode {
    Nearest(NearestMode),
    /// Linear along every resized axis (bilinear on an image).
    Linear,
}

/// The geometry of an [`Op::Resize`](super::Op::Resize): one scale and one
/// output size per input axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resize {
    pub mode: ResizeMode,
    pub coordinate: CoordinateMode,
    /// Output/input ratio per axis, as the model gives it (from `scales`,
    /// or `sizes / input` when the model gives sizes).
    pub scales: Vec<f32>,
    /// The output shape.
    pub sizes: Vec<usize>,
}

impl fmt::Display for Resize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mode={:?} coord={:?} scales={:?} sizes={:?}",
            self.mode, self.coordinate, self.scales, self.sizes
        )
    }
}

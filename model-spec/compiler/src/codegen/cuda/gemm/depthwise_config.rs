//! The register-window depthwise kernel's config (`conv_depthwise_window`
//! in `conv_direct.cu`), a candidate beside the direct template's for
//! depthwise convolutions whose channels come in vectors of
//! [`DEPTHWISE_VECTOR`].
//!
//! A CTA owns one chunk of `lanes · 4` channels and `block / lanes` strips of
//! `cols` consecutive output columns. It stages the chunk's filter taps in
//! shared memory before the grid dependency wait (they do not depend on the
//! previous kernel), then issues the loads of every input vector its outputs
//! read, all filter rows at once, so that a thread waits for device memory
//! once instead of once per filter row. The window must fit in registers: at
//! most [`WINDOW_BYTES`] of raw input per thread.

use super::conv_shape::{ConvShape, DEPTHWISE_VECTOR};
use super::source::Geometry;
use serde::{Deserialize, Serialize};

/// Raw input bytes a thread may hold (128 registers).
pub const WINDOW_BYTES: usize = 512;
/// Static shared memory for the staged taps.
const TAPS_BYTES: usize = 48 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DepthwiseConfig {
    /// Threads per CTA.
    pub block: u32,
    /// Channel vectors per CTA (a power of two dividing the vectors).
    pub lanes: u32,
    /// Consecutive output columns per thread.
    pub cols: u32,
}

impl DepthwiseConfig {
    /// True when the kernel applies to `shape` at all (any config).
    pub fn applies(shape: &ConvShape) -> bool {
        shape.groups == shape.c
            && shape.k == shape.c
            && shape.c % DEPTHWISE_VECTOR == 0
            && shape.shortcut.is_none()
            && !shape.pool
    }

    /// Input columns one filter row of a thread's outputs reads.
    fn window_cols(&self, shape: &ConvShape) -> usize {
        (self.cols as usize - 1) * shape.stride[1] + (shape.s - 1) * shape.dilation[1] + 1
    }

    fn strips(&self, shape: &ConvShape) -> usize {
        shape.n * shape.p * shape.q.div_ceil(self.cols as usize)
    }

    fn chunks(&self, shape: &ConvShape) -> usize {
        shape.c / DEPTHWISE_VECTOR / self.lanes as usize
    }

    pub fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        if !Self::applies(shape) {
            return Err(
                "the window kernel takes depthwise convolutions of 4-channel vectors \
                        without a shortcut or pooled epilogue"
                    .into(),
            );
        }
        if !matches!(self.block, 64 | 128 | 256 | 512) {
            return Err(format!("block {} must be 64, 128, 256 or 512", self.block));
        }
        let vectors = shape.c / DEPTHWISE_VECTOR;
        if !self.lanes.is_power_of_two() || self.lanes > 32 || vectors % self.lanes as usize != 0 {
            return Err(format!(
                "lanes {} must be a power of two ≤ 32 dividing the {vectors} channel vectors",
                self.lanes
            ));
        }
        if !(1..=4).contains(&self.cols) {
            return Err(format!("cols {} must be in 1..=4", self.cols));
        }
        let window = shape.r * self.window_cols(shape) * DEPTHWISE_VECTOR * shape.x_dtype.size();
        if window > WINDOW_BYTES {
            return Err(format!(
                "the input window is {window} bytes a thread (at most {WINDOW_BYTES})"
            ));
        }
        let taps = shape.r * shape.s * (self.lanes as usize * DEPTHWISE_VECTOR + 4) * 4;
        if taps > TAPS_BYTES {
            return Err(format!(
                "the staged taps take {taps} bytes of shared memory (at most {TAPS_BYTES})"
            ));
        }
        Ok(())
    }

    /// Every valid combination of 64–256 threads, 4–32 lanes (a warp's
    /// loads cover whole 32-byte sectors from 4 lanes on) and 1–2 columns.
    pub fn search_space(shape: &ConvShape) -> Vec<Self> {
        let mut out = Vec::new();
        for block in [64, 128, 256] {
            for lanes in [4, 8, 16, 32] {
                for cols in [1, 2] {
                    let c = DepthwiseConfig { block, lanes, cols };
                    if c.validate(shape).is_ok() {
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        let per_block = (self.block / self.lanes) as usize;
        let blocks = self.strips(shape).div_ceil(per_block) * self.chunks(shape);
        Geometry {
            grid: [blocks.clamp(1, i32::MAX as usize) as u32, 1, 1],
            block: [self.block, 1, 1],
            smem_bytes: 0,
        }
    }

    pub fn tag(&self) -> String {
        format!("window_b{}l{}c{}", self.block, self.lanes, self.cols)
    }
}

#[cfg(test)]
mod tests {
    use super::super::implicit_gemm::tests::conv;
    use super::*;
    use crate::ir::DType;

    fn depthwise(hw: usize, c: usize, dtype: DType) -> ConvShape {
        ConvShape {
            groups: c,
            ..conv(1, c, hw, c, 7, 1, dtype)
        }
    }

    #[test]
    fn convnext_layers_have_candidates_and_f32_7x7_has_none() {
        for (hw, c) in [(56, 96), (28, 192), (14, 384), (7, 768)] {
            let space = DepthwiseConfig::search_space(&depthwise(hw, c, DType::F16));
            assert!(space.len() >= 12, "{hw}x{hw}x{c}: {space:?}");
            assert!(space.iter().any(|c| c.cols == 2));
        }
        // 7 rows × 7 columns × 4 channels × 4 bytes = 784 > WINDOW_BYTES.
        assert!(DepthwiseConfig::search_space(&depthwise(14, 384, DType::F32)).is_empty());
    }

    #[test]
    fn the_grid_covers_every_strip_of_every_chunk() {
        let shape = depthwise(14, 384, DType::F16);
        let c = DepthwiseConfig {
            block: 128,
            lanes: 8,
            cols: 2,
        };
        // 14 rows × 7 strips = 98 strips, 16 a CTA → 7; 96 vectors / 8 lanes = 12 chunks.
        assert_eq!(c.geometry(&shape).grid, [84, 1, 1]);
    }

    #[test]
    fn grouped_but_not_depthwise_is_refused() {
        let shape = ConvShape {
            groups: 2,
            ..conv(1, 64, 14, 64, 3, 1, DType::F16)
        };
        let c = DepthwiseConfig {
            block: 128,
            lanes: 4,
            cols: 1,
        };
        assert!(c.validate(&shape).is_err());
    }
}

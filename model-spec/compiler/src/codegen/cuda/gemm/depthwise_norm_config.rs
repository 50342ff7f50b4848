//! The workload and config of `conv_depthwise_norm` (`conv_direct.cu`): a
//! depthwise convolution whose epilogue normalizes each output pixel over
//! all its channels ([`crate::ir::ChannelNorm`], ConvNeXt's depthwise conv
//! → LayerNorm).
//!
//! A CTA owns every channel of `strips` output strips, a strip being `cols`
//! consecutive output columns of one row: `C / 4` consecutive threads (the
//! strip's *lanes*), each 4 channels of every column. The CTA's threads are
//! `strips · C/4` rounded up to whole warps, the rest idle (they take part in
//! the reductions and store nothing), so C/4 need not be a multiple of 32
//! (ConvNeXt-T: 24, 48, 96 and 192 lanes). The taps of all C channels sit in
//! dynamic shared memory as f32, `[tap][channel]` rows padded by 4
//! (C·R·S·4 bytes, 150 KB for 768 channels at 7×7, more than the 48 KB a
//! launch gets without opting in; the runtime and the tuner opt in from
//! [`Geometry::smem_bytes`]), and two reduction buffers of `cols` floats a
//! thread follow them. A thread loads the input window of `rows` filter
//! rows at once into registers ([`DepthwiseNormConfig::rows`]: all of them
//! where the register cap of the CTA's size allows, fewer rows per batch
//! otherwise).

use super::config::KernelConfig;
use super::conv_shape::{register_cap, ConvShape, DEPTHWISE_VECTOR, MAX_SMEM_BYTES};
use super::source::Geometry;
use crate::ir::{Activation, ChannelNorm, Conv2d, DType};
use serde::{Deserialize, Serialize};

/// A depthwise convolution with a channel norm, as its kernel sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthwiseNormShape {
    /// The convolution: C = K = groups, its bias, no residual, shortcut,
    /// pool or activation.
    pub conv: ConvShape,
    pub epsilon: f32,
    /// Dtypes of γ and β (`[K]` each).
    pub gamma: DType,
    pub beta: DType,
}

impl DepthwiseNormShape {
    /// Threads of a strip: one per 4-channel vector.
    pub fn lanes(&self) -> usize {
        self.conv.c / DEPTHWISE_VECTOR
    }

    /// The IR's rule for a convolution that may carry the norm
    /// ([`ChannelNorm::supports`]), plus the epilogue it leaves.
    pub fn check(&self) -> Result<(), String> {
        let c = &self.conv;
        let geometry = Conv2d {
            kernel: [c.r, c.s],
            strides: c.stride,
            pads: c.pad,
            dilations: c.dilation,
            groups: c.groups,
        };
        if !ChannelNorm::supports(&geometry, c.c, c.k) {
            return Err(format!(
                "the normalizing kernel takes depthwise convolutions over whole 4-channel \
                 vectors with at most {} channels, {} taps and dilation 1; got C = {}, K = {}, \
                 groups {}, {}x{} taps, dilation {:?}",
                ChannelNorm::MAX_CHANNELS,
                ChannelNorm::MAX_TAPS,
                c.c,
                c.k,
                c.groups,
                c.r,
                c.s,
                c.dilation
            ));
        }
        if c.residual.is_some()
            || c.shortcut.is_some()
            || c.pool
            || c.activation != Activation::None
        {
            return Err("the normalizing kernel's epilogue is the bias alone".into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DepthwiseNormConfig {
    /// Output strips per CTA.
    pub strips: u32,
    /// Consecutive output columns per strip (and per thread).
    pub cols: u32,
}

/// Registers a thread needs besides its input window: its accumulators (4
/// a column), a tap vector and a few widened inputs in flight, the bias, γ
/// and β of its channels, indices and addresses. Fitted to ptxas (CUDA
/// 13.0, sm_90a) on `tests/common/template_cases.rs`'s `norm_cases`: f16
/// 7×7 windows of every filter row took 46–51 registers beside the window
/// (144–149 at one column, 188 at four), and with this margin no config of
/// those search spaces spills (`tests/nvcc_sweeps.rs`).
fn other_registers(cols: usize) -> usize {
    56 + 2 * cols
}

/// Registers one 4-channel input vector of the window takes: f16 stays
/// packed (2), bf16 is widened to f32 as it arrives (ptxas hoists the
/// shift that widens it: 4), f32 is 4.
fn vector_registers(dtype: DType) -> usize {
    match dtype {
        DType::F16 => 2,
        DType::BF16 | DType::F32 => 4,
    }
}

impl DepthwiseNormConfig {
    /// Threads per CTA: `strips` strips of C/4 lanes, in whole warps.
    pub fn threads(&self, shape: &DepthwiseNormShape) -> usize {
        (self.strips as usize * shape.lanes()).div_ceil(32) * 32
    }

    /// Input columns one filter row of a strip's outputs reads.
    fn window_cols(&self, shape: &DepthwiseNormShape) -> usize {
        let c = &shape.conv;
        (self.cols as usize - 1) * c.stride[1] + (c.s - 1) * c.dilation[1] + 1
    }

    /// Filter rows whose input a thread loads at once (`DWN_ROWS`): the most
    /// rows, up to R, whose input vectors with the thread's other registers
    /// fit the cap of the CTA's size; 0 when not even one row fits.
    pub fn rows(&self, shape: &DepthwiseNormShape) -> usize {
        let c = &shape.conv;
        let row = self.window_cols(shape) * vector_registers(c.x_dtype);
        let room =
            register_cap(self.threads(shape)).saturating_sub(other_registers(self.cols as usize));
        (room / row).min(c.r)
    }

    /// Dynamic shared memory: the staged taps and the two reduction buffers.
    pub fn smem_bytes(&self, shape: &DepthwiseNormShape) -> usize {
        let c = &shape.conv;
        let taps = c.r * c.s * (c.c + 4);
        (taps + 2 * self.cols as usize * self.threads(shape)) * 4
    }

    fn strips_total(&self, shape: &DepthwiseNormShape) -> usize {
        let c = &shape.conv;
        c.n * c.p * c.q.div_ceil(self.cols as usize)
    }

    pub fn geometry(&self, shape: &DepthwiseNormShape) -> Geometry {
        let blocks = self.strips_total(shape).div_ceil(self.strips as usize);
        Geometry {
            grid: [blocks.clamp(1, i32::MAX as usize) as u32, 1, 1],
            block: [self.threads(shape) as u32, 1, 1],
            smem_bytes: self.smem_bytes(shape) as u32,
        }
    }
}

impl KernelConfig for DepthwiseNormConfig {
    type Shape = DepthwiseNormShape;

    fn validate(&self, shape: &DepthwiseNormShape) -> Result<(), String> {
        shape.check()?;
        if !(1..=32).contains(&self.strips) {
            return Err(format!("strips {} must be in 1..=32", self.strips));
        }
        if !(1..=4).contains(&self.cols) {
            return Err(format!("cols {} must be in 1..=4", self.cols));
        }
        let threads = self.threads(shape);
        if threads > 1024 {
            return Err(format!("{threads} threads a CTA (at most 1024)"));
        }
        if self.rows(shape) == 0 {
            return Err(format!(
                "one filter row of input does not fit the {} registers a thread of {threads} \
                 may use",
                register_cap(threads)
            ));
        }
        let smem = self.smem_bytes(shape);
        if smem > MAX_SMEM_BYTES {
            return Err(format!(
                "{smem} bytes of shared memory (at most {MAX_SMEM_BYTES})"
            ));
        }
        Ok(())
    }

    /// Every valid combination of 1–16 strips (powers of two) and 1, 2 or 4
    /// columns.
    fn search_space(shape: &DepthwiseNormShape) -> Vec<Self> {
        let mut out = Vec::new();
        for strips in [1, 2, 4, 8, 16] {
            for cols in [1, 2, 4] {
                let c = DepthwiseNormConfig { strips, cols };
                if c.validate(shape).is_ok() {
                    out.push(c);
                }
            }
        }
        out
    }

    /// Two columns a thread on maps at least 28 wide (the input columns of
    /// neighbouring outputs overlap, so the second costs a fraction of the
    /// loads), one on smaller ones; the most strips (a power of two up to
    /// 16) whose CTA has at most 256 threads while the grid keeps a CTA for
    /// each of 132 SMs (every CTA stages all the taps: fewer, larger CTAs
    /// stage them fewer times), else one. ConvNeXt-T at batch 1: 8 strips
    /// (192 threads) × 2 columns on 56×56×96, 2 × 2 (96 threads) on
    /// 28×28×192, one strip of one column on 14×14×384 (96 threads) and
    /// 7×7×768 (192). Where that is invalid, the first valid config with as
    /// many columns or fewer; one strip of one column at last (valid for
    /// every shape the IR lets carry a norm, [`DepthwiseNormShape::check`]).
    fn default_for(shape: &DepthwiseNormShape) -> Self {
        let cols = if shape.conv.q >= 28 { 2 } else { 1 };
        let strips = [16, 8, 4, 2]
            .into_iter()
            .map(|strips| DepthwiseNormConfig { strips, cols })
            .find(|c| c.threads(shape) <= 256 && c.geometry(shape).grid[0] >= 132)
            .map_or(1, |c| c.strips);
        let preferred = DepthwiseNormConfig { strips, cols };
        if preferred.validate(shape).is_ok() {
            return preferred;
        }
        Self::search_space(shape)
            .into_iter()
            .find(|c| c.cols <= cols)
            .unwrap_or(DepthwiseNormConfig { strips: 1, cols: 1 })
    }

    fn tag(&self) -> String {
        format!("s{}c{}", self.strips, self.cols)
    }

    /// log2 of the output pixels, the channels, the taps and the stride.
    fn shape_features(shape: &DepthwiseNormShape) -> Vec<f64> {
        let c = &shape.conv;
        [c.n * c.p * c.q, c.c, c.r * c.s, c.stride[0]]
            .iter()
            .map(|&v| (v.max(1) as f64).log2())
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::implicit_gemm::tests::conv;
    use super::*;

    /// A depthwise `rs`×`rs` conv over `[1, c, hw, hw]` with a bias and a norm.
    pub(crate) fn normed(hw: usize, c: usize, rs: usize, dtype: DType) -> DepthwiseNormShape {
        DepthwiseNormShape {
            conv: ConvShape {
                groups: c,
                activation: Activation::None,
                ..conv(1, c, hw, c, rs, 1, dtype)
            },
            epsilon: 1e-6,
            gamma: DType::F32,
            beta: DType::F32,
        }
    }

    #[test]
    fn convnext_t_layers_default_as_documented() {
        let want = [
            (56, 96, 8, 2, 192, 196),
            (28, 192, 2, 2, 96, 196),
            (14, 384, 1, 1, 96, 196),
            (7, 768, 1, 1, 192, 49),
        ];
        for (hw, c, strips, cols, threads, ctas) in want {
            let shape = normed(hw, c, 7, DType::F16);
            let d = DepthwiseNormConfig::default_for(&shape);
            assert_eq!((d.strips, d.cols), (strips, cols), "{hw}x{hw}x{c}");
            let g = d.geometry(&shape);
            assert_eq!(g.block, [threads, 1, 1], "{hw}x{hw}x{c}");
            assert_eq!(g.grid, [ctas, 1, 1], "{hw}x{hw}x{c}");
            // Every filter row's input at once.
            assert_eq!(d.rows(&shape), 7, "{hw}x{hw}x{c}");
            let space = DepthwiseNormConfig::search_space(&shape);
            assert!(space.contains(&d) && space.len() >= 6, "{space:?}");
        }
        // 768 channels' taps: 49 · 772 · 4 bytes, and the reduction buffers.
        let shape = normed(7, 768, 7, DType::F16);
        let d = DepthwiseNormConfig::default_for(&shape);
        assert_eq!(d.smem_bytes(&shape), (49 * 772 + 2 * 192) * 4);
    }

    /// Lanes that are no multiple of 32 pad the CTA to whole warps.
    #[test]
    fn strips_pad_to_whole_warps() {
        let shape = normed(56, 96, 7, DType::F16);
        let c = DepthwiseNormConfig { strips: 1, cols: 1 };
        assert_eq!(c.threads(&shape), 32);
        let c = DepthwiseNormConfig { strips: 3, cols: 1 };
        assert_eq!(c.threads(&shape), 96);
        // 56 rows × 28 strips of 2 columns, 8 a CTA.
        let c = DepthwiseNormConfig { strips: 8, cols: 2 };
        assert_eq!(c.geometry(&shape).grid, [196, 1, 1]);
    }

    /// f32 input, 7×7: a row is 7 vectors of 4 registers. 96 threads may
    /// hold all 7 rows (255 registers), 384 threads (168) 3 rows at a time;
    /// 768 threads (80) not one row of 4 columns.
    #[test]
    fn wide_windows_load_fewer_rows_at_once() {
        let shape = normed(14, 384, 7, DType::F32);
        let one = DepthwiseNormConfig { strips: 1, cols: 1 };
        assert_eq!(one.rows(&shape), 7);
        let four = DepthwiseNormConfig { strips: 4, cols: 1 };
        assert_eq!((four.threads(&shape), four.rows(&shape)), (384, 3));
        let wide = DepthwiseNormConfig {
            strips: 16,
            cols: 1,
        };
        assert_eq!(wide.threads(&shape), 1536);
        assert!(wide.validate(&shape).is_err());
        let big = DepthwiseNormConfig { strips: 8, cols: 4 };
        assert_eq!(big.threads(&shape), 768);
        assert!(big.validate(&shape).unwrap_err().contains("registers"));
    }

    /// Every shape the IR lets carry a norm has a valid default, at every
    /// storage type: 4 to 1024 channels, up to 49 taps, strides 1 and 2.
    #[test]
    fn every_normable_shape_has_a_valid_default() {
        for dtype in [DType::F16, DType::BF16, DType::F32] {
            for c in (4..=1024).step_by(4) {
                for (r, s, stride) in [(7, 7, 1), (3, 3, 2), (1, 49, 1), (49, 1, 2), (1, 1, 1)] {
                    let mut shape = normed(9, c, 1, dtype);
                    let conv = &mut shape.conv;
                    (conv.r, conv.s, conv.stride) = (r, s, [stride; 2]);
                    conv.pad = [r / 2, s / 2, r / 2, s / 2];
                    conv.p = (9 + 2 * (r / 2) - r) / stride + 1;
                    conv.q = (9 + 2 * (s / 2) - s) / stride + 1;
                    let d = DepthwiseNormConfig::default_for(&shape);
                    let why = d.validate(&shape);
                    assert!(why.is_ok(), "{dtype} c{c} {r}x{s}/{stride}: {d:?}: {why:?}");
                }
            }
        }
    }

    #[test]
    fn other_convolutions_are_refused() {
        let mut grouped = normed(14, 64, 3, DType::F16);
        grouped.conv.groups = 2;
        let c = DepthwiseNormConfig { strips: 1, cols: 1 };
        assert!(c.validate(&grouped).unwrap_err().contains("depthwise"));
        let mut relu = normed(14, 64, 3, DType::F16);
        relu.conv.activation = Activation::Relu;
        assert!(c.validate(&relu).unwrap_err().contains("bias alone"));
        let wide = normed(14, 1028, 3, DType::F16);
        assert!(c.validate(&wide).is_err());
        assert!(DepthwiseNormConfig::search_space(&wide).is_empty());
    }
}

//! The implicit-GEMM workload every tiled conv template shares, and the
//! limits they are checked against: a [`ConvShape`] describes a convolution
//! over NHWC input and OHWI weight (a dense layer is the 1×1 case over a 1×1
//! image); as a GEMM it is `M = N·P·Q`, `N = K`, `K = R·S·C` (KERNELS.md
//! §1). [`MmaOperands`] says what the tensor cores multiply for it. The
//! template configs (`implicit_gemm.rs`'s SIMT, `mma_config.rs`,
//! `wgmma_config.rs`) build on this file; it imports none of them.

use super::cost_model;
use super::source::{Params, Workspace, GELU_ACTIVATIONS};
use crate::ir::{Activation, DType, Precision};

/// Largest shared memory one CTA may use on sm_90 (227 KiB).
pub const MAX_SMEM_BYTES: usize = 227 * 1024;
/// Heuristic defaults stay within what lets two CTAs share an SM (228 KiB
/// per SM, 1 KiB of it reserved per CTA). Above 48 KiB a launch needs
/// `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`, which the runtime
/// and the GPU test harness set from [`super::KernelLaunch::smem_bytes`].
pub const DEFAULT_SMEM_LIMIT: usize = 113 * 1024;
/// Register budget per thread assumed by the validity rules.
pub const MAX_REGS: usize = 255;
/// Global loads (vector accesses) per thread and k tile the SIMT template
/// allows, and f32 values it may hold prefetched: beyond these ptxas runs
/// out of registers (measured with `-Xptxas -v` over the search space).
pub const SIMT_MAX_LOADS: usize = 8;
pub const SIMT_MAX_PREFETCH: usize = 32;

/// Registers one thread may use in a CTA of `threads` with one CTA per SM.
pub fn register_cap(threads: usize) -> usize {
    ((65536 / threads.max(1)) & !7).min(MAX_REGS)
}
/// Split-K factors the search spaces offer.
pub const SPLITS: [u32; 8] = [1, 2, 3, 4, 6, 8, 12, 16];

/// The strided 1×1 convolution a [`crate::ir::Shortcut`] adds to a
/// [`ConvShape`]'s GEMM: its NHWC input `[N, H, W, C]` (the conv's output
/// pixel `(p, q)` reads pixel `(p·SH, q·SW)`), whose C channels extend the
/// GEMM's K range past the main conv's `R·S·C`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShortcutShape {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub stride: [usize; 2],
    pub dtype: DType,
}

/// Channels one thread of the depthwise kernel computes (one vector load).
pub const DEPTHWISE_VECTOR: usize = 4;

/// A convolution as the tiled templates see it (groups = 1 for those).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvShape {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub r: usize,
    pub s: usize,
    pub p: usize,
    pub q: usize,
    pub stride: [usize; 2],
    /// Top, left, bottom, right.
    pub pad: [usize; 4],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub x_dtype: DType,
    pub w_dtype: DType,
    /// Dtype of the residual input, if the epilogue has one.
    pub residual: Option<DType>,
    pub out_dtype: DType,
    /// Dtype of the per-output-channel bias, if the epilogue has one.
    pub bias: Option<DType>,
    pub activation: Activation,
    pub precision: Precision,
    /// A second, strided 1×1 conv summed into the same accumulators (its
    /// weights are the last `shortcut.c` columns of each weight row).
    pub shortcut: Option<ShortcutShape>,
    /// The epilogue ends in a global average pool over each image's P·Q
    /// pixels (`FusedConv` with `pool`): the output is `[N, K]`, written
    /// only by configs whose one M tile holds all N·P·Q rows.
    pub pool: bool,
    /// A dense layer whose input rows are layer-normalized on the way in
    /// ([`crate::ir::RowNorm`], this its epsilon): the GEMM runs on the raw
    /// rows, takes each row's mean and rstd from the A tiles it stages, and
    /// finishes `rstd·(acc − mean·colsum[n])` before the epilogue. Only the
    /// plain wgmma template (split 1) carries it.
    pub row_norm: Option<f32>,
}

impl ConvShape {
    /// A dense layer `y[M,N] = x[M,K]·w[N,K]ᵀ` as a 1×1 convolution.
    #[allow(clippy::too_many_arguments)]
    pub fn dense(
        m: usize,
        n: usize,
        k: usize,
        x_dtype: DType,
        w_dtype: DType,
        residual: Option<DType>,
        out_dtype: DType,
        bias: Option<DType>,
        activation: Activation,
        precision: Precision,
    ) -> Self {
        ConvShape {
            n: m,
            c: k,
            h: 1,
            w: 1,
            k: n,
            r: 1,
            s: 1,
            p: 1,
            q: 1,
            stride: [1, 1],
            pad: [0; 4],
            dilation: [1, 1],
            groups: 1,
            x_dtype,
            w_dtype,
            residual,
            out_dtype,
            bias,
            activation,
            precision,
            shortcut: None,
            pool: false,
            row_norm: None,
        }
    }

    pub fn gemm_m(&self) -> usize {
        self.n * self.p * self.q
    }

    pub fn gemm_n(&self) -> usize {
        self.k
    }

    pub fn gemm_k(&self) -> usize {
        self.main_k() + self.shortcut.map_or(0, |sc| sc.c)
    }

    /// The main conv's part of the K range, `R·S·C/g` (all of it without a
    /// shortcut).
    pub fn main_k(&self) -> usize {
        self.r * self.s * (self.c / self.groups.max(1))
    }

    /// Multiply-adds of the workload.
    pub fn macs(&self) -> usize {
        self.gemm_m() * self.gemm_n() * self.gemm_k()
    }

    /// True when some window tap can fall outside the input (padding, or a
    /// window running past the edge), so A loads need bounds checks.
    pub fn needs_bounds(&self) -> bool {
        let last_h = (self.p - 1) * self.stride[0] + (self.r - 1) * self.dilation[0];
        let last_w = (self.q - 1) * self.stride[1] + (self.s - 1) * self.dilation[1];
        self.pad[0] > 0 || self.pad[1] > 0 || last_h >= self.h || last_w >= self.w
    }

    /// A depthwise convolution (one input channel per output channel) whose
    /// channels come in whole vectors of [`DEPTHWISE_VECTOR`], whose filter
    /// has at most 256 taps (a chunk of them fits in shared memory) and
    /// whose output has at least 28×28 pixels: the direct template's
    /// vectorized path (`conv_depthwise` in `conv_direct.cu`, chosen by the
    /// rendered `DW_VECTOR`). On smaller maps the per-element path wins: a
    /// block's taps are as many values as its pixels (ConvNeXt-T fp16 on an
    /// H100: 56×56×96 17.0 → 6.7 µs, 28×28×192 10.1 → 8.0, but 14×14×384
    /// 5.0 → 11.1 and 7×7×768 3.9 → 33.7).
    pub fn depthwise_vectorized(&self) -> bool {
        self.groups == self.c
            && self.k == self.c
            && self.c % DEPTHWISE_VECTOR == 0
            && self.r * self.s <= 256
            && self.p * self.q >= 28 * 28
    }

    /// True when the tensor-core template applies: both operands f16 or
    /// both bf16, or both f32 under tf32 precision ([`MmaOperands::of`]).
    pub fn mma_operands(&self) -> bool {
        MmaOperands::of(self).is_some()
    }

    /// Bytes the convolution must move through device memory at least:
    /// input, weights, output and residual once each (the cost model's
    /// floor for workloads too large for L2).
    pub fn dram_bytes(&self) -> f64 {
        let input = self.n * self.h * self.w * self.c * self.x_dtype.size();
        let weights = self.gemm_n() * self.gemm_k() * self.w_dtype.size();
        let out = self.gemm_m() * self.gemm_n();
        let res = out * self.residual.map_or(0, |d| d.size());
        // The shortcut reads one pixel per output pixel.
        let short = self
            .shortcut
            .map_or(0, |sc| self.gemm_m() * sc.c * sc.dtype.size());
        // A pooled epilogue writes one vector per image.
        let stored = if self.pool { self.n * self.k } else { out };
        (input + weights + stored * self.out_dtype.size() + res + short) as f64
    }

    /// Renders the shape, dtypes and epilogue constants every conv template
    /// reads.
    pub fn render(&self, p: &mut Params) {
        // GELU is named, not numbered: its `activate` specializations come
        // with `epilogue_gelu.cuh`, which only modules naming it include.
        let (act, lo, hi) = match self.activation {
            Activation::None => ("0", 0.0, 0.0),
            Activation::Relu => ("1", 0.0, 0.0),
            Activation::Clip { min, max } => ("2", min, max),
            Activation::Gelu { tanh } => (GELU_ACTIVATIONS[usize::from(tanh)], 0.0, 0.0),
        };
        p.ty("TIn", self.x_dtype)
            .ty("TW", self.w_dtype)
            .ty("TBias", self.bias.unwrap_or(DType::F32))
            .ty("TRes", self.residual.unwrap_or(self.out_dtype))
            .ty("TOut", self.out_dtype)
            .ints(&[
                ("N", self.n as i64),
                ("H", self.h as i64),
                ("W", self.w as i64),
                ("C", self.c as i64),
            ])
            .ints(&[
                ("K", self.k as i64),
                ("R", self.r as i64),
                ("S", self.s as i64),
                ("P", self.p as i64),
                ("Q", self.q as i64),
                ("GROUPS", self.groups as i64),
            ])
            .ints(&[
                ("SH", self.stride[0] as i64),
                ("SW", self.stride[1] as i64),
                ("PH", self.pad[0] as i64),
                ("PW", self.pad[1] as i64),
                ("DH", self.dilation[0] as i64),
                ("DW", self.dilation[1] as i64),
            ])
            .ints(&[
                ("GEMM_M", self.gemm_m() as i64),
                ("GEMM_N", self.gemm_n() as i64),
                ("GEMM_K", self.gemm_k() as i64),
            ])
            .boolean("HAS_BIAS", self.bias.is_some())
            .boolean("HAS_RES", self.residual.is_some())
            .int_expr("ACT", act)
            .float("CLIP_LO", lo)
            .float("CLIP_HI", hi)
            .boolean("TF32", self.precision == Precision::Tf32)
            .boolean("A_BOUNDS", self.needs_bounds())
            .boolean("POOL", self.pool)
            .int("POOL_PIXELS", (self.p * self.q) as u32);
        // Only shapes with a norm name it (`RowNormOf` in conv_wgmma.cu
        // reads its absence as none), so other kernels keep their text.
        if let Some(epsilon) = self.row_norm {
            p.boolean("ROW_NORM", true).float("NORM_EPS", epsilon);
        }
        let sc = self.shortcut;
        p.boolean("HAS_SC", sc.is_some()).ints(&[
            ("K_MAIN", self.main_k() as i64),
            ("SC_C", sc.map_or(0, |s| s.c) as i64),
            ("SC_H", sc.map_or(0, |s| s.h) as i64),
            ("SC_W", sc.map_or(0, |s| s.w) as i64),
            ("SC_SH", sc.map_or(1, |s| s.stride[0]) as i64),
            ("SC_SW", sc.map_or(1, |s| s.stride[1]) as i64),
        ]);
    }
}

pub(crate) fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Largest vector (elements) moving `elem` bytes each that divides `len`
/// and `step`, at most 16 bytes.
pub(crate) fn vector_width(len: usize, step: usize, elem: usize) -> usize {
    [8usize, 4, 2, 1]
        .into_iter()
        .find(|&v| v * elem <= 16 && len % v == 0 && step % v == 0)
        .unwrap_or(1)
}

/// Checks the split-K factor: at most the number of k tiles, every slice
/// non-empty.
pub(crate) fn check_split(split: u32, k_tiles: usize) -> Result<(), String> {
    let split = split as usize;
    if split == 0 || split > 64 {
        return Err(format!("split_k {split} must be in 1..=64"));
    }
    let per = k_tiles.div_ceil(split);
    if split > 1 && (split - 1) * per >= k_tiles {
        return Err(format!(
            "split_k {split} leaves a slice without k tiles ({k_tiles} tiles)"
        ));
    }
    Ok(())
}

/// `[M tiles, N tiles, split]`, the SIMT template's grid.
pub(crate) fn grid(shape: &ConvShape, bm: u32, bn: u32, split: u32) -> Result<[u32; 3], String> {
    let gx = shape.gemm_m().div_ceil(bm as usize);
    let gy = shape.gemm_n().div_ceil(bn as usize);
    if gx > i32::MAX as usize || gy > 65535 {
        return Err(format!("grid {gx}×{gy} exceeds the launch limits"));
    }
    Ok([gx as u32, gy as u32, split])
}

pub(crate) fn split_workspace(shape: &ConvShape, bm: u32, bn: u32, split: u32) -> Workspace {
    if split <= 1 {
        return Workspace::default();
    }
    let tiles = shape.gemm_m().div_ceil(bm as usize) * shape.gemm_n().div_ceil(bn as usize);
    Workspace {
        partials: split as usize * tiles * (bm * bn) as usize,
        counters: tiles,
    }
}

/// What the tensor cores multiply, decided by the operand dtypes and the
/// graph's precision. Fp32 stays off the tensor cores (strict FFMA on the
/// SIMT template); Tf32 runs f32 data as tf32, rounded in the kernel exactly
/// as the CPU reference rounds matrix-product operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaOperands {
    F16,
    Bf16,
    Tf32,
}

impl MmaOperands {
    /// The operands of `shape` if the tensor-core template can take them:
    /// both operands of one type, f16 or bf16, or f32 under tf32 precision.
    pub fn of(shape: &ConvShape) -> Option<Self> {
        if shape.x_dtype != shape.w_dtype {
            return None;
        }
        match shape.x_dtype {
            DType::F16 => Some(MmaOperands::F16),
            DType::BF16 => Some(MmaOperands::Bf16),
            DType::F32 if shape.precision == Precision::Tf32 => Some(MmaOperands::Tf32),
            DType::F32 => None,
        }
    }

    /// Bytes of one operand element in memory and in shared memory.
    pub fn element_bytes(self) -> usize {
        match self {
            MmaOperands::F16 | MmaOperands::Bf16 => 2,
            MmaOperands::Tf32 => 4,
        }
    }

    /// The `block_k` values the template takes: tile rows of 64 or 128 bytes.
    pub fn block_ks(self) -> [u32; 2] {
        match self {
            MmaOperands::F16 | MmaOperands::Bf16 => [32, 64],
            MmaOperands::Tf32 => [16, 32],
        }
    }

    /// Peak MACs per ns per SM: m16n8k8 tf32 issues at the rate of m16n8k16
    /// f16 with half the k, so half the f16 rate.
    pub fn peak(self) -> f64 {
        match self {
            MmaOperands::F16 | MmaOperands::Bf16 => cost_model::MMA_MACS_PER_NS,
            MmaOperands::Tf32 => cost_model::MMA_MACS_PER_NS / 2.0,
        }
    }
}

/// `serde`'s `skip_serializing_if` for flags that default to false.
pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

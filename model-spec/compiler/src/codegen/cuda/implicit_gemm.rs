//! The implicit-GEMM workload and the configs of its two tiled templates.
//!
//! A [`ConvShape`] describes a convolution over NHWC input and OHWI weight
//! (a dense layer is the 1×1 case over a 1×1 image); as a GEMM it is
//! `M = N·P·Q`, `N = K`, `K = R·S·C` (KERNELS.md §1). [`SimtConfig`] drives
//! `conv_simt.cu` (f32 FMA, any dtypes; the only path for strict Fp32) and
//! [`MmaConfig`] (in `mma_config.rs`) drives `conv_mma.cu` (mma.sync for
//! f16/bf16, and for f32 data under Tf32). Both know their validity rules,
//! search space, launch geometry, split-K workspace and cost-model view;
//! both render their constants into the instantiation's parameter struct
//! next to the shape's. [`cheapest`] is the heuristic default's rule.

use super::cost_model::{self, TileModel};
pub use super::mma_config::MmaConfig;
use super::mma_config::MmaOperands;
use super::source::{Geometry, Params, Workspace};
use crate::ir::{Activation, DType, Precision};
use serde::{Deserialize, Serialize};

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
        let (act, lo, hi) = match self.activation {
            Activation::None => (0, 0.0, 0.0),
            Activation::Relu => (1, 0.0, 0.0),
            Activation::Clip { min, max } => (2, min, max),
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
            .int("ACT", act)
            .float("CLIP_LO", lo)
            .float("CLIP_HI", hi)
            .boolean("TF32", self.precision == Precision::Tf32)
            .boolean("A_BOUNDS", self.needs_bounds())
            .boolean("POOL", self.pool)
            .int("POOL_PIXELS", (self.p * self.q) as u32);
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

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Largest vector (elements) moving `elem` bytes each that divides `len`
/// and `step`, at most 16 bytes.
fn vector_width(len: usize, step: usize, elem: usize) -> usize {
    [8usize, 4, 2, 1]
        .into_iter()
        .find(|&v| v * elem <= 16 && len % v == 0 && step % v == 0)
        .unwrap_or(1)
}

/// Checks the split-K factor: at most the number of k tiles, every slice
/// non-empty.
pub(super) fn check_split(split: u32, k_tiles: usize) -> Result<(), String> {
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
fn grid(shape: &ConvShape, bm: u32, bn: u32, split: u32) -> Result<[u32; 3], String> {
    let gx = shape.gemm_m().div_ceil(bm as usize);
    let gy = shape.gemm_n().div_ceil(bn as usize);
    if gx > i32::MAX as usize || gy > 65535 {
        return Err(format!("grid {gx}×{gy} exceeds the launch limits"));
    }
    Ok([gx as u32, gy as u32, split])
}

/// Tiles of the SIMT template (`conv_simt.cu`): CTA tile `block_m ×
/// block_n`, k step `block_k`, `thread_m × thread_n` accumulators per thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SimtConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub thread_m: u32,
    pub thread_n: u32,
    pub split_k: u32,
}

impl SimtConfig {
    pub fn threads(&self) -> usize {
        ((self.block_m / self.thread_m.max(1)) * (self.block_n / self.thread_n.max(1))) as usize
    }

    /// Two f32 buffers of `block_k × (block_m + block_n)`.
    pub fn smem_bytes(&self) -> usize {
        2 * self.block_k as usize * (self.block_m + self.block_n) as usize * 4
    }

    pub fn vec_a(&self, shape: &ConvShape) -> usize {
        // A vector never straddles a pixel of either input.
        let channels = shape.shortcut.map_or(shape.c, |sc| gcd(shape.c, sc.c));
        vector_width(channels, self.block_k as usize, shape.x_dtype.size())
    }

    pub fn vec_b(&self, shape: &ConvShape) -> usize {
        vector_width(shape.gemm_k(), self.block_k as usize, shape.w_dtype.size())
    }

    fn loads_per_thread(&self, shape: &ConvShape) -> (usize, usize) {
        let t = self.threads().max(1);
        let bk = self.block_k as usize;
        let la = (self.block_m as usize * bk / self.vec_a(shape)).div_ceil(t);
        let lb = (self.block_n as usize * bk / self.vec_b(shape)).div_ceil(t);
        (la, lb)
    }

    /// Registers per thread: accumulators, operand fragments, the prefetched
    /// tile, row bookkeeping and about 28 for addresses and loop state.
    pub fn regs_estimate(&self, shape: &ConvShape) -> usize {
        let (tm, tn) = (self.thread_m as usize, self.thread_n as usize);
        let (la, lb) = self.loads_per_thread(shape);
        tm * tn + tm + tn + la * self.vec_a(shape) + lb * self.vec_b(shape) + 3 * la + 28
    }

    pub fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        if shape.groups != 1 {
            return Err("the SIMT implicit GEMM needs groups = 1".into());
        }
        if !matches!(self.thread_m, 4 | 8) || !matches!(self.thread_n, 4 | 8) {
            return Err("thread_m and thread_n must be 4 or 8".into());
        }
        if !matches!(self.block_k, 8 | 16 | 32) {
            return Err("block_k must be 8, 16 or 32".into());
        }
        if !matches!(self.block_m, 16 | 32 | 64 | 128 | 256)
            || !matches!(self.block_n, 16 | 32 | 64 | 128 | 256)
            || self.block_m % self.thread_m != 0
            || self.block_n % self.thread_n != 0
        {
            return Err("block_m and block_n must be powers of two in 16..=256, multiples of the thread tile".into());
        }
        let threads = self.threads();
        if !(32..=1024).contains(&threads) || threads % 32 != 0 {
            return Err(format!(
                "{threads} threads: must be a multiple of 32 in 32..=1024"
            ));
        }
        if self.smem_bytes() > MAX_SMEM_BYTES {
            return Err(format!("{} B of shared memory", self.smem_bytes()));
        }
        let (la, lb) = self.loads_per_thread(shape);
        let prefetch = la * self.vec_a(shape) + lb * self.vec_b(shape);
        if la + lb > SIMT_MAX_LOADS || prefetch > SIMT_MAX_PREFETCH {
            return Err(format!(
                "{} global loads holding {prefetch} values per thread and k tile (at most \
                 {SIMT_MAX_LOADS} and {SIMT_MAX_PREFETCH})",
                la + lb
            ));
        }
        let regs = self.regs_estimate(shape);
        if regs > register_cap(threads) {
            return Err(format!(
                "about {regs} registers per thread, {} available",
                register_cap(threads)
            ));
        }
        check_split(self.split_k, shape.gemm_k().div_ceil(self.block_k as usize))?;
        grid(shape, self.block_m, self.block_n, self.split_k).map(|_| ())
    }

    pub fn search_space(shape: &ConvShape) -> Vec<Self> {
        let mut out = Vec::new();
        for block_m in [32, 64, 128] {
            for block_n in [32, 64, 128] {
                for block_k in [8, 16, 32] {
                    for thread_m in [4, 8] {
                        for thread_n in [4, 8] {
                            for split_k in SPLITS {
                                let c = SimtConfig {
                                    block_m,
                                    block_n,
                                    block_k,
                                    thread_m,
                                    thread_n,
                                    split_k,
                                };
                                if c.validate(shape).is_ok() {
                                    out.push(c);
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    pub fn tag(&self) -> String {
        format!(
            "simt_m{}n{}k{}t{}x{}s{}",
            self.block_m, self.block_n, self.block_k, self.thread_m, self.thread_n, self.split_k
        )
    }

    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        Geometry {
            grid: grid(shape, self.block_m, self.block_n, self.split_k).unwrap_or([1, 1, 1]),
            block: [self.threads() as u32, 1, 1],
            smem_bytes: self.smem_bytes() as u32,
        }
    }

    pub fn workspace(&self, shape: &ConvShape) -> Workspace {
        split_workspace(shape, self.block_m, self.block_n, self.split_k)
    }

    pub fn model(&self, shape: &ConvShape) -> TileModel {
        // Per thread and k tile: the FMAs against the shared-memory reads,
        // loop overhead, and the global loads with their index arithmetic
        // and transposed shared stores.
        let (tm, tn) = (self.thread_m as f64, self.thread_n as f64);
        let bk = f64::from(self.block_k);
        let (la, lb) = self.loads_per_thread(shape);
        let fma = bk * tm * tn;
        let overhead = bk * ((tm + tn) / 2.0 + 2.0)
            + la as f64 * (12.0 + self.vec_a(shape) as f64)
            + lb as f64 * (6.0 + self.vec_b(shape) as f64);
        TileModel {
            bm: self.block_m as usize,
            bn: self.block_n as usize,
            bk: self.block_k as usize,
            threads: self.threads(),
            smem_bytes: self.smem_bytes(),
            regs_per_thread: self.regs_estimate(shape),
            split_k: self.split_k as usize,
            split_in_cluster: false,
            split_spread: false,
            tiles_in_flight: 1,
            peak: cost_model::SIMT_MACS_PER_NS,
            inner_efficiency: fma / (fma + overhead),
            saturating_warps: 16.0,
            element_bytes: shape.x_dtype.size(),
            gather_penalty: if self.vec_a(shape) == 1 { 1.3 } else { 1.0 },
            out_bytes: shape.out_dtype.size(),
            res_bytes: shape.residual.map_or(0, |d| d.size()),
            res_after_loop: shape.residual.is_some(),
            store_efficiency: 1.0,
            staging_bytes: 0,
            epilogue_barriers: 0,
            dram_bytes: shape.dram_bytes(),
        }
    }

    pub fn render(&self, p: &mut Params, shape: &ConvShape) {
        p.ints(&[
            ("BM", self.block_m.into()),
            ("BN", self.block_n.into()),
            ("BK", self.block_k.into()),
            ("TM", self.thread_m.into()),
            ("TN", self.thread_n.into()),
            ("SPLIT_K", self.split_k.into()),
        ])
        .ints(&[
            ("VA", self.vec_a(shape) as i64),
            ("VB", self.vec_b(shape) as i64),
        ]);
    }
}

pub(super) fn split_workspace(shape: &ConvShape, bm: u32, bn: u32, split: u32) -> Workspace {
    if split <= 1 {
        return Workspace::default();
    }
    let tiles = shape.gemm_m().div_ceil(bm as usize) * shape.gemm_n().div_ceil(bn as usize);
    Workspace {
        partials: split as usize * tiles * (bm * bn) as usize,
        counters: tiles,
    }
}

/// The config with the lowest modelled time among `candidates` whose shared
/// memory fits [`DEFAULT_SMEM_LIMIT`] (all of them if none does); ties go to
/// the earlier candidate.
pub fn cheapest<C: Copy>(
    candidates: &[C],
    shape: &ConvShape,
    smem: impl Fn(&C) -> usize,
    model: impl Fn(&C) -> Option<TileModel>,
) -> Option<C> {
    let fits: Vec<C> = candidates
        .iter()
        .copied()
        .filter(|c| smem(c) <= DEFAULT_SMEM_LIMIT)
        .collect();
    let pool = if fits.is_empty() {
        candidates.to_vec()
    } else {
        fits
    };
    let (m, n, k) = (shape.gemm_m(), shape.gemm_n(), shape.gemm_k());
    let mut best: Option<(f64, C)> = None;
    for c in pool {
        let Some(tile) = model(&c) else { continue };
        let t = cost_model::estimate_ns(m, n, k, &tile);
        if best.as_ref().is_none_or(|(b, _)| t < *b) {
            best = Some((t, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn conv(
        n: usize,
        c: usize,
        hw: usize,
        k: usize,
        rs: usize,
        stride: usize,
        dtype: DType,
    ) -> ConvShape {
        let pad = rs / 2;
        let out = (hw + 2 * pad - rs) / stride + 1;
        ConvShape {
            n,
            c,
            h: hw,
            w: hw,
            k,
            r: rs,
            s: rs,
            p: out,
            q: out,
            stride: [stride; 2],
            pad: [pad; 4],
            dilation: [1, 1],
            groups: 1,
            x_dtype: dtype,
            w_dtype: dtype,
            residual: None,
            out_dtype: dtype,
            bias: Some(DType::F32),
            activation: Activation::Relu,
            precision: match dtype {
                DType::F32 => Precision::Fp32,
                DType::F16 => Precision::Fp16,
                DType::BF16 => Precision::Bf16,
            },
            shortcut: None,
            pool: false,
        }
    }

    #[test]
    fn search_spaces_are_valid_and_nonempty() {
        for dtype in [DType::F32, DType::F16] {
            for shape in [
                conv(1, 3, 224, 64, 7, 2, dtype),
                conv(1, 512, 7, 512, 3, 1, dtype),
                conv(8, 64, 56, 256, 1, 1, dtype),
            ] {
                let simt = SimtConfig::search_space(&shape);
                assert!(!simt.is_empty());
                assert!(simt.iter().all(|c| c.validate(&shape).is_ok()));
                let mma = MmaConfig::search_space(&shape);
                assert_eq!(mma.is_empty(), dtype == DType::F32);
                assert!(mma.iter().all(|c| c.validate(&shape).is_ok()));
            }
        }
    }

    #[test]
    fn bounds_checks_only_where_windows_leave_the_input() {
        assert!(conv(1, 64, 56, 64, 3, 1, DType::F32).needs_bounds());
        assert!(!conv(1, 64, 56, 64, 1, 1, DType::F32).needs_bounds());
        assert!(!conv(1, 64, 56, 64, 1, 2, DType::F32).needs_bounds());
    }
}

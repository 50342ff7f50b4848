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

use super::conv_shape::*;
use super::cost_model::{self, TileModel};
use super::source::{Geometry, Params, Workspace};

use serde::{Deserialize, Serialize};

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
        if shape.row_norm.is_some() {
            return Err("SIMT tiles do not normalize their input rows (wgmma does)".into());
        }
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
    use crate::ir::{Activation, DType, Precision};

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
            row_norm: None,
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
                let mma = super::super::mma_config::MmaConfig::search_space(&shape);
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

//! The warpgroup tensor-core template's config ([`WgmmaConfig`],
//! `conv_wgmma.cu`, sm_90a): f16/bf16 operands only (tf32 stays on
//! mma.sync, whose fragments the kernel rounds as the CPU reference does),
//! its validity rules, search space, launch geometry, shared memory and
//! cost-model view, and the generated `Wgmma<BN, T>` instruction wrappers.
//!
//! The k tile is fixed at 64 elements (128-byte rows, the 128-byte swizzle);
//! `block_m` is 64 per warpgroup; `block_n` is the wgmma's N.

use super::cost_model::{self, TileModel};
use super::implicit_gemm::{check_split, register_cap, ConvShape};
use super::implicit_gemm::{MAX_REGS, MAX_SMEM_BYTES};
use super::mma_config::{
    epilogue_model, mma_grid, split_and_epilogue, MmaConfig, MmaEpilogue, MmaOperands, SplitReduce,
    TileParams,
};
use super::source::{Geometry, Params, Workspace};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// k elements per tile: 128-byte rows of 16-bit operands.
const BLOCK_K: u32 = 64;
/// Bytes of one tile row.
const ROW_BYTES: usize = 128;
/// Extra dynamic shared memory the kernel uses to align its stages to the
/// 1024-byte swizzle atoms.
const ALIGN_SLACK: usize = 1024;
/// The wgmma N extents the template instantiates.
pub const BLOCK_NS: [u32; 6] = [32, 64, 96, 128, 192, 256];
/// Floats of padding per staged epilogue row (as the mma.sync template).
const EPILOGUE_PAD: usize = 8;

/// CTA tile `block_m × block_n` (`block_m / 64` warpgroups), a
/// `stages`-deep cp.async pipeline, `split_k` slices, and the epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WgmmaConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub stages: u32,
    pub split_k: u32,
    #[serde(default)]
    pub epilogue: MmaEpilogue,
    #[serde(default, skip_serializing_if = "SplitReduce::is_global")]
    pub split_reduce: SplitReduce,
}

impl WgmmaConfig {
    pub fn warpgroups(&self) -> usize {
        (self.block_m / 64).max(1) as usize
    }

    pub fn threads(&self) -> usize {
        128 * self.warpgroups()
    }

    pub fn pipeline_bytes(&self) -> usize {
        self.stages as usize * (self.block_m + self.block_n) as usize * ROW_BYTES
    }

    /// The staged epilogue stages the whole tile in one pass: 16 rows per
    /// warp, `block_n + 8` floats each.
    fn epilogue_bytes(&self) -> usize {
        self.block_m as usize * (self.block_n as usize + EPILOGUE_PAD) * 4
    }

    /// Dynamic shared memory: the pipeline or the staged epilogue, plus
    /// the alignment slack.
    pub fn smem_bytes(&self) -> usize {
        let staging = match self.epilogue {
            MmaEpilogue::Staged => self.epilogue_bytes(),
            MmaEpilogue::Direct => 0,
        };
        self.pipeline_bytes()
            .max(staging)
            .max(
                self.split_reduce
                    .smem_bytes(self.split_k, self.block_m, self.block_n),
            )
            + ALIGN_SLACK
    }

    /// Registers per thread: `block_n / 2` accumulators, 5 per A chunk and
    /// 4 per B chunk a thread copies each stage (as the mma.sync
    /// template), and about 40 for addresses, descriptors and loop state.
    /// Split-K's fixup keeps partial sums in flight: 8 more, 32 from 96
    /// accumulators, 48 from 128. Calibrated against ptxas by
    /// `register_estimates_vs_ptxas` (`AOTUNE_CALIB_KERNELS=wgmma`, fp16, the
    /// sweep's stem, 3×3 and 1×1 shapes, split-K ≤ 2: 688 kernels); without
    /// the split-K terms it fell up to 27 short on 256-wide split tiles,
    /// which spilled at 255.
    pub fn regs_estimate(&self, shape: &ConvShape) -> usize {
        let chunks = ROW_BYTES / 16;
        let la = (self.block_m as usize * chunks).div_ceil(self.threads());
        let lb = (self.block_n as usize * chunks).div_ceil(self.threads());
        let gather = if MmaConfig::a_vectorized(shape) {
            5
        } else {
            10
        };
        let accumulators = self.block_n as usize / 2;
        let split = match (self.split_k > 1, accumulators) {
            (false, _) => 0,
            (true, 128..) => 48,
            (true, 96..) => 32,
            (true, _) => 8,
        };
        accumulators + la * gather + lb * 4 + 40 + split
    }

    pub fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        if shape.groups != 1 {
            return Err("the wgmma implicit GEMM needs groups = 1".into());
        }
        match MmaOperands::of(shape) {
            Some(MmaOperands::F16 | MmaOperands::Bf16) => {}
            _ => {
                return Err(format!(
                    "wgmma takes f16 or bf16 operands of one type; got {} and {} under {}",
                    shape.x_dtype, shape.w_dtype, shape.precision
                ))
            }
        }
        if !matches!(self.block_m, 64 | 128 | 192 | 256) {
            return Err("block_m must be 64, 128, 192 or 256 (64 rows per warpgroup)".into());
        }
        if !BLOCK_NS.contains(&self.block_n) {
            return Err(format!("block_n must be one of {BLOCK_NS:?}"));
        }
        if !matches!(self.stages, 2..=6) {
            return Err("stages must be in 2..=6".into());
        }
        if !MmaConfig::b_vectorized(shape) {
            return Err("wgmma needs R·S·C to be a multiple of 8 (16-byte weight rows)".into());
        }
        let chunks = self.block_m as usize * ROW_BYTES / 16;
        if !MmaConfig::a_vectorized(shape) && chunks > 4 * self.threads() {
            return Err("too many gathered A chunks per thread".into());
        }
        if self.smem_bytes() > MAX_SMEM_BYTES {
            return Err(format!("{} B of shared memory", self.smem_bytes()));
        }
        let regs = self.regs_estimate(shape);
        let cap = register_cap(self.threads()).min(MAX_REGS);
        if regs > cap {
            return Err(format!(
                "about {regs} registers per thread, {cap} available"
            ));
        }
        check_split(self.split_k, shape.gemm_k().div_ceil(BLOCK_K as usize))?;
        self.split_reduce.check(self.split_k)?;
        mma_grid(shape, self.block_m, self.block_n, self.split_k).map(|_| ())
    }

    /// Every block_m (1..4 warpgroups) × block_n × 2..6 stages × split-K ×
    /// epilogue that validates.
    pub fn search_space(shape: &ConvShape) -> Vec<Self> {
        let mut out = Vec::new();
        for block_m in [64, 128, 192, 256] {
            for block_n in BLOCK_NS {
                for stages in 2..=6 {
                    for (split_k, epilogue, split_reduce) in split_and_epilogue() {
                        let c = WgmmaConfig {
                            block_m,
                            block_n,
                            stages,
                            split_k,
                            epilogue,
                            split_reduce,
                        };
                        if c.validate(shape).is_ok() {
                            out.push(c);
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether the heuristic default considers this config: at least 3
    /// stages. With 2 each k tile waits for its wgmmas before the next
    /// barrier and only one tile of copies overlaps that wait: 2 stages ran
    /// 5–20% slower than 3 on the H200's batch-256 layers, which the model
    /// below does not see. Not the cluster split-K reduction, which has
    /// not been measured yet.
    pub fn default_candidate(&self) -> bool {
        self.stages >= 3 && self.split_reduce.is_global()
    }

    /// `wgmma_m128n256p4s1`, then `c` for the cluster split-K reduction and
    /// `d` for the direct epilogue.
    pub fn tag(&self) -> String {
        format!(
            "wgmma_m{}n{}p{}s{}{}{}",
            self.block_m,
            self.block_n,
            self.stages,
            self.split_k,
            self.split_reduce.tag(),
            match self.epilogue {
                MmaEpilogue::Staged => "",
                MmaEpilogue::Direct => "d",
            }
        )
    }

    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        Geometry {
            grid: mma_grid(shape, self.block_m, self.block_n, self.split_k).unwrap_or([1, 1, 1]),
            block: [self.threads() as u32, 1, 1],
            smem_bytes: self.smem_bytes() as u32,
        }
    }

    pub fn workspace(&self, shape: &ConvShape) -> Workspace {
        self.split_reduce
            .workspace(shape, self.block_m, self.block_n, self.split_k)
    }

    /// k tiles whose copies are in flight while one tile's wgmmas are
    /// issued: `stages - 2` with 4 or more stages (one more stage holds the
    /// previous tile, whose wgmmas stay in flight), `stages - 1` with 2 or 3
    /// (each tile waits for its wgmmas; see conv_wgmma.cu).
    pub fn tiles_in_flight(&self) -> usize {
        if self.stages >= 4 {
            self.stages as usize - 2
        } else {
            self.stages as usize - 1
        }
    }

    pub fn model(&self, shape: &ConvShape) -> TileModel {
        let n = f64::from(self.block_n);
        // Per m64nNk16: tensor work (64·N·16 MACs at 2048 per clock per
        // SM) vs the shared-memory bytes it reads (A 2 KiB + B 32·N B at
        // 128 B per clock); N ≤ 64 is bound by the latter.
        let mma_clocks = 64.0 * n * 16.0 / 2048.0;
        let smem_clocks = (2048.0 + 32.0 * n) / 128.0;
        let (store_efficiency, staging_bytes, epilogue_barriers) =
            epilogue_model(self.epilogue, shape, self.block_m, self.block_n, 1);
        TileModel {
            bm: self.block_m as usize,
            bn: self.block_n as usize,
            bk: BLOCK_K as usize,
            threads: self.threads(),
            smem_bytes: self.smem_bytes(),
            regs_per_thread: self.regs_estimate(shape),
            split_k: self.split_k as usize,
            split_in_cluster: !self.split_reduce.is_global(),
            tiles_in_flight: self.tiles_in_flight(),
            peak: cost_model::WGMMA_MACS_PER_NS,
            // With 3 stages (each k tile waits for its wgmmas before the next
            // barrier) 128×128 tiles reached 52% of the measured peak on
            // ResNet-50's 3×3 layers at batch 256.
            inner_efficiency: 0.55 * (mma_clocks / smem_clocks).min(1.0),
            saturating_warps: 8.0,
            element_bytes: 2,
            gather_penalty: if MmaConfig::a_vectorized(shape) {
                1.0
            } else {
                2.0
            },
            out_bytes: shape.out_dtype.size(),
            res_bytes: shape.residual.map_or(0, |d| d.size()),
            store_efficiency,
            staging_bytes,
            epilogue_barriers,
            dram_bytes: shape.dram_bytes(),
        }
    }

    /// The parameters `conv_wgmma.cu` reads, in the names the shared
    /// loader and epilogues of `conv_mma.cu` expect.
    pub fn render(&self, p: &mut Params, shape: &ConvShape) {
        TileParams {
            bm: self.block_m,
            bn: self.block_n,
            bk: BLOCK_K,
            warps_m: self.block_m / 16,
            warps_n: 1,
            stages: self.stages,
            split_k: self.split_k,
            split_reduce: self.split_reduce,
            epilogue: self.epilogue,
            epi_mi: 1,
        }
        .render(p, shape);
    }
}

/// The `Wgmma<BN, T>` specializations `conv_wgmma.cu` declares: for every
/// N in [`BLOCK_NS`] and both 16-bit operand types, one
/// `wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T` with its N/2 accumulator
/// registers as operands. Outside sm_90a (the compute_90 PTX kept for other
/// GPUs) they trap.
pub fn instructions() -> String {
    let mut s = String::from("\nnamespace aotune {\n");
    for n in BLOCK_NS {
        for (ctype, ptx) in [("__half", "f16"), ("__nv_bfloat16", "bf16")] {
            let r = n as usize / 2;
            let regs: Vec<String> = (0..r).map(|i| format!("%{i}")).collect();
            let outs: Vec<String> = (0..r).map(|i| format!("\"+f\"(d[{i}])")).collect();
            let _ = write!(
                s,
                "template <> struct Wgmma<{n}, {ctype}> {{\n  \
                 static __device__ __forceinline__ void run(float (&d)[{r}], unsigned long long a,\n\
                 \x20                                            unsigned long long b) {{\n\
                 #if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n    \
                 asm volatile(\n        \
                 \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\n\"\n        \
                 \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs}}}, %{a}, %{b}, p, 1, 1, 0, 0;\\n}}\\n\"\n        \
                 : {outs}\n        \
                 : \"l\"(a), \"l\"(b), \"r\"(1));\n\
                 #else\n    \
                 __trap();\n\
                 #endif\n  \
                 }}\n}};\n",
                regs = regs.join(", "),
                outs = outs.join(", "),
                a = r,
                b = r + 1,
                scale = r + 2,
            );
        }
    }
    s.push_str("}  // namespace aotune\n");
    s
}

#[cfg(test)]
mod tests {
    use super::super::implicit_gemm::tests::conv;
    use super::*;
    use crate::ir::{DType, Precision};

    fn base() -> WgmmaConfig {
        WgmmaConfig {
            block_m: 128,
            block_n: 128,
            stages: 4,
            split_k: 1,
            epilogue: MmaEpilogue::Staged,
            split_reduce: SplitReduce::Global,
        }
    }

    #[test]
    fn validity_rules_say_why() {
        let shape = conv(8, 64, 56, 64, 3, 1, DType::F16);
        assert!(base().validate(&shape).is_ok());
        let odd = WgmmaConfig {
            block_m: 96,
            ..base()
        };
        assert!(odd.validate(&shape).unwrap_err().contains("warpgroup"));
        let deep = WgmmaConfig {
            block_n: 256,
            block_m: 256,
            stages: 6,
            ..base()
        };
        assert!(deep.validate(&shape).unwrap_err().contains("shared memory"));
        let f32_shape = conv(8, 64, 56, 64, 3, 1, DType::F32);
        let tf32 = ConvShape {
            precision: Precision::Tf32,
            ..f32_shape
        };
        assert!(base().validate(&tf32).unwrap_err().contains("f16 or bf16"));
    }

    #[test]
    fn smem_holds_the_stages_or_the_staged_tile_plus_alignment() {
        // 4 stages × (128 + 128) rows × 128 B = 128 KiB; staging 128 × 136
        // floats = 68 KiB.
        assert_eq!(base().smem_bytes(), 4 * 256 * 128 + 1024);
        let two = WgmmaConfig {
            stages: 2,
            block_n: 256,
            ..base()
        };
        // 2 × 384 × 128 = 96 KiB < 128 × 264 × 4 = 132 KiB of staging.
        assert_eq!(two.smem_bytes(), 128 * 264 * 4 + 1024);
    }

    #[test]
    fn one_stage_holds_the_wgmmas_in_flight_from_4_stages() {
        let with = |stages| WgmmaConfig { stages, ..base() };
        assert_eq!(with(2).tiles_in_flight(), 1);
        assert_eq!(with(3).tiles_in_flight(), 2);
        assert_eq!(with(4).tiles_in_flight(), 2);
        assert_eq!(with(6).tiles_in_flight(), 4);
        let shape = conv(8, 64, 56, 64, 3, 1, DType::F16);
        assert_eq!(base().model(&shape).tiles_in_flight, 2);
    }

    #[test]
    fn every_block_n_has_both_instructions() {
        let text = instructions();
        for n in BLOCK_NS {
            for t in ["f16", "bf16"] {
                assert!(text.contains(&format!("m64n{n}k16.f32.{t}.{t}")), "{n} {t}");
            }
        }
        // The widest takes 128 accumulators plus two descriptors and the
        // scale flag as operands %0..%130.
        assert!(text.contains("%128, %129, p") && text.contains("setp.ne.b32 p, %130, 0"));
    }

    #[test]
    fn tags_and_records_round_trip() {
        let c = base();
        assert_eq!(c.tag(), "wgmma_m128n128p4s1");
        let back: WgmmaConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}

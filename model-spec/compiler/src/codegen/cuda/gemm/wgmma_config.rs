//! The warpgroup tensor-core template's config ([`WgmmaConfig`],
//! `conv_wgmma.cu`, sm_90a): f16/bf16 operands only (tf32 stays on
//! mma.sync, whose fragments the kernel rounds as the CPU reference does),
//! its validity rules, search space, launch geometry, shared memory and
//! cost-model view, and the generated `Wgmma<BN, T>` instruction wrappers.
//!
//! The k tile is fixed at 64 elements (128-byte rows, the 128-byte swizzle);
//! `block_m` is 64 per warpgroup; `block_n` is the wgmma's N.

use super::conv_shape::{
    check_split, is_false, register_cap, ConvShape, MmaOperands, MAX_REGS, MAX_SMEM_BYTES,
};
use super::cost_model::{self, TileModel};
use super::mma_config::{
    epilogue_model, mma_grid, split_and_epilogue, MmaConfig, MmaEpilogue, SplitReduce, TileParams,
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

/// Widest GEMM N whose search space holds swapped-operand tiles.
pub const SWAP_MAX_N: usize = 128;

/// Resident CTAs per SM a config may ask ptxas for.
pub const MIN_BLOCKS: [u32; 4] = [1, 2, 3, 4];

/// CTAs of a warp-specialized (persistent) grid at most: one per SM of
/// the H100 and H200. On a GPU with fewer SMs the grid still computes every
/// tile, in more than one wave.
pub const PERSISTENT_CTAS: usize = 132;

/// Smallest GEMM, in tiles, whose search space holds warp-specialized
/// configs: two waves of the persistent grid, so that a CTA has a next
/// tile whose pipeline fill the current one hides.
const WS_MIN_TILES: usize = 2 * PERSISTENT_CTAS;

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
    /// CTAs per SM ptxas must leave room for (`__launch_bounds__`' second
    /// argument), capping registers at 65536 / (threads · min_blocks);
    /// 1 (absent from the JSON) leaves them uncapped. For memory-bound
    /// layers whose CTAs wait on latency (1×1 convs with few k tiles at
    /// batch 256, 3 CTAs per SM at 78–80 registers under Nsight Compute).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub min_blocks: u32,
    /// The staged epilogue's residual tile is copied into shared memory
    /// with the first k tile (cp.async) instead of loaded after the k loop,
    /// so its memory latency overlaps the loop. Absent from the JSON when
    /// false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub prefetch_residual: bool,
    /// The wgmma multiplies the weights by the pixels instead of the
    /// pixels by the weights: each warpgroup takes 64 output channels of
    /// the tile (`block_n / 64` warpgroups) and all `block_m` pixels as the
    /// instruction's N (m64n`block_m`k16), so a layer with 64 output
    /// channels still runs wide instructions (m64n64k16 reads 4 KiB of
    /// shared memory per 64·64·16 MACs, m64n256k16 10 KiB per 4× the work).
    /// Staged epilogue only (it transposes the tile through shared
    /// memory). Absent from the JSON when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub swap_ab: bool,
    /// Under a programmatic dependent launch, let the next kernel's CTAs
    /// start right after the grid dependency wait instead of after the k
    /// loop (`launch_dependents`, common.cuh): they then read their first
    /// weight tiles while this kernel computes, but take SM slots it could
    /// use. Neutral when timed alone, so the tuner's spaces leave it off and
    /// `aotune refine --candidates trigger` decides it in the model's graph.
    /// Absent from the JSON when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub early_trigger: bool,
    /// One more warpgroup, the producer, copies k tiles into a ring of
    /// `stages` stages ordered by mbarriers while the `block_m / 64`
    /// consumer warpgroups only run wgmmas and the epilogue, over a
    /// persistent grid of at most [`PERSISTENT_CTAS`] CTAs that walk the
    /// tiles (`conv_wgmma_ws.cu`): no CTA-wide barrier per k tile, and each
    /// tile's pipeline fill overlaps the previous tile's last k tiles and
    /// epilogue. Split 1 and the direct epilogue only. Absent from the JSON
    /// when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub warp_specialized: bool,
    /// Warp-specialized with two consumer warpgroups that take the CTA's
    /// tiles in turn, each a whole `block_m` (64 or 128) × `block_n` tile,
    /// one running its epilogue while the other multiplies. Absent from the
    /// JSON when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pingpong: bool,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

impl WgmmaConfig {
    pub fn warpgroups(&self) -> usize {
        let rows = if self.swap_ab {
            self.block_n
        } else {
            self.block_m
        };
        (rows / 64).max(1) as usize
    }

    /// The wgmma's N: `block_n`, or `block_m` with [`Self::swap_ab`].
    pub fn instruction_n(&self) -> u32 {
        if self.swap_ab {
            self.block_m
        } else {
            self.block_n
        }
    }

    /// f32 accumulators per thread: half the wgmma's N, for each 64-row
    /// block a ping-pong warpgroup multiplies.
    fn accumulators(&self) -> usize {
        let blocks = if self.pingpong {
            (self.block_m as usize / 64).max(1)
        } else {
            1
        };
        self.instruction_n() as usize / 2 * blocks
    }

    /// Warpgroups running wgmmas: two that alternate tiles when
    /// ping-pong, else one per 64 rows of the tile.
    pub fn consumer_warpgroups(&self) -> usize {
        if self.pingpong {
            2
        } else {
            self.warpgroups()
        }
    }

    /// The consumer warpgroups, plus the producer when warp-specialized.
    pub fn threads(&self) -> usize {
        128 * (self.consumer_warpgroups() + usize::from(self.warp_specialized))
    }

    /// Stages the kernel allocates: `stages`, or fewer when a CTA's k
    /// range has fewer k tiles (a 1×1 conv over 64 channels has one), which
    /// are all it ever fills.
    /// A warp-specialized CTA cycles its ring over all its tiles' k
    /// tiles: all `stages` are allocated.
    pub fn allocated_stages(&self, shape: &ConvShape) -> usize {
        if self.warp_specialized {
            return self.stages as usize;
        }
        let k_tiles = shape.gemm_k().div_ceil(BLOCK_K as usize);
        let per_cta = k_tiles.div_ceil(self.split_k.max(1) as usize).max(1);
        per_cta.min(self.stages as usize)
    }

    pub fn pipeline_bytes(&self, shape: &ConvShape) -> usize {
        self.allocated_stages(shape) * (self.block_m + self.block_n) as usize * ROW_BYTES
    }

    /// The staged epilogue stages the whole tile in one pass: 16 rows per
    /// warp, `block_n + 8` floats each.
    fn epilogue_bytes(&self) -> usize {
        self.block_m as usize * (self.block_n as usize + EPILOGUE_PAD) * 4
    }

    /// Where a prefetched residual tile starts: past the pipeline, the
    /// staged epilogue and the cluster reduction, which share one region.
    fn residual_offset(&self, shape: &ConvShape) -> usize {
        let staging = match self.epilogue {
            MmaEpilogue::Staged => self.epilogue_bytes(),
            MmaEpilogue::Direct => 0,
        };
        self.pipeline_bytes(shape)
            .max(staging)
            .max(
                self.split_reduce
                    .smem_bytes(self.split_k, self.block_m, self.block_n),
            )
    }

    /// Bytes of the prefetched residual tile (16-bit elements), or 0.
    fn residual_bytes(&self) -> usize {
        if self.prefetch_residual {
            self.block_m as usize * self.block_n as usize * 2
        } else {
            0
        }
    }

    /// Dynamic shared memory: the pipeline or the staged epilogue, the
    /// prefetched residual tile, the spread reduction's region, plus the
    /// alignment slack.
    /// A warp-specialized ring ends with two 8-byte mbarriers per stage and
    /// the ping-pong hand-off's.
    pub fn smem_bytes(&self, shape: &ConvShape) -> usize {
        let barriers = if self.warp_specialized {
            16 * self.stages as usize + 8 * usize::from(self.pingpong)
        } else {
            0
        };
        self.spread_offset(shape) + self.spread_region_bytes() + barriers + ALIGN_SLACK
    }

    /// The static shared memory of a row norm's statistics (a mean and an
    /// rstd per tile row, `conv_wgmma.cu`), beside the dynamic allocation.
    fn row_norm_bytes(&self, shape: &ConvShape) -> usize {
        if shape.row_norm.is_some() {
            8 * self.block_m as usize
        } else {
            0
        }
    }

    /// A row norm needs each CTA to see whole rows (split 1) and two
    /// threads per tile row over the plain template's k loop: no swapped
    /// operands, no warp specialization.
    fn check_row_norm(&self) -> Result<(), String> {
        if self.split_k != 1 || self.swap_ab || self.warp_specialized {
            return Err(
                "a row norm needs split_k 1 and the plain wgmma template (no swap_ab, not \
                 warp-specialized)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Where the spread reduction's region starts: past everything else,
    /// which may still be in use when the other ranks push.
    fn spread_offset(&self, shape: &ConvShape) -> usize {
        self.residual_offset(shape) + self.residual_bytes()
    }

    /// The spread reduction's region: `block_n / 4` accumulator pairs a
    /// thread (`block_n / 2` accumulators).
    fn spread_region_bytes(&self) -> usize {
        self.split_reduce.spread_region_bytes(
            self.split_k,
            self.block_n as usize / 4,
            self.threads(),
        )
    }

    /// The register cap `min_blocks` sets, when it sets one.
    fn min_blocks_cap(&self) -> Option<usize> {
        (self.min_blocks > 1).then(|| register_cap(self.threads() * self.min_blocks as usize))
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
    ///
    /// Warp-specialized, the larger of the two roles': a consumer holds the
    /// accumulators and about 40 more, the producer its 128 threads' share
    /// of the copies and about 30.
    pub fn regs_estimate(&self, shape: &ConvShape) -> usize {
        let chunks = ROW_BYTES / 16;
        let loaders = if self.warp_specialized {
            128
        } else {
            self.threads()
        };
        let la = (self.block_m as usize * chunks).div_ceil(loaders);
        let lb = (self.block_n as usize * chunks).div_ceil(loaders);
        let gather = if MmaConfig::a_vectorized(shape) {
            5
        } else {
            10
        };
        let accumulators = self.accumulators();
        if self.warp_specialized {
            return (accumulators + 40).max(la * gather + lb * 4 + 30);
        }
        let split = match (self.split_k > 1, accumulators) {
            (false, _) => 0,
            (true, 128..) => 48,
            (true, 96..) => 32,
            (true, _) => 8,
        };
        let residual = if self.prefetch_residual { 4 } else { 0 };
        accumulators + la * gather + lb * 4 + 40 + split + residual
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
        if self.smem_bytes(shape) + self.row_norm_bytes(shape) > MAX_SMEM_BYTES {
            return Err(format!("{} B of shared memory", self.smem_bytes(shape)));
        }
        if shape.row_norm.is_some() {
            self.check_row_norm()?;
        }
        let regs = self.regs_estimate(shape);
        let cap = register_cap(self.threads()).min(MAX_REGS);
        if regs > cap {
            return Err(format!(
                "about {regs} registers per thread, {cap} available"
            ));
        }
        self.check_min_blocks(regs, self.smem_bytes(shape))?;
        check_split(self.split_k, shape.gemm_k().div_ceil(BLOCK_K as usize))?;
        self.split_reduce.check(self.split_k)?;
        if self.split_reduce == SplitReduce::Spread && self.epilogue != MmaEpilogue::Direct {
            return Err(
                "split_reduce spread finishes each rank's share with the direct epilogue".into(),
            );
        }
        super::mma_config::check_pooled_tile(shape, self.block_m, self.epilogue)?;
        if self.prefetch_residual {
            self.check_prefetch_residual(shape)?;
        }
        if self.swap_ab {
            self.check_swap_ab()?;
        }
        if self.warp_specialized {
            self.check_warp_specialized(shape)?;
        }
        if self.pingpong && !(self.warp_specialized && matches!(self.block_m, 64 | 128)) {
            return Err(
                "pingpong needs warp_specialized and block_m 64 or 128 (a tile per warpgroup)"
                    .into(),
            );
        }
        mma_grid(shape, self.block_m, self.block_n, self.split_k).map(|_| ())
    }

    /// `min_blocks > 1` must raise the occupancy the registers would
    /// otherwise allow, leave room in shared memory for that many CTAs,
    /// and not cap registers far below the estimate (which runs above
    /// ptxas's count: 78–80 against 100 for 128×64 tiles; the tuner prunes
    /// the configs ptxas still spills on).
    fn check_min_blocks(&self, regs: usize, smem_bytes: usize) -> Result<(), String> {
        if !MIN_BLOCKS.contains(&self.min_blocks) {
            return Err(format!("min_blocks must be one of {MIN_BLOCKS:?}"));
        }
        let Some(cap) = self.min_blocks_cap() else {
            return Ok(());
        };
        let by_regs = 65536 / (self.threads() * regs.div_ceil(8) * 8);
        if by_regs >= self.min_blocks as usize {
            return Err(format!(
                "min_blocks {} changes nothing: about {regs} registers already allow {by_regs} CTAs",
                self.min_blocks
            ));
        }
        let per_cta = smem_bytes + 1024;
        if per_cta * self.min_blocks as usize > 228 * 1024 {
            return Err(format!(
                "min_blocks {}: {per_cta} B of shared memory per CTA do not fit that many",
                self.min_blocks
            ));
        }
        // The wgmma's accumulators are live across the whole k loop: below
        // them plus descriptors and addresses ptxas cannot compile it at
        // all ("insufficient registers", m192n128 at a cap of 80).
        if cap < self.accumulators() + 32 {
            return Err(format!(
                "min_blocks {} caps registers at {cap}, below the {} accumulators' needs",
                self.min_blocks,
                self.accumulators()
            ));
        }
        if regs * 4 > cap * 7 {
            return Err(format!(
                "min_blocks {} caps registers at {cap}, far below the about {regs} needed",
                self.min_blocks
            ));
        }
        Ok(())
    }

    /// A swapped tile has whole warpgroups of 64 output channels and
    /// transposes its accumulators through the staged epilogue; it reduces
    /// split-K slices through the global workspace and loads its residual
    /// there.
    fn check_swap_ab(&self) -> Result<(), String> {
        if self.block_n % 64 != 0 {
            return Err(
                "swap_ab needs block_n a multiple of 64 (64 channels per warpgroup)".into(),
            );
        }
        if self.epilogue != MmaEpilogue::Staged || !self.split_reduce.is_global() {
            return Err(
                "swap_ab needs the staged epilogue and the global split-K reduction".into(),
            );
        }
        if self.prefetch_residual {
            return Err("swap_ab does not prefetch the residual".into());
        }
        Ok(())
    }

    /// A warp-specialized tile has one or two consumer warpgroups (with
    /// the producer, up to 384 threads, which leaves ptxas 168 registers a
    /// thread), its whole k range (split 1), the direct epilogue (the ring
    /// stays in use across tiles), at least 3 stages, and no other variant.
    fn check_warp_specialized(&self, shape: &ConvShape) -> Result<(), String> {
        if !matches!(self.block_m, 64 | 128) {
            return Err(
                "warp_specialized needs block_m 64 or 128 (one or two consumer warpgroups)".into(),
            );
        }
        if self.split_k != 1 || self.epilogue != MmaEpilogue::Direct {
            return Err("warp_specialized needs split_k = 1 and the direct epilogue".into());
        }
        if self.stages < 3 {
            return Err(
                "warp_specialized needs at least 3 stages (one multiplied, one released, one filling)"
                    .into(),
            );
        }
        if self.swap_ab || self.prefetch_residual || self.early_trigger || self.min_blocks != 1 {
            return Err(
                "warp_specialized takes no swapped operands, residual prefetch, early trigger or min_blocks".into(),
            );
        }
        if shape.pool {
            return Err("warp_specialized does not pool (a pooled epilogue is staged)".into());
        }
        Ok(())
    }

    /// The residual tile can be prefetched when the staged epilogue
    /// finishes it whole, in 16-byte chunks of 16-bit outputs, without
    /// split-K (whose slices would each copy it for one to use).
    fn check_prefetch_residual(&self, shape: &ConvShape) -> Result<(), String> {
        let Some(res) = shape.residual else {
            return Err("prefetch_residual needs a residual input".into());
        };
        if self.epilogue != MmaEpilogue::Staged || self.split_k != 1 {
            return Err("prefetch_residual needs the staged epilogue and split_k = 1".into());
        }
        if res.size() != 2 || shape.out_dtype.size() != 2 || shape.gemm_n() % 8 != 0 {
            return Err(
                "prefetch_residual needs 16-bit residual and output, N a multiple of 8".into(),
            );
        }
        Ok(())
    }

    /// Every block_m (1..4 warpgroups) × block_n × 2..6 stages × split-K ×
    /// epilogue × min_blocks × residual prefetch × swapped operands (for N
    /// ≤ [`SWAP_MAX_N`]) that validates.
    pub fn search_space(shape: &ConvShape) -> Vec<Self> {
        let mut out = Vec::new();
        let prefetch: &[bool] = if shape.residual.is_some() {
            &[false, true]
        } else {
            &[false]
        };
        // Swapped operands only where N is narrow (ResNet's 64- and 128-channel
        // layers): elsewhere the unswapped tiles already run wide
        // instructions, and the larger space cost the simulated tuner search
        // quality (`four_times_the_budget_buys_only_a_few_percent`: 3.65%
        // with swapped configs on every task).
        let swaps: &[bool] = if shape.gemm_n() <= SWAP_MAX_N {
            &[false, true]
        } else {
            &[false]
        };
        for block_m in [64, 128, 192, 256] {
            for block_n in BLOCK_NS {
                for stages in 2..=6 {
                    for (split_k, epilogue, split_reduce) in split_and_epilogue() {
                        for min_blocks in MIN_BLOCKS {
                            for &prefetch_residual in prefetch {
                                for &swap_ab in swaps {
                                    let c = WgmmaConfig {
                                        block_m,
                                        block_n,
                                        stages,
                                        split_k,
                                        epilogue,
                                        split_reduce,
                                        min_blocks,
                                        prefetch_residual,
                                        swap_ab,
                                        early_trigger: false,
                                        warp_specialized: false,
                                        pingpong: false,
                                    };
                                    if !c.redundant_stages(shape) && c.validate(shape).is_ok() {
                                        out.push(c);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        out.extend(Self::warp_specialized_space(shape));
        out
    }

    /// A warp-specialized `block_m × block_n` tile with `stages` stages,
    /// ping-pong or not, and the only settings that form takes (split 1,
    /// the direct epilogue, nothing else on).
    pub fn warp_specialized_tile(block_m: u32, block_n: u32, stages: u32, pingpong: bool) -> Self {
        WgmmaConfig {
            block_m,
            block_n,
            stages,
            split_k: 1,
            epilogue: MmaEpilogue::Direct,
            split_reduce: SplitReduce::Global,
            min_blocks: 1,
            prefetch_residual: false,
            swap_ab: false,
            early_trigger: false,
            warp_specialized: true,
            pingpong,
        }
    }

    /// The warp-specialized configs of a GEMM of at least [`WS_MIN_TILES`]
    /// 128×256 tiles' worth of work: 64 or 128 rows, split over consumer
    /// warpgroups or ping-pong, × every `block_n` ≥ 64 × 3..=6 stages that
    /// validate.
    fn warp_specialized_space(shape: &ConvShape) -> Vec<Self> {
        if shape.gemm_m().div_ceil(128) * shape.gemm_n().div_ceil(256) < WS_MIN_TILES {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (block_m, pingpong) in [(64, false), (64, true), (128, false), (128, true)] {
            for block_n in BLOCK_NS.into_iter().filter(|&n| n >= 64) {
                for stages in 3..=6 {
                    let c = Self::warp_specialized_tile(block_m, block_n, stages, pingpong);
                    if c.validate(shape).is_ok() {
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    /// A CTA with a single k tile fills one stage whatever `stages` says
    /// (see [`Self::allocated_stages`]), and its loop has nothing to
    /// overlap: 2 to 6 stages render the same kernel up to the prologue's
    /// empty cp.async groups (measured within 3.1% of one another at batch
    /// 256, session 5). The search spaces keep only 3 stages of those —
    /// the smallest count the heuristic default considers.
    fn redundant_stages(&self, shape: &ConvShape) -> bool {
        let k_tiles = shape.gemm_k().div_ceil(BLOCK_K as usize);
        k_tiles.div_ceil(self.split_k.max(1) as usize) == 1 && self.stages != 3
    }

    /// Whether the heuristic default considers this config: at least 3
    /// stages. With 2 each k tile waits for its wgmmas before the next
    /// barrier and only one tile of copies overlaps that wait: 2 stages ran
    /// 5–20% slower than 3 on the H200's batch-256 layers, which the model
    /// below does not see. Not the cluster split-K reduction: on the
    /// H200 at batch 1 it ran 0.4–0.6 µs faster than the global one on
    /// some layer-3/4 convs and up to 1.3 µs slower on others (session 5,
    /// one config forced on every layer), so only the tuner picks it. Nor
    /// a register cap from `min_blocks`, whose
    /// spills only ptxas's report (which the tuner reads) shows, nor a
    /// prefetched residual: on the H200 at batch 256 it made the layer-1
    /// expand convs 3% faster alone and 22% faster with `min_blocks` 4,
    /// but 128×128 tiles 12–20% slower (session 5), which the model does
    /// not see.
    pub fn default_candidate(&self) -> bool {
        self.stages >= 3
            && self.split_reduce.is_global()
            && self.min_blocks == 1
            && !self.prefetch_residual
            && !self.swap_ab
            && !self.warp_specialized
    }

    /// `wgmma_m128n256p4s1`, then `c` for the cluster split-K reduction (`rs`: reduce-scatter),
    /// `d` for the direct epilogue, `r` for the prefetched residual,
    /// `b3` for `min_blocks` 3, `x` for swapped operands, `t` for the
    /// early trigger, `w` for warp-specialized and `wp` for ping-pong.
    pub fn tag(&self) -> String {
        format!(
            "wgmma_m{}n{}p{}s{}{}{}{}{}{}{}{}{}",
            self.block_m,
            self.block_n,
            self.stages,
            self.split_k,
            self.split_reduce.tag(),
            match self.epilogue {
                MmaEpilogue::Staged => "",
                MmaEpilogue::Direct => "d",
            },
            if self.prefetch_residual { "r" } else { "" },
            if self.min_blocks > 1 {
                format!("b{}", self.min_blocks)
            } else {
                String::new()
            },
            if self.swap_ab { "x" } else { "" },
            if self.early_trigger { "t" } else { "" },
            if self.warp_specialized { "w" } else { "" },
            if self.pingpong { "p" } else { "" }
        )
    }

    /// A warp-specialized grid is persistent: one CTA per tile up to
    /// [`PERSISTENT_CTAS`].
    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        let mut grid =
            mma_grid(shape, self.block_m, self.block_n, self.split_k).unwrap_or([1, 1, 1]);
        if self.warp_specialized {
            grid[0] = grid[0].min(PERSISTENT_CTAS as u32);
        }
        Geometry {
            grid,
            block: [self.threads() as u32, 1, 1],
            smem_bytes: self.smem_bytes(shape) as u32,
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
    /// Warp-specialized: every stage but the one being multiplied.
    pub fn tiles_in_flight(&self) -> usize {
        if self.warp_specialized {
            return self.stages as usize - 1;
        }
        if self.stages >= 4 {
            self.stages as usize - 2
        } else {
            self.stages as usize - 1
        }
    }

    pub fn model(&self, shape: &ConvShape) -> TileModel {
        let n = f64::from(self.instruction_n());
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
            smem_bytes: self.smem_bytes(shape),
            regs_per_thread: self
                .min_blocks_cap()
                .map_or(self.regs_estimate(shape), |cap| {
                    cap.min(self.regs_estimate(shape))
                }),
            split_k: self.split_k as usize,
            split_in_cluster: self.split_reduce.is_cluster(),
            split_spread: self.split_reduce == SplitReduce::Spread,
            tiles_in_flight: self.tiles_in_flight(),
            peak: cost_model::WGMMA_MACS_PER_NS,
            // With 3 stages (each k tile waits for its wgmmas before the next
            // barrier) 128×128 tiles reached 52% of the measured peak on
            // ResNet-50's 3×3 layers at batch 256.
            // Warp-specialized: no barrier per k tile and the fill hidden
            // behind the previous tile; ping-pong also hides the epilogue
            // (guesses until measured; the 64-row ping-pong tiles still
            // rank low on ViT b64's layers for their operand traffic, so
            // `bench/probes/ws_gemm_probe.sh` forces them).
            inner_efficiency: match (self.warp_specialized, self.pingpong) {
                (true, true) => 0.72,
                (true, false) => 0.65,
                _ => 0.55,
            } * (mma_clocks / smem_clocks).min(1.0),
            saturating_warps: 8.0,
            element_bytes: 2,
            gather_penalty: if MmaConfig::a_vectorized(shape) {
                1.0
            } else {
                2.0
            },
            out_bytes: shape.out_dtype.size(),
            res_bytes: shape.residual.map_or(0, |d| d.size()),
            res_after_loop: shape.residual.is_some() && !self.prefetch_residual,
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
            residual_offset: self.prefetch_residual.then(|| self.residual_offset(shape)),
            spread_offset: self.spread_offset(shape),
            early_trigger: self.early_trigger,
        }
        .render(p, shape);
        p.boolean("SWAP_AB", self.swap_ab)
            .boolean("PINGPONG", self.pingpong);
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
            min_blocks: 1,
            prefetch_residual: false,
            swap_ab: false,
            early_trigger: false,
            warp_specialized: false,
            pingpong: false,
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
    fn a_spread_tile_keeps_its_region_past_the_stages_and_ends_in_the_direct_epilogue() {
        // ResNet-50's stage-4 first expand at batch 1 as tuned: 64×32, split 3.
        let shape = conv(1, 512, 7, 2048, 1, 1, DType::F16);
        let spread = WgmmaConfig {
            block_m: 64,
            block_n: 32,
            stages: 5,
            split_k: 3,
            epilogue: MmaEpilogue::Direct,
            split_reduce: SplitReduce::Spread,
            ..base()
        };
        assert!(
            spread.validate(&shape).is_ok(),
            "{:?}",
            spread.validate(&shape)
        );
        assert_eq!(spread.tag(), "wgmma_m64n32p5s3rsd");
        // 8 pairs a thread over 3 ranks: 3 slots each, a float2 per thread.
        let pipeline = spread.pipeline_bytes(&shape);
        assert_eq!(spread.smem_bytes(&shape), pipeline + 3 * 3 * 128 * 8 + 1024);
        let mut p = Params::new("P");
        spread.render(&mut p, &shape);
        assert!(p.render().contains(&format!("SPREAD_OFFSET = {pipeline};")));
        let staged = WgmmaConfig {
            epilogue: MmaEpilogue::Staged,
            ..spread
        };
        assert!(staged
            .validate(&shape)
            .unwrap_err()
            .contains("direct epilogue"));
    }

    #[test]
    fn smem_holds_the_stages_or_the_staged_tile_plus_alignment() {
        // 4 stages × (128 + 128) rows × 128 B = 128 KiB; staging 128 × 136
        // floats = 68 KiB.
        let shape = conv(8, 64, 56, 64, 3, 1, DType::F16);
        assert_eq!(base().smem_bytes(&shape), 4 * 256 * 128 + 1024);
        let two = WgmmaConfig {
            stages: 2,
            block_n: 256,
            ..base()
        };
        // 2 × 384 × 128 = 96 KiB < 128 × 264 × 4 = 132 KiB of staging.
        assert_eq!(two.smem_bytes(&shape), 128 * 264 * 4 + 1024);
        // A 1×1 conv over 64 channels has one k tile: one stage is
        // allocated however many the config has, and staging dominates.
        let one_tile = conv(256, 64, 56, 256, 1, 1, DType::F16);
        assert_eq!(base().allocated_stages(&one_tile), 1);
        assert_eq!(base().smem_bytes(&one_tile), 128 * 136 * 4 + 1024);
        let split = WgmmaConfig {
            split_k: 3,
            ..base()
        };
        // 36 k tiles of a 3×3 over 256 channels, 12 per slice.
        let deep = conv(1, 256, 14, 256, 3, 1, DType::F16);
        assert_eq!(split.allocated_stages(&deep), 4);
        let shallow = conv(1, 64, 56, 64, 3, 1, DType::F16);
        assert_eq!(split.allocated_stages(&shallow), 3);
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

    /// ResNet-50's layer-1 expand conv at batch 256: 1×1, 64 → 256
    /// channels, one k tile, the block's residual added.
    fn expand_with_residual() -> ConvShape {
        ConvShape {
            residual: Some(DType::F16),
            ..conv(256, 64, 56, 256, 1, 1, DType::F16)
        }
    }

    fn prefetching() -> WgmmaConfig {
        WgmmaConfig {
            block_n: 64,
            stages: 2,
            prefetch_residual: true,
            ..base()
        }
    }

    #[test]
    fn a_prefetched_residual_tile_sits_past_the_shared_buffers() {
        let shape = expand_with_residual();
        let c = prefetching();
        assert!(c.validate(&shape).is_ok(), "{:?}", c.validate(&shape));
        // One k tile: one stage of (128 + 64) × 128 B = 24 KiB, less than
        // the 128 × 72 floats of staging, then 128 × 64 halves.
        assert_eq!(c.residual_offset(&shape), 128 * 72 * 4);
        assert_eq!(c.smem_bytes(&shape), 128 * 72 * 4 + 128 * 64 * 2 + 1024);
        let mut p = Params::new("k_p");
        c.render(&mut p, &shape);
        let text = p.render();
        assert!(text.contains("RES_PREFETCH = true"), "{text}");
        assert!(
            text.contains(&format!("RES_OFFSET = {}", 128 * 72 * 4)),
            "{text}"
        );
        assert_eq!(c.tag(), "wgmma_m128n64p2s1r");
    }

    #[test]
    fn prefetching_the_residual_needs_one_staged_pass_of_16_bit_chunks() {
        let shape = expand_with_residual();
        let no_res = conv(256, 64, 56, 256, 1, 1, DType::F16);
        assert!(prefetching()
            .validate(&no_res)
            .unwrap_err()
            .contains("residual"));
        let direct = WgmmaConfig {
            epilogue: MmaEpilogue::Direct,
            ..prefetching()
        };
        assert!(direct.validate(&shape).unwrap_err().contains("staged"));
        let long = ConvShape {
            residual: Some(DType::F16),
            ..conv(8, 256, 14, 256, 3, 1, DType::F16)
        };
        let split = WgmmaConfig {
            split_k: 2,
            ..prefetching()
        };
        assert!(split.validate(&long).unwrap_err().contains("split_k = 1"));
        let f32_res = ConvShape {
            residual: Some(DType::F32),
            ..shape
        };
        assert!(prefetching()
            .validate(&f32_res)
            .unwrap_err()
            .contains("16-bit"));
        // The space offers it only where there is a residual.
        assert!(WgmmaConfig::search_space(&shape)
            .iter()
            .any(|c| c.prefetch_residual));
        assert!(!WgmmaConfig::search_space(&no_res)
            .iter()
            .any(|c| c.prefetch_residual));
    }

    #[test]
    fn the_cost_model_charges_a_residual_loaded_after_the_loop_one_latency() {
        let shape = expand_with_residual();
        let plain = WgmmaConfig {
            prefetch_residual: false,
            ..prefetching()
        };
        let (m, n, k) = (shape.gemm_m(), shape.gemm_n(), shape.gemm_k());
        let after = cost_model::estimate_ns(m, n, k, &plain.model(&shape));
        let before = cost_model::estimate_ns(m, n, k, &prefetching().model(&shape));
        assert!(before < after, "{before} vs {after}");
        assert!(plain.model(&shape).res_after_loop && !prefetching().model(&shape).res_after_loop);
    }

    #[test]
    fn min_blocks_must_raise_occupancy_within_shared_memory_and_registers() {
        let shape = expand_with_residual();
        let with = |min_blocks, block_n, stages| WgmmaConfig {
            min_blocks,
            block_n,
            stages,
            ..base()
        };
        // 128 × 64 tiles: about 100 registers (2 CTAs of 256 threads); 3
        // caps them at 80, 4 at 64; 5 is not offered.
        assert!(with(3, 64, 2).validate(&shape).is_ok());
        assert!(with(4, 64, 2).validate(&shape).is_ok());
        assert!(with(5, 64, 2)
            .validate(&shape)
            .unwrap_err()
            .contains("min_blocks"));
        assert!(with(2, 64, 2)
            .validate(&shape)
            .unwrap_err()
            .contains("changes nothing"));
        // 128 × 256 × 4 stages: 193 KiB of shared memory fit one CTA only.
        assert!(with(2, 256, 4)
            .validate(&shape)
            .unwrap_err()
            .contains("shared memory"));
        // The model sees the capped registers, so the occupancy it buys.
        let capped = with(4, 64, 2).model(&shape);
        assert_eq!(capped.regs_per_thread, 64);
        assert_eq!(cost_model::resident_ctas(&capped), 4);
        assert_eq!(with(4, 64, 2).tag(), "wgmma_m128n64p2s1b4");
        assert!(!with(4, 64, 3).default_candidate());
    }

    #[test]
    fn single_k_tile_spaces_keep_one_stage_count() {
        // 1×1 over 64 channels: one k tile, so only 3 stages are offered
        // (2..=6 would be the same kernel); 3×3 over 64 keeps them all.
        let one_tile = expand_with_residual();
        // (A warp-specialized ring cycles across tiles: its depth matters.)
        let stages: std::collections::BTreeSet<u32> = WgmmaConfig::search_space(&one_tile)
            .iter()
            .filter(|c| !c.warp_specialized)
            .map(|c| c.stages)
            .collect();
        assert_eq!(stages.into_iter().collect::<Vec<_>>(), [3]);
        let nine_tiles = conv(256, 64, 56, 64, 3, 1, DType::F16);
        let stages: std::collections::BTreeSet<u32> = WgmmaConfig::search_space(&nine_tiles)
            .iter()
            .filter(|c| c.split_k == 1)
            .map(|c| c.stages)
            .collect();
        assert_eq!(stages.into_iter().collect::<Vec<_>>(), [2, 3, 4, 5, 6]);
        // Validity itself does not change: a logged 5-stage config still builds.
        let five = WgmmaConfig {
            stages: 5,
            block_n: 64,
            ..base()
        };
        assert!(five.validate(&one_tile).is_ok());
    }

    #[test]
    fn records_from_before_min_blocks_and_prefetch_still_parse() {
        let old = r#"{"block_m":128,"block_n":64,"stages":2,"split_k":1,"epilogue":"staged"}"#;
        let c: WgmmaConfig = serde_json::from_str(old).unwrap();
        assert_eq!(c.min_blocks, 1);
        assert!(!c.prefetch_residual);
        // and the defaults stay out of the JSON, so old records compare equal.
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"block_m":128,"block_n":64,"stages":2,"split_k":1,"epilogue":"staged"}"#
        );
    }

    #[test]
    fn swapped_tiles_put_the_pixels_on_the_instructions_n() {
        // Layer 1's 3×3 at batch 256: N = 64 output channels.
        let shape = conv(256, 64, 56, 64, 3, 1, DType::F16);
        // 192 pixels for one warpgroup (256 would need about 264 registers:
        // 16 A chunks per thread and 128 accumulators).
        let swapped = WgmmaConfig {
            block_m: 192,
            block_n: 64,
            stages: 3,
            swap_ab: true,
            ..base()
        };
        assert_eq!(swapped.validate(&shape), Ok(()));
        assert_eq!((swapped.warpgroups(), swapped.instruction_n()), (1, 192));
        assert_eq!(swapped.tag(), "wgmma_m192n64p3s1x");
        assert!(!swapped.default_candidate());
        let json = serde_json::to_string(&swapped).unwrap();
        assert!(json.contains("\"swap_ab\":true"), "{json}");
        assert_eq!(serde_json::from_str::<WgmmaConfig>(&json).unwrap(), swapped);
        assert!(!serde_json::to_string(&base()).unwrap().contains("swap_ab"));
        let space = WgmmaConfig::search_space(&shape);
        assert!(space.contains(&swapped), "the tuner's space holds it");
        assert!(space
            .iter()
            .filter(|c| c.swap_ab)
            .all(|c| c.block_n % 64 == 0
                && c.epilogue == MmaEpilogue::Staged
                && c.split_reduce.is_global()
                && !c.prefetch_residual));
        let thin = WgmmaConfig {
            block_n: 32,
            ..swapped
        };
        assert!(thin
            .validate(&shape)
            .unwrap_err()
            .contains("multiple of 64"));
        let direct = WgmmaConfig {
            epilogue: MmaEpilogue::Direct,
            ..swapped
        };
        assert!(direct
            .validate(&shape)
            .unwrap_err()
            .contains("staged epilogue"));
    }

    /// ViT-B/16's qkv Dense at batch 64: 12608 × 2304 × 768.
    fn vit_qkv() -> ConvShape {
        conv(12608, 768, 1, 2304, 1, 1, DType::F16)
    }

    fn ws() -> WgmmaConfig {
        WgmmaConfig {
            block_n: 256,
            epilogue: MmaEpilogue::Direct,
            warp_specialized: true,
            ..base()
        }
    }

    #[test]
    fn a_warp_specialized_tile_adds_a_producer_and_a_persistent_grid() {
        let shape = vit_qkv();
        let c = ws();
        assert_eq!(c.validate(&shape), Ok(()));
        assert_eq!((c.warpgroups(), c.threads()), (2, 384));
        assert_eq!(c.tag(), "wgmma_m128n256p4s1dw");
        // 99 × 9 tiles on at most 132 CTAs.
        let g = c.geometry(&shape);
        assert_eq!(g.grid, [PERSISTENT_CTAS as u32, 1, 1]);
        assert_eq!(g.block, [384, 1, 1]);
        // Every stage of the ring plus two mbarriers each, and the slack.
        assert_eq!(
            c.smem_bytes(&shape),
            4 * (128 + 256) * 128 + 4 * 16 + ALIGN_SLACK
        );
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.ends_with(r#""warp_specialized":true}"#), "{json}");
        assert_eq!(serde_json::from_str::<WgmmaConfig>(&json).unwrap(), c);
        assert!(!serde_json::to_string(&base())
            .unwrap()
            .contains("warp_specialized"));
        assert!(!c.default_candidate());
        // A small GEMM's grid is one CTA per tile.
        let small = conv(197, 768, 1, 768, 1, 1, DType::F16);
        assert_eq!(c.geometry(&small).grid, [2 * 3, 1, 1]);
    }

    #[test]
    fn warp_specialized_rules_say_why() {
        let shape = vit_qkv();
        let with = |edit: fn(&mut WgmmaConfig)| {
            let mut c = ws();
            edit(&mut c);
            c.validate(&shape).unwrap_err()
        };
        assert!(with(|c| {
            c.block_m = 192;
            c.block_n = 64;
        })
        .contains("block_m 64 or 128"));
        assert!(with(|c| c.split_k = 2).contains("split_k = 1"));
        assert!(with(|c| c.epilogue = MmaEpilogue::Staged).contains("direct epilogue"));
        assert!(with(|c| c.stages = 2).contains("at least 3 stages"));
        assert!(with(|c| c.early_trigger = true).contains("early trigger"));
        // 5 stages of 128 × 256 do not fit.
        assert!(with(|c| c.stages = 5).contains("shared memory"));
    }

    #[test]
    fn ping_pong_tiles_are_64_rows_for_each_of_two_consumers() {
        let shape = vit_qkv();
        let pp = WgmmaConfig {
            block_m: 64,
            pingpong: true,
            ..ws()
        };
        assert_eq!(pp.validate(&shape), Ok(()));
        assert_eq!((pp.consumer_warpgroups(), pp.threads()), (2, 384));
        assert_eq!(pp.tag(), "wgmma_m64n256p4s1dwp");
        // 197 × 9 tiles of 64 × 256 on 132 CTAs; the hand-off barrier.
        assert_eq!(pp.geometry(&shape).grid, [132, 1, 1]);
        assert_eq!(
            pp.smem_bytes(&shape),
            4 * (64 + 256) * 128 + 4 * 16 + 8 + ALIGN_SLACK
        );
        let mut p = Params::new("P");
        pp.render(&mut p, &shape);
        assert!(p.render().contains("PINGPONG = true;"));
        // 128-row tiles: two m64 blocks a warpgroup, 2 × 64 accumulators
        // at n128; 2 × 128 at n256 are too many for 384 threads.
        let tall = WgmmaConfig {
            block_m: 128,
            block_n: 128,
            ..pp
        };
        assert_eq!(tall.validate(&shape), Ok(()));
        assert_eq!(tall.tag(), "wgmma_m128n128p4s1dwp");
        assert!(WgmmaConfig::search_space(&shape).contains(&tall));
        let wide = WgmmaConfig { block_m: 128, ..pp };
        assert!(wide.validate(&shape).unwrap_err().contains("registers"));
        let huge = WgmmaConfig {
            block_m: 192,
            block_n: 64,
            ..pp
        };
        assert!(huge.validate(&shape).unwrap_err().contains("64 or 128"));
        let plain = WgmmaConfig {
            warp_specialized: false,
            epilogue: MmaEpilogue::Staged,
            ..pp
        };
        assert!(plain
            .validate(&shape)
            .unwrap_err()
            .contains("warp_specialized"));
        assert!(WgmmaConfig::search_space(&shape).contains(&pp));
    }

    #[test]
    fn only_large_gemms_search_warp_specialized_tiles() {
        let large = WgmmaConfig::search_space(&vit_qkv());
        let specialized: Vec<_> = large.iter().filter(|c| c.warp_specialized).collect();
        assert!(specialized.len() >= 12, "{}", specialized.len());
        assert!(specialized.iter().all(|c| c.split_k == 1
            && c.epilogue == MmaEpilogue::Direct
            && c.block_n >= 64
            && c.stages >= 3));
        assert!(specialized.contains(&&ws()));
        // ViT-B/16 at batch 1 (197 rows) keeps the plain space.
        let b1 = conv(197, 768, 1, 2304, 1, 1, DType::F16);
        assert!(WgmmaConfig::search_space(&b1)
            .iter()
            .all(|c| !c.warp_specialized));
    }

    #[test]
    fn tags_and_records_round_trip() {
        let c = base();
        assert_eq!(c.tag(), "wgmma_m128n128p4s1");
        let back: WgmmaConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn the_early_trigger_is_named_rendered_and_absent_from_the_json_when_off() {
        let shape = conv(1, 512, 7, 512, 3, 1, DType::F16);
        let off = base();
        let on = WgmmaConfig {
            early_trigger: true,
            ..off
        };
        assert!(!serde_json::to_string(&off)
            .unwrap()
            .contains("early_trigger"));
        let json = serde_json::to_string(&on).unwrap();
        assert!(json.ends_with(r#","early_trigger":true}"#), "{json}");
        assert_eq!(serde_json::from_str::<WgmmaConfig>(&json).unwrap(), on);
        assert_eq!(on.tag(), format!("{}t", off.tag()));
        let render = |c: &WgmmaConfig| {
            let mut p = Params::new("P");
            c.render(&mut p, &shape);
            p.render()
        };
        assert!(render(&on).contains("static constexpr bool EARLY_TRIGGER = true;"));
        assert!(render(&off).contains("static constexpr bool EARLY_TRIGGER = false;"));
        // The tuner's spaces leave it to `refine`: alone it changes nothing.
        assert!(WgmmaConfig::search_space(&shape)
            .iter()
            .all(|c| !c.early_trigger));
        assert!(on.validate(&shape).is_ok());
    }
}

//! The tensor-core template's config ([`MmaConfig`], `conv_mma.cu`): which
//! operands it takes ([`MmaOperands`]: f16/bf16 with mma.sync m16n8k16, f32
//! data as tf32 with m16n8k8), its validity rules, search space, launch
//! geometry, shared memory (swizzled pipeline stages, reused by the staged
//! epilogue), split-K workspace and cost-model view.

use super::conv_shape::{
    check_split, is_false, register_cap, split_workspace, ConvShape, MmaOperands, MAX_SMEM_BYTES,
    SPLITS,
};
use super::cost_model::TileModel;
use super::source::{Geometry, Params, Workspace};

use serde::{Deserialize, Serialize};

/// How the split-K slices of a tile are summed (see common.cuh).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitReduce {
    /// Every slice writes its partial tile to a global workspace; the CTA
    /// that arrives last at the tile's counter reads them back and finishes.
    #[default]
    Global,
    /// The slices of a tile form a thread-block cluster (at most
    /// [`MAX_CLUSTER`]) and rank 0 sums them through distributed shared
    /// memory: no workspace, no counter, no round trip through L2.
    Cluster,
    /// The slices of a tile form a cluster and reduce-scatter: every rank
    /// pushes each share of its slice into the shared memory of the rank
    /// that owns it, one cluster barrier, and each rank sums and finishes
    /// its own share (`cluster_spread_reduce`, common.cuh). Direct epilogue
    /// only.
    Spread,
}

impl SplitReduce {
    /// Configs that reduce through global memory leave the field out of
    /// their JSON, so records written before it existed read the same.
    pub fn is_global(&self) -> bool {
        *self == SplitReduce::Global
    }

    /// The slices of a tile form a thread-block cluster.
    pub fn is_cluster(self) -> bool {
        matches!(self, SplitReduce::Cluster | SplitReduce::Spread)
    }

    /// Whether a config with `split_k` slices may reduce this way.
    pub(super) fn check(self, split_k: u32) -> Result<(), String> {
        match self {
            SplitReduce::Cluster | SplitReduce::Spread if !(2..=MAX_CLUSTER).contains(&split_k) => {
                Err(format!(
                    "split_reduce {} needs split_k in 2..={MAX_CLUSTER} (a portable cluster), \
                     got {split_k}",
                    self.name()
                ))
            }
            _ => Ok(()),
        }
    }

    /// The name the JSON gives it.
    pub fn name(self) -> &'static str {
        match self {
            SplitReduce::Global => "global",
            SplitReduce::Cluster => "cluster",
            SplitReduce::Spread => "spread",
        }
    }

    /// Shared memory the cluster reduction stages: one f32 per output of
    /// the `bm × bn` tile (the spread reduction's region comes on top of
    /// everything else: [`MmaConfig::smem_bytes`]).
    pub(super) fn smem_bytes(self, split_k: u32, bm: u32, bn: u32) -> usize {
        match self {
            SplitReduce::Cluster if split_k > 1 => (bm * bn) as usize * 4,
            _ => 0,
        }
    }

    /// The spread reduction's region (`cluster_spread_reduce`, common.cuh):
    /// a float2 slot per thread for each accumulator pair a rank owns at
    /// most (`pairs` a thread, pair p on rank p % split_k), for each of the
    /// `split_k` ranks. 0 for the other reductions.
    pub(super) fn spread_region_bytes(self, split_k: u32, pairs: usize, threads: usize) -> usize {
        if self != SplitReduce::Spread || split_k < 2 {
            return 0;
        }
        let split = split_k as usize;
        split * pairs.div_ceil(split) * threads * 8
    }

    /// The global workspace a `bm × bn` tile's `split_k` slices need (none
    /// inside a cluster).
    pub(super) fn workspace(self, shape: &ConvShape, bm: u32, bn: u32, split_k: u32) -> Workspace {
        match self {
            SplitReduce::Global => split_workspace(shape, bm, bn, split_k),
            SplitReduce::Cluster | SplitReduce::Spread => Workspace::default(),
        }
    }

    /// Suffix of a kernel tag: `c` for the cluster reduction, `rs` for the
    /// reduce-scatter.
    pub(super) fn tag(self) -> &'static str {
        match self {
            SplitReduce::Global => "",
            SplitReduce::Cluster => "c",
            SplitReduce::Spread => "rs",
        }
    }

    /// The ways a config with `split_k` slices can reduce.
    pub(super) fn choices(split_k: u32) -> &'static [SplitReduce] {
        if (2..=MAX_CLUSTER).contains(&split_k) {
            &[
                SplitReduce::Global,
                SplitReduce::Cluster,
                SplitReduce::Spread,
            ]
        } else {
            &[SplitReduce::Global]
        }
    }
}

/// The largest portable thread-block cluster.
pub const MAX_CLUSTER: u32 = 8;

/// Every split-K factor with each epilogue and each reduction it allows:
/// the inner loops of both tensor-core templates' search spaces.
pub(super) fn split_and_epilogue() -> impl Iterator<Item = (u32, MmaEpilogue, SplitReduce)> {
    SPLITS.into_iter().flat_map(|split_k| {
        [MmaEpilogue::Staged, MmaEpilogue::Direct]
            .into_iter()
            .flat_map(move |epilogue| {
                SplitReduce::choices(split_k)
                    .iter()
                    .map(move |&reduce| (split_k, epilogue, reduce))
            })
    })
}

/// How the tensor-core template writes its output tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MmaEpilogue {
    /// Accumulators through shared memory, then 16-byte stores (and 16-byte
    /// residual loads) with consecutive threads on consecutive chunks of a
    /// row: whole 32-byte sectors. Costs the shared-memory round trip and
    /// two barriers per pass.
    #[default]
    Staged,
    /// Each thread stores its mma fragments: two values per row, so 16-bit
    /// outputs fill half of each sector a warp store touches.
    Direct,
}

/// Tiles of the tensor-core template: CTA tile `block_m × block_n`, k step
/// `block_k` elements, `warps_m × warps_n` warps, a `stages`-deep cp.async
/// pipeline, `split_k` slices of the k tiles, and the epilogue. Records
/// written before `epilogue` existed read as [`MmaEpilogue::Staged`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MmaConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    pub stages: u32,
    pub split_k: u32,
    #[serde(default)]
    pub epilogue: MmaEpilogue,
    #[serde(default, skip_serializing_if = "SplitReduce::is_global")]
    pub split_reduce: SplitReduce,
    /// Under a programmatic dependent launch, let the next kernel's CTAs
    /// start right after the grid dependency wait instead of after the k
    /// loop (`launch_dependents`, common.cuh): they then read their first
    /// weight tiles while this kernel computes, but take SM slots it could
    /// use. Neutral when timed alone, so the tuner's spaces leave it off and
    /// `aotune refine --candidates trigger` decides it in the model's graph.
    /// Absent from the JSON when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub early_trigger: bool,
}

/// Floats of padding per staged epilogue row: rows of `BN + 8` floats put
/// the four rows of a half-warp's 8-byte stores on distinct banks.
const EPILOGUE_PAD: usize = 8;

impl MmaConfig {
    pub fn threads(&self) -> usize {
        32 * (self.warps_m * self.warps_n) as usize
    }

    fn operands(shape: &ConvShape) -> MmaOperands {
        // Only reached for shapes `validate` accepted, or for rendering the
        // cost of one; f16 is a harmless stand-in for the others.
        MmaOperands::of(shape).unwrap_or(MmaOperands::F16)
    }

    /// Bytes of one shared tile row: `block_k` elements.
    fn row_bytes(&self, shape: &ConvShape) -> usize {
        self.block_k as usize * Self::operands(shape).element_bytes()
    }

    /// `stages` buffers of `block_m + block_n` swizzled rows (no padding).
    pub fn pipeline_bytes(&self, shape: &ConvShape) -> usize {
        self.stages as usize * (self.block_m + self.block_n) as usize * self.row_bytes(shape)
    }

    fn warp_tile(&self) -> (usize, usize) {
        (
            (self.block_m / self.warps_m.max(1)) as usize,
            (self.block_n / self.warps_n.max(1)) as usize,
        )
    }

    /// Staged epilogue bytes for `epi_mi` mma rows per warp per pass.
    fn epilogue_bytes(&self, epi_mi: usize) -> usize {
        self.warps_m as usize * epi_mi * 16 * (self.block_n as usize + EPILOGUE_PAD) * 4
    }

    /// mma rows (16 each) of every warp the staged epilogue finishes per
    /// pass: the most (dividing the warp tile's) whose f32 staging fits in
    /// the pipeline's shared memory, so staging never raises the footprint
    /// unless even one row per pass does not fit.
    pub fn epilogue_mi(&self, shape: &ConvShape) -> usize {
        let mi = (self.warp_tile().0 / 16).max(1);
        if shape.pool {
            // The pooled epilogue sums columns over the whole staged tile.
            return mi;
        }
        let budget = self.pipeline_bytes(shape);
        (1..=mi)
            .rev()
            .filter(|d| mi % d == 0)
            .find(|&d| self.epilogue_bytes(d) <= budget)
            .unwrap_or(1)
    }

    /// Dynamic shared memory: the pipeline, or the staged epilogue's
    /// passes if those need more, then the spread reduction's region.
    pub fn smem_bytes(&self, shape: &ConvShape) -> usize {
        self.spread_offset(shape) + self.spread_region_bytes()
    }

    /// Where the spread reduction's region starts: past the pipeline and
    /// the staging, which may still be in use when the other ranks push.
    fn spread_offset(&self, shape: &ConvShape) -> usize {
        let staging = match self.epilogue {
            MmaEpilogue::Staged => self.epilogue_bytes(self.epilogue_mi(shape)),
            MmaEpilogue::Direct => 0,
        };
        self.pipeline_bytes(shape)
            .max(staging)
            .max(
                self.split_reduce
                    .smem_bytes(self.split_k, self.block_m, self.block_n),
            )
    }

    /// The spread reduction's region: 2 accumulator pairs a thread per mma
    /// tile of its warp tile.
    fn spread_region_bytes(&self) -> usize {
        let (wtm, wtn) = self.warp_tile();
        self.split_reduce.spread_region_bytes(
            self.split_k,
            wtm / 16 * (wtn / 8) * 2,
            self.threads(),
        )
    }

    /// C (and a shortcut's C) is a multiple of one 16-byte chunk: A moves
    /// by cp.async.
    pub fn a_vectorized(shape: &ConvShape) -> bool {
        let chunk = 16 / Self::operands(shape).element_bytes();
        shape.c % chunk == 0 && shape.shortcut.is_none_or(|sc| sc.c % chunk == 0)
    }

    /// R·S·C is a multiple of one 16-byte chunk: B moves by cp.async.
    pub fn b_vectorized(shape: &ConvShape) -> bool {
        shape.gemm_k() % (16 / Self::operands(shape).element_bytes()) == 0
    }

    /// Registers per thread: accumulators, A and B fragments (twice over
    /// for tf32, whose rounded copies ptxas keeps beside the raw ones),
    /// about 42 for addresses and loop state, and per 16-byte chunk a
    /// thread copies each stage 5 (A) or 4 (B) registers for its row's
    /// address and predicate, twice that when the chunk is gathered element
    /// by element (plus 8). Split-K's fixup keeps the partial sums it reads
    /// in flight: 8 more registers, 64 for 64×64 warp tiles (which then
    /// cannot split: ptxas spills them at 255). Calibrated against ptxas by
    /// `register_estimates_vs_ptxas` over the fp16 and tf32 spaces of the
    /// sweep's stem, 3×3 and 1×1 shapes: never below it, on average 20
    /// (fp16) and 60 (tf32) above; no config it admits spills or reaches
    /// 255.
    pub fn regs_estimate(&self, shape: &ConvShape) -> usize {
        let (wtm, wtn) = self.warp_tile();
        let (mi, ni) = (wtm / 16, wtn / 8);
        let fragments = mi * 4 + ni * 2;
        let tf32 = if Self::operands(shape) == MmaOperands::Tf32 {
            2 * fragments
        } else {
            0
        };
        let chunks = self.row_bytes(shape) / 16;
        let la = (self.block_m as usize * chunks).div_ceil(self.threads());
        let lb = (self.block_n as usize * chunks).div_ceil(self.threads());
        let (a_vec, b_vec) = (Self::a_vectorized(shape), Self::b_vectorized(shape));
        let a = la * if a_vec { 5 } else { 10 };
        let b = lb * if b_vec { 4 } else { 8 };
        let gather = if a_vec && b_vec { 0 } else { 8 };
        let split = match (self.split_k > 1, mi * ni * 4 >= 128) {
            (false, _) => 0,
            (true, false) => 8,
            (true, true) => 64,
        };
        mi * ni * 4 + fragments + tf32 + 42 + a + b + gather + split
    }

    pub fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        if shape.row_norm.is_some() {
            return Err("mma.sync tiles do not normalize their input rows (wgmma does)".into());
        }
        if shape.groups != 1 {
            return Err("the tensor-core implicit GEMM needs groups = 1".into());
        }
        let Some(operands) = MmaOperands::of(shape) else {
            return Err(format!(
                "mma.sync needs f16 or bf16 operands of one type, or f32 ones under tf32 \
                 precision; got {} and {} under {}",
                shape.x_dtype, shape.w_dtype, shape.precision
            ));
        };
        if !operands.block_ks().contains(&self.block_k) {
            let [a, b] = operands.block_ks();
            return Err(format!(
                "block_k must be {a} or {b} for {operands:?} operands (tile rows of 64 or 128 \
                 bytes)"
            ));
        }
        if !matches!(self.stages, 2..=6) {
            return Err("stages must be in 2..=6".into());
        }
        if self.warps_m == 0 || self.warps_n == 0 || self.warps_m * self.warps_n > 16 {
            return Err("1 to 16 warps".into());
        }
        if self.block_m % self.warps_m != 0 || self.block_n % self.warps_n != 0 {
            return Err("the warps must divide the CTA tile".into());
        }
        let (wtm, wtn) = self.warp_tile();
        if !matches!(wtm, 16 | 32 | 64) || !matches!(wtn, 16 | 32 | 64) {
            return Err(format!(
                "warp tile {wtm}×{wtn}: each side must be 16, 32 or 64"
            ));
        }
        if self.smem_bytes(shape) > MAX_SMEM_BYTES {
            return Err(format!("{} B of shared memory", self.smem_bytes(shape)));
        }
        // Gathered A chunks (C not a multiple of a chunk) are built in
        // registers element by element.
        let chunks = self.block_m as usize * self.row_bytes(shape) / 16;
        if !Self::a_vectorized(shape) && chunks > 4 * self.threads() {
            return Err(format!(
                "{} gathered A chunks per thread (at most 4 when C is not a multiple of 16 bytes)",
                chunks.div_ceil(self.threads())
            ));
        }
        let regs = self.regs_estimate(shape);
        if regs > register_cap(self.threads()) {
            return Err(format!(
                "about {regs} registers per thread, {} available",
                register_cap(self.threads())
            ));
        }
        check_split(self.split_k, shape.gemm_k().div_ceil(self.block_k as usize))?;
        self.split_reduce.check(self.split_k)?;
        if self.split_reduce == SplitReduce::Spread && self.epilogue != MmaEpilogue::Direct {
            return Err(
                "split_reduce spread finishes each rank's share with the direct epilogue".into(),
            );
        }
        check_pooled_tile(shape, self.block_m, self.epilogue)?;
        mma_grid(shape, self.block_m, self.block_n, self.split_k).map(|_| ())
    }

    /// Whether the heuristic default considers this config: not the cluster
    /// reduction, which has not been measured yet.
    pub fn default_candidate(&self) -> bool {
        self.split_reduce.is_global()
    }

    /// CTA tiles 32..256 on each side (up to 256×128 / 128×256 with 64×64
    /// warp tiles where registers allow), both k steps, 1..4 warps per side,
    /// 2..4 stages, every split-K factor, both epilogues; only valid configs.
    pub fn search_space(shape: &ConvShape) -> Vec<Self> {
        let Some(operands) = MmaOperands::of(shape) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for block_m in [32, 64, 128, 256] {
            for block_n in [32, 64, 128, 256] {
                for block_k in operands.block_ks() {
                    for warps_m in [1, 2, 4] {
                        for warps_n in [1, 2, 4] {
                            for stages in [2, 3, 4] {
                                for (split_k, epilogue, split_reduce) in split_and_epilogue() {
                                    let c = MmaConfig {
                                        block_m,
                                        block_n,
                                        block_k,
                                        warps_m,
                                        warps_n,
                                        stages,
                                        split_k,
                                        epilogue,
                                        split_reduce,
                                        early_trigger: false,
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
        }
        out
    }

    /// `mma_m64n64k32w2x2p3s1`, then `c` for the cluster split-K
    /// reduction (`rs` for the reduce-scatter), `d` for the direct epilogue
    /// and `t` for the early trigger.
    pub fn tag(&self) -> String {
        format!(
            "mma_m{}n{}k{}w{}x{}p{}s{}{}{}{}",
            self.block_m,
            self.block_n,
            self.block_k,
            self.warps_m,
            self.warps_n,
            self.stages,
            self.split_k,
            self.split_reduce.tag(),
            match self.epilogue {
                MmaEpilogue::Staged => "",
                MmaEpilogue::Direct => "d",
            },
            if self.early_trigger { "t" } else { "" }
        )
    }

    /// One CTA per output tile along x (N tile fastest), split-K slices
    /// along z.
    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        Geometry {
            grid: mma_grid(shape, self.block_m, self.block_n, self.split_k).unwrap_or([1, 1, 1]),
            block: [self.threads() as u32, 1, 1],
            smem_bytes: self.smem_bytes(shape) as u32,
        }
    }

    pub fn workspace(&self, shape: &ConvShape) -> Workspace {
        self.split_reduce
            .workspace(shape, self.block_m, self.block_n, self.split_k)
    }

    pub fn model(&self, shape: &ConvShape) -> TileModel {
        let operands = Self::operands(shape);
        let (wtm, wtn) = self.warp_tile();
        let (mi, ni) = ((wtm / 16) as f64, (wtn / 8) as f64);
        let warps = f64::from(self.warps_m * self.warps_n);
        // Per 32-byte k step: tensor-pipe time vs shared-memory time
        // (ldmatrix reads plus the cp.async fill), SM-wide, in clocks.
        let mma = warps * mi * ni * 1.5;
        let smem = warps * (mi + ni / 2.0) * 4.0 + f64::from(self.block_m + self.block_n) / 4.0;
        let passes = wtm / 16 / self.epilogue_mi(shape);
        let (store_efficiency, staging_bytes, epilogue_barriers) =
            epilogue_model(self.epilogue, shape, self.block_m, self.block_n, passes);
        TileModel {
            bm: self.block_m as usize,
            bn: self.block_n as usize,
            bk: self.block_k as usize,
            threads: self.threads(),
            smem_bytes: self.smem_bytes(shape),
            regs_per_thread: self.regs_estimate(shape),
            split_k: self.split_k as usize,
            split_in_cluster: self.split_reduce.is_cluster(),
            split_spread: self.split_reduce == SplitReduce::Spread,
            tiles_in_flight: self.stages as usize - 1,
            peak: operands.peak(),
            inner_efficiency: 0.9 * (mma / smem).min(1.0),
            saturating_warps: 8.0,
            element_bytes: operands.element_bytes(),
            gather_penalty: if Self::a_vectorized(shape) { 1.0 } else { 2.0 },
            out_bytes: shape.out_dtype.size(),
            res_bytes: shape.residual.map_or(0, |d| d.size()),
            res_after_loop: shape.residual.is_some(),
            store_efficiency,
            staging_bytes,
            epilogue_barriers,
            dram_bytes: shape.dram_bytes(),
        }
    }

    pub fn render(&self, p: &mut Params, shape: &ConvShape) {
        TileParams {
            bm: self.block_m,
            bn: self.block_n,
            bk: self.block_k,
            warps_m: self.warps_m,
            warps_n: self.warps_n,
            stages: self.stages,
            split_k: self.split_k,
            split_reduce: self.split_reduce,
            epilogue: self.epilogue,
            epi_mi: self.epilogue_mi(shape) as u32,
            residual_offset: None,
            spread_offset: self.spread_offset(shape),
            early_trigger: self.early_trigger,
        }
        .render(p, shape);
    }
}

/// What the cost model charges for the epilogue of a `bm × bn` tile:
/// (store efficiency, shared-memory bytes staged, barriers). Staged: whole
/// sectors, the f32 tile written and read back, two barriers a pass.
/// Direct: a quad stores 2 values per row, 8 bytes of a 16-bit output (a
/// quarter sector per lane pair, half a sector per quad).
pub(super) fn epilogue_model(
    epilogue: MmaEpilogue,
    shape: &ConvShape,
    bm: u32,
    bn: u32,
    passes: usize,
) -> (f64, usize, usize) {
    match epilogue {
        MmaEpilogue::Staged => (1.0, 2 * (bm * bn) as usize * 4, 2 * passes),
        MmaEpilogue::Direct => ((8.0 * shape.out_dtype.size() as f64 / 32.0).min(1.0), 0, 0),
    }
}

/// What a pooled epilogue ([`ConvShape::pool`]) needs of a tensor-core
/// tile: the staged epilogue (the finished tile stays in its staging for
/// the column sums; a spread split-K, which ends in the direct epilogue, is
/// excluded with it), one M tile over all N·P·Q rows, and whole 16-byte
/// output chunks.
pub(super) fn check_pooled_tile(
    shape: &ConvShape,
    block_m: u32,
    epilogue: MmaEpilogue,
) -> Result<(), String> {
    if !shape.pool {
        return Ok(());
    }
    if epilogue != MmaEpilogue::Staged {
        return Err("a pooled epilogue sums the staged tile: epilogue must be staged".into());
    }
    if (block_m as usize) < shape.gemm_m() {
        return Err(format!(
            "a pooled epilogue needs every pixel in one M tile: block_m {block_m} < {} rows",
            shape.gemm_m()
        ));
    }
    let per_chunk = 16 / shape.out_dtype.size();
    if shape.gemm_n() % per_chunk != 0 {
        return Err(format!(
            "a pooled epilogue stores whole 16-byte chunks: K = {} is not a multiple of {per_chunk}",
            shape.gemm_n()
        ));
    }
    Ok(())
}

/// The parameters the tensor-core templates' shared loader, epilogues and
/// split-K read (`conv_mma.cu`), from either config.
pub(super) struct TileParams {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    pub stages: u32,
    pub split_k: u32,
    pub split_reduce: SplitReduce,
    pub epilogue: MmaEpilogue,
    /// mma rows per warp per staged-epilogue pass.
    pub epi_mi: u32,
    /// Where the residual tile is prefetched to (bytes into the aligned
    /// dynamic shared memory), for configs that prefetch it.
    pub residual_offset: Option<usize>,
    /// Where the spread reduction's region starts (bytes into the dynamic
    /// shared memory; read only with [`SplitReduce::Spread`]).
    pub spread_offset: usize,
    /// `launch_dependents` right after the grid dependency wait.
    pub early_trigger: bool,
}

impl TileParams {
    pub fn render(&self, p: &mut Params, shape: &ConvShape) {
        let spread = self.split_k > 1 && self.split_reduce == SplitReduce::Spread;
        p.ints(&[
            ("BM", self.bm.into()),
            ("BN", self.bn.into()),
            ("BK", self.bk.into()),
            ("WARPS_M", self.warps_m.into()),
            ("WARPS_N", self.warps_n.into()),
            ("STAGES", self.stages.into()),
            ("SPLIT_K", self.split_k.into()),
        ])
        .boolean("A_VEC", MmaConfig::a_vectorized(shape))
        .boolean("B_VEC", MmaConfig::b_vectorized(shape))
        .boolean(
            "CLUSTER_SPLIT",
            self.split_k > 1 && self.split_reduce == SplitReduce::Cluster,
        )
        .boolean("CLUSTER_SPREAD", spread)
        .int(
            "SPREAD_OFFSET",
            if spread { self.spread_offset } else { 0 } as u32,
        )
        .boolean("STAGED_EPILOGUE", self.epilogue == MmaEpilogue::Staged)
        .int("EPI_MI", self.epi_mi)
        .boolean("RES_PREFETCH", self.residual_offset.is_some())
        .int("RES_OFFSET", self.residual_offset.unwrap_or(0) as u32)
        .boolean(
            "WEIGHTS_FIRST",
            shape.n <= super::source::PROGRAMMATIC_MAX_BATCH,
        )
        .boolean("EARLY_TRIGGER", self.early_trigger);
    }
}

/// `[tiles, 1, split]`: the template numbers tiles with the N tile fastest.
pub(super) fn mma_grid(
    shape: &ConvShape,
    bm: u32,
    bn: u32,
    split: u32,
) -> Result<[u32; 3], String> {
    let tiles = shape.gemm_m().div_ceil(bm as usize) * shape.gemm_n().div_ceil(bn as usize);
    if tiles > i32::MAX as usize {
        return Err(format!("{tiles} tiles exceed the launch limits"));
    }
    Ok([tiles as u32, 1, split])
}

#[cfg(test)]
mod tests {
    use super::super::implicit_gemm::tests::conv;
    use super::*;
    use crate::ir::{DType, Precision};

    fn base() -> MmaConfig {
        MmaConfig {
            block_m: 64,
            block_n: 64,
            block_k: 32,
            warps_m: 2,
            warps_n: 2,
            stages: 3,
            split_k: 1,
            epilogue: MmaEpilogue::Staged,
            split_reduce: SplitReduce::Global,
            early_trigger: false,
        }
    }

    #[test]
    fn the_early_trigger_is_named_rendered_and_left_out_of_the_space() {
        let shape = conv(1, 512, 7, 512, 3, 1, DType::F16);
        let on = MmaConfig {
            early_trigger: true,
            ..base()
        };
        assert_eq!(on.tag(), "mma_m64n64k32w2x2p3s1t");
        assert!(!serde_json::to_string(&base())
            .unwrap()
            .contains("early_trigger"));
        let mut p = Params::new("P");
        on.render(&mut p, &shape);
        assert!(p
            .render()
            .contains("static constexpr bool EARLY_TRIGGER = true;"));
        assert!(MmaConfig::search_space(&shape)
            .iter()
            .all(|c| !c.early_trigger));
    }

    #[test]
    fn a_spread_tile_has_its_region_past_the_pipeline_and_ends_in_the_direct_epilogue() {
        // ResNet-50's stage-4 3×3 at batch 1: K = 4608, 32×32 tiles split 8.
        let shape = conv(1, 512, 7, 512, 3, 1, DType::F16);
        let spread = MmaConfig {
            block_m: 32,
            block_n: 32,
            block_k: 64,
            stages: 4,
            split_k: 8,
            epilogue: MmaEpilogue::Direct,
            split_reduce: SplitReduce::Spread,
            ..base()
        };
        assert!(
            spread.validate(&shape).is_ok(),
            "{:?}",
            spread.validate(&shape)
        );
        assert_eq!(spread.tag(), "mma_m32n32k64w2x2p4s8rsd");
        // 4 accumulator pairs a thread (16×16 warp tiles): one slot each on
        // ranks 0..3, a float2 per thread per rank.
        let pipeline = spread.pipeline_bytes(&shape);
        assert_eq!(spread.smem_bytes(&shape), pipeline + 8 * 128 * 8);
        let mut p = Params::new("P");
        spread.render(&mut p, &shape);
        let text = p.render();
        assert!(text.contains("CLUSTER_SPREAD = true"), "{text}");
        assert!(text.contains("CLUSTER_SPLIT = false"), "{text}");
        assert!(
            text.contains(&format!("SPREAD_OFFSET = {pipeline};")),
            "{text}"
        );
        let staged = MmaConfig {
            epilogue: MmaEpilogue::Staged,
            ..spread
        };
        assert!(staged
            .validate(&shape)
            .unwrap_err()
            .contains("direct epilogue"));
        let json = serde_json::to_string(&spread).unwrap();
        assert!(json.contains(r#""split_reduce":"spread""#), "{json}");
        assert!(MmaConfig::search_space(&shape)
            .iter()
            .any(|c| c.split_reduce == SplitReduce::Spread && c.split_k == 8));
    }

    #[test]
    fn invalid_configs_say_why() {
        let shape = conv(1, 64, 56, 64, 3, 1, DType::F16);
        let mut c = base();
        assert!(c.validate(&shape).is_ok());
        c.split_k = 64;
        assert!(c.validate(&shape).unwrap_err().contains("split_k"));
        c.split_k = 1;
        c.stages = 6;
        c.block_m = 256;
        c.block_n = 256;
        c.block_k = 64;
        assert!(c.validate(&shape).unwrap_err().contains("warp tile"));
        c.warps_m = 4;
        c.warps_n = 4;
        assert!(c.validate(&shape).unwrap_err().contains("shared memory"));
        let f32_shape = conv(1, 64, 56, 64, 3, 1, DType::F32);
        assert!(base()
            .validate(&f32_shape)
            .unwrap_err()
            .contains("f16 or bf16"));
        let tf32_shape = ConvShape {
            precision: Precision::Tf32,
            ..f32_shape
        };
        assert!(base().validate(&tf32_shape).is_ok());
        let wide_k = MmaConfig {
            block_k: 64,
            ..base()
        };
        assert!(wide_k
            .validate(&tf32_shape)
            .unwrap_err()
            .contains("16 or 32"));
    }

    #[test]
    fn tf32_tiles_hold_the_same_bytes_as_f16_tiles() {
        let f16 = conv(1, 64, 56, 64, 3, 1, DType::F16);
        let tf32 = ConvShape {
            precision: Precision::Tf32,
            ..conv(1, 64, 56, 64, 3, 1, DType::F32)
        };
        let c16 = MmaConfig {
            block_k: 64,
            ..base()
        };
        let c32 = MmaConfig {
            block_k: 32,
            ..base()
        };
        // 3 stages × 128 rows × 128 bytes, no padding.
        assert_eq!(c16.pipeline_bytes(&f16), 3 * 128 * 128);
        assert_eq!(c32.pipeline_bytes(&tf32), c16.pipeline_bytes(&f16));
        assert_eq!(MmaOperands::of(&tf32), Some(MmaOperands::Tf32));
        assert!(MmaConfig::search_space(&tf32)
            .iter()
            .all(|c| matches!(c.block_k, 16 | 32)));
    }

    #[test]
    fn the_staged_epilogue_fits_in_the_pipeline_or_sizes_the_launch() {
        let shape = conv(256, 64, 56, 256, 1, 1, DType::F16);
        // 128×256, 2×4 warps of 64×64, 3 stages of 64-byte rows: 72 KiB of
        // pipeline; a pass of 2 mma rows per warp row stages
        // 2 × 2 × 16 × 264 × 4 = 67584 B, so 2 passes.
        let c = MmaConfig {
            block_m: 128,
            block_n: 256,
            warps_m: 2,
            warps_n: 4,
            ..base()
        };
        assert_eq!(c.pipeline_bytes(&shape), 3 * 384 * 64);
        assert_eq!(c.epilogue_mi(&shape), 2);
        assert_eq!(c.smem_bytes(&shape), c.pipeline_bytes(&shape));
        // 64×256 with 4×4 warps of 16×64: one mma row per warp and pass
        // stages 4 × 16 × 264 × 4 = 67584 B, more than the 2 × 320 × 64 B
        // pipeline, so the staging sizes the launch; the direct epilogue
        // needs only the pipeline.
        let wide = MmaConfig {
            block_m: 64,
            block_n: 256,
            warps_m: 4,
            warps_n: 4,
            stages: 2,
            ..base()
        };
        assert_eq!(wide.pipeline_bytes(&shape), 2 * 320 * 64);
        assert_eq!(wide.epilogue_mi(&shape), 1);
        assert_eq!(wide.smem_bytes(&shape), 4 * 16 * 264 * 4);
        let direct = MmaConfig {
            epilogue: MmaEpilogue::Direct,
            ..wide
        };
        assert_eq!(direct.smem_bytes(&shape), 2 * 320 * 64);
    }

    #[test]
    fn old_records_without_an_epilogue_read_as_staged() {
        let json = r#"{"block_m":64,"block_n":64,"block_k":32,"warps_m":2,"warps_n":2,"stages":3,"split_k":1}"#;
        let c: MmaConfig = serde_json::from_str(json).unwrap();
        assert_eq!(c, base());
        assert_eq!(c.tag(), "mma_m64n64k32w2x2p3s1");
        let d = MmaConfig {
            epilogue: MmaEpilogue::Direct,
            ..c
        };
        assert_eq!(d.tag(), "mma_m64n64k32w2x2p3s1d");
        let back: MmaConfig = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn cluster_split_k_needs_2_to_8_slices_and_no_workspace() {
        // layer 3's 3×3 at batch 1: M = 196, K = 2304 (36 k tiles of 64).
        let shape = conv(1, 256, 14, 256, 3, 1, DType::F16);
        let global = MmaConfig {
            block_k: 64,
            split_k: 4,
            ..base()
        };
        let cluster = MmaConfig {
            split_reduce: SplitReduce::Cluster,
            ..global
        };
        assert!(global.validate(&shape).is_ok() && cluster.validate(&shape).is_ok());
        assert_eq!(cluster.tag(), "mma_m64n64k64w2x2p3s4c");
        assert_eq!(cluster.workspace(&shape), Workspace::default());
        assert!(global.workspace(&shape).partials > 0);
        assert!(cluster.smem_bytes(&shape) >= 64 * 64 * 4);
        assert!(global.default_candidate() && !cluster.default_candidate());
        for split_k in [1, 12] {
            let err = MmaConfig { split_k, ..cluster }
                .validate(&shape)
                .unwrap_err();
            assert!(err.contains("split_reduce cluster"), "{err}");
        }
        // Global configs keep their old JSON; cluster ones name the field.
        let json = serde_json::to_string(&global).unwrap();
        assert!(!json.contains("split_reduce"), "{json}");
        let json = serde_json::to_string(&cluster).unwrap();
        assert!(json.contains(r#""split_reduce":"cluster""#), "{json}");
        assert_eq!(serde_json::from_str::<MmaConfig>(&json).unwrap(), cluster);
        // The space holds both reductions for 2..=8 slices, only global past.
        let space = MmaConfig::search_space(&shape);
        assert!(space.contains(&cluster) && space.contains(&global));
        assert!(space
            .iter()
            .all(|c| c.split_reduce.is_global() || (2..=MAX_CLUSTER).contains(&c.split_k)));
    }

    #[test]
    fn tiles_are_numbered_along_x() {
        let shape = conv(2, 64, 7, 100, 3, 1, DType::F16);
        let c = base();
        // M = 98 → 2 tiles of 64, N = 100 → 2 tiles: 4 CTAs.
        assert_eq!(c.geometry(&shape).grid, [4, 1, 1]);
        let split = MmaConfig { split_k: 3, ..c };
        assert_eq!(split.geometry(&shape).grid, [4, 1, 3]);
        assert_eq!(split.workspace(&shape).counters, 4);
    }
}

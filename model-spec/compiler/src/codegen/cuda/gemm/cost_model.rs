//! The analytic cost model behind the tiled kernels' heuristic defaults: an
//! estimate of a tiled GEMM's time on the H200 from its tile, occupancy,
//! pipeline depth and split-K, good enough to rank configs (the tuner
//! replaces it with measurements).
//!
//! For a grid of `ctas` CTAs on 132 SMs, the busiest SM runs `per_sm =
//! ceil(ctas / 132)` of them, `conc = min(per_sm, resident)` at a time.
//! While `conc` CTAs run together, one k-tile iteration takes the longest of
//! - compute: `conc · BM·BN·BK` multiply-adds at the SM's rate, which is the
//!   kernel kind's peak × the inner-loop efficiency of the thread/warp tile ×
//!   `min(1, active warps / warps needed to saturate)`;
//! - traffic: `conc · (BM+BN)·BK` operand bytes at the SM's share of L2
//!   bandwidth;
//! - latency: one memory latency divided by the k-tiles in flight.
//!
//! Each CTA also pays a prologue (one latency) and its epilogue: a second
//! latency when it loads the residual only then, the output and residual
//! bytes at the SM's share of bandwidth, divided by the store
//! efficiency (the used fraction of each 32-byte sector a warp access
//! touches), plus, for an epilogue staged through shared memory, the
//! round trip there and its barriers. Split-K adds the partial write and,
//! for the last CTA of each tile, reading the other slices back.
//!
//! Workloads larger than L2 (batch 256) cannot beat device memory: the
//! result is a smooth maximum (4-norm) of that estimate and the time to move
//! the input, weights, output and residual once at DRAM bandwidth. Near the
//! floor a config whose own estimate is lower still ranks first, since real
//! kernels overlap compute and traffic imperfectly.
//!
//! The constants are H200 guesses except where marked measured.

/// SMs of the H200.
pub const SMS: usize = 132;
const SMEM_PER_SM: usize = 228 * 1024;
const REGS_PER_SM: usize = 65536;
const THREADS_PER_SM: usize = 2048;
const CTAS_PER_SM: usize = 32;
/// Global memory latency seen by a CTA (mostly L2 hits at batch 1), ns.
const LATENCY_NS: f64 = 600.0;
/// One SM's share of L2 bandwidth when all SMs load, bytes/ns.
const L2_BYTES_PER_NS_PER_SM: f64 = 40.0;
/// What one SM alone can pull from L2, bytes/ns (split-K fixup).
const SM_BYTES_PER_NS: f64 = 120.0;
/// Device memory, bytes/ns (measured: 4.3 TB/s device-to-device copy).
const DRAM_BYTES_PER_NS: f64 = 4300.0;
/// Shared memory of one SM, bytes/ns (128 B/clk at ~1.9 GHz).
const SMEM_BYTES_PER_NS: f64 = 240.0;
/// One CTA-wide barrier, ns.
const BARRIER_NS: f64 = 20.0;
/// One cluster-wide barrier (a guess, not measured), ns.
const CLUSTER_BARRIER_NS: f64 = 150.0;
/// Shared memory the hardware reserves per resident CTA on sm_90.
const SMEM_RESERVED_PER_CTA: usize = 1024;
/// Peak multiply-adds per ns per SM: FFMA (128/clk at ~1.9 GHz) and
/// mma.sync f16/bf16 (about 2/3 of the wgmma peak).
pub const SIMT_MACS_PER_NS: f64 = 240.0;
pub const MMA_MACS_PER_NS: f64 = 2300.0;
/// wgmma f16/bf16 (measured: 790 TFLOP/s bf16 on random data = 395 TMAC/s
/// over 132 SMs).
pub const WGMMA_MACS_PER_NS: f64 = 2990.0;

/// What the model needs to know about one tiled config.
#[derive(Debug, Clone, Copy)]
pub struct TileModel {
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub threads: usize,
    pub smem_bytes: usize,
    pub regs_per_thread: usize,
    pub split_k: usize,
    /// The split-K slices reduce inside a thread-block cluster (shared
    /// memory, one cluster barrier on rank 0's path) instead of through L2.
    pub split_in_cluster: bool,
    /// Inside the cluster, a reduce-scatter: every rank sums and finishes
    /// a share of the tile (`cluster_spread_reduce`).
    pub split_spread: bool,
    /// k-tiles whose loads are in flight while one is computed.
    pub tiles_in_flight: usize,
    /// Peak MACs per ns per SM for this kernel kind.
    pub peak: f64,
    /// Inner-loop efficiency of the thread or warp tile (0..=1].
    pub inner_efficiency: f64,
    /// Warps per SM needed to reach the peak.
    pub saturating_warps: f64,
    /// Bytes of one operand element.
    pub element_bytes: usize,
    /// Multiplier on the iteration time for element-by-element gathers.
    pub gather_penalty: f64,
    /// Bytes of one output element.
    pub out_bytes: usize,
    /// Bytes of one residual element (0: no residual).
    pub res_bytes: usize,
    /// The epilogue loads the residual after the k loop, one more memory
    /// latency per CTA (false: none, or prefetched with the first k tile).
    pub res_after_loop: bool,
    /// Used fraction of the 32-byte sectors the epilogue's warp accesses
    /// touch (1: whole sectors).
    pub store_efficiency: f64,
    /// Shared-memory bytes a CTA's epilogue writes and reads back (0: none).
    pub staging_bytes: usize,
    /// Barriers of the epilogue.
    pub epilogue_barriers: usize,
    /// Bytes the workload moves through device memory at least.
    pub dram_bytes: f64,
}

/// CTAs of this config that fit on one SM (0 when one does not).
pub fn resident_ctas(t: &TileModel) -> usize {
    let by_smem = SMEM_PER_SM / (t.smem_bytes + SMEM_RESERVED_PER_CTA);
    let by_threads = THREADS_PER_SM / t.threads.max(1);
    let by_regs = REGS_PER_SM / (t.threads * t.regs_per_thread.max(1)).max(1);
    by_smem.min(by_threads).min(by_regs).min(CTAS_PER_SM)
}

/// Estimated time in ns of an `m × n × k` GEMM with tile model `t`.
pub fn estimate_ns(m: usize, n: usize, k: usize, t: &TileModel) -> f64 {
    let tiles = m.div_ceil(t.bm) * n.div_ceil(t.bn);
    let k_tiles = k.div_ceil(t.bk);
    let split = t.split_k.max(1);
    let k_tiles_per_cta = k_tiles.div_ceil(split);
    let ctas = tiles * split;
    let resident = resident_ctas(t).max(1);
    let per_sm = ctas.div_ceil(SMS);
    let conc = per_sm.min(resident);
    let rounds = per_sm.div_ceil(conc);
    let warps = (conc * t.threads) as f64 / 32.0;
    let rate = t.peak * t.inner_efficiency * (warps / t.saturating_warps).min(1.0);
    let macs = (conc * t.bm * t.bn * t.bk) as f64;
    let bytes = (conc * (t.bm + t.bn) * t.bk * t.element_bytes) as f64;
    let busy_sms = ctas.min(SMS) as f64;
    // With few busy SMs each gets more than its all-SMs share of L2.
    let bandwidth = (L2_BYTES_PER_NS_PER_SM * SMS as f64 / busy_sms).min(SM_BYTES_PER_NS);
    let iteration = (macs / rate)
        .max(bytes / bandwidth)
        .max(LATENCY_NS / t.tiles_in_flight.max(1) as f64)
        * t.gather_penalty;
    let sector_bytes = (t.out_bytes + t.res_bytes) as f64 / t.store_efficiency.max(0.125);
    let epilogue = (conc * t.bm * t.bn) as f64 * sector_bytes / bandwidth
        + (conc * t.staging_bytes) as f64 / SMEM_BYTES_PER_NS
        + t.epilogue_barriers as f64 * BARRIER_NS;
    let res_latency = if t.res_after_loop { LATENCY_NS } else { 0.0 };
    let spread = split > 1 && t.split_in_cluster && t.split_spread;
    // A reduce-scatter shares the epilogue between the tile's ranks.
    let epilogue = if spread {
        epilogue / split as f64
    } else {
        epilogue
    };
    let per_round = LATENCY_NS + k_tiles_per_cta as f64 * iteration + epilogue + res_latency;
    let mut total = rounds as f64 * per_round;
    // One f32 slice of the output tile.
    let tile_bytes = (t.bm * t.bn * 4) as f64;
    if spread {
        // Every rank pushes its slice to the owners through distributed
        // shared memory, one barrier, then sums its share locally.
        total += tile_bytes / SM_BYTES_PER_NS
            + conc as f64 * tile_bytes / SMEM_BYTES_PER_NS
            + CLUSTER_BARRIER_NS;
    } else if split > 1 && t.split_in_cluster {
        // Every CTA but rank 0 stages its slice in shared memory; rank 0
        // waits at one barrier, then reads the others' through distributed
        // shared memory (common.cuh::cluster_splitk_reduce).
        total += conc as f64 * tile_bytes / SMEM_BYTES_PER_NS
            + (split - 1) as f64 * tile_bytes / SM_BYTES_PER_NS
            + CLUSTER_BARRIER_NS;
    } else if split > 1 {
        // Every CTA writes its slice; the last of each tile reads the others.
        total += conc as f64 * tile_bytes / bandwidth
            + (split - 1) as f64 * tile_bytes / SM_BYTES_PER_NS
            + LATENCY_NS;
    }
    let floor = t.dram_bytes / DRAM_BYTES_PER_NS;
    (total.powi(4) + floor.powi(4)).powf(0.25)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mma(bm: usize, bn: usize, split_k: usize) -> TileModel {
        TileModel {
            bm,
            bn,
            bk: 32,
            threads: 128,
            smem_bytes: 3 * (bm + bn) * 40 * 2,
            regs_per_thread: 96,
            split_k,
            split_in_cluster: false,
            split_spread: false,
            tiles_in_flight: 2,
            peak: MMA_MACS_PER_NS,
            inner_efficiency: 0.8,
            saturating_warps: 16.0,
            element_bytes: 2,
            gather_penalty: 1.0,
            out_bytes: 2,
            res_bytes: 0,
            res_after_loop: false,
            store_efficiency: 1.0,
            staging_bytes: 0,
            epilogue_barriers: 0,
            dram_bytes: 0.0,
        }
    }

    #[test]
    fn a_cluster_reduction_costs_less_than_the_round_trip_through_l2() {
        let global = mma(64, 64, 4);
        let cluster = TileModel {
            split_in_cluster: true,
            ..global
        };
        let (m, n, k) = (196, 256, 2304);
        assert!(estimate_ns(m, n, k, &cluster) < estimate_ns(m, n, k, &global));
        // Without split-K the flag changes nothing.
        let single = mma(64, 64, 1);
        let flagged = TileModel {
            split_in_cluster: true,
            ..single
        };
        assert_eq!(
            estimate_ns(m, n, k, &single),
            estimate_ns(m, n, k, &flagged)
        );
    }

    #[test]
    fn a_reduce_scatter_costs_less_than_rank_0_summing_eight_slices() {
        // ResNet-50's stage-4 3×3 at batch 1, 32×32 tiles split 8.
        let cluster = TileModel {
            split_in_cluster: true,
            ..mma(32, 32, 8)
        };
        let spread = TileModel {
            split_spread: true,
            ..cluster
        };
        let (m, n, k) = (49, 512, 4608);
        assert!(estimate_ns(m, n, k, &spread) < estimate_ns(m, n, k, &cluster));
    }

    #[test]
    fn split_k_helps_a_long_thin_gemm_and_not_a_wide_one() {
        // ResNet-50 layer4 3x3 at batch 1: M = 49, N = 512, K = 4608.
        let base = estimate_ns(49, 512, 4608, &mma(64, 64, 1));
        let split = estimate_ns(49, 512, 4608, &mma(64, 64, 8));
        assert!(split < base, "{split} vs {base}");
        // The stem at batch 8: plenty of tiles, splitting only adds work.
        let base = estimate_ns(100352, 64, 160, &mma(128, 64, 1));
        let split = estimate_ns(100352, 64, 160, &mma(128, 64, 4));
        assert!(split > base, "{split} vs {base}");
    }

    #[test]
    fn occupancy_counts_every_limit() {
        let t = mma(128, 128, 1);
        // 61440 B of shared memory (+1 KiB reserved): 3 per SM (threads
        // allow 16, registers 5).
        assert_eq!(resident_ctas(&t), 3);
        let two = TileModel {
            smem_bytes: super::super::conv_shape::DEFAULT_SMEM_LIMIT,
            ..t
        };
        assert_eq!(resident_ctas(&two), 2);
        let big = TileModel {
            smem_bytes: 200 * 1024,
            ..t
        };
        assert_eq!(resident_ctas(&big), 1);
    }
}

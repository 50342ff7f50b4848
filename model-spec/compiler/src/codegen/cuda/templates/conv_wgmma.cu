// aotune: implicit-GEMM convolution on Hopper's warpgroup tensor-core
// instructions (wgmma.mma_async, sm_90a), f16/bf16 operands in shared memory,
// f32 accumulators in registers.
//
// Same GEMM view, tile numbering, split-K and epilogues as conv_mma.cu
// (whose helpers this file uses): A = im2col of the NHWC input, B = OHWI
// weight rows, both k-contiguous ("TN"), CTA tile BM x BN, k tile of 64
// elements (128-byte rows). The stages are filled by the same TileLoader
// (from this file's own k loop, below), whose swizzle for 128-byte rows
// (chunk ^ row % 8) is the 128-byte swizzle wgmma reads (the K-major SW128
// canonical layout: 8-row atoms of 1024 bytes, so every stage starts
// 1024-byte aligned).
//
// BM / 64 warpgroups; warpgroup g multiplies rows 64g .. 64g + 63 of the
// tile by all BN columns with one m64nBNk16 wgmma per 16 k (4 per k tile),
// reading A and B straight from shared memory through matrix descriptors:
// no ldmatrix, no register fragments of the operands. Its accumulators are
// laid out as mma.sync's m16n8 tiles along N (warp w of the group owns rows
// 16w .. 16w + 15), so the epilogue is conv_mma.cu's with WARPS_M = BM / 16
// warps of 16 x BN (P::WARPS_M, P::WARPS_N = 1, P::EPI_MI = 1).
//
// With 4 or more stages the k loop keeps one wgmma group in flight while
// the next tile's wgmmas are issued. Tile t of the CTA's k range lives in stage
// t % STAGES; the prologue starts the copies of tiles 0 .. STAGES - 3, one
// cp.async group per tile, and iteration i
//   1. waits for tile i's group: cp_async_wait<STAGES - 3>, since exactly
//      one group is committed per tile (empty past the end of the range),
//      so the groups of tiles i + 1 .. i + STAGES - 3 are the only ones
//      allowed to be pending; then fence.proxy.async (the copies were
//      generic-proxy writes; wgmma reads through the async proxy) and one
//      barrier;
//   2. refills stage (i + STAGES - 2) % STAGES == (i - 2) % STAGES with tile
//      i + STAGES - 2 (prefetch distance STAGES - 2) and commits its group.
//      That stage held tile i - 2 and is free: every warpgroup reached the
//      barrier after its wgmma_wait<1> of iteration i - 1, which returns
//      only once its wgmmas of tile i - 2 have completed;
//   3. issues the warpgroup's wgmmas of tile i as one group and waits with
//      wgmma_wait<1>, which leaves them in flight through the next
//      iteration's wait, barrier and copies.
// The stages then hold tile i - 1 (wgmmas perhaps in flight), tile i and
// tiles i + 1 .. i + STAGES - 2 (copies in flight). Consecutive groups
// accumulate into the same registers, which wgmma allows (in order within
// the warpgroup) as long as no other instruction touches them meanwhile:
// fence_operands pins them before each wgmma.fence and after each wait.
// After the loop wgmma_wait<0> and cp_async_wait<0> drain both pipelines
// before split-K and the epilogue (the staged one reuses the stages' shared
// memory after a barrier).
//
// With P::RES_PREFETCH the residual's output tile is copied into shared
// memory past the pipeline and staging buffers, in tile 0's cp.async group,
// and the staged epilogue reads it there (prefetch_residual_tile in
// conv_mma.cu): for 1x1 convs with one or two k tiles at batch 256 the
// epilogue's residual load was a second memory round trip after the loop's.
//
// With 2 or 3 stages the copies run STAGES - 1 tiles ahead (cp_async_wait<
// STAGES - 2>, refill stage (i + STAGES - 1) % STAGES after the barrier) and
// each tile waits for its wgmmas (wgmma_wait<0>) before the next barrier, so
// the stage a barrier lets be refilled is never still read. Measured on the
// H200 at batch 256 (128x128, 3 stages, 2 CTAs per SM: the other CTA's
// wgmmas already fill the wait), keeping a group in flight with 3 stages
// (one tile of copies ahead) made most layers slower, up to 21% (8.43 -> 8.96
// ms end to end, in a build that also prefetched weights into L2).

namespace aotune {

// Shared-memory matrix descriptor of a K-major operand tile with 128-byte
// rows and the 128-byte swizzle: start address >> 4 (bits 0-13), leading
// byte offset 1 (unused by swizzled K-major layouts, bits 16-29), stride
// byte offset 1024 >> 4 between 8-row atoms (bits 32-45), swizzle mode 1 =
// 128 bytes (bits 62-63).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned int smem_byte_addr) {
  return (unsigned long long)((smem_byte_addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

// The wgmma instructions exist only on sm_90a; the compute_90 PTX a build
// also embeds (for other GPUs) gets kernels that trap instead.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AOTUNE_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define AOTUNE_WGMMA_ASM(...) __trap()
#endif

__device__ __forceinline__ void wgmma_fence() {
  AOTUNE_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  AOTUNE_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void wgmma_wait() {
  AOTUNE_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Makes this thread's generic-proxy shared-memory writes (the cp.async
// copies) visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Pins the accumulators in place around the asynchronous wgmmas so the
// compiler neither reads nor moves them while one is in flight.
template <int R> __device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// `Wgmma<BN, T>::run(d, a, b)`: d += A(64 x 16) * B(16 x BN) with both
// operands described by `wgmma_desc`s; the specializations for each BN and
// operand type follow this file (generated: one accumulator operand per
// register).
template <int BN, class T> struct Wgmma;

// The epilogue of a swapped tile (P::SWAP_AB): warpgroup wg's wgmma
// result is D[channel][pixel] for channels 64 wg .. 64 wg + 63 of the tile
// and its BM pixels, thread `lane` of the group's warp w holding channels
// 16 w + lane / 4 (+ 8) at pixels 8 j + 2 (lane % 4) (+ 1), in acc[4 j + 2 h
// + e]. The tile is staged transposed, one pixel per row of BN + 8 floats,
// then finished row by row as the unswapped staged epilogue's (row r is
// output pixel m0 + r).
template <class P, int T>
__device__ __forceinline__ void swapped_epilogue(float* __restrict__ cs, const float* acc, int wg,
                                                 int w, int g, int t4, int m0, int n0,
                                                 typename P::TOut* __restrict__ y,
                                                 const typename P::TBias* __restrict__ bias,
                                                 const typename P::TRes* __restrict__ res) {
  constexpr int BM = P::BM, BN = P::BN, PITCH = BN + 8;
  const int ch = wg * 64 + w * 16 + g;
#pragma unroll
  for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) cs[(8 * j + 2 * t4 + e) * PITCH + ch + 8 * h] = acc[4 * j + 2 * h + e];
    }
  }
  __syncthreads();
  finish_staged_rows<P, BM, T>(cs, m0, n0, y, bias, res);
}

// A dense layer's row norm (ir::RowNorm; `ROW_NORM` and `NORM_EPS` in the
// parameters of the shapes that have one, absent elsewhere): the GEMM runs
// on the raw rows x[m, :] and the tile becomes
//   rstd_m * (acc[m][n] - mean_m * colsum[n])
// before the epilogue (colsum[n] = sum over k of the stored weight row n).
// Two threads per tile row (T = 2 BM without swapped operands) take each k
// tile's row statistics from the stage the wgmmas read, after issuing them
// (the stage is refilled only after the next iteration's barrier): thread t
// reads chunks 4 (t % 2) .. 4 (t % 2) + 3 of row t / 2, accumulating the sum
// and the sum of squares of d = x - x[m, 0] (the shift keeps the variance's
// f32 cancellation small for rows whose mean dwarfs their spread). Chunks
// at k >= K hold zero fill and are skipped (K % 8 == 0 for wgmma).
template <class P, class = void> struct RowNormOf {
  static constexpr bool ON = false;
  static constexpr float EPS = 0.0f;
};
template <class P> struct RowNormOf<P, decltype(void(P::ROW_NORM))> {
  static constexpr bool ON = P::ROW_NORM;
  static constexpr float EPS = P::NORM_EPS;
};

struct RowStats {
  float shift = 0.0f, sum = 0.0f, squares = 0.0f;

  // Adds this thread's half of one staged k tile row (`row_bytes`: the
  // row's 128 swizzled bytes; `k0`: the tile's first k).
  template <class TE, int GK>
  __device__ __forceinline__ void add(const unsigned char* row_bytes, int row, int half, int k0) {
    if (k0 == 0) shift = to_f32(*reinterpret_cast<const TE*>(row_bytes + (row % 8) * 16));
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int chunk = half * 4 + c;
      if (GK % 64 != 0 && k0 + chunk * 8 >= GK) break;
      const uint4 raw = *reinterpret_cast<const uint4*>(row_bytes + ((chunk ^ (row % 8)) * 16));
      const TE* e = reinterpret_cast<const TE*>(&raw);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float d = to_f32(e[j]) - shift;
        sum += d;
        squares = fmaf(d, d, squares);
      }
    }
  }
};

// Finishes the row statistics (the two halves of each row meet across
// adjacent lanes), publishes a (mean, rstd) pair per tile row in `stats`,
// and normalizes this thread's accumulators: rows `row0` and `row0 + 8` of
// the tile, columns n0 + 8 j + 2 t4 (+ 1), in acc[4 j + 2 h + e] (the
// direct epilogue's layout with one 16-row fragment per warp).
template <class P, int BM, int NI, int R>
__device__ __forceinline__ void apply_row_norm(float (&acc)[R], RowStats st, float2* stats,
                                               int row0, int t4, int n0,
                                               const float* __restrict__ colsum) {
  constexpr int GK = P::GEMM_K, N = P::GEMM_N;
  st.sum += __shfl_xor_sync(0xffffffffu, st.sum, 1);
  st.squares += __shfl_xor_sync(0xffffffffu, st.squares, 1);
  if (threadIdx.x % 2 == 0) {
    const float mean_d = st.sum / GK;
    const float var = fmaxf(st.squares / GK - mean_d * mean_d, 0.0f);
    stats[threadIdx.x / 2] = make_float2(st.shift + mean_d, rsqrtf(var + RowNormOf<P>::EPS));
  }
  __syncthreads();
  const float2 top = stats[row0], bottom = stats[row0 + 8];
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int n = n0 + 8 * j + 2 * t4;
    const float s0 = n < N ? colsum[n] : 0.0f, s1 = n + 1 < N ? colsum[n + 1] : 0.0f;
    acc[4 * j + 0] = top.y * (acc[4 * j + 0] - top.x * s0);
    acc[4 * j + 1] = top.y * (acc[4 * j + 1] - top.x * s1);
    acc[4 * j + 2] = bottom.y * (acc[4 * j + 2] - bottom.x * s0);
    acc[4 * j + 3] = bottom.y * (acc[4 * j + 3] - bottom.x * s1);
  }
}

template <class P>
__device__ __forceinline__ void conv_wgmma(const typename P::TIn* __restrict__ x,
                                           const typename P::TW* __restrict__ wgt,
                                           const typename P::TBias* __restrict__ bias,
                                           const typename P::TRes* __restrict__ res,
                                           const typename P::TIn* __restrict__ xs,
                                           typename P::TOut* __restrict__ y,
                                           const float* __restrict__ colsum = nullptr) {
  typedef typename P::TIn TE;
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, STAGES = P::STAGES;
  // P::SWAP_AB: each warpgroup multiplies 64 weight rows (output
  // channels) by all BM pixel rows, D = m64 x nBM (see swapped_epilogue).
  constexpr bool SWAP = P::SWAP_AB;
  constexpr int WGS = (SWAP ? BN : BM) / 64, T = 128 * WGS;
  constexpr int ROW = BK * (int)sizeof(TE);  // 128 bytes
  constexpr int A_STAGE = BM * ROW, B_STAGE = BN * ROW;
  constexpr int KSTEPS = BK / 16;
  constexpr int GK = P::GEMM_K;
  constexpr int KT = (GK + BK - 1) / BK;
  constexpr int KT_SPLIT = (KT + P::SPLIT_K - 1) / P::SPLIT_K;
  constexpr int N_TILES = (P::GEMM_N + BN - 1) / BN;
  constexpr int NI = BN / 8, R = (SWAP ? BM : BN) / 2;  // n8 tiles, accumulators per thread
  static_assert(sizeof(TE) == 2 && ROW == 128, "16-bit operands, 128-byte tile rows");
  static_assert(BM % 64 == 0 && P::WARPS_M == BM / 16 && P::WARPS_N == 1, "warpgroup rows");
  static_assert(A_STAGE % 1024 == 0 && B_STAGE % 1024 == 0, "stages of whole swizzle atoms");
  static_assert(!SWAP || (BN % 64 == 0 && P::STAGED_EPILOGUE && !P::RES_PREFETCH &&
                          !P::CLUSTER_SPLIT),
                "swapped tiles: 64 channels per warpgroup, staged epilogue, global split-K");
  constexpr bool NORM = RowNormOf<P>::ON;
  static_assert(!NORM || (!SWAP && P::SPLIT_K == 1 && T == 2 * BM),
                "a row norm: whole rows per CTA, two threads per tile row");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The launch asks 1 KiB more than the stages need, for this alignment.
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  // Stages this CTA's k range can fill, the only ones allocated: fewer
  // than STAGES when it has fewer k tiles (every stage index used below is
  // < min(STAGES, KT_SPLIT)).
  constexpr int ALLOC_STAGES = KT_SPLIT < STAGES ? KT_SPLIT : STAGES;
  unsigned char* As = smem;
  unsigned char* Bs = smem + ALLOC_STAGES * A_STAGE;
  cluster_spread_start<P>();
  static_assert(!P::CLUSTER_SPREAD || (!P::STAGED_EPILOGUE && !SWAP),
                "a spread tile ends in the direct epilogue");

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = tid / 128;
  const int m0 = (blockIdx.x / N_TILES) * BM, n0 = (blockIdx.x % N_TILES) * BN;
  const int kt_begin = blockIdx.z * KT_SPLIT;
  const int kt_end = min(KT, kt_begin + KT_SPLIT);
  const TileLoader<P, BM, BN, BK, T> loader(x, wgt, xs, m0, n0);
  auto load_stage = [&](int stage, int kt) {
    loader.load(As + stage * A_STAGE, Bs + stage * B_STAGE, kt);
  };
  // This warpgroup's rows: 64 pixels of A, or with SWAP 64 channels of B.
  const unsigned int a_base = smem_addr(As) + (SWAP ? 0 : wg * 64 * ROW);
  const unsigned int b_base = smem_addr(Bs) + (SWAP ? wg * 64 * ROW : 0);

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  RowStats row_stats;  // P's row norm: this thread's half of tile row tid / 2

  // A prefetched residual tile lives past the pipeline and staging buffers
  // (P::RES_OFFSET bytes in) and joins tile 0's cp.async group, so its
  // latency overlaps the k loop instead of following it in the epilogue.
  unsigned char* rs = smem + P::RES_OFFSET;

  // The stages hold the tiles whose copies are in flight (PREFETCH of
  // them), the tile whose wgmmas are being issued, and the tiles whose
  // wgmmas may still run (MMAS_IN_FLIGHT: 1 with 4+ stages, else 0).
  constexpr bool OVERLAP = STAGES >= 4;
  constexpr int MMAS_IN_FLIGHT = OVERLAP ? 1 : 0;
  constexpr int PREFETCH = STAGES - 1 - MMAS_IN_FLIGHT;
  static_assert(PREFETCH >= 1, "at least one tile's copies in flight");

  // One cp.async group per tile from here on, empty when there is none, so
  // that before iteration i's wait exactly PREFETCH + i groups exist and
  // the last PREFETCH - 1 of them are tiles i + 1 .. i + PREFETCH - 1.
  // (The weights first, before the grid dependency wait: load_prologue.)
  load_prologue<PREFETCH, P::WEIGHTS_FIRST>(loader, As, A_STAGE, Bs, B_STAGE, kt_begin, kt_end, [&] {
    if (P::RES_PREFETCH) prefetch_residual_tile<P, BM, BN, T>(res, rs, m0, n0);
  });
  if (P::EARLY_TRIGGER) launch_dependents();  // early_trigger (wgmma_config.rs)

  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int i = kt - kt_begin, stage = i % STAGES;
    cp_async_wait<PREFETCH - 1>();  // this thread's copies of tile i have landed
    fence_async_shared();
    // After it every thread's copies of tile i are visible to wgmma, and
    // every warpgroup has passed its wgmma_wait of iteration i - 1, so the
    // wgmmas of tile i - 1 - MMAS_IN_FLIGHT have completed everywhere: its
    // stage, (i + PREFETCH) % STAGES, is free.
    __syncthreads();
    if (kt + PREFETCH < kt_end) load_stage((i + PREFETCH) % STAGES, kt + PREFETCH);
    cp_async_commit();
    const unsigned int a = a_base + stage * A_STAGE, b = b_base + stage * B_STAGE;
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      // 16 k = 32 bytes along the swizzled rows.
      if constexpr (SWAP) {
        Wgmma<BM, TE>::run(acc, wgmma_desc(b + kk * 32), wgmma_desc(a + kk * 32));
      } else {
        Wgmma<BN, TE>::run(acc, wgmma_desc(a + kk * 32), wgmma_desc(b + kk * 32));
      }
    }
    wgmma_commit();
    if constexpr (NORM) {
      row_stats.add<TE, GK>(As + stage * A_STAGE + (tid / 2) * ROW, tid / 2, tid % 2, kt * BK);
    }
    wgmma_wait<MMAS_IN_FLIGHT>();  // leaves tile i's wgmmas in flight (4+ stages)
    fence_operands(acc);
  }
  if constexpr (OVERLAP) {
    wgmma_wait<0>();
    fence_operands(acc);
  }
  cp_async_wait<0>();
  if (!P::EARLY_TRIGGER) launch_dependents();  // the next kernel's CTAs may start (common.cuh)

  if (!reduce_split_k<P, R, T>(acc, smem)) return;

  const int g = lane / 4, t4 = lane % 4;
  if constexpr (NORM) {
    __shared__ float2 norm_stats[BM];
    apply_row_norm<P, BM, NI>(acc, row_stats, norm_stats, warp * 16 + g, t4, n0, colsum);
  }
  if constexpr (SWAP) {
    __syncthreads();
    swapped_epilogue<P, T>(reinterpret_cast<float*>(smem), acc, wg, warp % 4, g, t4, m0, n0, y,
                           bias, res);
  } else if constexpr (P::STAGED_EPILOGUE) {
    // Every warpgroup is done with the pipeline buffers before they hold C.
    __syncthreads();
    staged_epilogue<P, 1, NI, 16, BN, T>(reinterpret_cast<float*>(smem), acc, warp, 0, g, t4, m0,
                                         n0, y, bias, res, rs);
  } else {
    direct_epilogue<P, 1, NI, 16, BN>(acc, warp, 0, g, t4, m0, n0, y, bias, res);
  }
  cluster_split_finish<P>();
}

}  // namespace aotune

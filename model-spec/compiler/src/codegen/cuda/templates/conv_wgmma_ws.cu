// aotune: the warp-specialized, persistent form of conv_wgmma.cu's implicit
// GEMM (WgmmaConfig::warp_specialized): same GEMM view, tile numbering,
// k tiles of 64 elements in the 128-byte swizzle, wgmma instructions and
// direct epilogue, but
//   - one more warpgroup, the producer (the last 128 threads), does nothing
//     but copy k tiles into a ring of STAGES stages (the TileLoader of
//     conv_mma.cu with 128 threads), and the BM / 64 consumer warpgroups do
//     nothing but wgmmas and the epilogue: no CTA-wide barrier in the k loop;
//   - the grid is persistent (at most one CTA per SM, `WgmmaConfig::
//     geometry`): CTA b takes tiles b, b + gridDim.x, ... with the N tile
//     fastest, and the producer streams the next tile's k tiles into the
//     ring while the consumers finish the current one and run its epilogue,
//     so a tile's pipeline fill is hidden behind the previous tile.
//
// The ring. Fill f (the CTA's f-th k tile over all its tiles) lives in
// stage f % STAGES; two mbarriers per stage order it:
//   full[s]  completes a phase when each of the producer's 128 threads has
//            arrived, which `cp.async.mbarrier.arrive.noinc` makes happen
//            once that thread's copies of the fill have landed: the
//            producer issues a fill and moves on, its arrival follows the
//            data by itself;
//   empty[s] completes a phase when every consumer warp (lane 0, after its
//            wgmma_wait) has arrived: fill f's wgmmas have read the stage.
// Fill f waits for phase (f / STAGES) & 1 of full; the producer, before
// overwriting the stage with fill f >= STAGES, waits for phase
// (f / STAGES - 1) & 1 of empty. So up to STAGES fills are in flight, and
// neither side waits on the other but for data or a free stage.
//
// Visibility. cp.async writes through the generic proxy and wgmma reads
// through the async proxy: a consumer, after its wait on full (acquire,
// ordered after the copies' completion), executes fence.proxy.async before
// its wgmmas read the stage.
//
// Consumers keep one wgmma group in flight (wgmma_wait<1>) and release the
// previous fill after each wait; at the end of a tile wgmma_wait<0> drains
// the group and releases the last fill before the epilogue.
//
// Ping-pong (P::PINGPONG, BM = 64 or 128): two consumer warpgroups take the
// CTA's tiles in turn (warpgroup i % 2 its i-th), each a whole BM x BN tile
// (BM / 64 row blocks of one m64 wgmma each per k step, their accumulators
// side by side). The
// ring hands out fills in tile order, so one warpgroup's k loop follows the
// other's, and each runs its epilogue while the other multiplies: the
// tensor cores (which one warpgroup's wgmmas occupy whole) do not wait for
// epilogues. Fill f then belongs to tile f / KT, and only that tile's
// warpgroup (4 warps) releases it. A warpgroup starts tile i's k loop only
// once the other has passed its wait for tile i - 1's last fill (the
// `handoff` barrier, one phase per tile): a parity wait tells phase k from
// phase k - 2 only, so a warpgroup must not wait for fill f while fill
// f - STAGES, the other's, may still be outstanding.
//
// Dependent launches: every thread waits for the previous kernel before
// its first global access of activations (the producer before its first
// copy, the consumers before their first epilogue); each CTA lets the next
// kernel start once its producer has issued its last copy and its consumers
// have finished their last k loop.

namespace aotune {

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

// Arrives on `bar` (release at CTA scope).
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar))
      : "memory");
}

// Arrives on `bar` once every cp.async this thread has issued so far has
// completed (the arrival counts toward the barrier's expected count).
__device__ __forceinline__ void cp_async_mbar_arrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Blocks until the phase of `bar` with parity `parity` has completed
// (acquire at CTA scope).
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

template <class P>
__device__ __forceinline__ void conv_wgmma_ws(const typename P::TIn* __restrict__ x,
                                              const typename P::TW* __restrict__ wgt,
                                              const typename P::TBias* __restrict__ bias,
                                              const typename P::TRes* __restrict__ res,
                                              const typename P::TIn* __restrict__ xs,
                                              typename P::TOut* __restrict__ y) {
  typedef typename P::TIn TE;
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, STAGES = P::STAGES;
  constexpr bool PP = P::PINGPONG;
  constexpr int WGS = PP ? 2 : BM / 64, T = 128 * WGS;  // consumer warpgroups and threads
  // Row blocks of 64 a consumer warpgroup multiplies per tile.
  constexpr int RB = PP ? BM / 64 : 1;
  static_assert(!PP || BM == 64 || BM == 128, "a ping-pong warpgroup owns a whole tile");
  constexpr int ROW = BK * (int)sizeof(TE);   // 128 bytes
  constexpr int A_STAGE = BM * ROW, B_STAGE = BN * ROW;
  constexpr int KSTEPS = BK / 16;
  constexpr int KT = (P::GEMM_K + BK - 1) / BK;
  constexpr int N_TILES = (P::GEMM_N + BN - 1) / BN;
  constexpr int TILES = ((P::GEMM_M + BM - 1) / BM) * N_TILES;
  constexpr int NI = BN / 8, R = BN / 2;  // n8 tiles, accumulators per thread
  static_assert(sizeof(TE) == 2 && ROW == 128, "16-bit operands, 128-byte tile rows");
  static_assert(BM % 64 == 0 && P::WARPS_M == BM / 16 && P::WARPS_N == 1, "warpgroup rows");
  static_assert(A_STAGE % 1024 == 0 && B_STAGE % 1024 == 0, "stages of whole swizzle atoms");
  static_assert(P::SPLIT_K == 1 && !P::STAGED_EPILOGUE && !P::RES_PREFETCH && !P::SWAP_AB &&
                    !P::CLUSTER_SPLIT && !P::CLUSTER_SPREAD && !P::POOL,
                "one k range per tile, finished by the direct epilogue");
  static_assert(STAGES >= 2, "a stage filling while one is multiplied");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The launch asks 1 KiB more than the ring and its barriers need, for
  // this alignment.
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* As = smem;
  unsigned char* Bs = smem + STAGES * A_STAGE;
  unsigned long long* full = reinterpret_cast<unsigned long long*>(Bs + STAGES * B_STAGE);
  unsigned long long* empty = full + STAGES;
  unsigned long long* handoff = empty + STAGES;  // ping-pong only

  const int tid = threadIdx.x;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 128);
      mbar_init(&empty[s], PP ? 4 : T / 32);  // the warps that read a fill
    }
    if (PP) mbar_init(handoff, 4);
  }
  __syncthreads();

  if (tid >= T) {
    // The producer warpgroup.
    const int ptid = tid - T;
    grid_dependency_wait();
    int fill = 0;
    for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
      const int m0 = (tile / N_TILES) * BM, n0 = (tile % N_TILES) * BN;
      const TileLoader<P, BM, BN, BK, 128> loader(x, wgt, xs, m0, n0, ptid);
      for (int kt = 0; kt < KT; ++kt, ++fill) {
        const int stage = fill % STAGES;
        if (fill >= STAGES) mbar_wait(&empty[stage], (fill / STAGES - 1) & 1);
        loader.load(As + stage * A_STAGE, Bs + stage * B_STAGE, kt);
        cp_async_mbar_arrive(&full[stage]);
      }
    }
    launch_dependents();
    cp_async_wait_all();  // no copy outlives its thread
    return;
  }

  // The consumer warpgroups: warpgroup wg multiplies rows 64 wg .. 64 wg +
  // 63 of each tile by its BN columns (ping-pong: all BM rows of its own
  // tiles, row block rb's accumulators at acc[rb * R]); `tile_warp` is the
  // warp's 16-row slice of a 64-row block.
  const int lane = tid % 32, warp = tid / 32, wg = tid / 128;
  const int tile_warp = PP ? warp % 4 : warp;
  grid_dependency_wait();
  const typename P::TRes* __restrict__ r = after_dependency_wait(res);
  const unsigned int a_base = smem_addr(As) + (PP ? 0 : wg * 64 * ROW);
  const unsigned int b_base = smem_addr(Bs);
  const int g = lane / 4, t4 = lane % 4;
  float acc[RB * R];
  bool triggered = false;
  int i = 0;  // the CTA's tiles so far
  for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, ++i) {
    if (PP && i % 2 != wg) continue;
    const int m0 = (tile / N_TILES) * BM, n0 = (tile % N_TILES) * BN;
#pragma unroll
    for (int e = 0; e < RB * R; ++e) acc[e] = 0.0f;
    if (PP && i > 0) mbar_wait(handoff, (i - 1) & 1);  // tile i - 1 has all its fills
    int fill = i * KT;
    for (int kt = 0; kt < KT; ++kt, ++fill) {
      const int stage = fill % STAGES;
      mbar_wait(&full[stage], (fill / STAGES) & 1);
      if (PP && kt == KT - 1 && lane == 0) mbar_arrive(handoff);
      fence_async_shared();
      const unsigned int a = a_base + stage * A_STAGE, b = b_base + stage * B_STAGE;
      fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) {
          // 16 k = 32 bytes along the swizzled rows; row block rb 64 rows on.
          Wgmma<BN, TE>::run(*reinterpret_cast<float(*)[R]>(acc + rb * R),
                             wgmma_desc(a + rb * 64 * ROW + kk * 32), wgmma_desc(b + kk * 32));
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous fill's wgmmas are done
      fence_operands(acc);
      if (kt > 0 && lane == 0) mbar_arrive(&empty[(fill - 1) % STAGES]);
    }
    wgmma_wait<0>();
    fence_operands(acc);
    if (lane == 0) mbar_arrive(&empty[(fill - 1) % STAGES]);
    // This warpgroup's last tile: the next kernel may start.
    if (tile + (PP ? 2 : 1) * (int)gridDim.x >= TILES) {
      launch_dependents();
      triggered = true;
    }
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
      direct_epilogue<P, 1, NI, 16, BN>(acc + rb * R, tile_warp, 0, g, t4, m0 + rb * 64, n0, y,
                                        bias, r);
  }
  if (!triggered) launch_dependents();  // a ping-pong warpgroup without a tile
}

}  // namespace aotune

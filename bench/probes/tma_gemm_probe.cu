// How fast is a TMA-fed, warp-specialized wgmma GEMM on ViT-B/16's batch-64
// Dense shapes, next to cuBLAS on the same shapes? (docs/design/tma-gemm.md)
//
// Problem: Y[M×N] = A[M×K] · W[N×K]ᵀ + bias[N], f16 in, f32 accumulate, f16
// out, every matrix row-major (A and W K-contiguous: W as PyTorch stores a
// Linear weight). M = 64·197 = 12608 rows; qkv N 2304 K 768, out N 768 K 768,
// fc1 N 3072 K 768 (bias only, no GELU), fc2 N 768 K 3072; the same four at
// batch 1 (M = 197, "*_b1"); plus two small ragged shapes (M, N, K none a
// multiple of the tile), checked, not timed.
//
// The kernel (tma_gemm): 384 threads = warpgroup 0, the producer, and
// warpgroups 1-2, the consumers. CTA b takes tiles b, b + gridDim.x, ... (N
// tile fastest): one CTA per tile when the grid is the tile count, persistent
// when it is the SM count (the producer then streams the next tile's k tiles
// while the consumers run the epilogue).
//   - Producer: after setmaxnreg.dec to 40, one thread fills a ring of STAGES
//     stages, each a BM×64 A tile and a BN×64 W tile (128-byte rows in the
//     128-byte swizzle, 1024-byte aligned): per fill it waits for the stage's
//     `empty` barrier, arrives on its `full` barrier with expect_tx =
//     (BM + BN)·128 bytes (out-of-bounds rows and columns are zero-filled by
//     the TMA unit and still count as full box bytes), and issues one
//     cp.async.bulk.tensor.2d per operand, completing on `full`.
//   - Consumers: after setmaxnreg.inc to 232, consumer warpgroup c multiplies
//     rows c·BM/2 .. (c+1)·BM/2 - 1 of the tile (one or two m64 row blocks) by
//     all BN columns with m64nBNk16 wgmmas straight from the swizzled stages;
//     one wgmma group in flight; each warp releases a stage (lane 0 arrives on
//     `empty`) once its wgmma_wait says the stage's wgmmas are done. The
//     epilogue adds the bias and stores f16 pairs from registers (rows ≥ M and
//     columns ≥ N skipped).
// (The second kernel, ws::gemm, below tma_gemm: ping-pong consumers, grouped
// tile order, clusters of 2 with the W tile multicast.)
// Ring protocol (fill f = the CTA's f-th k tile over all its tiles, stage
// f % STAGES, use u = f / STAGES of that stage): `full[s]` (count 1 + tx
// bytes) completes phase u when fill f has landed, consumers wait parity
// u & 1; `empty[s]` (count 8 = the consumer warps) completes phase u when
// fill f has been read, the producer waits for it (parity u & 1) before fill
// f + STAGES. Neither side can run more than STAGES fills ahead of the other,
// so a parity wait never confuses phase u with u ± 2.
//
// Checked against a plain f32 reference GEMM on the GPU (random inputs, fixed
// seed, A ~ U(-1,1), W ~ U(-1,1)/sqrt(K), bias ~ U(-0.1,0.1)): max abs error
// and relative L2 error; rel L2 > 1e-2 is FAIL and not timed. Timed with CUDA
// events: 10 warm-up launches, then the median of 60 launches timed one by
// one (each synchronized), inputs hot in L2 as far as they fit.
// cuBLAS: cublasGemmEx (no bias: the check adds it on the host) and cublasLt
// with the bias epilogue, its heuristic's first algorithm and the fastest of
// its first 8.
//
// Usage: tma_gemm_probe [IMPL]   (IMPL: one name of --list; default all).
// Every measurement prints a line "ROW shape impl µs TFLOP/s max_abs rel_l2
// status"; the run ends with a table of them, its lines starting "TAB ".
// Build without cuBLAS headers: -DNO_CUBLAS (the TMA kernels only).
// Run on the GPU machine: bash bench/probes/tma_gemm_probe.sh.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#ifndef NO_CUBLAS
#include <cublasLt.h>
#include <cublas_v2.h>
#endif

#include "probe_util.cuh"

// ---- device primitives (sm_90a) ----------------------------------------------

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90A_ASM(...) asm volatile(__VA_ARGS__)
#else
#define SM90A_ASM(...) __trap()
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the barrier initializations visible to the async proxy (the TMA
// unit's complete_tx) before the CTA-wide barrier that follows.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives on `bar` (release, CTA scope).
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on `bar` and raises its expected transaction count by `bytes`: the
// phase completes once the arrival count and the bytes have both come in.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Whether the phase of `bar` with parity `parity` has completed (acquire,
// CTA scope; may suspend the thread for a while before answering false).
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until the phase of `bar` with parity `parity` has completed. A wait
// of more than ~2 s (a protocol bug: nothing here runs that long) traps, so
// the launch fails instead of hanging.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  if (mbar_try_wait(bar, parity)) return;
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > 4000000000ll) __trap();
  }
}

__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map))
               : "memory");
}

// Copies the box at (c0 = k, c1 = row) of `map` into shared memory at `dst`
// (1024-byte aligned for the 128-byte swizzle) and completes its bytes on
// `bar`. `map` is the address of a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const CUtensorMap* map, unsigned bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {
  SM90A_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {
  SM90A_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// Shared-memory matrix descriptor of a K-major operand tile with 128-byte
// rows and the 128-byte swizzle (common.cuh / conv_wgmma.cu's wgmma_desc):
// start address >> 4 (bits 0-13), leading byte offset 1 (unused by swizzled
// K-major layouts, bits 16-29), stride byte offset 1024 >> 4 between 8-row
// atoms (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned smem_byte_addr) {
  return (unsigned long long)((smem_byte_addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { SM90A_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  SM90A_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  SM90A_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins the accumulators around the asynchronous wgmmas so the compiler
// neither reads nor moves them while one is in flight.
template <int R> __device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// `Wgmma<N>::run(d, a, b)`: d(64×N, f32) += A(64×16) · B(16×N), f16 operands
// described by wgmma_descs, both K-major. Thread t of the warpgroup holds
// rows 16·(t/32) + (t%32)/4 (+8) at columns 8j + 2·(t%4) (+1) in
// d[4j + 2h + e] (h: the +8 row, e: the +1 column).
#define WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_D16(i) WG_D4(i), WG_D4(i + 4), WG_D4(i + 8), WG_D4(i + 12)
#define WG_D64(i) WG_D16(i), WG_D16(i + 16), WG_D16(i + 32), WG_D16(i + 48)

template <int N> struct Wgmma;
template <> struct Wgmma<128> {
  static __device__ __forceinline__ void run(float (&d)[64], unsigned long long a,
                                             unsigned long long b) {
    SM90A_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WG_D64(0)
        : "l"(a), "l"(b), "r"(1));
  }
};
template <> struct Wgmma<256> {
  static __device__ __forceinline__ void run(float (&d)[128], unsigned long long a,
                                             unsigned long long b) {
    SM90A_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
        "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "
        "%125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : WG_D64(0), WG_D64(64)
        : "l"(a), "l"(b), "r"(1));
  }
};

// ---- the TMA GEMM --------------------------------------------------------------

namespace tma {

constexpr int BK = 64;          // k per stage: 128-byte rows, one swizzle span
constexpr int ROW = 128;        // bytes per tile row
constexpr int CONSUMERS = 2;    // consumer warpgroups
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;  // CUTLASS's split of 168 × 384
static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536, "register file");

// Sizes of a BM×BN tile with a ring of STAGES stages.
template <int BM_, int BN_, int STAGES_> struct Tile {
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_;
  static constexpr int WG_ROWS = BM / CONSUMERS;  // rows per consumer warpgroup
  static constexpr int RB = WG_ROWS / 64;         // m64 row blocks per consumer warpgroup
  static constexpr int R = BN / 2;                // accumulators per thread per row block
  static constexpr int A_BYTES = BM * ROW, W_BYTES = BN * ROW;
  static constexpr int STAGE_BYTES = A_BYTES + W_BYTES;  // expect_tx per fill
  // The ring, then 2·STAGES barriers; 1 KiB of slack for the alignment.
  static constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
  static_assert(WG_ROWS % 64 == 0 && (BN == 128 || BN == 256), "m64nBN wgmma row blocks");
  static_assert(BM <= 256 && BN <= 256, "TMA box rows");
  static_assert(SMEM <= 232448, "227 KiB of shared memory per CTA");
};

// Shared-memory layout: A ring, W ring, full[STAGES], empty[STAGES].
template <class C> struct Ring {
  unsigned base;  // 1024-byte aligned
  __device__ unsigned a(int s) const { return base + s * C::A_BYTES; }
  __device__ unsigned w(int s) const { return base + C::STAGES * C::A_BYTES + s * C::W_BYTES; }
  __device__ unsigned full(int s) const { return base + C::STAGES * C::STAGE_BYTES + 8 * s; }
  __device__ unsigned empty(int s) const { return full(C::STAGES + s); }
};

// The producer thread: every fill of the CTA's tiles, in order.
template <class C>
__device__ void produce(const Ring<C>& ring, const CUtensorMap* map_a, const CUtensorMap* map_w,
                        int tiles, int n_tiles, int k_tiles) {
  prefetch_tensormap(map_a);
  prefetch_tensormap(map_w);
  int fill = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = (tile / n_tiles) * C::BM, n0 = (tile % n_tiles) * C::BN;
    for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
      const int s = fill % C::STAGES, use = fill / C::STAGES;
      if (use > 0) mbar_wait(ring.empty(s), (use - 1) & 1);  // fill - STAGES has been read
      mbar_arrive_expect_tx(ring.full(s), C::STAGE_BYTES);
      tma_load_2d(ring.a(s), map_a, ring.full(s), kt * BK, m0);
      tma_load_2d(ring.w(s), map_w, ring.full(s), kt * BK, n0);
    }
  }
}

// Adds the bias to one m64nBN accumulator block (layout: Wgmma) and stores it
// as f16 at rows row0 .. row0 + 63, columns n0 .. n0 + BN - 1 of y (M×N,
// N even), skipping rows ≥ M and columns ≥ N.
template <int BN>
__device__ __forceinline__ void store_block(const float (&d)[BN / 2], const __half* __restrict__ bias,
                                            __half* __restrict__ y, int row0, int n0, int M, int N) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int r = row0 + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= N) continue;  // N even: col + 1 < N as well
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(bias + col));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r + 8 * h;
      if (row < M) {
        *reinterpret_cast<__half2*>(y + (size_t)row * N + col) =
            __floats2half2_rn(d[4 * j + 2 * h] + b.x, d[4 * j + 2 * h + 1] + b.y);
      }
    }
  }
}

// Issues and commits one k tile's wgmmas for a consumer warpgroup: its
// RB row blocks of 64 rows (A at shared address `a`, row block rb 64 rows
// on) times the BN-column W tile at `w`, accumulating into `acc` (RB · R
// f32 per thread). The caller waits for the group.
template <class C>
__device__ __forceinline__ void mma_k_tile(float (&acc)[C::RB * C::R], unsigned a, unsigned w) {
  constexpr int RB = C::RB, R = C::R;
  __syncwarp();  // the .aligned wgmma instructions need the warp converged
  fence_operands(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) {
      // 16 k = 32 bytes along the swizzled rows; row block rb is 64 rows on.
      Wgmma<C::BN>::run(*reinterpret_cast<float(*)[R]>(acc + rb * R),
                        wgmma_desc(a + rb * 64 * ROW + kk * 32), wgmma_desc(w + kk * 32));
    }
  }
  wgmma_commit();
}

// A consumer warpgroup (c = 0 or 1): its rows of every tile of the CTA.
template <class C>
__device__ void consume(const Ring<C>& ring, const __half* __restrict__ bias, __half* __restrict__ y,
                        int M, int N, int tiles, int n_tiles, int k_tiles) {
  constexpr int RB = C::RB, R = C::R;
  const int c = threadIdx.x / 128 - 1, lane = threadIdx.x % 32;
  float acc[RB * R];
  int fill = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = (tile / n_tiles) * C::BM, n0 = (tile % n_tiles) * C::BN;
#pragma unroll
    for (int i = 0; i < RB * R; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
      const int s = fill % C::STAGES;
      mbar_wait(ring.full(s), (fill / C::STAGES) & 1);
      mma_k_tile<C>(acc, ring.a(s) + c * C::WG_ROWS * ROW, ring.w(s));
      wgmma_wait<1>();  // the previous fill's wgmmas are done: release its stage
      fence_operands(acc);
      if (kt > 0 && lane == 0) mbar_arrive(ring.empty((fill - 1) % C::STAGES));
    }
    wgmma_wait<0>();
    fence_operands(acc);
    if (lane == 0) mbar_arrive(ring.empty((fill - 1) % C::STAGES));
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
      store_block<C::BN>(*reinterpret_cast<const float(*)[R]>(acc + rb * R), bias, y,
                         m0 + c * C::WG_ROWS + rb * 64, n0, M, N);
  }
}

// Y = A·Wᵀ + bias. map_a: A as [K, M] (k innermost), box [64, BM]; map_w: W
// as [K, N], box [64, BN]; both 128-byte swizzle, zero fill. Grid: any size
// (CTA b takes tiles b, b + gridDim.x, ...); THREADS threads; C::SMEM bytes of
// dynamic shared memory.
template <int BM, int BN, int STAGES>
__global__ void __launch_bounds__(THREADS, 1)
    tma_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
             const __half* __restrict__ bias, __half* __restrict__ y, int M, int N, int K) {
  using C = Tile<BM, BN, STAGES>;
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = smem_u32(smem_raw);
  const Ring<C> ring{(raw + 1023u) & ~1023u};
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(ring.full(s), 1);                // the producer's arrive.expect_tx
      mbar_init(ring.empty(s), 4 * CONSUMERS);   // lane 0 of every consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();
  const int n_tiles = (N + BN - 1) / BN;
  const int tiles = ((M + BM - 1) / BM) * n_tiles, k_tiles = (K + BK - 1) / BK;
  if (threadIdx.x < 128) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) produce<C>(ring, &map_a, &map_w, tiles, n_tiles, k_tiles);
    return;
  }
  setmaxnreg_inc<CONSUMER_REGS>();
  consume<C>(ring, bias, y, M, N, tiles, n_tiles, k_tiles);
}

}  // namespace tma

// ---- the second kernel: ping-pong or cooperative, rasterized, clustered ------------
//
// ws::gemm<PP, BM, BN, STAGES, CL, GROUP>: the producer/consumer kernel above
// with the three things CUTLASS's sm90 kernels add; always persistent (CTA b
// takes the tiles b, b + grid, ... of its cluster's sequence).
//   - PP (ping-pong, CUTLASS's KernelTmaWarpSpecializedPingpong): a tile is
//     BM×BN and belongs to ONE consumer warpgroup (BM/64 m64nBN row blocks,
//     ≤ 128 accumulators per thread); the CTA's k-th tile goes to warpgroup
//     k % 2. The producer fills both warpgroups' tiles in that order, so the
//     ring holds fills of tile k and then tile k + 1. An order barrier passes
//     a token between the two warpgroups: a warpgroup issues the wgmmas of a
//     whole tile only while it holds the token and hands it over right after
//     issuing the last k tile's wgmmas (before waiting for them), so the
//     other warpgroup's mainloop follows on the tensor cores at once while
//     this one drains, runs its epilogue, and waits for the token again.
//     !PP (cooperative, as tma_gemm): both warpgroups share each BM×BN tile,
//     BM/2 rows each.
//   - CL (1 or 2): a cluster of CL CTAs along M takes CL vertically adjacent
//     tiles with the same W tile; each CTA loads its own A tile and BN/CL rows
//     of the W tile, multicast to every CTA of the cluster. A stage can then
//     be overwritten by a peer's multicast, so every consumer warp releases a
//     stage in every CTA of the cluster (remote mbarrier arrive) and `empty`
//     counts CL times the consumer warps of a fill.
//   - GROUP (0: N first, as tma_gemm): the tile order of Triton's grouped
//     matmul: tiles walk GROUP m tiles (of the cluster) first, then the next
//     n tile, then the next group of GROUP m tiles, so the ~SM-count tiles in
//     flight at once share ~GROUP A tiles and ~SMs/GROUP W tiles in L2.
//   - Depth: as in tma_gemm, one wgmma group stays in flight: after issuing k
//     tile kt the warp waits until at most one group is pending (wait_group 1:
//     k tile kt - 1's wgmmas are done) and releases kt - 1's stage; the last
//     stage of a tile is released after wait_group 0.
//
// Ring protocol: as tma_gemm's (fill f = the CTA's f-th k tile over all of
// its tiles, in tile order, whichever warpgroup consumes it; stage f %
// STAGES, use u = f / STAGES; full parity u & 1, empty waited for parity
// (u - 1) & 1 before fill f). Counts: full 1 (the local arrive.expect_tx of
// the whole stage's bytes, A + the full W tile; the peer's multicast half
// completes its bytes on the same barrier, possibly before the local expect_tx,
// which is allowed: the phase cannot complete before the local arrive);
// empty = (PP ? 4 : 8) · CL (lane 0 of every consumer warp reading the fill,
// in every CTA of the cluster: fill f is the same tile's same k tile in every
// CTA of the cluster, since they walk the same tile sequence).
// Why parity waits never alias (a wait for phase u must not see phase u - 2
// or u + 1): full[s] phase u + 1 needs fill f + STAGES, which needs empty[s]
// phase u, which needs this very consumer's release of fill f; and a consumer
// never waits for fill f before fill f - STAGES has landed: within a
// warpgroup fills are waited in order, and in PP the order token reaches a
// warpgroup only after the other one waited for every fill of the previous
// tile (all fills before this tile's). The producer's empty wait for use u - 1
// cannot see u: fill f (use u) cannot be released before it was issued, after
// that wait. A peer's multicast of fill f into this CTA needs the peer's empty
// phase u - 1, which includes this CTA's release of fill f - STAGES: so it
// neither overwrites a stage still read here nor lands in full[s] before
// phase u - 1 completed.
// Order barriers (PP only): order[c] (count 128: every thread of the other
// warpgroup) completes phase q when the other warpgroup has issued its q-th
// tile's wgmmas. The CTA's tile k (k ≥ 1, warpgroup c = k % 2) waits for
// tile k - 1's issue: order[c], phase (k - 1) / 2 (warpgroup 1's j-th tile
// k = 2j + 1 waits for warpgroup 0's j-th; warpgroup 0's j-th, k = 2j, for
// warpgroup 1's (j - 1)-th); tile 0 starts at once. order[c] cannot run two
// phases ahead of its waiter: the other warpgroup arrives on it again only
// after its own next wait, on this warpgroup's arrival.
// Fully out-of-bounds boxes (an odd m tile count with CL 2: the last
// cluster's second tile; a W half beyond N) are loaded from a clamped, valid
// coordinate instead: they only feed outputs beyond M or N, which are not
// stored.
namespace ws {

using tma::BK;
using tma::ROW;
using tma::store_block;

template <bool PP_, int BM_, int BN_, int STAGES_, int CL_, int GROUP_> struct Cfg {
  static constexpr bool PP = PP_;
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, CL = CL_, GROUP = GROUP_;
  static constexpr int WG_ROWS = PP ? BM : BM / tma::CONSUMERS;  // rows per consumer warpgroup
  static constexpr int RB = WG_ROWS / 64;                         // m64 row blocks per warpgroup
  static constexpr int R = BN / 2;                                // accumulators per row block
  static constexpr int A_BYTES = BM * ROW, W_BYTES = BN * ROW;
  static constexpr int STAGE_BYTES = A_BYTES + W_BYTES;  // expect_tx per fill (whole W tile)
  static constexpr int W_BOX = BN / CL;                  // W rows this CTA loads (and multicasts)
  static constexpr int EMPTY_COUNT = (PP ? 4 : 4 * tma::CONSUMERS) * CL;
  // The ring, then full[STAGES], empty[STAGES], order[2]; 1 KiB of slack.
  static constexpr int SMEM = STAGES * STAGE_BYTES + (2 * STAGES + 2) * 8 + 1024;
  static_assert(WG_ROWS % 64 == 0 && (BN == 128 || BN == 256), "m64nBN wgmma row blocks");
  static_assert(RB * R <= 128, "at most 128 f32 accumulators per consumer thread");
  static_assert(BM <= 256 && W_BOX <= 256 && W_BOX % 8 == 0, "TMA box rows, whole swizzle atoms");
  static_assert(CL == 1 || CL == 2, "clusters of 1 or 2 along M");
  static_assert(SMEM <= 232448, "227 KiB of shared memory per CTA");
};

template <class C> struct Ring {
  unsigned base;  // 1024-byte aligned
  __device__ unsigned a(int s) const { return base + s * C::A_BYTES; }
  __device__ unsigned w(int s) const { return base + C::STAGES * C::A_BYTES + s * C::W_BYTES; }
  __device__ unsigned full(int s) const { return base + C::STAGES * C::STAGE_BYTES + 8 * s; }
  __device__ unsigned empty(int s) const { return full(C::STAGES + s); }
  __device__ unsigned order(int c) const { return full(2 * C::STAGES + c); }
};

// The CTA's tile sequence: cluster tiles (CL·BM × BN) t = first, first +
// stride, ... < tiles, in the GROUP order; this CTA's tile is m tile
// cm·CL + rank of cluster m tile cm.
template <class C> struct Sched {
  int m_tiles, n_tiles, cm_tiles, tiles, first, stride, rank;
  __device__ Sched(int M, int N) {
    m_tiles = (M + C::BM - 1) / C::BM;
    n_tiles = (N + C::BN - 1) / C::BN;
    cm_tiles = (m_tiles + C::CL - 1) / C::CL;
    tiles = cm_tiles * n_tiles;
    first = blockIdx.x / C::CL;
    stride = gridDim.x / C::CL;
    rank = blockIdx.x % C::CL;
  }
  // Row and column of this CTA's part of cluster tile t.
  __device__ void coords(int t, int& m0, int& n0) const {
    int cm, nt;
    if (C::GROUP <= 0) {
      cm = t / n_tiles;
      nt = t % n_tiles;
    } else {
      const int per_group = C::GROUP * n_tiles, g = t / per_group, first_m = g * C::GROUP;
      const int size_m = min(cm_tiles - first_m, C::GROUP), r = t - g * per_group;
      cm = first_m + r % size_m;
      nt = r / size_m;
    }
    m0 = (cm * C::CL + rank) * C::BM;
    n0 = nt * C::BN;
  }
};

// A TMA load of `map`'s box at (c0, c1) into `dst` of every CTA of the
// cluster in `mask`, completing its bytes on the barrier at `bar`'s offset in
// each of them.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const CUtensorMap* map, unsigned bar,
                                                      int c0, int c1, unsigned short mask) {
  SM90A_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

// Arrives (release, cluster scope) on the barrier at `bar`'s offset in the
// CTA of cluster rank `rank`.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// Releases stage s: lane 0 of a consumer warp, in every CTA of the cluster.
template <class C> __device__ __forceinline__ void release(const Ring<C>& ring, int s) {
  if constexpr (C::CL == 1) {
    mbar_arrive(ring.empty(s));
  } else {
#pragma unroll
    for (int r = 0; r < C::CL; ++r) mbar_arrive_cluster(ring.empty(s), r);
  }
}

template <class C>
__device__ void produce(const Ring<C>& ring, const CUtensorMap* map_a, const CUtensorMap* map_w,
                        const Sched<C>& sched, int M, int N, int k_tiles) {
  prefetch_tensormap(map_a);
  prefetch_tensormap(map_w);
  int fill = 0;
  for (int t = sched.first; t < sched.tiles; t += sched.stride) {
    int m0, n0;
    sched.coords(t, m0, n0);
    const int a_row = min(m0, M - 1);                                 // clamped: see above
    const int w_row = min(n0 + sched.rank * C::W_BOX, N - 1);
    for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
      const int s = fill % C::STAGES, use = fill / C::STAGES;
      if (use > 0) mbar_wait(ring.empty(s), (use - 1) & 1);  // fill - STAGES read cluster-wide
      mbar_arrive_expect_tx(ring.full(s), C::STAGE_BYTES);
      tma_load_2d(ring.a(s), map_a, ring.full(s), kt * BK, a_row);
      if constexpr (C::CL == 1) {
        tma_load_2d(ring.w(s), map_w, ring.full(s), kt * BK, w_row);
      } else {
        tma_load_2d_multicast(ring.w(s) + sched.rank * C::W_BOX * ROW, map_w, ring.full(s), kt * BK,
                              w_row, (unsigned short)((1u << C::CL) - 1));
      }
    }
  }
}

template <class C>
__device__ void consume(const Ring<C>& ring, const __half* __restrict__ bias, __half* __restrict__ y,
                        const Sched<C>& sched, int M, int N, int k_tiles) {
  constexpr int RB = C::RB, R = C::R;
  const int c = threadIdx.x / 128 - 1, lane = threadIdx.x % 32;
  float acc[RB * R];
  int k = 0;  // the CTA's tile count so far (PP: tile k is warpgroup k % 2's)
  for (int t = sched.first; t < sched.tiles; t += sched.stride, ++k) {
    if (C::PP && (k & 1) != c) continue;
    int m0, n0;
    sched.coords(t, m0, n0);
    int fill = k * k_tiles;
    if (C::PP && k > 0) mbar_wait(ring.order(c), ((k - 1) / 2) & 1);  // tile k - 1 issued
#pragma unroll
    for (int i = 0; i < RB * R; ++i) acc[i] = 0.0f;
    const unsigned a_off = C::PP ? 0u : (unsigned)(c * C::WG_ROWS * ROW);
    for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
      const int s = fill % C::STAGES;
      mbar_wait(ring.full(s), (fill / C::STAGES) & 1);
      tma::mma_k_tile<C>(acc, ring.a(s) + a_off, ring.w(s));
      wgmma_wait<1>();  // k tile kt - 1's wgmmas are done: release its stage
      fence_operands(acc);
      if (kt > 0 && lane == 0) release(ring, (fill - 1) % C::STAGES);
    }
    // Every wgmma of the tile is issued: the other warpgroup's turn.
    if (C::PP) mbar_arrive(ring.order(c ^ 1));
    wgmma_wait<0>();
    fence_operands(acc);
    if (lane == 0) release(ring, (fill - 1) % C::STAGES);
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
      store_block<C::BN>(*reinterpret_cast<const float(*)[R]>(acc + rb * R), bias, y,
                         m0 + (C::PP ? 0 : c * C::WG_ROWS) + rb * 64, n0, M, N);
  }
}

// Y = A·Wᵀ + bias. map_a: A as [K, M], box [64, BM]; map_w: W as [K, N], box
// [64, BN / CL]; 128-byte swizzle, zero fill. Grid: a multiple of CL, in
// clusters of CL along x when CL > 1; tma::THREADS threads; C::SMEM bytes of
// dynamic shared memory.
template <bool PP, int BM, int BN, int STAGES, int CL, int GROUP>
__global__ void __launch_bounds__(tma::THREADS, 1)
    gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
         const __half* __restrict__ bias, __half* __restrict__ y, int M, int N, int K) {
  using C = Cfg<PP, BM, BN, STAGES, CL, GROUP>;
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = smem_u32(smem_raw);
  // The same offset in every CTA of a cluster (same kernel, same dynamic
  // shared memory), as multicast and remote arrives need.
  const Ring<C> ring{(raw + 1023u) & ~1023u};
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(ring.full(s), 1);
      mbar_init(ring.empty(s), C::EMPTY_COUNT);
    }
    mbar_init(ring.order(0), 128);
    mbar_init(ring.order(1), 128);
    fence_barrier_init();
  }
  // Every CTA of the cluster has initialized its barriers before any remote
  // arrive or multicast reaches them.
  if constexpr (CL > 1) {
    __syncwarp();  // barrier.cluster.*.aligned: warp 0 converged again
    cluster_sync();
  } else {
    __syncthreads();
  }
  const Sched<C> sched(M, N);
  const int k_tiles = (K + BK - 1) / BK;
  if (threadIdx.x < 128) {
    setmaxnreg_dec<tma::PRODUCER_REGS>();
    if (threadIdx.x == 0) produce<C>(ring, &map_a, &map_w, sched, M, N, k_tiles);
    __syncwarp();
  } else {
    setmaxnreg_inc<tma::CONSUMER_REGS>();
    consume<C>(ring, bias, y, sched, M, N, k_tiles);
  }
  // No CTA leaves while a peer may still arrive on its barriers (the
  // multicast bytes are all awaited by its own consumers).
  if constexpr (CL > 1) {
    __syncwarp();
    cluster_sync();
  }
}

}  // namespace ws

// ---- reference and inputs ----------------------------------------------------------

// A deterministic U(-scale, scale) value for element i of stream `seed`.
__device__ __forceinline__ float hash_uniform(unsigned seed, size_t i, float scale) {
  unsigned long long z = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return scale * (2.0f * (float)(z >> 40) / 16777216.0f - 1.0f);
}

__global__ void fill_uniform(__half* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2half_rn(hash_uniform(seed, i, scale));
}

// ref[m][n] = sum_k A[m][k]·W[n][k] + bias[n], f32, 16×16 tiles in shared memory.
__global__ void reference_gemm(const __half* __restrict__ a, const __half* __restrict__ w,
                               const __half* __restrict__ bias, float* __restrict__ ref, int M, int N,
                               int K) {
  __shared__ float as[16][17], ws[16][17];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx, wrow = blockIdx.x * 16 + ty;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    as[ty][tx] = (row < M && k0 + tx < K) ? __half2float(a[(size_t)row * K + k0 + tx]) : 0.0f;
    ws[ty][tx] = (wrow < N && k0 + tx < K) ? __half2float(w[(size_t)wrow * K + k0 + tx]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) acc = fmaf(as[ty][kk], ws[tx][kk], acc);
    __syncthreads();
  }
  if (row < M && col < N) ref[(size_t)row * N + col] = acc + __half2float(bias[col]);
}

// ---- host --------------------------------------------------------------------------

struct Shape {
  const char* name;
  int M, N, K;
  bool timed;
};
static const Shape SHAPES[] = {
    {"ragged", 1000, 328, 136, false},  // M, N, K ragged against every tile (K % 8 == 0 for TMA)
    {"qkv", 12608, 2304, 768, true},
    {"out", 12608, 768, 768, true},
    {"fc1", 12608, 3072, 768, true},
    {"fc2", 12608, 768, 3072, true},
    // Odd m tile counts at BM 128 (9) and 256 (5): the clamped fully
    // out-of-bounds tile of a cluster of 2.
    {"ragged2", 1100, 392, 200, false},
    // Batch 1 (M = 197): how far the vendor's small-M GEMM is from ours.
    {"qkv_b1", 197, 2304, 768, true},
    {"out_b1", 197, 768, 768, true},
    {"fc1_b1", 197, 3072, 768, true},
    {"fc2_b1", 197, 768, 3072, true},
};

// One shape's device buffers and its f32 reference (host copy).
struct Problem {
  Shape shape;
  int M, N, K;
  __half *a = nullptr, *w = nullptr, *bias = nullptr, *y = nullptr;
  std::vector<float> ref;
  std::vector<__half> bias_host;
};

static Problem make_problem(const Shape& s) {
  Problem p;
  p.shape = s;
  p.M = s.M;
  p.N = s.N;
  p.K = s.K;
  const size_t na = (size_t)s.M * s.K, nw = (size_t)s.N * s.K, ny = (size_t)s.M * s.N;
  CHECK(cudaMalloc(&p.a, na * 2));
  CHECK(cudaMalloc(&p.w, nw * 2));
  CHECK(cudaMalloc(&p.bias, s.N * 2));
  CHECK(cudaMalloc(&p.y, ny * 2));
  fill_uniform<<<1024, 256>>>(p.a, na, 1, 1.0f);
  fill_uniform<<<1024, 256>>>(p.w, nw, 2, 1.0f / std::sqrt((float)s.K));
  fill_uniform<<<64, 256>>>(p.bias, s.N, 3, 0.1f);
  float* ref;
  CHECK(cudaMalloc(&ref, ny * 4));
  reference_gemm<<<dim3((s.N + 15) / 16, (s.M + 15) / 16), dim3(16, 16)>>>(p.a, p.w, p.bias, ref, s.M,
                                                                          s.N, s.K);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  p.ref.resize(ny);
  p.bias_host.resize(s.N);
  CHECK(cudaMemcpy(p.ref.data(), ref, ny * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(p.bias_host.data(), p.bias, s.N * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(ref));
  return p;
}

static void free_problem(Problem& p) {
  CHECK(cudaFree(p.a));
  CHECK(cudaFree(p.w));
  CHECK(cudaFree(p.bias));
  CHECK(cudaFree(p.y));
}

struct Error {
  double max_abs, rel_l2;
  bool ok() const { return rel_l2 <= 1e-2; }  // false for NaN too
};

// p.y against the reference; `adds_bias`: whether the kernel added the bias
// (otherwise it is added here).
static Error compare(const Problem& p, bool adds_bias) {
  std::vector<__half> y((size_t)p.M * p.N);
  CHECK(cudaMemcpy(y.data(), p.y, y.size() * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0, max_abs = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    double v = __half2float(y[i]);
    if (!adds_bias) v += __half2float(p.bias_host[i % p.N]);
    const double d = v - p.ref[i];
    num += d * d;
    den += (double)p.ref[i] * p.ref[i];
    if (!(std::fabs(d) <= max_abs)) max_abs = std::fabs(d);  // NaN sticks
  }
  return {max_abs, std::sqrt(num / den)};
}

// Median µs of `launch` over `runs` launches after `warmup`, each timed alone.
static double median_us(const std::function<void(cudaStream_t)>& launch, cudaStream_t s,
                        int warmup = 10, int runs = 60) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch(s);
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms;
  for (int i = 0; i < runs; ++i) {
    CHECK(cudaEventRecord(a, s));
    launch(s);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

// One way to run a shape: a label and its launch.
struct Variant {
  std::string label;
  std::function<void(cudaStream_t)> launch;
};

// An implementation: its variants for a problem (several: the table shows the
// first and the fastest); whether it adds the bias.
struct Impl {
  const char* name;
  bool adds_bias;
  std::function<std::vector<Variant>(const Problem&)> variants;
};

static int g_sms = 0;

// ---- tensor maps ----------------------------------------------------------------

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult q;
    void* p = nullptr;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
      std::exit(1);
    }
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}

// The map of a row-major f16 matrix rows×K (K contiguous) in boxes of
// 64 k × box_rows rows, 128-byte swizzle, out-of-bounds elements read as 0.
static CUtensorMap make_map(const __half* base, int rows, int K, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)K * 2};  // bytes, a multiple of 16
  const cuuint32_t box[2] = {(cuuint32_t)tma::BK, (cuuint32_t)box_rows};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(base),
                                    dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled(rows %d, K %d, box %d): error %d\n", rows, K, box_rows,
                 (int)r);
    std::exit(1);
  }
  return map;
}

// The TMA kernel for p: one CTA per tile, or (persistent) min(tiles, SMs).
template <int BM, int BN, int STAGES>
static std::vector<Variant> tma_variants(const Problem& p, bool persistent, const std::string& label) {
  using C = tma::Tile<BM, BN, STAGES>;
  auto kernel = tma::tma_gemm<BM, BN, STAGES>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  static bool reported = false;
  if (!reported) {
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, kernel));
    std::printf("  %dx%d s%d: %d registers at launch, %zu B local, %d B dynamic smem\n", BM, BN, STAGES,
                fa.numRegs, fa.localSizeBytes, C::SMEM);
    reported = true;
  }
  // Kept as bytes (a CUtensorMap is 64-byte aligned; the closure need not be).
  struct Maps {
    unsigned char a[sizeof(CUtensorMap)], w[sizeof(CUtensorMap)];
  } maps;
  const CUtensorMap ma = make_map(p.a, p.M, p.K, BM), mw = make_map(p.w, p.N, p.K, BN);
  std::memcpy(maps.a, &ma, sizeof ma);
  std::memcpy(maps.w, &mw, sizeof mw);
  const int tiles = ((p.M + BM - 1) / BM) * ((p.N + BN - 1) / BN);
  const int grid = persistent ? std::min(tiles, g_sms) : tiles;
  const __half* bias = p.bias;
  __half* y = p.y;
  const int M = p.M, N = p.N, K = p.K;
  return {{label, [=](cudaStream_t s) {
             CUtensorMap a, w;
             std::memcpy(&a, maps.a, sizeof a);
             std::memcpy(&w, maps.w, sizeof w);
             kernel<<<grid, tma::THREADS, C::SMEM, s>>>(a, w, bias, y, M, N, K);
           }}};
}

template <int BM, int BN, int STAGES>
static Impl tma_impl(const char* name, bool persistent) {
  return {name, true, [=](const Problem& p) { return tma_variants<BM, BN, STAGES>(p, persistent, name); }};
}

// ws::gemm for p: persistent, min(tiles, SMs) CTAs, or with CL > 1 as many
// clusters as fit at once (cudaOccupancyMaxActiveClusters), at most one per
// cluster tile.
template <bool PP, int BM, int BN, int STAGES, int CL, int GROUP>
static std::vector<Variant> ws_variants(const Problem& p, const std::string& label) {
  using C = ws::Cfg<PP, BM, BN, STAGES, CL, GROUP>;
  auto kernel = ws::gemm<PP, BM, BN, STAGES, CL, GROUP>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  static int max_clusters = 0;
  if (max_clusters == 0) {
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, kernel));
    max_clusters = g_sms / CL;
    if (CL > 1) {
      cudaLaunchAttribute attrs[2];
      const cudaLaunchConfig_t cfg = probe_launch_config(attrs, CL * max_clusters, tma::THREADS, C::SMEM,
                                                         nullptr, CL, false);
      CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &cfg));
      if (max_clusters < 1) {
        std::fprintf(stderr, "%s: no cluster of %d fits\n", label.c_str(), CL);
        std::exit(1);
      }
    }
    std::printf("  %s: %d registers at launch, %zu B local, %d B dynamic smem, %d CTAs at once\n",
                label.c_str(), fa.numRegs, fa.localSizeBytes, C::SMEM, max_clusters * CL);
  }
  struct Maps {
    unsigned char a[sizeof(CUtensorMap)], w[sizeof(CUtensorMap)];
  } maps;
  const CUtensorMap ma = make_map(p.a, p.M, p.K, BM), mw = make_map(p.w, p.N, p.K, C::W_BOX);
  std::memcpy(maps.a, &ma, sizeof ma);
  std::memcpy(maps.w, &mw, sizeof mw);
  const int cm_tiles = ((p.M + BM - 1) / BM + CL - 1) / CL, n_tiles = (p.N + BN - 1) / BN;
  const int grid = CL * std::min(cm_tiles * n_tiles, max_clusters);
  const __half* bias = p.bias;
  __half* y = p.y;
  const int M = p.M, N = p.N, K = p.K;
  return {{label, [=](cudaStream_t s) {
             CUtensorMap a, w;
             std::memcpy(&a, maps.a, sizeof a);
             std::memcpy(&w, maps.w, sizeof w);
             cudaLaunchAttribute attrs[2];
             const cudaLaunchConfig_t cfg =
                 probe_launch_config(attrs, grid, tma::THREADS, C::SMEM, s, CL, false);
             CHECK(cudaLaunchKernelEx(&cfg, kernel, a, w, bias, y, M, N, K));
           }}};
}

// PP: ping-pong, BM×BN per consumer warpgroup; otherwise cooperative, BM×BN
// per CTA. CL: CTAs per cluster along M (W multicast). GROUP: grouped tile
// order (0: N first).
template <bool PP, int BM, int BN, int STAGES, int CL, int GROUP>
static Impl ws_impl(const char* name) {
  return {name, true,
          [=](const Problem& p) { return ws_variants<PP, BM, BN, STAGES, CL, GROUP>(p, name); }};
}

// ---- cuBLAS ---------------------------------------------------------------------

#ifndef NO_CUBLAS
#define CUBLAS_CHECK(x)                                                                     \
  do {                                                                                      \
    const int s_ = (int)(x);                                                                \
    if (s_ != 0) {                                                                          \
      std::fprintf(stderr, "%s:%d %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, s_);     \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

// Row-major Y (M×N) = A·Wᵀ is column-major Yᵀ (N×M) = Wᵀ·A with W and A
// column-major K×N and K×M: the "TN" GEMM, m = N, n = M.
static std::vector<Variant> gemmex_variants(const Problem& p) {
  static cublasHandle_t h = nullptr;
  if (!h) CUBLAS_CHECK(cublasCreate(&h));
  const __half *a = p.a, *w = p.w;
  __half* y = p.y;
  const int M = p.M, N = p.N, K = p.K;
  return {{"cublasGemmEx", [=](cudaStream_t s) {
             const float alpha = 1.0f, beta = 0.0f;
             CUBLAS_CHECK(cublasSetStream(h, s));
             CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, CUDA_R_16F, K, a,
                                       CUDA_R_16F, K, &beta, y, CUDA_R_16F, N, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
           }}};
}

// cublasLt's descriptors for one problem (the same TN GEMM, bias epilogue).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, y = nullptr;
  ~LtPlan() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (y) cublasLtMatrixLayoutDestroy(y);
  }
};

static std::vector<Variant> lt_variants(const Problem& p) {
  static cublasLtHandle_t lt = nullptr;
  static void* workspace = nullptr;
  constexpr size_t WS = 32u << 20;
  if (!lt) {
    CUBLAS_CHECK(cublasLtCreate(&lt));
    CHECK(cudaMalloc(&workspace, WS));
  }
  auto plan = std::make_shared<LtPlan>();
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  const void* bias = p.bias;
  const cudaDataType_t bias_type = CUDA_R_16F;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                              sizeof bias_type));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w, CUDA_R_16F, p.K, p.N, p.K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16F, p.K, p.M, p.K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->y, CUDA_R_16F, p.N, p.M, p.N));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS,
                                                    sizeof WS));
  cublasLtMatmulHeuristicResult_t found[8];
  int n = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, plan->op, plan->w, plan->a, plan->y, plan->y, pref, 8,
                                              found, &n));
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<Variant> out;
  const __half *a = p.a, *w = p.w;
  __half* y = p.y;
  for (int i = 0; i < n; ++i) {
    const cublasLtMatmulAlgo_t algo = found[i].algo;
    out.push_back({"cublasLt#" + std::to_string(i), [=](cudaStream_t s) {
                     const float alpha = 1.0f, beta = 0.0f;
                     CUBLAS_CHECK(cublasLtMatmul(lt, plan->op, &alpha, w, plan->w, a, plan->a, &beta, y,
                                                 plan->y, y, plan->y, &algo, workspace, WS, s));
                   }});
  }
  return out;
}
#endif

static std::vector<Impl> impls() {
  std::vector<Impl> v;
#ifndef NO_CUBLAS
  v.push_back({"cublas", false, gemmex_variants});
  v.push_back({"cublaslt", true, lt_variants});
#endif
  v.push_back(tma_impl<128, 128, 6>("tma128x128s6", false));
  v.push_back(tma_impl<128, 128, 6>("tma128x128s6p", true));
  v.push_back(tma_impl<128, 256, 4>("tma128x256s4", false));
  v.push_back(tma_impl<128, 256, 4>("tma128x256s4p", true));
  v.push_back(tma_impl<256, 128, 4>("tma256x128s4", false));
  v.push_back(tma_impl<256, 128, 4>("tma256x128s4p", true));
  // ws::gemm: ping-pong (pp, tile per consumer warpgroup) and cooperative
  // (co, tile per CTA), g8: grouped order with 8 m tiles, c2: clusters of 2
  // along M with the W tile multicast.
  v.push_back(ws_impl<true, 128, 128, 6, 1, 0>("pp128x128s6"));
  v.push_back(ws_impl<true, 128, 128, 6, 1, 8>("pp128x128s6g8"));
  v.push_back(ws_impl<true, 128, 128, 6, 2, 8>("pp128x128s6c2g8"));
  v.push_back(ws_impl<true, 64, 256, 5, 1, 8>("pp64x256s5g8"));
  v.push_back(ws_impl<true, 64, 256, 5, 2, 8>("pp64x256s5c2g8"));
  v.push_back(ws_impl<false, 256, 128, 4, 1, 8>("co256x128s4g8"));
  v.push_back(ws_impl<false, 256, 128, 4, 2, 8>("co256x128s4c2g8"));
  v.push_back(ws_impl<false, 128, 256, 4, 2, 8>("co128x256s4c2g8"));
  return v;
}

// ---- the run --------------------------------------------------------------------

struct Row {
  std::string shape, impl;
  double us, tflops;
  Error err;
};

static void print_row(const Row& r) {
  char us[32] = "-", tf[32] = "-";
  if (r.us > 0) {
    std::snprintf(us, sizeof us, "%.1f", r.us);
    std::snprintf(tf, sizeof tf, "%.1f", r.tflops);
  }
  std::printf("ROW %-7s %-24s %9s %7s %9.2e %9.2e %s\n", r.shape.c_str(), r.impl.c_str(), us, tf,
              r.err.max_abs, r.err.rel_l2, r.err.ok() ? "ok" : "FAIL");
  std::fflush(stdout);
}

// Checks one variant on p and, when it passes and the shape is timed, times it.
static Row measure(const Problem& p, const Variant& v, bool adds_bias, cudaStream_t s) {
  // NaN everywhere first, so that a stale result cannot pass (on s: the
  // launches below do not wait for the legacy stream).
  CHECK(cudaMemsetAsync(p.y, 0xFF, (size_t)p.M * p.N * 2, s));
  v.launch(s);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(s));  // a watchdog trap (hang) ends the process here
  Row r{p.shape.name, v.label, 0, 0, compare(p, adds_bias)};
  if (r.err.ok() && p.shape.timed) {
    r.us = median_us(v.launch, s);
    r.tflops = 2.0 * p.M * p.N * (double)p.K / (r.us * 1e-6) / 1e12;
  }
  return r;
}

int main(int argc, char** argv) {
  const std::vector<Impl> all = impls();
  if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
    for (const Impl& i : all) std::printf("%s\n", i.name);
    return 0;
  }
  const char* only = argc > 1 ? argv[1] : nullptr;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, impl %s\n", prop.name, g_sms, only ? only : "all");
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Row> table;
  for (const Shape& shape : SHAPES) {
    Problem p = make_problem(shape);
    for (const Impl& impl : all) {
      if (only && std::strcmp(only, impl.name) != 0) continue;
      std::vector<Row> rows;
      for (const Variant& v : impl.variants(p)) {
        rows.push_back(measure(p, v, impl.adds_bias, s));
        print_row(rows.back());
      }
      if (rows.empty()) continue;
      table.push_back(rows.front());
      // The fastest passing variant, when it is not the first.
      const Row* best = nullptr;
      for (const Row& r : rows)
        if (r.us > 0 && (!best || r.us < best->us)) best = &r;
      if (best && best != &rows.front()) {
        table.push_back(*best);
        table.back().impl = std::string(impl.name) + " best " + best->impl;
      }
    }
    free_problem(p);
  }
  // The table: one line per row, "TAB " first, so that the .sh can gather
  // the tables of several processes.
  std::printf("\nTAB %-7s %-30s %9s %7s %9s\n", "shape", "impl", "us", "TFLOP/s", "rel_l2");
  for (const Row& r : table) {
    if (r.us > 0)
      std::printf("TAB %-7s %-30s %9.1f %7.1f %9.2e\n", r.shape.c_str(), r.impl.c_str(), r.us, r.tflops,
                  r.err.rel_l2);
    else
      std::printf("TAB %-7s %-30s %9s %7s %9.2e %s\n", r.shape.c_str(), r.impl.c_str(), "-", "-",
                  r.err.rel_l2, r.err.ok() ? "(checked, not timed)" : "FAIL");
  }
  return 0;
}

// How should the SPLIT CTAs of a cluster sum their split-K slices at batch 1?
// (docs/history.md, "Cluster split-K"). Each CTA of a cluster
// of SPLIT holds FR accumulators per thread (T = 128 threads: one
// production-sized tile slice, e.g. a 32×32 mma tile with 2×2 warps is FR 8),
// made by a dependent FMA chain of CHAIN steps that stands in for the k loop.
// The variants differ only in how the slices are summed and who writes the
// output tile (FR·T floats per tile, fp32, to global):
//   old     every rank stores its slice locally; cluster barrier; rank 0 reads
//           ranks 0..SPLIT-1 through DSMEM, one slice after another; barrier;
//           rank 0 writes (the production reduction up to session 11);
//   now     the production reduction (common.cuh's cluster_splitk_reduce,
//           included from the templates): ranks ≠ 0 store locally; barrier;
//           rank 0 reads the others with every load in flight (SPLIT ≤ 4) or
//           one slice at a time (above), arrives, writes, waits at exit;
//   push    ranks ≠ 0 store their slice into rank 0's shared memory
//           (st.shared::cluster, a region of its own); one barrier; rank 0
//           sums locally and writes (a barrier phase split around the k loop
//           first makes sure every CTA of the cluster has started);
//   spread  a reduce-scatter: rank r owns fragments [r·FR/SPLIT, (r+1)·FR/SPLIT);
//           every rank pushes the others' fragments into their regions; one
//           barrier; each rank sums its own share locally and writes it;
//   none    no reduction (each rank writes its slice): the floor.
// Timed as `bench --per-layer` times: a CUDA graph of 10 launches, all but the
// first programmatic (griddepcontrol.wait at entry, launch_dependents after
// the chain), 200 replays after 20 warm-up, median, per launch. Every variant
// but `none` is checked against a CPU sum first.
// STATUS: written in session 12 (no device time left to run it); compiled with
// nvcc 13.0 for sm_90a. Run: bash bench/probes/cluster_reduce_probe.sh.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_util.cuh"

// The production reduction itself (the `now` variant), with the prelude the
// generated kernels.cu gives it (codegen/cuda/source.rs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
namespace aotune {
__device__ float splitk_partials[1];
__device__ unsigned int splitk_counters[1];
}  // namespace aotune
#include "../../model-spec/compiler/src/codegen/cuda/templates/common.cuh"


constexpr int T = 128;
enum Variant { OLD = 0, NOW = 1, PUSH = 2, SPREAD = 3, NONE = 4 };
static const char* const NAMES[] = {"old", "now", "push", "spread", "none"};

__device__ __forceinline__ float ld_remote(unsigned addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_remote(unsigned addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

// The two members of a conv's params that cluster_split_finish reads.
template <int SPLIT>
struct ClusterSplit {
  static constexpr int SPLIT_K = SPLIT;
  static constexpr bool CLUSTER_SPLIT = true;
};

// Shared floats each variant needs per CTA.
template <int V, int SPLIT, int FR>
constexpr int smem_floats() {
  return V == PUSH ? (SPLIT - 1) * FR * T : V == NONE ? 1 : FR * T;
}

// in: [tiles·SPLIT][FR][T] seeds; out: [tiles][FR][T] (for `none`,
// [tiles·SPLIT][FR][T]).
template <int V, int SPLIT, int FR, int CHAIN>
__global__ void __launch_bounds__(T) reduce_kernel(const float* __restrict__ in, float* __restrict__ out) {
  extern __shared__ __align__(16) float part[];
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int tid = threadIdx.x, cta = blockIdx.x, tile = cta / SPLIT;
  const unsigned rank = V == NONE ? 0u : cluster_rank();
  // Remote stores may only target CTAs that have started: the pushing
  // variants arrive here and wait just before their first store.
  if constexpr (V == PUSH || V == SPREAD) cluster_arrive();
  float acc[FR];
#pragma unroll
  for (int f = 0; f < FR; ++f) acc[f] = in[(size_t(cta) * FR + f) * T + tid];
  // The k loop's stand-in: a dependent chain per fragment, results unchanged
  // up to rounding that is the same on every run (x·1 + 0).
  const float one = in[0] * 0.0f + 1.0f, zero = in[0] * 0.0f;
#pragma unroll 1
  for (int i = 0; i < CHAIN; ++i)
#pragma unroll
    for (int f = 0; f < FR; ++f) acc[f] = fmaf(acc[f], one, zero);
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  float* o = out + size_t(tile) * FR * T;

  if constexpr (V == NONE) {
#pragma unroll
    for (int f = 0; f < FR; ++f) out[(size_t(cta) * FR + f) * T + tid] = acc[f];
  } else if constexpr (V == OLD) {
#pragma unroll
    for (int f = 0; f < FR; ++f) part[f * T + tid] = acc[f];
    cluster_sync();
    if (rank == 0) {
#pragma unroll 1
      for (int s = 0; s < SPLIT; ++s) {
        const unsigned r = cluster_addr(part, s);
#pragma unroll
        for (int f = 0; f < FR; ++f) {
          const float v = ld_remote(r + unsigned(f * T + tid) * 4u);
          acc[f] = s == 0 ? v : acc[f] + v;
        }
      }
    }
    cluster_sync();
    if (rank == 0)
#pragma unroll
      for (int f = 0; f < FR; ++f) o[f * T + tid] = acc[f];
  } else if constexpr (V == NOW) {
    if (!aotune::cluster_splitk_reduce<FR, T, SPLIT>(acc, part)) return;
#pragma unroll
    for (int f = 0; f < FR; ++f) o[f * T + tid] = acc[f];
    aotune::cluster_split_finish<ClusterSplit<SPLIT>>();
  } else if constexpr (V == PUSH) {
    cluster_wait();
    if (rank != 0) {
      const unsigned r = cluster_addr(part, 0) + unsigned((rank - 1) * FR * T + tid) * 4u;
#pragma unroll
      for (int f = 0; f < FR; ++f) st_remote(r + unsigned(f * T) * 4u, acc[f]);
      cluster_sync();  // release: the pushes are visible to rank 0
      return;
    }
    cluster_sync();
#pragma unroll
    for (int s = 1; s < SPLIT; ++s)
#pragma unroll
      for (int f = 0; f < FR; ++f) acc[f] += part[((s - 1) * FR + f) * T + tid];
#pragma unroll
    for (int f = 0; f < FR; ++f) o[f * T + tid] = acc[f];
  } else {  // SPREAD
    constexpr int SH = FR / SPLIT;  // fragments each rank finishes
    static_assert(FR % SPLIT == 0, "spread needs FR % SPLIT == 0");
    // Region on every rank: [SPLIT][SH][T]; slot q holds rank q's share.
    cluster_wait();
#pragma unroll
    for (int q = 0; q < SPLIT; ++q) {
      const unsigned r = cluster_addr(part, q) + unsigned(rank * SH * T + tid) * 4u;
#pragma unroll
      for (int j = 0; j < SH; ++j) st_remote(r + unsigned(j * T) * 4u, acc[q * SH + j]);
    }
    cluster_sync();
#pragma unroll
    for (int j = 0; j < SH; ++j) {
      float sum = part[j * T + tid];  // rank 0's, then 1, 2, …: the fixed order
#pragma unroll
      for (int q = 1; q < SPLIT; ++q) sum += part[(q * SH + j) * T + tid];
      o[(rank * SH + j) * T + tid] = sum;
    }
  }
}

template <int V, int SPLIT, int FR, int CHAIN>
static cudaError_t launch(int tiles, const float* in, float* out, cudaStream_t s, bool pdl) {
  auto k = reduce_kernel<V, SPLIT, FR, CHAIN>;
  cudaLaunchAttribute a[2];
  cudaLaunchConfig_t c = probe_launch_config(a, tiles * SPLIT, T, smem_floats<V, SPLIT, FR>() * sizeof(float), s,
                                             V == NONE ? 1 : SPLIT, pdl);
  return cudaLaunchKernelEx(&c, k, in, out);
}

template <int V, int SPLIT, int FR, int CHAIN>
static void run(int tiles, const std::vector<float>& seeds, const float* in, float* out, cudaStream_t s) {
  auto k = reduce_kernel<V, SPLIT, FR, CHAIN>;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem_floats<V, SPLIT, FR>() * sizeof(float))));
  const size_t n_out = size_t(tiles) * FR * T;
  double err = 0.0;
  if (V != NONE) {
    CHECK(cudaMemset(out, 0, n_out * sizeof(float)));
    CHECK((launch<V, SPLIT, FR, CHAIN>(tiles, in, out, s, false)));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> got(n_out);
    CHECK(cudaMemcpy(got.data(), out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
    for (int t = 0; t < tiles; ++t)
      for (int e = 0; e < FR * T; ++e) {
        float want = 0.0f;
        for (int q = 0; q < SPLIT; ++q) want += seeds[(size_t(t) * SPLIT + q) * FR * T + e];
        err = std::max(err, double(std::fabs(got[size_t(t) * FR * T + e] - want)));
      }
  }
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 10; ++i) CHECK((launch<V, SPLIT, FR, CHAIN>(tiles, in, out, s, i > 0)));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  const double ms = graph_median_ms(ge, s);
  std::printf("  %-7s %6.2f µs per launch  %s\n", NAMES[V], ms * 100.0,
              V == NONE ? "(no reduction)" : err < 1e-3 ? "ok" : "MISMATCH");
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
}

template <int SPLIT, int FR, int CHAIN>
static void shape(const char* what, int tiles, cudaStream_t s) {
  std::printf("%s: %d tiles × split %d, FR %d, chain %d\n", what, tiles, SPLIT, FR, CHAIN);
  const size_t n_in = size_t(tiles) * SPLIT * FR * T;
  std::vector<float> seeds(n_in);
  for (size_t i = 0; i < n_in; ++i) seeds[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  float *in, *out;
  CHECK(cudaMalloc(&in, n_in * sizeof(float)));
  CHECK(cudaMalloc(&out, n_in * sizeof(float)));
  CHECK(cudaMemcpy(in, seeds.data(), n_in * sizeof(float), cudaMemcpyHostToDevice));
  run<NONE, SPLIT, FR, CHAIN>(tiles, seeds, in, out, s);
  run<OLD, SPLIT, FR, CHAIN>(tiles, seeds, in, out, s);
  run<NOW, SPLIT, FR, CHAIN>(tiles, seeds, in, out, s);
  run<PUSH, SPLIT, FR, CHAIN>(tiles, seeds, in, out, s);
  if constexpr (FR % SPLIT == 0) run<SPREAD, SPLIT, FR, CHAIN>(tiles, seeds, in, out, s);
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
}

int main() {
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // ResNet-50 b1 cluster tasks (models/resnet50.best.json): stage-3 1×1
  // reduce, mma 32×32 w2x2 split 4 (7 × 8 tiles); stage-4 3×3, mma 32×32
  // w2x2 split 8 (2 × 16 tiles); stage-4 3×3 s2, w2x1 (T 64 there; FR 16
  // here with T 128 moves the same bytes) split 8; stage-3 3×3 split 6.
  shape<4, 8, 200>("stage-3 1x1 reduce", 56, s);
  shape<8, 8, 400>("stage-4 3x3", 32, s);
  shape<8, 16, 400>("stage-4 3x3 s2 (bytes of w2x1)", 16, s);
  shape<6, 8, 300>("stage-3 3x3", 56, s);
  return 0;
}

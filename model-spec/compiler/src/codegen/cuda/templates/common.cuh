// aotune: device helpers every generated kernels.cu starts with.
//
// Storage types are float, __half and __nv_bfloat16; arithmetic is always
// f32. Values are converted once when they enter a kernel (to_f32) and once
// when they leave it (from_f32, round to nearest even), as the CPU reference
// does. Nothing here allocates or touches host code, so the file compiles
// with nvcc and NVRTC alike.

namespace aotune {

// ---- programmatic dependent launch (sm_90) -------------------------------
//
// Launched as a programmatic dependent launch, a kernel may start while the
// previous one on the stream still runs; `grid_dependency_wait` blocks until
// that kernel has completed and its writes are visible. Before the wait a
// kernel may read only what no kernel writes (its weights and bias), and
// write nothing. `launch_dependents` lets the next kernel be scheduled once
// every CTA of this one has executed it (or exited). Most kernels do both at
// entry; the tensor-core convs first issue the copies of their prologue's
// weight tiles, then wait (`load_prologue`, conv_mma.cu), and let the next
// kernel start after their k loop, so that its CTAs are placed on the SMs as
// this kernel's drain (triggered at entry, a small grid's successor crowded
// onto the SMs this one left free, measured 22% slower at batch 1), while
// the epilogue runs. A config with `early_trigger` lets it start right after
// the wait instead (`aotune refine --candidates trigger` picks those per
// layer, in the model's graph). Without the launch attribute both are no-ops.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// `p`, as a value the compiler cannot know before the asm statement that
// yields it. A kernel that waits mid-way (not at entry) reads the previous
// kernel's output through the returned pointer: the "memory" clobber of the
// wait does not keep loads through a `const __restrict__` pointer below it
// (the compiler may treat that memory as unchanging for the whole kernel and
// hoist the loads; it did, in the GEMV at batch 8), but a load cannot move
// above the statement that produces its address.
template <class T>
__device__ __forceinline__ T* after_dependency_wait(T* p) {
  asm volatile("" : "+l"(p));
  return p;
}

// -inf as a constant expression that nvcc and NVRTC both accept (NVRTC
// lacks __builtin_huge_valf).
__device__ __forceinline__ constexpr float neg_inf() { return __builtin_bit_cast(float, 0xff800000u); }

// ---- conversions ---------------------------------------------------------

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Rounds an f32 to tf32 (nearest, ties away from zero), as ir::round_tf32.
__device__ __forceinline__ float round_tf32(float x) {
  unsigned int r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

// A matrix-product operand: rounded to tf32 when the graph's precision says so.
template <bool TF32> __device__ __forceinline__ float operand(float x) {
  return TF32 ? round_tf32(x) : x;
}

// ---- vector memory access --------------------------------------------------

template <int BYTES> struct RawBytes;
template <> struct RawBytes<1> { typedef unsigned char type; };
template <> struct RawBytes<2> { typedef unsigned short type; };
template <> struct RawBytes<4> { typedef unsigned int type; };
template <> struct RawBytes<8> { typedef uint2 type; };
template <> struct RawBytes<16> { typedef uint4 type; };

// Loads V consecutive elements (one access of V * sizeof(T) bytes, which must
// be aligned to that size) and widens them to f32.
template <int V, class T>
__device__ __forceinline__ void load_f32(const T* __restrict__ p, float* out) {
  typedef typename RawBytes<V * sizeof(T)>::type R;
  R raw = *reinterpret_cast<const R*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_f32(e[i]);
}

// Rounds V f32 values to T and stores them with one access.
template <int V, class T>
__device__ __forceinline__ void store_f32(T* __restrict__ p, const float* v) {
  typedef typename RawBytes<V * sizeof(T)>::type R;
  R raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < V; ++i) e[i] = from_f32<T>(v[i]);
  *reinterpret_cast<R*>(p) = raw;
}

// ---- epilogue --------------------------------------------------------------

enum Activation { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2 };

template <int ACT>
__device__ __forceinline__ float activate(float x, float lo, float hi) {
  if (ACT == ACT_RELU) return fmaxf(x, 0.0f);
  if (ACT == ACT_CLIP) return fminf(fmaxf(x, lo), hi);
  return x;
}

// Loads V consecutive elements like load_f32, in accesses of at most 16
// bytes (an f32 bias for 8 half outputs is two 16-byte loads).
template <int V, class T>
__device__ __forceinline__ void load_f32_wide(const T* __restrict__ p, float* out) {
  constexpr int A = (V * sizeof(T) > 16) ? 16 / (int)sizeof(T) : V;
  static_assert(V % A == 0, "whole accesses");
#pragma unroll
  for (int i = 0; i < V / A; ++i) load_f32<A>(p + i * A, out + i * A);
}

// Finishes V consecutive outputs in place (columns n..n+V-1 of a GEMM
// row): act(acc + bias[n] + r) in f32, r the V residual values
// residual[m, n..] (read by the caller).
template <class P, int V>
__device__ __forceinline__ void epilogue_apply(const typename P::TBias* __restrict__ bias,
                                               const float* r, int n, float* v) {
  if (P::HAS_BIAS) {
    float b[V];
    load_f32_wide<V>(bias + n, b);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] += b[i];
  }
  if (P::HAS_RES) {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] += r[i];
  }
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = activate<P::ACT>(v[i], P::CLIP_LO, P::CLIP_HI);
}

// epilogue_apply, then the store of the V outputs at y[m * P::GEMM_N + n],
// one rounding. With V > 1 the caller guarantees the V columns are all in
// range and the accesses aligned (GEMM_N % V == 0, n % V == 0); the store
// is one access, so V * sizeof(TOut) is at most 16 bytes.
template <class P, int V>
__device__ __forceinline__ void epilogue_finish(typename P::TOut* __restrict__ y,
                                                const typename P::TBias* __restrict__ bias,
                                                const float* r, int m, int n, float* v) {
  epilogue_apply<P, V>(bias, r, n, v);
  store_f32<V>(y + m * P::GEMM_N + n, v);
}

// epilogue_finish with the residual read here, from global memory.
template <class P, int V>
__device__ __forceinline__ void epilogue_store(typename P::TOut* __restrict__ y,
                                               const typename P::TBias* __restrict__ bias,
                                               const typename P::TRes* __restrict__ res,
                                               int m, int n, float* v) {
  float r[V];
  if (P::HAS_RES) load_f32_wide<V>(res + m * P::GEMM_N + n, r);
  epilogue_finish<P, V>(y, bias, r, m, n, v);
}

// Finishes V candidate columns n..n+V-1 of row m, checking each column
// against GEMM_N and storing the valid ones one at a time.
template <class P, int V>
__device__ __forceinline__ void epilogue_store_checked(typename P::TOut* __restrict__ y,
                                                       const typename P::TBias* __restrict__ bias,
                                                       const typename P::TRes* __restrict__ res,
                                                       int m, int n, const float* v) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (n + i < P::GEMM_N) {
      float one = v[i];
      epilogue_store<P, 1>(y, bias, res, m, n + i, &one);
    }
  }
}

// ---- split-K: "the last CTA reduces" ---------------------------------------
//
// Every CTA of a split-K launch writes its FR accumulators to the module's
// partials workspace (slice z, tile, fragment, thread: coalesced), fences,
// and counts itself in on the tile's counter. The CTA that arrives last sums
// the slices in the fixed order z = 0..SPLIT-1 (deterministic whichever CTA
// is last; its own slice is read back like the others), resets the counter to 0 for the next launch (graph replays
// included), and runs the epilogue. Launches using the workspace must not
// overlap, which a single stream or a captured graph guarantees.

template <int FR, int T, int SPLIT>
__device__ __forceinline__ bool splitk_reduce(float (&acc)[FR], int tile, int num_tiles) {
  __shared__ unsigned int is_last;
  const int tid = threadIdx.x;
  float* slice = splitk_partials + (size_t)blockIdx.z * num_tiles * FR * T + (size_t)tile * FR * T;
#pragma unroll
  for (int f = 0; f < FR; ++f) __stcg(slice + f * T + tid, acc[f]);
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const unsigned int before = atomicAdd(splitk_counters + tile, 1u);
    is_last = (before == SPLIT - 1) ? 1u : 0u;
  }
  __syncthreads();
  if (!is_last) return false;
  __threadfence();
  // Slices outer and not unrolled, so only FR sums are live; the CTA's own
  // slice is read back too (it is in L2), which keeps the order fixed.
#pragma unroll 1
  for (int s = 0; s < SPLIT; ++s) {
    const float* part = splitk_partials + (size_t)s * num_tiles * FR * T + (size_t)tile * FR * T;
#pragma unroll
    for (int f = 0; f < FR; ++f) {
      const float v = __ldcg(part + f * T + tid);
      acc[f] = (s == 0) ? v : acc[f] + v;
    }
  }
  if (tid == 0) splitk_counters[tile] = 0u;
  return true;
}

}  // namespace aotune

namespace aotune {

__device__ __forceinline__ unsigned int cluster_ctarank() {
  unsigned int rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif
  return rank;
}

// ---- split-K inside a thread-block cluster (sm_90) --------------------------
//
// The SPLIT CTAs of one output tile form a cluster along z (the kernel is
// declared __cluster_dims__(1, 1, SPLIT), so cluster rank == blockIdx.z).
// Ranks 1..SPLIT-1 store their FR accumulators in their own shared memory
// (`part`, FR * T floats, fragment-major like the global partials) and arrive
// at a cluster barrier. Rank 0 keeps its own in registers, waits there, and
// adds the slices of ranks 1..SPLIT-1 in that fixed order through
// distributed shared memory (the same order, so the same bits, as
// splitk_reduce); up to 4 slices, every remote load is issued before the
// sums need them, so they cost about one round trip. A second barrier phase
// keeps every rank's shared memory alive until rank 0 has read it: rank 0
// arrives there as soon as its loads are done and goes on to the epilogue;
// the other ranks wait there and leave; rank 0 waits out the phase at the
// very end (cluster_split_finish), when everyone has long arrived. No global
// workspace, no counters, no round trip through L2. The caller has finished
// reading `part` (the pipeline stages) in every warp before the call.

__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_barrier() {
  cluster_arrive();
  cluster_wait();
}

template <int FR, int T, int SPLIT>
__device__ __forceinline__ bool cluster_splitk_reduce(float (&acc)[FR], float* part) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int tid = threadIdx.x;
  const unsigned int rank = cluster_ctarank();
  if (rank != 0) {
#pragma unroll
    for (int f = 0; f < FR; ++f) part[f * T + tid] = acc[f];
    cluster_barrier();  // the slice is visible to rank 0
    cluster_barrier();  // rank 0 has read it
    return false;
  }
  cluster_barrier();
  const unsigned int local = static_cast<unsigned int>(__cvta_generic_to_shared(part));
  auto add_slice = [&](int s) {
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(s));
#pragma unroll
    for (int f = 0; f < FR; ++f) {
      float v;
      asm volatile("ld.shared::cluster.f32 %0, [%1];\n"
                   : "=f"(v)
                   : "r"(remote + (unsigned int)(f * T + tid) * 4u));
      acc[f] += v;
    }
  };
  // Up to 4 slices, every load is issued before the sums need them (one
  // round trip); from 6 on, one slice after another was measured faster
  // (b1, session 12: split 4 −0.25 µs, split 8 +0.3–0.6 µs unrolled).
  if constexpr (SPLIT <= 4) {
#pragma unroll
    for (int s = 1; s < SPLIT; ++s) add_slice(s);
  } else {
#pragma unroll 1
    for (int s = 1; s < SPLIT; ++s) add_slice(s);
  }
  cluster_arrive();  // the loads above have returned: the other ranks may leave
  return true;
#else
  return false;
#endif
}

// ---- split-K as a reduce-scatter inside a cluster (sm_90) -----------------
//
// The other way to sum a cluster's slices (split_reduce "spread",
// P::CLUSTER_SPREAD): every rank finishes a share of the tile instead of
// rank 0 all of it. A thread's FR accumulators are FR / 2 pairs (the two
// adjacent columns of one mma fragment row: acc[2p], acc[2p + 1]); pair p
// belongs to rank p % SPLIT. Every rank pushes each pair to its owner
// (st.shared::cluster) into slot [rank][p / SPLIT] of the owner's spread
// region, shared memory past everything else the kernel uses, so a push may
// land while the owner still runs its k loop. One cluster barrier (release,
// then acquire), and each owner sums its pairs over slots 0..SPLIT-1 in rank
// order, the order of splitk_reduce and cluster_splitk_reduce (the same
// bits), and finishes them with the direct epilogue (spread_owns). Remote
// stores may only target a CTA that has started: every CTA arrives at a first
// barrier phase at entry (cluster_spread_start) and waits for it just before
// its pushes, long after everyone arrived. Session 13's probe
// (bench/cluster_reduce_probe.cu, "spread"): split 8 10.97 µs against 12.83
// for cluster_splitk_reduce. (The config renders CLUSTER_SPREAD only with
// SPLIT_K > 1.)

// At kernel entry of a spread-reducing kernel: this CTA has started.
template <class P>
__device__ __forceinline__ void cluster_spread_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (P::CLUSTER_SPREAD)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}

// Whether cluster rank `rank` finishes pair p of its accumulators (every
// pair, but in a spread tile).
template <class P>
__device__ __forceinline__ bool spread_owns(int p, unsigned int rank) {
  return !P::CLUSTER_SPREAD || p % P::SPLIT_K == static_cast<int>(rank);
}

// Sums the pairs this rank owns (in place, in acc); whether it owns any.
// `region`: SPLIT * ceil(FR / 2 / SPLIT) * T float2s of this CTA's shared
// memory that nothing else uses.
template <int FR, int T, int SPLIT>
__device__ __forceinline__ bool cluster_spread_reduce(float (&acc)[FR], float2* region,
                                                      unsigned int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Pairs of the thread's accumulators, and the most any rank owns.
  constexpr int PAIRS = FR / 2, SLOTS = (PAIRS + SPLIT - 1) / SPLIT;
  static_assert(FR % 2 == 0, "accumulators in pairs");
  const int tid = threadIdx.x;
  cluster_wait();  // the entry phase: every CTA of the cluster has started
  const unsigned int local = static_cast<unsigned int>(__cvta_generic_to_shared(region));
#pragma unroll
  for (int p = 0; p < PAIRS; ++p) {
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(p % SPLIT));
    remote += (unsigned int)((int(rank) * SLOTS + p / SPLIT) * T + tid) * 8u;
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(remote), "f"(acc[2 * p]),
                 "f"(acc[2 * p + 1])
                 : "memory");
  }
  cluster_barrier();  // release the pushes; acquire everyone else's
  if (static_cast<int>(rank) >= PAIRS) return false;
#pragma unroll
  for (int p = 0; p < PAIRS; ++p) {
    if (p % SPLIT != static_cast<int>(rank)) continue;
    float2 sum = region[(p / SPLIT) * T + tid];  // rank 0's slice
#pragma unroll
    for (int s = 1; s < SPLIT; ++s) {
      const float2 v = region[(s * SLOTS + p / SPLIT) * T + tid];
      sum.x += v.x;
      sum.y += v.y;
    }
    acc[2 * p] = sum.x;
    acc[2 * p + 1] = sum.y;
  }
  return true;
#else
  return false;
#endif
}

// Rank 0 of a cluster split-K tile, at the end of its kernel: waits out the
// barrier phase it arrived at in cluster_splitk_reduce (every rank arrived
// there long before, so this does not stall).
template <class P>
__device__ __forceinline__ void cluster_split_finish() {
  if (P::SPLIT_K > 1 && P::CLUSTER_SPLIT) cluster_wait();
}

}  // namespace aotune

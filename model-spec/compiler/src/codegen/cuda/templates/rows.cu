// aotune: row kernels (rows.rs). A row-major value whose reduced or
// normalized axes are its trailing ones is ROWS rows of L elements: LayerNorm,
// GroupNorm (rows = (image, group)), MeanVarianceNorm, LpNorm, Softmax,
// LogSoftmax and Hardmax over the last axes, and reductions of the trailing
// axes (one output per row). The arithmetic is reduce.cu's (red_*, norm_*).
//
// A row worker is a group of THREADS lanes of a warp (WARP: L <= 2048;
// THREADS is 32, or 16, 8, 4 for rows of fewer vectors, so that a warp
// takes 32 / THREADS rows at once) or one CTA of THREADS = BLOCK threads
// (longer rows). Thread t of THREADS owns the V-element vectors t,
// t + THREADS, ... of the row (16-byte loads where L allows, coalesced) and
// keeps them in registers (SLOTS vectors), so x is read from global memory
// once; a row too long for the register budget (STREAM) is read again for
// each pass instead. Statistics are folded per thread in column order, then
// combined with xor shuffles inside the group (every lane gets the same
// bits) and, for a CTA, across warps through shared memory in warp order:
// deterministic, though in another order than the CPU reference's
// sequential sum (an f32 rounding apart). Every lane of a warp takes part in
// every shuffle: a group past the last row idles through the loop. Hardmax combines (value, column)
// candidates: a NaN beats a number, a larger value a smaller one, and of
// equals the lower column, which is the reference's first maximum.
// scale_at(row, j) and bias_at(row, j) index the affine operands of column j
// (SCALE_CONTIG / BIAS_CONTIG: index j itself, loaded as vectors).

namespace aotune {

// The first xor distance of a row worker's shuffles: its lanes' span.
template <class P>
__host__ __device__ constexpr int row_span() {
  return P::WARP ? P::THREADS / 2 : 16;
}

// `v` combined over the THREADS threads of a row worker with `merge`
// (commutative). The trailing barrier lets the next call reuse `part`.
template <class P, class F>
__device__ __forceinline__ float row_allreduce(float v, float* part, F merge) {
#pragma unroll
  for (int o = row_span<P>(); o > 0; o >>= 1) v = merge(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (!P::WARP) {
    constexpr int WARPS = P::THREADS / 32;
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    v = part[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) v = merge(v, part[w]);
    __syncthreads();
  }
  return v;
}

// Whether Hardmax candidate (v, c) beats (top, at).
__device__ __forceinline__ bool argmax_beats(float v, int c, float top, int at) {
  const bool vn = v != v, tn = top != top;
  if (vn != tn) return vn;
  if (!vn && v != top) return v > top;
  return c < at;
}

// The winning column of the row's Hardmax candidates.
template <class P>
__device__ __forceinline__ int row_argmax(float top, int at, float* part, int* part_at) {
#pragma unroll
  for (int o = row_span<P>(); o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, top, o);
    const int c = __shfl_xor_sync(0xffffffffu, at, o);
    if (argmax_beats(v, c, top, at)) top = v, at = c;
  }
  if constexpr (!P::WARP) {
    constexpr int WARPS = P::THREADS / 32;
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = top, part_at[threadIdx.x / 32] = at;
    __syncthreads();
    top = part[0], at = part_at[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w)
      if (argmax_beats(part[w], part_at[w], top, at)) top = part[w], at = part_at[w];
    __syncthreads();
  }
  return at;
}

// The affine scale and bias of columns j0 .. j0 + V - 1 of `row`.
template <class P>
__device__ __forceinline__ void row_affine(const typename P::TScale* __restrict__ scale,
                                           const typename P::TBias* __restrict__ bias, int row,
                                           int j0, float* sc, float* bi) {
  constexpr int V = P::V;
  if constexpr (!P::HAS_SCALE) {
#pragma unroll
    for (int u = 0; u < V; ++u) sc[u] = 1.0f;
  } else if constexpr (P::SCALE_CONTIG) {
    load_f32_wide<V>(scale + j0, sc);
  } else {
#pragma unroll
    for (int u = 0; u < V; ++u) sc[u] = to_f32(scale[P::scale_at(row, j0 + u)]);
  }
  if constexpr (!P::HAS_BIAS) {
#pragma unroll
    for (int u = 0; u < V; ++u) bi[u] = 0.0f;
  } else if constexpr (P::BIAS_CONTIG) {
    load_f32_wide<V>(bias + j0, bi);
  } else {
#pragma unroll
    for (int u = 0; u < V; ++u) bi[u] = to_f32(bias[P::bias_at(row, j0 + u)]);
  }
}

template <class P>
__device__ __forceinline__ void rows(const typename P::TIn* __restrict__ x,
                                     const typename P::TScale* __restrict__ scale,
                                     const typename P::TBias* __restrict__ bias,
                                     typename P::TOut* __restrict__ y) {
  typedef typename P::TOut TOut;
  constexpr int V = P::V, T = P::THREADS, NVEC = P::L / V, SLOTS = P::SLOTS;
  constexpr int M = P::MODE, K = P::KIND, REGS = P::STREAM ? 1 : SLOTS;
  constexpr int WARPS = P::WARP ? 1 : T / 32, PER_WARP = P::WARP ? 32 / T : 1;
  static_assert(P::L % V == 0, "whole vectors");
  static_assert(P::WARP ? (32 % T == 0) : (T % 32 == 0), "whole groups, whole warps");
  static_assert(P::STREAM || SLOTS * T >= NVEC, "the slots hold the row");
  __shared__ float part[WARPS];
  __shared__ int part_at[M == NORM_HARDMAX ? WARPS : 1];
  const int t = threadIdx.x % T;
  const int group = P::WARP ? threadIdx.x % 32 / T : 0;
  const int worker = P::WARP ? blockIdx.x * (P::BLOCK / 32) + threadIdx.x / 32 : blockIdx.x;
  const int workers = P::WARP ? gridDim.x * (P::BLOCK / 32) : gridDim.x;
  const float count = (float)P::L;
  for (int first = worker * PER_WARP; first < P::ROWS; first += workers * PER_WARP) {
    const int row = first + group;
    const bool active = PER_WARP == 1 || row < P::ROWS;
    const typename P::TIn* xr = x + row * P::L;
    float v[REGS][V];
    if constexpr (!P::STREAM) {
#pragma unroll
      for (int i = 0; i < SLOTS; ++i)
        if (active && i * T + t < NVEC) load_f32<V>(xr + (i * T + t) * V, v[i]);
    }
    // g(k, e) for each vector k of this thread's share, e its V values
    // (none in a group past the last row).
    auto each_vector = [&](auto&& g) {
      if (!active) return;
      if constexpr (P::STREAM) {
        // Not unrolled further: whole-row unrolling would hoist every load
        // (with the affine operands) and spill.
#pragma unroll 2
        for (int k = t; k < NVEC; k += T) {
          float e[V];
          load_f32<V>(xr + k * V, e);
          g(k, e);
        }
      } else {
#pragma unroll
        for (int i = 0; i < SLOTS; ++i)
          if (i * T + t < NVEC) g(i * T + t, v[i]);
      }
    };
    // f(j, value) for each element of this thread's share, j increasing.
    auto each = [&](auto&& f) {
      each_vector([&](int k, const float(&e)[V]) {
#pragma unroll
        for (int u = 0; u < V; ++u) f(k * V + u, e[u]);
      });
    };
    auto sum = [](float a, float b) { return a + b; };
    if constexpr (M == NORM_REDUCE) {
      float a = red_init<K>();
      each([&](int, float e) { a = red_fold<K>(a, e); });
      a = row_allreduce<P>(a, part, [](float p, float q) { return red_merge<K>(p, q); });
      float exps = 0.0f;
      if constexpr (K == RED_LOG_SUM_EXP) {
        if (is_finite(a)) each([&](int, float e) { exps += expf(e - a); });
        exps = row_allreduce<P>(exps, part, sum);
      }
      if (active && t == 0) y[row] = from_f32<TOut>(red_finish<K>(a, count, exps));
    } else if constexpr (M == NORM_HARDMAX) {
      float top = neg_inf();
      int at = 0x7fffffff;
      each([&](int j, float e) {
        if (argmax_beats(e, j, top, at)) top = e, at = j;
      });
      const int best = row_argmax<P>(top, at, part, part_at);
      for (int k = t; active && k < NVEC; k += T) {
        float out[V];
#pragma unroll
        for (int u = 0; u < V; ++u) out[u] = (k * V + u == best) ? 1.0f : 0.0f;
        store_f32<V>(y + row * P::L + k * V, out);
      }
    } else {
      float a = norm_init<M>();
      each([&](int, float e) { a = norm_fold<M>(a, e); });
      a = row_allreduce<P>(a, part, [](float p, float q) { return norm_merge<M>(p, q); });
      const float c = norm_center<M>(a, count);
      float s = 0.0f;
      if constexpr (norm_two_pass(M)) {
        float b = 0.0f;
        each([&](int, float e) { b += norm_term<M>(e, c); });
        s = norm_spread<M>(row_allreduce<P>(b, part, sum), count, P::EPS);
      }
      each_vector([&](int k, const float(&e)[V]) {
        float sc[V], bi[V], out[V];
        row_affine<P>(scale, bias, row, k * V, sc, bi);
#pragma unroll
        for (int u = 0; u < V; ++u) out[u] = norm_out<M>(e[u], c, s, sc[u], bi[u]);
        store_f32<V>(y + row * P::L + k * V, out);
      });
    }
  }
}

}  // namespace aotune

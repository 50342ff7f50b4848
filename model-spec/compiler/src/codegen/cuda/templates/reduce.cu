// aotune: reductions and per-slice normalizations of row-major values
// (any layout for the global pools), and the arithmetic rows.cu shares.
//
// ReduceKind and NormMode are the codes of rows.rs's Reduction and NormMode:
// red_* fold elements into an accumulator, merge two partial accumulators
// (tree reductions) and finish; norm_* do the same for a normalization's
// statistics (first pass: max, sum, |x| or x^2 sum; second pass: sum of
// exp(x - max) or of squared deviations) and compute each output. All of it
// is f32, in the CPU reference's formulas (reference/reduce.rs, softmax.rs,
// normalize.rs): max and min propagate NaN (GlobalMaxPool's RED_POOL_MAX
// drops it, as f32::max does), LayerNorm is (x - mean) * (1 / sqrt(var + eps))
// * scale + bias with var the mean of squared deviations.
//
// reduce: one thread per V consecutive outputs (output physical order).
// P::base(j) is the input offset of output j's first reduced element and
// P::reduced(r) the offset of its r-th one in row-major order of the reduced
// axes, so the fold runs in the CPU reference's order; a mean divides the f32
// sum by the count once. For an NHWC global pool the V outputs are V
// consecutive channels: a warp reads whole pixels.
//
// global_pool_nhwc: a global average/max pool of NHWC images
// (global_pool.rs). CTA b owns LANES channel vectors (V channels each) of
// image b / (CV / LANES); thread (lane, slice) reduces pixels slice,
// slice + SLICES, ... of its vector with V-element loads, then the CTA
// combines the SLICES partial results in shared memory in slice order
// (deterministic) and writes V * LANES outputs; a mean divides the f32 sum
// by H*W once, as the reference does.
//
// normalize: one thread per slice (the elements base(j) + reduced(r), r <
// COUNT), up to three passes over it in the reference's order (statistic,
// second statistic, outputs written at the same offsets): Softmax,
// LogSoftmax and Hardmax along an axis, LpNorm, MeanVarianceNorm, and
// LayerNorm/GroupNorm rows too short for rows.cu; scale_at(j, r) and
// bias_at(j, r) index the affine operands.

namespace aotune {

__device__ __forceinline__ constexpr float pos_inf() { return __builtin_bit_cast(float, 0x7f800000u); }

__device__ __forceinline__ bool is_finite(float v) { return fabsf(v) < pos_inf(); }

enum ReduceKind {
  RED_SUM = 0, RED_MEAN = 1, RED_MAX = 2, RED_MIN = 3, RED_PROD = 4, RED_L1 = 5, RED_L2 = 6,
  RED_SUM_SQUARE = 7, RED_LOG_SUM = 8, RED_LOG_SUM_EXP = 9, RED_POOL_MAX = 10
};

template <int K>
__device__ __forceinline__ float red_init() {
  if (K == RED_MAX || K == RED_POOL_MAX || K == RED_LOG_SUM_EXP) return neg_inf();
  if (K == RED_MIN) return pos_inf();
  return K == RED_PROD ? 1.0f : 0.0f;
}

// Element x folded into accumulator a.
template <int K>
__device__ __forceinline__ float red_fold(float a, float x) {
  if (K == RED_MAX || K == RED_LOG_SUM_EXP) return (x != x || x > a) ? x : a;
  if (K == RED_MIN) return (x != x || x < a) ? x : a;
  if (K == RED_POOL_MAX) return fmaxf(a, x);
  if (K == RED_PROD) return a * x;
  if (K == RED_L1) return a + fabsf(x);
  if (K == RED_L2 || K == RED_SUM_SQUARE) return a + x * x;
  return a + x;
}

// Two partial accumulators combined.
template <int K>
__device__ __forceinline__ float red_merge(float a, float b) {
  if (K == RED_L1 || K == RED_L2 || K == RED_SUM_SQUARE) return a + b;
  return red_fold<K>(a, b);
}

// The result from the accumulator; `exps` is the log-sum-exp's second pass,
// the sum of exp(x - a) over the elements (taken only when a is finite).
template <int K>
__device__ __forceinline__ float red_finish(float a, float count, float exps) {
  if (K == RED_MEAN) return a / count;
  if (K == RED_L2) return sqrtf(a);
  if (K == RED_LOG_SUM) return logf(a);
  if (K == RED_LOG_SUM_EXP) return is_finite(a) ? logf(exps) + a : a;
  return a;
}

// NORM_REDUCE: no normalization, rows.cu reduces each row to one value.
enum NormMode {
  NORM_REDUCE = 0, NORM_SOFTMAX = 1, NORM_LOG_SOFTMAX = 2, NORM_HARDMAX = 3, NORM_AFFINE = 4,
  NORM_MVN = 5, NORM_LP1 = 6, NORM_LP2 = 7
};

__host__ __device__ constexpr bool norm_two_pass(int m) {
  return m == NORM_SOFTMAX || m == NORM_LOG_SOFTMAX || m == NORM_AFFINE || m == NORM_MVN;
}

template <int M>
__device__ __forceinline__ float norm_init() {
  return (M == NORM_SOFTMAX || M == NORM_LOG_SOFTMAX) ? neg_inf() : 0.0f;
}

// First pass: the max (softmaxes, NaN-dropping like the reference's
// f32::max), the sum (mean), or the sum of |x| or x^2 (Lp norms).
template <int M>
__device__ __forceinline__ float norm_fold(float a, float x) {
  if (M == NORM_SOFTMAX || M == NORM_LOG_SOFTMAX) return fmaxf(a, x);
  if (M == NORM_LP1) return a + fabsf(x);
  if (M == NORM_LP2) return a + x * x;
  return a + x;
}

template <int M>
__device__ __forceinline__ float norm_merge(float a, float b) {
  return (M == NORM_SOFTMAX || M == NORM_LOG_SOFTMAX) ? fmaxf(a, b) : a + b;
}

// What the outputs are taken relative to: the max, the mean or the Lp norm.
template <int M>
__device__ __forceinline__ float norm_center(float a, float count) {
  if (M == NORM_AFFINE || M == NORM_MVN) return a / count;
  if (M == NORM_LP2) return sqrtf(a);
  return a;
}

// Second pass term of element x, for the two-pass modes.
template <int M>
__device__ __forceinline__ float norm_term(float x, float c) {
  if (M == NORM_SOFTMAX || M == NORM_LOG_SOFTMAX) return expf(x - c);
  const float d = x - c;
  return d * d;
}

// From the second pass's sum b: the softmax denominator, log of it, 1/std
// (LayerNorm, GroupNorm) or the MVN denominator sqrt(var) + 1e-9.
template <int M>
__device__ __forceinline__ float norm_spread(float b, float count, float eps) {
  if (M == NORM_LOG_SOFTMAX) return logf(b);
  if (M == NORM_AFFINE) return 1.0f / sqrtf(b / count + eps);
  if (M == NORM_MVN) return sqrtf(b / count) + 1e-9f;
  return b;
}

// Output of element x given the center c, the spread s and its affine
// scale and bias (1 and 0 where the op has none).
template <int M>
__device__ __forceinline__ float norm_out(float x, float c, float s, float scale, float bias) {
  if (M == NORM_SOFTMAX) return expf(x - c) / s;
  if (M == NORM_LOG_SOFTMAX) return x - c - s;
  if (M == NORM_AFFINE) return (x - c) * s * scale + bias;
  if (M == NORM_MVN) return (x - c) / s;
  return x / c;
}

template <class P>
__device__ __forceinline__ void reduce(const typename P::TIn* __restrict__ x,
                                       typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, K = P::KIND, TOTAL = P::OUT_TOTAL / V;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    const int base = P::base(j * V);
    float acc[V], exps[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = red_init<K>(), exps[e] = 0.0f;
#pragma unroll 4
    for (int r = 0; r < P::COUNT; ++r) {
      float v[V];
      load_f32<V>(x + base + P::reduced(r), v);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = red_fold<K>(acc[e], v[e]);
    }
    if constexpr (K == RED_LOG_SUM_EXP) {
#pragma unroll 4
      for (int r = 0; r < P::COUNT; ++r) {
        float v[V];
        load_f32<V>(x + base + P::reduced(r), v);
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (is_finite(acc[e])) exps[e] += expf(v[e] - acc[e]);
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = red_finish<K>(acc[e], (float)P::COUNT, exps[e]);
    store_f32<V>(y + j * V, acc);
  }
}

template <class P>
__device__ __forceinline__ void global_pool_nhwc(const typename P::TIn* __restrict__ x,
                                                 typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, C = P::C, HW = P::HW, LANES = P::LANES, SLICES = P::SLICES;
  constexpr int CV = C / V, GROUPS = (CV + LANES - 1) / LANES, WIDTH = LANES * V;
  __shared__ float part[SLICES][WIDTH];
  const int lane = threadIdx.x % LANES, slice = threadIdx.x / LANES;
  const int n = blockIdx.x / GROUPS, group = blockIdx.x % GROUPS;
  const int cv = group * LANES + lane;
  float acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = P::MAX ? neg_inf() : 0.0f;
  if (cv < CV) {
    const typename P::TIn* base = x + (size_t)n * HW * C + cv * V;
#pragma unroll 4
    for (int p = slice; p < HW; p += SLICES) {
      float v[V];
      load_f32<V>(base + p * C, v);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = P::MAX ? fmaxf(acc[e], v[e]) : acc[e] + v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) part[slice][lane * V + e] = acc[e];
  __syncthreads();
  for (int t = threadIdx.x; t < WIDTH; t += LANES * SLICES) {
    const int c = group * WIDTH + t;
    if (c >= C) break;
    float a = part[0][t];
#pragma unroll 4
    for (int s = 1; s < SLICES; ++s) a = P::MAX ? fmaxf(a, part[s][t]) : a + part[s][t];
    if (!P::MAX) a = a / (float)HW;
    y[(size_t)n * C + c] = from_f32<typename P::TOut>(a);
  }
}

template <class P>
__device__ __forceinline__ void normalize(const typename P::TIn* __restrict__ x,
                                          const typename P::TScale* __restrict__ scale,
                                          const typename P::TBias* __restrict__ bias,
                                          typename P::TOut* __restrict__ y) {
  typedef typename P::TOut TOut;
  constexpr int M = P::MODE, N = P::COUNT;
  static_assert(N > 0, "slices are not empty");
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < P::GROUPS; j += gridDim.x * blockDim.x) {
    const int base = P::base(j);
    if constexpr (M == NORM_HARDMAX) {
      // The first maximum; the first NaN if there is one.
      int best = 0;
      float top = to_f32(x[base + P::reduced(0)]);
      for (int r = 1; r < N; ++r) {
        const float v = to_f32(x[base + P::reduced(r)]);
        if (top == top && (v != v || v > top)) best = r, top = v;
      }
      for (int r = 0; r < N; ++r) y[base + P::reduced(r)] = from_f32<TOut>(r == best ? 1.0f : 0.0f);
    } else {
      float a = norm_init<M>();
      for (int r = 0; r < N; ++r) a = norm_fold<M>(a, to_f32(x[base + P::reduced(r)]));
      const float c = norm_center<M>(a, (float)N);
      float s = 0.0f;
      if constexpr (norm_two_pass(M)) {
        float b = 0.0f;
        for (int r = 0; r < N; ++r) b += norm_term<M>(to_f32(x[base + P::reduced(r)]), c);
        s = norm_spread<M>(b, (float)N, P::EPS);
      }
      for (int r = 0; r < N; ++r) {
        const float sc = P::HAS_SCALE ? to_f32(scale[P::scale_at(j, r)]) : 1.0f;
        const float bi = P::HAS_BIAS ? to_f32(bias[P::bias_at(j, r)]) : 0.0f;
        const int at = base + P::reduced(r);
        y[at] = from_f32<TOut>(norm_out<M>(to_f32(x[at]), c, s, sc, bi));
      }
    }
  }
}

}  // namespace aotune

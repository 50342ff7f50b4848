// aotune: reductions: GlobalAveragePool, GlobalMaxPool and ReduceMean (any
// layout, any axes), and Softmax along one axis of a row-major value.
//
// reduce: one thread per V consecutive outputs (output physical order).
// P::base(j) is the input offset of output j's first reduced element and
// P::reduced(r) the offset of its r-th one in row-major order of the reduced
// axes, so the sum runs in the CPU reference's order; a mean divides the f32
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
// softmax: one thread per (outer, inner) slice, three passes over the axis
// (max, sum of exp(x - max), exp(x - max) / sum), all in f32.

namespace aotune {

template <class P>
__device__ __forceinline__ void reduce(const typename P::TIn* __restrict__ x,
                                       typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, TOTAL = P::OUT_TOTAL / V;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    const int base = P::base(j * V);
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = P::MAX ? neg_inf() : 0.0f;
#pragma unroll 4
    for (int r = 0; r < P::COUNT; ++r) {
      float v[V];
      load_f32<V>(x + base + P::reduced(r), v);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = P::MAX ? fmaxf(acc[e], v[e]) : acc[e] + v[e];
    }
    if (!P::MAX) {
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = acc[e] / (float)P::COUNT;
    }
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
__device__ __forceinline__ void softmax(const typename P::TIn* __restrict__ x,
                                        typename P::TOut* __restrict__ y) {
  constexpr int D = P::AXIS_DIM, INNER = P::INNER, TOTAL = P::OUTER * INNER;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    const int base = (j / INNER) * D * INNER + j % INNER;
    float mx = neg_inf();
    for (int d = 0; d < D; ++d) mx = fmaxf(mx, to_f32(x[base + d * INNER]));
    float sum = 0.0f;
    for (int d = 0; d < D; ++d) sum += expf(to_f32(x[base + d * INNER]) - mx);
    for (int d = 0; d < D; ++d)
      y[base + d * INNER] = from_f32<typename P::TOut>(expf(to_f32(x[base + d * INNER]) - mx) / sum);
  }
}

}  // namespace aotune

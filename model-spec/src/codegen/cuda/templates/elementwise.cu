// aotune: elementwise kernels: Convert (any layout and dtype to any other),
// view copies the plan could not alias, Unary, Binary and Sum (numpy
// broadcasting), BatchNormalization (inference form, any layout) and Concat.
//
// One thread per output element, in the output's physical order, with a
// grid-stride loop. The index plumbing lives in the instantiation: P::src(i,
// j) gives input i's physical offset for output element j (generated from
// the shapes, layouts and broadcast; identity when nothing moves), and
// P::channel(j) the channel of element j. Where every map is the identity a
// thread moves V consecutive elements with one vector access. Arithmetic is
// f32 with the CPU reference's operation order (no fused multiply-adds where
// the reference rounds twice).

namespace aotune {

template <class P>
__device__ __forceinline__ void convert(const typename P::TIn* __restrict__ x,
                                        typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, TOTAL = P::TOTAL / V;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    float v[V];
    if (V > 1) {
      load_f32<V>(x + j * V, v);
    } else {
      v[0] = to_f32(x[P::src(0, j)]);
    }
    store_f32<V>(y + j * V, v);
  }
}

template <int OP> __device__ __forceinline__ float unary_op(float x, float lo, float hi) {
  if (OP == 0) return fmaxf(x, 0.0f);                  // Relu
  if (OP == 1) return 1.0f / (1.0f + expf(-x));        // Sigmoid
  return fminf(fmaxf(x, lo), hi);                       // Clip
}

template <class P>
__device__ __forceinline__ void unary(const typename P::TIn* __restrict__ x,
                                      typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, TOTAL = P::TOTAL / V;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    float v[V];
    if (V > 1) {
      load_f32<V>(x + j * V, v);
    } else {
      v[0] = to_f32(x[P::src(0, j)]);
    }
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = unary_op<P::OP>(v[e], P::LO, P::HI);
    store_f32<V>(y + j * V, v);
  }
}

template <int OP> __device__ __forceinline__ float binary_op(float a, float b) {
  if (OP == 0) return __fadd_rn(a, b);
  if (OP == 1) return __fsub_rn(a, b);
  if (OP == 2) return __fmul_rn(a, b);
  return __fdiv_rn(a, b);
}

template <class P>
__device__ __forceinline__ void binary(const typename P::TA* __restrict__ a,
                                       const typename P::TB* __restrict__ b,
                                       typename P::TOut* __restrict__ y) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < P::TOTAL; j += gridDim.x * blockDim.x)
    y[j] = from_f32<typename P::TOut>(
        binary_op<P::OP>(to_f32(a[P::src(0, j)]), to_f32(b[P::src(1, j)])));
}

// n-ary Sum, accumulated left to right in f32 like the reference.
template <class P, class TOut, class... TIn>
__device__ __forceinline__ void sum_n(TOut* __restrict__ y, const TIn* __restrict__... xs) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < P::TOTAL; j += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    int i = 0;
    ((acc = (i == 0) ? to_f32(xs[P::src(i, j)]) : __fadd_rn(acc, to_f32(xs[P::src(i, j)])), ++i),
     ...);
    y[j] = from_f32<TOut>(acc);
  }
}

// (x - mean) / sqrt(var + eps) * scale + bias, per channel, rounded step by step.
template <class P>
__device__ __forceinline__ void batch_norm(const typename P::TIn* __restrict__ x,
                                           const typename P::TScale* __restrict__ scale,
                                           const typename P::TShift* __restrict__ shift,
                                           const typename P::TMean* __restrict__ mean,
                                           const typename P::TVar* __restrict__ var,
                                           typename P::TOut* __restrict__ y) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < P::TOTAL; j += gridDim.x * blockDim.x) {
    const int c = P::channel(j);
    const float denom = __fsqrt_rn(__fadd_rn(to_f32(var[c]), P::EPSILON));
    const float v = __fdiv_rn(__fsub_rn(to_f32(x[P::src(0, j)]), to_f32(mean[c])), denom);
    y[j] = from_f32<typename P::TOut>(__fadd_rn(__fmul_rn(v, to_f32(scale[c])), to_f32(shift[c])));
  }
}

// Row-major concat: output [OUTER, AXIS, INNER]; input i covers axis entries
// [P::start(i), P::start(i) + P::len(i)).
template <class P, class TOut, class... TIn>
__device__ __forceinline__ void concat(TOut* __restrict__ y, const TIn* __restrict__... xs) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < P::TOTAL; j += gridDim.x * blockDim.x) {
    const int inner = j % P::INNER;
    const int a = (j / P::INNER) % P::AXIS;
    const int outer = j / (P::INNER * P::AXIS);
    float v = 0.0f;
    int i = 0;
    ((v = (a >= P::start(i) && a < P::start(i) + P::len(i))
              ? to_f32(xs[(outer * P::len(i) + a - P::start(i)) * P::INNER + inner])
              : v,
      ++i),
     ...);
    y[j] = from_f32<TOut>(v);
  }
}

}  // namespace aotune

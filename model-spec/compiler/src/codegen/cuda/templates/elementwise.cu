// aotune: elementwise kernels: Convert (any layout and dtype to any other),
// view copies the plan could not alias, Unary, Binary and Sum (numpy
// broadcasting), BatchNormalization (inference form, any layout) and Concat;
// to_nhwc: the NCHW -> NHWC conversion of a model input (to_nhwc.rs);
// space_to_depth: the same with pixel blocks folded into channels
// (space_to_depth.rs).
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

// One 32-bit word of output: 4 / sizeof(T) values from v, rounded to T,
// the first in the low bits (memory order).
template <class T> __device__ __forceinline__ unsigned int to_word(const float* v);
template <> __device__ __forceinline__ unsigned int to_word<float>(const float* v) {
  return __float_as_uint(v[0]);
}
template <> __device__ __forceinline__ unsigned int to_word<__half>(const float* v) {
  return (unsigned int)__half_as_ushort(__float2half_rn(v[0])) |
         ((unsigned int)__half_as_ushort(__float2half_rn(v[1])) << 16);
}
template <> __device__ __forceinline__ unsigned int to_word<__nv_bfloat16>(const float* v) {
  return (unsigned int)__bfloat16_as_ushort(__float2bfloat16_rn(v[0])) |
         ((unsigned int)__bfloat16_as_ushort(__float2bfloat16_rn(v[1])) << 16);
}

// Rounds V values to T and stores them with one access of V * sizeof(T)
// bytes (aligned to that size): whole words through __stwb (st.global.wb
// with a vector operand), which the compiler cannot split into 4-byte or
// 2-byte stores as it does a plain uint4 assignment here.
template <int V, class T>
__device__ __forceinline__ void store_words(T* __restrict__ p, const float* v) {
  constexpr int BYTES = V * (int)sizeof(T), PER = 4 / (int)sizeof(T);
  if (BYTES == 16) {
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(to_word<T>(v), to_word<T>(v + PER),
                                                   to_word<T>(v + 2 * PER),
                                                   to_word<T>(v + 3 * PER)));
  } else if (BYTES == 8) {
    __stwb(reinterpret_cast<uint2*>(p), make_uint2(to_word<T>(v), to_word<T>(v + PER)));
  } else if (BYTES == 4) {
    __stwb(reinterpret_cast<unsigned int*>(p), to_word<T>(v));
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = from_f32<T>(v[i]);
  }
}

// NCHW -> NHWC (and dtype), with channels C..CP-1 of the output zero
// (PadChannels). CTA b owns TILE consecutive pixels of image b / TILES: it
// reads the tile's C channel rows (contiguous in NCHW) with VI-element loads
// into shared memory, then writes the tile's TILE * CP outputs (one
// contiguous NHWC range) with VO-element stores. The loops have constant
// trip counts, so each thread issues its loads before it waits on any. VI
// divides HW and VO divides HW * CP, so a tile cut short by the image's end
// still holds whole vectors.
template <class P>
__device__ __forceinline__ void to_nhwc(const typename P::TIn* __restrict__ x,
                                        typename P::TOut* __restrict__ y) {
  constexpr unsigned C = P::C, CP = P::CP, HW = P::HW, TILE = P::TILE, T = P::THREADS;
  constexpr unsigned VI = P::VI, VO = P::VO, TILES = (HW + TILE - 1) / TILE;
  constexpr unsigned LOADS = C * (TILE / VI), STORES = TILE * CP / VO;
  __shared__ __align__(16) float tile[C][TILE];
  const unsigned n = blockIdx.x / TILES;
  const unsigned p0 = (blockIdx.x % TILES) * TILE;
  const unsigned pixels = min(TILE, HW - p0);
  const typename P::TIn* xs = x + (size_t)n * C * HW + p0;
#pragma unroll
  for (unsigned i0 = 0; i0 < LOADS; i0 += T) {
    const unsigned i = i0 + threadIdx.x;
    const unsigned c = i / (TILE / VI), p = (i % (TILE / VI)) * VI;
    if ((LOADS % T == 0 || i < LOADS) && p < pixels) {
      float v[VI];
      load_f32<VI>(xs + c * HW + p, v);
#pragma unroll
      for (unsigned e = 0; e < VI; ++e) tile[c][p + e] = v[e];
    }
  }
  __syncthreads();
  typename P::TOut* ys = y + ((size_t)n * HW + p0) * CP;
  const unsigned outputs = pixels * CP;
#pragma unroll
  for (unsigned j0 = 0; j0 < STORES; j0 += T) {
    const unsigned j = (j0 + threadIdx.x) * VO;
    if ((STORES % T == 0 || j < STORES * VO) && j < outputs) {
      unsigned p = j / CP, c = j % CP;
      float v[VO];
#pragma unroll
      for (unsigned e = 0; e < VO; ++e) {
        v[e] = c < C ? tile[c][p] : 0.0f;
        if (++c == CP) {
          c = 0;
          ++p;
        }
      }
      store_words<VO>(ys + j, v);
    }
  }
}

// SpaceToDepth (space_to_depth.rs): y[n, i, j, k] (NHWC, CQ channels) is
// x[n, c, B*i + bh - PT, B*j + bw - PL] for k = (bh*B + bw)*C + c, zero
// outside the image and for k >= B*B*C; x is read through its strides
// (SN, SC, SH, SW), in any dtype. Thread t of the grid's flat range owns
// VO-channel chunk t of the output (consecutive threads, consecutive
// chunks: coalesced VO-element stores); a CTA covers THREADS * PER_THREAD
// chunks, each thread PER_THREAD of them THREADS apart, and issues all its
// loads before its stores. CQ % VO == 0.
template <class P>
__device__ __forceinline__ void space_to_depth(const typename P::TIn* __restrict__ x,
                                               typename P::TOut* __restrict__ y) {
  constexpr unsigned VO = P::VO, T = P::THREADS, R = P::PER_THREAD, CHUNKS = P::CQ / VO;
  constexpr unsigned B = P::B, C = P::C, HQ = P::HQ, WQ = P::WQ;
  constexpr unsigned TOTAL = (unsigned)P::N * HQ * WQ * CHUNKS;
  const unsigned first = blockIdx.x * (T * R) + threadIdx.x;
  float v[R][VO];
#pragma unroll
  for (unsigned r = 0; r < R; ++r) {
    const unsigned t = first + r * T;
    const unsigned pixel = t / CHUNKS;
    const int j = (int)(pixel % WQ), i = (int)((pixel / WQ) % HQ);
    const typename P::TIn* xs = x + (size_t)(pixel / (WQ * HQ)) * P::SN;
    unsigned c = (t % CHUNKS) * VO % C, block = (t % CHUNKS) * VO / C;
#pragma unroll
    for (unsigned e = 0; e < VO; ++e) {
      const int h = (int)B * i + (int)(block / B) - P::PT;
      const int w = (int)B * j + (int)(block % B) - P::PL;
      const bool inside = t < TOTAL && block < B * B && h >= 0 && h < P::H && w >= 0 && w < P::W;
      v[r][e] = inside ? to_f32(xs[(size_t)c * P::SC + (size_t)h * P::SH + (size_t)w * P::SW])
                       : 0.0f;
      if (++c == C) {
        c = 0;
        ++block;
      }
    }
  }
#pragma unroll
  for (unsigned r = 0; r < R; ++r) {
    const unsigned t = first + r * T;
    if (t < TOTAL) store_words<VO>(y + (size_t)t * VO, v[r]);
  }
}

__device__ __forceinline__ float softplus_f32(float x) {
  return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

// Codes: codegen/cuda/ops/elementwise.rs `unary_code` (LO/HI carry the op's
// parameters).
template <int OP> __device__ __forceinline__ float unary_op(float x, float lo, float hi) {
  switch (OP) {
    case 0: return fmaxf(x, 0.0f);                                  // Relu
    case 1: return 1.0f / (1.0f + expf(-x));                        // Sigmoid
    case 2: return fminf(fmaxf(x, lo), hi);                         // Clip
    case 3: return erff(x);                                         // Erf
    case 4: return tanhf(x);                                        // Tanh
    case 5: return expf(x);                                         // Exp
    case 6: return logf(x);                                         // Log
    case 7: return __fsqrt_rn(x);                                   // Sqrt
    case 8: return __fdiv_rn(1.0f, x);                              // Reciprocal
    case 9: return -x;                                              // Neg
    case 10: return fabsf(x);                                       // Abs
    case 11: return floorf(x);                                      // Floor
    case 12: return ceilf(x);                                       // Ceil
    case 13: return sinf(x);                                        // Sin
    case 14: return cosf(x);                                        // Cos
    case 15: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x * 0.0f);  // Sign
    case 16: return x == 0.0f ? 1.0f : 0.0f;                        // Not
    case 17: return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);  // HardSwish
    case 18: return fminf(fmaxf(lo * x + hi, 0.0f), 1.0f);          // HardSigmoid
    case 19: return softplus_f32(x);                                // Softplus
    case 20: return x / (1.0f + fabsf(x));                          // Softsign
    case 21: return x * tanhf(softplus_f32(x));                     // Mish
    case 22: return x < 0.0f ? lo * expm1f(x) : x;                  // Elu
    case 23: return hi * (x <= 0.0f ? lo * expm1f(x) : x);          // Selu
    case 24: return x < 0.0f ? lo * x : x;                          // LeakyRelu
    case 25: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));  // Gelu
    case 26:                                                        // Gelu (tanh)
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case 27: return __half2float(__float2half_rn(x));               // Cast to f16
    case 28: return __bfloat162float(__float2bfloat16_rn(x));       // Cast to bf16
    case 29: return truncf(x);                                      // Cast to int
    case 30: return x != 0.0f ? 1.0f : 0.0f;                        // Cast to bool
    default: return __int_as_float(0x7fc00000);
  }
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

// Codes: codegen/cuda/ops/elementwise.rs `binary_code`. Comparisons and
// logical ops give 1.0 / 0.0.
template <int OP> __device__ __forceinline__ float binary_op(float a, float b) {
  switch (OP) {
    case 0: return __fadd_rn(a, b);
    case 1: return __fsub_rn(a, b);
    case 2: return __fmul_rn(a, b);
    case 3: return __fdiv_rn(a, b);
    case 4: return powf(a, b);
    case 5: return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
    case 6: return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : fminf(a, b);
    case 7: return fmodf(a, b);  // Mod, fmod = 1
    case 8: {                    // Mod, fmod = 0: the divisor's sign
      const float r = fmodf(a, b);
      return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
    }
    case 9: return a == b ? 1.0f : 0.0f;
    case 10: return a < b ? 1.0f : 0.0f;
    case 11: return a <= b ? 1.0f : 0.0f;
    case 12: return a > b ? 1.0f : 0.0f;
    case 13: return a >= b ? 1.0f : 0.0f;
    case 14: return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
    case 15: return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    case 16: return ((a != 0.0f) != (b != 0.0f)) ? 1.0f : 0.0f;
    case 17: return a < 0.0f ? __fmul_rn(a, b) : a;  // PRelu
    default: return __int_as_float(0x7fc00000);
  }
}

// With V > 1 both inputs read V consecutive elements at src(i, first) (the
// codegen's moves_in_vectors).
template <class P>
__device__ __forceinline__ void binary(const typename P::TA* __restrict__ a,
                                       const typename P::TB* __restrict__ b,
                                       typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, TOTAL = P::TOTAL / V;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    if (V > 1) {
      float va[V], vb[V];
      load_f32<V>(a + P::src(0, j * V), va);
      load_f32<V>(b + P::src(1, j * V), vb);
#pragma unroll
      for (int e = 0; e < V; ++e) va[e] = binary_op<P::OP>(va[e], vb[e]);
      store_f32<V>(y + j * V, va);
    } else {
      y[j] = from_f32<typename P::TOut>(
          binary_op<P::OP>(to_f32(a[P::src(0, j)]), to_f32(b[P::src(1, j)])));
    }
  }
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
// [P::start(i), P::start(i) + P::len(i)). A thread moves V elements, which
// INNER holds whole.
template <class P, class TOut, class... TIn>
__device__ __forceinline__ void concat(TOut* __restrict__ y, const TIn* __restrict__... xs) {
  constexpr int V = P::V, TOTAL = P::TOTAL / V;
  for (int jv = blockIdx.x * blockDim.x + threadIdx.x; jv < TOTAL; jv += gridDim.x * blockDim.x) {
    const int j = jv * V;
    const int inner = j % P::INNER;
    const int a = (j / P::INNER) % P::AXIS;
    const int outer = j / (P::INNER * P::AXIS);
    float v[V] = {};
    int i = 0;
    ((((a >= P::start(i) && a < P::start(i) + P::len(i))
           ? load_f32<V>(xs + (outer * P::len(i) + a - P::start(i)) * P::INNER + inner, v)
           : (void)0),
      ++i),
     ...);
    store_f32<V>(y + j, v);
  }
}

}  // namespace aotune

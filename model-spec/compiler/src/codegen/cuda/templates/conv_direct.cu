// aotune: direct convolution for grouped and depthwise convs (NHWC input,
// OHWI weight [K][R][S][C/groups], NHWC output).
//
// Depthwise convolutions whose channels come in vectors of 4 (GROUPS == C ==
// K, C % 4 == 0, at most 256 taps) on maps of at least 28x28 outputs
// (DW_VECTOR, set by ConvShape::depthwise_vectorized, whose
// DEPTHWISE_VECTOR is this file's V) take conv_depthwise: a block stages one
// chunk of channels' filter taps in shared memory ([tap][channel]), and each
// thread computes PER_THREAD consecutive output columns of 4 consecutive
// channels at one output row. Per filter row it loads the input columns those outputs share
// once, as 4-channel vectors (a warp's loads are consecutive vectors of one
// pixel), and reads its taps as one 16-byte vector each; sums in f32
// (tf32-rounded operands under Precision::Tf32) and runs the shared
// epilogue on each output's vector. Units (strip group, channel chunk) are
// grid-strided over the blocks.
//
// Any other grouped convolution: one thread per output element, channel
// fastest, summing its group's R*S*C/g products (ResNets never get here).

namespace aotune {

// How conv_depthwise splits the channels: a block takes CB = LANES * 4
// consecutive channels (LANES a power of two dividing C / 4, at most 32, with
// the chunk's filter taps at most 32 KB as f32 in shared memory) of
// blockDim.x / LANES strips of output columns.
template <class P>
struct DepthwiseTiling {
  static constexpr int V = 4;
  static constexpr int CVEC = P::C / V;
  static constexpr int RS = P::R * P::S;
  __host__ __device__ static constexpr int lanes_for(int l) {
    return l <= 1 ? 1 : (CVEC % l == 0 && l * V * RS * 4 <= 32768) ? l : lanes_for(l / 2);
  }
  static constexpr int LANES = lanes_for(32);
  static constexpr int CB = LANES * V;
  static constexpr int CHUNKS = CVEC / LANES;
  // Shared-memory row of one tap: CB channels, padded so that the transposing
  // stores below spread over the banks (and rows stay 16-byte aligned).
  static constexpr int ROW = CB + 4;
};

template <class P>
__device__ __forceinline__ void conv_depthwise(const typename P::TIn* __restrict__ x,
                                               const typename P::TW* __restrict__ wgt,
                                               const typename P::TBias* __restrict__ bias,
                                               const typename P::TRes* __restrict__ res,
                                               typename P::TOut* __restrict__ y) {
  using T = DepthwiseTiling<P>;
  constexpr int V = T::V, TW = P::PER_THREAD, LANES = T::LANES, RS = T::RS;
  constexpr int QT = (P::Q + TW - 1) / TW;
  constexpr int STRIPS = P::N * P::P * QT;
  // Input columns the TW outputs of one filter row read.
  constexpr int NCOL = (TW - 1) * P::SW + (P::S - 1) * P::DW + 1;
  // The chunk's taps, [tap][channel], tf32-rounded under Precision::Tf32.
  __shared__ __align__(16) float w_s[RS * T::ROW];
  const int strips_per_block = blockDim.x / LANES;
  const int lane = threadIdx.x % LANES;
  const int groups = (STRIPS + strips_per_block - 1) / strips_per_block;
  for (int u = blockIdx.x; u < groups * T::CHUNKS; u += gridDim.x) {
    const int k0 = (u % T::CHUNKS) * T::CB;
    const int strip = (u / T::CHUNKS) * strips_per_block + threadIdx.x / LANES;
    __syncthreads();  // the previous unit's reads of w_s are done
    // OHWI with one input channel: the chunk's taps are CB * RS contiguous
    // values, read coalesced and stored transposed.
    for (int e = threadIdx.x; e < T::CB * RS; e += blockDim.x)
      w_s[(e % RS) * T::ROW + e / RS] = operand<P::TF32>(to_f32(wgt[(size_t)k0 * RS + e]));
    __syncthreads();
    if (strip >= STRIPS) continue;
    const int qt = strip % QT;
    const int p = (strip / QT) % P::P;
    const int n = strip / (QT * P::P);
    const int c = k0 + lane * V;
    const int q0 = qt * TW;
    const int w0 = q0 * P::SW - P::PW;
    float acc[TW][V];
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int v = 0; v < V; ++v) acc[t][v] = 0.0f;
#pragma unroll 1
    for (int r = 0; r < P::R; ++r) {
      const int h = p * P::SH - P::PH + r * P::DH;
      if (h < 0 || h >= P::H) continue;
      const typename P::TIn* row = x + ((size_t)(n * P::H + h) * P::W) * P::C + c;
      float xin[NCOL][V];
#pragma unroll
      for (int i = 0; i < NCOL; ++i) {
        const int w = w0 + i;
        if (w >= 0 && w < P::W) {
          load_f32<V>(row + (size_t)w * P::C, xin[i]);
#pragma unroll
          for (int v = 0; v < V; ++v) xin[i][v] = operand<P::TF32>(xin[i][v]);
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v) xin[i][v] = 0.0f;
        }
      }
#pragma unroll
      for (int s = 0; s < P::S; ++s) {
        const float4 wv = *reinterpret_cast<const float4*>(&w_s[(r * P::S + s) * T::ROW + lane * V]);
        const float wk[V] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int t = 0; t < TW; ++t)
#pragma unroll
          for (int v = 0; v < V; ++v)
            acc[t][v] = fmaf(xin[t * P::SW + s * P::DW][v], wk[v], acc[t][v]);
      }
    }
    const int m0 = (n * P::P + p) * P::Q + q0;
#pragma unroll
    for (int t = 0; t < TW; ++t)
      if (q0 + t < P::Q) epilogue_store<P, V>(y, bias, res, m0 + t, c, acc[t]);
  }
}

// conv_depthwise_window (DepthwiseConfig in depthwise_config.rs): a block
// takes one chunk of CB = DWW_LANES * 4 channels and DWW_THREADS /
// DWW_LANES strips of PER_THREAD output columns. It stages the chunk's taps
// in shared memory before the grid dependency wait (weights do not depend on
// the previous kernel), then loads every input vector of its window, all
// filter rows, into registers before the first multiply-add: one wait for
// memory per thread instead of one per filter row.
template <class P>
__device__ __forceinline__ void conv_depthwise_window(const typename P::TIn* __restrict__ x,
                                                      const typename P::TW* __restrict__ wgt,
                                                      const typename P::TBias* __restrict__ bias,
                                                      const typename P::TRes* __restrict__ res,
                                                      const typename P::TIn* __restrict__,
                                                      typename P::TOut* __restrict__ y) {
  static_assert(!P::HAS_SC && !P::POOL, "no shortcut or pooled epilogue");
  constexpr int V = 4, TW = P::PER_THREAD, LANES = P::DWW_LANES, RS = P::R * P::S;
  constexpr int CB = LANES * V, CHUNKS = P::C / CB, ROW = CB + 4;
  constexpr int SPB = P::DWW_THREADS / LANES;
  constexpr int QT = (P::Q + TW - 1) / TW;
  constexpr int STRIPS = P::N * P::P * QT;
  constexpr int NCOL = (TW - 1) * P::SW + (P::S - 1) * P::DW + 1;
  static_assert(P::C % CB == 0, "whole channel chunks");
  typedef typename RawBytes<V * sizeof(typename P::TIn)>::type Raw;
  __shared__ __align__(16) float w_s[RS * ROW];
  const int k0 = (blockIdx.x % CHUNKS) * CB;
  const int strip = (blockIdx.x / CHUNKS) * SPB + threadIdx.x / LANES;
  const int lane = threadIdx.x % LANES;
  // OHWI with one input channel: the chunk's taps are CB * RS contiguous
  // values, read coalesced and stored transposed ([tap][channel]).
  for (int e = threadIdx.x; e < CB * RS; e += P::DWW_THREADS)
    w_s[(e % RS) * ROW + e / RS] = operand<P::TF32>(to_f32(wgt[(size_t)k0 * RS + e]));
  grid_dependency_wait();
  launch_dependents();
  // The previous kernel's output, read through pointers the compiler cannot
  // hoist above the wait.
  x = after_dependency_wait(x);
  res = after_dependency_wait(res);
  const bool live = strip < STRIPS;
  const int qt = strip % QT;
  const int p = (strip / QT) % P::P;
  const int n = strip / (QT * P::P);
  const int c = k0 + lane * V;
  const int q0 = qt * TW;
  const int w0 = q0 * P::SW - P::PW;
  Raw win[P::R][NCOL];
#pragma unroll
  for (int r = 0; r < P::R; ++r) {
    const int h = p * P::SH - P::PH + r * P::DH;
    const bool row_in = live && h >= 0 && h < P::H;
    const typename P::TIn* row = x + ((size_t)(n * P::H + (row_in ? h : 0)) * P::W) * P::C + c;
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      const int w = w0 + i;
      win[r][i] = Raw{};
      if (row_in && w >= 0 && w < P::W) win[r][i] = *reinterpret_cast<const Raw*>(row + (size_t)w * P::C);
    }
  }
  __syncthreads();  // the staged taps
  float acc[TW][V];
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[t][v] = 0.0f;
#pragma unroll
  for (int r = 0; r < P::R; ++r) {
    float xin[NCOL][V];
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      const typename P::TIn* e = reinterpret_cast<const typename P::TIn*>(&win[r][i]);
#pragma unroll
      for (int v = 0; v < V; ++v) xin[i][v] = operand<P::TF32>(to_f32(e[v]));
    }
#pragma unroll
    for (int s = 0; s < P::S; ++s) {
      const float4 wv = *reinterpret_cast<const float4*>(&w_s[(r * P::S + s) * ROW + lane * V]);
      const float wk[V] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int t = 0; t < TW; ++t)
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[t][v] = fmaf(xin[t * P::SW + s * P::DW][v], wk[v], acc[t][v]);
    }
  }
  if (!live) return;
  const int m0 = (n * P::P + p) * P::Q + q0;
#pragma unroll
  for (int t = 0; t < TW; ++t)
    if (q0 + t < P::Q) epilogue_store<P, V>(y, bias, res, m0 + t, c, acc[t]);
}

template <class P>
__device__ __forceinline__ void conv_direct(const typename P::TIn* __restrict__ x,
                                            const typename P::TW* __restrict__ wgt,
                                            const typename P::TBias* __restrict__ bias,
                                            const typename P::TRes* __restrict__ res,
                                            const typename P::TIn* __restrict__ xs,
                                            typename P::TOut* __restrict__ y) {
  static_assert(!P::HAS_SC, "grouped convolutions have no shortcut");
  static_assert(!P::POOL, "the direct kernel has no pooled epilogue");
  if constexpr (P::DW_VECTOR) {
    conv_depthwise<P>(x, wgt, bias, res, y);
  } else {
    constexpr int TOTAL = P::GEMM_M * P::GEMM_N;
    constexpr int CG = P::C / P::GROUPS, KG = P::K / P::GROUPS;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
      const int k = j % P::K;
      const int m = j / P::K;
      const int q = m % P::Q, p = (m / P::Q) % P::P, n = m / (P::P * P::Q);
      const int c0 = (k / KG) * CG;
      float acc = 0.0f;
      for (int r = 0; r < P::R; ++r) {
        const int h = p * P::SH - P::PH + r * P::DH;
        if (h < 0 || h >= P::H) continue;
        for (int s = 0; s < P::S; ++s) {
          const int w = q * P::SW - P::PW + s * P::DW;
          if (w < 0 || w >= P::W) continue;
          const typename P::TIn* xp = x + ((n * P::H + h) * P::W + w) * P::C + c0;
          const typename P::TW* wp = wgt + ((k * P::R + r) * P::S + s) * CG;
#pragma unroll 4
          for (int c = 0; c < CG; ++c)
            acc = fmaf(operand<P::TF32>(to_f32(xp[c])), operand<P::TF32>(to_f32(wp[c])), acc);
        }
      }
      epilogue_store<P, 1>(y, bias, res, m, k, &acc);
    }
  }
}

}  // namespace aotune

// aotune: direct convolution for grouped and depthwise convs (NHWC input,
// OHWI weight [K][R][S][C/groups], NHWC output).
//
// Depthwise convolutions whose channels come in vectors of 4 (GROUPS == C ==
// K, C % 4 == 0) take conv_depthwise: a thread computes PER_THREAD
// consecutive output columns of 4 consecutive channels at one output row.
// Per filter row it loads the input columns those outputs share once, as
// 4-channel vectors (a warp's loads are consecutive vectors of one pixel or
// the next), and its 4 channels' filter taps; sums in f32 (tf32-rounded
// operands under Precision::Tf32) and runs the shared epilogue on each
// output's vector. Items are (output pixel, channel vector); the launch
// gives ceil(items / PER_THREAD) threads, grid-strided.
//
// Any other grouped convolution: one thread per output element, channel
// fastest, summing its group's R*S*C/g products (ResNets never get here).

namespace aotune {

template <class P>
__device__ __forceinline__ void conv_depthwise(const typename P::TIn* __restrict__ x,
                                               const typename P::TW* __restrict__ wgt,
                                               const typename P::TBias* __restrict__ bias,
                                               const typename P::TRes* __restrict__ res,
                                               typename P::TOut* __restrict__ y) {
  constexpr int V = 4;
  constexpr int TW = P::PER_THREAD;
  constexpr int CV = P::C / V;
  constexpr int QT = (P::Q + TW - 1) / TW;
  constexpr int UNITS = P::N * P::P * QT * CV;
  // Input columns the TW outputs of one filter row read.
  constexpr int NCOL = (TW - 1) * P::SW + (P::S - 1) * P::DW + 1;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < UNITS; j += gridDim.x * blockDim.x) {
    const int cv = j % CV;
    const int qt = (j / CV) % QT;
    const int p = (j / (CV * QT)) % P::P;
    const int n = j / (CV * QT * P::P);
    const int c = cv * V;
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
        float wv[V];
#pragma unroll
        for (int v = 0; v < V; ++v)
          wv[v] = operand<P::TF32>(to_f32(wgt[((c + v) * P::R + r) * P::S + s]));
#pragma unroll
        for (int t = 0; t < TW; ++t)
#pragma unroll
          for (int v = 0; v < V; ++v)
            acc[t][v] = fmaf(xin[t * P::SW + s * P::DW][v], wv[v], acc[t][v]);
      }
    }
    const int m0 = (n * P::P + p) * P::Q + q0;
#pragma unroll
    for (int t = 0; t < TW; ++t)
      if (q0 + t < P::Q) epilogue_store<P, V>(y, bias, res, m0 + t, c, acc[t]);
  }
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
  if constexpr (P::GROUPS == P::C && P::K == P::C && P::C % 4 == 0) {
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

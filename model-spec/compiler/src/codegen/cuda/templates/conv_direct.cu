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
//
// conv_depthwise_window and conv_depthwise_norm (below) are the tuner's
// register-window depthwise kernels; the second normalizes each output
// pixel over its channels (a FusedConv with a ChannelNorm).

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

// Sums v[t] (t < TW) over the L consecutive threads of this thread's strip
// (threads [s * L, s * L + L) of the CTA, s = threadIdx.x / L) and gives
// every thread of the strip the sums, the same bits on every run: each
// warp's piece of the strip is summed by a tree of shuffles (a thread adds
// the value `off` lanes down only while that lane is in its piece), the
// pieces' sums are then added in warp order through `part` (TW * THREADS
// floats that only this call uses; one slot per piece's first thread). Every
// thread of the CTA (THREADS, a multiple of 32) calls it; a strip cut off by
// the end of the CTA (padding threads) sums its part only.
template <int L, int THREADS, int TW>
__device__ __forceinline__ void strip_sum(float (&v)[TW], float* part) {
  const int tid = threadIdx.x;
  const int first = (tid / L) * L;
  // Threads from this one to the end of its piece: the strip's end or the warp's.
  const int span = min(first + L, (tid | 31) + 1) - tid;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      const float o = __shfl_down_sync(0xffffffffu, v[t], off);
      if (off < span) v[t] += o;
    }
  }
  if (tid == first || (tid & 31) == 0) {
#pragma unroll
    for (int t = 0; t < TW; ++t) part[t * THREADS + tid] = v[t];
  }
  __syncthreads();
  const int last_warp = min((first + L - 1) / 32, THREADS / 32 - 1);
#pragma unroll
  for (int t = 0; t < TW; ++t) {
    float s = part[t * THREADS + first];
    for (int w = first / 32 + 1; w <= last_warp; ++w) s += part[t * THREADS + w * 32];
    v[t] = s;
  }
}

// conv_depthwise_norm (DepthwiseNormConfig in depthwise_norm_config.rs): a
// depthwise convolution whose epilogue normalizes each output pixel over all
// its C channels (a FusedConv with a ChannelNorm: ConvNeXt's depthwise conv
// then LayerNorm). A block owns every channel of DWN_STRIPS strips of
// PER_THREAD consecutive output columns; a strip is L = C / 4 consecutive
// threads, each 4 channels (one vector) of every column of the strip, and
// the block's DWN_THREADS are the strips' threads rounded up to whole warps
// (the rest compute nothing they store). Before the grid dependency wait
// (weights, bias, gamma and beta do not depend on the previous kernel) it
// stages the taps of all C channels in dynamic shared memory as f32,
// [tap][channel] rows padded by 4, and each thread reads its channels' bias,
// gamma and beta. Then it loads the input vectors of its window, DWN_ROWS
// filter rows at once (all R where they fit in registers; the config's
// `rows`), and sums in f32
// (tf32-rounded operands under Precision::Tf32). Each output pixel's mean,
// then its variance (two passes), are summed over the strip's L threads
// (strip_sum), and y = (v - mean) * rstd * gamma + beta is rounded once at
// the store, rstd = 1 / sqrt(var + EPS), as reduce.cu's LayerNorm.
template <class P>
__device__ __forceinline__ void conv_depthwise_norm(const typename P::TIn* __restrict__ x,
                                                    const typename P::TW* __restrict__ wgt,
                                                    const typename P::TBias* __restrict__ bias,
                                                    const typename P::TGamma* __restrict__ gamma,
                                                    const typename P::TBeta* __restrict__ beta,
                                                    typename P::TOut* __restrict__ y) {
  static_assert(!P::HAS_SC && !P::POOL && !P::HAS_RES && P::ACT == ACT_NONE,
                "the norm follows the bias alone");
  constexpr int V = 4, TW = P::PER_THREAD, L = P::C / V, RS = P::R * P::S, ROW = P::C + 4;
  constexpr int SPB = P::DWN_STRIPS, THREADS = P::DWN_THREADS, ROWS = P::DWN_ROWS;
  constexpr int QT = (P::Q + TW - 1) / TW;
  constexpr int STRIPS = P::N * P::P * QT;
  constexpr int NCOL = (TW - 1) * P::SW + (P::S - 1) * P::DW + 1;
  static_assert(P::C % V == 0 && P::GROUPS == P::C && P::K == P::C, "depthwise, 4-channel vectors");
  static_assert(THREADS % 32 == 0 && THREADS >= SPB * L, "whole warps covering every strip");
  static_assert(ROWS >= 1 && ROWS <= P::R, "input rows a batch");
  typedef typename RawBytes<V * sizeof(typename P::TIn)>::type Raw;
  extern __shared__ __align__(16) float dwn_smem[];
  float* w_s = dwn_smem;                 // [RS][ROW] taps
  float* sums = w_s + RS * ROW;          // [TW][THREADS] strip_sum's pieces, the mean's
  float* squares = sums + TW * THREADS;  // and the variance's
  const int tid = threadIdx.x;
  const int local = tid / L;  // the strip in the block; SPB and above: padding
  const int c = (tid - local * L) * V;
  const int strip = blockIdx.x * SPB + local;
  const bool live = local < SPB && strip < STRIPS;
  // OHWI with one input channel: channel k's taps are RS contiguous values,
  // read coalesced and stored transposed.
  for (int e = tid; e < P::C * RS; e += THREADS)
    w_s[(e % RS) * ROW + e / RS] = operand<P::TF32>(to_f32(wgt[e]));
  float b[V], g[V], be[V];
  if constexpr (P::HAS_BIAS) {
    load_f32<V>(bias + c, b);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) b[v] = 0.0f;
  }
  load_f32<V>(gamma + c, g);
  load_f32<V>(beta + c, be);
  grid_dependency_wait();
  launch_dependents();
  const typename P::TIn* xin = after_dependency_wait(x);
  const int unit = live ? strip : 0;
  const int qt = unit % QT;
  const int p = (unit / QT) % P::P;
  const int n = unit / (QT * P::P);
  const int q0 = qt * TW;
  const int w0 = q0 * P::SW - P::PW;
  float acc[TW][V];
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[t][v] = 0.0f;
  // Batches of ROWS filter rows, not unrolled: ptxas would otherwise issue
  // the next batch's loads early and hold every row's input after all.
#pragma unroll 1
  for (int r0 = 0; r0 < P::R; r0 += ROWS) {
    Raw win[ROWS][NCOL];
#pragma unroll
    for (int rr = 0; rr < ROWS; ++rr) {
      const int h = p * P::SH - P::PH + (r0 + rr) * P::DH;
      const bool row_in = live && r0 + rr < P::R && h >= 0 && h < P::H;
      const typename P::TIn* row = xin + ((size_t)(n * P::H + (row_in ? h : 0)) * P::W) * P::C + c;
#pragma unroll
      for (int i = 0; i < NCOL; ++i) {
        const int w = w0 + i;
        win[rr][i] = Raw{};
        if (row_in && w >= 0 && w < P::W) win[rr][i] = *reinterpret_cast<const Raw*>(row + (size_t)w * P::C);
      }
    }
    if (r0 == 0) __syncthreads();  // the staged taps
#pragma unroll
    for (int rr = 0; rr < ROWS; ++rr) {
      const int r = r0 + rr;
      if (r >= P::R) break;
      // Widened where used (not a row at a time), so that a wide row's f32
      // copies need not all be live at once.
#pragma unroll
      for (int s = 0; s < P::S; ++s) {
        const float4 wv = *reinterpret_cast<const float4*>(&w_s[(r * P::S + s) * ROW + c]);
        const float wk[V] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int t = 0; t < TW; ++t) {
          const typename P::TIn* e =
              reinterpret_cast<const typename P::TIn*>(&win[rr][t * P::SW + s * P::DW]);
#pragma unroll
          for (int v = 0; v < V; ++v)
            acc[t][v] = fmaf(operand<P::TF32>(to_f32(e[v])), wk[v], acc[t][v]);
        }
      }
    }
  }
  // The bias, then each pixel's mean and variance over the strip.
  float part[TW], mean[TW];
#pragma unroll
  for (int t = 0; t < TW; ++t) {
#pragma unroll
    for (int v = 0; v < V; ++v) acc[t][v] += b[v];
    part[t] = ((acc[t][0] + acc[t][1]) + acc[t][2]) + acc[t][3];
  }
  strip_sum<L, THREADS, TW>(part, sums);
#pragma unroll
  for (int t = 0; t < TW; ++t) {
    mean[t] = part[t] / (float)P::C;
    float d[V];
#pragma unroll
    for (int v = 0; v < V; ++v) d[v] = acc[t][v] - mean[t];
    part[t] = ((d[0] * d[0] + d[1] * d[1]) + d[2] * d[2]) + d[3] * d[3];
  }
  strip_sum<L, THREADS, TW>(part, squares);
  if (!live) return;
  const int m0 = (n * P::P + p) * P::Q + q0;
#pragma unroll
  for (int t = 0; t < TW; ++t) {
    if (q0 + t >= P::Q) continue;
    const float rstd = 1.0f / sqrtf(part[t] / (float)P::C + P::EPS);
    float out[V];
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = (acc[t][v] - mean[t]) * rstd * g[v] + be[v];
    store_f32<V>(y + (size_t)(m0 + t) * P::C + c, out);
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

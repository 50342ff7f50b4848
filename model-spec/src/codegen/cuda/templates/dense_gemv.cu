// aotune: dense layer at small batch, y[M, N] = act(x[M, K] . w[N, K]^T +
// bias + residual), as a GEMV with every weight row read exactly once.
//
// Each warp owns ROWS consecutive output columns n and all M (<= 16) rows of
// x: its lanes stride over K with V-element (16-byte when K allows) loads of
// the weight rows and of x (which stays in L1), accumulate in f32, and reduce
// with a butterfly of shuffles (fixed order: deterministic). Lane 0 runs the
// shared epilogue.

namespace aotune {

template <class P>
__device__ __forceinline__ void dense_gemv(const typename P::TIn* __restrict__ x,
                                           const typename P::TW* __restrict__ wgt,
                                           const typename P::TBias* __restrict__ bias,
                                           const typename P::TRes* __restrict__ res,
                                           typename P::TOut* __restrict__ y) {
  constexpr int M = P::GEMM_M, N = P::GEMM_N, K = P::GEMM_K, V = P::V, ROWS = P::ROWS;
  static_assert(K % V == 0, "vectors never straddle a row");
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * P::WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;  // whole warps only

  float acc[ROWS][M];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

  for (int k = lane * V; k < K; k += 32 * V) {
    float xv[M][V];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      load_f32<V>(x + m * K + k, xv[m]);
#pragma unroll
      for (int e = 0; e < V; ++e) xv[m][e] = operand<P::TF32>(xv[m][e]);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (N % ROWS != 0 && n0 + r >= N) break;
      float wv[V];
      load_f32<V>(wgt + (n0 + r) * K + k, wv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float b = operand<P::TF32>(wv[e]);
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = fmaf(xv[m][e], b, acc[r][m]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], offset);

  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (N % ROWS != 0 && n0 + r >= N) break;
#pragma unroll
      for (int m = 0; m < M; ++m) epilogue_store<P, 1>(y, bias, res, m, n0 + r, &acc[r][m]);
    }
  }
}

}  // namespace aotune

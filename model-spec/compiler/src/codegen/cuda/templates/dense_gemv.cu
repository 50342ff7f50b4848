// aotune: dense layer at small batch, y[M, N] = act(x[M, K] . w[N, K]^T +
// bias + residual), as a GEMV with every weight row read exactly once.
//
// Each warp owns ROWS consecutive output columns n and all M (<= 16) rows of
// x. Its lanes walk K in steps of 32 * V elements (lane l reads elements
// l * V .. l * V + V - 1 of each step: 16-byte loads when K allows). A lane
// first issues the weight loads of UNROLL steps for all ROWS columns, raw
// (no conversion, so no load waits on another), then converts them and
// accumulates against x (which stays in L1) in f32; a K that is not a whole
// number of steps ends with one bounds-checked step. The partial sums are
// reduced with a butterfly of shuffles (fixed order: deterministic) and
// lane 0 runs the shared epilogue. Columns past N (N % ROWS != 0) re-read
// row N - 1 and are never stored.
//
// Under programmatic dependent launch the first chunk's weight loads (all of
// a row when K <= 32 * V * UNROLL, as ResNet-50's classifier at batch 1) are
// issued before griddepcontrol.wait: the weights are constants, only x and
// the residual come from the kernel before.

namespace aotune {

template <int V, class T>
__device__ __forceinline__ typename RawBytes<V * sizeof(T)>::type gemv_load_raw(
    const T* __restrict__ p) {
  return *reinterpret_cast<const typename RawBytes<V * sizeof(T)>::type*>(p);
}

template <int V, class T, class R>
__device__ __forceinline__ void gemv_unpack(const R& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_f32(e[i]);
}

// acc[r][m] += x[m, k .. k + V) . w[row r, k .. k + V) for one step whose
// weights are already loaded (wraw[r]).
template <class P, class R>
__device__ __forceinline__ void gemv_step(const typename P::TIn* __restrict__ x, int k,
                                          const R (&wraw)[P::ROWS],
                                          float (&acc)[P::ROWS][P::GEMM_M]) {
  constexpr int M = P::GEMM_M, K = P::GEMM_K, V = P::V;
  float xv[M][V];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    load_f32<V>(x + m * K + k, xv[m]);
#pragma unroll
    for (int e = 0; e < V; ++e) xv[m][e] = operand<P::TF32>(xv[m][e]);
  }
#pragma unroll
  for (int r = 0; r < P::ROWS; ++r) {
    float wv[V];
    gemv_unpack<V, typename P::TW>(wraw[r], wv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float b = operand<P::TF32>(wv[e]);
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = fmaf(xv[m][e], b, acc[r][m]);
    }
  }
}

template <class P>
__device__ __forceinline__ void dense_gemv(const typename P::TIn* __restrict__ x,
                                           const typename P::TW* __restrict__ wgt,
                                           const typename P::TBias* __restrict__ bias,
                                           const typename P::TRes* __restrict__ res,
                                           typename P::TOut* __restrict__ y) {
  constexpr int M = P::GEMM_M, N = P::GEMM_N, K = P::GEMM_K, V = P::V, ROWS = P::ROWS;
  constexpr int U = P::UNROLL, STEP = 32 * V, STEPS = K / STEP;
  static_assert(K % V == 0, "vectors never straddle a row");
  typedef typename RawBytes<V * sizeof(typename P::TW)>::type Raw;
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * P::WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;  // whole warps only

  const typename P::TW* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = wgt + min(n0 + r, N - 1) * K + lane * V;
  const typename P::TIn* xl = x + lane * V;  // read only after the wait

  float acc[ROWS][M];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

#pragma unroll 1
  for (int s0 = 0; s0 < STEPS; s0 += U) {
    Raw wraw[U][ROWS];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (STEPS % U == 0 || s0 + u < STEPS) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) wraw[u][r] = gemv_load_raw<V>(wrow[r] + (s0 + u) * STEP);
      }
    }
    if (s0 == 0) {
      grid_dependency_wait();
      launch_dependents();
      xl = after_dependency_wait(xl);
      res = after_dependency_wait(res);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (STEPS % U == 0 || s0 + u < STEPS) gemv_step<P>(xl, (s0 + u) * STEP, wraw[u], acc);
    }
  }
  if (STEPS == 0) {
    grid_dependency_wait();
    launch_dependents();
    xl = after_dependency_wait(xl);
    res = after_dependency_wait(res);
  }
  if (K % STEP != 0 && STEPS * STEP + lane * V < K) {
    Raw wraw[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) wraw[r] = gemv_load_raw<V>(wrow[r] + STEPS * STEP);
    gemv_step<P>(xl, STEPS * STEP, wraw, acc);
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

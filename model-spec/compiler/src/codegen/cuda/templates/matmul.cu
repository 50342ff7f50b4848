// aotune: generic matrix products that survive the passes: ONNX Gemm
// (alpha * op(A) * op(B) + beta * C, C broadcast) and MatMul (numpy batch
// broadcasting, 1-D promotion), row-major operands.
//
// Transposes are strides (P::A_RS / A_CS, B_RS / B_CS); batch z reads A and B
// at P::a_batch(z) / P::b_batch(z). CTA tile BM x BN with TM x TN outputs per
// thread (interleaved, stride TY / TX), BK-deep shared tiles loaded element
// by element with bounds checks: simple and correct, not fast (Dense and the
// convolutions have the fast kernels).

namespace aotune {

template <class P>
__device__ __forceinline__ void matmul(const typename P::TA* __restrict__ a,
                                       const typename P::TB* __restrict__ b,
                                       const typename P::TC* __restrict__ c,
                                       typename P::TOut* __restrict__ y) {
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, TM = P::TM, TN = P::TN;
  constexpr int TX = BN / TN, TY = BM / TM, T = TX * TY;
  constexpr int M = P::GEMM_M, N = P::GEMM_N, K = P::GEMM_K;
  __shared__ float As[BK][BM];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN, z = blockIdx.z;
  const typename P::TA* az = a + P::a_batch(z);
  const typename P::TB* bz = b + P::b_batch(z);

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int jj = 0; jj < TN; ++jj) acc[i][jj] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int idx = tid; idx < BK * BM; idx += T) {
      const int kk = idx / BM, i = idx % BM;
      const int gm = m0 + i, gk = k0 + kk;
      As[kk][i] = (gm < M && gk < K) ? operand<P::TF32>(to_f32(az[gm * P::A_RS + gk * P::A_CS]))
                                     : 0.0f;
    }
    for (int idx = tid; idx < BK * BN; idx += T) {
      const int kk = idx / BN, jj = idx % BN;
      const int gn = n0 + jj, gk = k0 + kk;
      Bs[kk][jj] = (gn < N && gk < K) ? operand<P::TF32>(to_f32(bz[gk * P::B_RS + gn * P::B_CS]))
                                      : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk)
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int jj = 0; jj < TN; ++jj)
          acc[i][jj] = fmaf(As[kk][ty + i * TY], Bs[kk][tx + jj * TX], acc[i][jj]);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int gm = m0 + ty + i * TY;
    if (gm >= M) continue;
#pragma unroll
    for (int jj = 0; jj < TN; ++jj) {
      const int gn = n0 + tx + jj * TX;
      if (gn >= N) continue;
      float v = P::ALPHA_IS_ONE ? acc[i][jj] : __fmul_rn(P::ALPHA, acc[i][jj]);
      if (P::HAS_C) v = __fadd_rn(v, __fmul_rn(P::BETA, to_f32(c[gm * P::C_RS + gn * P::C_CS])));
      y[(z * M + gm) * N + gn] = from_f32<typename P::TOut>(v);
    }
  }
}

}  // namespace aotune

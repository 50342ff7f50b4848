// aotune: implicit-GEMM convolution on the CUDA cores (f32 FMA), any dtypes.
//
// GEMM view of an NHWC convolution with OHWI weights (groups = 1):
//   A[m, k] = x[n, h, w, c]  with m = (n, p, q), k = (r, s, c),
//             h = p*SH - PH + r*DH, w = q*SW - PW + s*DW (zero outside),
//   B[k, n] = w[n, r, s, c]  (row n of the OHWI weight is contiguous in k),
//   y[m, n] = act(sum_k A*B + bias[n] + res[m, n]); y is [N*P*Q, K] = NHWC.
// A dense layer is the 1x1 case (H = W = 1).
//
// CTA tile BM x BN, K step BK, TM x TN accumulators per thread. Global tiles
// go through registers into a double-buffered f32 shared tile stored
// k-major (As[k][m], Bs[k][n]), so the inner loop reads float4s. Each thread
// owns TM/4 groups of 4 rows spaced 4*TY apart and TN/4 groups of 4 columns
// spaced 4*TX apart: a warp's float4 reads cover contiguous shared memory.
// VA / VB elements move per global access (16 bytes when C and R*S*C allow).
// SPLIT_K > 1 splits the k tiles over blockIdx.z (see splitk_reduce).

namespace aotune {

template <class P>
__device__ __forceinline__ void conv_simt(const typename P::TIn* __restrict__ x,
                                          const typename P::TW* __restrict__ wgt,
                                          const typename P::TBias* __restrict__ bias,
                                          const typename P::TRes* __restrict__ res,
                                          const typename P::TIn* __restrict__ xs,
                                          typename P::TOut* __restrict__ y) {
  static_assert(!P::POOL, "the SIMT kernel has no pooled epilogue");
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, TM = P::TM, TN = P::TN;
  constexpr int TX = BN / TN, TY = BM / TM, T = TX * TY;
  constexpr int M = P::GEMM_M, N = P::GEMM_N, GK = P::GEMM_K;
  constexpr int VA = P::VA, VB = P::VB;
  constexpr int NA = BM * BK / VA, LA = (NA + T - 1) / T;
  constexpr int NB = BN * BK / VB, LB = (NB + T - 1) / T;
  constexpr int KT = (GK + BK - 1) / BK;
  constexpr int KT_SPLIT = (KT + P::SPLIT_K - 1) / P::SPLIT_K;
  constexpr int PQ = P::P * P::Q;
  constexpr int SC = P::S * P::C;
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are float4 groups");
  static_assert(BK % VA == 0 && BK % VB == 0, "vectors never straddle a k tile");
  static_assert(P::C % VA == 0 && GK % VB == 0, "vectors never straddle a pixel or a row");
  // A shortcut (P::HAS_SC) extends K past K_MAIN with the channels of a
  // second input at pixel (p * SC_SH, q * SC_SW) behind a pointwise conv.
  static_assert(!P::HAS_SC || (!P::A_BOUNDS && P::SC_C % VA == 0 && P::K_MAIN % VA == 0),
                "shortcut: pointwise main conv, whole vectors per shortcut pixel");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* As = reinterpret_cast<float*>(smem_raw);  // [2][BK][BM]
  float* Bs = As + 2 * BK * BM;                     // [2][BK][BN]

  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int kt_begin = blockIdx.z * KT_SPLIT;
  const int kt_end = min(KT, kt_begin + KT_SPLIT);

  // Rows of A this thread loads: image offset and top-left input pixel.
  int a_img[LA], a_h[LA], a_w[LA];
  int s_pix[P::HAS_SC ? LA : 1];
  bool a_row[LA];
#pragma unroll
  for (int l = 0; l < LA; ++l) {
    const int idx = tid + l * T;
    const int m = m0 + idx % BM;
    a_row[l] = (NA % T == 0 || idx < NA) && m < M;
    const int mm = a_row[l] ? m : 0;
    const int img = mm / PQ, pq = mm % PQ;
    a_img[l] = img * (P::H * P::W * P::C);
    a_h[l] = (pq / P::Q) * P::SH - P::PH;
    a_w[l] = (pq % P::Q) * P::SW - P::PW;
    if (P::HAS_SC) {
      s_pix[P::HAS_SC ? l : 0] =
          img * (P::SC_H * P::SC_W * P::SC_C) +
          ((pq / P::Q) * P::SC_SH * P::SC_W + (pq % P::Q) * P::SC_SW) * P::SC_C;
    }
  }

  float ra[LA][VA], rb[LB][VB];

  auto load_global = [&](int kt) {
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int idx = tid + l * T;
      const int k = kt * BK + (idx / BM) * VA;
      const int r = k / SC, s = (k % SC) / P::C, c = k % P::C;
      const int h = a_h[l] + r * P::DH, w = a_w[l] + s * P::DW;
      bool ok = a_row[l] && (GK % BK == 0 || k < GK);
      if (P::A_BOUNDS) ok = ok && h >= 0 && h < P::H && w >= 0 && w < P::W;
      if (P::HAS_SC && ok && k >= P::K_MAIN) {
        load_f32<VA>(xs + s_pix[P::HAS_SC ? l : 0] + (k - P::K_MAIN), ra[l]);
      } else if (ok) {
        load_f32<VA>(x + a_img[l] + (h * P::W + w) * P::C + c, ra[l]);
      } else {
#pragma unroll
        for (int e = 0; e < VA; ++e) ra[l][e] = 0.0f;
      }
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int idx = tid + l * T;
      const int n = n0 + idx % BN;
      const int k = kt * BK + (idx / BN) * VB;
      const bool ok = (NB % T == 0 || idx < NB) && n < N && (GK % BK == 0 || k < GK);
      if (ok) {
        load_f32<VB>(wgt + n * GK + k, rb[l]);
      } else {
#pragma unroll
        for (int e = 0; e < VB; ++e) rb[l][e] = 0.0f;
      }
    }
  };

  auto store_shared = [&](int buf) {
    float* as = As + buf * BK * BM;
    float* bs = Bs + buf * BK * BN;
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int idx = tid + l * T;
      if (NA % T == 0 || idx < NA) {
#pragma unroll
        for (int e = 0; e < VA; ++e)
          as[((idx / BM) * VA + e) * BM + idx % BM] = operand<P::TF32>(ra[l][e]);
      }
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int idx = tid + l * T;
      if (NB % T == 0 || idx < NB) {
#pragma unroll
        for (int e = 0; e < VB; ++e)
          bs[((idx / BN) * VB + e) * BN + idx % BN] = operand<P::TF32>(rb[l][e]);
      }
    }
  };

  float acc[TM * TN];
#pragma unroll
  for (int i = 0; i < TM * TN; ++i) acc[i] = 0.0f;

  if (kt_begin < kt_end) {
    load_global(kt_begin);
    store_shared(0);
  }
  __syncthreads();
  int buf = 0;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const bool more = kt + 1 < kt_end;
    if (more) load_global(kt + 1);
    const float* as = As + buf * BK * BM;
    const float* bs = Bs + buf * BK * BN;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int g = 0; g < TM / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(as + kk * BM + g * 4 * TY + ty * 4);
        a[g * 4 + 0] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(bs + kk * BN + g * 4 * TX + tx * 4);
        b[g * 4 + 0] = v.x; b[g * 4 + 1] = v.y; b[g * 4 + 2] = v.z; b[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i * TN + j] = fmaf(a[i], b[j], acc[i * TN + j]);
    }
    if (more) store_shared(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

  if (P::SPLIT_K > 1) {
    if (!splitk_reduce<TM * TN, T, P::SPLIT_K>(acc, blockIdx.y * gridDim.x + blockIdx.x,
                                                 gridDim.x * gridDim.y))
      return;
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + (i / 4) * 4 * TY + ty * 4 + i % 4;
    if (m >= M) continue;
#pragma unroll
    for (int g = 0; g < TN / 4; ++g) {
      const int n = n0 + g * 4 * TX + tx * 4;
      float v[4] = {acc[i * TN + g * 4], acc[i * TN + g * 4 + 1], acc[i * TN + g * 4 + 2],
                    acc[i * TN + g * 4 + 3]};
      if (N % 4 == 0) {
        if (n < N) epilogue_store<P, 4>(y, bias, res, m, n, v);
      } else {
        epilogue_store_checked<P, 4>(y, bias, res, m, n, v);
      }
    }
  }
}

}  // namespace aotune

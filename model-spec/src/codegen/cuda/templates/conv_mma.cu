// aotune: implicit-GEMM convolution on the tensor cores (mma.sync m16n8k16,
// f16 or bf16 operands, f32 accumulation).
//
// Same GEMM view as conv_simt.cu (A = im2col of the NHWC input, B = OHWI
// weight rows, y = [N*P*Q, K]). CTA tile BM x BN, K step BK (32 or 64),
// WARPS_M x WARPS_N warps, each owning a (BM/WARPS_M) x (BN/WARPS_N) warp tile
// of MI x NI mma tiles. Shared tiles are row-major with k contiguous and rows
// padded by 8 elements (16 bytes), which makes both the 16-byte cp.async
// stores and the ldmatrix.x4 reads conflict-free without a swizzle. A
// STAGES-deep cp.async pipeline (zero-fill for padding and out-of-range rows)
// feeds it when A_VEC / B_VEC (C % 8 == 0, R*S*C % 8 == 0); otherwise that
// operand is gathered element by element into the same stage (the stem, C=3).
// SPLIT_K > 1 splits the k tiles over blockIdx.z (see splitk_reduce).

namespace aotune {

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; `valid == false` writes zeros (src-size 0).
template <bool CACHE_L1>
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  if (CACHE_L1) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(bytes));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned int (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_16816(float* d, const unsigned int (&a)[4],
                                          const unsigned int (&b)[2], __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_16816(float* d, const unsigned int (&a)[4],
                                          const unsigned int (&b)[2], __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <class P>
__device__ __forceinline__ void conv_mma(const typename P::TIn* __restrict__ x,
                                         const typename P::TW* __restrict__ wgt,
                                         const typename P::TBias* __restrict__ bias,
                                         const typename P::TRes* __restrict__ res,
                                         typename P::TOut* __restrict__ y) {
  typedef typename P::TIn T16;
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, STAGES = P::STAGES;
  constexpr int WARPS_M = P::WARPS_M, WARPS_N = P::WARPS_N, T = 32 * WARPS_M * WARPS_N;
  constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, MI = WTM / 16, NI = WTN / 8;
  constexpr int PITCH = BK + 8;
  constexpr int A_STAGE = BM * PITCH, B_STAGE = BN * PITCH;
  constexpr int M = P::GEMM_M, N = P::GEMM_N, GK = P::GEMM_K;
  constexpr int KC = BK / 8;  // 16-byte chunks per tile row
  constexpr int CA = BM * KC, LA = (CA + T - 1) / T;
  constexpr int CB = BN * KC, LB = (CB + T - 1) / T;
  constexpr int KT = (GK + BK - 1) / BK;
  constexpr int KT_SPLIT = (KT + P::SPLIT_K - 1) / P::SPLIT_K;
  constexpr int PQ = P::P * P::Q;
  constexpr int SC = P::S * P::C;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "mma tile shape");
  static_assert(!P::A_VEC || P::C % 8 == 0, "16-byte A chunks stay inside one pixel");
  static_assert(!P::B_VEC || GK % 8 == 0, "16-byte B chunks stay inside one row");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T16* As = reinterpret_cast<T16*>(smem_raw);
  T16* Bs = As + STAGES * A_STAGE;
  const unsigned short* xb = reinterpret_cast<const unsigned short*>(x);
  const unsigned short* wb = reinterpret_cast<const unsigned short*>(wgt);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int kt_begin = blockIdx.z * KT_SPLIT;
  const int kt_end = min(KT, kt_begin + KT_SPLIT);

  // Rows of A this thread copies: image offset and top-left input pixel.
  int a_img[LA], a_h[LA], a_w[LA];
  bool a_row[LA];
#pragma unroll
  for (int l = 0; l < LA; ++l) {
    const int idx = tid + l * T;
    const int m = m0 + idx / KC;
    a_row[l] = (CA % T == 0 || idx < CA) && m < M;
    const int mm = a_row[l] ? m : 0;
    const int img = mm / PQ, pq = mm % PQ;
    a_img[l] = img * (P::H * P::W * P::C);
    a_h[l] = (pq / P::Q) * P::SH - P::PH;
    a_w[l] = (pq % P::Q) * P::SW - P::PW;
  }

  auto load_stage = [&](int stage, int kt) {
    T16* as = As + stage * A_STAGE;
    T16* bs = Bs + stage * B_STAGE;
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int idx = tid + l * T;
      if (CA % T != 0 && idx >= CA) continue;
      T16* dst = as + (idx / KC) * PITCH + (idx % KC) * 8;
      const int k = kt * BK + (idx % KC) * 8;
      if (P::A_VEC) {
        const int r = k / SC, s = (k % SC) / P::C, c = k % P::C;
        const int h = a_h[l] + r * P::DH, w = a_w[l] + s * P::DW;
        bool ok = a_row[l] && (GK % BK == 0 || k < GK);
        if (P::A_BOUNDS) ok = ok && h >= 0 && h < P::H && w >= 0 && w < P::W;
        const T16* src = ok ? x + a_img[l] + (h * P::W + w) * P::C + c : x;
        cp_async_16<true>(dst, src, ok);
      } else {
        unsigned short v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int ke = k + e;
          const int r = ke / SC, s = (ke % SC) / P::C, c = ke % P::C;
          const int h = a_h[l] + r * P::DH, w = a_w[l] + s * P::DW;
          bool ok = a_row[l] && ke < GK;
          if (P::A_BOUNDS) ok = ok && h >= 0 && h < P::H && w >= 0 && w < P::W;
          v[e] = ok ? xb[a_img[l] + (h * P::W + w) * P::C + c] : (unsigned short)0;
        }
        *reinterpret_cast<uint4*>(dst) =
            make_uint4(v[0] | (unsigned int)v[1] << 16, v[2] | (unsigned int)v[3] << 16,
                       v[4] | (unsigned int)v[5] << 16, v[6] | (unsigned int)v[7] << 16);
      }
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int idx = tid + l * T;
      if (CB % T != 0 && idx >= CB) continue;
      T16* dst = bs + (idx / KC) * PITCH + (idx % KC) * 8;
      const int n = n0 + idx / KC;
      const int k = kt * BK + (idx % KC) * 8;
      if (P::B_VEC) {
        const bool ok = n < N && (GK % BK == 0 || k < GK);
        cp_async_16<false>(dst, ok ? wgt + n * GK + k : wgt, ok);
      } else {
        unsigned short v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const bool ok = n < N && k + e < GK;
          v[e] = ok ? wb[n * GK + k + e] : (unsigned short)0;
        }
        *reinterpret_cast<uint4*>(dst) =
            make_uint4(v[0] | (unsigned int)v[1] << 16, v[2] | (unsigned int)v[3] << 16,
                       v[4] | (unsigned int)v[5] << 16, v[6] | (unsigned int)v[7] << 16);
      }
    }
  };

  float acc[MI * NI * 4];
#pragma unroll
  for (int i = 0; i < MI * NI * 4; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (kt_begin + s < kt_end) load_stage(s, kt_begin + s);
    cp_async_commit();
  }

  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int i = kt - kt_begin;
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < kt_end) load_stage((i + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const T16* as = As + (i % STAGES) * A_STAGE + (wm * WTM) * PITCH;
    const T16* bs = Bs + (i % STAGES) * B_STAGE + (wn * WTN) * PITCH;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned int af[MI][4], bf[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        ldmatrix_x4(af[mi], as + (mi * 16 + lane % 16) * PITCH + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        unsigned int t[4];
        ldmatrix_x4(t, bs + (nj * 16 + lane % 8 + (lane / 16) * 8) * PITCH + kk * 16 +
                           ((lane / 8) % 2) * 8);
        bf[2 * nj][0] = t[0];
        bf[2 * nj][1] = t[1];
        bf[2 * nj + 1][0] = t[2];
        bf[2 * nj + 1][1] = t[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          mma_16816(acc + (mi * NI + ni) * 4, af[mi], bf[ni], T16());
        }
    }
  }
  cp_async_wait<0>();

  if (P::SPLIT_K > 1) {
    if (!splitk_reduce<MI * NI * 4, T, P::SPLIT_K>(acc, blockIdx.y * gridDim.x + blockIdx.x,
                                                    gridDim.x * gridDim.y))
      return;
  }

  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int m = m0 + wm * WTM + mi * 16 + g + half_row * 8;
      if (m >= M) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int n = n0 + wn * WTN + ni * 8 + t4 * 2;
        float v[2] = {acc[(mi * NI + ni) * 4 + half_row * 2],
                      acc[(mi * NI + ni) * 4 + half_row * 2 + 1]};
        if (N % 2 == 0) {
          if (n < N) epilogue_store<P, 2>(y, bias, res, m, n, v);
        } else {
          epilogue_store_checked<P, 2>(y, bias, res, m, n, v);
        }
      }
    }
  }
}

}  // namespace aotune

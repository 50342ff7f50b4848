// aotune: implicit-GEMM convolution on the tensor cores, f32 accumulation:
// mma.sync m16n8k16 for f16/bf16 operands, m16n8k8 for tf32 (f32 in memory,
// rounded to tf32 with cvt.rna after ldmatrix, as the CPU reference rounds).
//
// Same GEMM view as conv_simt.cu (A = im2col of the NHWC input, B = OHWI
// weight rows, y = [N*P*Q, K]). CTA tile BM x BN, K step BK elements (64 or
// 128 bytes of k), WARPS_M x WARPS_N warps, each owning a (BM/WARPS_M) x
// (BN/WARPS_N) warp tile of MI x NI mma tiles. One CTA per tile, tiles
// numbered with the N tile fastest (blockIdx.x), so the CTAs sharing an A
// tile run together and A comes from DRAM once however many N tiles there
// are. SPLIT_K > 1 splits the k tiles over blockIdx.z (see splitk_reduce, or
// cluster_splitk_reduce / cluster_spread_reduce when the slices of a tile
// form a cluster).
//
// Shared tiles are row-major with k contiguous, rows of KC 16-byte chunks,
// no padding: chunk c of row r is stored at chunk c ^ ((r / (8 / KC)) % KC).
// Any 8 consecutive rows then put one logical chunk in 8 distinct 16-byte
// bank groups, so ldmatrix (8 rows x 16 bytes per phase) and the cp.async
// fill (whole 128-byte lines per phase) are conflict-free.
//
// In bytes both mma shapes read the same fragments: a k step is 32 bytes of
// k (16 halves or 8 tf32), ldmatrix.x4 gives A as four 8 x 16-byte matrices
// (rows 0-7 / 8-15 x bytes 0-15 / 16-31) and B as two n8 tiles x two k
// halves. For 32-bit data ldmatrix's b16 pairs are whole tf32 values: lane
// i gets row i/4, element i%4, which is the m16n8k8 .tf32 fragment layout
// (a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4); b0 = (k t,
// n g), b1 = (k t+4, n g); g = lane/4, t = lane%4).
//
// A STAGES-deep cp.async pipeline (zero-fill for padding and out-of-range
// rows) feeds it when A_VEC / B_VEC (C and R*S*C multiples of one 16-byte
// chunk); otherwise that operand is gathered element by element into the
// same stage (the stem, C=3).
//
// Epilogue (P::STAGED_EPILOGUE): the accumulators go through shared memory
// (the pipeline buffers, EPI_MI mma rows per warp per pass, rows padded to
// BN + 8 floats so the quads' 8-byte stores hit distinct banks), then each
// thread finishes 16 bytes of output: bias, residual (16-byte loads),
// activation and one rounding, consecutive threads on consecutive chunks of
// a row, so every warp store writes whole 32-byte sectors. Otherwise each
// thread stores its fragments directly (2 values per row).
//
// P::POOL (a global average pool in the epilogue; the tile holds every
// output row, GEMM_M = N * POOL_PIXELS <= BM, one staging pass): each
// finished chunk is rounded to TOut and written back into the staging as
// f32 instead of to y, then thread t of the CTA sums column t of each image
// over its POOL_PIXELS rows in row order, divides once and stores y[image,
// n0 + t] with one rounding: the steps of the reference's conv, its stored
// output, and GlobalAveragePool.

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

// Chunk index at which logical 16-byte chunk `chunk` of tile row `row` is
// stored, for rows of KC chunks (see the header).
template <int KC> __device__ __forceinline__ int swizzle(int row, int chunk) {
  return chunk ^ ((row / (8 / KC)) % KC);
}

// One mma.sync per operand type: `prepare` turns ldmatrix's raw fragment
// registers into operands (tf32: round to nearest, ties away, as
// ir::round_tf32), `run` accumulates one 16 x 8 tile over one 32-byte k step.
template <class T> struct Mma;

template <> struct Mma<__half> {
  template <int R> static __device__ __forceinline__ void prepare(unsigned int (&)[R]) {}
  static __device__ __forceinline__ void run(float* d, const unsigned int (&a)[4],
                                             const unsigned int (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <> struct Mma<__nv_bfloat16> {
  template <int R> static __device__ __forceinline__ void prepare(unsigned int (&)[R]) {}
  static __device__ __forceinline__ void run(float* d, const unsigned int (&a)[4],
                                             const unsigned int (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <> struct Mma<float> {
  template <int R> static __device__ __forceinline__ void prepare(unsigned int (&r)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) r[i] = __float_as_uint(round_tf32(__uint_as_float(r[i])));
  }
  static __device__ __forceinline__ void run(float* d, const unsigned int (&a)[4],
                                             const unsigned int (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Builds one 16-byte chunk of a shared tile from CE raw elements,
// `element(i)` giving the i-th (zero where it falls outside the operand).
template <class E, int CE, class F>
__device__ __forceinline__ void gather_chunk(unsigned char* dst, F element) {
  uint4 pack;
  E* e = reinterpret_cast<E*>(&pack);
#pragma unroll
  for (int i = 0; i < CE; ++i) e[i] = element(i);
  *reinterpret_cast<uint4*>(dst) = pack;
}

// One 16-byte output chunk's V staged floats at `src`, read as float4s in
// the order rotated by `rot` (lanes 4-7 of every 8 start at another float4,
// so the 8 lanes of a 128-bit shared-load phase cover all 32 banks).
template <int V>
__device__ __forceinline__ void read_staged_chunk(const float* src, int rot, float (&v)[V]) {
  constexpr int Q = V / 4;
  float4 p[Q];
#pragma unroll
  for (int i = 0; i < Q; ++i) p[i] = *reinterpret_cast<const float4*>(src + ((i + rot) % Q) * 4);
#pragma unroll
  for (int j = 0; j < Q; ++j) {
    float4 u = p[0];
#pragma unroll
    for (int i = 1; i < Q; ++i) {
      if ((i + rot) % Q == j) u = p[i];
    }
    v[4 * j] = u.x;
    v[4 * j + 1] = u.y;
    v[4 * j + 2] = u.z;
    v[4 * j + 3] = u.w;
  }
}

// P::POOL: the V finished values `v` of output row m (staged at `dst`)
// rounded to TOut and written back there as f32, for pool_staged_columns.
template <class P, int V>
__device__ __forceinline__ void stage_pooled_chunk(float* dst, float* v) {
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = to_f32(from_f32<typename P::TOut>(v[i]));
#pragma unroll
  for (int i = 0; i < V / 4; ++i)
    *reinterpret_cast<float4*>(dst + 4 * i) = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}

// P::POOL, after every chunk of the tile is staged (stage_pooled_chunk)
// and a barrier: the mean of each image's POOL_PIXELS staged rows (row r
// being output row r, m0 = 0) per column, summed in row order, one
// division, one rounding, stored at y[image * GEMM_N + n0 + column].
template <class P, int T>
__device__ __forceinline__ void pool_staged_columns(const float* __restrict__ cs, int pitch, int n0,
                                                    typename P::TOut* __restrict__ y) {
  constexpr int BN = P::BN, PQ = P::POOL_PIXELS, IMAGES = P::GEMM_M / PQ;
  static_assert(P::GEMM_M % PQ == 0 && P::GEMM_M <= P::BM, "one M tile holds every image");
  for (int idx = threadIdx.x; idx < IMAGES * BN; idx += T) {
    const int image = idx / BN, col = idx % BN, n = n0 + col;
    if (n >= P::GEMM_N) continue;
    const float* src = cs + image * PQ * pitch + col;
    float sum = 0.0f;
    for (int p = 0; p < PQ; ++p) sum += src[p * pitch];
    y[image * P::GEMM_N + n] = from_f32<typename P::TOut>(sum / (float)PQ);
  }
}

// Finishes ROWS staged rows of BN + 8 floats at `cs`, row r being output
// pixel m0 + r, in 16-byte chunks spread over T threads (the swapped wgmma
// tile's epilogue, conv_wgmma.cu).
template <class P, int ROWS, int T>
__device__ __forceinline__ void finish_staged_rows(float* __restrict__ cs, int m0, int n0,
                                                   typename P::TOut* __restrict__ y,
                                                   const typename P::TBias* __restrict__ bias,
                                                   const typename P::TRes* __restrict__ res) {
  constexpr int V = 16 / (int)sizeof(typename P::TOut);
  constexpr int BN = P::BN, M = P::GEMM_M, N = P::GEMM_N, PITCH = BN + 8, CPR = BN / V;
  constexpr int CHUNKS = ROWS * CPR, L = (CHUNKS + T - 1) / T;
  static_assert(BN % V == 0, "whole chunks per tile row");
  const int rot = (threadIdx.x / 4) % (V / 4);
#pragma unroll
  for (int l = 0; l < L; ++l) {
    const int idx = threadIdx.x + l * T;
    if (CHUNKS % T != 0 && idx >= CHUNKS) break;
    const int row = idx / CPR, chunk = idx % CPR;
    const int m = m0 + row, n = n0 + chunk * V;
    if (m >= M || n >= N) continue;
    float v[V];
    read_staged_chunk<V>(cs + row * PITCH + chunk * V, rot, v);
    if constexpr (P::POOL) {
      float r[V];
      if (P::HAS_RES) load_f32_wide<V>(res + m * N + n, r);
      epilogue_apply<P, V>(bias, r, n, v);
      // Only this thread reads and writes the chunk's floats.
      stage_pooled_chunk<P, V>(cs + row * PITCH + chunk * V, v);
    } else if (N % V == 0) {
      epilogue_store<P, V>(y, bias, res, m, n, v);
    } else {
      epilogue_store_checked<P, V>(y, bias, res, m, n, v);
    }
  }
  if constexpr (P::POOL) {
    __syncthreads();
    pool_staged_columns<P, T>(cs, PITCH, n0, y);
  }
}

// The staged epilogue (see the header): the CTA's accumulators pass
// through `cs` (shared, at least WARPS_M * EPI_MI * 16 rows of BN + 8
// floats) in MI / EPI_MI passes; each pass stages mma rows
// pass * EPI_MI .. + EPI_MI - 1 of every warp, then the CTA finishes them.
template <class P, int MI, int NI, int WTM, int WTN, int T>
__device__ __forceinline__ void staged_epilogue(float* __restrict__ cs, const float* acc, int wm,
                                                int wn, int g, int t4, int m0, int n0,
                                                typename P::TOut* __restrict__ y,
                                                const typename P::TBias* __restrict__ bias,
                                                const typename P::TRes* __restrict__ res,
                                                const unsigned char* rs = nullptr) {
  constexpr int V = 16 / (int)sizeof(typename P::TOut);  // outputs per 16-byte store
  constexpr int Q = V / 4;                                // float4 reads per chunk
  constexpr int BN = P::BN, M = P::GEMM_M, N = P::GEMM_N, EPI_MI = P::EPI_MI;
  constexpr int WROWS = EPI_MI * 16;  // rows one warp row stages per pass
  constexpr int ROWS = P::WARPS_M * WROWS;
  constexpr int PITCH = BN + 8;  // floats; PITCH % 32 == 8 for BN % 32 == 0
  constexpr int CPR = BN / V;    // 16-byte output chunks per row
  constexpr int CHUNKS = ROWS * CPR, L = (CHUNKS + T - 1) / T;
  static_assert(MI % EPI_MI == 0, "whole passes");
  static_assert(BN % V == 0, "whole chunks per tile row");
  static_assert(!P::POOL || (MI == EPI_MI && N % V == 0), "a pooled tile is staged in one pass");
  static_assert(!P::RES_PREFETCH || (MI == EPI_MI && WTM == WROWS && N % V == 0 &&
                                     sizeof(typename P::TRes) == sizeof(typename P::TOut)),
                "a prefetched residual tile is finished in one pass, chunk for chunk");
  // Lanes 4-7 of every 8 read their chunk's float4s in rotated order, so
  // the 8 lanes of a 128-bit shared-load phase cover all 32 banks.
  const int rot = (threadIdx.x / 4) % Q;
#pragma unroll
  for (int pass = 0; pass < MI / EPI_MI; ++pass) {
    if (pass > 0) __syncthreads();
#pragma unroll
    for (int lmi = 0; lmi < EPI_MI; ++lmi) {
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        float* row = cs + (wm * WROWS + lmi * 16 + g + half_row * 8) * PITCH + wn * WTN + t4 * 2;
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const int a = ((pass * EPI_MI + lmi) * NI + ni) * 4 + half_row * 2;
          *reinterpret_cast<float2*>(row + ni * 8) = make_float2(acc[a], acc[a + 1]);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int idx = threadIdx.x + l * T;
      if (CHUNKS % T != 0 && idx >= CHUNKS) break;
      const int row = idx / CPR, chunk = idx % CPR;
      const int m = m0 + (row / WROWS) * WTM + pass * WROWS + row % WROWS;
      const int n = n0 + chunk * V;
      if (m >= M || n >= N) continue;
      float v[V];
      read_staged_chunk<V>(cs + row * PITCH + chunk * V, rot, v);
      if constexpr (P::POOL) {
        float r[V];
        if (P::RES_PREFETCH) {
          load_f32<V>(reinterpret_cast<const typename P::TRes*>(rs + idx * 16), r);
        } else if (P::HAS_RES) {
          load_f32_wide<V>(res + m * N + n, r);
        }
        epilogue_apply<P, V>(bias, r, n, v);
        // One pass, staging row = output row; only this thread touches the chunk.
        stage_pooled_chunk<P, V>(cs + row * PITCH + chunk * V, v);
      } else if (P::RES_PREFETCH) {
        // Chunk idx of the tile, copied by this thread (prefetch_residual_tile).
        float r[V];
        load_f32<V>(reinterpret_cast<const typename P::TRes*>(rs + idx * 16), r);
        epilogue_finish<P, V>(y, bias, r, m, n, v);
      } else if (N % V == 0) {
        epilogue_store<P, V>(y, bias, res, m, n, v);
      } else {
        epilogue_store_checked<P, V>(y, bias, res, m, n, v);
      }
    }
  }
  if constexpr (P::POOL) {
    __syncthreads();
    pool_staged_columns<P, T>(cs, PITCH, n0, y);
  }
}

// The residual's BM x BN tile copied into shared memory `rs` ([BM][BN]
// 16-bit elements, 16-byte chunks in row order) with cp.async, for a
// staged epilogue that finishes the tile in one pass (P::RES_PREFETCH):
// thread t copies chunks t, t + T, ..., exactly the chunks it finishes
// there, so its own cp.async wait makes them visible to it. Rows and
// columns outside the output are zero-filled (and never stored).
template <class P, int BM, int BN, int T>
__device__ __forceinline__ void prefetch_residual_tile(const typename P::TRes* __restrict__ res,
                                                       unsigned char* rs, int m0, int n0) {
  constexpr int V = 16 / (int)sizeof(typename P::TRes);
  constexpr int CPR = BN / V, CHUNKS = BM * CPR, L = (CHUNKS + T - 1) / T;
#pragma unroll
  for (int l = 0; l < L; ++l) {
    const int idx = threadIdx.x + l * T;
    if (CHUNKS % T != 0 && idx >= CHUNKS) break;
    const int m = m0 + idx / CPR, n = n0 + (idx % CPR) * V;
    const bool valid = m < P::GEMM_M && n < P::GEMM_N;
    cp_async_16<false>(rs + idx * 16, valid ? res + (size_t)m * P::GEMM_N + n : res, valid);
  }
}

// The direct epilogue: each thread finishes and stores its own fragments,
// two consecutive outputs per row (c0,c1 at row g, c2,c3 at row g + 8).
template <class P, int MI, int NI, int WTM, int WTN>
__device__ __forceinline__ void direct_epilogue(const float* acc, int wm, int wn, int g, int t4,
                                                int m0, int n0, typename P::TOut* __restrict__ y,
                                                const typename P::TBias* __restrict__ bias,
                                                const typename P::TRes* __restrict__ res) {
  static_assert(!P::POOL, "a pooled epilogue is staged");
  constexpr int M = P::GEMM_M, N = P::GEMM_N;
  const unsigned int rank = P::CLUSTER_SPREAD ? cluster_ctarank() : 0u;  // spread_owns
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int m = m0 + wm * WTM + mi * 16 + g + half_row * 8;
      if (m >= M) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        if (!spread_owns<P>((mi * NI + ni) * 2 + half_row, rank)) continue;
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

// Fills one pipeline stage of the A (im2col rows of the NHWC input) and B
// (OHWI weight rows) tiles of a BM x BN CTA tile with T threads: tile rows
// of KC 16-byte chunks, swizzled as `swizzle<KC>`, by cp.async where the
// operand allows 16-byte chunks (A_VEC, B_VEC; zero-fill for padding and
// out-of-range rows) and element by element otherwise. Shared by the
// mma.sync and wgmma kernels, whose stages have the same layout.
template <class P, int BM, int BN, int BK, int T>
struct TileLoader {
  typedef typename P::TIn TE;
  typedef typename RawBytes<sizeof(TE)>::type E;
  static constexpr int CE = 16 / (int)sizeof(TE);  // elements per 16-byte chunk
  static constexpr int KC = BK / CE;               // 16-byte chunks per tile row
  static constexpr int ROW = KC * 16;              // bytes per tile row
  static constexpr int M = P::GEMM_M, N = P::GEMM_N, GK = P::GEMM_K;
  static constexpr int CA = BM * KC, LA = (CA + T - 1) / T;
  static constexpr int CB = BN * KC, LB = (CB + T - 1) / T;
  static constexpr int PQ = P::P * P::Q;
  static constexpr int SC = P::S * P::C;
  // Each thread copies one k chunk (the same for all its rows, as T is a
  // multiple of KC) of rows row0, row0 + T / KC, ... of each tile.
  static constexpr int ROW_STEP = T / KC;
  static_assert(T % KC == 0, "one chunk column per thread");
  static_assert(!P::A_VEC || P::C % CE == 0, "16-byte A chunks stay inside one pixel");
  // A shortcut (P::HAS_SC) extends K past K_MAIN with the channels of a
  // second input, read at pixel (p * SC_SH, q * SC_SW); its main conv is
  // 1x1, stride 1, unpadded, so rows past M are the only ones to skip.
  static_assert(!P::HAS_SC || (!P::A_BOUNDS && (!P::A_VEC || P::SC_C % CE == 0)),
                "shortcut: pointwise main conv, whole chunks per shortcut pixel");
  static_assert(!P::B_VEC || GK % CE == 0, "16-byte B chunks stay inside one row");
  // Rows past M read nothing: a_h is far below 0 (A_BOUNDS) or a_pix is -1
  // (no bounds, where valid offsets are >= 0).
  static constexpr int NO_ROW = -0x40000000;

  const TE* __restrict__ x;
  const TE* __restrict__ wgt;
  const TE* __restrict__ xs;
  int chunk, row0, n0;
  // Per A row: the element offset of its window's top-left input pixel
  // (negative past the top or left edge), with A_BOUNDS that pixel's h
  // and w, and with a shortcut the offset of its pixel in the second input.
  int a_pix[LA], a_h[P::A_BOUNDS ? LA : 1], a_w[P::A_BOUNDS ? LA : 1];
  int s_pix[P::HAS_SC ? LA : 1];

  // `tid`: this thread's index among the T that load (threadIdx.x unless
  // a warp-specialized kernel's producer warpgroup loads).
  __device__ __forceinline__ TileLoader(const TE* x_, const TE* w_, const TE* xs_, int m0, int n0_,
                                        int tid = threadIdx.x)
      : x(x_), wgt(w_), xs(xs_), chunk(tid % KC), row0(tid / KC), n0(n0_) {
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int m = m0 + row0 + l * ROW_STEP;
      const bool live = (CA % T == 0 || row0 + l * ROW_STEP < BM) && m < M;
      const int mm = live ? m : 0;
      const int img = mm / PQ, pq = mm % PQ;
      const int h = (pq / P::Q) * P::SH - P::PH, w = (pq % P::Q) * P::SW - P::PW;
      a_pix[l] = img * (P::H * P::W * P::C) + (h * P::W + w) * P::C;
      if (P::HAS_SC) {
        s_pix[P::HAS_SC ? l : 0] =
            img * (P::SC_H * P::SC_W * P::SC_C) +
            ((pq / P::Q) * P::SC_SH * P::SC_W + (pq % P::Q) * P::SC_SW) * P::SC_C;
      }
      if (P::A_BOUNDS) {
        a_h[l] = live ? h : NO_ROW;
        a_w[l] = w;
      } else if (!live) {
        a_pix[l] = -1;
      }
    }
  }

  // Whether row l's window tap (r, s) is inside the input.
  __device__ __forceinline__ bool a_inside(int l, int r, int s) const {
    if (!P::A_BOUNDS) return a_pix[l] >= 0;
    const int h = a_h[P::A_BOUNDS ? l : 0] + r * P::DH, w = a_w[P::A_BOUNDS ? l : 0] + s * P::DW;
    return h >= 0 && h < P::H && w >= 0 && w < P::W;
  }

  // Issues (or, for gathered operands, performs) the copies of k tile `kt`
  // into the stage at `as` (A) and `bs` (B).
  __device__ __forceinline__ void load(unsigned char* as, unsigned char* bs, int kt) const {
    load_a(as, kt);
    load_b(bs, kt);
  }

  // A's part of `load`: the input activations (and the shortcut's), which
  // the previous kernel writes.
  __device__ __forceinline__ void load_a(unsigned char* as, int kt) const {
    const E* xe = reinterpret_cast<const E*>(x);
    const int k = kt * BK + chunk * CE;
    const bool k_ok = GK % BK == 0 || k < GK;
    if (P::HAS_SC && P::A_VEC && k >= P::K_MAIN) {
      // The shortcut's channel k - K_MAIN of each row's pixel (rows past M
      // have a_pix < 0: no bounds without padding).
#pragma unroll
      for (int l = 0; l < LA; ++l) {
        const int row = row0 + l * ROW_STEP;
        if (CA % T != 0 && row >= BM) continue;
        const bool ok = k_ok && a_pix[l] >= 0;
        cp_async_16<true>(as + row * ROW + swizzle<KC>(row, chunk) * 16,
                          ok ? xs + s_pix[P::HAS_SC ? l : 0] + (k - P::K_MAIN) : xs, ok);
      }
    } else if (P::A_VEC) {
      // One window tap and channel offset for all of this thread's rows.
      const int r = k / SC, s = (k % SC) / P::C, c = k % P::C;
      const int tap = (r * P::DH * P::W + s * P::DW) * P::C + c;
#pragma unroll
      for (int l = 0; l < LA; ++l) {
        const int row = row0 + l * ROW_STEP;
        if (CA % T != 0 && row >= BM) continue;
        const bool ok = k_ok && a_inside(l, r, s);
        cp_async_16<true>(as + row * ROW + swizzle<KC>(row, chunk) * 16,
                          ok ? x + a_pix[l] + tap : x, ok);
      }
    } else {
#pragma unroll
      for (int l = 0; l < LA; ++l) {
        const int row = row0 + l * ROW_STEP;
        if (CA % T != 0 && row >= BM) continue;
        gather_chunk<E, CE>(as + row * ROW + swizzle<KC>(row, chunk) * 16, [&](int e) {
          const int ke = k + e;
          if (P::HAS_SC && ke >= P::K_MAIN) {
            const E* se = reinterpret_cast<const E*>(xs);
            const bool ok = ke < GK && a_pix[l] >= 0;
            return ok ? se[s_pix[P::HAS_SC ? l : 0] + ke - P::K_MAIN] : (E)0;
          }
          const int r = ke / SC, s = (ke % SC) / P::C, c = ke % P::C;
          const bool ok = ke < GK && a_inside(l, r, s);
          return ok ? xe[a_pix[l] + (r * P::DH * P::W + s * P::DW) * P::C + c] : (E)0;
        });
      }
    }
  }

  // B's part of `load`: the weights, which no kernel writes, so that a
  // kernel may issue these before its grid dependency wait.
  __device__ __forceinline__ void load_b(unsigned char* bs, int kt) const {
    const E* we = reinterpret_cast<const E*>(wgt);
    const int k = kt * BK + chunk * CE;
    const bool k_ok = GK % BK == 0 || k < GK;
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int row = row0 + l * ROW_STEP;
      if (CB % T != 0 && row >= BN) continue;
      unsigned char* dst = bs + row * ROW + swizzle<KC>(row, chunk) * 16;
      const int n = n0 + row;
      if (P::B_VEC) {
        const bool ok = n < N && k_ok;
        cp_async_16<false>(dst, ok ? wgt + n * GK + k : wgt, ok);
      } else {
        gather_chunk<E, CE>(dst, [&](int e) {
          const bool ok = n < N && k + e < GK;
          return ok ? we[n * GK + k + e] : (E)0;
        });
      }
    }
  }
};

// Sums the split-K slices of this CTA's tile into one CTA's accumulators:
// inside the tile's cluster, through the pipeline stages at `smem`
// (P::CLUSTER_SPLIT), or through the global workspace. Whether this CTA
// finishes the tile (always, without split-K). With P::CLUSTER_SPREAD every
// rank sums and finishes a share of the tile (cluster_spread_reduce: the
// region at P::SPREAD_OFFSET) and this says whether it has one. Shared with
// conv_wgmma.cu.
template <class P, int FR, int T>
__device__ __forceinline__ bool reduce_split_k(float (&acc)[FR], unsigned char* smem) {
  if (P::SPLIT_K == 1) return true;
  if constexpr (P::CLUSTER_SPREAD) {
    return cluster_spread_reduce<FR, T, P::SPLIT_K>(
        acc, reinterpret_cast<float2*>(smem + P::SPREAD_OFFSET), cluster_ctarank());
  }
  if (P::CLUSTER_SPLIT) {
    __syncthreads();  // every warp is done with the stages that now hold the slice
    return cluster_splitk_reduce<FR, T, P::SPLIT_K>(acc, reinterpret_cast<float*>(smem));
  }
  return splitk_reduce<FR, T, P::SPLIT_K>(acc, blockIdx.x, gridDim.x);
}

// The k loop's prologue, shared with conv_wgmma.cu: the copies of the CTA's
// first PREFETCH k tiles (of kt_begin .. kt_end), one cp.async group per
// tile, empty past the range. The weight tiles of all of them are issued
// first, then the grid dependency wait (common.cuh), then `after_wait` (the
// residual tile's prefetch, say) and the activation tiles: launched as a
// programmatic dependent launch, the weights stream in while the previous
// kernel finishes. Tile 0's group thus holds every prologue weight tile,
// which only makes its wait stricter: tile s's data has landed once the
// groups 0 .. s have. Without WEIGHTS_FIRST (batches the executor launches
// plainly, where the wait is a no-op) it waits first and each tile's group
// holds its own A and B, so tile 0 waits for its own weights only.
template <int PREFETCH, bool WEIGHTS_FIRST, class L, class AfterWait>
__device__ __forceinline__ void load_prologue(const L& loader, unsigned char* As, int a_stage,
                                              unsigned char* Bs, int b_stage, int kt_begin,
                                              int kt_end, AfterWait after_wait) {
  if (!WEIGHTS_FIRST) {
    grid_dependency_wait();
    after_wait();
#pragma unroll
    for (int s = 0; s < PREFETCH; ++s) {
      if (kt_begin + s < kt_end) loader.load(As + s * a_stage, Bs + s * b_stage, kt_begin + s);
      cp_async_commit();
    }
    return;
  }
#pragma unroll
  for (int s = 0; s < PREFETCH; ++s) {
    if (kt_begin + s < kt_end) loader.load_b(Bs + s * b_stage, kt_begin + s);
  }
  grid_dependency_wait();
  after_wait();
#pragma unroll
  for (int s = 0; s < PREFETCH; ++s) {
    if (kt_begin + s < kt_end) loader.load_a(As + s * a_stage, kt_begin + s);
    cp_async_commit();
  }
}

template <class P>
__device__ __forceinline__ void conv_mma(const typename P::TIn* __restrict__ x,
                                         const typename P::TW* __restrict__ wgt,
                                         const typename P::TBias* __restrict__ bias,
                                         const typename P::TRes* __restrict__ res,
                                         const typename P::TIn* __restrict__ xs,
                                         typename P::TOut* __restrict__ y) {
  typedef typename P::TIn TE;
  constexpr int CE = 16 / (int)sizeof(TE);  // elements per 16-byte chunk
  constexpr int BM = P::BM, BN = P::BN, BK = P::BK, STAGES = P::STAGES;
  constexpr int WARPS_M = P::WARPS_M, WARPS_N = P::WARPS_N, T = 32 * WARPS_M * WARPS_N;
  constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, MI = WTM / 16, NI = WTN / 8;
  constexpr int KC = BK / CE;  // 16-byte chunks per tile row
  constexpr int ROW = KC * 16;  // bytes per tile row
  constexpr int KSTEPS = ROW / 32;  // mma k steps per k tile
  constexpr int A_STAGE = BM * ROW, B_STAGE = BN * ROW;
  constexpr int GK = P::GEMM_K;
  constexpr int KT = (GK + BK - 1) / BK;
  constexpr int KT_SPLIT = (KT + P::SPLIT_K - 1) / P::SPLIT_K;
  constexpr int N_TILES = (P::GEMM_N + BN - 1) / BN;
  static_assert(sizeof(TE) == sizeof(typename P::TW), "one operand type");
  static_assert(KC == 4 || KC == 8, "tile rows of 64 or 128 bytes");
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "mma tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* As = smem_raw;
  unsigned char* Bs = smem_raw + STAGES * A_STAGE;
  cluster_spread_start<P>();
  static_assert(!P::CLUSTER_SPREAD || !P::STAGED_EPILOGUE, "a spread tile ends in the direct epilogue");

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int m0 = (blockIdx.x / N_TILES) * BM, n0 = (blockIdx.x % N_TILES) * BN;
  const int kt_begin = blockIdx.z * KT_SPLIT;
  const int kt_end = min(KT, kt_begin + KT_SPLIT);
  const TileLoader<P, BM, BN, BK, T> loader(x, wgt, xs, m0, n0);
  auto load_stage = [&](int stage, int kt) {
    loader.load(As + stage * A_STAGE, Bs + stage * B_STAGE, kt);
  };

  // Byte offsets (within a stage) of this lane's ldmatrix rows for each k
  // step. Rows 16 apart share a swizzle phase, so one offset per k step
  // serves every mi / nj.
  const int a_ld_row = wm * WTM + lane % 16;
  const int b_ld_row = wn * WTN + lane % 8 + (lane / 16) * 8;
  int a_ld[KSTEPS], b_ld[KSTEPS];
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    a_ld[kk] = a_ld_row * ROW + swizzle<KC>(a_ld_row, 2 * kk + lane / 16) * 16;
    b_ld[kk] = b_ld_row * ROW + swizzle<KC>(b_ld_row, 2 * kk + (lane / 8) % 2) * 16;
  }

  float acc[MI * NI * 4];
#pragma unroll
  for (int i = 0; i < MI * NI * 4; ++i) acc[i] = 0.0f;

  load_prologue<STAGES - 1, P::WEIGHTS_FIRST>(loader, As, A_STAGE, Bs, B_STAGE, kt_begin, kt_end, [] {});
  if (P::EARLY_TRIGGER) launch_dependents();  // early_trigger (mma_config.rs)

  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int i = kt - kt_begin;
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < kt_end) load_stage((i + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const unsigned char* as = As + (i % STAGES) * A_STAGE;
    const unsigned char* bs = Bs + (i % STAGES) * B_STAGE;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      unsigned int af[MI][4], bf[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        ldmatrix_x4(af[mi], as + a_ld[kk] + mi * 16 * ROW);
        Mma<TE>::prepare(af[mi]);
      }
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        unsigned int t[4];
        ldmatrix_x4(t, bs + b_ld[kk] + nj * 16 * ROW);
        Mma<TE>::prepare(t);
        bf[2 * nj][0] = t[0];
        bf[2 * nj][1] = t[1];
        bf[2 * nj + 1][0] = t[2];
        bf[2 * nj + 1][1] = t[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) Mma<TE>::run(acc + (mi * NI + ni) * 4, af[mi], bf[ni]);
    }
  }
  cp_async_wait<0>();
  if (!P::EARLY_TRIGGER) launch_dependents();  // the next kernel's CTAs may start (common.cuh)

  if (!reduce_split_k<P, MI * NI * 4, T>(acc, smem_raw)) return;

  const int g = lane / 4, t4 = lane % 4;
  if constexpr (P::STAGED_EPILOGUE) {
    // Every warp is done with the pipeline buffers before they hold C.
    __syncthreads();
    staged_epilogue<P, MI, NI, WTM, WTN, T>(reinterpret_cast<float*>(smem_raw), acc, wm, wn, g,
                                            t4, m0, n0, y, bias, res);
  } else {
    direct_epilogue<P, MI, NI, WTM, WTN>(acc, wm, wn, g, t4, m0, n0, y, bias, res);
  }
  cluster_split_finish<P>();
}

}  // namespace aotune

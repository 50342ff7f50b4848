// aotune: fused scaled dot-product attention (Op::Attention): softmax(q·kᵀ·
// scale + mask)·v per (batch, head), the scores never leaving the SM.
//
// Operands are read through P's offsets and strides (elements): q[b, h, i,
// c] at Q_OFF + b*Q_SB + h*Q_SH + i*Q_SS + c, likewise k and v at key/value head
// h / (H / HKV), the output at O_*; the last axis is contiguous. The mask
// [G, Hm, Sqm, Skvm] is read at (b % MASK_G)*M_SB + h*M_SH + i*M_SQ +
// j*M_SK, a broadcast axis having stride 0. CTA x = (b*H + h)*QT + query
// tile, so the query tiles of one head run side by side and share its keys
// and values in L2. Scores are kept in the log2 domain: x = s*SCALE_LOG2 +
// mask*log2(e), p = 2^(x - rowmax), which is exp(s*scale + mask - max).
// Keys beyond SKV and, with CAUSAL, keys after the query's own position get
// -inf. A row's running max starts at -inf; while it is -inf its exponent
// uses 0 instead, so a fully masked tile gives p = 0, never NaN.
//
// attention_mma (q, k, v of one 16-bit type, D and DV multiples of 16):
// FlashAttention-2's forward pass on mma.sync.m16n8k16 with f32
// accumulation. BQ/16 warps each own 16 query rows; the key/value tiles of
// BKV rows stream through a STAGES-deep cp.async ring (zero-filled past
// SKV). Shared rows are padded by 16 bytes (pitch = 16 * odd bytes), so the
// 8 row addresses of every ldmatrix phase hit 8 distinct 16-byte bank
// groups. Q's fragments are loaded once (ldmatrix), K's per k step
// (ldmatrix: k rows are the B operand's columns), V's with ldmatrix.trans.
// The online softmax runs on the accumulator fragments: each thread holds
// rows g and g + 8 (g = lane / 4) and reduces a row's max over its quad
// with two shuffles; the running sum stays per thread until the end. P is
// rounded to the operand type in registers, where the S accumulators of
// two n tiles are exactly the A fragment of one k step of P·V, and the
// running sum adds the rounded values, so the output is the convex
// combination of v that the tensor cores computed. Warps whose rows are all
// past SQ, or (CAUSAL) whose rows all precede the tile's first key, skip
// the tile. At the end each warp stages its 16 output rows in its own rows
// of the Q tile and stores them with 16-byte accesses.
//
// With one key group and SKV not a multiple of BKV, the last key step runs
// a body of its own, specialized to the 16-key blocks that hold keys (a
// 197-key sequence computes 16 keys there instead of 64); only a body that
// can see keys past SKV masks them.
//
// With KV_SPLIT > 1 the keys are split across KV_SPLIT groups of BQ/16
// warps: a step's stage holds KV_SPLIT * BKV keys and group s takes rows
// s * BKV .. (s + 1) * BKV - 1 of it, each group keeping its own running
// max, sum and output for the same query rows (so a CTA's dependent chain
// over the keys is KV_SPLIT times shorter, what counts when a batch-1 grid
// has few CTAs). After the loop groups 1.. leave their state in shared
// memory, per thread (the same fragment positions), and group 0 merges it:
// m = max m_s, sum = sum_s sum_s * 2^(m_s - m), o likewise, then stores.
//
// attention_simt (any types, any head sizes; fp32 and tf32 storage): the
// same online softmax in f32 FMAs. TPR threads own one query row: each
// computes the scores of keys u, u + TPR, ... of the tile, the row's max
// and sum are reduced over the TPR lanes with shuffles, the probabilities
// go through shared memory, and each thread accumulates DV/TPR output
// columns. With P::TF32 q, k and v are rounded to tf32 as they are loaded
// (the CPU reference's operand rounding).

namespace aotune {
namespace attn {

constexpr float LOG2E = 1.4426950408889634f;

__device__ __forceinline__ unsigned int smem_u32(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// 16-byte copy through L2 only; `valid == false` writes zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(unsigned int (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned int (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// 2^x (MUFU.EX2; -inf gives +0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// One m16n8k16 product per operand type, and the packing of two f32 into
// one operand register (the low half first) that also adds the two rounded
// values to `sum`.
template <class T> struct Mma;

template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned int (&a)[4],
                                             unsigned int b0, unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned int pack(float lo, float hi, float& sum) {
    const __half2 h = __floats2half2_rn(lo, hi);
    sum += __low2float(h) + __high2float(h);
    return *reinterpret_cast<const unsigned int*>(&h);
  }
};

template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned int (&a)[4],
                                             unsigned int b0, unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned int pack(float lo, float hi, float& sum) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    sum += __low2float(h) + __high2float(h);
    return *reinterpret_cast<const unsigned int*>(&h);
  }
};

// Two consecutive outputs, rounded to T, as one 4-byte store (T of 2 bytes)
// or two (f32).
template <class T> __device__ __forceinline__ void store2(T* p, float a, float b) {
  if constexpr (sizeof(T) == 2) {
    T pair[2] = {from_f32<T>(a), from_f32<T>(b)};
    *reinterpret_cast<unsigned int*>(p) = *reinterpret_cast<const unsigned int*>(pair);
  } else {
    p[0] = from_f32<T>(a);
    p[1] = from_f32<T>(b);
  }
}

// A compile-time value passed to a generic lambda.
template <class T, T V> struct Const {
  static constexpr T value = V;
};

// Query tiles per (batch, head) and the key tiles a CTA whose first query
// row is q0 visits (CAUSAL: up to its last row's position).
template <class P, int BQ, int BKV> __device__ __forceinline__ int key_tiles(int q0) {
  constexpr int ALL = (P::SKV + BKV - 1) / BKV;
  if (!P::CAUSAL) return ALL;
  const int last = min(P::SQ, q0 + BQ) - 1;
  return min(ALL, last / BKV + 1);
}

}  // namespace attn

template <class P>
__device__ __forceinline__ void attention_mma(const typename P::TQ* __restrict__ q,
                                              const typename P::TK* __restrict__ k,
                                              const typename P::TV* __restrict__ v,
                                              const typename P::TMask* __restrict__ mask,
                                              typename P::TOut* __restrict__ out) {
  typedef typename P::TQ T;
  typedef typename P::TOut TOut;
  constexpr int BQ = P::BQ, BKV = P::BKV, STAGES = P::STAGES, D = P::D, DV = P::DV;
  constexpr int KS = P::KV_SPLIT, BKVS = BKV * KS;  // key groups, keys per step
  constexpr int WQ = BQ / 16, WARPS = WQ * KS, THREADS = WARPS * 32;
  // Row pitches in elements: 16 bytes of padding, an odd number of 16-byte
  // chunks per row (D, DV multiples of 16).
  constexpr int QP = (D > DV ? D : DV) + 8, KP = D + 8, VP = DV + 8;
  constexpr int QT = (P::SQ + BQ - 1) / BQ;
  constexpr int MERGE = DV / 2 + 4;  // floats a thread of a group > 0 hands over
  static_assert(D % 16 == 0 && DV % 16 == 0 && BKV % 16 == 0 && BQ % 16 == 0, "mma tiles");
  extern __shared__ __align__(16) unsigned char attn_smem[];
  T* sq = reinterpret_cast<T*>(attn_smem);
  T* sk = sq + BQ * QP;
  T* sv = sk + STAGES * BKVS * KP;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int qw = warp % WQ, split = warp / WQ;  // the warp's query rows and key group
  const int qt = blockIdx.x % QT, bh = blockIdx.x / QT;
  const int head = bh % P::H, batch = bh / P::H, kvh = head / (P::H / P::HKV);
  const int q0 = qt * BQ;
  const T* qb = q + P::Q_OFF + batch * P::Q_SB + head * P::Q_SH;
  const T* kb = k + P::K_OFF + batch * P::K_SB + kvh * P::K_SH;
  const T* vb = v + P::V_OFF + batch * P::V_SB + kvh * P::V_SH;
  const int nt = attn::key_tiles<P, BQ, BKVS>(q0);

  {
    constexpr int C = D / 8;
#pragma unroll
    for (int i = tid; i < BQ * C; i += THREADS) {
      const int r = i / C, c = i % C;
      const bool ok = q0 + r < P::SQ;
      attn::cp_async_16(sq + r * QP + c * 8, ok ? qb + (q0 + r) * P::Q_SS + c * 8 : qb, ok);
    }
    attn::cp_async_commit();
  }
  auto load_kv = [&](int j, int stage) {
    T* dk = sk + stage * BKVS * KP;
    T* dv = sv + stage * BKVS * VP;
    constexpr int KC = D / 8, VC = DV / 8;
#pragma unroll
    for (int i = tid; i < BKVS * KC; i += THREADS) {
      const int r = i / KC, c = i % KC, key = j * BKVS + r;
      const bool ok = key < P::SKV;
      attn::cp_async_16(dk + r * KP + c * 8, ok ? kb + key * P::K_SS + c * 8 : kb, ok);
    }
#pragma unroll
    for (int i = tid; i < BKVS * VC; i += THREADS) {
      const int r = i / VC, c = i % VC, key = j * BKVS + r;
      const bool ok = key < P::SKV;
      attn::cp_async_16(dv + r * VP + c * 8, ok ? vb + key * P::V_SS + c * 8 : vb, ok);
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nt) load_kv(s, s);
    attn::cp_async_commit();
  }

  const int g = lane / 4, t = lane % 4;
  const int wrow = q0 + qw * 16;  // the warp's first query row
  const int rows[2] = {wrow + g, wrow + g + 8};
  const typename P::TMask* mrow[2] = {mask, mask};
  if (P::HAS_MASK) {
    const typename P::TMask* mb = mask + (batch % P::MASK_G) * P::M_SB + head * P::M_SH;
#pragma unroll
    for (int r = 0; r < 2; ++r) mrow[r] = mb + min(rows[r], P::SQ - 1) * P::M_SQ;
  }
  unsigned int qf[D / 16][4];
  float o[DV / 8][4];
#pragma unroll
  for (int n = 0; n < DV / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.0f, 0.0f};
  const bool live_rows = wrow < P::SQ;

  // One key step of a group: S = q·kᵀ over NB 16-key blocks of the stage,
  // the online softmax, O += P·V. LAST: the step may hold keys past SKV.
  auto step = [&](auto nb_tag, auto last_tag, int j) {
    constexpr int NB = decltype(nb_tag)::value;
    constexpr bool LAST = decltype(last_tag)::value;
    const int kfirst = j * BKVS + split * BKV;  // the group's first key of the step
    if (!live_rows || (P::CAUSAL && kfirst > wrow + 15)) return;
    const T* ks = sk + (j % STAGES) * BKVS * KP + split * BKV * KP;
    const T* vs = sv + (j % STAGES) * BKVS * VP + split * BKV * VP;
    const int key0 = kfirst + 2 * t;
    float mk[NB * 2][4];
    if (P::HAS_MASK) {
#pragma unroll
      for (int n = 0; n < NB * 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + n * 8 + (e & 1);
          mk[n][e] = key < P::SKV ? to_f32(mrow[e >> 1][key * P::M_SK]) : 0.0f;
        }
    }
    float s[NB * 2][4];
#pragma unroll
    for (int n = 0; n < NB * 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < NB; ++nn) {
        unsigned int b[4];
        const int r = nn * 16 + (lane / 16) * 8 + lane % 8;
        attn::ldsm_x4(b, ks + r * KP + kk * 16 + ((lane / 8) % 2) * 8);
        attn::Mma<T>::run(s[2 * nn], qf[kk], b[0], b[1]);
        attn::Mma<T>::run(s[2 * nn + 1], qf[kk], b[2], b[3]);
      }
    }
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int n = 0; n < NB * 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + n * 8 + (e & 1);
        float x = P::HAS_MASK ? fmaf(mk[n][e], attn::LOG2E, s[n][e] * P::SCALE_LOG2)
                              : s[n][e] * P::SCALE_LOG2;
        if ((LAST && key >= P::SKV) || (P::CAUSAL && key > rows[e >> 1]))
          x = neg_inf();
        s[n][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(row_max[r], mx[r]);
      base[r] = m_new == neg_inf() ? 0.0f : m_new;
      const float corr = attn::exp2_approx(row_max[r] - base[r]);
      row_max[r] = m_new;
      row_sum[r] *= corr;
#pragma unroll
      for (int n = 0; n < DV / 8; ++n) {
        o[n][2 * r] *= corr;
        o[n][2 * r + 1] *= corr;
      }
    }
#pragma unroll
    for (int kk = 0; kk < NB; ++kk) {
      unsigned int a[4];
      a[0] = attn::Mma<T>::pack(attn::exp2_approx(s[2 * kk][0] - base[0]),
                                attn::exp2_approx(s[2 * kk][1] - base[0]), row_sum[0]);
      a[1] = attn::Mma<T>::pack(attn::exp2_approx(s[2 * kk][2] - base[1]),
                                attn::exp2_approx(s[2 * kk][3] - base[1]), row_sum[1]);
      a[2] = attn::Mma<T>::pack(attn::exp2_approx(s[2 * kk + 1][0] - base[0]),
                                attn::exp2_approx(s[2 * kk + 1][1] - base[0]), row_sum[0]);
      a[3] = attn::Mma<T>::pack(attn::exp2_approx(s[2 * kk + 1][2] - base[1]),
                                attn::exp2_approx(s[2 * kk + 1][3] - base[1]), row_sum[1]);
#pragma unroll
      for (int dd = 0; dd < DV / 16; ++dd) {
        unsigned int b[4];
        const int r = kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
        attn::ldsm_x4_trans(b, vs + r * VP + dd * 16 + (lane / 16) * 8);
        attn::Mma<T>::run(o[2 * dd], a, b[0], b[1]);
        attn::Mma<T>::run(o[2 * dd + 1], a, b[2], b[3]);
      }
    }
  };
  // With one key group and SKV not a multiple of BKV, the last step covers
  // only the 16-key blocks that hold keys (TAIL_NB of them), in a body of
  // its own; the other steps then never see a key past SKV.
  constexpr int ALL = (P::SKV + BKVS - 1) / BKVS;
  constexpr int TAIL_KEYS = P::SKV - (ALL - 1) * BKVS;
  constexpr bool TAIL = KS == 1 && TAIL_KEYS < BKV;
  constexpr int TAIL_NB = (TAIL_KEYS + 15) / 16;

#pragma unroll 1
  for (int j = 0; j < nt; ++j) {
    const int jn = j + STAGES - 1;
    if (jn < nt) load_kv(jn, jn % STAGES);
    attn::cp_async_commit();
    attn::cp_async_wait<STAGES - 1>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int r = qw * 16 + ((lane / 8) % 2) * 8 + lane % 8;
        attn::ldsm_x4(qf[kk], sq + r * QP + kk * 16 + (lane / 16) * 8);
      }
    }
    if constexpr (TAIL) {
      if (j == ALL - 1)
        step(attn::Const<int, TAIL_NB>{}, attn::Const<bool, TAIL_KEYS % 16 != 0>{}, j);
      else
        step(attn::Const<int, BKV / 16>{}, attn::Const<bool, false>{}, j);
    } else {
      step(attn::Const<int, BKV / 16>{}, attn::Const<bool, P::SKV % BKVS != 0>{}, j);
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  attn::cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  if constexpr (KS > 1) {
    // The K/V stages (every group is done with them) hold the hand-over.
    float* hand = reinterpret_cast<float*>(sk);
    __syncthreads();
    if (split > 0) {
      float* h = hand + (((split - 1) * WQ + qw) * 32 + lane) * MERGE;
      h[0] = row_max[0], h[1] = row_max[1], h[2] = row_sum[0], h[3] = row_sum[1];
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) h[4 + 4 * n + e] = o[n][e];
    }
    __syncthreads();
    if (split > 0) return;
#pragma unroll 1
    for (int s2 = 1; s2 < KS; ++s2) {
      const float* h = hand + (((s2 - 1) * WQ + qw) * 32 + lane) * MERGE;
      float c_self[2], c_other[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m = fmaxf(row_max[r], h[r]);
        const float base = m == neg_inf() ? 0.0f : m;
        c_self[r] = attn::exp2_approx(row_max[r] - base);
        c_other[r] = attn::exp2_approx(h[r] - base);
        row_max[r] = m;
        row_sum[r] = row_sum[r] * c_self[r] + h[2 + r] * c_other[r];
      }
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o[n][e] = o[n][e] * c_self[e >> 1] + h[4 + 4 * n + e] * c_other[e >> 1];
    }
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) inv[r] = 1.0f / row_sum[r];
  if (!live_rows) return;
  TOut* ob = out + P::O_OFF + batch * P::O_SB + head * P::O_SH;
  if constexpr (sizeof(TOut) == 2) {
    // Through this warp's own rows of the Q tile (only it read them).
    TOut* so = reinterpret_cast<TOut*>(sq) + qw * 16 * QP;
#pragma unroll
    for (int n = 0; n < DV / 8; ++n) {
      attn::store2(so + g * QP + n * 8 + 2 * t, o[n][0] * inv[0], o[n][1] * inv[0]);
      attn::store2(so + (g + 8) * QP + n * 8 + 2 * t, o[n][2] * inv[1], o[n][3] * inv[1]);
    }
    __syncwarp();
    constexpr int C = DV / 8;
#pragma unroll
    for (int i = lane; i < 16 * C; i += 32) {
      const int r = i / C, c = i % C;
      if (wrow + r < P::SQ)
        *reinterpret_cast<uint4*>(ob + (wrow + r) * P::O_SS + c * 8) =
            *reinterpret_cast<const uint4*>(so + r * QP + c * 8);
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (rows[r] >= P::SQ) continue;
#pragma unroll
      for (int n = 0; n < DV / 8; ++n)
        attn::store2(ob + rows[r] * P::O_SS + n * 8 + 2 * t, o[n][2 * r] * inv[r],
               o[n][2 * r + 1] * inv[r]);
    }
  }
}

template <class P>
__device__ __forceinline__ void attention_simt(const typename P::TQ* __restrict__ q,
                                               const typename P::TK* __restrict__ k,
                                               const typename P::TV* __restrict__ v,
                                               const typename P::TMask* __restrict__ mask,
                                               typename P::TOut* __restrict__ out) {
  constexpr int BQ = P::BQ, BKV = P::BKV, TPR = P::TPR, D = P::D, DV = P::DV;
  constexpr int THREADS = BQ * TPR, QT = (P::SQ + BQ - 1) / BQ;
  // Pitches padded by one float: the lanes of a row read keys TPR apart.
  constexpr int QP = D + 1, KP = D + 1, PP = BKV + 1;
  constexpr int KPT = (BKV + TPR - 1) / TPR, VPT = (DV + TPR - 1) / TPR;
  static_assert(32 % TPR == 0, "a row's lanes lie in one warp");
  extern __shared__ float attn_smem_f32[];
  float* sq = attn_smem_f32;
  float* sk = sq + BQ * QP;
  float* sv = sk + BKV * KP;
  float* sp = sv + BKV * DV;

  const int tid = threadIdx.x, r = tid / TPR, u = tid % TPR;
  const int qt = blockIdx.x % QT, bh = blockIdx.x / QT;
  const int head = bh % P::H, batch = bh / P::H, kvh = head / (P::H / P::HKV);
  const int q0 = qt * BQ, row = q0 + r;
  const typename P::TQ* qb = q + P::Q_OFF + batch * P::Q_SB + head * P::Q_SH;
  const typename P::TK* kb = k + P::K_OFF + batch * P::K_SB + kvh * P::K_SH;
  const typename P::TV* vb = v + P::V_OFF + batch * P::V_SB + kvh * P::V_SH;
  const int nt = attn::key_tiles<P, BQ, BKV>(q0);
  const typename P::TMask* mrow = mask;
  if (P::HAS_MASK)
    mrow = mask + (batch % P::MASK_G) * P::M_SB + head * P::M_SH + min(row, P::SQ - 1) * P::M_SQ;

  for (int i = tid; i < BQ * D; i += THREADS) {
    const int rr = i / D, c = i % D;
    sq[rr * QP + c] =
        q0 + rr < P::SQ ? operand<P::TF32>(to_f32(qb[(q0 + rr) * P::Q_SS + c])) : 0.0f;
  }
  float o[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) o[i] = 0.0f;
  float row_max = neg_inf(), row_sum = 0.0f;

#pragma unroll 1
  for (int j = 0; j < nt; ++j) {
    __syncthreads();  // the previous tile is consumed (and Q is stored)
    for (int i = tid; i < BKV * D; i += THREADS) {
      const int kk = i / D, c = i % D, key = j * BKV + kk;
      sk[kk * KP + c] = key < P::SKV ? operand<P::TF32>(to_f32(kb[key * P::K_SS + c])) : 0.0f;
    }
    for (int i = tid; i < BKV * DV; i += THREADS) {
      const int kk = i / DV, c = i % DV, key = j * BKV + kk;
      sv[kk * DV + c] = key < P::SKV ? operand<P::TF32>(to_f32(vb[key * P::V_SS + c])) : 0.0f;
    }
    __syncthreads();
    float s[KPT];
    float mx = neg_inf();
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
      const int kk = u + i * TPR, key = j * BKV + kk;
      float x = neg_inf();
      if (kk < BKV && key < P::SKV && !(P::CAUSAL && key > row)) {
        float dot = 0.0f;
#pragma unroll 8
        for (int c = 0; c < D; ++c) dot = fmaf(sq[r * QP + c], sk[kk * KP + c], dot);
        x = dot * P::SCALE_LOG2;
        if (P::HAS_MASK) x = fmaf(to_f32(mrow[key * P::M_SK]), attn::LOG2E, x);
      }
      s[i] = x;
      mx = fmaxf(mx, x);
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_new = fmaxf(row_max, mx);
    const float base = m_new == neg_inf() ? 0.0f : m_new;
    const float corr = attn::exp2_approx(row_max - base);
    row_max = m_new;
    row_sum *= corr;
#pragma unroll
    for (int i = 0; i < VPT; ++i) o[i] *= corr;
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
      const int kk = u + i * TPR;
      const float p = attn::exp2_approx(s[i] - base);
      row_sum += p;
      if (kk < BKV) sp[r * PP + kk] = p;
    }
    __syncwarp();
#pragma unroll 4
    for (int kk = 0; kk < BKV; ++kk) {
      const float p = sp[r * PP + kk];
#pragma unroll
      for (int i = 0; i < VPT; ++i) {
        const int c = u + i * TPR;
        if (c < DV) o[i] = fmaf(p, sv[kk * DV + c], o[i]);
      }
    }
  }
#pragma unroll
  for (int off = TPR / 2; off > 0; off /= 2)
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, off);
  if (row >= P::SQ) return;
  const float inv = 1.0f / row_sum;
  typename P::TOut* ob = out + P::O_OFF + batch * P::O_SB + head * P::O_SH + row * P::O_SS;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int c = u + i * TPR;
    if (c < DV) ob[c] = from_f32<typename P::TOut>(o[i] * inv);
  }
}

}  // namespace aotune

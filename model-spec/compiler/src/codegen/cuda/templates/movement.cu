// aotune: data movement (movement.rs): Transpose, Slice, Gather with constant
// indices, Expand, Tile and Pad as one gather copy, and Where (a broadcast
// select).
//
// A copy reads, for output element j (row-major), the input element at
// offset P::src(j), rendered from the op's index map with every shape,
// stride, index table and pad as a constant; -1 means the pad value P::FILL.
// Values keep their bits when input and output share a dtype; otherwise
// they are widened to f32 and rounded to the output's type (nearest even),
// as the CPU reference's store does. Where the output's innermost axis is
// contiguous in the input (and every offset a multiple of V), a thread moves
// V consecutive elements with one 16-byte (or narrower) load and store.
//
// A transpose that changes the innermost axis goes through shared memory
// instead (transpose_tiled): a 32 x 32 tile over output axis a (contiguous in
// the output, input stride P::SA) and output axis b (contiguous in the
// input, output stride P::OB) is read along b and written along a, so both
// global accesses are coalesced. The other output axes ("rest") select the
// tile's plane: P::rest_in(r) / P::rest_out(r) are its input and output
// offsets. The tile holds raw storage words padded to 33 columns, so the
// column-wise reads hit 32 distinct banks for 4- and 2-byte types alike.

namespace aotune {

// v converted from TIn to TOut: the same bits for one type, else through f32.
template <class TIn, class TOut> struct MoveCast {
  static __device__ __forceinline__ TOut go(TIn v) { return from_f32<TOut>(to_f32(v)); }
};
template <class T> struct MoveCast<T, T> {
  static __device__ __forceinline__ T go(T v) { return v; }
};

// V consecutive elements from x to y: one access each way, aligned to V
// times the element size; raw bytes for one dtype, else through f32.
template <int V, class TIn, class TOut> struct MoveVector {
  static __device__ __forceinline__ void go(const TIn* __restrict__ x, TOut* __restrict__ y) {
    float v[V];
    load_f32<V>(x, v);
    store_f32<V>(y, v);
  }
};
template <int V, class T> struct MoveVector<V, T, T> {
  static __device__ __forceinline__ void go(const T* __restrict__ x, T* __restrict__ y) {
    typedef typename RawBytes<V * sizeof(T)>::type R;
    *reinterpret_cast<R*>(y) = *reinterpret_cast<const R*>(x);
  }
};

template <class P>
__device__ __forceinline__ void move(const typename P::TIn* __restrict__ x,
                                     typename P::TOut* __restrict__ y) {
  typedef typename P::TIn TIn;
  typedef typename P::TOut TOut;
  constexpr int V = P::V, N = P::TOTAL / V;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < N; j += gridDim.x * blockDim.x) {
    const int o = P::src(j * V);
    if (V > 1) {
      if (o < 0) {
        float v[V];
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = P::FILL;
        store_f32<V>(y + j * V, v);
      } else {
        MoveVector<V, TIn, TOut>::go(x + o, y + j * V);
      }
    } else {
      y[j] = o < 0 ? from_f32<TOut>(P::FILL) : MoveCast<TIn, TOut>::go(x[o]);
    }
  }
}

template <class P>
__device__ __forceinline__ void transpose_tiled(const typename P::TIn* __restrict__ x,
                                                typename P::TOut* __restrict__ y) {
  typedef typename P::TIn TIn;
  typedef typename P::TOut TOut;
  typedef typename RawBytes<sizeof(TIn)>::type Word;
  constexpr int TILE = 32, ROWS = P::BLOCK / TILE;
  constexpr int TILES_A = (P::A + TILE - 1) / TILE, TILES_B = (P::B + TILE - 1) / TILE;
  constexpr int TILES = TILES_A * TILES_B * P::REST;
  __shared__ Word tile[TILE][TILE + 1];
  const int lane = threadIdx.x % TILE, row = threadIdx.x / TILE;
  for (int t = blockIdx.x; t < TILES; t += gridDim.x) {
    const int a0 = (t % TILES_A) * TILE;
    const int b0 = (t / TILES_A % TILES_B) * TILE;
    const int r = t / (TILES_A * TILES_B);
    const TIn* __restrict__ xs = x + P::rest_in(r);
    TOut* __restrict__ ys = y + P::rest_out(r);
    // Read along b (input-contiguous): tile[a - a0][b - b0].
    const int b = b0 + lane;
#pragma unroll 4
    for (int i = row; i < TILE; i += ROWS) {
      const int a = a0 + i;
      if (a < P::A && b < P::B)
        tile[i][lane] = __builtin_bit_cast(Word, xs[a * P::SA + b]);
    }
    __syncthreads();
    // Write along a (output-contiguous).
    const int a = a0 + lane;
#pragma unroll 4
    for (int i = row; i < TILE; i += ROWS) {
      const int bb = b0 + i;
      if (a < P::A && bb < P::B)
        ys[bb * P::OB + a] = MoveCast<TIn, TOut>::go(__builtin_bit_cast(TIn, tile[lane][i]));
    }
    __syncthreads();
  }
}

// Where: out[j] = cond[src(0, j)] != 0 ? x[src(1, j)] : y[src(2, j)] (numpy
// broadcasting; a NaN condition is true, as in the CPU reference).
template <class P>
__device__ __forceinline__ void select(const typename P::TC* __restrict__ cond,
                                       const typename P::TX* __restrict__ x,
                                       const typename P::TY* __restrict__ y,
                                       typename P::TOut* __restrict__ out) {
  typedef typename P::TOut TOut;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < P::TOTAL; j += gridDim.x * blockDim.x) {
    out[j] = to_f32(cond[P::src(0, j)]) != 0.0f
                 ? MoveCast<typename P::TX, TOut>::go(x[P::src(1, j)])
                 : MoveCast<typename P::TY, TOut>::go(y[P::src(2, j)]);
  }
}

}  // namespace aotune

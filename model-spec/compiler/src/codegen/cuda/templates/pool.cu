// aotune: MaxPool and AveragePool over 4-D values, NHWC or NCHW.
//
// Windows follow ONNX and the CPU reference (reference/pool.rs) exactly: tap
// r of output row p reads input row p*SH - PT + r*DH; taps outside the input
// are skipped; MaxPool starts from -inf; AveragePool sums the valid taps in
// f32 (rows outer, columns inner: the reference's order) and divides by the
// number of valid taps, or with COUNT_INCLUDE_PAD by the taps inside the
// explicitly padded extent [-PT, H + PB) (ceil_mode windows past the end
// padding never count). NHWC: one thread per V consecutive channels of one
// output pixel (16-byte accesses when C allows); NCHW: one thread per output.

namespace aotune {

template <class P>
__device__ __forceinline__ void pool2d(const typename P::TIn* __restrict__ x,
                                       typename P::TOut* __restrict__ y) {
  constexpr int V = P::V, CV = P::C / V;
  constexpr int TOTAL = P::N * P::P * P::Q * CV;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < TOTAL; j += gridDim.x * blockDim.x) {
    int n, c, p, q;
    if (P::CHANNELS_LAST) {
      c = (j % CV) * V;
      q = (j / CV) % P::Q;
      p = (j / (CV * P::Q)) % P::P;
      n = j / (CV * P::Q * P::P);
    } else {
      q = j % P::Q;
      p = (j / P::Q) % P::P;
      c = (j / (P::Q * P::P)) % P::C;
      n = j / (P::Q * P::P * P::C);
    }
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = P::MAX ? neg_inf() : 0.0f;
    int valid_r = 0, valid_s = 0, padded_r = 0, padded_s = 0;
    for (int r = 0; r < P::KH; ++r) {
      const int at = p * P::SH + r * P::DH;
      if (at < P::H + P::PT + P::PB) ++padded_r;
      const int h = at - P::PT;
      if (h >= 0 && h < P::H) ++valid_r;
    }
    for (int s = 0; s < P::KW; ++s) {
      const int at = q * P::SW + s * P::DW;
      if (at < P::W + P::PL + P::PR) ++padded_s;
      const int w = at - P::PL;
      if (w >= 0 && w < P::W) ++valid_s;
    }
    for (int r = 0; r < P::KH; ++r) {
      const int h = p * P::SH + r * P::DH - P::PT;
      if (h < 0 || h >= P::H) continue;
      for (int s = 0; s < P::KW; ++s) {
        const int w = q * P::SW + s * P::DW - P::PL;
        if (w < 0 || w >= P::W) continue;
        float v[V];
        if (P::CHANNELS_LAST) {
          load_f32<V>(x + ((n * P::H + h) * P::W + w) * P::C + c, v);
        } else {
          v[0] = to_f32(x[((n * P::C + c) * P::H + h) * P::W + w]);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = P::MAX ? fmaxf(acc[e], v[e]) : acc[e] + v[e];
      }
    }
    if (!P::MAX) {
      const float div = (float)(P::COUNT_INCLUDE_PAD ? padded_r * padded_s : valid_r * valid_s);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = acc[e] / div;
    }
    if (P::CHANNELS_LAST) {
      store_f32<V>(y + ((n * P::P + p) * P::Q + q) * P::C + c, acc);
    } else {
      y[j] = from_f32<typename P::TOut>(acc[0]);
    }
  }
}

}  // namespace aotune

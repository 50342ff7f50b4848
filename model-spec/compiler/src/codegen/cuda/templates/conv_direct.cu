// aotune: direct convolution for grouped and depthwise convs (NHWC input,
// OHWI weight [K][R][S][C/groups], NHWC output).
//
// One thread per output element, channel fastest, so a warp reads
// consecutive channels of one input pixel (coalesced for depthwise, where
// output channel k reads input channel k). Each thread sums its group's
// R*S*C/g products in f32 (tf32-rounded operands under Precision::Tf32) and
// runs the shared epilogue. Simple on purpose: ResNets never get here.

namespace aotune {

template <class P>
__device__ __forceinline__ void conv_direct(const typename P::TIn* __restrict__ x,
                                            const typename P::TW* __restrict__ wgt,
                                            const typename P::TBias* __restrict__ bias,
                                            const typename P::TRes* __restrict__ res,
                                            const typename P::TIn* __restrict__ xs,
                                            typename P::TOut* __restrict__ y) {
  static_assert(!P::HAS_SC, "grouped convolutions have no shortcut");
  static_assert(!P::POOL, "the direct kernel has no pooled epilogue");
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

}  // namespace aotune

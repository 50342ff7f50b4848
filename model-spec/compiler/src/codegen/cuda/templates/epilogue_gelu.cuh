// aotune: the GELU epilogue activations, as specializations of common.cuh's
// `activate` (the ReLU and Clip ones are written out there).
//
// A module includes this file only when one of its instantiations renders
// `ACT = aotune::ACT_GELU` or `aotune::ACT_GELU_TANH` (assemble.rs), so a
// module without GELU, such as the committed ResNet-50 sources, is the same
// text as before GELU epilogues existed; an instantiation that names the
// constants without this file does not compile. The specializations must
// precede the instantiations, which they do: every template comes before
// the `---- instantiations ----` section.
//
// Both run on the f32 sum acc + bias + residual, before the one rounding to
// the output type, with the formulas of the standalone Gelu op
// (elementwise.cu's cases 25 and 26): the exact x/2 * (1 + erf(x/sqrt 2)),
// and ONNX's tanh approximation x/2 * (1 + tanh(sqrt(2/pi) * (x +
// 0.044715 x^3))). The CPU reference evaluates them in f64 and rounds once,
// which erff and tanhf (a few ulp) stay well within the storage tolerances of.

namespace aotune {

enum GeluActivation { ACT_GELU = 3, ACT_GELU_TANH = 4 };

template <>
__device__ __forceinline__ float activate<ACT_GELU>(float x, float, float) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

template <>
__device__ __forceinline__ float activate<ACT_GELU_TANH>(float x, float, float) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

}  // namespace aotune

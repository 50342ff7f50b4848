// Is the ~1.5 µs floor per kernel at batch 1 (docs/design/persistent-b1.md)
// what a persistent kernel would remove? A chain of L dependent "layers", each
// streaming its own weight slice (independent of the previous layer) and
// gathering from the whole previous activation (all-to-all, as a batch-1 GEMM
// tiled over N needs every input channel), run three ways:
//   graph       L kernels, one per layer, replayed as a CUDA graph (what the
//               executor does today);
//   persistent  one kernel of one CTA per SM looping over the layers, a grid
//               barrier between layers, weights read after the barrier;
//   prefetch    the same, each CTA reading its next layer's weights before it
//               waits at the barrier;
//   pdl         the graph of L kernels with programmatic dependent launch:
//               each kernel lets the next one start at once, reads its
//               weights, then waits for the previous kernel (griddepcontrol)
//               before its gather — the same overlap with launches kept.
// Same arithmetic in all three: the outputs are compared bit for bit.
// Build and run: bash bench/probes/persistent_probe.sh (GPU machine).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,              \
                   cudaGetErrorString(e_));                                       \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

constexpr int THREADS = 256;

struct Net {
  int layers;
  int act;                // floats per activation
  int weight_vecs;        // float4s of weights per layer
  const float4* weights;  // layers × weight_vecs
  float* acts;            // (layers + 1) × act
};

// Sum of this CTA's share of layer l's weights (a block-wide reduction).
__device__ float weight_share(const Net& n, int l, int cta, int ctas, float* red) {
  const float4* w = n.weights + static_cast<size_t>(l) * n.weight_vecs;
  int per = (n.weight_vecs + ctas - 1) / ctas;
  int lo = cta * per, hi = min(lo + per, n.weight_vecs);
  float s = 0.f;
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float4 v = __ldg(w + i);
    s += (v.x + v.y) + (v.z + v.w);
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0.f;
  for (int i = 0; i < THREADS / 32; ++i) t += red[i];
  __syncthreads();
  return t;
}

// Layer l's outputs owned by this CTA: a gather over the previous activation.
__device__ void layer_outputs(const Net& n, int l, int cta, int ctas, float wsum) {
  const float* in = n.acts + static_cast<size_t>(l) * n.act;
  float* out = n.acts + static_cast<size_t>(l + 1) * n.act;
  int per = (n.act + ctas - 1) / ctas;
  int lo = cta * per, hi = min(lo + per, n.act);
  for (int e = lo + threadIdx.x; e < hi; e += blockDim.x) {
    // Reads written by other CTAs of the previous layer: plain (coherent)
    // loads, not __ldg, which may serve stale lines across the barrier.
    float a = in[(e * 7 + 3) % n.act] + in[(e * 13 + l) % n.act];
    out[e] = 0.5f * a + 1e-6f * wsum;
  }
}

template <bool PDL>
__global__ void __launch_bounds__(THREADS) one_layer(Net n, int l) {
  __shared__ float red[THREADS / 32];
  if (PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float w = weight_share(n, l, blockIdx.x, gridDim.x, red);
  if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
  layer_outputs(n, l, blockIdx.x, gridDim.x, w);
}

__device__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Sense-free grid barrier on a generation counter: the last CTA to arrive
// resets the arrival count and bumps the generation. All CTAs must be
// resident (one per SM, launched alone).
__device__ void grid_barrier(unsigned* arrived, unsigned* generation) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned g = ld_acquire(generation);
    __threadfence();
    if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
      *arrived = 0;
      __threadfence();
      st_release(generation, g + 1);
    } else {
      while (ld_acquire(generation) == g) {
      }
    }
  }
  __syncthreads();
}

template <bool PREFETCH>
__global__ void __launch_bounds__(THREADS) all_layers(Net n, unsigned* sync) {
  __shared__ float red[THREADS / 32];
  float w = weight_share(n, 0, blockIdx.x, gridDim.x, red);
  for (int l = 0; l < n.layers; ++l) {
    layer_outputs(n, l, blockIdx.x, gridDim.x, w);
    if (l + 1 == n.layers) break;
    if (PREFETCH) w = weight_share(n, l + 1, blockIdx.x, gridDim.x, red);
    grid_barrier(sync, sync + 1);
    if (!PREFETCH) w = weight_share(n, l + 1, blockIdx.x, gridDim.x, red);
  }
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int layers = argc > 1 ? std::atoi(argv[1]) : 52;
  int act = argc > 2 ? std::atoi(argv[2]) : 196 * 256;
  long weight_bytes = argc > 3 ? std::atol(argv[3]) : 1 << 20;
  int runs = 200;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int ctas = prop.multiProcessorCount;
  Net n{layers, act, static_cast<int>(weight_bytes / 16), nullptr, nullptr};
  float4* w;
  float* acts;
  unsigned* sync;
  size_t wbytes = static_cast<size_t>(layers) * n.weight_vecs * sizeof(float4);
  size_t abytes = static_cast<size_t>(layers + 1) * act * sizeof(float);
  CHECK(cudaMalloc(&w, wbytes));
  CHECK(cudaMalloc(&acts, abytes));
  CHECK(cudaMalloc(&sync, 2 * sizeof(unsigned)));
  CHECK(cudaMemset(sync, 0, 2 * sizeof(unsigned)));
  {
    std::vector<float> h(wbytes / 4);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
    CHECK(cudaMemcpy(w, h.data(), wbytes, cudaMemcpyHostToDevice));
    std::vector<float> a(act);
    for (int i = 0; i < act; ++i) a[i] = static_cast<float>(i % 97) * 0.01f;
    CHECK(cudaMemcpy(acts, a.data(), act * sizeof(float), cudaMemcpyHostToDevice));
  }
  n.weights = w;
  n.acts = acts;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // A buffer larger than L2 written between replays: every variant starts
  // with the weights in DRAM, as a real forward pass after other work would.
  size_t flush_bytes = 128u << 20;
  void* flush;
  CHECK(cudaMalloc(&flush, flush_bytes));

  auto capture = [&](int variant) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    if (variant == 0) {
      for (int l = 0; l < layers; ++l) one_layer<false><<<ctas, THREADS, 0, s>>>(n, l);
    } else if (variant == 3) {
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(ctas);
      cfg.blockDim = dim3(THREADS);
      cfg.stream = s;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      for (int l = 0; l < layers; ++l) CHECK(cudaLaunchKernelEx(&cfg, one_layer<true>, n, l));
    } else if (variant == 1) {
      all_layers<false><<<ctas, THREADS, 0, s>>>(n, sync);
    } else {
      all_layers<true><<<ctas, THREADS, 0, s>>>(n, sync);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphDestroy(g));
    return e;
  };
  const char* names[] = {"graph", "persistent", "prefetch", "pdl"};
  std::vector<float> reference;
  std::printf("layers %d, activation %d floats, weights %ld bytes per layer, %d CTAs x %d threads\n",
              layers, act, weight_bytes, ctas, THREADS);
  std::printf("%-11s %9s %9s %11s %11s  %s\n", "variant", "cold µs", "warm µs", "cold/layer",
              "warm/layer", "output");
  for (int v = 0; v < 4; ++v) {
    cudaGraphExec_t e = capture(v);
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> cold, warm;
    for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(e, s));
    for (int i = 0; i < runs; ++i) {
      CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, s));
      CHECK(cudaEventRecord(a, s));
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      cold.push_back(ms * 1e3f);
      CHECK(cudaEventRecord(a, s));
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaEventElapsedTime(&ms, a, b));
      warm.push_back(ms * 1e3f);
    }
    std::vector<float> out(act);
    CHECK(cudaMemcpy(out.data(), acts + static_cast<size_t>(layers) * act, act * sizeof(float),
                     cudaMemcpyDeviceToHost));
    bool same = true;
    if (reference.empty()) {
      reference = out;
    } else {
      for (int i = 0; i < act; ++i) same = same && out[i] == reference[i];
    }
    float c = median(cold), wm = median(warm);
    std::printf("%-11s %9.2f %9.2f %11.3f %11.3f  %s\n", names[v], c, wm, c / layers, wm / layers,
                v == 0 ? "reference" : (same ? "identical" : "DIFFERS"));
    CHECK(cudaGraphExecDestroy(e));
  }
  return 0;
}

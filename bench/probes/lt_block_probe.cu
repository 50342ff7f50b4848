// cuBLASLt on the four Dense layers of a ViT-B/16 block, with the epilogues
// aotune's Dense tasks carry (docs/design/cublaslt-dense.md):
//   qkv      y = x·wᵀ + b                      [M, 2304] from K 768
//   out-proj y = x·wᵀ + b + residual           [M, 768]  from K 768
//   fc1      y = gelu(x·wᵀ + b)                [M, 3072] from K 768
//   fc2      y = x·wᵀ + b + residual           [M, 768]  from K 3072
// fp16 operands, bias and output, fp32 accumulation (an f32 bias with an fp16
// output is refused: CUBLAS_STATUS_INVALID_VALUE, cuBLASLt 13.1), the
// residual through beta·C. For M = 12608 (batch 64)
// and M = 197 (batch 1):
//   1. each layer with each of cuBLASLt's heuristic algorithms (up to 8):
//      checked on 64 sampled rows against an f64 host reference with the
//      exact (erf) GELU, then timed alone (median of a graph of 20 launches);
//   2. twelve blocks (48 matmuls, the best algorithm of each layer) captured
//      in one CUDA graph and timed: the GEMM share of the model's forward
//      pass, comparable with aotune's per-block Dense time.
// Prints `TAB` rows; `bash bench/probes/lt_block_probe.sh` builds and runs it.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "probe_util.cuh"

#define LT_CHECK(x)                                                              \
  do {                                                                           \
    cublasStatus_t s_ = (x);                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, s_); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

constexpr size_t WORKSPACE = 32u << 20;

struct Layer {
  const char* name;
  int n, k;
  bool residual, gelu;
};
const Layer LAYERS[4] = {{"qkv", 2304, 768, false, false},
                         {"out-proj", 768, 768, true, false},
                         {"fc1", 3072, 768, false, true},
                         {"fc2", 768, 3072, true, false}};

struct Matmul {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  const __half *dx = nullptr, *dw = nullptr, *dres = nullptr;
  const __half* dbias = nullptr;
  __half* dy = nullptr;
  bool residual = false;
};

static cublasLtHandle_t lt;
static void* workspace;

static Matmul plan(int m, const Layer& l, const __half* x, const __half* w, const __half* bias,
                   const __half* res, __half* y) {
  Matmul p;
  p.dx = x, p.dw = w, p.dbias = bias, p.dres = res, p.dy = y, p.residual = l.residual;
  LT_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = l.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  const cudaDataType_t bias_type = CUDA_R_16F;
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                          sizeof bias_type));
  // Column-major views of the row-major tensors: w [N,K] is K×N (ld K,
  // transposed by the op), x [M,K] is K×M, y and the residual [M,N] are N×M.
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.w, CUDA_R_16F, l.k, l.n, l.k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.x, CUDA_R_16F, l.k, m, l.k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&p.y, CUDA_R_16F, l.n, m, l.n));
  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &WORKSPACE, sizeof WORKSPACE));
  cublasLtMatmulHeuristicResult_t found[8];
  int n = 0;
  cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.w, p.x, p.y, p.y, pref, 8, found, &n);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::printf("%s M=%d: heuristic status %d (no algorithm)\n", l.name, m, s);
    n = 0;
  }
  p.algos.assign(found, found + n);
  return p;
}

static void run(const Matmul& p, int algo, cudaStream_t s) {
  const float alpha = 1.0f, beta = p.residual ? 1.0f : 0.0f;
  const __half* c = p.residual ? p.dres : p.dy;
  LT_CHECK(cublasLtMatmul(lt, p.op, &alpha, p.dw, p.w, p.dx, p.x, &beta, c, p.y, p.dy, p.y,
                          &p.algos[algo].algo, workspace, WORKSPACE, s));
}

static double graph_of(cudaStream_t s, int repeat, const std::vector<std::pair<const Matmul*, int>>& calls) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int r = 0; r < repeat; ++r)
    for (auto& c : calls) run(*c.first, c.second, s);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  double ms = graph_median_ms(exec, s, 10, 60);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  return ms;
}

static std::vector<__half> random_half(size_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<__half> v(n);
  for (auto& e : v) e = __float2half(u(rng));
  return v;
}

template <class T>
static T* upload(const std::vector<T>& v) {
  T* d;
  CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

int main() {
  LT_CHECK(cublasLtCreate(&lt));
  CHECK(cudaMalloc(&workspace, WORKSPACE));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  size_t version = cublasLtGetVersion();
  std::printf("cublasLt version %zu\n", version);
  std::mt19937 rng(7);
  const int MS[2] = {12608, 197};
  std::printf("TAB shape layer algos best_us tflops worst_us rel_l2_erf max_abs_erf\n");
  for (int m : MS) {
    std::vector<Matmul> plans(4);
    std::vector<int> best(4, -1);
    double block_us = 0;
    for (int li = 0; li < 4; ++li) {
      const Layer& l = LAYERS[li];
      auto hx = random_half(size_t(m) * l.k, rng, 1.0f);
      auto hw = random_half(size_t(l.n) * l.k, rng, 1.0f / std::sqrt(float(l.k)));
      auto hres = random_half(size_t(m) * l.n, rng, 1.0f);
      std::vector<float> hb(l.n);
      std::vector<__half> hb16(l.n);
      for (int c = 0; c < l.n; ++c) {
        hb16[c] = __float2half(std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng));
        hb[c] = __half2float(hb16[c]);
      }
      __half *dx = upload(hx), *dw = upload(hw), *dres = upload(hres), *dy;
      __half* db = upload(hb16);
      CHECK(cudaMalloc(&dy, size_t(m) * l.n * sizeof(__half)));
      plans[li] = plan(m, l, dx, dw, db, dres, dy);
      const Matmul& p = plans[li];
      double best_us = 1e30, worst_us = 0, err_l2 = 0, err_abs = 0;
      std::vector<__half> hy(size_t(m) * l.n);
      // The f64 reference of 64 sampled rows, exact (erf) GELU.
      std::vector<int> rows(64);
      std::vector<double> want(64 * size_t(l.n));
      for (int si = 0; si < 64; ++si) {
        rows[si] = int((int64_t(si) * 7919) % m);
        for (int c = 0; c < l.n; ++c) {
          double acc = hb[c];
          for (int kk = 0; kk < l.k; ++kk)
            acc += double(__half2float(hx[size_t(rows[si]) * l.k + kk])) *
                   double(__half2float(hw[size_t(c) * l.k + kk]));
          if (l.gelu) acc = 0.5 * acc * (1.0 + std::erf(acc / std::sqrt(2.0)));
          if (l.residual) acc += double(__half2float(hres[size_t(rows[si]) * l.n + c]));
          want[size_t(si) * l.n + c] = acc;
        }
      }
      for (int a = 0; a < int(p.algos.size()); ++a) {
        CHECK(cudaMemset(dy, 0, hy.size() * sizeof(__half)));
        run(p, a, s);
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(hy.data(), dy, hy.size() * sizeof(__half), cudaMemcpyDeviceToHost));
        double num = 0, den = 0, mx = 0;
        for (int si = 0; si < 64; ++si)
          for (int c = 0; c < l.n; ++c) {
            double acc = want[size_t(si) * l.n + c];
            double got = __half2float(hy[size_t(rows[si]) * l.n + c]);
            num += (got - acc) * (got - acc);
            den += acc * acc;
            mx = std::max(mx, std::fabs(got - acc));
          }
        double rel = std::sqrt(num / std::max(den, 1e-30));
        err_l2 = std::max(err_l2, rel);
        err_abs = std::max(err_abs, mx);
        if (rel > 1e-2) {
          std::printf("%s M=%d algo %d: FAIL rel L2 %.3e\n", l.name, m, a, rel);
          continue;
        }
        double us = graph_of(s, 20, {{&p, a}}) * 1e3 / 20;
        if (us < best_us) best_us = us, best[li] = a;
        worst_us = std::max(worst_us, us);
      }
      if (best[li] < 0) {
        std::printf("TAB M%d %s 0 - - - - -\n", m, l.name);
        continue;
      }
      double tflops = 2.0 * m * l.n * l.k / (best_us * 1e-6) / 1e12;
      block_us += best_us;
      std::printf("TAB M%d %s %zu %.1f %.0f %.1f %.2e %.2e\n", m, l.name, p.algos.size(), best_us,
                  tflops, worst_us, err_l2, err_abs);
    }
    bool all = best[0] >= 0 && best[1] >= 0 && best[2] >= 0 && best[3] >= 0;
    if (all) {
      std::vector<std::pair<const Matmul*, int>> calls;
      for (int li = 0; li < 4; ++li) calls.push_back({&plans[li], best[li]});
      double twelve_us = graph_of(s, 12, calls) * 1e3;
      std::printf("TAB M%d block_sum_isolated 4 %.1f - - - -\n", m, block_us);
      std::printf("TAB M%d twelve_blocks_graph 48 %.1f per_block %.1f - -\n", m, twelve_us,
                  twelve_us / 12);
    }
  }
  return 0;
}

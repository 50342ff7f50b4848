// NVRTC compile throughput with N threads in one process vs N processes
// (bench/probes/nvrtc_scaling.sh). The tuner compiles its candidates on a thread
// pool; on the H200 machine a candidate took ~0.9 s there (median of the
// committed records) against ~0.3 s alone on a 2-core CI-like machine, and
// a gemv kernel compiled alone took 0.16-0.21 s against 0.58 s in the pool:
// this tells whether threads contend inside NVRTC (processes would scale)
// or the machine's cores are the limit (both would).
//   nvrtc_scaling SOURCE.cu INCLUDE_DIR WORKERS COMPILES_EACH [proc]
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char* source;
static char include_opt[4096];
static int compiles_each;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// The tuner's options (src/tune/nvrtc.rs), then NVRTC_EXTRA's
// (space-separated, e.g. "-pch --pch-dir=/tmp/pch").
static void compile_once(void) {
  const char* opts[16] = {"--gpu-architecture=sm_90a", "-std=c++17", "--ptxas-options=-v",
                          include_opt};
  int n_opts = 4;
  static char extra[1024];
  const char* env = getenv("NVRTC_EXTRA");
  if (env) {
    strncpy(extra, env, sizeof extra - 1);
    for (char* t = strtok(extra, " "); t && n_opts < 16; t = strtok(NULL, " ")) opts[n_opts++] = t;
  }
  nvrtcProgram p;
  nvrtcCreateProgram(&p, source, "candidate.cu", 0, NULL, NULL);
  nvrtcResult r = nvrtcCompileProgram(p, n_opts, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n;
    nvrtcGetProgramLogSize(p, &n);
    char* log = malloc(n + 1);
    nvrtcGetProgramLog(p, log);
    fprintf(stderr, "compile failed: %s\n%s\n", nvrtcGetErrorString(r), log);
    exit(1);
  }
  size_t cubin;
  nvrtcGetCUBINSize(p, &cubin);
  const char* dump = getenv("NVRTC_DUMP");  // write the cubin, to compare option sets
  if (dump) {
    char* image = malloc(cubin);
    nvrtcGetCUBIN(p, image);
    FILE* out = fopen(dump, "wb");
    if (out) {
      fwrite(image, 1, cubin, out);
      fclose(out);
    }
    free(image);
  }
  nvrtcDestroyProgram(&p);
}

static void* worker(void* unused) {
  (void)unused;
  for (int i = 0; i < compiles_each; i++) compile_once();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s SOURCE.cu INCLUDE_DIR WORKERS COMPILES_EACH [proc]\n", argv[0]);
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  source = malloc(n + 1);
  if (fread(source, 1, n, f) != (size_t)n) return 2;
  source[n] = 0;
  snprintf(include_opt, sizeof include_opt, "--include-path=%s", argv[2]);
  int workers = atoi(argv[3]);
  compiles_each = atoi(argv[4]);
  int processes = argc > 5 && strcmp(argv[5], "proc") == 0;
  if (workers < 1 || workers > 256 || compiles_each < 1) return 2;
  compile_once();  // loads NVRTC before the clock starts
  double t0 = now();
  if (processes) {
    for (int i = 0; i < workers; i++)
      if (fork() == 0) {
        worker(NULL);
        _exit(0);
      }
    for (int i = 0; i < workers; i++) wait(NULL);
  } else {
    pthread_t t[256];
    for (int i = 0; i < workers; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < workers; i++) pthread_join(t[i], NULL);
  }
  double wall = now() - t0;
  printf("%-9s %3d x %2d  wall %6.2f s  %6.1f compiles/s  %.3f s per compile\n",
         processes ? "processes" : "threads", workers, compiles_each, wall,
         workers * compiles_each / wall, wall / compiles_each);
  return 0;
}

#!/usr/bin/env bash
# Builds everything a GPU-machine call needs into .device/ (ignored by git; keep it
# under the 64 MiB carry limit): the CLI without the embedded model, the GPU test
# binaries (stripped of debug info but not of symbol names, so backtraces stay
# readable), and the torchvision fixture pack. Then, on the GPU machine:
#   bash bench/device_check.sh tests|check|bench   (carry: [".device"])
# `bench/prepare_device.sh cli` builds only the CLI (enough for check, bench,
# tune and the probes: 11 MB instead of ~60 MB with the test binaries);
# `bench/prepare_device.sh example` the CLI and the embedded example
# (`example-vit`: the CLI and the example around the tiny ViT);
# `bench/prepare_device.sh serve` the CLI with `aotune serve` and the gRPC load
# client (bench/serve_gpu.sh; about 20 MB); `bench/prepare_device.sh cublaslt`
# the CLI and the tuner's measurer test (bench/vit_cublaslt_tune.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device
if [ "${1:-all}" = serve ]; then
  # Release with line tables (the profile's), stripped: the carry stays small.
  AOTUNE_NO_EMBED=1 cargo build --release --features serve --bin aotune --example serve_grpc_load
  cp target/release/aotune .device/aotune && strip .device/aotune
  cp target/release/examples/serve_grpc_load .device/serve_grpc_load && strip .device/serve_grpc_load
  du -sh .device/aotune .device/serve_grpc_load .device; exit 0
fi
AOTUNE_NO_EMBED=1 cargo build --release --features cli --bin aotune
cp target/release/aotune .device/aotune && strip .device/aotune
if [ "${1:-all}" = cli ]; then du -sh .device; exit 0; fi
if [ "${1:-all}" = cublaslt ]; then
  # bench/vit_cublaslt_tune.sh: the CLI and the tuner's measurer test.
  log=$(mktemp)
  AOTUNE_NO_EMBED=1 cargo test --profile ci --no-run --features cli --test gpu_tuner_faults 2>&1 | tee "$log" >/dev/null
  cp "$(sed -n 's/.*Executable tests\/gpu_tuner_faults.rs (\(.*\))/\1/p' "$log" | head -1)" .device/gpu_tuner_faults
  strip .device/gpu_tuner_faults
  du -sh .device; exit 0
fi
if [ "${1:-all}" = example-vit ]; then
  # The include_model! user story around the tiny ViT (bench/device_check.sh example-vit).
  make example-vit >/dev/null
  cp target/ci/resnet50-app .device/embedded-vit && strip .device/embedded-vit
  du -sh .device; exit 0
fi
if [ "${1:-all}" = example ]; then
  # The include_model! user story with ResNet-18 b1 embedded (bench/device_check.sh example).
  make example-small >/dev/null
  cp target/release/resnet50-app .device/embedded-app && strip .device/embedded-app
  du -sh .device; exit 0
fi
log=$(mktemp)
AOTUNE_NO_EMBED=1 cargo test --profile ci --no-run -p aotune --features cli --lib \
  --test gpu_runtime --test gpu_kernels --test gpu_fixtures --test gpu_templates \
  --test gpu_movement --test gpu_norms --test gpu_attention --test gpu_input_dtype 2>&1 | tee "$log" >/dev/null
pick() { sed -n "s/.*Executable $1 (\(.*\))/\1/p" "$log"; }
cp "$(pick 'unittests src\/lib.rs' | grep '/aotune-' )" .device/aotune-lib-tests
AOTUNE_NO_EMBED=1 cargo test --profile ci --no-run --features cli --test gpu_tuner_faults 2>&1 | tee -a "$log" >/dev/null
# The CPU fixture test, for bench/family_gpu.sh (the CPU reference against ONNX Runtime there).
cargo test --profile ci --no-run --test fixtures 2>&1 | tee -a "$log" >/dev/null
cp "$(pick 'tests\/fixtures.rs' | head -1)" .device/fixtures && strip .device/fixtures
for t in gpu_runtime gpu_kernels gpu_fixtures gpu_templates gpu_tuner_faults gpu_movement gpu_norms gpu_attention gpu_input_dtype; do cp "$(pick "tests\/$t.rs" | head -1)" ".device/$t"; done
# The binaries whose tests print an allocation's backtrace (tests/common/counting_allocator.rs)
# keep their symbol names.
strip --strip-debug .device/aotune-lib-tests .device/gpu_runtime .device/gpu_input_dtype
strip .device/gpu_kernels .device/gpu_fixtures .device/gpu_templates .device/gpu_tuner_faults \
  .device/gpu_movement .device/gpu_norms .device/gpu_attention
if [ -d ../shared/fixtures ]; then
  cargo test --profile ci --test gpu_fixtures -- --ignored pack_fixtures_for_gpu >/dev/null
  rm -rf .device/fixture-pack && cp -r target/gpu-fixture-pack .device/fixture-pack
fi
du -sh .device

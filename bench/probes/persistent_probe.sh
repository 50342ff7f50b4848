#!/usr/bin/env bash
# One GPU-machine call (no carry needed): builds bench/probes/persistent_probe.cu with
# the machine's nvcc and runs it for a few layer shapes. Prints, per variant,
# the median time of the whole chain with the weights cold (L2 flushed first)
# and warm, and per layer. See the .cu file for what the variants are.
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || NVCC=.tools/cuda/nvidia/cu13/bin/nvcc
bin=$(mktemp -d)/persistent_probe
"$NVCC" -O3 -std=c++17 -arch=sm_90a -o "$bin" bench/probes/persistent_probe.cu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
# layers, activation floats, weight bytes per layer: ResNet-50 b1 has 53
# kernels and ~1 MB of fp16 weights per conv on average (51 MB in all); 64 KB
# isolates the synchronisation from the weight stream.
for shape in "52 50176 1048576" "52 50176 65536" "52 25088 2097152"; do
  # shellcheck disable=SC2086
  timeout 60 "$bin" $shape
done

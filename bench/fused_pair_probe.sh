#!/usr/bin/env bash
# One GPU-machine call (no carry needed): builds bench/fused_pair_probe.cu with
# the machine's nvcc and runs it. It prints, per tiling, the fused expand →
# reduce kernel against the same two GEMMs as two kernels, with µs per launch
# (per pair), and checks both outputs against a CPU reference.
# docs/notes/design-fused-block-boundary.md says what it decides.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || NVCC=.tools/cuda/nvidia/cu13/bin/nvcc
bin=$(mktemp -d)/fused_pair_probe
"$NVCC" -O3 -std=c++17 -arch=sm_90a -o "$bin" bench/fused_pair_probe.cu
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null || true
timeout 120 "$bin"

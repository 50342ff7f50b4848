#!/usr/bin/env bash
# One GPU-machine call (no carry needed): builds bench/probes/fused_pair_probe.cu with
# the machine's nvcc, with 4 and with 8 warps per CTA, and runs both. Each
# prints, per tiling, the fused expand → reduce kernel against the same two
# GEMMs as two kernels, with µs per launch (per pair), and checks both outputs
# against a CPU reference. PROFILE=1 adds each kernel's phase timeline.
# docs/design/fused-block-boundary.md says what it decides.
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || NVCC=.tools/cuda/nvidia/cu13/bin/nvcc
dir=$(mktemp -d)
for w in ${WARPS_LIST:-4 8}; do
  "$NVCC" -O3 -std=c++17 -arch=sm_90a -DWARPS="$w" -Xptxas -v -o "$dir/probe$w" bench/probes/fused_pair_probe.cu \
    2>"$dir/ptxas$w.log" || { cat "$dir/ptxas$w.log"; exit 1; }
  grep -c "spill stores" "$dir/ptxas$w.log" >/dev/null && grep -B1 "[1-9][0-9]* bytes spill" "$dir/ptxas$w.log" | head -8 || true
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null || true
for w in ${WARPS_LIST:-4 8}; do
  echo "== $w warps per CTA"
  timeout 120 "$dir/probe$w"
done

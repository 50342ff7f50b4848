#!/usr/bin/env bash
# One GPU-machine call (no carry needed, about a minute): cuBLASLt on the four
# Dense layers of a ViT-B/16 block with aotune's epilogues (bias, GELU,
# residual through beta·C), at batch 64 (M 12608) and batch 1 (M 197): each
# heuristic algorithm checked against an f64 reference with the exact GELU and
# timed alone, then twelve blocks' 48 matmuls in one CUDA graph
# (bench/probes/lt_block_probe.cu; docs/design/cublaslt-dense.md).
# Log: ${OUT:-/tmp}/lt_block.log; the table at the end.
# Run from the repository root: bash bench/probes/lt_block_probe.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
log=$OUT/lt_block.log
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
dir=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || true
  "$NVCC" --version | tail -1
} 2>&1 | tee "$log"
if ! "$NVCC" -O3 -std=c++17 -arch=sm_90 -o "$dir/lt_block_probe" bench/probes/lt_block_probe.cu \
  -lcublasLt >"$dir/build.log" 2>&1; then
  tee -a "$log" <"$dir/build.log"
  echo "build failed" | tee -a "$log"
  exit 1
fi
timeout 240 "$dir/lt_block_probe" >>"$log" 2>&1
rc=$?
{
  echo "rc=$rc"
  grep -v '^TAB' "$log" | tail -n +3 | head -20
  grep '^TAB' "$log" | cut -c5-
} | tee -a "$log"
exit $rc

#!/usr/bin/env bash
# One GPU-machine call (no carry needed, ~1.5 minutes): how fast a TMA-fed,
# warp-specialized wgmma GEMM (bench/probes/tma_gemm_probe.cu, the kernel of
# docs/design/tma-gemm.md) runs on ViT-B/16's batch-64 Dense shapes (M 12608:
# qkv, out-proj, fc1, fc2) and its batch-1 ones (M 197: *_b1), next to
# cublasGemmEx and cublasLt on the same shapes: the first kernel (tma*:
# cooperative consumers, N-first order) and the second (pp*: ping-pong
# consumers, co*: cooperative; g8: grouped tile order; c2: clusters of 2 with
# the W tile multicast). Every implementation is checked against an f32
# reference GEMM first on every shape, two ragged ones included (rel L2 >
# 1e-2: FAIL, not timed), then timed (median of 60 launches).
# Builds with the machine's nvcc (sm_90a) and runs each implementation in a
# process of its own under `timeout`, so that a hang or a trap in one of them
# costs only its own rows. Log: ${OUT:-/tmp}/tma_gemm.log; the table at the end.
# Run from the repository root: bash bench/probes/tma_gemm_probe.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
log=$OUT/tma_gemm.log
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
dir=$(mktemp -d)
bin=$dir/tma_gemm_probe
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || true
  "$NVCC" --version | tail -1
} 2>&1 | tee "$log"
if ! "$NVCC" -O3 -std=c++17 -arch=sm_90a --resource-usage -o "$bin" bench/probes/tma_gemm_probe.cu \
  -lcublasLt -lcublas >"$dir/build.log" 2>&1; then
  tee -a "$log" <"$dir/build.log"
  echo "build failed" | tee -a "$log"
  exit 1
fi
# Registers and spills of the TMA kernels (the consumer path must not spill).
grep -A2 -E "Function properties for _ZN(3tma|2ws)" "$dir/build.log" | grep -E 'tma|ws|spill|registers' | tee -a "$log"
status=()
failed=0
for impl in $("$bin" --list); do
  # Every process rebuilds the inputs and the reference (seconds); 60 s is
  # ample for one implementation on all shapes; a hang traps after ~2 s.
  timeout 60 "$bin" "$impl" >>"$log" 2>&1
  rc=$?
  status+=("$impl rc=$rc")
  [ $rc -eq 0 ] || failed=1
done
{
  echo
  printf '%s\n' "${status[@]}"
  echo
  grep -m1 '^TAB shape' "$log" | cut -c5-
  grep '^TAB ' "$log" | grep -v '^TAB shape' | cut -c5- | sort -s -k1,1
} | tee -a "$log"
exit $failed

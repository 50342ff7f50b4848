#!/usr/bin/env bash
# One GPU-machine call: split-K reduced inside a thread-block cluster
# (`split_reduce: "cluster"`) against the same tiles with the global
# reduction, on zoo ResNet-50 fp16 batch 1. Every conv task is forced onto one
# config (bench/probes/force_configs.py; tasks with too few k tiles for the split
# fall back to the default), checked layer by layer against the CPU reference
# and timed per layer. Then, when Nsight Compute is there and may read the
# counters, a profile of the first batch-256 conv launches (PROFILE_B256=1).
# Carry .device (bench/prepare_device.sh cli is enough).
set -u
. "$(dirname "$0")/../device_env.sh"
mkdir -p /tmp/logs
mma() { echo "{\"kernel\":\"mma\",\"block_m\":32,\"block_n\":32,\"block_k\":64,\"warps_m\":2,\"warps_n\":2,\"stages\":4,\"split_k\":$1,\"epilogue\":\"direct\"$2}"; }
wg() { echo "{\"kernel\":\"wgmma\",\"block_m\":64,\"block_n\":32,\"stages\":4,\"split_k\":$1,\"epilogue\":\"direct\"$2}"; }
C=',"split_reduce":"cluster"'
declare -A V=(
  [mma_global]="$(mma 4 '')" [mma_cluster]="$(mma 4 "$C")"
  [wg_global]="$(wg 4 '')" [wg_cluster]="$(wg 4 "$C")"
  [mma8_global]="$(mma 8 '')" [mma8_cluster]="$(mma 8 "$C")"
)
$B dump /tmp/r50.onnx --section tasks --batch 1 --precision fp16 > /tmp/logs/tasks_b1.txt
for v in "${!V[@]}"; do python3 bench/probes/force_configs.py /tmp/logs/tasks_b1.txt "${V[$v]}" /tmp/logs/$v.json >/dev/null; done
summary=()
for v in mma_cluster wg_cluster mma8_cluster; do
  $B verify /tmp/r50.onnx --precision fp16 --batch 1 --per-layer --tuning /tmp/logs/$v.json > "$OUT/verify_$v.log" 2>&1
  summary+=("verify b1 $v rc=$? $(grep -E 'rel|first|every' "$OUT/verify_$v.log" | tail -1)")
done
for v in mma_global mma_cluster wg_global wg_cluster mma8_global mma8_cluster; do
  $B bench /tmp/r50.onnx --precision fp16 --batch 1 --per-layer --runs 200 --warmup 10 --json \
    --tuning /tmp/logs/$v.json > "$OUT/bench_$v.log" 2>&1
  summary+=("bench b1 $v rc=$? $(python3 bench/median_of.py "$OUT/bench_$v.log") $(grep 'sum of kernels' "$OUT/bench_$v.log")")
done
if [ -n "${PROFILE_B256:-}" ] && command -v ncu >/dev/null; then
  timeout 240 ncu --launch-skip 1 --launch-count 6 --kernel-name regex:conv_ \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis \
    $B bench /tmp/r50.onnx --precision fp16 --batch 256 --runs 1 --warmup 0 \
    --tuning models/resnet50.best.json > "$OUT/ncu_b256.log" 2>&1
  summary+=("ncu b256 rc=$? $(grep -c 'Section: Occupancy' "$OUT/ncu_b256.log") kernels profiled")
fi
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"

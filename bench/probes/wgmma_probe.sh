#!/usr/bin/env bash
# One GPU-machine call: the wgmma template against the mma.sync defaults on
# zoo ResNet-50 fp16. Every conv/dense task is forced onto one wgmma config
# (bench/probes/force_configs.py), checked layer by layer against the CPU reference
# (b1, b8) and timed per layer (b256, b1). Carry .device (bench/prepare_device.sh).
set -u
. "$(dirname "$0")/../device_env.sh"
mkdir -p /tmp/logs
cfg() { echo "{\"kernel\":\"wgmma\",\"block_m\":$1,\"block_n\":$2,\"stages\":$3,\"split_k\":$4,\"epilogue\":\"$5\"}"; }
declare -A V=(
  [A]="$(cfg 128 256 3 1 staged)" [B]="$(cfg 128 128 4 1 direct)" [C]="$(cfg 256 128 3 1 staged)"
  [E]="$(cfg 128 128 3 1 staged)" [S]="$(cfg 64 64 4 4 direct)" [T]="$(cfg 64 128 3 2 staged)"
)
for b in 1 8 256; do
  $B dump /tmp/r50.onnx --section tasks --batch $b --precision fp16 > /tmp/logs/tasks_b$b.txt
  for v in "${!V[@]}"; do python3 bench/probes/force_configs.py /tmp/logs/tasks_b$b.txt "${V[$v]}" /tmp/logs/${v}_b$b.json >/dev/null; done
done
summary=()
check() {  # batch variant
  local t=""; [ "$2" = default ] || t="--tuning /tmp/logs/$2_b$1.json"
  $B verify /tmp/r50.onnx --precision fp16 --batch $1 --per-layer $t > "$OUT/verify_b$1_$2.log" 2>&1
  summary+=("verify b$1 $2 rc=$? $(grep -E 'rel|first|every' "$OUT/verify_b$1_$2.log" | tail -1)")
}
timeit() {  # batch variant runs
  local t=""; [ "$2" = default ] || t="--tuning /tmp/logs/$2_b$1.json"
  $B bench /tmp/r50.onnx --precision fp16 --batch $1 --per-layer --runs $3 --warmup 5 --json $t > "$OUT/bench_b$1_$2.log" 2>&1
  summary+=("bench b$1 $2 rc=$? $(python3 bench/median_of.py "$OUT/bench_b$1_$2.log") $(grep 'sum of kernels' "$OUT/bench_b$1_$2.log")")
}
for v in A B C; do check 8 $v; done
for v in S T; do check 1 $v; done
f=$(ls -t /tmp/aotune-cache/*/*.fatbin 2>/dev/null | head -1)
[ -n "$f" ] && summary+=("HGMMA in $(basename $f): $(cuobjdump -sass $f | grep -c HGMMA)")
for v in default A B C E; do timeit 256 $v 20; done
for v in default S T; do timeit 1 $v 200; done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"

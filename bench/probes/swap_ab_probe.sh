#!/usr/bin/env bash
# One GPU-machine call for the swapped-operand wgmma tiles (`swap_ab`; built
# by bench/prepare_device.sh, carry .device): are its kernels right, and how
# do they compare with the committed picks on ResNet-50's 64-channel layers at
# batch 256? (Session 8 ran it on the then-uncommitted patch: right, and the
# 3x3s 15% faster; the tuner now picks them.)
#  1. gpu_kernels on the fp16 and bf16 nets whose samples hold
#     swapped configs, against the CPU reference;
#  2. per swapped config: the committed log with that config forced on the
#     four N = 64 tasks (stem, layer-1 1x1s and 3x3s), `verify --per-layer`
#     at batch VERIFY_BATCH (8) then `bench --per-layer` at batch 256, next to the committed log's
#     bench from the same binary.
# Logs under $OUT; the closing table compares the four layers' µs.
set -u
S=${B:-.device/aotune}
B=$S
. "$(dirname "$0")/../device_env.sh"
export AOTUNE_NO_EMBED=1
echo "== gpu_kernels, fp16 + bf16 samples"
AOTUNE_SWEEP_FILTER=${SWEEP_FILTER:-"16 b"} timeout "${TEST_TIMEOUT:-240}" .device/gpu_kernels \
  --test-threads 1 c16_convs_pools_and_head odd_channels_c5_k7 space_to_depth_stems \
  > "$OUT/gpu_kernels.log" 2>&1
echo "rc=$? $(grep -E '^test result' "$OUT/gpu_kernels.log")"
grep -E "swap|wgmma|FAILED|panicked" "$OUT/gpu_kernels.log" | head -20
VB=${VERIFY_BATCH:-8}   # the CPU reference at batch 256 per layer would take minutes
$S dump /tmp/r50.onnx --section tasks --batch 256 --precision fp16 > /tmp/tasks256.txt
$S dump /tmp/r50.onnx --section tasks --batch "$VB" --precision fp16 > /tmp/tasks_v.txt
$S bench /tmp/r50.onnx --batch 256 --precision fp16 --tuning models/resnet50.best.json \
  --per-layer > "$OUT/bench_committed.txt" 2>&1
configs=${SWAP_CONFIGS:-"192:64:3 192:64:4 128:64:4 128:64:6"}
for c in $configs; do
  IFS=: read -r bm bn st <<<"$c"
  cfg="{\"kernel\":\"wgmma\",\"block_m\":$bm,\"block_n\":$bn,\"stages\":$st,\"split_k\":1,\"epilogue\":\"staged\",\"swap_ab\":true}"
  python3 bench/probes/force_configs.py /tmp/tasks256.txt "$cfg" "/tmp/swap_$c.json" \
    --match 'in1=f16\[64x' --base models/resnet50.best.json
  python3 bench/probes/force_configs.py /tmp/tasks_v.txt "$cfg" "/tmp/swapv_$c.json" \
    --match 'in1=f16\[64x' --base models/resnet50.best.json
  tag=m${bm}n${bn}p$st
  $S verify /tmp/r50.onnx --batch "$VB" --precision fp16 --tuning "/tmp/swapv_$c.json" \
    --per-layer > "$OUT/verify_$tag.txt" 2>&1
  echo "== $tag verify rc=$? $(grep -c 'using the default' "$OUT/verify_$tag.txt") configs rejected (using the default)"
  tail -n 3 "$OUT/verify_$tag.txt"
  $S bench /tmp/r50.onnx --batch 256 --precision fp16 --tuning "/tmp/swap_$c.json" \
    --per-layer > "$OUT/bench_$tag.txt" 2>&1
done
echo "== per layer, µs (N = 64 layers: conv2d1 stem, conv2d2, conv2d3/7/10 3x3, conv2d6/9 1x1)"
for f in "$OUT"/bench_*.txt; do
  printf '%-22s %s  | ' "$(basename "$f" .txt)" "$(grep -o 'median [0-9.]* ms' "$f" | head -1)"
  awk '$2 ~ /^conv2d(1|2|3|6|7|9|10)$/ {printf "%s %s  ", $2, $4}' "$f"; echo
done

#!/usr/bin/env bash
# One GPU-machine call: the wgmma knobs for memory-bound layers (the
# residual tile prefetched with the first k tile, `prefetch_residual`; a
# register cap for more CTAs per SM, `min_blocks`) on top of the committed
# tuned configs, zoo ResNet-50 fp16 batch 256, timed per layer; then a
# layer-by-layer check at batch 8 with both knobs forced on every task that
# takes them, and the GPU kernel tests (TESTS=1). The overlay logs
# (bench/probes/probe-logs/*.best.json) are built here first by bench/probes/make_overlays.sh.
# Carry .device (bench/prepare_device.sh).
set -u
. "$(dirname "$0")/../device_env.sh"
export AOTUNE_FIXTURE_PACK=$PWD/.device/fixture-pack
mkdir -p /tmp/logs
summary=()
$B dump /tmp/r50.onnx --section tasks --batch 8 --precision fp16 > /tmp/logs/tasks_b8.txt
python3 bench/probes/force_configs.py /tmp/logs/tasks_b8.txt \
  '{"kernel":"wgmma","block_m":128,"block_n":64,"stages":2,"split_k":1,"epilogue":"staged","prefetch_residual":true,"min_blocks":4}' \
  /tmp/logs/force_b8.json >/dev/null
$B verify /tmp/r50.onnx --precision fp16 --batch 8 --per-layer --tuning /tmp/logs/force_b8.json > "$OUT/verify_b8_prefetch.log" 2>&1
summary+=("verify b8 prefetch+b4 rc=$? $(grep -E 'rel|first|every' "$OUT/verify_b8_prefetch.log" | tail -1)")
for v in ${VARIANTS:-tuned pre b4 pre_b4}; do
  t=models/resnet50.best.json; [ $v = tuned ] || t=bench/probes/probe-logs/$v.best.json
  $B bench /tmp/r50.onnx --precision fp16 --batch 256 --per-layer --runs 30 --warmup 5 --json \
    --tuning $t > "$OUT/bench_b256_$v.log" 2>&1
  summary+=("bench b256 $v rc=$? $(python3 bench/median_of.py "$OUT/bench_b256_$v.log") $(grep 'sum of kernels' "$OUT/bench_b256_$v.log")")
done
if [ -n "${TESTS:-}" ]; then
  timeout 400 .device/gpu_kernels --test-threads=1 > "$OUT/test_gpu_kernels.log" 2>&1
  summary+=("gpu_kernels rc=$? $(grep -E '^test result' "$OUT/test_gpu_kernels.log" | tail -1)")
  grep -E "FAILED|panicked" "$OUT/test_gpu_kernels.log" | head -5
fi
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"

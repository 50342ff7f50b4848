#!/usr/bin/env bash
# Builds bench/probes/probe-logs/NAME.best.json here (not on the GPU machine) for
# bench/probes/residual_probe.sh: the committed tuning log with one knob overlaid by
# bench/probes/overlay_configs.py, minus the records the batch-256 fp16 build finds
# invalid with the knob (those keep their tuned config, so every other layer
# times the same kernels). Needs target/release/aotune and /tmp/r50.onnx
# (`aotune zoo resnet50 -o /tmp/r50.onnx`).
set -euo pipefail
cd "$(dirname "$0")/../.."
A=target/release/aotune
mkdir -p bench/probes/probe-logs /tmp/overlays
overlay() {  # NAME PATCH [overlay_configs.py selection flags]
  local name=$1 patch=$2; shift 2
  python3 bench/probes/overlay_configs.py models/resnet50.best.json "$patch" /tmp/overlays/$name.json "$@" >/dev/null
  local bad
  bad=$($A build /tmp/r50.onnx --batch 256 --precision fp16 --tuning /tmp/overlays/$name.json \
    --no-nvcc --out /tmp/overlays/build 2>&1 | sed -n "s/^note: task \([0-9a-f]*\) .*is invalid.*/\1/p" | paste -sd,)
  python3 bench/probes/overlay_configs.py models/resnet50.best.json "$patch" bench/probes/probe-logs/$name.best.json "$@" --exclude "$bad"
}
staged=(--residual --where 'epilogue="staged"' --where split_k=1)
overlay pre '{"prefetch_residual":true}' "${staged[@]}"
overlay b3 '{"min_blocks":3}'
overlay b4 '{"min_blocks":4}'
overlay pre_b4 '{"prefetch_residual":true,"min_blocks":4}' "${staged[@]}"

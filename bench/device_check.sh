#!/usr/bin/env bash
# One device call: correctness first (runtime GPU tests, per-layer verify),
# then timings of aotune and PyTorch in the same call. Binaries are built on
# the dev machine and carried in .device/ (see docs/notes/gpu-runs.md).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export AOTUNE_CACHE=/tmp/aotune-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=.device/aotune
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
[ -f /tmp/r50.onnx ] || $B zoo resnet50 -o /tmp/r50.onnx
MODE=${1:-check}
if [ "$MODE" = check ]; then
  echo "== runtime GPU tests"
  .device/aotune-lib-tests runtime:: --test-threads=1 2>&1 | tail -25
  for p in fp32 fp16; do
    echo "== verify $p"
    $B verify /tmp/r50.onnx --precision $p --per-layer 2>&1 | tee "$OUT/verify_$p.log" | awk 'NR<=3 || /e[-+]0[0-4]|NaN|inf|first|every|error|rel/' | head -40
  done
fi
if [ "$MODE" = bench ] || [ "$MODE" = check ]; then
  for p in ${PRECISIONS:-fp32 tf32 fp16}; do
    for b in ${BATCHES:-1}; do
      $B bench /tmp/r50.onnx --precision $p --batch $b --json ${PER_LAYER:-} 2>&1 | tee -a "$OUT/bench.log" | grep -v '^{'
    done
  done
  python3 bench/pytorch_baseline.py --batches ${PT_BATCHES:-1} --runs 100 --out "$OUT/pytorch.jsonl" 2>&1 | tail -8
fi

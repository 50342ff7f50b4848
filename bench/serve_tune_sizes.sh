#!/usr/bin/env bash
# Tunes ResNet-50 fp16 (f16 input, as `aotune serve` builds it for FP16
# clients) at the serving batch sizes the committed log has no records for,
# merged into a copy of the log ($OUT/best.json), then runs the serving sweep
# with that log, so the kernels of the batches the server actually runs
# (12–48 rows at concurrency 64) are tuned ones. GPU machine, carrying the
# binaries of `bash bench/prepare_device.sh serve`:
#   bash bench/serve_tune_sizes.sh
#   SIZES="16 24" MINUTES=0.6 SWEEP=$'INSTANCES=4' bash bench/serve_tune_sizes.sh
# Env: SIZES (default 12 16 24 32 48), MINUTES per size (default 1), LOG (the
# log to extend; default models/resnet50.best.json), SWEEP (for
# serve_sweep.sh; default: its own), REFINE=1 to run `aotune refine` on each
# size's trials after its tune, SKIP_SWEEP=1 to only tune. Writes
# $OUT/best.json, $OUT/tune_<b>.log and the sweep's files; copy best.json back
# into models/resnet50.best.json to commit the records.
set -u
cd "$(dirname "$0")/.."
. bench/device_env.sh >/dev/null
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SIZES=${SIZES:-12 16 24 32 48}
MINUTES=${MINUTES:-1}
LOG=${LOG:-models/resnet50.best.json}
[ -f /tmp/r50.onnx ] || $B zoo resnet50 -o /tmp/r50.onnx >/dev/null || { echo "== serve_tune_sizes: $B could not write the zoo ResNet-50"; exit 2; }
cp "$LOG" "$OUT/best.json" || { echo "== serve_tune_sizes: cannot read the log $LOG"; exit 2; }
for b in $SIZES; do
  echo "== tune b$b for $MINUTES min ($(date +%T))"
  $B tune /tmp/r50.onnx --batch "$b" --precision fp16 --input-dtype f16 \
    --log "$OUT/trials_$b.jsonl" --best "$OUT/best.json" --budget-minutes "$MINUTES" --no-e2e \
    > "$OUT/tune_$b.log" 2>&1
  echo "   rc=$?; $(tail -n 1 "$OUT/tune_$b.log")"
  if [ -n "${REFINE:-}" ]; then
    $B refine /tmp/r50.onnx --batch "$b" --precision fp16 --input-dtype f16 \
      --log "$OUT/trials_$b.jsonl" --best "$OUT/best.json" > "$OUT/refine_$b.log" 2>&1
    echo "   refine rc=$?; $(tail -n 1 "$OUT/refine_$b.log")"
  fi
done
[ -n "${SKIP_SWEEP:-}" ] && exit 0
TUNING="$OUT/best.json" bash bench/serve_sweep.sh

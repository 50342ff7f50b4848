#!/usr/bin/env bash
# Tunes fixture models of tests/fixtures (refilled by their fill rule) on the GPU
# machine and times them tuned, with a per-layer profile: issue 23's logs.
# Args: FIXTURE:BATCH[:MINUTES] … (default vit_b_16_dynamo:1:2; a batch other than
# the export's needs a dynamic-batch export, e.g. vit_b_16_legacy:64).
# Writes $OUT/<fixture>.b<batch>.fp16.best.json (the log to commit as
# models/<model>.b<batch>.best.json), its records, and the logs. Env: PRECISION
# (default fp16), B (the CLI, default .device/aotune), TUNE_ARGS.
set -u
. "$(dirname "$0")/device_env.sh"
P=${PRECISION:-fp16}
for spec in "${@:-vit_b_16_dynamo:1:2}"; do
  IFS=: read -r m batch minutes <<<"$spec"
  minutes=${minutes:-2}
  [ -f /tmp/$m.onnx ] || python3 bench/refill_fixture.py tests/fixtures/$m /tmp/$m.onnx
  base=$OUT/$m.b$batch.$P
  t0=$(date +%s)
  $B tune /tmp/$m.onnx --precision $P --batch $batch --budget-minutes $minutes ${TUNE_ARGS:-} \
    --log $base.records.jsonl --best $base.best.json > $base.tune.log 2>&1
  echo "== tune $m b$batch $P rc=$? in $(( $(date +%s) - t0 )) s (compiles included)"; tail -3 $base.tune.log
  $B bench /tmp/$m.onnx --precision $P --batch $batch --json > $base.defaults.log 2>&1
  $B bench /tmp/$m.onnx --precision $P --batch $batch --json --tuning $base.best.json --per-layer \
    > $base.tuned.log 2>&1
  for k in defaults tuned; do
    echo "== $m b$batch $P $k: $(grep -E 'GPU time' $base.$k.log | head -1)"
  done
done

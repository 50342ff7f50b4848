#!/usr/bin/env bash
# One GPU-machine call: tunes zoo ResNet-50 for each BATCH:PRECISION:MINUTES
# argument (`aotune tune … --budget-minutes MINUTES`), in order, into a copy of
# the committed log: $OUT/resnet50.best.json comes back with each run's tasks
# replaced and every other record kept (copy it over models/resnet50.best.json).
# All trial records come back as $OUT/records.tar.gz, the tuner's output as
# $OUT/tune.log; each run's closing lines are printed. Carry .device
# (bench/prepare_device.sh cli).
# BATCH:PRECISION:MINUTES:NAME tunes into a fresh $OUT/NAME.best.json instead
# (records /tmp/records/NAME.records.jsonl), e.g. the search-quality run with
# 4× the budget, which must not replace the committed log's records.
# RESUME=1 continues each BATCH:PRECISION run from its committed records
# (models/resnet50.bB.P.records.jsonl, `--resume`), with `--trials-per-task
# ${TRIALS:-256}` since resumed trials count towards the cap (b1 fp16 holds ~150
# a task: at 128 a resume ran 0 trials in session 13). TRIALS alone sets
# `--trials-per-task` of every run (e.g. TRIALS=256 for the search-quality pair
# `1:fp16:1:q1 1:fp16:4:q4`, so that neither stops at the default cap of 64).
# TUNE_ARGS adds flags to every run (e.g. TUNE_ARGS="--compile-in threads").
set -u
. "$(dirname "$0")/device_env.sh"
mkdir -p /tmp/records
[ -f models/resnet50.best.json ] && cp models/resnet50.best.json "$OUT/resnet50.best.json"
for spec in "$@"; do
  IFS=: read -r b p m name <<<"$spec"
  best="$OUT/resnet50.best.json" records="/tmp/records/resnet50.b$b.$p.records.jsonl"
  log="/tmp/records/tune_b${b}_$p.log"
  if [ -n "$name" ]; then
    best="$OUT/$name.best.json" records="/tmp/records/$name.records.jsonl"
    log="/tmp/records/tune_$name.log"
  fi
  resume=()
  [ -n "${TRIALS:-}" ] && resume=(--trials-per-task "$TRIALS")
  committed="models/resnet50.b$b.$p.records.jsonl"
  if [ -n "${RESUME:-}" ] && [ -z "$name" ] && [ -f "$committed" ]; then
    cp "$committed" "$records"
    resume=(--resume --trials-per-task "${TRIALS:-256}")
  fi
  start=$(date +%s)
  $B tune /tmp/r50.onnx --batch "$b" --precision "$p" --budget-minutes "$m" \
    --log "$records" --best "$best" "${resume[@]}" ${TUNE_ARGS:-} > "$log" 2>&1
  rc=$?
  echo "== tune b$b $p ${m} min ${name}: rc=$rc, $(( $(date +%s) - start )) s wall"
  grep -vE "^(ptxas|note)" "$log" | tail -n 6
done
cat /tmp/records/tune_*.log > "$OUT/tune.log"
tar czf "$OUT/records.tar.gz" -C /tmp/records .

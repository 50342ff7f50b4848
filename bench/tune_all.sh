#!/usr/bin/env bash
# One GPU-machine call: tunes zoo ResNet-50 for each BATCH:PRECISION:MINUTES
# argument (`aotune tune … --budget-minutes MINUTES`), in order, into a copy of
# the committed log: $OUT/resnet50.best.json comes back with each run's tasks
# replaced and every other record kept (copy it over models/resnet50.best.json).
# All trial records come back as $OUT/records.tar.gz, the tuner's output as
# $OUT/tune.log; each run's closing lines are printed. Carry .device
# (bench/prepare_device.sh cli).
set -u
. "$(dirname "$0")/device_env.sh"
mkdir -p /tmp/records
[ -f models/resnet50.best.json ] && cp models/resnet50.best.json "$OUT/resnet50.best.json"
for spec in "$@"; do
  IFS=: read -r b p m <<<"$spec"
  start=$(date +%s)
  $B tune /tmp/r50.onnx --batch "$b" --precision "$p" --budget-minutes "$m" \
    --log "/tmp/records/resnet50.b$b.$p.records.jsonl" --best "$OUT/resnet50.best.json" \
    > "/tmp/records/tune_b${b}_$p.log" 2>&1
  rc=$?
  echo "== tune b$b $p ${m} min: rc=$rc, $(( $(date +%s) - start )) s wall"
  grep -vE "^(ptxas|note)" "/tmp/records/tune_b${b}_$p.log" | tail -n 6
done
cat /tmp/records/tune_*.log > "$OUT/tune.log"
tar czf "$OUT/records.tar.gz" -C /tmp/records .

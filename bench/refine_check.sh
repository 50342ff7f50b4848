#!/usr/bin/env bash
# One GPU-machine call: `aotune refine` of the committed log at each batch of
# BATCHES (default "1"; PRECISION, default fp16; PDL as `--launch auto`,
# candidates from models/resnet50.bB.PRECISION.records.jsonl) into $OUT/refined.best.json (each
# batch refines the previous one's output), then, per batch, the committed
# log against the refined one, interleaved, twice each, the first with the
# per-layer profile; `verify --per-layer` with the refined log. REFINE_ARGS
# adds flags to refine (e.g. `--candidates trigger`); passes separated by `|`
# run in turn, each on the previous one's output. DEFAULTS=1 benches the
# heuristic defaults (no --tuning) in the same rounds. Then PyTorch at those
# batches, unless NO_PYTORCH. BASE=log refines that log instead of the
# committed one (still benched against the committed one), RECORDS=dir reads
# the candidates' records from dir (e.g. /tmp/records after bench/tune_all.sh
# in the same call). COMMITTED_BIN=path benches the committed log with that
# CLI build instead of $B (the refined log and the defaults stay on $B): a
# new pass or template against the build the committed log was tuned with.
# Carry .device/aotune (bench/prepare_device.sh cli).
set -u
. "$(dirname "$0")/device_env.sh"
M=models/resnet50.best.json R="$OUT/refined.best.json" P=${PRECISION:-fp16}
cp "${BASE:-$M}" "$R"
C=${COMMITTED_BIN:-$B}
bench() {  # bench NAME BATCH TUNING|none [flags]
  local name=$1 b=$2 t=$3 bin=$B; shift 3
  [ "$t" = "$M" ] && bin=$C
  [ "$t" = none ] && t= || t="--tuning $t"
  $bin bench /tmp/r50.onnx --precision $P --batch $b --json $t "$@" > "$OUT/bench_$name.log" 2>&1
  grep "^{" "$OUT/bench_$name.log" | sed "s/^{/{\"run\":\"$name\",/" >> "$OUT/bench.jsonl"
}
IFS='|' read -ra PASSES <<< "${REFINE_ARGS:- }"
for b in ${BATCHES:-1}; do
  for p in "${!PASSES[@]}"; do
    s=$(date +%s)
    $B refine /tmp/r50.onnx --batch $b --precision $P --log "${RECORDS:-models}/resnet50.b$b.$P.records.jsonl" \
      --best "$R" ${PASSES[$p]} > "$OUT/refine_b${b}_$p.log" 2>&1
    echo "== refine b$b pass $p (${PASSES[$p]}) rc=$? $(( $(date +%s) - s )) s"
    grep -E "^graph|kept|error|Error" "$OUT/refine_b${b}_$p.log" | tail -n 12
  done
done
for b in ${BATCHES:-1}; do
  pl=${PER_LAYER:-}
  for i in 1 2; do
    [ -n "${DEFAULTS:-}" ] && bench b${b}_defaults_$i $b none $pl
    bench b${b}_committed_$i $b $M $pl
    bench b${b}_refined_$i $b "$R" $pl
    pl=
  done
  $B verify /tmp/r50.onnx --precision $P --batch $b --per-layer --tuning "$R" > "$OUT/verify_b$b.log" 2>&1
  echo "== verify b$b refined rc=$?"; grep -E "first|every|rel|error" "$OUT/verify_b$b.log" | tail -2
done
[ -n "${NO_PYTORCH:-}" ] || python3 bench/pytorch_baseline.py --batches $(echo ${BATCHES:-1} | tr ' ' ,) > "$OUT/pytorch.log" 2>&1
tail -6 "$OUT/pytorch.log" 2>/dev/null
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['run']:18} b{r['batch']:<4} pdl={str(r.get('pdl')):5} median {r['median_ms']:.4f} ms  p90 {r['p90_ms']:.4f}  {r['images_per_s']:.0f} img/s")
PY

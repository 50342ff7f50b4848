#!/usr/bin/env bash
# Session 10, one GPU-machine call: b1 fp16 tuned with `--timing chained`
# into a fresh log ($OUT/chained.best.json), then benched against the
# committed log, interleaved, twice each, PDL (auto), the first of each with
# the per-layer profile. Env MINUTES (2.5), TRIALS (128).
set -u
. "$(dirname "$0")/../device_env.sh"
M=models/resnet50.best.json
bench() {  # bench NAME BIN BATCH TUNING [flags]
  local name=$1 bin=$2 b=$3 t=$4; shift 4
  $bin bench /tmp/r50.onnx --precision fp16 --batch $b --json --tuning $t "$@" > "$OUT/bench_$name.log" 2>&1
  grep "^{" "$OUT/bench_$name.log" | sed "s/^{/{\"run\":\"$name\",/" >> "$OUT/bench.jsonl"
}
s=$(date +%s)
.device/aotune tune /tmp/r50.onnx --batch 1 --precision fp16 --budget-minutes ${MINUTES:-2.5} \
  --trials-per-task ${TRIALS:-128} --timing chained --no-e2e \
  --log /tmp/chained.records.jsonl --best "$OUT/chained.best.json" > "$OUT/tune_chained.log" 2>&1
echo "== tune b1 chained rc=$? $(( $(date +%s) - s )) s"; grep -vE "^(ptxas|note)" "$OUT/tune_chained.log" | tail -n 6
cp /tmp/chained.records.jsonl "$OUT/"
pl=--per-layer
for i in 1 2; do
  bench b1_committed_$i .device/aotune 1 $M $pl
  bench b1_chained_$i .device/aotune 1 "$OUT/chained.best.json" $pl
  pl=
done
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['run']:18} b{r['batch']:<4} pdl={str(r.get('pdl')):5} median {r['median_ms']:.4f} ms  p90 {r['p90_ms']:.4f}  {r['images_per_s']:.0f} img/s")
PY

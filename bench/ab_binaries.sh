#!/usr/bin/env bash
# One GPU-machine call: two builds of the CLI side by side on the committed
# log. $A (default .device/aotune-base) and $B (default .device/aotune) are
# benched at each batch of BATCHES (default "1 8"; fp16, --launch auto),
# interleaved ROUNDS times (default 3), the first round with the per-layer
# profile; then `verify` (the whole graph, and --per-layer) of $B at those
# batches. A table of medians is printed last. Carry .device.
set -u
A=${A:-.device/aotune-base}
. "$(dirname "$0")/device_env.sh"
M=${TUNING:-models/resnet50.best.json}
bench() {  # bench NAME BINARY BATCH [flags]
  local name=$1 bin=$2 b=$3; shift 3
  $bin bench /tmp/r50.onnx --precision fp16 --batch $b --json --tuning $M "$@" > "$OUT/bench_$name.log" 2>&1
  grep "^{" "$OUT/bench_$name.log" | sed "s/^{/{\"run\":\"$name\",/" >> "$OUT/bench.jsonl"
}
for b in ${BATCHES:-1 8}; do
  pl=--per-layer
  for i in $(seq 1 ${ROUNDS:-3}); do
    bench "A_b${b}_$i" $A $b $pl
    bench "B_b${b}_$i" $B $b $pl
    pl=
  done
  $B verify /tmp/r50.onnx --precision fp16 --batch $b --tuning $M > "$OUT/verify_b${b}.log" 2>&1
  echo "== verify B b$b (graph) rc=$?"; tail -2 "$OUT/verify_b${b}.log"
  $B verify /tmp/r50.onnx --precision fp16 --batch $b --per-layer --tuning $M > "$OUT/verify_layers_b${b}.log" 2>&1
  echo "== verify B b$b (per layer) rc=$?"; grep -E "first|every|rel|error" "$OUT/verify_layers_b${b}.log" | tail -2
done
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(f"{r['run']:10} b{r['batch']:<4} pdl={str(r.get('pdl')):5} median {r['median_ms']:.4f} ms  p90 {r['p90_ms']:.4f}  {r['images_per_s']:.0f} img/s")
for b in sorted({r['batch'] for r in rows}):
    med = {k: statistics.median(r['median_ms'] for r in rows if r['batch'] == b and r['run'].startswith(k + '_'))
           for k in ('A', 'B')}
    print(f"b{b}: A {med['A']:.4f} ms  B {med['B']:.4f} ms  A/B {med['A']/med['B']:.3f}x")
PY

#!/usr/bin/env bash
# One GPU-machine call: the tuned-vs-defaults figure of issue 5, side by side.
# At batch B (default 1, fp16, `--launch auto`): first `aotune refine` of the
# committed log with REFINE_ARGS (default `--top 8 --within 1.5`) into
# $OUT/refined.best.json, then ROUNDS (default 3) interleaved rounds of
# `bench` with the heuristic defaults (no --tuning), the committed log and the
# refined one (the first round with PER_LAYER's flags), then `verify` of the
# refined log (the whole graph under PDL, and --per-layer), then PyTorch at B.
# Carry .device/aotune (bench/prepare_device.sh cli).
set -u
. "$(dirname "$0")/device_env.sh"
b=${B_SIZE:-1} M=models/resnet50.best.json R="$OUT/refined.best.json"
cp $M "$R"
bench() {  # bench NAME [flags]
  local name=$1; shift
  $B bench /tmp/r50.onnx --precision fp16 --batch $b --json "$@" > "$OUT/bench_$name.log" 2>&1
  grep "^{" "$OUT/bench_$name.log" | sed "s/^{/{\"run\":\"$name\",/" >> "$OUT/bench.jsonl"
}
s=$(date +%s)
$B refine /tmp/r50.onnx --batch $b --precision fp16 --log models/resnet50.b$b.fp16.records.jsonl \
  --best "$R" ${REFINE_ARGS:---top 8 --within 1.5} > "$OUT/refine_b$b.log" 2>&1
echo "== refine b$b rc=$? $(( $(date +%s) - s )) s"; grep -E "^graph|kept|error|Error" "$OUT/refine_b$b.log" | tail -n 14
pl=${PER_LAYER:-}
for i in $(seq 1 ${ROUNDS:-3}); do
  bench defaults_$i $pl
  bench committed_$i --tuning $M $pl
  bench refined_$i --tuning "$R" $pl
  pl=
done
$B verify /tmp/r50.onnx --precision fp16 --batch $b --tuning "$R" > "$OUT/verify_graph.log" 2>&1
echo "== verify b$b refined (graph) rc=$?"; tail -3 "$OUT/verify_graph.log"
$B verify /tmp/r50.onnx --precision fp16 --batch $b --per-layer --tuning "$R" > "$OUT/verify_layers.log" 2>&1
echo "== verify b$b refined (per layer) rc=$?"; grep -E "first|every|rel|error" "$OUT/verify_layers.log" | tail -2
[ -n "${NO_PYTORCH:-}" ] || python3 bench/pytorch_baseline.py --batches $b > "$OUT/pytorch.log" 2>&1
tail -4 "$OUT/pytorch.log" 2>/dev/null
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(f"{r['run']:14} b{r['batch']:<4} pdl={str(r.get('pdl')):5} median {r['median_ms']:.4f} ms  p90 {r['p90_ms']:.4f}  {r['images_per_s']:.0f} img/s")
med = {k: statistics.median(r['median_ms'] for r in rows if r['run'].startswith(k)) for k in ('defaults', 'committed', 'refined')}
print("median of rounds:", {k: round(v, 4) for k, v in med.items()})
print(f"defaults/committed {med['defaults']/med['committed']:.3f}x  defaults/refined {med['defaults']/med['refined']:.3f}x")
PY

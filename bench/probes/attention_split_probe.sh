#!/usr/bin/env bash
# Do attention key groups (`kv_split`, attention.cu) merge correctly on the GPU, and do they
# shorten ViT-B/16's attention at batch 1 (12 heads × 197 queries: 84–156 small CTAs, each
# walking every key)? One GPU call: `gpu_attention attention_key_groups` (every tensor-core case
# with 2 and 4 groups), then the dynamo ViT-B/16 at b1 fp16 with the committed log and with its
# attention task forced to each config of `CONFIGS` (the log's tile with kv_split 2 and 4 by
# default), per-layer profiles; `verify` of the last. Carry .device (aotune, gpu_attention).
set -u
. "$(dirname "$0")/../device_env.sh"
S=$OUT/summary.txt; : > "$S"
note() { echo "$*" | tee -a "$S"; }
m=vit_b_16_dynamo
[ -f /tmp/$m.onnx ] || python3 bench/refill_fixture.py tests/fixtures/$m /tmp/$m.onnx > "$OUT/refill.log" 2>&1 &
t0=$(date +%s)
timeout 200 .device/gpu_attention attention_key_groups --nocapture --test-threads=1 > "$OUT/gpu_attention.log" 2>&1
rc=$?
note "attention_key_groups rc=$rc $(( $(date +%s) - t0 )) s"
grep -E "rel. L2|FAIL" "$OUT/gpu_attention.log" | head -20
wait
[ "$rc" = 0 ] || { note "key groups failed their test: no timing"; exit 1; }
LOG=models/vit_b_16.b1.best.json
$B dump /tmp/$m.onnx --section tasks --precision fp16 > "$OUT/tasks.txt"
force() {  # force CONFIG_JSON OUT: the log with every Attention task set to CONFIG_JSON
  python3 bench/probes/force_configs.py "$OUT/tasks.txt" "$1" "$2" --ops Attention --base "$LOG"
}
bench() {  # name log
  timeout 90 $B bench /tmp/$m.onnx --precision fp16 --batch 1 --tuning "$2" --per-layer > "$OUT/bench_$1.log" 2>&1
  note "$1: $(grep -E 'GPU time' "$OUT/bench_$1.log")  attention $(grep -E '\sAttention\s' "$OUT/bench_$1.log" | awk '{s+=$4} END {print s}') us"
}
bench committed "$LOG"
last=
for c in ${CONFIGS:-'{"kernel":"mma","block_q":32,"block_kv":64,"stages":2,"kv_split":2}' '{"kernel":"mma","block_q":16,"block_kv":64,"stages":1,"kv_split":2}' '{"kernel":"mma","block_q":16,"block_kv":32,"stages":2,"kv_split":4}'}; do
  name=$(echo "$c" | python3 -c "import json,sys; c=json.load(sys.stdin); print(f\"q{c['block_q']}k{c['block_kv']}s{c['stages']}x{c.get('kv_split',1)}\")")
  force "$c" "$OUT/$name.best.json" > /dev/null
  bench "$name" "$OUT/$name.best.json"
  last=$name
done
timeout 90 $B verify /tmp/$m.onnx --precision fp16 --batch 1 --tuning "$OUT/$last.best.json" > "$OUT/verify.log" 2>&1
note "verify $last rc=$?: $(grep -iE 'rel' "$OUT/verify.log" | tail -1)"

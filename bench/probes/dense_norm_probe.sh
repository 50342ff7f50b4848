#!/usr/bin/env bash
# Does the LayerNorm folded into the Dense that reads it (`--fuse-dense-norm`, RowNorm in
# conv_wgmma.cu) run correctly on the GPU, and make ViT-B/16 b1 fp16 faster? One call:
# `gpu_dense_templates` (its norm cases included); a 1-minute tune of the folded model, whose
# norm tasks' configs join the committed log (every other task keeps its committed config, so
# only the fold differs); `verify` of the folded model; `bench` of both, interleaved, the first
# round with per-layer profiles summed by op. Carry .device (prepare_device.sh: aotune,
# gpu_templates); about 4 minutes. The b64 run of the same steps: MODEL=vit_b_16_legacy BATCH=64
# LOG=models/vit_b_16.b64.best.json (the GPU test runs again; about 5 minutes).
set -u
touch /tmp/r50.onnx
. bench/device_env.sh
S=$OUT/summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
m=${MODEL:-vit_b_16_dynamo}
batch=${BATCH:-1}
L=${LOG:-models/vit_b_16.b1.best.json}
python3 bench/refill_fixture.py tests/fixtures/$m /tmp/$m.onnx > $OUT/refill.log 2>&1 &
AOTUNE_TEST_JOBS=8 timeout 120 .device/gpu_templates gpu_dense_templates --nocapture --test-threads=1 > $OUT/gt_dense.log 2>&1
rc=$?; note "gpu_dense_templates (row norm included) rc=$rc: $(grep -E "kernels checked" $OUT/gt_dense.log | tr "\n" " ")"
grep -E "dense_norm|panicked" $OUT/gt_dense.log | grep -iE "fail|panick|rel" | head -5
wait
[ $rc = 0 ] || exit 1
t0=$(date +%s)
timeout 120 $B tune /tmp/$m.onnx --precision fp16 --batch $batch --budget-minutes 1 --no-e2e --fuse-dense-norm \
  --log $OUT/fused.records.jsonl --best $OUT/fused.tuned.json > $OUT/tune_fused.log 2>&1
note "tune fused rc=$? $(( $(date +%s) - t0 )) s"
python3 - $L $OUT/fused.tuned.json $OUT/fused.best.json <<'PY'
import json, sys
base, tuned, out = sys.argv[1:]
b = json.load(open(base)); t = json.load(open(tuned))
norm = [r for r in t["records"] if "norm=" in r["key"]]
b["records"] = [r for r in b["records"] if "norm=" not in r["key"]] + norm
json.dump(b, open(out, "w"), indent=1)
print("norm tasks:", [(r["key"][:60], r["config"], round(r["median_us"], 2)) for r in norm])
PY
timeout 90 $B verify /tmp/$m.onnx --precision fp16 --batch $batch --fuse-dense-norm --tuning $OUT/fused.best.json > $OUT/verify_fused.log 2>&1
note "verify fused rc=$?: $(grep -iE 'rel' $OUT/verify_fused.log | tail -1)"
for v in plain fused plain2 fused2; do
  case $v in plain*) f=; l=$L;; *) f=--fuse-dense-norm; l=$OUT/fused.best.json;; esac
  pl=; [ ${#v} -le 5 ] && pl=--per-layer
  timeout 90 $B bench /tmp/$m.onnx --precision fp16 --batch $batch $f --tuning $l $pl > $OUT/bench_$v.log 2>&1
  note "bench $v: $(grep -E 'GPU time' $OUT/bench_$v.log)"
done
python3 - $OUT <<'PY' | tee -a $S
import collections, glob, re, sys
for f in [sys.argv[1] + "/bench_plain.log", sys.argv[1] + "/bench_fused.log"]:
    per = collections.defaultdict(float); n = 0
    for line in open(f):
        m = re.match(r"\s*\d+\s+\S+\s+(\S+)\s+([\d.]+)", line)
        if m and m.group(1)[0].isupper(): per[m.group(1)] += float(m.group(2)); n += 1
    print(f.split('/')[-1], n, "kernels", "  ".join(f"{k} {v:.0f}" for k, v in sorted(per.items())))
PY

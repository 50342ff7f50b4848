#!/usr/bin/env bash
# Is the warp-specialized, persistent wgmma GEMM (conv_wgmma_ws.cu; `warp_specialized`,
# `pingpong`) correct, and faster than the plain wgmma template on ViT-B/16's Dense layers at
# batch 64? One GPU call: the Dense GPU test (every template, WS and ping-pong variants
# included), then the TorchScript ViT-B/16 at b64 fp16 with the committed log and with one
# forced WS config on its four 12608-row Dense tasks (bench/probes/force_configs.py), per-layer
# profiles summed by op. `CONFIGS` (names below: w = one tile over two consumers, p/q = ping-pong
# 64- and 128-row tiles) picks the variants; `VERIFY=name` verifies one.
# Carry .device (prepare_device.sh: aotune, gpu_templates).
set -u
. "$(dirname "$0")/../device_env.sh"
S=$OUT/summary.txt; : > "$S"
note() { echo "$*" | tee -a "$S"; }
m=vit_b_16_legacy
[ -f /tmp/$m.onnx ] || python3 bench/refill_fixture.py tests/fixtures/$m /tmp/$m.onnx > "$OUT/refill.log" 2>&1 &
t0=$(date +%s)
AOTUNE_TEST_JOBS=8 timeout 200 .device/gpu_templates gpu_dense_templates --nocapture --test-threads=1 \
  > "$OUT/gpu_dense.log" 2>&1
rc=$?
note "gpu_dense_templates rc=$rc $(( $(date +%s) - t0 )) s: $(grep -E 'kernels checked' "$OUT/gpu_dense.log" | tr '\n' ' ')"
grep -E "rel L2|panicked" "$OUT/gpu_dense.log" | head -8
wait
[ "$rc" = 0 ] || { note "WS kernels failed their test: no timing"; exit 1; }
$B dump /tmp/$m.onnx --section tasks --batch 64 --precision fp16 > "$OUT/tasks.txt"
declare -A CFG=(
  [w256]='{"kernel":"wgmma","block_m":128,"block_n":256,"stages":4,"split_k":1,"epilogue":"direct","warp_specialized":true}'
  [w192]='{"kernel":"wgmma","block_m":128,"block_n":192,"stages":5,"split_k":1,"epilogue":"direct","warp_specialized":true}'
  [p256]='{"kernel":"wgmma","block_m":64,"block_n":256,"stages":4,"split_k":1,"epilogue":"direct","warp_specialized":true,"pingpong":true}'
  [p128]='{"kernel":"wgmma","block_m":64,"block_n":128,"stages":6,"split_k":1,"epilogue":"direct","warp_specialized":true,"pingpong":true}'
  [q128]='{"kernel":"wgmma","block_m":128,"block_n":128,"stages":4,"split_k":1,"epilogue":"direct","warp_specialized":true,"pingpong":true}'
)
bench() {  # name log
  timeout 90 $B bench /tmp/$m.onnx --precision fp16 --batch 64 --tuning "$2" --per-layer > "$OUT/bench_$1.log" 2>&1
  note "$1: $(grep -E 'GPU time' "$OUT/bench_$1.log")"
}
bench committed models/vit_b_16.b64.best.json
for c in ${CONFIGS:-q128 p256 w256}; do
  python3 bench/probes/force_configs.py "$OUT/tasks.txt" "${CFG[$c]}" "$OUT/$c.best.json" \
    --match 'in0=f16\[12608x' --base models/vit_b_16.b64.best.json > /dev/null
  bench "$c" "$OUT/$c.best.json"
done
if [ -n "${VERIFY:-}" ]; then
  timeout 90 $B verify /tmp/$m.onnx --precision fp16 --batch 64 --tuning "$OUT/$VERIFY.best.json" > "$OUT/verify.log" 2>&1
  note "verify $VERIFY rc=$?: $(grep -iE 'rel' "$OUT/verify.log" | tail -1)"
fi
python3 - "$OUT" <<'PY' | tee -a "$S"
import collections, glob, re, sys
for f in sorted(glob.glob(sys.argv[1] + "/bench_*.log")):
    per = collections.defaultdict(float)
    for line in open(f):
        m = re.match(r"\s*\d+\s+\S+\s+(Dense|Attention|LayerNormalization)\s+([\d.]+)", line)
        if m:
            per[m.group(1)] += float(m.group(2))
    print(f"{f.split('/')[-1][6:-4]:10}", "  ".join(f"{k} {v:.0f} us" for k, v in sorted(per.items())))
PY

#!/usr/bin/env bash
# Issue 23's families beyond the pinned fixtures, on the GPU machine: members no
# test pins (export_fixtures.py's FAMILY: ViT-B/32, ConvNeXt-S, Swin-S, Swin-V2-T
# by default; `_dynbatch` names the dynamo exporter with a dynamic batch,
# verified at batch 2), exported here by both of PyTorch's exporters with filled weights
# and ONNX Runtime's output, then checked two ways:
#  1. the CPU reference against ONNX Runtime (.device/fixtures, fixtures_in_dir:
#     fp32, rel. L2 <= 1e-4, same top-1);
#  2. `aotune verify` at each precision: the GPU against the CPU reference.
# Build here with `bash bench/prepare_device.sh` (it also copies the fixtures
# test binary). Env: FAMILY (names, each ARCH_dynamo or ARCH_legacy), JOBS
# (parallel exports, default 4), PRECISIONS (default "fp32 fp16"),
# VERIFY_TIMEOUT (s per verify, default 240). Logs under $OUT; a table last.
set -u
. "$(dirname "$0")/device_env.sh"
FAMILY=${FAMILY:-vit_b_32_dynamo vit_b_32_legacy convnext_small_dynamo convnext_small_legacy \
swin_s_dynamo swin_s_legacy swin_v2_t_dynamo swin_v2_t_legacy}
dir=/tmp/family
mkdir -p "$dir"
t0=$(date +%s)
# shellcheck disable=SC2086
printf '%s\n' $FAMILY | xargs -P "${JOBS:-4}" -I{} sh -c \
  "[ -f $dir/{}/meta.json ] || python3 bench/export_fixtures.py $dir {} > $OUT/export_{}.log 2>&1; tail -1 $OUT/export_{}.log"
echo "== exports done in $(( $(date +%s) - t0 )) s"
if [ -x .device/fixtures ]; then
  AOTUNE_FIXTURE_DIR=$dir timeout 300 .device/fixtures --ignored --nocapture fixtures_in_dir \
    > "$OUT/cpu_vs_ort.log" 2>&1
  echo "== CPU reference vs ONNX Runtime rc=$?"
  grep -E "^(PASS|FAIL)" "$OUT/cpu_vs_ort.log" | cut -c1-160
else
  echo "== .device/fixtures missing: CPU reference vs ONNX Runtime not run"
fi
pids=""
for m in $FAMILY; do
  [ -f "$dir/$m/meta.json" ] || { echo "== $m: no export (see export_$m.log)"; continue; }
  python3 bench/refill_fixture.py "$dir/$m" "/tmp/fam_$m.onnx" > /dev/null
  ( for p in ${PRECISIONS:-fp32 fp16}; do
      batch=""; case $m in *_dynbatch) batch="--batch 2";; esac
      # shellcheck disable=SC2086
      timeout "${VERIFY_TIMEOUT:-240}" $B verify "/tmp/fam_$m.onnx" --precision "$p" $batch \
        > "$OUT/verify_${m}_$p.log" 2>&1
      echo "$m $p rc=$? $(grep -E 'rel|top' "$OUT/verify_${m}_$p.log" | tail -2 | tr '\n' ' ')" \
        >> "$OUT/verify_summary.txt"
    done ) &
  pids="$pids $!"
done
# shellcheck disable=SC2086
[ -z "$pids" ] || wait $pids
echo "== GPU vs CPU reference ($(nvidia-smi --query-gpu=name --format=csv,noheader)), $(( $(date +%s) - t0 )) s"
sort "$OUT/verify_summary.txt" 2>/dev/null | cut -c1-200

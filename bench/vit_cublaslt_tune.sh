#!/usr/bin/env bash
# Issue 23 on the GPU machine: does `aotune tune --cublaslt-candidates` pick
# cuBLASLt where it wins? One call (~6 minutes), carrying `.device/aotune`
# and `.device/gpu_tuner_faults` (bash bench/prepare_device.sh builds both):
#   1. the measurer times a Dense task's cuBLASLt configs
#      (tests/gpu_tuner_faults.rs, gpu_measurer_times_cublaslt_candidates_of_a_dense_task);
#   2. per BATCH (default 64 1): a tune with --cublaslt-candidates into a copy
#      of the committed log models/vit_b_16.b<batch>.best.json (MINUTES, default
#      2), then `aotune bench` with the committed log, with the new one, and
#      with --dense-cublaslt, and PyTorch's fp16 CUDA graph, all in this call.
# b64 runs on the TorchScript fixture (symbolic batch), b1 on the dynamo one,
# as the committed logs were made. Writes $OUT/vit.b<batch>.cublaslt.best.json
# (commit it as models/vit_b_16.b<batch>.best.json if it wins) and a table last.
set -u
. "$(dirname "$0")/device_env.sh"
export AOTUNE_BIN=$PWD/.device/aotune
if [ -x .device/gpu_tuner_faults ]; then
  timeout 120 .device/gpu_tuner_faults gpu_measurer_times_cublaslt --nocapture --test-threads 1 \
    > "$OUT/measurer_cublaslt.log" 2>&1
  echo "== measurer test rc=$? $(grep -E '^test result' "$OUT/measurer_cublaslt.log")"
  grep -E "^config|panicked" "$OUT/measurer_cublaslt.log" | head -8
fi
rows=""
for batch in ${BATCH:-64 1}; do
  m=vit_b_16_dynamo; [ "$batch" = 1 ] || m=vit_b_16_legacy
  [ -f /tmp/$m.onnx ] || python3 bench/refill_fixture.py tests/fixtures/$m /tmp/$m.onnx >/dev/null
  committed=models/vit_b_16.b$batch.best.json
  best=$OUT/vit.b$batch.cublaslt.best.json
  cp "$committed" "$best" || { echo "== no $committed"; exit 2; }
  t0=$(date +%s)
  timeout 400 $B tune /tmp/$m.onnx --precision fp16 --batch $batch --cublaslt-candidates \
    --budget-minutes ${MINUTES:-2} --log "$OUT/vit.b$batch.cublaslt.records.jsonl" --best "$best" \
    > "$OUT/tune_b$batch.log" 2>&1
  echo "== tune b$batch rc=$? in $(( $(date +%s) - t0 )) s; $(grep -c cublaslt "$best") cuBLASLt record(s) in the log"
  for run in committed:"--tuning $committed" tuned:"--tuning $best" forced:"--tuning $committed --dense-cublaslt"; do
    name=${run%%:*}; flags=${run#*:}
    timeout 120 $B bench /tmp/$m.onnx --precision fp16 --batch $batch $flags --json \
      > "$OUT/bench_b${batch}_$name.log" 2>&1
    ms=$(sed -n 's/.*"median_ms":\([0-9.]*\).*/\1/p' "$OUT/bench_b${batch}_$name.log" | tail -1)
    rows="$rows\nb$batch $name ${ms:-failed}"
  done
done
timeout 150 python3 bench/pytorch_baseline.py --model vit_b_16 --batches 1,64 --impls graph --runs 100 \
  --out "$OUT/pytorch.jsonl" > "$OUT/pytorch.log" 2>&1
for b in 1 64; do
  ms=$(grep "\"precision\": \"fp16\", \"batch\": $b," "$OUT/pytorch.jsonl" | sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p')
  rows="$rows\nb$b pytorch-graph ${ms:-failed}"
done
echo "== ViT-B/16 fp16 ($(nvidia-smi --query-gpu=name --format=csv,noheader)), median ms"
printf "$rows\n" | column -t 2>/dev/null || printf "$rows\n"

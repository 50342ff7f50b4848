#!/usr/bin/env bash
# Issue 23 on the GPU machine: the transformer-era fixtures (tests/fixtures, weights
# refilled by their fill rule) verified against the CPU reference and timed, with
# PyTorch's baselines for the same torchvision models in the same call.
# Env: MODELS (fixture names, default the dynamo and TorchScript ViT-B/16, ConvNeXt-T,
# Swin-T), PRECISIONS (verify; default "fp32 fp16"), BENCH (model:batch list, default
# vit_b_16_dynamo:1 vit_b_16_dynamo:64 convnext_tiny_dynamo:1 swin_t_dynamo:1),
# PT_IMPLS (default "graph"; add "compile" for torch.compile max-autotune, minutes
# per model and batch), NO_PYTORCH=1, PER_LAYER=--per-layer (verify names the first
# layer that disagrees), TESTS (GPU test binaries of .device/ run in the background
# while the verifies run, each `binary` or `binary:filter`; they finish before any
# timing starts), BENCH_ARGS (extra `aotune bench` flags, e.g. --per-layer), TUNING.
# Logs under $OUT; a table last.
set -u
. "$(dirname "$0")/device_env.sh"
export AOTUNE_BIN=$PWD/.device/aotune AOTUNE_FIXTURE_PACK=$PWD/.device/fixture-pack
test_pids=""
for t in ${TESTS:-}; do
  bin=${t%%:*}; filter=""; [ "$bin" = "$t" ] || filter=${t#*:}
  log="$OUT/test_${bin}${filter:+_$filter}.log"
  ( timeout "${TEST_TIMEOUT:-400}" .device/$bin $filter --test-threads=1 > "$log" 2>&1
    echo "== test $bin ${filter} rc=$? skipped=$(grep -c '^SKIPPED' "$log") $(grep -E '^test result' "$log" | tail -1)"
    grep -E "^FAIL|FAILED|panicked|SKIPPED" "$log" | head -8 ) &
  test_pids="$test_pids $!"
done
MODELS=${MODELS:-vit_b_16_dynamo vit_b_16_legacy convnext_tiny_dynamo convnext_tiny_legacy swin_t_dynamo swin_t_legacy}
BENCH=${BENCH:-vit_b_16_dynamo:1 vit_b_16_dynamo:64 convnext_tiny_dynamo:1 swin_t_dynamo:1}
for m in $MODELS $(for mb in $BENCH; do echo ${mb%%:*}; done); do
  [ -f /tmp/$m.onnx ] || python3 bench/refill_fixture.py tests/fixtures/$m /tmp/$m.onnx
done
# One verify chain per model, the models side by side (the CPU reference and nvcc
# use the host's cores; correctness does not mind sharing the GPU).
verify_pids=""
for m in $MODELS; do
  ( for p in ${PRECISIONS:-fp32 fp16}; do
      timeout ${VERIFY_TIMEOUT:-300} $B verify /tmp/$m.onnx --precision $p ${PER_LAYER:-} > "$OUT/verify_${m}_$p.log" 2>&1
      rc=$?
      echo "== verify $m $p rc=$rc $(grep -E 'rel|top' "$OUT/verify_${m}_$p.log" | tail -2 | tr '\n' ' ')"
      [ $rc = 0 ] || grep -iE "error|first|caused" "$OUT/verify_${m}_$p.log" | head -5
    done ) &
  verify_pids="$verify_pids $!"
done
[ -z "$verify_pids" ] || wait $verify_pids
[ -z "$test_pids" ] || wait $test_pids
for mb in $BENCH; do
  m=${mb%%:*}; b=${mb##*:}
  timeout 300 $B bench /tmp/$m.onnx --precision fp16 --batch $b --json ${TUNING:+--tuning $TUNING} ${BENCH_ARGS:-} \
    > "$OUT/bench_${m}_b$b.log" 2>&1 || echo "== bench $m b$b failed: $(tail -3 "$OUT/bench_${m}_b$b.log")"
  grep "^{" "$OUT/bench_${m}_b$b.log" | sed "s/^{/{\"model\":\"$m\",/" >> "$OUT/bench.jsonl"
done
if [ -z "${NO_PYTORCH:-}" ]; then
  for tv in $(for mb in $BENCH; do echo ${mb%%:*}; done | sed 's/_dynamo\|_legacy//' | sort -u); do
    bs=$(for mb in $BENCH; do m=${mb%%:*}; [ "${m%_dynamo}" = $tv ] || [ "${m%_legacy}" = $tv ] && echo ${mb##*:}; done | sort -un | paste -sd,)
    python3 bench/pytorch_baseline.py --model $tv --batches $bs --impls ${PT_IMPLS:-graph} --runs 100 \
      --out "$OUT/pytorch.jsonl" > "$OUT/pytorch_$tv.log" 2>&1 || tail -3 "$OUT/pytorch_$tv.log"
  done
fi
echo "== timings ($(nvidia-smi --query-gpu=name --format=csv,noheader))"
python3 - "$OUT/bench.jsonl" "$OUT/pytorch.jsonl" <<'PY'
import json, sys, os
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    for l in open(path):
        r = json.loads(l)
        impl = r.get("impl", "aotune " + ("tuned" if r.get("tuning") else "default"))
        print(f"{r['model']:22} {impl:36} {r['precision']:5} b{r['batch']:<4} median {r['median_ms']:.4f} ms  {r['images_per_s']:.0f} img/s")
PY

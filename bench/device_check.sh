#!/usr/bin/env bash
# One GPU-machine call (binaries built here by bench/prepare_device.sh, carried
# in .device/). Modes, combinable: `tests` (every GPU test binary), `example`
# and `example-vit` (the include_model! binary against the CPU reference), `sass`
# (bench/sass_check.sh on the generated kernels), `check` (verify --per-layer),
# `bench` (aotune timings, with and without programmatic dependent launch, and
# PyTorch in the same call). Logs go to $OUT; a table is printed last.
# Env: PRECISIONS, BATCHES, PT_BATCHES, PER_LAYER=--per-layer, TUNING=<best.json>,
# LAUNCHES="auto pdl plain" (each check and bench once per --launch mode; default auto), SASS_SRC=<kernels.cu>,
# VERIFY_BATCH, NO_PYTORCH=1 (bench without the PyTorch baseline), TEST_TIMEOUT (s per
# test binary, default 300).
set -u
export AOTUNE_FIXTURE_PACK=$PWD/.device/fixture-pack
. "$(dirname "$0")/device_env.sh"
# compare_embedded LABEL MODEL APP INPUT TAG: the include_model! binary APP
# on INPUT against `aotune run` (the CPU emulation of the same precision).
compare_embedded() {
  local label=$1 model=$2 app=$3 input=$4 tag=$5
  $B run "$model" --precision fp16 --input "$input" --output "$OUT/${tag}_cpu.f32" > "$OUT/${tag}_cpu.log" 2>&1
  "$app" "$input" "$OUT/${tag}_gpu.f32" > "$OUT/${tag}_gpu.log" 2>&1; local rc=$?
  python3 - "$OUT/${tag}_gpu.f32" "$OUT/${tag}_cpu.f32" $rc "$label" <<'PY'
import sys, numpy as np
rc, label = int(sys.argv[3]), sys.argv[4]
try:
    g, c = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
    err = float(np.linalg.norm(g.astype(np.float64) - c) / np.linalg.norm(c))
    ok = rc == 0 and g.shape == c.shape and err <= 2e-3 and g.argmax() == c.argmax()
    print(f"== example (include_model!, {label}): {'PASS' if ok else 'FAIL'} rc={rc} rel. L2 vs CPU emulation {err:.3e} (bar 2e-3), top-1 {g.argmax()} vs {c.argmax()}")
except Exception as e:
    print(f"== example ({label}): FAIL rc={rc}: {e}")
PY
}
for MODE in "${@:-check}"; do
case $MODE in
tests)
  export AOTUNE_BIN=$PWD/.device/aotune   # the tuner-fault test starts its worker from it
  for t in ${TEST_BINARIES:-aotune-lib-tests gpu_runtime gpu_tuner_faults gpu_kernels gpu_movement gpu_norms gpu_attention gpu_input_dtype gpu_fixtures gpu_templates}; do
    [ -x .device/$t ] || continue
    timeout "${TEST_TIMEOUT:-300}" .device/$t --test-threads=1 > "$OUT/test_$t.log" 2>&1
    rc=$?
    [ $rc = 124 ] && echo "== $t: TIMED OUT after ${TEST_TIMEOUT:-300} s (TEST_TIMEOUT)"
    # AOTUNE_REQUIRE_GPU=1 (device_env.sh) makes every skip a failure, so
    # rc=0 with a nonzero pass count means every test ran and passed.
    summary=$(grep -E '^test result' "$OUT/test_$t.log" | tail -1)
    skips=$(grep -c '^SKIPPED' "$OUT/test_$t.log")
    verdict=PASS; { [ $rc != 0 ] || [ "$skips" != 0 ] || ! grep -qE ' [1-9][0-9]* passed' <<<"$summary"; } && verdict=FAIL
    echo "== $t: $verdict rc=$rc skipped=$skips $summary"
    grep -E "FAILED|panicked|SKIPPED" "$OUT/test_$t.log" | head -10
  done ;;
example)
  # include_model!'s embedded path (ResNet-18 fp16 b1, .device/embedded-app)
  # against the CPU emulation of the same precision, on one random image.
  [ -f /tmp/r18.onnx ] || $B zoo resnet18 -o /tmp/r18.onnx >/dev/null
  python3 -c "import numpy as np; np.random.default_rng(7).standard_normal((1,3,224,224), dtype=np.float32).tofile('/tmp/x18.f32')"
  compare_embedded "ResNet-18 fp16 b1" /tmp/r18.onnx .device/embedded-app /tmp/x18.f32 r18
  ;;
example-vit)
  # The same with the tiny ViT fixture (`make example-vit`, .device/embedded-vit)
  # on the fixture's own input.
  python3 bench/refill_fixture.py tests/fixtures/tiny_vit_dynamo /tmp/tiny_vit.onnx >/dev/null
  compare_embedded "tiny ViT fp16 b1" /tmp/tiny_vit.onnx .device/embedded-vit \
    tests/fixtures/tiny_vit_dynamo/input_b1.f32 tiny_vit
  ;;
sass)
  bash bench/sass_check.sh ${SASS_SRC:-generated/kernels.cu} > "$OUT/sass.log" 2>&1; echo "== sass_check rc=$?"; grep -E "wgmma|failing" "$OUT/sass.log" | tail -12 ;;
check)
  for p in ${PRECISIONS:-fp16 tf32}; do
    for launch in ${LAUNCHES:-auto}; do
      # --per-layer runs the launches one by one; the end-to-end line is the graph's.
      $B verify /tmp/r50.onnx --precision $p --batch ${VERIFY_BATCH:-1} --per-layer \
        ${TUNING:+--tuning $TUNING} --launch $launch > "$OUT/verify_${p}_$launch.log" 2>&1
      echo "== verify $p --launch $launch rc=$?"; grep -E "first|every|rel|error" "$OUT/verify_${p}_$launch.log" | tail -3
    done
  done ;;
bench)
  for p in ${PRECISIONS:-fp16 tf32 fp32}; do
    for b in ${BATCHES:-1}; do
      pl=${PER_LAYER:-}   # the per-layer profile once per (precision, batch)
      for launch in ${LAUNCHES:-auto}; do
        $B bench /tmp/r50.onnx --precision $p --batch $b --json ${TUNING:+--tuning $TUNING} \
          --launch $launch $pl > "$OUT/bench_${p}_b${b}_$launch${TUNING:+_tuned}.log" 2>&1
        grep "^{" "$OUT/bench_${p}_b${b}_$launch${TUNING:+_tuned}.log" >> "$OUT/bench.jsonl"
        pl=""
      done
    done
  done
  [ -n "${NO_PYTORCH:-}" ] || python3 bench/pytorch_baseline.py --batches ${PT_BATCHES:-1} --runs 100 \
    --out "$OUT/pytorch.jsonl" > "$OUT/pytorch.log" 2>&1
  echo "== aotune"; python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['precision']:5} b{r['batch']:<4} pdl={str(r.get('pdl')):5} {'tuned  ' if r.get('tuning') else 'default'} median {r['median_ms']:.4f} ms  p90 {r['p90_ms']:.4f}  {r['images_per_s']:.0f} img/s")
PY
  [ -n "${NO_PYTORCH:-}" ] || { echo "== PyTorch"; tail -8 "$OUT/pytorch.log"; } ;;
esac
done

#!/usr/bin/env bash
# Several `bench/serve_gpu.sh` runs in one GPU-machine call, one per serving
# configuration, so that their figures share a card, a call and one `aotune
# bench` (the first run's; REUSE_BENCH for the others). Needs the binaries of
# `bash bench/prepare_device.sh serve` (carry .device). Each run's report is
# $OUT/sweep_<n>.log, its metrics $OUT/metrics_<n>.txt and its load result
# $OUT/serve_load_<n>.json; a table of every run is printed last.
#
# SWEEP: one configuration per line, as environment assignments for
# serve_gpu.sh (INSTANCES, BATCH_SIZES, GPU_WAIT, MAX_QUEUE_DELAY_US, ...).
# The default runs serve_gpu.sh's settings (4 instances, compiled sizes between
# the powers of two, the server's defaults: executors that sleep, the arrival
# copy into pinned rows), then 2 and 3 instances, a 1 ms queue delay, and the
# arrival copy off (PINNED_ROWS=0) for comparison.
# WARMUP_SECONDS and LOAD_SECONDS default to 3 and 10 here.
#   bash bench/serve_sweep.sh
#   SWEEP=$'INSTANCES=2\nINSTANCES=4' bash bench/serve_sweep.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SWEEP=${SWEEP:-"INSTANCES=4
INSTANCES=2
INSTANCES=3
INSTANCES=4 MAX_QUEUE_DELAY_US=1000
INSTANCES=4 PINNED_ROWS=0"}
export WARMUP_SECONDS=${WARMUP_SECONDS:-3} LOAD_SECONDS=${LOAD_SECONDS:-10}
rm -f "$OUT"/bench.log
n=0
while IFS= read -r config; do
  [ -n "$config" ] || continue
  n=$((n + 1))
  reuse=""
  [ $n -gt 1 ] && reuse="REUSE_BENCH=1"
  echo "== sweep run $n: $config ($(date +%T))"
  eval "env $config $reuse bash bench/serve_gpu.sh" > "$OUT/sweep_$n.log" 2>&1
  grep -E "^== (server|per batch|cpu|gpu)|^ +[0-9]+ " "$OUT/sweep_$n.log"
  cp "$OUT/metrics.txt" "$OUT/metrics_$n.txt" 2>/dev/null
  cp "$OUT/serve_load.json" "$OUT/serve_load_$n.json" 2>/dev/null
done <<< "$SWEEP"

# The table: one row per run.
python3 - "$OUT" "$n" <<'PY'
import json, re, sys
out, runs = sys.argv[1], int(sys.argv[2])
def metric(text, name, label=""):
    found = re.findall(rf'^{name}{{(?=[^}}]*model="resnet50")(?=[^}}]*{label})[^}}]*}} ([0-9.e+-]+)$', text, re.M)
    return sum(float(v) for v in found) if found else float("nan")
print(f"{'run':>3} {'img/s':>7} {'p50':>6} {'p99':>6} {'ratio':>6} {'batch':>5} {'pad%':>5} "
      f"{'recv':>5} {'queue':>5} {'hand':>5} {'server':>6} {'gather':>6} {'turn':>5} {'kernels':>7} {'cpu':>5} {'gpu%':>4}  config")
for i in range(1, runs + 1):
    try:
        load = json.loads(open(f"{out}/serve_load_{i}.json").read().strip().splitlines()[-1])
        text = open(f"{out}/metrics_{i}.txt").read()
        log = open(f"{out}/sweep_{i}.log").read()
    except Exception as e:
        print(f"{i:>3} (no result: {e})")
        continue
    rows = metric(text, "aotune_batch_size_sum")
    batches = metric(text, "aotune_batch_size_count")
    pad = metric(text, "aotune_batch_padding_rows_total")
    gather = metric(text, "aotune_gather_duration_seconds_sum") / batches * 1e3
    kernels = (metric(text, "aotune_device_duration_seconds_sum", 'stage="kernels"') / batches * 1e3)
    # Waiting for earlier batches' kernels (concurrent_kernels); nan before that stage existed.
    turn = (metric(text, "aotune_device_duration_seconds_sum", 'stage="turn_wait"') / batches * 1e3)
    # Mean ms a piece waited in the queue, and a request spent in the server.
    queue = (metric(text, "aotune_queue_duration_seconds_sum")
             / metric(text, "aotune_queue_duration_seconds_count") * 1e3)
    server = (metric(text, "aotune_request_duration_seconds_sum", 'protocol="grpc"')
              / metric(text, "aotune_request_duration_seconds_count", 'protocol="grpc"') * 1e3)
    def mean_ms(name, label=""):
        return (metric(text, f"{name}_sum", label) / metric(text, f"{name}_count", label) * 1e3)
    # Headers to message decoded, and executor's answer to handler resumed.
    recv = mean_ms("aotune_receive_duration_seconds", 'protocol="grpc"')
    hand = mean_ms("aotune_handoff_duration_seconds")
    ratio = re.search(r"^ +\d+ +[0-9.]+ +[0-9.]+ +\d+ +([0-9.]+)%", log, re.M)
    cpu = re.search(r"([0-9.]+) of \d+ cores busy", log)
    gpu = re.search(r"mean (\d+)%", log)
    config = re.search(r"^== serve_gpu: .* config (.*)$", log, re.M)
    print(f"{i:>3} {load['images_per_s']:>7.0f} {load['p50_ms']:>6.2f} {load['p99_ms']:>6.2f} "
          f"{(ratio.group(1) + '%') if ratio else '-':>6} {rows / batches:>5.1f} "
          f"{100 * pad / (rows + pad):>5.1f} {recv:>5.2f} {queue:>5.2f} {hand:>5.2f} {server:>6.2f} {gather:>6.2f} {turn:>5.2f} {kernels:>7.2f} "
          f"{cpu.group(1) if cpu else '-':>5} {gpu.group(1) if gpu else '-':>4}  "
          f"{config.group(1) if config else ''}")
PY

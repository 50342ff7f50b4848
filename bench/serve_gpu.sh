#!/usr/bin/env bash
# `aotune serve` against `aotune bench` on the same card. Issue 24's bar:
# ResNet-50 fp16 over gRPC, raw tensors, one image per request at concurrency
# 64, reaches at least 85% of the images/s of `aotune bench --batch 64`, with
# its p99 latency reported. Build here with `bash bench/prepare_device.sh serve`
# (the serve-enabled CLI and the load client in .device/), then on the GPU
# machine, carrying .device:
#   bash bench/serve_gpu.sh
# Steps:
#  1. a model repository: resnet50/model.onnx (the zoo ResNet-50),
#     tuning.json (models/resnet50.best.json), and config.json (PRECISION,
#     BATCH_SIZES, INSTANCES, MAX_QUEUE_DELAY_US, INPUT_DATATYPE: FP16 by
#     default, so clients send f16 and the model is built with an f16 input;
#     FP32 measures the f32 input path);
#  2. `aotune serve` on it, on loopback. The first start builds every batch
#     size with nvcc into $AOTUNE_CACHE, which takes minutes; a later start on
#     the same machine reuses the builds;
#  3. the load client (.device/serve_grpc_load): CONCURRENCY clients with
#     one image per request, WARMUP_SECONDS, then LOAD_SECONDS measured;
#  4. the server's metrics (mean batch, compute time per batch), then SIGTERM;
#  5. `aotune bench` at BENCH_BATCH with the same model, precision and tuning
#     log;
#  6. a table: server images/s, p50, p99, bench images/s, and the ratio.
# Logs and JSON lines go to $OUT (serve_load.json, serve.log, bench.log,
# metrics.txt).
# DRY_RUN=1 runs the same steps without a GPU, on the CPU reference, with small
# sizes (ResNet-18, batch sizes 1 and 4, concurrency 4, a few seconds). It
# checks the script end to end on the CPU machine; its numbers mean nothing.
# It forces INPUT_DATATYPE=FP32: the CPU reference takes FP32 only (an FP16
# config needs the GPU backend, else the model is not ready).
# Env: MODEL, TUNING (empty: none), PRECISION, BATCH_SIZES, INSTANCES,
# MAX_QUEUE_DELAY_US, CONCURRENT_BATCHES and CONCURRENT_KERNELS (unset: 2 and 1, the best
# measured; empty: the server's default, every instance), FILL_WHILE_GPU_BUSY (unset: true where CONCURRENT_KERNELS is 1,
# the best measured; empty: the server's default, off),
# INPUT_DATATYPE (FP16 | FP32), GPU_WAIT (spin | block; unset: the
# server's default), PINNED_ROWS (the arrival copy's pinned buffers; 0: off; unset: the default), REUSE_BENCH, CONCURRENCY, EXTRA_CONCURRENCY (more load runs on the same
# server, e.g. "128 256", reported below the bar's row), CONNECTIONS, LOAD_SECONDS, WARMUP_SECONDS,
# BENCH_BATCH, READY_TIMEOUT (s), B (the CLI), LOAD (the load client), PERF_ANALYZER (Triton's
# perf_analyzer, run on the same server after the measured load: bench/fetch_perf_analyzer.sh).
set -u
cd "$(dirname "$0")/.."
. bench/device_env.sh
LOAD=${LOAD:-.device/serve_grpc_load}
if [ -n "${DRY_RUN:-}" ]; then
  [ -f /tmp/r18.onnx ] || $B zoo resnet18 -o /tmp/r18.onnx >/dev/null
  MODEL=${MODEL:-/tmp/r18.onnx} BATCH_SIZES=${BATCH_SIZES:-1 4} CONCURRENCY=${CONCURRENCY:-4}
  LOAD_SECONDS=${LOAD_SECONDS:-6} WARMUP_SECONDS=${WARMUP_SECONDS:-2} BENCH_BATCH=${BENCH_BATCH:-4}
  TUNING=${TUNING-}
  INPUT_DATATYPE=FP32
fi
MODEL=${MODEL:-/tmp/r50.onnx}
TUNING=${TUNING-models/resnet50.best.json}
PRECISION=${PRECISION:-fp16}
BATCH_SIZES=${BATCH_SIZES:-1 2 4 8 12 16 24 32}
INSTANCES=${INSTANCES:-4}
MAX_QUEUE_DELAY_US=${MAX_QUEUE_DELAY_US:-500}
CONCURRENCY=${CONCURRENCY:-64}
LOAD_SECONDS=${LOAD_SECONDS:-30}
WARMUP_SECONDS=${WARMUP_SECONDS:-10}
BENCH_BATCH=${BENCH_BATCH:-64}
READY_TIMEOUT=${READY_TIMEOUT:-1800}
INPUT_DATATYPE=${INPUT_DATATYPE:-FP16}
GPU_WAIT=${GPU_WAIT:-}
PINNED_ROWS=${PINNED_ROWS:-}
# The best measured settings (BENCHMARKS.md "Kernel turns and batch slots": 2 slots, 1 turn)
# where the instances allow them; set either to "" for the server's default (every instance).
CONCURRENT_BATCHES=${CONCURRENT_BATCHES-$((INSTANCES < 2 ? INSTANCES : 2))}
CONCURRENT_KERNELS=${CONCURRENT_KERNELS-1}
# Measured +6% over the same settings without it (BENCHMARKS.md "Filling batches while the GPU is busy").
FILL_WHILE_GPU_BUSY=${FILL_WHILE_GPU_BUSY-$([ "$CONCURRENT_KERNELS" = 1 ] && echo true)}

if ! $B serve --help >/dev/null 2>&1 || [ ! -x "$LOAD" ]; then
  echo "== serve_gpu: $B has no \`serve\` or $LOAD is missing: run \`bash bench/prepare_device.sh serve\` first"
  exit 2
fi

rm -f "$OUT"/serve_load_c*.json

# 1. The model repository.
repo=$(mktemp -d /tmp/serve-bench.XXXXXX)/repo
mkdir -p "$repo/resnet50"
ln -s "$(realpath "$MODEL")" "$repo/resnet50/model.onnx"
[ -n "$TUNING" ] && cp "$TUNING" "$repo/resnet50/tuning.json"
sizes=$(echo $BATCH_SIZES | tr ' ' ',')
queue=$((CONCURRENCY * 4 > 1024 ? CONCURRENCY * 4 : 1024))
optional=""
[ -n "$GPU_WAIT" ] && optional+=", \"gpu_wait\": \"$GPU_WAIT\""
[ -n "$PINNED_ROWS" ] && optional+=", \"pinned_rows\": $PINNED_ROWS"
[ -n "$CONCURRENT_BATCHES" ] && optional+=", \"concurrent_batches\": $CONCURRENT_BATCHES"
[ -n "$CONCURRENT_KERNELS" ] && optional+=", \"concurrent_kernels\": $CONCURRENT_KERNELS"
[ -n "$FILL_WHILE_GPU_BUSY" ] && optional+=", \"fill_while_gpu_busy\": $FILL_WHILE_GPU_BUSY"
cat > "$repo/resnet50/config.json" <<EOF
{"precision": "$PRECISION", "batch_sizes": [$sizes], "instances": $INSTANCES,
 "max_queue_delay_us": $MAX_QUEUE_DELAY_US, "queue_capacity": $queue, "timeout_ms": 60000,
 "input_datatype": "$INPUT_DATATYPE"$optional}
EOF
echo "== serve_gpu: $MODEL ${TUNING:+tuning $TUNING }config $(tr -d '\n' < "$repo/resnet50/config.json")"

# 2. The server, on free loopback ports; its first stdout line names them.
AOTUNE_LOG=info $B serve --model-repository "$repo" --address 127.0.0.1 \
  --http-port 0 --grpc-port 0 --metrics-port 0 > "$OUT/serve.stdout" 2> "$OUT/serve.log" &
server=$!
# Sets serve_rc to the server's exit code.
stop_server() {
  kill -TERM $server 2>/dev/null
  for _ in $(seq 600); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
  kill -0 $server 2>/dev/null && { echo "== serve_gpu: the server ignored SIGTERM for 60 s"; kill -KILL $server; }
  wait $server 2>/dev/null; serve_rc=$?
}
for _ in $(seq 300); do grep -q '^aotune serve: HTTP' "$OUT/serve.stdout" && break; sleep 0.1; done
read -r _ _ _ http _ grpc _ metrics < <(grep '^aotune serve: HTTP' "$OUT/serve.stdout") || {
  echo "== serve_gpu: the server did not start:"; tail -20 "$OUT/serve.log"; stop_server; exit 1; }

# 3. The load (it waits for the model: the first start compiles). A sampler
# records the machine's, the server's and the load client's CPU ticks every
# second (cpu.txt): the table's CPU line covers the measured window.
( while kill -0 $server 2>/dev/null; do
    client=$(pgrep -n -f "$LOAD --url" 2>/dev/null)
    echo "$(date +%s.%N) $(head -1 /proc/stat | cut -d' ' -f3-) | $(cut -d' ' -f14,15 /proc/$server/stat 2>/dev/null) | $( [ -n "$client" ] && cut -d' ' -f14,15 /proc/$client/stat 2>/dev/null)"
    sleep 1
  done ) > "$OUT/cpu.txt" 2>/dev/null &
sampler=$!
# GPU utilization (the share of time a kernel ran) every 100 ms, for the
# table's GPU line.
( nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 100 \
    > "$OUT/gpu_util.txt" 2>/dev/null ) &
gpu_sampler=$!
t0=$(date +%s)
"$LOAD" --url "http://$grpc" --model resnet50 --concurrency "$CONCURRENCY" \
  ${CONNECTIONS:+--connections $CONNECTIONS} --batch-per-request 1 \
  --warmup-seconds "$WARMUP_SECONDS" --seconds "$LOAD_SECONDS" --wait-ready-seconds "$READY_TIMEOUT" \
  > "$OUT/serve_load.json" 2> "$OUT/serve_load.log"
load_rc=$?
load_end=$(date +%s.%N)
echo "== serve_gpu: load client rc=$load_rc after $(( $(date +%s) - t0 )) s (model load included)"
[ $load_rc = 0 ] || tail -5 "$OUT/serve_load.log"
# The same server under other concurrencies (EXTRA_CONCURRENCY): a closed
# loop's throughput is concurrency / latency, so more clients show how much
# the server itself can serve. Not the bar.
for c in ${EXTRA_CONCURRENCY:-}; do
  "$LOAD" --url "http://$grpc" --model resnet50 --concurrency "$c" --batch-per-request 1 \
    --warmup-seconds "$WARMUP_SECONDS" --seconds "$LOAD_SECONDS" --wait-ready-seconds 60 \
    > "$OUT/serve_load_c$c.json" 2> "$OUT/serve_load_c$c.log"
  echo "== serve_gpu: load client at concurrency $c rc=$?"
done
sed 's/\x1b\[[0-9;]*m//g' "$OUT/serve.log" | grep -E "WARN|ERROR|model ready" | tail -5

# 4. The server's view, then a clean stop.
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://$metrics/metrics').read().decode())" \
  > "$OUT/metrics.txt" 2>/dev/null
# Triton's own load generator on the same server, after the metrics above were
# read (PERF_ANALYZER: its path, from bench/fetch_perf_analyzer.sh): the bar's
# load as the official client makes it, one image per request over gRPC.
if [ -n "${PERF_ANALYZER:-}" ]; then
  LD_LIBRARY_PATH="$(dirname "$PERF_ANALYZER"):${LD_LIBRARY_PATH:-}" "$PERF_ANALYZER" \
    -m resnet50 -u "$grpc" -i grpc -b 1 --concurrency-range "$CONCURRENCY" \
    --measurement-interval 5000 --max-trials 6 > "$OUT/perf_analyzer.log" 2>&1
  echo "== perf_analyzer: rc=$? at concurrency $CONCURRENCY (5 s windows until stable; $OUT/perf_analyzer.log)"
  grep -E "^ +(Throughput|p50 latency|p99 latency|Avg request latency)" "$OUT/perf_analyzer.log"
fi
stop_server
kill $sampler $gpu_sampler 2>/dev/null; wait $sampler $gpu_sampler 2>/dev/null
echo "== serve_gpu: server exit code $serve_rc (0: clean stop on SIGTERM)"

# 5. The bench on the same card, model, precision and tuning log (REUSE_BENCH=1
# keeps the bench.log of an earlier run in the same call).
if [ -n "${REUSE_BENCH:-}" ] && grep -q '^{' "$OUT/bench.log" 2>/dev/null; then
  echo "== serve_gpu: aotune bench of the earlier run reused"
else
  $B bench "$MODEL" --batch "$BENCH_BATCH" --precision "$PRECISION" ${TUNING:+--tuning "$TUNING"} --json \
    > "$OUT/bench.log" 2>&1
  echo "== serve_gpu: aotune bench rc=$?"
fi
rm -rf "$(dirname "$repo")"

# 6. The table.
python3 - "$OUT/serve_load.json" "$OUT/bench.log" "$OUT/metrics.txt" "$BENCH_BATCH" "${DRY_RUN:-}" \
  "$OUT/cpu.txt" "$load_end" "$LOAD_SECONDS" "$(getconf CLK_TCK)" "$(nproc)" "$OUT/gpu_util.txt" <<'PY'
import json, re, sys, datetime
load_path, bench_path, metrics_path, bench_batch, dry_run = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
cpu_path, load_end, load_seconds, hz, cores = sys.argv[6], float(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9]), int(sys.argv[10])
gpu_path = sys.argv[11]
def gpu_line():
    # nvidia-smi samples inside the measured window (local time stamps).
    values = []
    try:
        for line in open(gpu_path):
            stamp, util = [f.strip() for f in line.split(",")]
            t = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
            if load_end - load_seconds <= t <= load_end:
                values.append(float(util))
    except (OSError, ValueError):
        pass
    if not values:
        return "== gpu: no utilization samples in the measured window"
    return f"== gpu utilization over the measured window: mean {sum(values) / len(values):.0f}% ({len(values)} samples)"
def cpu_line():
    # Samples inside the measured window: machine busy/total ticks, server ticks.
    rows = []
    for line in open(cpu_path):
        try:
            t, rest = line.split(" ", 1)
            machine, server, client = (rest.split("|") + [""])[:3]
            f = [int(x) for x in machine.split()]
            busy, total = sum(f) - f[3] - f[4], sum(f[:8])
            srv = sum(int(x) for x in server.split())
            cli = sum(int(x) for x in client.split()) if client.split() else None
            rows.append((float(t), busy, total, srv, cli))
        except ValueError:
            continue
    w = [r for r in rows if load_end - load_seconds <= r[0] <= load_end]
    if len(w) < 2:
        return "== cpu: too few samples in the measured window"
    (t0, b0, n0, s0, c0), (t1, b1, n1, s1, c1) = w[0], w[-1]
    machine = (b1 - b0) / (n1 - n0) * cores
    server = (s1 - s0) / hz / (t1 - t0)
    if c0 is None or c1 is None:
        return (f"== cpu over {t1 - t0:.0f} s of the measured window: {machine:.1f} of {cores} cores busy; "
                f"the server {server:.1f}, everything else (the load client, the kernel) {machine - server:.1f}")
    client = (c1 - c0) / hz / (t1 - t0)
    return (f"== cpu over {t1 - t0:.0f} s of the measured window: {machine:.1f} of {cores} cores busy; "
            f"the server {server:.1f}, the load client {client:.1f}, everything else (the kernel's "
            f"network work, other processes) {machine - server - client:.1f}")
try:
    load = json.loads(open(load_path).read().strip().splitlines()[-1])
except Exception as e:
    sys.exit(f"== serve_gpu: no load result ({e}); see serve_load.log and serve.log")
bench, bench_note = None, ""
for line in open(bench_path):
    if line.startswith("{"):
        r = json.loads(line)
        bench, bench_note = r["images_per_s"], f"GPU median {r['median_ms']:.3f} ms at batch {r['batch']} on {r['gpu']}"
    m = re.match(r"CPU reference: median ([0-9.]+) ms", line)
    if m:  # no GPU: the CPU reference's median, at the same batch
        bench, bench_note = bench_batch / float(m.group(1)) * 1e3, f"CPU reference, median {m.group(1)} ms at batch {bench_batch}"
metrics = open(metrics_path).read() if metrics_path else ""
def metric(name, label=""):
    # Summed over the other labels (the request histogram's protocol);
    # `label` (e.g. 'stage="kernels"') picks one series.
    found = re.findall(rf'^{name}{{(?=[^}}]*model="resnet50")(?=[^}}]*{label})[^}}]*}} ([0-9.e+-]+)$', metrics, re.M)
    return sum(float(v) for v in found) if found else float("nan")
def mean_ms(name, label=""):
    n = metric(name + "_count", label)
    return metric(name + "_sum", label) / n * 1e3 if n else float("nan")
batches = metric("aotune_batch_size_count")
mean_batch = metric("aotune_batch_size_sum") / batches if batches else float("nan")
compute_ms = metric("aotune_compute_duration_seconds_sum") / batches * 1e3 if batches else float("nan")
gather_ms = metric("aotune_gather_duration_seconds_sum") / batches * 1e3 if batches else float("nan")
requests = metric("aotune_request_duration_seconds_count")
request_ms = metric("aotune_request_duration_seconds_sum") / requests * 1e3 if requests else float("nan")
queued = metric("aotune_queue_duration_seconds_count")
queue_ms = metric("aotune_queue_duration_seconds_sum") / queued * 1e3 if queued else float("nan")
print(f"== server: {load['requests']} requests in {load['seconds']} s at concurrency {load['concurrency']} "
      f"({load['connections']} connections), {load['errors']} errors; mean batch {mean_batch:.1f}, "
      f"compute {compute_ms:.2f} ms per batch of which gather {gather_ms:.2f}; per request "
      f"{request_ms:.2f} ms receipt to response, {queue_ms:.2f} ms queued (whole run)")
stages = " + ".join("%s %.3f" % (stage, mean_ms("aotune_device_duration_seconds", 'stage="%s"' % stage))
                   for stage in ("input", "kernels", "output"))
print(f"== per batch on the device (CUDA events, ms): {stages}; per request (ms): receive "
      f"{mean_ms('aotune_receive_duration_seconds'):.3f} (headers to decoded), handoff "
      f"{mean_ms('aotune_handoff_duration_seconds'):.3f} (answered to handler resumed)")
print(f"== bench: {bench_note}")
ratio = load["images_per_s"] / bench if bench else float("nan")
print(f"{'server img/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'bench img/s':>12} {'ratio':>7}")
print(f"{load['images_per_s']:>13.0f} {load['p50_ms']:>8.2f} {load['p99_ms']:>8.2f} "
      f"{bench if bench else float('nan'):>12.0f} {ratio:>7.1%}")
print(cpu_line())
print(gpu_line())
import glob, os
for path in sorted(glob.glob(os.path.join(os.path.dirname(load_path), "serve_load_c*.json")),
                   key=lambda p: int(re.search(r"_c(\d+)\.json$", p).group(1))):
    try:
        extra = json.loads(open(path).read().strip().splitlines()[-1])
    except Exception:
        continue
    print(f"{extra['images_per_s']:>13.0f} {extra['p50_ms']:>8.2f} {extra['p99_ms']:>8.2f} "
          f"{'':>12} {extra['images_per_s'] / bench if bench else float('nan'):>7.1%}"
          f"  at concurrency {extra['concurrency']} ({extra['errors']} errors; not the bar)")
if dry_run:
    print("== dry run (CPU reference, small sizes): the script works end to end; the numbers mean nothing")
else:
    print(f"== bar (>= 85% of bench): {'PASS' if ratio >= 0.85 and load['errors'] == 0 else 'FAIL'}")
PY

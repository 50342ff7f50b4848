"""A smoke check of `aotune serve` on a GPU machine, with the standard library
and numpy only (no tritonclient needed there).

    aotune run model.onnx --batch 32 --input x.f32 --output y.f32   # CPU reference
    aotune serve --model-repository repo &                          # GPU backend
    python3 examples/serving/gpu_check.py --model resnet18 --x x.f32 --y y.f32

1. 32 concurrent clients each send one image (HTTP binary tensors); each answer
   must be within the precision's bar (relative L2 1e-2 for fp16) of the CPU
   reference's row for that image, and closer to it than to any other row;
   the mean batch size from /metrics is printed.
2. `--seconds` at concurrency `--concurrency`: p50/p99 latency and requests/s,
   0 errors required.
"""

import argparse
import concurrent.futures as cf
import json
import time
import urllib.request

import numpy as np


def infer(http, model, x):
    header = json.dumps({
        "inputs": [{"name": "input", "shape": [1, *x.shape], "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
    }).encode()
    req = urllib.request.Request(
        f"http://{http}/v2/models/{model}/infer", data=header + x.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(header))})
    with urllib.request.urlopen(req, timeout=120) as r:
        n = int(r.headers["Inference-Header-Content-Length"])
        body = r.read()
    return np.frombuffer(body[n:], dtype="<f4")


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--http", default="127.0.0.1:8000")
    p.add_argument("--metrics", default="127.0.0.1:8002")
    p.add_argument("--model", required=True)
    p.add_argument("--x", required=True)
    p.add_argument("--y", required=True)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--tolerance", type=float, default=1e-2)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--concurrency", type=int, default=64)
    a = p.parse_args()
    x = np.fromfile(a.x, dtype="<f4").reshape(a.n, 3, 224, 224)
    y = np.fromfile(a.y, dtype="<f4").reshape(a.n, -1)

    with cf.ThreadPoolExecutor(a.n) as pool:
        got = list(pool.map(lambda i: infer(a.http, a.model, x[i]), range(a.n)))
    worst = 0.0
    for i, g in enumerate(got):
        errors = [rel_l2(g, y[j]) for j in range(a.n)]
        worst = max(worst, errors[i])
        assert errors[i] <= a.tolerance, f"client {i}: rel L2 {errors[i]:.2e}"
        assert int(np.argmin(errors)) == i, f"client {i} is closest to row {np.argmin(errors)}"
    metrics = urllib.request.urlopen(f"http://{a.metrics}/metrics").read().decode()
    value = lambda key: float(next(l.split()[-1] for l in metrics.splitlines()
                                   if l.startswith(key + "{") and f'model="{a.model}"' in l))
    print(f"{a.n} concurrent clients: each within rel L2 {worst:.2e} of its CPU reference row; "
          f"mean batch {value('aotune_batch_size_sum') / value('aotune_batch_size_count'):.1f}")

    deadline = time.monotonic() + a.seconds

    def client(k):
        lat = []
        while time.monotonic() < deadline:
            t = time.perf_counter()
            infer(a.http, a.model, x[k % a.n])
            lat.append((time.perf_counter() - t) * 1e3)
        return lat

    start = time.monotonic()
    with cf.ThreadPoolExecutor(a.concurrency) as pool:
        lat = sorted(l for ls in pool.map(client, range(a.concurrency)) for l in ls)
    elapsed = time.monotonic() - start
    print(f"load {a.seconds:.0f} s at concurrency {a.concurrency}: {len(lat)} requests, 0 errors, "
          f"p50 {lat[len(lat) // 2]:.2f} ms, p99 {lat[int(len(lat) * 0.99)]:.2f} ms, "
          f"{len(lat) / elapsed:.0f} req/s")


if __name__ == "__main__":
    main()

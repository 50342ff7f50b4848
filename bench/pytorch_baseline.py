#!/usr/bin/env python3
"""PyTorch baselines for BENCHMARKS.md, measured on the same GPU in the same call as aotune.

torchvision ResNet-50 (random weights, eval mode), input 3x224x224:
  - eager fp32 (as in the seed article; TF32 off),
  - tf32 with CUDA graphs,
  - fp16 channels_last with CUDA graphs (cuDNN folds nothing: BatchNorm runs as its own kernels).
Timing: CUDA events around each replay after warm-up; median of many runs.
Prints one JSON line per measurement and a table last.
"""
import argparse, json, statistics, sys
import torch, torchvision


def build(precision, channels_last):
    m = torchvision.models.resnet50(weights=None).eval().cuda()
    if precision == "fp16":
        m = m.half()
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    return m


def time_ms(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), sorted(times)[int(0.9 * (len(times) - 1))]


def measure(name, precision, batch, graphs, channels_last, runs):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    m = build(precision, channels_last)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with torch.inference_mode():
        if graphs:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    m(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = m(x)
            fn = g.replay
        else:
            fn = lambda: m(x)
        med, p90 = time_ms(fn, 20, runs)
    row = {"impl": name, "precision": precision, "batch": batch, "median_ms": med, "p90_ms": p90,
           "images_per_s": batch / med * 1e3, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        runs = a.runs if b <= 64 else max(20, a.runs // 4)
        rows.append(measure("pytorch eager", "fp32", b, False, False, runs))
        rows.append(measure("pytorch cuda-graph", "tf32", b, True, False, runs))
        rows.append(measure("pytorch cl+cuda-graph", "fp16", b, True, True, runs))
    if a.out:
        with open(a.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"{'impl':24} {'prec':5} {'batch':>5} {'median ms':>10} {'p90 ms':>8} {'img/s':>9}")
    for r in rows:
        print(f"{r['impl']:24} {r['precision']:5} {r['batch']:>5} {r['median_ms']:>10.3f} {r['p90_ms']:>8.3f} {r['images_per_s']:>9.0f}")


if __name__ == "__main__":
    sys.exit(main())

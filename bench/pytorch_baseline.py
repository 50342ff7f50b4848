#!/usr/bin/env python3
"""PyTorch baselines for BENCHMARKS.md, measured on the same GPU in the same call as aotune.

A torchvision model (random weights, eval mode, `--model`, default resnet50), input 3x224x224,
in the implementations `--impls` names:
  - `eager`: eager fp32 (as in the seed article; TF32 off),
  - `graph`: tf32 with CUDA graphs, and fp16 with CUDA graphs (channels_last for CNNs;
    cuDNN folds nothing: BatchNorm runs as its own kernels),
  - `compile`: fp16 `torch.compile(mode="max-autotune")` with weight freezing
    (`torch._inductor.config.freezing`), PyTorch's strongest inference mode; its autotuning
    takes minutes per (model, batch).
Timing: CUDA events around each call or replay after warm-up; median of many runs.
Prints one JSON line per measurement and a table last.
"""
import argparse, json, statistics, sys, time
import torch, torchvision

CNNS = ("resnet", "convnext", "mobilenet", "shufflenet", "efficientnet", "regnet", "densenet", "vgg")


def build(model, precision, channels_last):
    m = getattr(torchvision.models, model)(weights=None).eval().cuda()
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


def cuda_graph(m, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        m(x)
    return g.replay


def measure(model, name, precision, batch, how, channels_last, runs):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    m = build(model, precision, channels_last)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    started = time.time()
    with torch.inference_mode():
        if how == "graph":
            fn = cuda_graph(m, x)
        elif how == "compile":
            import torch._inductor.config as inductor
            inductor.freezing = True
            cm = torch.compile(m, mode="max-autotune")
            for _ in range(3):
                cm(x)
            fn = lambda: cm(x)
        else:
            fn = lambda: m(x)
        setup_s = time.time() - started
        med, p90 = time_ms(fn, 20, runs)
    row = {"impl": name, "model": model, "precision": precision, "batch": batch,
           "median_ms": med, "p90_ms": p90, "images_per_s": batch / med * 1e3,
           "setup_s": round(setup_s, 1), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__}
    print(json.dumps(row), flush=True)
    torch._dynamo.reset()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50", help="a torchvision.models name")
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--impls", default="eager,graph", help="comma list of eager, graph, compile")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    a = ap.parse_args()
    cl = a.model.startswith(CNNS)
    impls = a.impls.split(",")
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        runs = a.runs if b <= 64 else max(20, a.runs // 4)
        if "eager" in impls:
            rows.append(measure(a.model, "pytorch eager", "fp32", b, "eager", False, runs))
        if "graph" in impls:
            rows.append(measure(a.model, "pytorch cuda-graph", "tf32", b, "graph", False, runs))
            rows.append(measure(a.model, "pytorch cl+cuda-graph" if cl else "pytorch cuda-graph",
                                "fp16", b, "graph", cl, runs))
        if "compile" in impls:
            rows.append(measure(a.model, "torch.compile max-autotune+freezing", "fp16", b,
                                "compile", cl, runs))
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"{'model':14} {'impl':36} {'prec':5} {'batch':>5} {'median ms':>10} {'p90 ms':>8} {'img/s':>9}")
    for r in rows:
        print(f"{r['model']:14} {r['impl']:36} {r['precision']:5} {r['batch']:>5} "
              f"{r['median_ms']:>10.3f} {r['p90_ms']:>8.3f} {r['images_per_s']:>9.0f}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws the plots of BENCHMARKS.md from committed data (no GPU needed):

  docs/img/resnet50-fp16-vs-pytorch.png   aotune vs PyTorch per batch, from bench/results/resnet50.json
                                          (per batch, the last record, in the order measured, with a
                                          baseline from the same call)
  docs/img/transformers-fp16-vs-pytorch.png
                                          aotune vs PyTorch per transformer model and batch, from
                                          bench/results/transformers.json (the same rule)
  docs/img/resnet50-fp16-per-layer.png    per-layer time, from the `aotune bench --per-layer` profiles
                                          in bench/results/profile-*.txt
  docs/img/resnet50-fp16-b1-tuning.png    tuning curve (end-to-end estimate and per-task best vs trials),
                                          from models/resnet50.b1.fp16.records.jsonl and the run's report
                                          bench/results/tune-resnet50-b1-fp16-2026-12-01.txt

  python3 bench/plot_results.py [--out docs/img]      (pip install matplotlib)
"""
import argparse
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DPI = 100
AOTUNE, TORCH, DEFAULTS = "#1f77b4", "#ff7f0e", "#b0b0b0"

PROFILE_B1_DEFAULTS = RESULTS / "profile-resnet50-fp16-b1-defaults-2026-12-04.txt"
PROFILE_B1_TUNED = RESULTS / "profile-resnet50-fp16-b1-tuned-2026-12-04.txt"
PROFILE_B256_TUNED = RESULTS / "profile-resnet50-fp16-b256-tuned-2026-12-02.txt"
# The fresh b1 fp16 run whose trials open the committed records (its report's
# header names the commit, card and command).
TUNE_REPORT = RESULTS / "tune-resnet50-b1-fp16-2026-12-01.txt"
TUNE_RECORDS = ROOT / "models" / "resnet50.b1.fp16.records.jsonl"
TUNE_WINDOW = ("2026-12-01T22:52:35", "2026-12-01T22:55:05")


def save(fig, out, name):
    path = out / name
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"wrote {shown} ({path.stat().st_size // 1024} KB)")


def bars_vs_baseline(out, name, records, ours, theirs, labels, baseline_label, ylim, title):
    """Images/s of aotune and of the baseline per record (log scale), the speed-up above each pair."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    x = range(len(records))
    w = 0.38
    ax.bar([i - w / 2 for i in x], ours, w, color=AOTUNE, label="aotune, tuned (CUDA graph)")
    ax.bar([i + w / 2 for i in x], theirs, w, color=TORCH, label=baseline_label)
    for i, r in enumerate(records):
        ax.text(i - w / 2, ours[i] * 1.04, f"{ours[i]:,.0f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + w / 2, theirs[i] * 1.04, f"{theirs[i]:,.0f}", ha="center", va="bottom", fontsize=8)
        speedup = r["baseline"]["ms"] / r["aotune_ms"]
        ax.text(i, max(ours[i], theirs[i]) * 1.45, f"{speedup:.2f}×", ha="center",
                fontsize=10, fontweight="bold")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(*ylim)
    ax.set_ylabel("images/s (log scale)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    save(fig, out, name)


def vs_pytorch(out):
    rows = json.loads((RESULTS / "resnet50.json").read_text())
    latest = {}  # the records are in the order they were measured: the last one with a baseline wins
    for r in rows:
        if r["precision"] == "fp16" and r.get("baseline"):
            latest[r["batch"]] = r
    records = [latest[b] for b in sorted(latest)]
    bars_vs_baseline(
        out, "resnet50-fp16-vs-pytorch.png", records,
        [r["images_per_s"] for r in records], [r["baseline"]["images_per_s"] for r in records],
        [f"batch {r['batch']}\n{r['date']}, {r['commit']}" for r in records],
        "PyTorch fp16 channels-last + CUDA graph", (500, 150_000),
        "ResNet-50 fp16 on NVIDIA H200: aotune vs PyTorch, measured in the same call")


NAMES = {"vit_b_16": "ViT-B/16", "convnext_tiny": "ConvNeXt-T", "swin_t": "Swin-T"}


def transformers_vs_pytorch(out):
    rows = json.loads((RESULTS / "transformers.json").read_text())
    latest = {}  # per (model, batch, gpu): the last record with a baseline
    for r in rows:
        if r["precision"] == "fp16" and r.get("baseline"):
            latest[(r["model"], r["batch"], r["gpu"])] = r
    records = list(latest.values())
    gpus = sorted({r["gpu"] for r in records})
    bars_vs_baseline(
        out, "transformers-fp16-vs-pytorch.png", records,
        [r["batch"] * 1e3 / r["aotune_ms"] for r in records],
        [r["batch"] * 1e3 / r["baseline"]["ms"] for r in records],
        [f"{NAMES.get(r['model'], r['model'])} batch {r['batch']}\n{r['date']}, {r['commit']}" for r in records],
        "PyTorch fp16 + CUDA graph", (500, 60_000),
        f"Transformers fp16 on {', '.join(gpus)}: aotune vs PyTorch, same call or warm machine")


def read_profile(path):
    """(node, op, µs) per kernel, the graph median and the sum line of a per-layer profile."""
    layers, median = [], None
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        m = re.search(r"median ([\d.]+) ms", line)
        if m and median is None:
            median = float(m.group(1))
        m = re.match(r"\s+\d+\s+(\S+)\s+(\S+)\s+([\d.]+)\s", line)
        if m:
            layers.append((m.group(1), m.group(2), float(m.group(3))))
    return layers, median


def per_layer(out):
    d1, d1_med = read_profile(PROFILE_B1_DEFAULTS)
    t1, t1_med = read_profile(PROFILE_B1_TUNED)
    t256, t256_med = read_profile(PROFILE_B256_TUNED)
    assert [n for n, _, _ in d1] == [n for n, _, _ in t1], "b1 profiles list different kernels"
    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 7.2))
    x = range(len(t1))
    w = 0.42
    a.bar([i - w / 2 for i in x], [us for _, _, us in d1], w, color=DEFAULTS,
          label=f"heuristic defaults: Σ {sum(us for _, _, us in d1):.1f} µs, graph {d1_med * 1e3:.1f} µs")
    a.bar([i + w / 2 for i in x], [us for _, _, us in t1], w, color=AOTUNE,
          label=f"tuned + refined: Σ {sum(us for _, _, us in t1):.1f} µs, graph {t1_med * 1e3:.1f} µs")
    a.set_title("batch 1 (2026-12-04, CLI 0abe69c, PDL): µs per kernel, each launched 10× back to back in a CUDA graph",
                fontsize=9)
    a.set_ylabel("µs per launch")
    a.legend(fontsize=8, frameon=False, loc="upper left")
    a.grid(axis="y", alpha=0.3)
    a.set_xticks(list(x))
    a.set_xticklabels([short(n) for n, _, _ in t1], rotation=90, fontsize=6)
    a.set_xlim(-0.7, len(t1) - 0.3)

    colors = {"FusedConv": AOTUNE, "SpaceToDepth": "#2ca02c", "MaxPool": "#9467bd",
              "GlobalAveragePool": "#8c564b", "Dense": "#d62728"}
    x = range(len(t256))
    b.bar(list(x), [us for _, _, us in t256], 0.8, color=[colors.get(op, DEFAULTS) for _, op, _ in t256])
    for op, c in colors.items():
        b.bar([0], [0], color=c, label=op)
    b.set_title(f"batch 256, tuned (2026-12-02, CLI d07b893, plain launches): Σ {sum(us for _, _, us in t256):,.0f} µs, "
                f"graph {t256_med:.3f} ms", fontsize=9)
    b.set_ylabel("µs per launch")
    b.legend(fontsize=8, frameon=False, ncol=5, loc="upper right")
    b.grid(axis="y", alpha=0.3)
    b.set_xticks(list(x))
    b.set_xticklabels([short(n) for n, _, _ in t256], rotation=90, fontsize=6)
    b.set_xlim(-0.7, len(t256) - 0.3)
    fig.suptitle("ResNet-50 fp16 on NVIDIA H200, per-layer profile (aotune bench --per-layer)", fontsize=11)
    fig.tight_layout()
    save(fig, out, "resnet50-fp16-per-layer.png")


def short(node):
    return {"input_to_nhwc": "input", "globalaveragepool1": "gap", "maxpool2d1": "maxpool",
            "linear1": "dense"}.get(node, node.replace("conv2d", "c"))


def tuning(out):
    weights, default_us = {}, {}
    report = TUNE_REPORT.read_text()
    for m in re.finditer(r"^([0-9a-f]{16})\s+\w+\s+(\d+)\s+([\d.]+)\s+([\d.]+)", report, re.M):
        weights[m.group(1)] = int(m.group(2))
        default_us[m.group(1)] = float(m.group(3))
    graph = re.search(r"default ([\d.]+) ms, tuned ([\d.]+) ms", report)
    lo, hi = TUNE_WINDOW
    recs = [json.loads(line) for line in TUNE_RECORDS.open()]
    recs = [r for r in recs if lo <= r["timestamp"] < hi]
    best = dict(default_us)  # an unmeasured task counts at its default's time (its first trial)
    per_task = {t: [] for t in weights}
    xs, ys = [0], [sum(weights[t] * best[t] for t in weights)]
    for i, r in enumerate(recs, 1):
        t = r["task"]
        if r.get("failure") is None and r.get("median_us") is not None:
            best[t] = min(best[t], r["median_us"]) if per_task[t] else r["median_us"]
            per_task[t].append(best[t])
        xs.append(i)
        ys.append(sum(weights[k] * best[k] for k in weights))
    final = ys[-1]
    # The tuner's own figures (it replays its estimate per round, so they are the ends of rounds).
    run = re.search(r"(\d+) trials in ([\d.]+) s; within 5% of the final estimate after (\d+) trials, ([\d.]+) s",
                    report)
    total_s, within, within_s = float(run.group(2)), int(run.group(3)), float(run.group(4))

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot(xs, ys, color=AOTUNE, lw=1.6)
    a.axhline(final, color="k", lw=0.8, ls="--")
    a.axhspan(final, final * 1.05, color=AOTUNE, alpha=0.08)
    a.axvline(within, color="k", lw=0.6, ls=":")
    a.annotate(f"within 5% of the final estimate\nafter {within} trials, {within_s:.1f} s",
               (within, final * 1.05), xytext=(within + 200, ys[0] * 0.985), fontsize=8,
               arrowprops=dict(arrowstyle="->", lw=0.6))
    a.text(xs[-1], final * 1.002, f"final estimate {final:.1f} µs", ha="right", va="bottom", fontsize=8)
    a.text(0, ys[0], f" {ys[0]:.1f} µs (defaults)", va="bottom", fontsize=8)
    a.set_xlabel(f"trials ({len(recs):,} in {total_s:.1f} s, compiling included)")
    a.set_ylabel("Σ weight × best µs over 29 tasks")
    a.set_title("end-to-end estimate vs trials", fontsize=9)
    a.grid(alpha=0.3)

    for t, curve in per_task.items():
        if len(curve) > 1:
            b.plot(range(1, len(curve) + 1), [c / curve[-1] for c in curve], color=AOTUNE, alpha=0.35, lw=0.9)
    b.set_xlabel("the task's own trials")
    b.set_ylabel("best µs so far / the task's final best")
    b.set_title("per task (one line each; 64-trial cap)", fontsize=9)
    b.grid(alpha=0.3)
    sub = f"whole graph: default {graph.group(1)} ms → tuned {graph.group(2)} ms" if graph else ""
    fig.suptitle("aotune tune, ResNet-50 b1 fp16, a fresh 4-minute run on NVIDIA H200 (2026-12-01, CLI d77131c); "
                 + sub, fontsize=10)
    fig.tight_layout()
    save(fig, out, "resnet50-fp16-b1-tuning.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    out = Path(ap.parse_args().out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    vs_pytorch(out)
    transformers_vs_pytorch(out)
    per_layer(out)
    tuning(out)


if __name__ == "__main__":
    main()

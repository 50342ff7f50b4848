#!/usr/bin/env python3
"""Writes a tuning log (best.json) that forces one config on the convolution
(and dense) tasks of a model, for A/B probes of a template on the GPU:
`aotune verify|bench --tuning <out>` then builds every such task with it.

  aotune dump MODEL --section tasks --batch B --precision P > tasks.txt
  force_configs.py tasks.txt '{"kernel":"wgmma","block_m":128,"block_n":256,
      "stages":3,"split_k":1,"epilogue":"staged"}' out.best.json
      [--match REGEX] [--base BEST.json]

`--ops` names the task kinds forced (default `FusedConv,Dense`; `Attention`
for an attention config). `--match` forces the config only on tasks whose key matches REGEX (e.g.
'in1=f16\\[64x' for the layers with 64 output channels); `--base` starts
from an existing log (e.g. the committed one), whose records for the forced
tasks are replaced and all others kept, so the rest of the model runs as
tuned.

`block_n` is capped at the task's N (rounded up to a multiple of 32) so narrow
layers keep a valid tile; configs the build finds invalid fall back to the
default with a note, so check the kernel names it prints.
"""
import argparse
import json
import re

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("tasks", help="`aotune dump --section tasks` output")
ap.add_argument("config", help="the config, as JSON")
ap.add_argument("out", help="the best.json to write")
ap.add_argument("--match", help="force only tasks whose key matches this regex")
ap.add_argument("--base", help="a best.json whose other records are kept")
ap.add_argument("--ops", default="FusedConv,Dense", help="task kinds to force, comma-separated")
args = ap.parse_args()
config = json.loads(args.config)

# The template versions the records must carry (`template_versions()`).
TEMPLATES = {"FusedConv": "conv/2", "Dense": "dense/2", "Attention": "attention/1"}

forced = []
for line in open(args.tasks):
    parts = line.split()
    if len(parts) < 6 or parts[1] not in args.ops.split(","):
        continue
    key = line.split(None, 5)[5].strip()
    if args.match and not re.search(args.match, key):
        continue
    w = re.search(r"in1=\w+\[(\d+)x", key)
    c = dict(config)
    if w and "block_n" in c:
        n = int(w.group(1))
        c["block_n"] = min(c["block_n"], max(32, -(-n // 32) * 32))
    forced.append({
        "task": parts[0],
        "op": parts[1],
        "key": key,
        "template": TEMPLATES[parts[1]],
        "config": c,
        "median_us": 0.0,
        "target": {"gpu": "NVIDIA H200", "sm": "sm_90", "driver": "13.0", "cuda": "13.0"},
    })
records = forced
if args.base:
    mine = {r["task"] for r in forced}
    kept = [r for r in json.load(open(args.base))["records"] if r["task"] not in mine]
    records = sorted(kept + forced, key=lambda r: r["task"])
json.dump({"format": "aotune-best/1", "records": records}, open(args.out, "w"), indent=1)
print(f"{args.out}: {len(forced)} tasks forced, {len(records)} records")

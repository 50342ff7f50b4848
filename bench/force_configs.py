#!/usr/bin/env python3
"""Writes a tuning log (best.json) that forces one config on every
convolution (and dense) task of a model, for A/B probes of a template on the
GPU: `aotune verify|bench --tuning <out>` then builds every such task with it.

  aotune dump MODEL --section tasks --batch B --precision P > tasks.txt
  force_configs.py tasks.txt '{"kernel":"wgmma","block_m":128,"block_n":256,
      "stages":3,"split_k":1,"epilogue":"staged"}' out.best.json

`block_n` is capped at the task's N (rounded up to a multiple of 32) so narrow
layers keep a valid tile; configs the build finds invalid fall back to the
default with a note, so check the kernel names it prints.
"""
import json
import re
import sys

tasks, config, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
records = []
for line in open(tasks):
    parts = line.split()
    if len(parts) < 6 or parts[1] not in ("FusedConv", "Dense"):
        continue
    key = line.split(None, 5)[5].strip()
    w = re.search(r"in1=\w+\[(\d+)x", key)
    c = dict(config)
    if w and "block_n" in c:
        n = int(w.group(1))
        c["block_n"] = min(c["block_n"], max(32, -(-n // 32) * 32))
    records.append({
        "task": parts[0],
        "op": parts[1],
        "key": key,
        "template": "conv/2" if parts[1] == "FusedConv" else "dense/2",
        "config": c,
        "median_us": 0.0,
        "target": {"gpu": "NVIDIA H200", "sm": "sm_90", "driver": "13.0", "cuda": "13.0"},
    })
json.dump({"format": "aotune-best/1", "records": records}, open(out, "w"), indent=1)
print(f"{out}: {len(records)} tasks")

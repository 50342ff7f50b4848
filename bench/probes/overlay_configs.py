#!/usr/bin/env python3
"""Writes a copy of a tuning log (best.json) with some config fields changed
on the records it selects, for A/B probes of one knob on top of tuned
configs: `aotune bench --tuning <out> --per-layer` then times each layer
with the knob set.

  overlay_configs.py IN.best.json '{"prefetch_residual":true}' OUT.best.json \
      [--kernel wgmma] [--residual] [--where FIELD=VALUE ...] [--exclude H1,H2]

Selects the records whose config has `"kernel": KERNEL` (default wgmma),
with --residual only tasks with a residual input, and with --where only
configs whose FIELD equals VALUE (JSON). The build falls back to the default
config (with a note naming it) for a record the change makes invalid, so read
the kernel names `bench --per-layer` prints.
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("best")
ap.add_argument("patch")
ap.add_argument("out")
ap.add_argument("--kernel", default="wgmma")
ap.add_argument("--residual", action="store_true")
ap.add_argument("--where", action="append", default=[])
ap.add_argument("--exclude", default="", help="comma-separated task hashes to leave as they are")
a = ap.parse_args()

log = json.load(open(a.best))
patch = json.loads(a.patch)
where = [(w.split("=", 1)[0], json.loads(w.split("=", 1)[1])) for w in a.where]
changed = 0
for r in log["records"]:
    c = r["config"]
    if c.get("kernel") != a.kernel:
        continue
    if a.residual and "residual" not in r["key"]:
        continue
    if any(c.get(k) != v for k, v in where):
        continue
    if r["task"] in a.exclude.split(","):
        continue
    c.update(patch)
    changed += 1
json.dump(log, open(a.out, "w"), indent=1)
print(f"{a.out}: {changed} of {len(log['records'])} records changed")

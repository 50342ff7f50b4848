#!/usr/bin/env python3
"""Prints `median X ms Y img/s` from the last JSON line of an `aotune bench --json` log."""
import json
import sys

lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
if lines:
    r = json.loads(lines[-1])
    print(f"median {r['median_ms']:.4f} ms {r['images_per_s']:.0f} img/s")

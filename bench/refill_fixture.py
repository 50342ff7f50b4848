#!/usr/bin/env python3
"""Writes a fixture of tests/fixtures (graph without weights + fill.json) as a full ONNX model.

Usage: refill_fixture.py FIXTURE_DIR OUT.onnx [--check]
The fill rule is tests/fixtures/README.md's (as tests/common/fixture.rs applies it). With
--check, also runs ONNX Runtime on the fixture's first case and compares with its stored output.
"""
import json, sys
import numpy as np
import onnx

U64 = np.uint64


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def fill(seed, n, center, half_width):
    """`center + half_width * (2u - 1)` with u from splitmix64(seed + i), as f32."""
    with np.errstate(over="ignore"):
        x = U64(seed) + np.arange(n, dtype=U64) + U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
        x = x ^ (x >> U64(31))
    u = (x >> U64(40)).astype(np.float32) / np.float32(16777216.0)
    return np.float32(center) + np.float32(half_width) * (np.float32(2) * u - np.float32(1))


def main():
    src, out = sys.argv[1], sys.argv[2]
    model = onnx.load(f"{src}/model.graph.onnx")
    rules = {t["name"]: t for t in json.load(open(f"{src}/fill.json"))["tensors"]}
    for init in model.graph.initializer:
        r = rules.get(init.name)
        if r is None:
            continue
        v = fill(fnv1a64(init.name), int(np.prod(init.dims)), r["center"], r["half_width"])
        init.ClearField("float_data")
        init.raw_data = v.astype("<f4").tobytes()
    onnx.save(model, out)
    if "--check" in sys.argv:
        import onnxruntime as ort
        meta = json.load(open(f"{src}/meta.json"))
        case = meta["cases"][0]
        f = meta.get("input_fill")
        if f is None:
            print(f"{src}: meta.json has no input_fill; nothing to check")
            return 0
        x = fill(f["seed"], int(np.prod(case["input_shape"])), f["center"], f["half_width"])
        y = ort.InferenceSession(out).run(None, {meta["input_name"]: x.reshape(case["input_shape"])})[0]
        want = np.fromfile(f"{src}/{case['output']}", np.float32)
        err = np.linalg.norm(y.ravel() - want) / np.linalg.norm(want)
        print(f"{src}: ONNX Runtime vs stored output rel. L2 {err:.2e}")
        return 0 if err < 1e-4 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Exports torchvision models as test fixtures (run where torch is: the GPU machine).

Each fixture is what tests/fixtures.rs reads (the format of ../shared/fixtures):
  model.graph.onnx  the export with the payload of every float initializer of 64 or
                    more elements removed (name, dims and dtype kept);
  fill.json         per removed initializer: seed, center, half_width of the fill rule;
  meta.json         input/output names and shapes, the batch cases, and `input_fill`
                    (the input is the fill rule too, so no input file is stored);
  output_bN.f32     ONNX Runtime's output (CPU, graph optimizations off) on the
                    refilled model, raw little-endian float32.

Fill rule (f32 arithmetic): seed = FNV-1a 64 of the name; for element i,
x = splitmix64(seed + i); u = (x >> 40) / 2^24; v = center + half_width * (2u - 1).
Centers and widths are chosen per tensor so activations stay in range: weights
have variance 1/fan_in, norm scales 1 ± 0.1, biases ±0.05.

usage: export_fixtures.py OUT_DIR [NAME ...]
"""

import json
import math
import os
import sys

import numpy as np

MASK = (1 << 64) - 1


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def fill(seed, center, half_width, n):
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(n, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float32) / np.float32(16777216.0)
    return np.float32(center) + np.float32(half_width) * (np.float32(2.0) * u - np.float32(1.0))


def fill_params(name, dims):
    lower = name.lower()
    if "running_var" in lower:
        return 1.0, 0.1
    if any(k in lower for k in ("embed", "token", "bias_table", "pos_")):
        return 0.0, 0.05
    if "layer_scale" in lower:
        return 0.5, 0.1
    if len(dims) >= 2 and not (len(dims) == 3 and dims[1:] == [1, 1]):
        fan_in = int(np.prod(dims[1:]))
        return 0.0, math.sqrt(3.0 / max(fan_in, 1))
    if "weight" in lower or "scale" in lower or "gamma" in lower:
        return 1.0, 0.1
    return 0.0, 0.05


def build(name):
    import torchvision.models as tvm

    ctor = {
        "vit_b_16": tvm.vit_b_16,
        "convnext_tiny": tvm.convnext_tiny,
        "swin_t": tvm.swin_t,
        "shufflenet_v2_x1_0": tvm.shufflenet_v2_x1_0,
        "mobilenet_v3_large": tvm.mobilenet_v3_large,
        "resnet50": tvm.resnet50,
        "vit_b_32": tvm.vit_b_32,
        "convnext_small": tvm.convnext_small,
        "swin_v2_t": tvm.swin_v2_t,
        "swin_s": tvm.swin_s,
        "mobilenet_v3_small": tvm.mobilenet_v3_small,
        "shufflenet_v2_x0_5": tvm.shufflenet_v2_x0_5,
        "efficientnet_v2_s": tvm.efficientnet_v2_s,
        "regnet_y_400mf": tvm.regnet_y_400mf,
    }[name]
    return ctor(weights=None).eval()


# Other members of the families, exported on request (`export_fixtures.py OUT NAME`)
# to try the importer on models no test pins.
# `_dynbatch`: the dynamo exporter with a dynamic batch dimension
# (dynamic_shapes), checked at batch 1 and 2.
FAMILY = {
    f"{arch}_{suffix}": (arch, dynamo, batches)
    for arch in ["vit_b_16", "vit_b_32", "convnext_tiny", "convnext_small", "swin_t", "swin_v2_t",
                 "swin_s", "mobilenet_v3_small", "shufflenet_v2_x0_5", "efficientnet_v2_s",
                 "regnet_y_400mf"]
    for suffix, dynamo, batches in [("dynamo", True, [1]), ("legacy", False, [1]),
                                    ("dynbatch", "batch", [1, 2])]
}

# fixture name -> (torchvision model, dynamo exporter?, batch cases)
FIXTURES = {
    "vit_b_16_dynamo": ("vit_b_16", True, [1]),
    "convnext_tiny_dynamo": ("convnext_tiny", True, [1]),
    "convnext_tiny_legacy": ("convnext_tiny", False, [1, 2]),
    "swin_t_dynamo": ("swin_t", True, [1]),
    "shufflenet_v2_legacy": ("shufflenet_v2_x1_0", False, [1, 2]),
    "mobilenet_v3_large_legacy": ("mobilenet_v3_large", False, [1, 2]),
    "vit_b_16_legacy": ("vit_b_16", False, [1, 2]),
    "swin_t_legacy": ("swin_t", False, [1]),
    "shufflenet_v2_dynamo": ("shufflenet_v2_x1_0", True, [1]),
    "mobilenet_v3_large_dynamo": ("mobilenet_v3_large", True, [1]),
}


def export(model, dynamo, path):
    import torch

    x = torch.zeros(1, 3, 224, 224)
    if dynamo == "batch":
        x = torch.zeros(2, 3, 224, 224)
        torch.onnx.export(model, (x,), path, dynamo=True, input_names=["input"],
                          output_names=["output"], external_data=False,
                          dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    elif dynamo:
        torch.onnx.export(model, (x,), path, dynamo=True, input_names=["input"],
                          output_names=["output"], external_data=False)
    else:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


def make(out_dir, fixture):
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper

    arch, dynamo, batches = {**FAMILY, **FIXTURES}[fixture]
    torch.manual_seed(0)
    d = os.path.join(out_dir, fixture)
    os.makedirs(d, exist_ok=True)
    raw = os.path.join(d, "export.onnx")
    export(build(arch), dynamo, raw)
    model = onnx.load(raw, load_external_data=True)
    os.remove(raw)
    for ext in [f for f in os.listdir(d) if f.endswith(".data")]:
        os.remove(os.path.join(d, ext))
    records = []
    for init in model.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT:
            continue
        dims = list(init.dims)
        n = int(np.prod(dims)) if dims else 1
        if n < 64:
            continue
        center, hw = fill_params(init.name, dims)
        seed = fnv1a64(init.name)
        values = fill(seed, center, hw, n).reshape(dims)
        init.CopyFrom(numpy_helper.from_array(values, init.name))
        records.append({"name": init.name, "dims": dims, "seed": seed, "center": center,
                        "half_width": float(np.float32(hw)),
                        "sum": float(values.astype(np.float64).sum()),
                        "first": [float(v) for v in values.reshape(-1)[:3]]})
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    inp, outp = session.get_inputs()[0], session.get_outputs()[0]
    input_seed = fnv1a64(inp.name)
    cases = []
    for b in batches:
        x = fill(input_seed, 0.0, 1.0, b * 3 * 224 * 224).reshape(b, 3, 224, 224)
        y = session.run(None, {inp.name: x})[0].astype(np.float32)
        y.tofile(os.path.join(d, f"output_b{b}.f32"))
        cases.append({"batch": b, "input_shape": list(x.shape), "output": f"output_b{b}.f32",
                      "output_shape": list(y.shape), "output_absmax": float(np.abs(y).max()),
                      "output_std": float(y.std())})
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and int(np.prod(init.dims or [1])) >= 64:
            init.ClearField("raw_data")
            init.ClearField("float_data")
    onnx.save(model, os.path.join(d, "model.graph.onnx"))
    meta = {"source": f"torchvision {arch}, weights=None, "
                      f"{'dynamo=False opset 17, dynamic batch' if not dynamo else 'dynamo=True' + (', dynamic batch' if dynamo == 'batch' else '')}",
            "torch": torch.__version__, "onnxruntime": ort.__version__,
            "input_name": inp.name,
            "input_shape": ["batch" if dynamo in (False, "batch") else 1, 3, 224, 224],
            "input_fill": {"seed": input_seed, "center": 0.0, "half_width": 1.0},
            "output_name": outp.name, "cases": cases}
    json.dump(meta, open(os.path.join(d, "meta.json"), "w"), indent=1)
    json.dump({"rule": __doc__.split("Fill rule")[1].split("Centers")[0].strip(),
               "tensors": records}, open(os.path.join(d, "fill.json"), "w"), indent=1)
    ops = sorted({n.op_type for n in model.graph.node})
    size = os.path.getsize(os.path.join(d, "model.graph.onnx"))
    print(f"{fixture}: {len(model.graph.node)} nodes, opset "
          f"{model.opset_import[0].version}, graph {size / 1e6:.2f} MB, ops {' '.join(ops)}")


if __name__ == "__main__":
    out = sys.argv[1]
    for name in sys.argv[2:] or list(FIXTURES):
        try:
            make(out, name)
        except Exception as e:  # one failing export must not hide the others
            print(f"{name}: FAILED {type(e).__name__}: {e}")

#!/usr/bin/env python3
"""Makes tests/fixtures/onnx_light_* from the `light` models shipped in the onnx
wheel (onnx/backend/test/data/light, Apache-2.0): opset-9 model-zoo CNNs whose
weights are built in-graph by ConstantOfShape. The input is the fill rule over
the input name (see bench/export_fixtures.py), the output ONNX Runtime's (CPU,
graph optimizations off).

usage: make_light_fixtures.py OUT_DIR   (needs onnx and onnxruntime)
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from export_fixtures import fill, fnv1a64  # noqa: E402

MODELS = ["resnet50", "densenet121", "vgg19", "squeezenet", "shufflenet"]


def main(out_dir):
    light = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    for name in MODELS:
        src = os.path.join(light, f"light_{name}.onnx")
        model = onnx.load(src)
        inits = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in inits]
        assert len(inputs) == 1, [i.name for i in inputs]
        inp = inputs[0]
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
        seed = fnv1a64(inp.name)
        x = fill(seed, 0.0, 1.0, int(np.prod(shape))).reshape(shape)
        y = session.run(None, {inp.name: x})[0].astype(np.float32)
        d = os.path.join(out_dir, f"onnx_light_{name}")
        os.makedirs(d, exist_ok=True)
        shutil.copy(src, os.path.join(d, "model.onnx"))
        y.tofile(os.path.join(d, "output_b1.f32"))
        meta = {"source": f"onnx {onnx.__version__} wheel, backend/test/data/light/light_{name}.onnx "
                          "(Apache-2.0, ONNX Project Contributors)",
                "onnxruntime": ort.__version__, "input_name": inp.name, "input_shape": shape,
                "input_fill": {"seed": seed, "center": 0.0, "half_width": 1.0},
                "output_name": model.graph.output[0].name,
                "cases": [{"batch": shape[0], "input_shape": shape, "output": "output_b1.f32",
                           "output_shape": list(y.shape), "output_absmax": float(np.abs(y).max()),
                           "output_std": float(y.std())}]}
        json.dump(meta, open(os.path.join(d, "meta.json"), "w"), indent=1)
        print(f"{name}: output {y.shape} absmax {np.abs(y).max():.4g} std {y.std():.4g} "
              f"argmax {y.reshape(-1).argmax()}")


if __name__ == "__main__":
    main(sys.argv[1])

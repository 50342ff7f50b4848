"""The official Triton client (tritonclient[http,grpc]) against `aotune serve`.

Driven by tests/serve_triton_client.rs, which starts the server on a
repository holding the model MODEL (and a broken model BROKEN) and runs
`aotune run` for the expected outputs. Checks, over HTTP and gRPC: server
live and ready, model ready (and the broken one not), server and model
metadata, model config, and inference of one image (JSON tensors, binary
tensors, gRPC raw contents) equal to `aotune run`'s output bit for bit, and
of a batch of 3 images equal to `aotune run --batch 3` within 1e-5. Then
errors: a malformed protobuf body, a wrong shape, an unknown model; the
server must answer each and keep serving. Last, the statistics extension
(`get_inference_statistics` over HTTP and gRPC) must count every successful
request and its rows, and refuse unknown and broken models. Prints
"ok: N checks" on success; any failure raises.
"""

import argparse
import sys

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

CHECKS = 0


def check(cond, what):
    global CHECKS
    if not cond:
        raise AssertionError(what)
    CHECKS += 1


def read_f32(path, shape):
    return np.fromfile(path, dtype="<f4").reshape(shape)


def http_infer(client, model, x, binary):
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("output", binary_data=binary)
    return client.infer(model, [inp], outputs=[out]).as_numpy("output")


def grpc_infer(client, model, x):
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = grpcclient.InferRequestedOutput("output")
    return client.infer(model, [inp], outputs=[out]).as_numpy("output")


def expect_error(fn, needle, what):
    try:
        fn()
    except InferenceServerException as e:
        check(needle in str(e), f"{what}: error {e!s} lacks {needle!r}")
        return
    raise AssertionError(f"{what}: no error")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--http", required=True)
    p.add_argument("--grpc", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--broken", required=True)
    p.add_argument("--x1", required=True)
    p.add_argument("--y1", required=True)
    p.add_argument("--x3", required=True)
    p.add_argument("--y3", required=True)
    p.add_argument("--png", required=True)
    a = p.parse_args()

    x1, y1 = read_f32(a.x1, (1, 3, 224, 224)), read_f32(a.y1, (1, 1000))
    x3, y3 = read_f32(a.x3, (3, 3, 224, 224)), read_f32(a.y3, (3, 1000))
    h = httpclient.InferenceServerClient(url=a.http)
    g = grpcclient.InferenceServerClient(url=a.grpc)

    for name, c in (("http", h), ("grpc", g)):
        check(c.is_server_live(), f"{name}: live")
        check(c.is_model_ready(a.model), f"{name}: model ready")
        check(not c.is_model_ready(a.broken), f"{name}: broken model not ready")

    meta = h.get_server_metadata()
    check(meta["name"] == "aotune", f"http server metadata {meta}")
    check("binary_tensor_data" in meta["extensions"], f"http extensions {meta}")
    check("statistics" in meta["extensions"], f"http extensions {meta}")
    gmeta = g.get_server_metadata()
    check(gmeta.name == "aotune", f"grpc server metadata {gmeta}")

    mm = h.get_model_metadata(a.model)
    check(mm["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 224, 224]}],
          f"http model metadata inputs {mm}")
    check(mm["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 1000]}],
          f"http model metadata outputs {mm}")
    gm = g.get_model_metadata(a.model)
    check(gm.inputs[0].name == "input" and list(gm.inputs[0].shape) == [-1, 3, 224, 224],
          f"grpc model metadata {gm}")
    check(list(gm.outputs[0].shape) == [-1, 1000], f"grpc model metadata {gm}")

    hc = h.get_model_config(a.model)
    check(hc["max_batch_size"] == 8 and hc["input"][0]["dims"] == [3, 224, 224],
          f"http model config {hc}")
    gc = g.get_model_config(a.model).config
    check(gc.max_batch_size == 8 and list(gc.input[0].dims) == [3, 224, 224],
          f"grpc model config {gc}")
    check(list(gc.dynamic_batching.preferred_batch_size) == [1, 8], f"grpc batching {gc}")

    # One image: bit for bit what `aotune run` wrote.
    for what, got in (
        ("http json", http_infer(h, a.model, x1, binary=False)),
        ("http binary", http_infer(h, a.model, x1, binary=True)),
        ("grpc", grpc_infer(g, a.model, x1)),
    ):
        check(got.shape == (1, 1000) and got.dtype == np.float32, f"{what}: {got.shape} {got.dtype}")
        check(np.array_equal(got, y1), f"{what}: max |diff| {np.abs(got - y1).max()}")
        print(f"{what}: batch 1 equal to aotune run (top-1 {int(got.argmax())})")

    # Three images in one request: padded into the batch-8 graph.
    for what, got in (
        ("http binary", http_infer(h, a.model, x3, binary=True)),
        ("grpc", grpc_infer(g, a.model, x3)),
    ):
        check(got.shape == (3, 1000), f"{what}: {got.shape}")
        diff = np.abs(got - y3).max()
        check(np.allclose(got, y3, rtol=1e-5, atol=1e-5), f"{what}: batch 3 max |diff| {diff}")
        print(f"{what}: batch 3 within 1e-5 of aotune run --batch 3 (max |diff| {diff:.2e})")

    # A PNG sent as BYTES (the model's "image" config): the server's ImageNet
    # transform of a uniform 300x200 image of colour (200, 100, 30) is
    # (v / 255 - mean) / std per channel, in f32; the result must equal that
    # tensor's, sent as FP32.
    png = open(a.png, "rb").read()
    colour = np.array([200, 100, 30], dtype=np.float32)
    mean = np.array([0.485, 0.456, 0.406], dtype=np.float32)
    std = np.array([0.229, 0.224, 0.225], dtype=np.float32)
    plane = (colour / np.float32(255.0) - mean) / std
    tensor = np.broadcast_to(plane[None, :, None, None], (1, 3, 224, 224)).astype(np.float32)
    want = http_infer(h, a.model, np.ascontiguousarray(tensor), binary=True)
    for what, client, mod in (("http", h, httpclient), ("grpc", g, grpcclient)):
        inp = mod.InferInput("input", [1], "BYTES")
        inp.set_data_from_numpy(np.array([png], dtype=np.object_))
        got = client.infer(a.model, [inp]).as_numpy("output")
        check(np.array_equal(got, want), f"{what} BYTES image: max |diff| {np.abs(got - want).max()}")
        print(f"{what}: PNG as BYTES equal to its transformed FP32 tensor")

    # Errors: each answered, the server keeps serving.
    bad = np.zeros((1, 3, 224, 223), dtype=np.float32)
    expect_error(lambda: http_infer(h, a.model, bad, True), "does not match", "http wrong shape")
    expect_error(lambda: grpc_infer(g, a.model, bad), "does not match", "grpc wrong shape")
    expect_error(lambda: http_infer(h, "nope", x1, True), "unknown model", "http unknown model")
    expect_error(lambda: grpc_infer(g, "nope", x1), "unknown model", "grpc unknown model")
    channel = grpc.insecure_channel(a.grpc)
    raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    try:
        raw(b"\xff\xff\xff\xff garbage", timeout=30)
        raise AssertionError("malformed protobuf: no error")
    except grpc.RpcError as e:
        check(e.code() != grpc.StatusCode.OK and e.details(), f"malformed protobuf: {e}")
        print(f"malformed protobuf: {e.code().name}: {e.details()}")
    check(np.array_equal(grpc_infer(g, a.model, x1), y1), "grpc after errors")
    check(np.array_equal(http_infer(h, a.model, x1, True), y1), "http after errors")

    # Statistics. Successful requests so far: 3 of one image, 2 of three,
    # 1 transformed tensor and 2 PNGs, then 2 of one image after the errors:
    # 10 requests, 14 rows. The wrong shapes and unknown models never reached
    # the model's queue and are not counted.
    requests, rows = 10, 14
    hs = h.get_inference_statistics(a.model)["model_stats"]
    check(len(hs) == 1 and hs[0]["name"] == a.model and hs[0]["version"] == "1",
          f"http stats {hs}")
    hs = hs[0]
    his = hs["inference_stats"]
    check(his["success"]["count"] == requests and his["success"]["ns"] > 0, f"http stats {hs}")
    check(hs["inference_count"] == rows, f"http stats inference_count {hs}")
    for stat in ("queue", "compute_input", "compute_infer", "compute_output"):
        check(his[stat]["count"] == requests, f"http stats {stat} {hs}")
    check(his["compute_infer"]["ns"] > 0 and his["fail"]["count"] == 0, f"http stats {hs}")
    check(1 <= hs["execution_count"] <= requests, f"http stats execution_count {hs}")
    check({b["batch_size"] for b in hs["batch_stats"]} <= {1, 8}, f"http batch sizes {hs}")
    check(sum(b["compute_infer"]["count"] for b in hs["batch_stats"]) == hs["execution_count"],
          f"http batch counts {hs}")
    every = h.get_inference_statistics()["model_stats"]
    check([m["name"] for m in every] == [a.model], f"http stats of every ready model {every}")
    gs = g.get_inference_statistics(a.model, "1").model_stats
    check(len(gs) == 1 and gs[0].name == a.model, f"grpc stats {gs}")
    gs = gs[0]
    check(gs.inference_stats.success.count == requests, f"grpc stats {gs}")
    check(gs.inference_count == rows and gs.execution_count == hs["execution_count"],
          f"grpc stats {gs}")
    check([b.batch_size for b in gs.batch_stats] == [b["batch_size"] for b in hs["batch_stats"]],
          f"grpc batch sizes {gs}")
    gj = g.get_inference_statistics(as_json=True)
    check([m["name"] for m in gj["model_stats"]] == [a.model], f"grpc stats as json {gj}")
    for what, c in (("http", h), ("grpc", g)):
        expect_error(lambda: c.get_inference_statistics("nope"), "unknown model",
                     f"{what} stats of an unknown model")
        expect_error(lambda: c.get_inference_statistics(a.broken), "not ready",
                     f"{what} stats of a broken model")
    print(f"statistics: {requests} requests, {rows} rows, "
          f"{hs['execution_count']} batches {[b['batch_size'] for b in hs['batch_stats']]}")

    print(f"ok: {CHECKS} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())

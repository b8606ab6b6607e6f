#!/usr/bin/env python3
"""backplane against ONNX Runtime on int8 MobileNetV2 (ONNX QDQ and QOperator exports), with
backplane f32 and LiteRT in the same run. Not part of CI (needs torch, torchvision and
onnxruntime: /work/venv-bench/bin/python; LiteRT from /work/venv-tflite).

    /work/venv-bench/bin/python scripts/bench_ort_int8.py make [--out DIR]
    /work/venv-bench/bin/python scripts/bench_ort_int8.py compare --binary BIN [--out DIR]
    /work/venv-bench/bin/python scripts/bench_ort_int8.py bench --binary [LABEL=]BIN ... \
        [--out DIR] [--tflite DIR/model.tflite ...] [--rounds 10] [--iterations 50]

`make` writes (default DIR: /tmp/int8_ort): torchvision's MobileNetV2 with width 0.35 and
100 classes (random weights, seeded), 1x3x96x96 — the shape of gen_tflite_models.py's
`--big` Keras MobileNetV2 (same architecture and size, other random weights) — exported to
ONNX f32 (`f32.onnx`) (`--size 224 --width 1.0`: that size and width, 1000 classes),
then quantized by onnxruntime.quantization.quantize_static with 16
random calibration images: `qdq.onnx` (QDQ format, int8 activations and per-channel int8
weights) and `qop.onnx` (QOperator format, uint8 activations and per-channel int8 weights;
Conv, MatMul, Clip and Relu only, the activations folded into the QLinearConvs, since ONNX
Runtime's other QOperator operators are contrib ones: QLinearConv, the rest f32 between
QuantizeLinear / DequantizeLinear), plus `input_0.npy`. Weights are quantized with
`reduce_range` (7 bits): ONNX Runtime's AVX2 u8/s8 kernels add pairs of products in
saturating 16-bit lanes, and full-range weights would put its own outputs many quanta off.

`compare` runs each model through `backplane run` (CpuAcc,CpuRef and CpuRef) and ONNX
Runtime (graph optimizations on, as `bench` times it) and prints, for qdq.onnx (whose output
is dequantized int8), how many output elements differ and by how many quanta; for qop.onnx
(its classifier Gemm stays f32) and f32.onnx the largest difference.

`bench` times, in rounds with the order shuffled per round: backplane (`backplane bench
--iterations N --warmup 5 --threads T --quiet`, median of N) on qdq.onnx, qop.onnx and
f32.onnx; ONNX Runtime (intra-op threads T, median of N runs after 5 warm-ups) on the same
three; LiteRT (`Interpreter(num_threads=T)`, its default XNNPACK delegate, in the
/work/venv-tflite interpreter, median of N invokes after 5 warm-ups) on each --tflite
model. Printed per configuration: median of the round medians (lowest - highest round
median). One run's figures are comparable with each other only; on a loaded machine they
order the configurations rather than measure them.
"""

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import time

import numpy as np

MEDIAN = re.compile(r"median ([0-9.]+) ms")
TFLITE_PY = "/work/venv-tflite/bin/python"


def make(out, size=96, width=0.35):
    import onnx
    import torch
    import torchvision
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    classes = 100 if (size, width) == (96, 0.35) else 1000
    model = torchvision.models.mobilenet_v2(width_mult=width, num_classes=classes).eval()
    # Random weights leave the batch norms at identity: give them spread so that the
    # activations are not all alike.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    x = torch.randn(1, 3, size, size)
    f32 = os.path.join(out, "f32.onnx")
    torch.onnx.export(model, x, f32, input_names=["input"], output_names=["logits"],
                      opset_version=13, dynamo=False)
    onnx.checker.check_model(onnx.load(f32))
    pre = os.path.join(out, "f32_pre.onnx")
    quant_pre_process(f32, pre, skip_symbolic_shape=True)
    rng = np.random.default_rng(0)
    images = [rng.standard_normal((1, 3, size, size)).astype(np.float32) for _ in range(16)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(images)

        def get_next(self):
            v = next(self.it, None)
            return None if v is None else {"input": v}

    # ONNX Runtime's recommendations on x64: QDQ with int8 activations, QOperator with uint8
    # ones (its s8s8 QOperator kernels are slow there, it warns).
    quantize_static(pre, os.path.join(out, "qdq.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    quantize_static(pre, os.path.join(out, "qop.onnx"), Reader(),
                    quant_format=QuantFormat.QOperator,
                    op_types_to_quantize=["Conv", "MatMul", "Clip", "Relu"],
                    per_channel=True, reduce_range=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    np.save(os.path.join(out, "input_0.npy"), images[0])
    os.remove(pre)
    print(f"wrote {out}: f32.onnx qdq.onnx qop.onnx input_0.npy")


def ort_session(path, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def compare(out, binary):
    x = np.load(os.path.join(out, "input_0.npy"))
    for name in ["qdq", "qop", "f32"]:
        path = os.path.join(out, f"{name}.onnx")
        (want,) = ort_session(path, 1).run(None, {"input": x})
        for backends in ["CpuAcc,CpuRef", "CpuRef"]:
            d = os.path.join(out, f"out_{name}_{backends.replace(',', '_')}")
            subprocess.run([binary, "run", path, "--backends", backends, "--input",
                            f"input={out}/input_0.npy", "--output-dir", d],
                           check=True, capture_output=True)
            got = np.load(os.path.join(d, "logits.npy"))
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            if name != "qdq":
                # f32, and qop's classifier (a Gemm ONNX Runtime's QOperator export keeps f32).
                print(f"{name} {backends:14}: max |diff| {diff.max():.3g} "
                      f"(max |ORT| {np.abs(want).max():.3g})")
                continue
            # qdq's output is the dequantized int8 logits: count in quanta of its last
            # QuantizeLinear, which the output's distinct values reveal.
            levels = np.unique(want)
            quantum = np.min(np.diff(levels)) if len(levels) > 1 else 1.0
            q = np.rint(diff / quantum).astype(int)
            print(f"{name} {backends:14}: {np.count_nonzero(q)} of {q.size} elements off "
                  f"ONNX Runtime (max {q.max()} quanta; quantum {quantum:.4g})")


def backplane_ms(binary, model, threads, iterations):
    out = subprocess.run(
        [binary, "bench", model, "--generate", "random", "--iterations", str(iterations),
         "--warmup", "5", "--warmup-time", "0", "--threads", str(threads), "--quiet"],
        capture_output=True, text=True, check=True).stdout
    m = MEDIAN.search(out)
    if not m:
        raise RuntimeError(f"no median in: {out}")
    return float(m.group(1))


def ort_ms(model, x, threads, iterations):
    s = ort_session(model, threads)
    for _ in range(5):
        s.run(None, {"input": x})
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        s.run(None, {"input": x})
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


LITERT = """
import statistics, sys, time
import numpy as np
from ai_edge_litert.interpreter import Interpreter
path, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
it = Interpreter(model_path=path, num_threads=threads)
it.allocate_tensors()
d = it.get_input_details()[0]
it.set_tensor(d["index"], np.load(path.replace("model.tflite", "input_0.npy")))
for _ in range(5):
    it.invoke()
ts = []
for _ in range(n):
    t = time.perf_counter(); it.invoke(); ts.append(time.perf_counter() - t)
print(statistics.median(ts) * 1e3)
"""


def litert_ms(model, threads, iterations):
    out = subprocess.run([TFLITE_PY, "-c", LITERT, model, str(threads), str(iterations)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def bench(a):
    x = np.load(os.path.join(a.out, "input_0.npy"))
    threads = [int(t) for t in a.threads.split(",")]
    configs = []
    binaries = dict(b.split("=", 1) if "=" in b else ("backplane", b) for b in a.binary)
    for t in threads:
        for name in ["qdq", "qop", "f32"]:
            model = os.path.join(a.out, f"{name}.onnx")
            for label in binaries:
                configs.append((label, name, model, t))
            configs.append(("ORT", name, model, t))
        for tfl in a.tflite:
            configs.append(("LiteRT", os.path.basename(os.path.dirname(tfl)), tfl, t))
    results = {c: [] for c in configs}
    for r in range(a.rounds):
        order = list(configs)
        random.Random(r).shuffle(order)
        for c in order:
            who, _, model, t = c
            if who in binaries:
                ms = backplane_ms(binaries[who], model, t, a.iterations)
            elif who == "ORT":
                ms = ort_ms(model, x, t, a.iterations)
            else:
                ms = litert_ms(model, t, a.iterations)
            results[c].append(ms)
    load = os.getloadavg()
    print(f"{a.rounds} rounds x {a.iterations} executions, order shuffled per round; median of "
          f"the round medians (lowest - highest); load average at the end {load[0]:.1f}")
    for c in configs:
        who, name, _, t = c
        v = sorted(results[c])
        print(f"{who:10} {name:24} threads={t}: {statistics.median(v):8.3f} ms "
              f"({v[0]:.3f} - {v[-1]:.3f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["make", "compare", "bench"])
    ap.add_argument("--out", default="/tmp/int8_ort")
    ap.add_argument("--binary", action="append", default=[],
                    help="PATH or LABEL=PATH (repeatable: several builds in the same rounds)")
    ap.add_argument("--tflite", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--size", type=int, default=96, help="make: input side")
    ap.add_argument("--width", type=float, default=0.35, help="make: width multiplier")
    a = ap.parse_args()
    if a.what == "make":
        make(a.out, a.size, a.width)
    elif a.what == "compare":
        compare(a.out, a.binary[0].split("=", 1)[-1] if a.binary else "target/release/backplane")
    else:
        bench(a)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GFLOP/s of one-layer float products, backplane against ONNX Runtime, in one run.

Builds one-layer ONNX models of the transformers' and ResNet-50's GEMM shapes (MatMul of an
M×K input by constant K×N weights plus a bias; a 1×1 Conv for ResNet-50) under OUT_DIR, then
for each shape and thread count alternates rounds of `backplane bench` (its per-execution
latencies) and an ONNX Runtime session in this process. Per cell: the fastest execution and
the median of the round medians, as GFLOP/s (2·M·N·K flops per execution), and the spread of
the round medians ((max - min) / min). On a shared machine these are A/B figures of one run,
not speed claims.

Usage: gemm_layers.py --backplane BIN [--b BIN2] [--threads 1,2] [--rounds 3]
                      [--iterations 20] [--only NAME,...] [--out /tmp/gemm_layers]
(run with a Python that has onnx and onnxruntime, e.g. /work/venv-bench/bin/python; with
--b a second backplane binary joins the alternation, for an A/B of two builds.)
"""

import argparse
import os
import re
import statistics
import subprocess
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# name: (M, K, N, kind)
SHAPES = {
    "vit_inproj_197x768x2304": (197, 768, 2304, "matmul"),
    "vit_mlp0_197x768x3072": (197, 768, 3072, "matmul"),
    "vit_mlp3_197x3072x768": (197, 3072, 768, "matmul"),
    "bert_fc_128x768x3072": (128, 768, 3072, "matmul"),
    "gpt2_lmhead_64x768x50257": (64, 768, 50257, "matmul"),
    "fc_1x768x3072": (1, 768, 3072, "matmul"),
    # ResNet-50 layer3's 1×1 reduce: 14×14 pixels, 1024 → 256 channels.
    "r50_conv1x1_196x1024x256": (196, 1024, 256, "conv"),
    # ResNet-50 layer1's 1×1 expand: 56×56 pixels, 64 → 256 channels.
    "r50_conv1x1_3136x64x256": (3136, 64, 256, "conv"),
}

MEDIAN = re.compile(r"latency over \d+ executions?: min ([0-9.]+) ms, median ([0-9.]+) ms")


def build(path, m, k, n, kind, seed=7):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if kind == "matmul":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"),
                 helper.make_node("Add", ["xw", "b"], ["y"], name="add")]
    else:
        side = int(round(m ** 0.5))
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k, side, side])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n, side, side])
        wc = np.ascontiguousarray(w.T).reshape(n, k, 1, 1)
        inits = [numpy_helper.from_array(wc, "w"), numpy_helper.from_array(bias, "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what backplane and ONNX Runtime both read (onnx 1.23 writes 14)
    onnx.save(model, path)


def time_backplane(binary, path, threads, iterations):
    out = subprocess.run(
        [binary, "bench", path, "--generate", "random", "--threads", str(threads),
         "--iterations", str(iterations), "--warmup", "2", "--quiet"],
        capture_output=True, text=True, check=False)
    got = MEDIAN.search(out.stdout + out.stderr)
    if out.returncode != 0 or got is None:
        raise RuntimeError(f"backplane bench {path}: {(out.stdout + out.stderr)[-400:]}")
    return float(got.group(1)), float(got.group(2))


def time_ort(path, threads, iterations, shape):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)}
    for _ in range(2):
        sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return min(times), statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backplane", required=True)
    p.add_argument("--b", help="a second backplane binary (A/B)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--only", default="")
    p.add_argument("--no-ort", action="store_true")
    p.add_argument("--out", default="/tmp/gemm_layers")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = [s for s in args.only.split(",") if s]
    runners = [("bp", args.backplane)] + ([("bp_b", args.b)] if args.b else [])
    cols = [r[0] for r in runners] + ([] if args.no_ort else ["ort"])
    head = " | ".join(f"{c} GF/s best / med" for c in cols)
    print(f"| shape | thr | {head} | spread {' / '.join(cols)} | time {' / '.join(cols[:-1])} over {cols[-1]} (med) |")
    print("|---|---:|" + "---|" * (len(cols) + 2))
    for name, (m, k, n, kind) in SHAPES.items():
        if only and not any(o in name for o in only):
            continue
        path = os.path.join(args.out, f"{name}.onnx")
        if not os.path.exists(path):
            build(path, m, k, n, kind)
        side = int(round(m ** 0.5))
        shape = [m, k] if kind == "matmul" else [1, k, side, side]
        iters = max(3, min(args.iterations, int(args.iterations * 2e8 / (2 * m * n * k))))
        gflop = 2 * m * n * k / 1e9
        for threads in [int(t) for t in args.threads.split(",")]:
            res = {c: [] for c in cols}
            for r in range(args.rounds):
                order = cols if r % 2 == 0 else cols[::-1]
                for c in order:
                    if c == "ort":
                        res[c].append(time_ort(path, threads, iters, shape))
                    else:
                        binary = dict(runners)[c]
                        res[c].append(time_backplane(binary, path, threads, iters))
            cells, spreads, meds = [], [], {}
            for c in cols:
                best = min(x[0] for x in res[c])
                rm = [x[1] for x in res[c]]
                meds[c] = statistics.median(rm)
                cells.append(f"{gflop / best * 1e3:.1f} / {gflop / meds[c] * 1e3:.1f}")
                spreads.append(f"{(max(rm) - min(rm)) / min(rm) * 100:.0f}%")
            ratios = " / ".join(f"{meds[c] / meds[cols[-1]]:.2f}" for c in cols[:-1])
            print(f"| {name} | {threads} | {' | '.join(cells)} | {' / '.join(spreads)} | "
                  f"{ratios} |", flush=True)


if __name__ == "__main__":
    main()

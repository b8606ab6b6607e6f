#!/usr/bin/env python3
"""Per-layer times of one model: backplane (CpuAcc) next to ONNX Runtime, from the same run.

Runs `backplane bench --profile` and an ONNX Runtime session with profiling on, then prints
one row per backplane layer: its time (the fastest of all executions, which is the most
stable figure on a shared machine), the matching ONNX Runtime node's, the ratio, the layer's
GFLOP/s (Conv, MatMul and Gemm), and its shape. A fused backplane layer ("conv_2+bn_7+relu_8")
is matched with the ONNX Runtime nodes named after its parts that ONNX Runtime kept
("relu_8", or "relu_8_nchwc" where ONNX Runtime changed the layout), their times summed (a
pair of convolutions backplane runs as one layer is two of ONNX Runtime's).

On a shared machine one round can land in a slow minute for one runtime only: --rounds R
alternates the two runtimes R times and keeps each layer's fastest time over all rounds.

Usage:
  .venv/bin/python scripts/bench/layers.py MODEL [--threads N] [--iterations N] [--top N]
      [--rounds R] [--backplane target/release/backplane]
"""

import argparse
import collections
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import shape_inference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shapes_of(model):
    inferred = shape_inference.infer_shapes(model)
    shapes = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        shapes[vi.name] = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return list(a.ints) if a.ints else a.i
    return default


def flops(node, shapes):
    """2 × multiply-adds of a Conv, MatMul or Gemm node (0 for others)."""
    try:
        if node.op_type == "Conv":
            w, y = shapes[node.input[1]], shapes[node.output[0]]
            return 2 * math.prod(y) * math.prod(w[1:])
        if node.op_type in ("MatMul", "Gemm"):
            a, y = shapes[node.input[0]], shapes[node.output[0]]
            trans_a = node.op_type == "Gemm" and attr(node, "transA", 0)
            k = a[-2] if trans_a else a[-1]
            return 2 * math.prod(y) * k
    except KeyError:
        pass
    return 0


def describe(node, shapes):
    try:
        if node.op_type == "Conv":
            x, w, y = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
            s = attr(node, "strides", [1])[0]
            g = attr(node, "group", 1)
            return f"Conv {x[1]}->{w[0]} k{w[2]}x{w[3]} s{s} g{g} out {y[2]}x{y[3]}"
        if node.op_type in ("MatMul", "Gemm"):
            return f"{node.op_type} {shapes[node.input[0]]} x {shapes[node.input[1]]}"
        return f"{node.op_type} {shapes.get(node.output[0], '?')}"
    except KeyError:
        return node.op_type


def fastest(events):
    """Fastest duration (µs) per name."""
    best = {}
    for name, dur in events:
        best[name] = min(best.get(name, float("inf")), dur)
    return best


def backplane_layers(exe, model_path, threads, iterations, options=()):
    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, "profile.json")
        extra = [a for o in options for a in ("--backend-option", o)]
        subprocess.run(
            [exe, "bench", model_path, "--backends", "CpuAcc,CpuRef", "--threads", str(threads),
             "--generate", "random", "--iterations", str(iterations), "--profile", prof] + extra,
            check=True, stdout=subprocess.DEVNULL)
        trace = json.load(open(prof))["traceEvents"]
    return fastest((e["name"], e["dur"]) for e in trace if e.get("ph") == "X")


def ort_nodes(model_path, threads, iterations):
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            if "int" in i.type:
                feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
            else:
                feeds[i.name] = rng.random(shape, dtype=np.float32)
        for _ in range(iterations):
            sess.run(None, feeds)
        trace = json.load(open(sess.end_profiling()))
    events = []
    for e in trace:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            if name.endswith("_nchwc"):
                name = name[: -len("_nchwc")]
            events.append((name, e["dur"]))
    return fastest(events)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the two runtimes this many times; keep each layer's fastest")
    ap.add_argument("--backplane", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "backplane"))
    ap.add_argument("--backend-option", action="append", default=[], metavar="BACKEND:KEY=VALUE",
                    help="passed to backplane bench (repeatable), e.g. CpuAcc:nhwc=off")
    args = ap.parse_args()
    if not os.path.exists(args.backplane):
        sys.exit(f"no backplane binary at {args.backplane}: cargo build --release -p backplane-cli")
    model = onnx.load(args.model)
    shapes = shapes_of(model)
    nodes = {n.name: n for n in model.graph.node}
    outputs = {n.name: list(n.output) for n in model.graph.node}
    bp, ort_t = {}, {}
    for _ in range(args.rounds):
        for name, us in backplane_layers(args.backplane, args.model, args.threads,
                                         args.iterations, args.backend_option).items():
            bp[name] = min(bp.get(name, float("inf")), us)
        try:
            for name, us in ort_nodes(args.model, args.threads, args.iterations).items():
                ort_t[name] = min(ort_t.get(name, float("inf")), us)
        except ImportError:
            pass
    total_bp, total_ort = sum(bp.values()), sum(ort_t.values())
    print(f"{args.model}, {args.threads} thread(s), fastest of {args.iterations} executions "
          f"× {args.rounds} round(s) per layer")
    print(f"sum of layers: backplane {total_bp / 1000:.2f} ms, ONNX Runtime "
          f"{total_ort / 1000:.2f} ms" + (f", ratio {total_bp / total_ort:.2f}" if total_ort else ""))
    print(f"{'backplane ms':>12} {'ORT ms':>8} {'ratio':>6} {'GF/s':>6}  layer / shape")
    rows = sorted(bp.items(), key=lambda kv: -kv[1])
    by_op = collections.defaultdict(float)
    for name, us in rows:
        parts = [nodes[p] for p in name.split("+") if p in nodes]
        by_op[parts[0].op_type if parts else "?"] += us
    for name, us in rows[: args.top]:
        parts = [nodes[p] for p in name.split("+") if p in nodes]
        f = sum(flops(p, shapes) for p in parts)
        # The ONNX Runtime nodes among the layer's parts, summed: one for a fused layer
        # ONNX Runtime fused alike, several where backplane runs more as one (a
        # FusedConvPair is two of ONNX Runtime's convolutions).
        # Newer ONNX Runtime versions name a node by its output tensor in the profile.
        found = [ort_t[k] for p in dict.fromkeys(name.split("+"))
                 for k in dict.fromkeys([p] + outputs.get(p, [])) if k in ort_t]
        theirs = sum(found) if found else None
        ratio = f"{us / theirs:6.2f}" if theirs else "     -"
        gf = f"{f / us / 1e3:6.1f}" if f else "     -"
        ort_ms = f"{theirs / 1000:8.3f}" if theirs else "       -"
        shape = describe(parts[0], shapes) if parts else ""
        print(f"{us / 1000:12.3f} {ort_ms} {ratio} {gf}  {name[:44]:44s} {shape}")
    print("backplane time by first op of each layer (ms):",
          {k: round(v / 1000, 3) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])})


if __name__ == "__main__":
    main()

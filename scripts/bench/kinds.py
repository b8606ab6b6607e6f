#!/usr/bin/env python3
"""Time by layer kind of one transformer: backplane (CpuAcc) next to ONNX Runtime, same run.

`layers.py` matches layers by name, which fails where the two runtimes fuse differently (ONNX
Runtime's `MatMulAddFusion`, `SkipLayerNormalization`, `Gelu` nodes carry new names). This
script sorts every layer of both profiles into kinds and sums them instead:

  projection   MatMul/Gemm with a constant (weight) operand, with whatever it absorbed
  attention    MatMul of two activations (QK^T, scores·V)
  softmax, layernorm, gelu, elementwise (Add/Mul/Div/...), movement (Transpose/Reshape/...),
  other

A backplane layer takes the kind of its most expensive part (a MatMul with its bias and
GELU epilogue counts as a projection, where ONNX Runtime times its `Gelu` apart). Each
layer's time is its fastest over all executions and rounds; rounds alternate the runtimes.

Usage:
  python scripts/bench/kinds.py MODEL [--threads N] [--iterations N] [--rounds R]
      [--backplane target/release/backplane]
"""

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers  # noqa: E402

KINDS = ["projection", "attention", "softmax", "layernorm", "gelu", "elementwise",
         "movement", "other"]
ORDER = ["MatMul", "Gemm", "FusedMatMul", "Softmax", "LayerNormalization",
         "SkipLayerNormalization", "Gelu", "FastGelu", "BiasGelu", "Erf", "Tanh"]
MOVEMENT = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Gather", "Concat",
            "Slice", "Split", "Expand", "Identity", "Shape", "Cast"}
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Where", "Equal", "Not", "And",
               "Less", "Greater", "Neg", "Reciprocal"}


def kind_of(op, activation_operands):
    if op in ("MatMul", "Gemm", "FusedMatMul"):
        return "attention" if activation_operands else "projection"
    if op == "Softmax":
        return "softmax"
    if op in ("LayerNormalization", "SkipLayerNormalization", "ReduceMean"):
        return "layernorm"
    if op in ("Gelu", "FastGelu", "BiasGelu", "Erf", "Tanh"):
        return "gelu"
    if op in ELEMENTWISE:
        return "elementwise"
    if op in MOVEMENT:
        return "movement"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--backplane", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(layers.ROOT, "target")), "release",
        "backplane"))
    args = ap.parse_args()
    model = onnx.load(args.model)
    consts = {t.name for t in model.graph.initializer}
    consts |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    nodes = {n.name: n for n in model.graph.node}

    def bp_kind(layer):
        parts = [nodes[p] for p in layer.split("+") if p in nodes]
        parts.sort(key=lambda n: ORDER.index(n.op_type) if n.op_type in ORDER else len(ORDER))
        if not parts:
            return "other"
        n = parts[0]
        both = n.op_type == "MatMul" and not any(i in consts for i in n.input[:2])
        return kind_of(n.op_type, both)

    bp, ort_t = {}, {}

    def ort_events():
        with tempfile.TemporaryDirectory() as tmp:
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tmp, "ort")
            sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(0)
            feeds = {}
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                if "int" in i.type:
                    feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
                else:
                    feeds[i.name] = rng.random(shape, dtype=np.float32)
            for _ in range(args.iterations):
                sess.run(None, feeds)
            trace = json.load(open(sess.end_profiling()))
        best = {}
        for e in trace:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                a = e.get("args", {})
                shapes = [list(s.values())[0] for s in a.get("input_type_shape", [])]
                op = a.get("op_name", "")
                act = op in ("MatMul", "FusedMatMul") and len(shapes) >= 2 and \
                    len(shapes[0]) == 4 and len(shapes[1]) == 4
                key = e["name"]
                val = (kind_of(op, act), e["dur"])
                if key not in best or val[1] < best[key][1]:
                    best[key] = val
        return best

    for _ in range(args.rounds):
        for name, us in layers.backplane_layers(args.backplane, args.model, args.threads,
                                                args.iterations).items():
            bp[name] = min(bp.get(name, float("inf")), us)
        for name, (k, us) in ort_events().items():
            if name not in ort_t or us < ort_t[name][1]:
                ort_t[name] = (k, us)
    sums_bp, sums_ort = collections.defaultdict(float), collections.defaultdict(float)
    for name, us in bp.items():
        sums_bp[bp_kind(name)] += us
    for k, us in ort_t.values():
        sums_ort[k] += us
    tb, to = sum(sums_bp.values()), sum(sums_ort.values())
    print(f"{os.path.basename(args.model)}, {args.threads} thread(s), fastest of "
          f"{args.iterations} executions × {args.rounds} round(s) per layer")
    print("| kind | backplane ms | ORT ms | ratio |")
    print("|---|---:|---:|---:|")
    for k in KINDS:
        b, o = sums_bp.get(k, 0.0) / 1e3, sums_ort.get(k, 0.0) / 1e3
        if b or o:
            r = f"{b / o:.2f}" if o else "-"
            print(f"| {k} | {b:.2f} | {o:.2f} | {r} |")
    print(f"| sum | {tb / 1e3:.2f} | {to / 1e3:.2f} | {tb / to:.2f} |")


if __name__ == "__main__":
    main()

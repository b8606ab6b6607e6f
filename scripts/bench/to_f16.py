#!/usr/bin/env python3
"""Convert an f32 ONNX model to float16, for GpuAcc's f16 kernels.

    python scripts/bench/to_f16.py IN.onnx OUT.onnx [--f16-io] [--keep-f32 OP,OP]

Every float32 tensor of the main graph becomes float16: initializers, Constant and
ConstantOfShape values (finite values clipped to f16's range, so "minus the largest f32" in an
attention mask stays a large negative number rather than -inf), value types, and Casts to
float32 (which then cast to float16). The graph's inputs and outputs stay float32, with one
Cast at each border (so its outputs compare with the f32 model's), unless --f16-io. Ops named
in --keep-f32 (default: those whose float inputs are positions or counts, not activations)
keep computing in f32, between Casts. Subgraphs (If/Loop/Scan bodies) are not converted: a
model with them is refused.
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
F16_MAX = 65504.0
KEEP_F32 = ["Range", "RandomUniformLike", "RandomNormalLike", "TopK", "NonMaxSuppression", "CumSum"]


def to_half_array(arr):
    """The f32 array rounded to f16, finite values clipped into f16's range first."""
    finite = np.isfinite(arr)
    clipped = np.where(finite, np.clip(arr, -F16_MAX, F16_MAX), arr)
    return clipped.astype(np.float16)


def half_tensor(t):
    """TensorProto t (f32) as f16, same name."""
    return numpy_helper.from_array(to_half_array(numpy_helper.to_array(t)), t.name)


def float_names(model):
    """Names of the f32 tensors of the main graph (inputs, outputs, values, initializers)."""
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    names = {t.name for t in g.initializer if t.data_type == FLOAT}
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == FLOAT:
            names.add(v.name)
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == FLOAT:
                    names.update(n.output)
    return names


def convert(model, f16_io=False, keep=KEEP_F32):
    g = model.graph
    floats = float_names(model)
    for n in g.node:
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                sys.exit(f"{n.op_type} '{n.name}' has a subgraph; to_f16.py converts flat graphs only")
    for k, t in enumerate(g.initializer):
        if t.data_type == FLOAT:
            g.initializer[k].CopyFrom(half_tensor(t))
    for v in g.value_info:
        if v.type.tensor_type.elem_type == FLOAT:
            v.type.tensor_type.elem_type = HALF
    nodes = []
    for n in g.node:
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i == FLOAT:
                    a.i = HALF
        if n.op_type in ("Constant", "ConstantOfShape"):
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == FLOAT:
                    a.t.CopyFrom(half_tensor(a.t))
        if n.op_type in keep:
            # Inputs widened, outputs narrowed: the op itself stays f32.
            for k, name in enumerate(n.input):
                if name in floats:
                    wide = f"{name}__f32_for_{n.name or n.op_type}"
                    nodes.append(helper.make_node("Cast", [name], [wide], to=FLOAT))
                    n.input[k] = wide
            after = []
            for k, name in enumerate(n.output):
                if name in floats:
                    wide = f"{name}__f32"
                    n.output[k] = wide
                    after.append(helper.make_node("Cast", [wide], [name], to=HALF))
            nodes.append(n)
            nodes.extend(after)
        else:
            nodes.append(n)
    # The borders: f32 inputs and outputs stay f32 (one Cast each) unless f16_io.
    head, tail = [], []
    initialized = {t.name for t in g.initializer}
    for v in g.input:
        if v.type.tensor_type.elem_type != FLOAT:
            continue
        if v.name in initialized:  # an initializer listed as an input (IR < 4): f16 like it
            v.type.tensor_type.elem_type = HALF
            continue
        if f16_io:
            v.type.tensor_type.elem_type = HALF
            continue
        inner = f"{v.name}__f16"
        head.append(helper.make_node("Cast", [v.name], [inner], to=HALF))
        for n in nodes:
            for k, name in enumerate(n.input):
                if name == v.name:
                    n.input[k] = inner
    for v in g.output:
        if v.type.tensor_type.elem_type != FLOAT:
            continue
        if f16_io:
            v.type.tensor_type.elem_type = HALF
            continue
        inner = f"{v.name}__f16"
        for n in nodes:
            for k, name in enumerate(n.output):
                if name == v.name:
                    n.output[k] = inner
            for k, name in enumerate(n.input):
                if name == v.name:
                    n.input[k] = inner
        tail.append(helper.make_node("Cast", [inner], [v.name], to=FLOAT))
    del g.node[:]
    g.node.extend(head + nodes + tail)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--f16-io", action="store_true", help="float16 graph inputs and outputs too")
    ap.add_argument("--keep-f32", default=",".join(KEEP_F32), help="ops that stay f32 (comma-separated)")
    args = ap.parse_args()
    model = onnx.load(args.input)
    keep = [k for k in args.keep_f32.split(",") if k]
    convert(model, f16_io=args.f16_io, keep=keep)
    onnx.checker.check_model(model)
    onnx.save(model, args.output)
    halves = sum(1 for t in model.graph.initializer if t.data_type == HALF)
    print(f"wrote {args.output}: {halves} float16 initializers, {len(model.graph.node)} nodes")


if __name__ == "__main__":
    main()

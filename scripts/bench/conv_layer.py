#!/usr/bin/env python3
"""Write a one-layer ONNX model of a convolution (+ Relu), for single-layer A/B runs of
`backplane bench` (random weights, fixed seed, batch 1, opset 17).

Usage: .venv/bin/python scripts/bench/conv_layer.py OUT.onnx --c 3 --m 64 --hw 224 \
           [--k 3] [--stride 2] [--pad 0] [--dilation 1] [--group 1] [--no-relu]
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--c", type=int, required=True, help="input channels")
    p.add_argument("--m", type=int, required=True, help="output channels")
    p.add_argument("--hw", type=int, required=True, help="input height and width")
    p.add_argument("--k", type=int, default=1, help="kernel side")
    p.add_argument("--stride", type=int, default=1)
    p.add_argument("--pad", type=int, default=0)
    p.add_argument("--dilation", type=int, default=1)
    p.add_argument("--group", type=int, default=1)
    p.add_argument("--no-relu", action="store_true")
    a = p.parse_args()
    rng = np.random.default_rng(7)
    w = rng.uniform(-0.5, 0.5, (a.m, a.c // a.group, a.k, a.k)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, (a.m,)).astype(np.float32)
    out_hw = (a.hw + 2 * a.pad - a.dilation * (a.k - 1) - 1) // a.stride + 1
    conv_out = "y" if a.no_relu else "conv"
    nodes = [helper.make_node(
        "Conv", ["x", "w", "b"], [conv_out], kernel_shape=[a.k, a.k],
        strides=[a.stride] * 2, pads=[a.pad] * 4, dilations=[a.dilation] * 2, group=a.group)]
    if not a.no_relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["y"]))
    graph = helper.make_graph(
        nodes, "conv_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, a.c, a.hw, a.hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, a.m, out_hw, out_hw])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # The IR version of opset 17 (newer onnx packages write their own, which the importer
    # refuses as newer than it knows).
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()

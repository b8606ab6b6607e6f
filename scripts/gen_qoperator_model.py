#!/usr/bin/env python3
"""Write testdata/qoperator/: a small ONNX model in ONNX Runtime's QOperator format and ONNX
Runtime's outputs for one input, for the CLI test of CpuAcc's int8 path for QLinearConv and
QLinearMatMul (crates/backplane-cli/tests/qoperator.rs).

The network (uint8 activations, int8 weights with per-channel scales, int32 biases):

  x u8[1,3,15,15] -> QLinearConv 3x3 stride 2 (3 -> 16, per channel) -> QLinearConv 3x3
  depthwise (16, per channel, u8 weights around 128) -> QLinearConv 1x1 (16 -> 24, per
  tensor) -> Reshape [1, 24*8*8] -> QLinearMatMul (-> 10, per tensor) -> y u8[1,10]

Weights are random (seeded); int8 weights are 7-bit (-63..63), as onnxruntime's quantizer
makes them with reduce_range: its AVX2 u8×s8 kernels add pairs of products in saturating
16-bit lanes (vpmaddubsw), so full-range int8 weights give results off by many quanta there
(backplane and onnx's reference evaluator agree with each other on such a model). The scales
are chosen so that typical sums spread over the 8-bit range. Reference outputs: onnxruntime's CPU provider with graph optimizations off (its
QLinearConv / QLinearMatMul kernels, which requantize in float and round half to even).

Needs onnx and onnxruntime: run with /work/venv-bench/bin/python (not in CI).
Usage: gen_qoperator_model.py [OUT_DIR]   (default: testdata/qoperator)
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "testdata/qoperator"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(31)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qconv(x, xq, cin, cout, k, stride, group, yq, name, per_channel=True, w_u8=False):
        cg = cin // group
        depth = cg * k * k
        if w_u8:
            w = rng.integers(0, 256, (cout, cg, k, k)).astype(np.uint8)
            wz = np.full(cout if per_channel else (), 128, np.uint8)
        else:
            w = rng.integers(-63, 64, (cout, cg, k, k)).astype(np.int8)
            wz = np.zeros(cout if per_channel else (), np.int8)
        ws = (rng.uniform(0.5, 1.5, cout if per_channel else ()) * 0.01).astype(np.float32)
        b = rng.integers(-3000, 3000, cout).astype(np.int32)
        # Output scale: typical |sum| of centered products ~ 70 * 70 * sqrt(depth).
        ys = np.float32(xq[0] * float(np.mean(ws)) * 70 * 35 * np.sqrt(depth) / 60)
        ins = [x, xq[2], xq[3], const(name + "_w", w), const(name + "_ws", ws),
               const(name + "_wz", wz), const(name + "_ys", ys), const(name + "_yz", np.uint8(yq)),
               const(name + "_b", b)]
        p = k // 2
        nodes.append(helper.make_node("QLinearConv", ins, [name], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[p, p, p, p], group=group))
        return name, (float(ys), yq, name + "_ys", name + "_yz")

    xq = (0.02, 128, const("x_scale", np.float32(0.02)), const("x_zero", np.uint8(128)))
    t, q = qconv("x", xq, 3, 16, 3, 2, 1, 100, "conv1")
    t, q = qconv(t, q, 16, 16, 3, 1, 16, 110, "dw2", w_u8=True)
    t, q = qconv(t, q, 16, 24, 1, 1, 1, 120, "pw3", per_channel=False)
    nodes.append(helper.make_node("Reshape", [t, const("flat", np.array([1, -1], np.int64))],
                                  ["flat_out"], name="flatten"))
    k = 24 * 8 * 8
    w = rng.integers(-63, 64, (k, 10)).astype(np.int8)
    ws = np.float32(0.004)
    ys = np.float32(q[0] * ws * 70 * 70 * np.sqrt(k) / 60)
    nodes.append(helper.make_node(
        "QLinearMatMul",
        ["flat_out", q[2], q[3], const("fc_w", w), const("fc_ws", ws),
         const("fc_wz", np.int8(0)), const("fc_ys", ys), const("fc_yz", np.uint8(128))],
        ["y"], name="fc"))
    graph = helper.make_graph(
        nodes, "qoperator",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 15, 15])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = os.path.join(out, "model.onnx")
    onnx.save(model, path)

    x = rng.integers(0, 256, (1, 3, 15, 15)).astype(np.uint8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.save(os.path.join(out, "input_0.npy"), x)
    np.save(os.path.join(out, "output_0.npy"), y)
    print(f"wrote {path}: y = {y.ravel().tolist()}")


if __name__ == "__main__":
    main()

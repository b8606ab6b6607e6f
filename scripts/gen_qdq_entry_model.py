#!/usr/bin/env python3
"""Write testdata/qdq_entry/: a small ONNX QDQ model that starts and ends as ONNX Runtime's
quantizer writes a classifier, with ONNX Runtime's outputs for one input, for the CLI test of
both ends of CpuAcc's channels-last int8 region (crates/backplane-cli/tests/int8_entry.rs).

The network (int8 activations per tensor, int8 weights per channel, int32 biases):

  x f32[1,3,13,11] -> QuantizeLinear -> DQ -> Conv 3x3 stride 2 (3 -> 16) -> Relu -> Q
  -> DQ -> Conv 3x3 depthwise (16) -> Q -> DQ -> Conv 1x1 (16 -> 24) -> Q
  -> DQ -> GlobalAveragePool -> Q -> y i8[1,24,1,1]

CpuAcc quantizes the f32 image straight into the channels-last layout and pools the
channels-last tensor (no transposes). Reference outputs: onnxruntime's CPU provider with
graph optimizations off (the f32 chain between DequantizeLinear and QuantizeLinear, as
CpuRef computes it).

Needs onnx and onnxruntime: run with /work/venv-bench/bin/python (not in CI).
Usage: gen_qdq_entry_model.py [OUT_DIR]   (default: testdata/qdq_entry)
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "testdata/qdq_entry"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(37)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def q(x, scale, zero, name):
        s, z = const(name + "_s", np.float32(scale)), const(name + "_z", np.int8(zero))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [name], name=name))
        return name, (scale, s, z)

    def dq(x, p, name):
        nodes.append(helper.make_node("DequantizeLinear", [x, p[1], p[2]], [name], name=name))
        return name

    def conv(x, p, cin, cout, k, stride, group, name, relu):
        cg = cin // group
        w = rng.integers(-127, 128, (cout, cg, k, k)).astype(np.int8)
        ws = (rng.uniform(0.5, 1.5, cout) * 0.01).astype(np.float32)
        wf = dq(const(name + "_w", w), (None, const(name + "_ws", ws),
                                        const(name + "_wz", np.zeros(cout, np.int8))),
                name + "_wdq")
        nodes[-1].attribute.append(helper.make_attribute("axis", 0))
        b = rng.integers(-3000, 3000, cout).astype(np.int32)
        bf = dq(const(name + "_b", b), (None, const(name + "_bs", (p[0] * ws).astype(np.float32)),
                                        const(name + "_bz", np.zeros(cout, np.int32))),
                name + "_bdq")
        nodes[-1].attribute.append(helper.make_attribute("axis", 0))
        pad = k // 2
        nodes.append(helper.make_node("Conv", [dq(x, p, name + "_xdq"), wf, bf], [name + "_y"],
                                      name=name, kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[pad] * 4, group=group))
        y = name + "_y"
        if relu:
            nodes.append(helper.make_node("Relu", [y], [name + "_relu"], name=name + "_relu"))
            y = name + "_relu"
        ys = p[0] * float(np.mean(ws)) * 60 * 60 * np.sqrt(cg * k * k) / 60
        return q(y, ys, int(rng.integers(-10, 10)), name + "_q")

    t, p = q("x", 1.0 / 100, 3, "x_q")
    t, p = conv(t, p, 3, 16, 3, 2, 1, "stem", True)
    t, p = conv(t, p, 16, 16, 3, 1, 16, "dw", False)
    t, p = conv(t, p, 16, 24, 1, 1, 1, "pw", False)
    nodes.append(helper.make_node("GlobalAveragePool", [dq(t, p, "pool_dq")], ["pooled"],
                                  name="pool"))
    y, _ = q("pooled", p[0] * 0.5, 0, "y")
    graph = helper.make_graph(
        nodes, "qdq_entry",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 13, 11])],
        [helper.make_tensor_value_info(y, TensorProto.INT8, [1, 24, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = os.path.join(out, "model.onnx")
    onnx.save(model, path)

    x = rng.uniform(-1, 1, (1, 3, 13, 11)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    (yv,) = sess.run(None, {"x": x})
    np.save(os.path.join(out, "input_0.npy"), x)
    np.save(os.path.join(out, "output_0.npy"), yv)
    print(f"wrote {path}: y = {yv.ravel().tolist()}")


if __name__ == "__main__":
    main()

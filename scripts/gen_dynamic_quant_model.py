#!/usr/bin/env python3
"""Write testdata/dynamic_quant/: a small transformer feed-forward block quantized by ONNX
Runtime's `quantize_dynamic` (DynamicQuantizeLinear + MatMulInteger, int8 weights, the way
users quantize BERT-like models), with ONNX Runtime's outputs for one input, for the CLI test
of CpuAcc's dynamic quantization (crates/backplane-cli/tests/dynamic_quant.rs).

The float network before quantization (random weights, seeded):

  x f32[1,9,64] -> MatMul [64,1024] -> Add bias -> Relu -> MatMul [1024,64] -> Add bias
    -> Add x -> LayerNormalization -> y f32[1,9,64]

The weights are 64 KiB each: the import keeps them 8-bit (their widening Cast a layer that
CpuAcc folds into the integer product).

Reference outputs: onnxruntime's CPU provider (its DynamicQuantizeLinear and MatMulInteger
kernels). Needs onnx and onnxruntime: run with /work/venv-bench/bin/python (not in CI).
Usage: gen_dynamic_quant_model.py [OUT_DIR]   (default: testdata/dynamic_quant)
"""
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "testdata/dynamic_quant"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(43)
    d, h, seq = 64, 1024, 9

    def const(name, shape, scale):
        return numpy_helper.from_array(
            rng.uniform(-scale, scale, shape).astype(np.float32), name)

    inits = [
        const("w1", (d, h), 0.3), const("b1", (h,), 0.1),
        const("w2", (h, d), 0.3), const("b2", (d,), 0.1),
        numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["a2"]),
        helper.make_node("Add", ["a2", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # The IR version of opset 17 (newer onnx packages write their own).
    model.ir_version = 8
    onnx.checker.check_model(model)
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.onnx")
        onnx.save(model, f32)
        path = os.path.join(out, "model.onnx")
        quantize_dynamic(f32, path, weight_type=QuantType.QInt8)
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops, ops
    x = rng.uniform(-2, 2, (1, seq, d)).astype(np.float32)
    y = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.save(os.path.join(out, "input_0.npy"), x)
    np.save(os.path.join(out, "output_0.npy"), y)
    print(f"wrote {out}: ops {ops}")


if __name__ == "__main__":
    main()

"""Generate the control-flow test models in testdata/control_flow/ (run from the repo root
with the venv's python: .venv/bin/python scripts/gen_control_flow_models.py).

loop_mixed.onnx: a Loop of 100 iterations whose body mixes ops CpuAcc runs (MatMul, Add,
Tanh) with one only CpuRef runs (CumSum), carrying y [2, 3] and stacking every y as a scan
output [100, 2, 3]. The expected outputs are computed with ONNX Runtime and saved beside it.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
w = (rng.standard_normal((3, 3)) * 0.5).astype(np.float32)
b = (rng.standard_normal((3,)) * 0.1).astype(np.float32)

body = helper.make_graph(
    [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("MatMul", ["y_in", "W"], ["h"]),
        helper.make_node("CumSum", ["h", "axis"], ["c"]),
        helper.make_node("Add", ["c", "B"], ["s"]),
        helper.make_node("Tanh", ["s"], ["y_out"]),
        helper.make_node("Relu", ["y_out"], ["scan_out"]),
    ],
    "body",
    [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [2, 3]),
    ],
    [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2, 3]),
    ],
)
graph = helper.make_graph(
    [
        helper.make_node("Loop", ["M", "", "x"], ["y", "ys"], body=body, name="loop"),
    ],
    "loop_mixed",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("ys", TensorProto.FLOAT, [100, 2, 3]),
    ],
    initializer=[
        numpy_helper.from_array(np.array(100, dtype=np.int64), "M"),
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(b, "B"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "axis"),
    ],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, "testdata/control_flow/loop_mixed.onnx")

x = rng.standard_normal((2, 3)).astype(np.float32)
np.save("testdata/control_flow/loop_mixed_x.npy", x)
try:
    import onnxruntime as ort

    sess = ort.InferenceSession("testdata/control_flow/loop_mixed.onnx")
    y, ys = sess.run(None, {"x": x})
    np.save("testdata/control_flow/loop_mixed_y.npy", y)
    np.save("testdata/control_flow/loop_mixed_ys.npy", ys)
    print("expected outputs from ONNX Runtime", y.shape, ys.shape)
except ImportError:
    print("onnxruntime not installed: expected outputs not written")

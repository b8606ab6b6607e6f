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

# if_scan.onnx: an If on a run-time condition whose branches read an outer value (x) and a
# Scan (opset 16) summing the rows of x in reverse into running totals along axis 1.
then_g = helper.make_graph(
    [helper.make_node("Mul", ["x", "two"], ["t"])],
    "then",
    [],
    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 4])],
    initializer=[numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")],
)
else_g = helper.make_graph(
    [helper.make_node("Neg", ["x"], ["e"])],
    "else",
    [],
    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, 4])],
)
scan_body = helper.make_graph(
    [
        helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["running"]),
    ],
    "scan_body",
    [
        helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("row", TensorProto.FLOAT, [4]),
    ],
    [
        helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("running", TensorProto.FLOAT, [4]),
    ],
)
graph = helper.make_graph(
    [
        helper.make_node("If", ["cond"], ["chosen"], then_branch=then_g, else_branch=else_g, name="if"),
        helper.make_node(
            "Scan",
            ["zero", "chosen"],
            ["total", "totals"],
            body=scan_body,
            num_scan_inputs=1,
            scan_input_directions=[1],
            scan_output_axes=[1],
            name="scan",
        ),
    ],
    "if_scan",
    [
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
    ],
    [
        helper.make_tensor_value_info("total", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("totals", TensorProto.FLOAT, [4, 3]),
    ],
    initializer=[numpy_helper.from_array(np.zeros(4, dtype=np.float32), "zero")],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, "testdata/control_flow/if_scan.onnx")
xs = rng.standard_normal((3, 4)).astype(np.float32)
np.save("testdata/control_flow/if_scan_x.npy", xs)
try:
    import onnxruntime as ort

    sess = ort.InferenceSession("testdata/control_flow/if_scan.onnx")
    for c in (True, False):
        total, totals = sess.run(None, {"cond": np.array(c), "x": xs})
        tag = "then" if c else "else"
        np.save(f"testdata/control_flow/if_scan_{tag}_total.npy", total)
        np.save(f"testdata/control_flow/if_scan_{tag}_totals.npy", totals)
    print("if_scan expected outputs from ONNX Runtime")
except ImportError:
    pass

# sequences.onnx: SplitToSequence cuts x [6, 4] into rows 1, 2 and 3; SequenceMap doubles
# the positive part of each; a Loop over SequenceLength appends tanh of each element to a
# sequence it carries; ConcatFromSequence joins them again. Outputs: y [6, 4], the mapped
# sequence "parts" (three tensors) and its length n.
map_body = helper.make_graph(
    [
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Mul", ["r", "two_m"], ["m"]),
    ],
    "map_body",
    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [None, 4])],
    [helper.make_tensor_value_info("m", TensorProto.FLOAT, [None, 4])],
    initializer=[numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two_m")],
)
seq_f32 = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
loop_body = helper.make_graph(
    [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("SequenceAt", ["parts", "i"], ["el"]),
        helper.make_node("Tanh", ["el"], ["t"]),
        helper.make_node("SequenceInsert", ["acc_in", "t"], ["acc_out"]),
    ],
    "loop_body",
    [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        helper.make_value_info("acc_in", seq_f32),
    ],
    [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_value_info("acc_out", seq_f32),
    ],
)
graph = helper.make_graph(
    [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["pieces"], axis=0),
        helper.make_node("SequenceMap", ["pieces"], ["parts"], body=map_body),
        helper.make_node("SequenceLength", ["parts"], ["n"]),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
        helper.make_node("Loop", ["n", "", "empty"], ["acc"], body=loop_body, name="loop"),
        helper.make_node("ConcatFromSequence", ["acc"], ["y"], axis=0),
    ],
    "sequences",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])],
    [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4]),
        helper.make_value_info("parts", seq_f32),
        helper.make_tensor_value_info("n", TensorProto.INT64, []),
    ],
    initializer=[numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "sizes")],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, "testdata/control_flow/sequences.onnx")
xq = rng.standard_normal((6, 4)).astype(np.float32)
np.save("testdata/control_flow/sequences_x.npy", xq)
try:
    import onnxruntime as ort

    sess = ort.InferenceSession("testdata/control_flow/sequences.onnx")
    y, parts, n = sess.run(None, {"x": xq})
    np.save("testdata/control_flow/sequences_y.npy", y)
    for k, p in enumerate(parts):
        np.save(f"testdata/control_flow/sequences_parts_{k}.npy", p)
    np.save("testdata/control_flow/sequences_n.npy", n)
    print("sequences expected outputs from ONNX Runtime", y.shape, [p.shape for p in parts], n)
except ImportError:
    pass

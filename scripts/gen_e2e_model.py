#!/usr/bin/env python3
"""Build a small random-weight ConvNet that exercises many operators end to end.

Writes
    testdata/e2e/convnet.onnx          the model (opset 17, ir_version 8)
    testdata/e2e/input_x.npy           float32 [1,3,16,16] input "x"
    testdata/e2e/expected_<out>.npy    onnxruntime's output for every graph output

Graph (shapes for the static input [1,3,16,16]):
    x -> Conv(3->8, 3x3, pad 1)                          [1,8,16,16]
      -> BatchNormalization -> Relu
      -> Conv(8->16, 3x3, group 4, stride 2, pad 1)       [1,16,8,8]
      -> Conv(16->16, 3x3, group 16 (depthwise), dilation 2, pad 2) [1,16,8,8]
      -> Add(per-channel bias [16,1,1], broadcast) -> Relu
      -> MaxPool(2x2, s2)                                  [1,16,4,4]
      -> AveragePool(3x3, s1, pad 1, count_include_pad 0)  [1,16,4,4]
      -> Conv(16->16, 1x1, asymmetric pads [0,0,1,1], stride 2) [1,16,3,3]
      -> GlobalAveragePool                                [1,16,1,1]
      -> Reshape to [N,-1] via Shape->Gather->Unsqueeze->Concat   [1,16]
      -> MatMul([16,24]) -> Add(bias [24], broadcast) -> Relu     [1,24]
      -> Gemm(24->10, transB=1) = "logits"                 [1,10]
      -> Softmax = "probs"                                 [1,10]
"""

import argparse
import os
import sys

import numpy as np

SEED = 20240611


def numpy_forward(w, x):
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_op_tests as R

    c1 = R.ref_conv(x, w["conv1.w"], w["conv1.b"], pads=[1, 1, 1, 1])
    b1 = R.ref_batchnorm(c1, w["bn1.scale"], w["bn1.bias"], w["bn1.mean"], w["bn1.var"])
    r1 = R.ref_unary("Relu", b1)
    c2 = R.ref_conv(r1, w["conv2.w"], w["conv2.b"], pads=[1, 1, 1, 1], strides=[2, 2], group=4)
    c3 = R.ref_conv(c2, w["dw.w"], None, pads=[2, 2, 2, 2], dilations=[2, 2], group=16)
    r3 = R.ref_unary("Relu", R.ref_binary("Add", c3, w["chan_bias"]))
    p1 = R.ref_pool(r3, "max", kernel_shape=[2, 2], strides=[2, 2])
    p2 = R.ref_pool(p1, "avg", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    c4 = R.ref_conv(p2, w["conv3.w"], w["conv3.b"], pads=[0, 0, 1, 1], strides=[2, 2])
    gap = R.ref_global_pool(c4, "avg")
    flat = R.ref_reshape(gap, np.array([gap.shape[0], -1], np.int64))
    h = R.ref_unary("Relu", R.ref_binary("Add", R.ref_matmul(flat, w["fc1.w"]), w["fc1.b"]))
    logits = R.ref_gemm(h, w["fc2.w"], w["fc2.b"], transB=1)
    return {"logits": logits, "probs": R.ref_softmax(logits, -1)}


def main():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "testdata", "e2e"))
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    def weight(shape, fan_in, gain=np.sqrt(2.0)):
        return (rng.standard_normal(shape) * gain / np.sqrt(fan_in)).astype(np.float32)

    def small(shape, scale=0.1):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = {
        "conv1.w": weight((8, 3, 3, 3), 27),
        "conv1.b": small(8),
        "bn1.scale": (1.0 + small(8)).astype(np.float32),
        "bn1.bias": small(8),
        "bn1.mean": small(8, 0.5),
        "bn1.var": rng.uniform(0.5, 2.0, 8).astype(np.float32),
        "conv2.w": weight((16, 2, 3, 3), 18),  # group 4: 8/4 = 2 input channels per group
        "conv2.b": small(16),
        "dw.w": weight((16, 1, 3, 3), 9),  # depthwise
        "chan_bias": small((16, 1, 1)),
        "conv3.w": weight((16, 16, 1, 1), 16),
        "conv3.b": small(16),
        "gather_index": np.array(0, dtype=np.int64),
        "unsqueeze_axes": np.array([0], dtype=np.int64),
        "minus_one": np.array([-1], dtype=np.int64),
        "fc1.w": weight((16, 24), 16),
        "fc1.b": small(24),
        "fc2.w": weight((10, 24), 24, gain=1.0),
        "fc2.b": small(10),
    }
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "conv1.w", "conv1.b"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["b1"],
          name="bn1", epsilon=1e-5),
        N("Relu", ["b1"], ["r1"], name="relu1"),
        N("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2_grouped",
          kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=4),
        N("Conv", ["c2", "dw.w"], ["c3"], name="conv_depthwise_dilated",
          kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2], group=16),
        N("Add", ["c3", "chan_bias"], ["a3"], name="add_channel_bias"),
        N("Relu", ["a3"], ["r3"], name="relu3"),
        N("MaxPool", ["r3"], ["p1"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        N("AveragePool", ["p1"], ["p2"], name="avgpool", kernel_shape=[3, 3], strides=[1, 1],
          pads=[1, 1, 1, 1], count_include_pad=0),
        N("Conv", ["p2", "conv3.w", "conv3.b"], ["c4"], name="conv_1x1_strided",
          kernel_shape=[1, 1], pads=[0, 0, 1, 1], strides=[2, 2]),
        N("GlobalAveragePool", ["c4"], ["gap"], name="gap"),
        N("Shape", ["gap"], ["gap_shape"], name="shape"),
        N("Gather", ["gap_shape", "gather_index"], ["batch"], name="gather", axis=0),
        N("Unsqueeze", ["batch", "unsqueeze_axes"], ["batch_1d"], name="unsqueeze"),
        N("Concat", ["batch_1d", "minus_one"], ["new_shape"], name="concat", axis=0),
        N("Reshape", ["gap", "new_shape"], ["flat"], name="reshape"),
        N("MatMul", ["flat", "fc1.w"], ["mm"], name="matmul"),
        N("Add", ["mm", "fc1.b"], ["mm_b"], name="add_bias"),
        N("Relu", ["mm_b"], ["h"], name="relu4"),
        N("Gemm", ["h", "fc2.w", "fc2.b"], ["logits"], name="gemm", transB=1, alpha=1.0, beta=1.0),
        N("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "e2e_convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=[numpy_helper.from_array(np.asarray(v, order="C"), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="backplane/scripts/gen_e2e_model.py",
                              doc_string="Random-weight ConvNet covering many operators (test data).")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    # shape inference must agree with the documented shapes
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    assert shapes["c2"] == [1, 16, 8, 8] and shapes["c3"] == [1, 16, 8, 8], shapes
    assert shapes["p2"] == [1, 16, 4, 4] and shapes["c4"] == [1, 16, 3, 3], shapes
    assert shapes["logits"] == [1, 10] and shapes["probs"] == [1, 10], shapes

    model_path = os.path.join(out, "convnet.onnx")
    onnx.save(model, model_path)

    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    results = sess.run(names, {"x": x})
    # the optimised graph must give the same answer
    sess_opt = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    for a, b in zip(results, sess_opt.run(names, {"x": x})):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-6)
    probs = results[names.index("probs")]
    assert abs(float(probs.sum()) - 1.0) < 1e-5
    # outputs should not be degenerate (all-equal or one-hot)
    assert 0.02 < float(probs.max()) < 0.98, probs

    # independent check: the same graph evaluated with gen_op_tests.py's NumPy reference ops
    ref = numpy_forward(inits, x)
    for name, arr in zip(names, results):
        if not np.allclose(arr, ref[name], rtol=1e-4, atol=1e-5):
            raise SystemExit(f"onnxruntime and the NumPy reference disagree on output {name}")

    np.save(os.path.join(out, "input_x.npy"), x)
    for name, arr in zip(names, results):
        np.save(os.path.join(out, f"expected_{name}.npy"), np.asarray(arr, dtype=np.float32, order="C"))
    print(f"wrote {model_path} ({os.path.getsize(model_path)} bytes); outputs {names}")
    print("probs:", np.array2string(probs[0], precision=4))
    return 0


if __name__ == "__main__":
    sys.exit(main())

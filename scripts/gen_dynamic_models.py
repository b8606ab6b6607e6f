"""Generate testdata/dynamic/: models with symbolic input dimensions, served for several
shapes by one DynamicNetwork.

bert_tiny.onnx: a BERT-shaped encoder (token and position embeddings, two layers of
multi-head self-attention and a GELU feed-forward block, each with a residual and
LayerNormalization) whose input `input_ids` is [batch, seq] with both dimensions symbolic.
The head split is a Reshape to [0, 0, heads, head_dim] and the position ids a Slice whose end
is computed from Shape(input_ids), as exporters write them. Random weights, fixed seed.

reshape_by_input.onnx: y = Reshape(x, shape) + 1 with `shape` a graph input (its value is
needed at import, so it is part of a plan's key).

data_dependent.onnx: a detector's post-processing in small, with shapes that depend on data:
scores = Sigmoid(logits); keep the candidates above 0.5 (NonZero), the best min(count, 6) of
them (TopK whose k is computed from the kept count), then NonMaxSuppression (IoU 0.1, at most
5 boxes); outputs the kept boxes, their scores and their ranks (a Range over the count).
data_dependent/a and /b hold two input sets (logits, boxes; they keep different counts) and
the outputs ONNX Runtime computes for them (det_boxes.npy, det_scores.npy, det_rank.npy).

loop_early_exit.onnx: a Loop with scan outputs that its condition ends before its trip count:
over x [n], the running sum of x while it stays below `limit` (sums, a scan output whose length
is known only once the loop has run), the total (a carried value) and sums * 2 (planned after
the loop for the length it produced). loop_early_exit/a, /b and /c hold inputs ending after 3
of 7, all 5 of 5 and 1 of 4 iterations, with ONNX Runtime's outputs (total, sums, doubled).

Run with a Python that has onnx, numpy and onnxruntime (the benchmark venv):
    /work/venv-bench/bin/python scripts/gen_dynamic_models.py
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 96
HEADS = 4
FFN = 384
VOCAB = 64
MAX_POS = 128
LAYERS = 2

OUT = os.path.join(os.path.dirname(__file__), "..", "testdata", "dynamic")


def bert_tiny():
    rng = np.random.default_rng(30)
    inits = []
    nodes = []

    def weight(name, shape, scale=0.08):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    head_dim = HIDDEN // HEADS
    weight("tok_emb", [VOCAB, HIDDEN], 0.5)
    weight("pos_emb", [MAX_POS, HIDDEN], 0.5)
    const("zero", [0])
    const("one", [1])
    const("heads_shape", [0, 0, HEADS, head_dim])
    const("merge_shape", [0, 0, HIDDEN])
    inits.append(numpy_helper.from_array(
        np.array(np.sqrt(head_dim), dtype=np.float32), "scale"))
    inits.append(numpy_helper.from_array(np.array(np.sqrt(0.5), dtype=np.float32), "rsqrt2"))
    inits.append(numpy_helper.from_array(np.array(1.0, dtype=np.float32), "f_one"))
    inits.append(numpy_helper.from_array(np.array(0.5, dtype=np.float32), "f_half"))

    node("Gather", ["tok_emb", "input_ids"], "tok")
    node("Shape", ["input_ids"], "ids_shape")
    node("Slice", ["ids_shape", "one", "const_two"], "seq_len")
    const("const_two", [2])
    node("Slice", ["pos_emb", "zero", "seq_len", "zero"], "pos")
    node("Add", ["tok", "pos"], "emb")
    ln_scale = weight("emb_ln_g", [HIDDEN], 0.1)
    ln_bias = weight("emb_ln_b", [HIDDEN], 0.1)
    x = node("LayerNormalization", ["emb", ln_scale, ln_bias], "emb_ln", axis=-1,
             epsilon=1e-12)

    for layer in range(LAYERS):
        p = f"l{layer}_"

        def dense(inp, name, k, n):
            w = weight(p + name + "_w", [k, n])
            b = weight(p + name + "_b", [n], 0.02)
            mm = node("MatMul", [inp, w], p + name + "_mm")
            return node("Add", [mm, b], p + name)

        def heads(t, name, perm):
            r = node("Reshape", [t, "heads_shape"], p + name + "_r")
            return node("Transpose", [r], p + name + "_t", perm=perm)

        q = heads(dense(x, "q", HIDDEN, HIDDEN), "q", [0, 2, 1, 3])
        k = heads(dense(x, "k", HIDDEN, HIDDEN), "k", [0, 2, 3, 1])
        v = heads(dense(x, "v", HIDDEN, HIDDEN), "v", [0, 2, 1, 3])
        scores = node("MatMul", [q, k], p + "scores")
        scaled = node("Div", [scores, "scale"], p + "scaled")
        probs = node("Softmax", [scaled], p + "probs", axis=-1)
        ctx = node("MatMul", [probs, v], p + "ctx")
        ctx_t = node("Transpose", [ctx], p + "ctx_t", perm=[0, 2, 1, 3])
        merged = node("Reshape", [ctx_t, "merge_shape"], p + "merged")
        attn = dense(merged, "o", HIDDEN, HIDDEN)
        res1 = node("Add", [attn, x], p + "res1")
        x1 = node("LayerNormalization",
                  [res1, weight(p + "ln1_g", [HIDDEN], 0.1), weight(p + "ln1_b", [HIDDEN], 0.1)],
                  p + "ln1", axis=-1, epsilon=1e-12)
        h = dense(x1, "ffn1", HIDDEN, FFN)
        # GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt(2))).
        e = node("Erf", [node("Mul", [h, "rsqrt2"], p + "gelu_s")], p + "gelu_erf")
        g = node("Mul", [node("Mul", [h, "f_half"], p + "gelu_h"),
                         node("Add", [e, "f_one"], p + "gelu_1")], p + "gelu")
        f = dense(g, "ffn2", FFN, HIDDEN)
        res2 = node("Add", [f, x1], p + "res2")
        x = node("LayerNormalization",
                 [res2, weight(p + "ln2_g", [HIDDEN], 0.1), weight(p + "ln2_b", [HIDDEN], 0.1)],
                 p + "ln2", axis=-1, epsilon=1e-12)

    nodes.append(helper.make_node("Identity", [x], ["hidden"], name="hidden"))
    graph = helper.make_graph(
        nodes,
        "bert_tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT,
                                       ["batch", "seq", HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def reshape_by_input():
    """y = Reshape(x, shape) + 1 with `shape` a graph input: the model needs its value at
    import, so a plan is specialized on it."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Add", ["r", "one"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "reshape_by_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["c", "d"])],
        [numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def data_dependent():
    """Sigmoid -> NonZero -> Gather -> TopK(k computed) -> NonMaxSuppression -> Gather."""
    def i64(name, values):
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)

    inits = [
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "threshold"),
        i64("flat", [-1]), i64("flat_boxes", [-1, 4]), i64("zero_axis", [0]),
        i64("six", [6]), i64("one_axis", [1]), i64("max_out", [5]),
        numpy_helper.from_array(np.array([0.1], dtype=np.float32), "iou"),
        numpy_helper.from_array(np.array([0.0], dtype=np.float32), "min_score"),
        i64("box_rows", [1, -1, 4]), i64("score_rows", [1, 1, -1]),
        i64("two", [2]), i64("three", [3]), i64("zero", [0]),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "r_start"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "r_step"),
    ]
    n = helper.make_node
    nodes = [
        n("Sigmoid", ["logits"], ["prob"], name="sigmoid"),
        n("Reshape", ["prob", "flat"], ["prob_flat"], name="prob_flat"),
        n("Reshape", ["boxes", "flat_boxes"], ["boxes_flat"], name="boxes_flat"),
        n("Greater", ["prob_flat", "threshold"], ["above"], name="above"),
        n("NonZero", ["above"], ["kept_nz"], name="nonzero"),
        n("Squeeze", ["kept_nz", "zero_axis"], ["kept"], name="kept"),
        n("Gather", ["prob_flat", "kept"], ["kept_scores"], name="kept_scores"),
        n("Gather", ["boxes_flat", "kept"], ["kept_boxes"], axis=0, name="kept_boxes"),
        n("Shape", ["kept_scores"], ["count"], name="count"),
        n("Min", ["count", "six"], ["k"], name="k"),
        n("TopK", ["kept_scores", "k"], ["top_scores", "top_idx"], name="topk"),
        n("Gather", ["kept_boxes", "top_idx"], ["top_boxes"], axis=0, name="top_boxes"),
        n("Reshape", ["top_boxes", "box_rows"], ["nms_boxes"], name="nms_boxes"),
        n("Reshape", ["top_scores", "score_rows"], ["nms_scores"], name="nms_scores"),
        n("NonMaxSuppression", ["nms_boxes", "nms_scores", "max_out", "iou", "min_score"], ["selected"],
          name="nms"),
        n("Slice", ["selected", "two", "three", "one_axis"], ["sel_col"], name="sel_col"),
        n("Squeeze", ["sel_col", "one_axis"], ["sel"], name="sel"),
        n("Gather", ["top_boxes", "sel"], ["det_boxes"], axis=0, name="det_boxes"),
        n("Gather", ["top_scores", "sel"], ["det_scores"], name="det_scores"),
        n("Shape", ["sel"], ["det_count_1"], name="det_count"),
        n("Squeeze", ["det_count_1", "zero"], ["det_count"], name="det_count_scalar"),
        n("Range", ["r_start", "det_count", "r_step"], ["det_rank"], name="det_rank"),
    ]
    graph = helper.make_graph(
        nodes,
        "data_dependent",
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 20]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 20, 4])],
        [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["m", 4]),
         helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["m"]),
         helper.make_tensor_value_info("det_rank", TensorProto.INT64, ["m"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def loop_early_exit():
    """Loop(trip count = len(x)) { acc += x[i]; cond = acc < limit; scan acc } -> sums * 2."""
    n = helper.make_node
    body = helper.make_graph(
        [
            n("Gather", ["x", "i"], ["xi"], axis=0, name="xi"),
            n("Add", ["acc_in", "xi"], ["acc_out"], name="acc"),
            n("Less", ["acc_out", "limit"], ["cond_out"], name="below"),
            n("Identity", ["acc_out"], ["sum_i"], name="sum_i"),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("sum_i", TensorProto.FLOAT, [])],
    )
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(True), "yes"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "acc0"),
        numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
    ]
    nodes = [
        n("Shape", ["x"], ["x_shape"], name="x_shape"),
        n("Gather", ["x_shape", "zero"], ["trips"], axis=0, name="trips"),
        n("Loop", ["trips", "yes", "acc0"], ["total", "sums"], body=body, name="loop"),
        n("Mul", ["sums", "two"], ["doubled"], name="doubled"),
    ]
    graph = helper.make_graph(
        nodes,
        "loop_early_exit",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
         helper.make_tensor_value_info("limit", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("sums", TensorProto.FLOAT, ["k"]),
         helper.make_tensor_value_info("doubled", TensorProto.FLOAT, ["k"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


LOOP_CASES = {
    "a": ([0.5, 1.0, 2.0, 0.25, 3.0, 1.0, 0.5], 3.0),
    "b": ([0.5, 0.5, 0.5, 0.5, 0.5], 100.0),
    "c": ([1.0, 2.0, 3.0, 4.0], 0.1),
}


def data_dependent_inputs(seed):
    """Logits and boxes (corners, some overlapping) for data_dependent.onnx."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((1, 20)).astype(np.float32) * 2
    centers = rng.uniform(0, 10, (1, 20, 2)).astype(np.float32)
    sizes = rng.uniform(1, 4, (1, 20, 2)).astype(np.float32)
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=-1)
    return logits, boxes.astype(np.float32)


def main():
    os.makedirs(OUT, exist_ok=True)
    onnx.save(bert_tiny(), os.path.join(OUT, "bert_tiny.onnx"))
    onnx.save(reshape_by_input(), os.path.join(OUT, "reshape_by_input.onnx"))
    model = data_dependent()
    onnx.save(model, os.path.join(OUT, "data_dependent.onnx"))
    # The expected outputs come from ONNX Runtime (onnx's reference evaluator's Gather fails
    # on numpy 2): run this script with /work/venv-bench's Python, which has both.
    import onnxruntime
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    for seed, case in [(7, "a"), (11, "b")]:
        logits, boxes = data_dependent_inputs(seed)
        outs = session.run(None, {"logits": logits, "boxes": boxes})
        data = os.path.join(OUT, "data_dependent", case)
        os.makedirs(data, exist_ok=True)
        np.save(os.path.join(data, "logits.npy"), logits)
        np.save(os.path.join(data, "boxes.npy"), boxes)
        kept = int((1 / (1 + np.exp(-logits)) > 0.5).sum())
        for name, value in zip(["det_boxes", "det_scores", "det_rank"], outs):
            np.save(os.path.join(data, name + ".npy"), value)
        print(case, "kept", kept, "detections", outs[0].shape[0])
    model = loop_early_exit()
    onnx.save(model, os.path.join(OUT, "loop_early_exit.onnx"))
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    for case, (x, limit) in LOOP_CASES.items():
        feed = {"x": np.array(x, dtype=np.float32), "limit": np.array(limit, dtype=np.float32)}
        outs = session.run(None, feed)
        data = os.path.join(OUT, "loop_early_exit", case)
        os.makedirs(data, exist_ok=True)
        for name, value in feed.items():
            np.save(os.path.join(data, name + ".npy"), value)
        for name, value in zip(["total", "sums", "doubled"], outs):
            np.save(os.path.join(data, name + ".npy"), value)
        print(case, "iterations", outs[1].shape[0], "of", len(x))


if __name__ == "__main__":
    main()

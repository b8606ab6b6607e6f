#!/usr/bin/env python3
"""Write the hostile seed models of the fuzz corpus (testdata/fuzz): layers whose outputs
need terabytes (Tile, Expand, Pad, Resize, ConstantOfShape) and Loops nested three deep
whose trip counts multiply past any sane budget. Each must end in a typed error, never an
abort or a hang:

    python scripts/gen_hostile_models.py testdata/fuzz
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def io(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def huge_outputs(out):
    big = 1 << 24
    cases = {
        "huge_tile": (
            [helper.make_node("Tile", ["x", "r"], ["y"])],
            [const("r", [big, big])],
        ),
        "huge_expand": (
            [helper.make_node("Expand", ["x", "s"], ["y"])],
            [const("s", [big, big, 4])],
        ),
        "huge_pad": (
            [helper.make_node("Pad", ["x", "p"], ["y"])],
            [const("p", [0, 0, big, big])],
        ),
        "huge_resize": (
            [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
            [const("sc", [65536.0, 65536.0], np.float32)],
        ),
    }
    for name, (nodes, inits) in cases.items():
        rank = 3 if name == "huge_expand" else 2
        out_dims = [f"d{i}" for i in range(rank)]
        graph = helper.make_graph(nodes, name, [io("x", [2, 4])], [io("y", out_dims)], inits)
        save(graph, os.path.join(out, f"{name}.onnx"))
    # ConstantOfShape folded at import: a terabyte constant.
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["s"], ["c"]),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        "huge_constant_of_shape",
        [io("x", [1])],
        [io("y", ["d0", "d1"])],
        [const("s", [1 << 20, 1 << 20])],
    )
    save(graph, os.path.join(out, "huge_constant_of_shape.onnx"))


def loop_node(name, trip, body, carried_in, carried_out):
    return helper.make_node("Loop", [trip, "", carried_in], [carried_out], name=name, body=body)


def nested_loops(out):
    def body(level):
        """Level 0 adds 1; level k runs a Loop of 2^20 iterations over level k - 1."""
        c_in, c_out, v_in, v_out = (f"{x}{level}" for x in ("cond_in", "cond_out", "v_in", "v_out"))
        nodes = [helper.make_node("Identity", [c_in], [c_out])]
        if level == 0:
            nodes.append(helper.make_node("Add", [v_in, "one"], [v_out]))
            inits = [const("one", [1.0], np.float32)]
        else:
            nodes.append(loop_node(f"loop{level}", f"n{level}", body(level - 1), v_in, v_out))
            inits = [const(f"n{level}", 1 << 20)]
        return helper.make_graph(
            nodes,
            f"body{level}",
            [
                io(f"i{level}", [], TensorProto.INT64),
                io(c_in, [], TensorProto.BOOL),
                io(v_in, [1]),
            ],
            [io(c_out, [], TensorProto.BOOL), io(v_out, [1])],
            inits,
        )

    graph = helper.make_graph(
        [loop_node("outer", "n", body(2), "x", "y")],
        "nested_loops",
        [io("x", [1])],
        [io("y", [1])],
        [const("n", 1 << 20)],
    )
    save(graph, os.path.join(out, "nested_loops.onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    huge_outputs(out)
    nested_loops(out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Write a chain of N elementwise layers (Relu, Neg, Abs in turn) on a [1, 16] input, to time
`backplane inspect` and `run` on very long networks:

    python scripts/gen_chain_model.py 200000 /tmp/chain200k.onnx
    time backplane inspect /tmp/chain200k.onnx > /dev/null
"""
import sys

import onnx
from onnx import TensorProto, helper


def main() -> None:
    n, path = int(sys.argv[1]), sys.argv[2]
    ops = ["Relu", "Neg", "Abs"]
    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node(ops[i % 3], [prev], [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Build the CpuAcc benchmark models as ONNX files with random weights.

MobileNetV2 (1x3x224x224), ResNet-18 (1x3x224x224) and a BERT-tiny-style encoder
(2 layers, hidden 128, 2 heads, FFN 512, sequence 128; input = embeddings [1,128,128]),
built with onnx.helper from the ops backplane's importer supports. Weights are random
(seeded); BatchNormalization nodes are kept so that the backends' folding is exercised.

Usage: make_models.py [OUT_DIR]   (default: target/bench-models, git-ignored)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value, prefix="c"):
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, prefix=None, **attrs):
        out = self.name((prefix or op.lower()) + "_")
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, group=1, bias=False):
        fan_in = cin // group * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k)).astype(np.float32)
        inputs = [x, self.const(w, "w")]
        if bias:
            inputs.append(self.const(self.rng.normal(0, 0.01, cout).astype(np.float32), "b"))
        p = k // 2
        return self.node("Conv", inputs, "conv", kernel_shape=[k, k], strides=[stride, stride],
                         pads=[p, p, p, p], group=group)

    def bn(self, x, c):
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.normal(0, 0.1, c), r.normal(0, 0.1, c), r.uniform(0.5, 1.5, c)]
        return self.node("BatchNormalization", [x] + [self.const(p.astype(np.float32), "bn") for p in params],
                         "bn", epsilon=1e-5)

    def relu(self, x):
        return self.node("Relu", [x])

    def relu6(self, x):
        return self.node("Clip", [x, self.const(np.float32(0.0)), self.const(np.float32(6.0))], "relu6")

    def gemm(self, x, cin, cout):
        w = self.rng.normal(0, np.sqrt(1.0 / cin), (cout, cin)).astype(np.float32)
        b = self.rng.normal(0, 0.01, cout).astype(np.float32)
        return self.node("Gemm", [x, self.const(w, "fc_w"), self.const(b, "fc_b")], "fc", transB=1)

    def model(self, name, inp, shape, out, out_shape):
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(inp, TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
            self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def mobilenet_v2():
    b = Builder(1)
    x = b.relu6(b.bn(b.conv("input", 3, 32, 3, 2), 32))
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, cin, hidden, 1), hidden))
            y = b.relu6(b.bn(b.conv(y, hidden, hidden, 3, stride, group=hidden), hidden))
            y = b.bn(b.conv(y, hidden, c, 1), c)
            if stride == 1 and cin == c:
                y = b.node("Add", [x, y])
            x, cin = y, c
    x = b.relu6(b.bn(b.conv(x, cin, 1280, 1), 1280))
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    x = b.gemm(x, 1280, 1000)
    return b.model("mobilenet_v2", "input", [1, 3, 224, 224], x, [1, 1000])


def resnet18():
    b = Builder(2)
    x = b.relu(b.bn(b.conv("input", 3, 64, 7, 2), 64))
    x = b.node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for c, s in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for i in range(2):
            stride = s if i == 0 else 1
            y = b.relu(b.bn(b.conv(x, cin, c, 3, stride), c))
            y = b.bn(b.conv(y, c, c, 3), c)
            short = x
            if stride != 1 or cin != c:
                short = b.bn(b.conv(x, cin, c, 1, stride), c)
            x = b.relu(b.node("Add", [y, short]))
            cin = c
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    x = b.gemm(x, 512, 1000)
    return b.model("resnet18", "input", [1, 3, 224, 224], x, [1, 1000])


def bert_tiny(layers=2, hidden=128, heads=2, ffn=512, seq=128):
    b = Builder(3)
    r = b.rng
    dh = hidden // heads

    def linear(x, cin, cout):
        w = r.normal(0, 0.05, (cin, cout)).astype(np.float32)
        bias = r.normal(0, 0.01, cout).astype(np.float32)
        return b.node("Add", [b.node("MatMul", [x, b.const(w, "w")]), b.const(bias, "b")])

    def layer_norm(x):
        g = r.uniform(0.8, 1.2, hidden).astype(np.float32)
        beta = r.normal(0, 0.05, hidden).astype(np.float32)
        return b.node("LayerNormalization", [x, b.const(g, "ln_g"), b.const(beta, "ln_b")], "ln",
                      axis=-1, epsilon=1e-12)

    def heads_first(x):
        x = b.node("Reshape", [x, b.const(np.array([1, seq, heads, dh], np.int64), "shape")])
        return b.node("Transpose", [x], perm=[0, 2, 1, 3])

    x = "input"
    for _ in range(layers):
        q, k, v = (heads_first(linear(x, hidden, hidden)) for _ in range(3))
        kt = b.node("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.node("MatMul", [q, kt])
        scores = b.node("Div", [scores, b.const(np.float32(np.sqrt(dh)))])
        probs = b.node("Softmax", [scores], axis=-1)
        ctx = b.node("MatMul", [probs, v])
        ctx = b.node("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = b.node("Reshape", [ctx, b.const(np.array([1, seq, hidden], np.int64), "shape")])
        x = layer_norm(b.node("Add", [x, linear(ctx, hidden, hidden)]))
        h = linear(x, hidden, ffn)
        # GELU as 0.5·h·(1 + erf(h/√2)), the form exporters emit (ORT fuses it).
        e = b.node("Erf", [b.node("Div", [h, b.const(np.float32(np.sqrt(2.0)))])])
        h = b.node("Mul", [b.node("Mul", [h, b.const(np.float32(0.5))]),
                           b.node("Add", [e, b.const(np.float32(1.0))])])
        x = layer_norm(b.node("Add", [x, linear(h, ffn, hidden)]))
    return b.model("bert_tiny", "input", [1, seq, hidden], x, [1, seq, hidden])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "target", "bench-models")
    os.makedirs(out, exist_ok=True)
    for name, build in [("mobilenet_v2", mobilenet_v2), ("resnet18", resnet18), ("bert_tiny", bert_tiny)]:
        path = os.path.join(out, f"{name}.onnx")
        onnx.save(build(), path)
        print(f"wrote {os.path.normpath(path)}")


if __name__ == "__main__":
    main()

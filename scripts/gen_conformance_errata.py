#!/usr/bin/env python3
"""Corrected expected outputs for ONNX 1.17.0 node tests whose shipped outputs contradict
the operator specification: testdata/conformance/errata/<case>/output_<i>.pb.

The conformance test (crates/backplane/tests/conformance.rs) compares a case listed here with
these files instead of the suite's own. Each correction is recomputed from the suite's inputs
with NumPy, following the specification text, and the script checks that it differs from the
shipped output only where the specification and the shipped data disagree.

- QLinearMatMul, int8 (4 cases): the specification quantizes the product as
  y = saturate(round(x / y_scale) + y_zero_point); the reference implementation of onnx 1.17
  casts with astype, which wraps (-236 becomes 20 instead of -128).
  onnx/onnx#6169, #7835; fixed by onnx/onnx#7868.
- AveragePool, count_include_pad=1 with ceil_mode=1 (1 case): the last window runs past the
  end padding; the 1.17 reference counts those phantom taps in the divisor, the specification
  divides by the taps of the (explicitly) padded input, as onnx 1.18's reference, ONNX Runtime
  and PyTorch do (this reproduces the regenerated output onnx 1.18.0 ships within 6e-8).

Usage:  python scripts/gen_conformance_errata.py [--node-tests DIR] [--out DIR]
"""

import argparse
import itertools
import math
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

QLINEARMATMUL_INT8 = [
    "test_qlinearmatmul_2D_int8_float16",
    "test_qlinearmatmul_2D_int8_float32",
    "test_qlinearmatmul_3D_int8_float16",
    "test_qlinearmatmul_3D_int8_float32",
]
AVERAGEPOOL_CEIL_INCLUDE_PAD = [
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
]


def load_case(case_dir):
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    data = os.path.join(case_dir, "test_data_set_0")
    inits = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    inputs = [
        numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f"input_{i}.pb")))
        for i in range(len(names))
    ]
    outputs = [
        onnx.load_tensor(os.path.join(data, f"output_{i}.pb"))
        for i in range(len(model.graph.output))
    ]
    return model, inputs, outputs


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def qlinearmatmul(inputs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    acc = (a.astype(np.int64) - a_zp.astype(np.int64)) @ (
        b.astype(np.int64) - b_zp.astype(np.int64)
    )
    # The scale ratio in the scales' own type (as the suite's data was made), the rest in
    # float64.
    ratio = (a_scale * b_scale / y_scale).astype(np.float64)
    q = np.rint(acc * ratio + y_zp.astype(np.float64))
    info = np.iinfo(y_zp.dtype)
    return [np.clip(q, info.min, info.max).astype(y_zp.dtype)]


def averagepool(node, inputs):
    (x,) = inputs
    a = attrs(node)
    kernel = list(a["kernel_shape"])
    n = len(kernel)
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    pads = list(a.get("pads", [0] * (2 * n)))
    assert a.get("ceil_mode", 0) == 1 and a.get("count_include_pad", 0) == 1
    spatial = x.shape[2:]
    out = []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        size = math.ceil((spatial[i] + pads[i] + pads[n + i] - span) / strides[i]) + 1
        # A window that would start in the end padding is dropped.
        if (size - 1) * strides[i] >= spatial[i] + pads[i]:
            size -= 1
        out.append(size)
    y = np.zeros(x.shape[:2] + tuple(out), dtype=np.float64)
    for o in itertools.product(*[range(s) for s in out]):
        total = np.zeros(x.shape[:2], dtype=np.float64)
        count = 0
        for k in itertools.product(*[range(s) for s in kernel]):
            padded = [o[i] * strides[i] + k[i] * dilations[i] for i in range(n)]
            # Taps past the end padding (possible with ceil_mode) are not part of the
            # padded input: they neither add nor count.
            if any(padded[i] >= spatial[i] + pads[i] + pads[n + i] for i in range(n)):
                continue
            count += 1
            pos = [padded[i] - pads[i] for i in range(n)]
            if all(0 <= pos[i] < spatial[i] for i in range(n)):
                total += x[(slice(None), slice(None), *pos)].astype(np.float64)
        y[(slice(None), slice(None), *o)] = total / count
    return [y.astype(x.dtype)]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--node-tests",
        default=os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/node"),
    )
    parser.add_argument(
        "--out", default=os.path.join(here, "..", "testdata", "conformance", "errata")
    )
    args = parser.parse_args()
    if onnx.__version__ != "1.17.0":
        sys.exit(f"error: the errata are for onnx 1.17.0, found {onnx.__version__}")
    cases = [(c, "qlinearmatmul") for c in QLINEARMATMUL_INT8]
    cases += [(c, "averagepool") for c in AVERAGEPOOL_CEIL_INCLUDE_PAD]
    for name, kind in cases:
        model, inputs, shipped = load_case(os.path.join(args.node_tests, name))
        node = model.graph.node[0]
        fixed = qlinearmatmul(inputs) if kind == "qlinearmatmul" else averagepool(node, inputs)
        out_dir = os.path.join(args.out, name)
        os.makedirs(out_dir, exist_ok=True)
        for i, (arr, old) in enumerate(zip(fixed, shipped)):
            old_arr = numpy_helper.to_array(old)
            assert arr.shape == old_arr.shape and arr.dtype == old_arr.dtype
            if np.issubdtype(arr.dtype, np.floating):
                differ = int(np.sum(~np.isclose(arr, old_arr, rtol=1e-6, atol=0)))
            else:
                differ = int(np.sum(arr != old_arr))
            if kind == "qlinearmatmul":
                # Only saturated elements may differ.
                info = np.iinfo(arr.dtype)
                assert np.all((arr == old_arr) | (arr == info.min) | (arr == info.max))
            assert differ > 0, f"{name}: the shipped output is already right"
            tensor = numpy_helper.from_array(arr, old.name)
            with open(os.path.join(out_dir, f"output_{i}.pb"), "wb") as f:
                f.write(tensor.SerializeToString())
            print(f"{name}: output_{i}: {differ} of {arr.size} elements corrected")


if __name__ == "__main__":
    main()

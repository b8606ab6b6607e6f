#!/usr/bin/env python3
"""Which rule LiteRT's int8 MEAN follows on XNNPACK-run models: every 4-D MEAN over H and W of
every `<name>_int8` case under a zoo folder is run by LiteRT (all tensors kept), each output is
recomputed from the MEAN's own input by two rules, and the outputs each rule misses are counted:

* folded: XNNPACK's form, in f32: `scale = sx / (n * sy)`, `bias = zy - (n * zx) * scale`,
  `y = round_half_even(sum(x) * scale + bias)`, clamped, where sum(x) sums the raw integers;
* chain: what CpuRef and CpuAcc compute for F32-rule models (the dequantize -> mean -> quantize
  chain: the dequantized values summed in f64, divided by n and rounded to f32, divided by sy
  in f32, rounded half to even, zy added, clamped).

    /work/venv-zoo/bin/python scripts/probe_tflite_mean_rule.py /tmp/tflite_zoo
"""

import glob
import os
import sys

import numpy as np
from ai_edge_litert.interpreter import Interpreter

F = np.float32


def folded(s, sx, zx, sy, zy, n):
    scale = F(F(sx) / F(F(n) * F(sy)))
    bias = F(F(zy) - F(F(n * zx) * scale))
    return int(np.clip(np.round(F(F(F(s) * scale) + bias)), -128, 127))


def chain(s, sx, zx, sy, zy, n):
    mean = F((s - n * zx) * float(F(sx)) / n)
    return int(np.clip(np.round(F(mean / F(sy))) + zy, -128, 127))


def main():
    for case in sorted(glob.glob(os.path.join(sys.argv[1], "*_int8"))):
        if not os.path.exists(os.path.join(case, "output_0.npy")):
            continue
        it = Interpreter(model_path=os.path.join(case, "model.tflite"),
                         experimental_preserve_all_tensors=True)
        it.allocate_tensors()
        for k, inp in enumerate(it.get_input_details()):
            it.set_tensor(inp["index"], np.load(os.path.join(case, f"input_{k}.npy")))
        it.invoke()
        tensors = {t["index"]: t for t in it.get_tensor_details()}
        count = off_folded = off_chain = 0
        for op in it._get_ops_details():
            if op["op_name"] != "MEAN":
                continue
            xt, yt = tensors[op["inputs"][0]], tensors[op["outputs"][0]]
            x = it.get_tensor(xt["index"]).astype(np.int64)
            y = it.get_tensor(yt["index"]).astype(np.int64).reshape(-1)
            (sx, zx), (sy, zy) = xt["quantization"], yt["quantization"]
            if x.ndim != 4 or sx == 0:
                continue
            sums = x.sum(axis=(1, 2)).reshape(-1)
            n = x.shape[1] * x.shape[2]
            for s, want in zip(sums, y):
                off_folded += folded(s, sx, zx, sy, zy, n) != want
                off_chain += chain(s, sx, zx, sy, zy, n) != want
                count += 1
        print(f"{os.path.basename(case):36s} MEAN outputs {count:6d}  "
              f"folded off {off_folded:4d}  chain off {off_chain:4d}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Quantize the benchmark suite's transformers as users quantize them for the CPU: ONNX
Runtime's `quantize_dynamic` (DynamicQuantizeLinear on the activations, MatMulInteger with
int8 weights). The models keep their names and metadata, so compare.py times them against
ONNX Runtime on the same quantized file:

    /work/venv-bench/bin/python scripts/bench/make_dynamic_quant_models.py \
        --models /work/bench-models --out /work/bench-models-dyn
    /work/venv-bench/bin/python scripts/bench/compare.py --suite real \
        --models /work/bench-models-dyn --only bert_base,distilbert,gpt2

Outputs of quantized networks differ from ONNX Runtime's by more than compare.py's float
tolerance: a value one rounding away in an f32 layer before a DynamicQuantizeLinear moves
one byte by a quantum, and ONNX Runtime with and without its graph optimizations differs as
much (docs/dynamic-quantization.md).
"""
import argparse
import os

from onnxruntime.quantization import QuantType, quantize_dynamic

MODELS = ["bert_base", "distilbert", "gpt2"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="/work/bench-models", help="make_real_models.py's folder")
    ap.add_argument("--out", default="/work/bench-models-dyn")
    ap.add_argument("--only", default=",".join(MODELS))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.only.split(","):
        src = os.path.join(a.models, f"{name}.onnx")
        if not os.path.exists(src):
            print(f"{name}: {src} not found (make_real_models.py makes it), skipped")
            continue
        dst = os.path.join(a.out, f"{name}.onnx")
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        print(f"{name}: {dst} ({os.path.getsize(dst) / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Max |diff| between every pair of runs of a float TFLite zoo case on its seeded input:
LiteRT's default kernels (XNNPACK) at 1 and 2 threads, its reference (BUILTIN_REF) and
builtin kernels, and backplane's CpuRef and CpuAcc (through `backplane run`). It shows how
far each run is from CpuRef, the run closest to the exact network (docs/tflite.md, "The
accuracy rule").

    python scripts/tflite_float_distances.py ZOO/densenet121_f32 --backplane target/release/backplane

in the virtual environment of scripts/requirements-tflite-zoo.txt (ZOO: gen_tflite_zoo.py's
output folder).
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType


def litert(case: Path, x: np.ndarray, resolver, threads: int) -> np.ndarray:
    it = Interpreter(model_path=str(case / "model.tflite"), num_threads=threads,
                     experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).astype(np.float64)


def backplane(binary: str, case: Path, x_path: Path, name: str, backends: str) -> np.ndarray:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([binary, "run", str(case / "model.tflite"), "--backends", backends,
                        "--input", f"{name}={x_path}", "--output-dir", out],
                       check=True, stdout=subprocess.DEVNULL)
        first = sorted(Path(out).glob("*.npy"))[0]
        return np.load(first).astype(np.float64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", type=Path, help="a zoo case folder (model.tflite, input_0.npy)")
    ap.add_argument("--backplane", default="target/release/backplane")
    args = ap.parse_args()
    x_path = args.case / "input_0.npy"
    x = np.load(x_path)
    name = Interpreter(model_path=str(args.case / "model.tflite")).get_input_details()[0]["name"]
    runs = {
        "xnnpack1": litert(args.case, x, OpResolverType.AUTO, 1),
        "xnnpack2": litert(args.case, x, OpResolverType.AUTO, 2),
        "reference": litert(args.case, x, OpResolverType.BUILTIN_REF, 1),
        "builtin": litert(args.case, x, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, 1),
        "CpuRef": backplane(args.backplane, args.case, x_path, name, "CpuRef"),
        "CpuAcc": backplane(args.backplane, args.case, x_path, name, "CpuAcc,CpuRef"),
    }
    keys = list(runs)
    print(" " * 10 + "".join(f"{k:>11}" for k in keys))
    for a in keys:
        print(f"{a:10}" + "".join(f"{np.abs(runs[a] - runs[b]).max():11.2e}" for b in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())

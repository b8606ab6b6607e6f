#!/usr/bin/env python3
"""Latency of backplane (CpuAcc with CpuRef behind it) against LiteRT (its
default XNNPACK delegate) on the cases of scripts/gen_tflite_zoo.py: the medians of
`--iterations` timed runs after warm-up, alternating the two runtimes per case, on
`--threads` threads (1 by default; LiteRT's num_threads, backplane's --threads).

    /work/venv-zoo/bin/python scripts/bench_tflite_zoo.py /tmp/tflite_zoo \\
        --backplane target/release/backplane [--iterations 20] [--only a,b] [--threads 2]

Prints one markdown row per case: LiteRT ms, backplane ms, their ratio. On a loaded host
the figures are indicative only; compare on a quiet one.
"""

import argparse
import pathlib
import re
import subprocess
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType


def litert_ms(case, iterations, threads):
    """LiteRT's median in ms, and a note where XNNPACK refused the model (then LiteRT's
    builtin kernels without delegates are timed)."""
    note = ""
    try:
        interp = Interpreter(model_path=str(case / "model.tflite"), num_threads=threads)
        interp.allocate_tensors()
    except RuntimeError:
        note = " (no XNNPACK)"
        interp = Interpreter(
            model_path=str(case / "model.tflite"), num_threads=threads,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
        interp.allocate_tensors()
    for k, d in enumerate(interp.get_input_details()):
        interp.set_tensor(d["index"], np.load(case / f"input_{k}.npy"))
    for _ in range(3):
        interp.invoke()
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        interp.invoke()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3, note


def backplane_ms(case, binary, iterations, threads):
    r = subprocess.run(
        [binary, "bench", str(case / "model.tflite"), "--threads", str(threads), "--iterations",
         str(iterations), "--warmup", "3", "--warmup-time", "0", "--quiet", "--generate", "random"],
        capture_output=True, text=True,
    )
    m = re.search(r"median ([0-9.]+) ms", r.stdout)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--backplane", default="target/release/backplane")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    only = set(args.only.split(",")) - {""}
    t = f"{args.threads} thread" + ("s" if args.threads > 1 else "")
    print(f"| case | LiteRT {t} (ms) | backplane {t} (ms) | ratio |")
    print("| --- | --- | --- | --- |")
    for case in sorted(p for p in pathlib.Path(args.root).iterdir()
                       if (p / "output_0.npy").is_file()):
        if only and case.name not in only:
            continue
        lite, note = litert_ms(case, args.iterations, args.threads)
        ours = backplane_ms(case, args.backplane, args.iterations, args.threads)
        ratio = f"{ours / lite:.2f}" if ours else "-"
        ours_s = f"{ours:.3f}" if ours else "does not run"
        print(f"| {case.name} | {lite:.3f}{note} | {ours_s} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()

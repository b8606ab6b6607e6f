#!/usr/bin/env python3
"""A/B two backplane binaries on small (one-layer) models by the minimum and the median
latency of `backplane bench`, in alternating rounds (A, B, B, A, ...), in one run.

For each model and binary it prints every round's minimum and median, then the lowest
minimum and the lowest median over the rounds and B / A of each, with the spread of the
round medians ((max - min) / min) as the noise. The figures are ratios of one run on a
possibly shared machine, not speed claims. Models: `conv_layer.py` writes one-layer ones.

Usage: layer_ab.py --a OLD --b NEW MODEL.onnx [MODEL.onnx ...] [--threads 1]
                   [--rounds 4] [--iterations 300] [--warmup 20]
"""

import argparse
import os
import re
import subprocess

MIN = re.compile(r"min ([0-9.]+) ms")
MEDIAN = re.compile(r"median ([0-9.]+) ms")


def bench(binary, model, threads, iterations, warmup):
    """One `backplane bench` process: (min ms, median ms)."""
    out = subprocess.run(
        [binary, "bench", model, "--generate", "random", "--threads", str(threads),
         "--iterations", str(iterations), "--warmup", str(warmup)],
        capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    lo, med = MIN.search(text), MEDIAN.search(text)
    if out.returncode != 0 or lo is None or med is None:
        raise RuntimeError(f"{binary} bench {model} failed: {text.strip()[-400:]}")
    return float(lo.group(1)), float(med.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    print("model | A min / median ms | B min / median ms | B/A min | B/A median | noise A / B")
    for model in a.models:
        runs = {"A": [], "B": []}
        for r in range(a.rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for which in order:
                binary = a.a if which == "A" else a.b
                runs[which].append(bench(binary, model, a.threads, a.iterations, a.warmup))
        best = {k: (min(v[0] for v in runs[k]), min(v[1] for v in runs[k])) for k in runs}
        noise = {k: (max(v[1] for v in runs[k]) - best[k][1]) / best[k][1] for k in runs}
        rounds = " ".join(f"{k}{i}:{lo:.3f}/{med:.3f}" for k in runs
                          for i, (lo, med) in enumerate(runs[k]))
        print(f"{os.path.basename(model)} | {best['A'][0]:.3f} / {best['A'][1]:.3f} | "
              f"{best['B'][0]:.3f} / {best['B'][1]:.3f} | {best['B'][0] / best['A'][0]:.2f} | "
              f"{best['B'][1] / best['A'][1]:.2f} | {noise['A']:.0%} / {noise['B']:.0%}")
        print(f"  rounds (min/median): {rounds}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A/B two backplane binaries on the same models, in one run: rounds alternate A and B
(A, B, B, A, ...) per model and thread count, each round one `backplane bench` process
(median latency over --iterations after --warmup), and the table gives per cell the lowest
round median, the noise (spread of the round medians, (max - min) / min), the ratio B / A,
and each binary's peak resident memory (the `peak memory` line of `backplane bench`, the
largest over its rounds).

Usage: ab.py --a OLD_BINARY --b NEW_BINARY MODEL.onnx [MODEL.onnx ...]
             [--threads 1,2] [--rounds 3] [--iterations 5] [--warmup 1] [--markdown FILE]

Meant for a machine shared with other work: alternating rounds spread the load over both
binaries alike, but the figures are ratios of one run, not speed claims.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

MEDIAN = re.compile(r"median ([0-9.]+) ms")
PEAK = re.compile(r"peak memory: ([0-9.]+) MiB")


def bench(binary, model, threads, iterations, warmup):
    """One `backplane bench` process: (median ms, peak MiB)."""
    cmd = [
        binary, "bench", model, "--generate", "random", "--threads", str(threads),
        "--iterations", str(iterations), "--warmup", str(warmup), "--quiet",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    median, peak = MEDIAN.search(text), PEAK.search(text)
    if out.returncode != 0 or median is None:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {text.strip()[-400:]}")
    return float(median.group(1)), float(peak.group(1)) if peak else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--a", required=True, help="the baseline binary")
    p.add_argument("--b", required=True, help="the binary under test")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--markdown")
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    lines = [
        "| model | thr | A ms | B ms | B / A | noise A / B | RSS A MiB | RSS B MiB |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for model in args.models:
        name = os.path.splitext(os.path.basename(model))[0]
        for t in threads:
            runs = {"a": [], "b": []}
            peaks = {"a": 0.0, "b": 0.0}
            for r in range(args.rounds):
                order = ("a", "b") if r % 2 == 0 else ("b", "a")
                for which in order:
                    binary = args.a if which == "a" else args.b
                    ms, peak = bench(binary, model, t, args.iterations, args.warmup)
                    runs[which].append(ms)
                    peaks[which] = max(peaks[which], peak)
            a, b = min(runs["a"]), min(runs["b"])
            noise = [(max(v) - min(v)) / min(v) for v in (runs["a"], runs["b"])]
            row = (
                f"| {name} | {t} | {a:.1f} | {b:.1f} | {b / a:.2f} | "
                f"{noise[0]:.0%} / {noise[1]:.0%} | {peaks['a']:.0f} | {peaks['b']:.0f} |"
            )
            lines.append(row)
            print(row, flush=True)
            print(f"    rounds A {runs['a']} B {runs['b']} median A {statistics.median(runs['a']):.1f}",
                  file=sys.stderr, flush=True)
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()

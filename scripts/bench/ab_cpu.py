#!/usr/bin/env python3
"""A/B two backplane binaries by the CPU time of their processes, in one run.

On a machine shared with other work a run's wall time counts the minutes another process
holds the core; its CPU time (user + sys of the child, from `getrusage`) does not, though
cache and memory contention still reach it. Each round runs, for A then B (B then A on odd
rounds), `backplane bench MODEL --iterations N` and `--iterations 1` and takes the
difference of their CPU times over N - 1: the CPU time of one execution, loading and
packing removed. The table gives per cell the median over rounds, the spread of the round
values ((max - min) / min) and B / A; with more than one thread the CPU time sums the
threads (it says how much work was done, not how soon it ended), so wall medians from the
same processes are given beside it.

Usage: ab_cpu.py --a OLD --b NEW MODEL.onnx [MODEL.onnx ...] [--threads 1,2] [--rounds 4]
                 [--iterations 4]
"""

import argparse
import os
import re
import resource
import statistics
import subprocess

MEDIAN = re.compile(r"median ([0-9.]+) ms")


def cpu_run(binary, model, threads, iterations):
    """(CPU seconds of one `backplane bench` process, its median wall ms)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [binary, "bench", model, "--generate", "random", "--threads", str(threads),
         "--iterations", str(iterations), "--warmup", "0", "--quiet"],
        capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = out.stdout + out.stderr
    median = MEDIAN.search(text)
    if out.returncode != 0 or median is None:
        raise RuntimeError(f"{binary} bench {model} failed: {text.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, float(median.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--threads", default="1")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iterations", type=int, default=4)
    args = p.parse_args()
    n = max(args.iterations, 2)
    print("| model | thr | A CPU ms | B CPU ms | B / A | spread A / B | A wall ms | B wall ms |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for model in args.models:
        for threads in [int(t) for t in args.threads.split(",")]:
            cpu = {"a": [], "b": []}
            wall = {"a": [], "b": []}
            for r in range(args.rounds):
                for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                    binary = getattr(args, side)
                    many, med = cpu_run(binary, model, threads, n)
                    one, _ = cpu_run(binary, model, threads, 1)
                    cpu[side].append(max(many - one, 0.0) / (n - 1) * 1e3)
                    wall[side].append(med)
            ca, cb = statistics.median(cpu["a"]), statistics.median(cpu["b"])

            def spread(v):
                return f"{(max(v) - min(v)) / min(v) * 100:.0f}%" if min(v) > 0 else "-"

            print(f"| {os.path.basename(model)} | {threads} | {ca:.1f} | {cb:.1f} | "
                  f"{cb / ca:.2f} | {spread(cpu['a'])} / {spread(cpu['b'])} | "
                  f"{statistics.median(wall['a']):.1f} | {statistics.median(wall['b']):.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()

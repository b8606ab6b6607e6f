#!/usr/bin/env python3
"""Per-layer thread scaling of one backplane binary: each layer's time at 1 thread over its
time at N threads, per layer and per op kind, from the same run.

Runs `backplane bench --profile` at 1 and N threads in alternating rounds (so a slow minute
of a shared machine falls on both) and keeps each layer's median over all executions of all
rounds. Prints the op kinds (time at 1 thread, at N, speedup, the time lost against a
perfect split: t_N - t_1/N) and the layers that lose the most, with their output shapes
(from `backplane inspect`). A speedup near 1 means the layer ran on one thread; below 1,
the split cost more than it gave.

Usage:
  python3 scripts/bench/thread_scaling.py MODEL [--threads N] [--rounds R] [--iterations I]
      [--top K] [--backplane target/release/backplane] [--markdown]
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def inspect_layers(bp, model):
    """Layer name -> (op, output shape) from `backplane inspect`."""
    out = subprocess.run([bp, "inspect", model], capture_output=True, text=True, check=True).stdout
    layers = {}
    started = False
    for line in out.splitlines():
        if line.startswith("layers after optimization"):
            started = True
            continue
        if started:
            if not line.startswith("  "):
                break
            m = re.match(r"\s+(\S+)\s+(\S+)\s+(\S+)\s+->\s+(.*)$", line)
            if m:
                layers[m.group(1)] = (m.group(2), m.group(4).strip())
    return layers


def profile(bp, model, threads, iterations, warmup):
    """Layer name -> list of durations (ms) over the executions of one bench run."""
    with tempfile.NamedTemporaryFile(prefix="thread_scaling_", suffix=".json", delete=False) as f:
        path = f.name
    try:
        subprocess.run(
            [bp, "bench", model, "--generate", "random", "--threads", str(threads),
             "--iterations", str(iterations), "--warmup", str(warmup), "--profile", path],
            capture_output=True, text=True, check=True)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    times = collections.defaultdict(list)
    order = []
    for e in events:
        if e.get("ph") != "X":
            continue
        name = e["name"]
        if name not in times:
            order.append(name)
        times[name].append(e["dur"] / 1000.0)
    return times, order


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--backplane", default=os.path.join(ROOT, "target/release/backplane"))
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    a = ap.parse_args()

    info = inspect_layers(a.backplane, a.model)
    t1 = collections.defaultdict(list)
    tn = collections.defaultdict(list)
    order = []
    with open("/proc/loadavg") as f:
        load_start = f.read().split()[0]
    for _ in range(a.rounds):
        for threads, acc in ((1, t1), (a.threads, tn)):
            times, o = profile(a.backplane, a.model, threads, a.iterations, a.warmup)
            order = order or o
            for k, v in times.items():
                acc[k].extend(v)
    with open("/proc/loadavg") as f:
        load_end = f.read().split()[0]

    rows = []
    for name in order:
        if name not in t1 or name not in tn:
            continue
        a1, an = statistics.median(t1[name]), statistics.median(tn[name])
        op, shape = info.get(name, ("?", "?"))
        rows.append((name, op, shape, a1, an))
    total1 = sum(r[3] for r in rows)
    totaln = sum(r[4] for r in rows)
    n = a.threads
    model = os.path.basename(a.model).removesuffix(".onnx")
    print(f"{model}: {total1:.2f} ms at 1 thread, {totaln:.2f} ms at {n} "
          f"(speedup {total1 / max(totaln, 1e-9):.2f}; sums of per-layer medians, {a.rounds} "
          f"alternating rounds x {a.iterations} executions; load average {load_start} -> {load_end})")

    kinds = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for _, op, _, a1, an in rows:
        k = kinds[op]
        k[0] += 1
        k[1] += a1
        k[2] += an
    print()
    if a.markdown:
        print(f"| op kind | layers | 1t ms | {n}t ms | speedup | lost ms | share of {n}t |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    else:
        print(f"{'op kind':<24} {'layers':>6} {'1t ms':>9} {f'{n}t ms':>9} {'speedup':>7} {'lost ms':>8} {'share':>6}")
    for op, (c, a1, an) in sorted(kinds.items(), key=lambda kv: -(kv[1][2] - kv[1][1] / n)):
        lost = an - a1 / n
        sp = a1 / an if an > 0 else float("nan")
        share = 100 * an / max(totaln, 1e-9)
        if a.markdown:
            print(f"| {op} | {c} | {a1:.2f} | {an:.2f} | {sp:.2f} | {lost:.2f} | {share:.0f}% |")
        else:
            print(f"{op:<24} {c:>6} {a1:>9.3f} {an:>9.3f} {sp:>7.2f} {lost:>8.3f} {share:>5.0f}%")

    print()
    worst = sorted(rows, key=lambda r: -(r[4] - r[3] / n))[: a.top]
    if a.markdown:
        print(f"| layer | op | output | 1t ms | {n}t ms | speedup |")
        print("|---|---|---|---:|---:|---:|")
    for name, op, shape, a1, an in worst:
        short = name if len(name) <= 60 else "…" + name[-59:]
        if a.markdown:
            print(f"| {short} | {op} | {shape} | {a1:.3f} | {an:.3f} | {a1 / an:.2f} |")
        else:
            print(f"{short:<60} {op:<18} {shape:<22} {a1:>8.3f} {an:>8.3f} {a1 / an:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

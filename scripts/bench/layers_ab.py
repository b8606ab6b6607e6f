#!/usr/bin/env python3
"""Per-layer A/B of two backplane configurations (release binaries and/or CpuAcc options).

The two run in alternating rounds (A, B, A, B, ...), each round `backplane bench --profile`
of the model; each layer keeps its fastest time per configuration. On a machine shared with
other work only per-layer differences well beyond the spread of the printed round sums mean
anything. Example (an old binary copied aside before rebuilding):

    layers_ab.py MODEL --a /tmp/old/backplane --b target/release/backplane --rounds 3
    layers_ab.py MODEL --b-option CpuAcc:winograd=off
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layers import ROOT, backplane_layers  # noqa: E402


def main():
    default = os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "backplane")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--a", default=default, help="binary A (default: the release build)")
    ap.add_argument("--b", default=None, help="binary B (default: binary A)")
    ap.add_argument("--a-option", action="append", default=[], metavar="BACKEND:KEY=VALUE")
    ap.add_argument("--b-option", action="append", default=[], metavar="BACKEND:KEY=VALUE")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=20, help="layers with the largest differences")
    args = ap.parse_args()
    configs = {"A": (args.a, args.a_option), "B": (args.b or args.a, args.b_option)}
    best = {"A": {}, "B": {}}
    sums = {"A": [], "B": []}
    for _ in range(args.rounds):
        for key, (exe, options) in configs.items():
            times = backplane_layers(exe, args.model, args.threads, args.iterations, options)
            sums[key].append(sum(times.values()))
            for name, us in times.items():
                best[key][name] = min(best[key].get(name, float("inf")), us)
    sa, sb = sum(best["A"].values()), sum(best["B"].values())
    print(f"{args.model}, {args.threads} thread(s): sum of fastest layers A {sa / 1000:.2f} ms, "
          f"B {sb / 1000:.2f} ms, B/A {sb / sa:.3f}")
    print("round sums (ms) A:", [round(s / 1000, 2) for s in sums["A"]],
          "B:", [round(s / 1000, 2) for s in sums["B"]])
    print(f"{'A ms':>8} {'B ms':>8}  layer")
    names = set(best["A"]) | set(best["B"])
    rows = sorted(names, key=lambda n: -abs(best["B"].get(n, 0) - best["A"].get(n, 0)))
    for name in rows[: args.top]:
        a, b = best["A"].get(name, 0), best["B"].get(name, 0)
        print(f"{a / 1000:8.3f} {b / 1000:8.3f}  {name[:100]}")


if __name__ == "__main__":
    main()

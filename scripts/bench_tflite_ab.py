#!/usr/bin/env python3
"""A/B timing of TFLite models on a loaded machine: backplane builds and LiteRT, in rounds.

Usage (in the environment of gen_tflite_models.py, for LiteRT):
    /work/venv-tflite/bin/python scripts/bench_tflite_ab.py --rounds 5 --iterations 50 \
        --binary new=target/release/backplane [--binary old=/tmp/old/backplane] \
        [--binary "nchw=target/release/backplane --backend-option CpuAcc:nhwc=off"] \
        DIR_A/model.tflite DIR_B/model.tflite

A binary's PATH may be followed by extra arguments for `backplane bench` (split at spaces):
the same build with another backend option is then one more configuration of each round.

Every round runs every (binary, model, threads) configuration once (`backplane bench MODEL
--generate random --iterations N --warmup 5 --threads T --quiet`, which prints the median
of its N executions) and LiteRT on the same model (`Interpreter(num_threads=T)`, median of
N `invoke()`s after 5 warm-ups), the order shuffled per round. Printed per configuration:
the median over rounds of the per-round medians, and the lowest and highest round median
(their spread is the noise of the machine's load). Numbers from one run of this script are
comparable with each other only.
"""

import argparse
import random
import re
import statistics
import subprocess
import time

import numpy as np

MEDIAN = re.compile(r"median ([0-9.]+) ms")


def backplane(binary, model, threads, iterations):
    binary, *extra = binary.split()
    out = subprocess.run(
        [binary, "bench", model, *extra, "--generate", "random", "--iterations", str(iterations),
         "--warmup", "5", "--threads", str(threads), "--quiet"],
        capture_output=True, text=True, check=True,
    ).stdout
    m = MEDIAN.search(out)
    if not m:
        raise RuntimeError(f"no median in: {out}")
    return float(m.group(1))


def litert(model, threads, iterations):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=model, num_threads=threads)
    interp.allocate_tensors()
    d = interp.get_input_details()[0]
    interp.set_tensor(d["index"], np.load(model.replace("model.tflite", "input_0.npy")))
    for _ in range(5):
        interp.invoke()
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        interp.invoke()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--binary", action="append", default=[], help="LABEL=PATH")
    ap.add_argument("--no-litert", action="store_true")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    binaries = [b.split("=", 1) for b in a.binary]
    threads = [int(t) for t in a.threads.split(",")]
    configs = []
    for model in a.models:
        for t in threads:
            for label, path in binaries:
                configs.append((label, path, model, t))
            if not a.no_litert:
                configs.append(("LiteRT", None, model, t))
    results = {c: [] for c in configs}
    for r in range(a.rounds):
        order = list(configs)
        random.Random(r).shuffle(order)
        for c in order:
            label, path, model, t = c
            if path is None:
                ms = litert(model, t, a.iterations)
            else:
                ms = backplane(path, model, t, a.iterations)
            results[c].append(ms)
    print(f"{a.rounds} rounds x {a.iterations} executions; per configuration: median of the "
          "round medians (lowest - highest round median)")
    for c in configs:
        label, _, model, t = c
        v = sorted(results[c])
        name = model.split("/")[-2]
        print(f"{name:24} {label:10} threads={t}: {statistics.median(v):8.3f} ms "
              f"({v[0]:.3f} - {v[-1]:.3f})")


if __name__ == "__main__":
    main()

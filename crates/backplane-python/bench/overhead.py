"""The Python side of the overhead bench: session.run on the digits model at batch 1, in a
loop, against the Rust loop of examples/rust_loop.rs on the same input.

    cargo build --release -p backplane-python --example rust_loop
    python crates/backplane-python/bench/overhead.py [ITERATIONS] --rust target/release/examples/rust_loop [--tiny]

Prints the mean time per call of session.run and, with --rust, the Rust loop's figures and
the difference (the Python binding's overhead per call). --tiny runs a one-layer model (Relu
on 64 floats) instead, where the network's own time is small, to isolate the overhead.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import backplane

DIGITS = Path(__file__).resolve().parents[3] / "models" / "digits"


def mean_us(fn, iterations: int) -> float:
    for _ in range(iterations // 10):
        fn()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return (time.perf_counter() - start) * 1e6 / iterations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("iterations", type=int, nargs="?", default=20_000)
    parser.add_argument("--rust", help="the rust_loop example binary, to run for comparison")
    parser.add_argument("--repeats", type=int, default=10, help="best of this many rounds")
    parser.add_argument("--tiny", action="store_true", help="a one-layer model (Relu on 64 floats)")
    args = parser.parse_args()

    model, extra = DIGITS / "model.onnx", []
    feed = {"input": np.load(DIGITS / "samples" / "digit_3.npy")}
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import onnx_builder as ob

        model = Path(tempfile.mkdtemp()) / "tiny.onnx"
        model.write_bytes(
            ob.model(
                [ob.node("Relu", ["x"], ["y"])],
                [ob.value("x", ob.tensor_type(ob.FLOAT, [1, 64]))],
                [ob.value("y", ob.tensor_type(ob.FLOAT, [1, 64]))],
            )
        )
        extra = [str(model), "x", "1x64"]
        feed = {"x": np.ones((1, 64), np.float32)}
    session = backplane.InferenceSession(str(model))
    run = session.run

    def rust_round() -> dict[str, float]:
        out = subprocess.run(
            [args.rust, str(args.iterations), *extra], capture_output=True, text=True, check=True
        ).stdout
        figures = {}
        for line in out.splitlines():
            if "us/call" in line:
                name, value = line.rsplit(":", 1)
                figures[name] = float(value.split()[0])
        return figures

    # Rounds alternate between Python and Rust, and each keeps its best: on a busy machine
    # the best round is the one least disturbed.
    python = float("inf")
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        python = min(python, mean_us(lambda: run(None, feed), args.iterations))
        if args.rust:
            for name, us in rust_round().items():
                best[name] = min(best.get(name, us), us)
    print(f"session.run:                  {python:.2f} us/call (best of {args.repeats})")
    for name, us in best.items():
        print(f"{name + ':':<30}{us:.2f} us/call (best of {args.repeats})")
    if best:
        print(f"overhead per call against Runtime::execute: {python - best['Runtime::execute']:.2f} us")
        views = best["LoadedNetwork::execute_views"]
        print(f"overhead per call against execute_views:    {python - views:.2f} us")

if __name__ == "__main__":
    main()

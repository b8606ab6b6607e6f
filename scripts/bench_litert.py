#!/usr/bin/env python3
"""Times LiteRT (its default XNNPACK delegate) on TFLite models, 1 and 2 threads.

Usage (in the environment of gen_tflite_models.py):
    /work/venv-tflite/bin/python scripts/bench_litert.py DIR/model.tflite [...]
Each model's input is DIR/input_0.npy (as gen_tflite_models.py writes it); prints the
minimum, median and 90th percentile of 50 timed invocations after 5 warm-up ones.
"""

import sys
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter


def main():
    for path in sys.argv[1:]:
        for threads in (1, 2):
            interp = Interpreter(model_path=path, num_threads=threads)
            interp.allocate_tensors()
            d = interp.get_input_details()[0]
            interp.set_tensor(d["index"], np.load(path.replace("model.tflite", "input_0.npy")))
            for _ in range(5):
                interp.invoke()
            times = []
            for _ in range(50):
                t = time.perf_counter()
                interp.invoke()
                times.append(time.perf_counter() - t)
            times.sort()
            name = path.split("/")[-2]
            print(
                f"{name} threads={threads}: min {times[0] * 1e3:.3f} ms, "
                f"median {times[25] * 1e3:.3f} ms, p90 {times[45] * 1e3:.3f} ms"
            )


if __name__ == "__main__":
    main()

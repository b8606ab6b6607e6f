#!/usr/bin/env python3
"""The int8 aims of issue 31 in one run: backplane int8 against backplane f32 on the same
network, against LiteRT int8 (its default XNNPACK delegate) and ONNX Runtime's QDQ export.
Not part of CI (needs /work/venv-bench for ONNX Runtime and /work/venv-tflite for LiteRT).

    /work/venv-bench/bin/python scripts/bench_int8_aims.py --binary [LABEL=]BIN ... \
        --tflite-dir DIR [--tflite-dir DIR ...] [--ort-dir DIR ...] \
        [--rounds 6] [--iterations 40] [--threads 1,2]

Each --tflite-dir holds case folders `<name>_int8/model.tflite`, each timed with its
`<name>_f32/model.tflite` where there is one (gen_tflite_models.py --big, or --big-only
--big-size 224 --big-alpha 1.0: `mobilenet_v2_int8` and `mobilenet_v2_f32`; the Keras cases of
gen_tflite_zoo.py); each --ort-dir
the `qdq.onnx` and `f32.onnx` of bench_ort_int8.py make. Every configuration runs once per
round, the order shuffled per round, each in its own process: backplane through `backplane
bench --iterations N --warmup 5 --threads T` (wall median and minimum of the N) and a
second `--iterations 1` process, whose CPU time (user + sys, getrusage) is taken from the
first's to give CPU ms per execution; LiteRT and ONNX Runtime in a child interpreter that
times N calls after 5 warm-ups (wall median, minimum, and process CPU time over the N).
CPU time sums the threads (work done, not latency); it leaves out the time other processes
hold the cores, which wall time on a loaded machine does not.

Printed per configuration: median of the round medians (lowest - highest), the lowest
minimum, and the median CPU ms per execution; then the ratios the aims name.
"""

import argparse
import os
import random
import re
import resource
import statistics
import subprocess

MEDIAN = re.compile(r"median ([0-9.]+) ms")
MIN = re.compile(r"min ([0-9.]+) ms")
# The interpreters that hold LiteRT and ONNX Runtime (environment variables override them,
# e.g. on a machine with one Python for both). A peer whose import fails is left out.
TFLITE_PY = os.environ.get("TFLITE_PY", "/work/venv-tflite/bin/python")
BENCH_PY = os.environ.get("BENCH_PY", "/work/venv-bench/bin/python")

CHILD = """
import sys, time, statistics
import numpy as np
kind, path, threads, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == "litert":
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=path, num_threads=threads)
    it.allocate_tensors()
    d = it.get_input_details()[0]
    it.set_tensor(d["index"], np.load(path.replace("model.tflite", "input_0.npy")))
    call = it.invoke
else:
    import os, onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.load(os.path.join(os.path.dirname(path), "input_0.npy"))
    name = s.get_inputs()[0].name
    call = lambda: s.run(None, {name: x})
for _ in range(5):
    call()
ts = []
c0 = time.process_time()
for _ in range(n):
    t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
cpu = (time.process_time() - c0) / n
print(statistics.median(ts) * 1e3, min(ts) * 1e3, cpu * 1e3)
"""


def cpu_of(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def backplane(binary, model, threads, n):
    # --warmup-time 0: five warm-ups like the peers, and no time-based warm-up inside the
    # one-execution process whose CPU time is subtracted.
    base = [binary, "bench", model, "--generate", "random", "--warmup", "5", "--warmup-time", "0",
            "--threads", str(threads), "--quiet"]
    out, cpu_n = cpu_of(base + ["--iterations", str(n)])
    _, cpu_1 = cpu_of(base + ["--iterations", "1"])
    med, mn = MEDIAN.search(out), MIN.search(out)
    if not med or not mn:
        raise RuntimeError(f"no median in: {out}")
    return float(med.group(1)), float(mn.group(1)), (cpu_n - cpu_1) / (n - 1) * 1e3


def child(kind, model, threads, n):
    py = TFLITE_PY if kind == "litert" else BENCH_PY
    out = subprocess.run([py, "-c", CHILD, kind, model, str(threads), str(n)],
                         capture_output=True, text=True, check=True).stdout
    med, mn, cpu = (float(v) for v in out.strip().splitlines()[-1].split())
    return med, mn, cpu


def peer_works(kind):
    """True when the peer's interpreter imports it."""
    py = TFLITE_PY if kind == "litert" else BENCH_PY
    module = "ai_edge_litert.interpreter" if kind == "litert" else "onnxruntime"
    try:
        r = subprocess.run([py, "-c", f"import {module}"], capture_output=True)
    except OSError:
        return False
    return r.returncode == 0


def tflite_pairs(d):
    """The `<name>_int8` / `<name>_f32` case folders of `d` that hold a model.tflite each
    (the f32 one may be missing): (name, int8 model, f32 model or None)."""
    pairs = []
    for entry in sorted(os.listdir(d)):
        if not entry.endswith("_int8"):
            continue
        name = entry[: -len("_int8")]
        int8 = os.path.join(d, entry, "model.tflite")
        f32 = os.path.join(d, f"{name}_f32", "model.tflite")
        if os.path.isfile(int8):
            pairs.append((name, int8, f32 if os.path.isfile(f32) else None))
    return pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", default=[], help="PATH or LABEL=PATH")
    ap.add_argument("--tflite-dir", action="append", default=[])
    ap.add_argument("--ort-dir", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    binaries = dict(b.split("=", 1) if "=" in b else ("backplane", b) for b in a.binary)
    litert, onnxrt = peer_works("litert"), peer_works("ort")
    if not litert:
        print(f"LiteRT left out: {TFLITE_PY} cannot import ai_edge_litert")
    if not onnxrt:
        print(f"ONNX Runtime left out: {BENCH_PY} cannot import onnxruntime")
    configs = []
    for t in (int(v) for v in a.threads.split(",")):
        for d in a.tflite_dir:
            tag = os.path.basename(os.path.normpath(d))
            for name, int8, f32 in tflite_pairs(d):
                for form, m in [("int8", int8), ("f32", f32)]:
                    if m is None:
                        continue
                    for label in binaries:
                        configs.append((label, f"{tag}/{name} tflite {form}", m, t))
                    if litert:
                        configs.append(("LiteRT", f"{tag}/{name} tflite {form}", m, t))
        for d in a.ort_dir:
            tag = os.path.basename(os.path.normpath(d))
            for form in ["qdq", "f32"]:
                m = os.path.join(d, f"{form}.onnx")
                if not os.path.isfile(m):
                    continue
                for label in binaries:
                    configs.append((label, f"{tag} onnx {form}", m, t))
                if onnxrt:
                    configs.append(("ORT", f"{tag} onnx {form}", m, t))
    res = {c: [] for c in configs}
    for r in range(a.rounds):
        order = list(configs)
        random.Random(r).shuffle(order)
        for c in order:
            who, _, model, t = c
            if who in binaries:
                res[c].append(backplane(binaries[who], model, t, a.iterations))
            else:
                res[c].append(child("litert" if who == "LiteRT" else "ort", model, t,
                                    a.iterations))
    load = os.getloadavg()
    print(f"{a.rounds} rounds x {a.iterations} executions, order shuffled per round; load "
          f"average at the end {load[0]:.1f}")
    print("who        model                                    thr  wall median (range)      "
          "wall min   CPU/exec")
    summary = {}
    for c in configs:
        who, name, _, t = c
        meds = sorted(v[0] for v in res[c])
        mn = min(v[1] for v in res[c])
        cpu = statistics.median(v[2] for v in res[c])
        summary[(who, name, t)] = (statistics.median(meds), mn, cpu)
        print(f"{who:10} {name:40} {t:3}  {statistics.median(meds):7.3f} ms "
              f"({meds[0]:.3f} - {meds[-1]:.3f})  {mn:7.3f}  {cpu:7.3f}")
    print("ratios (median / min / CPU):")
    for (who, name, t), v in summary.items():
        if who not in binaries or not (name.endswith("int8") or name.endswith("qdq")):
            continue
        f32 = summary.get((who, name.rsplit(" ", 1)[0] + " f32", t))
        peer = summary.get(("LiteRT" if "tflite" in name else "ORT", name, t))
        parts = []
        if f32:
            parts.append("f32/int8 " + " / ".join(f"{f / i:.2f}" for f, i in zip(f32, v)))
        if peer:
            parts.append("int8/peer " + " / ".join(f"{i / p:.2f}" for i, p in zip(v, peer)))
        print(f"  {who} {name} threads={t}: " + "; ".join(parts))


if __name__ == "__main__":
    main()

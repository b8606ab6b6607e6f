#!/usr/bin/env python3
"""Compare backplane (CpuAcc, falling back to CpuRef), ONNX Runtime and tract.

For every model (the benchmark models from make_models.py plus the shipped digits model) and
thread count, in the same run: median latency of each runtime, the ratios (also of the
fastest single executions: the steadiest figure on a machine shared with other work), achieved GFLOP/s
(multiply-adds of Conv/MatMul/Gemm x 2 / median latency), the max abs difference of
backplane's outputs from ONNX Runtime's, and peak resident memory of one `backplane run`
process vs one ONNX Runtime process.

Usage: compare.py [--iterations N] [--rounds R] [--threads 1,2] [--models DIR] [--backplane PATH]

--rounds R repeats each measurement R times, alternating runtimes, and keeps each runtime's
lowest median: on a shared machine, where other work comes and goes, that compares the
runtimes at their least disturbed rather than whichever happened to run during a busy spell.
Needs a release build: cargo build --release -p backplane-cli (set CARGO_TARGET_DIR to match
--backplane). tract is used if `import tract` works (pip install tract); it runs with its own
default threading (the Python API has no thread setting).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper, shape_inference

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def flops(path):
    """2 x multiply-adds of Conv, MatMul and Gemm, from ONNX shape inference."""
    m = shape_inference.infer_shapes(onnx.load(path))
    g = m.graph
    shapes = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    for init in g.initializer:
        shapes[init.name] = list(init.dims)
    total = 0
    for n in g.node:
        if n.op_type == "Conv":
            w, y = shapes.get(n.input[1]), shapes.get(n.output[0])
            if w and y:
                total += 2 * int(np.prod(y)) * int(np.prod(w[1:]))
        elif n.op_type == "MatMul":
            a, y = shapes.get(n.input[0]), shapes.get(n.output[0])
            if a and y:
                total += 2 * int(np.prod(y)) * a[-1]
        elif n.op_type == "Gemm":
            a, y = shapes.get(n.input[0]), shapes.get(n.output[0])
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            if a and y:
                total += 2 * int(np.prod(y)) * (a[0] if trans_a else a[1])
    return total


def inputs_for(path, seed=0):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        feeds[i.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    return feeds


def time_ort(path, feeds, threads, iterations):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        out = sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3, out, float(np.min(times)) * 1e3


def time_tract(path, feeds, iterations):
    try:
        import tract
    except ImportError:
        return None
    try:
        model = tract.onnx().load(path)
        for i, (name, v) in enumerate(feeds.items()):
            model.set_input_fact(i, f"{','.join(str(d) for d in v.shape)},f32")
        runnable = model.into_model().into_runnable()
        args = list(feeds.values())
        for _ in range(5):
            runnable.run(args)
        times = []
        for _ in range(iterations):
            t = time.perf_counter()
            runnable.run(args)
            times.append(time.perf_counter() - t)
        return float(np.median(times)) * 1e3
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"  tract failed on {os.path.basename(path)}: {e}", file=sys.stderr)
        return None


def run_backplane(exe, path, feeds, threads, iterations, io_dir):
    args = [exe, "run", path, "--backends", "CpuAcc,CpuRef", "--iterations", str(iterations), "--json",
            "--backend-option", f"CpuAcc:threads={threads}"]
    for name, v in feeds.items():
        f = os.path.join(io_dir, f"{name}.npy")
        np.save(f, v)
        args += ["--input", f"{name}={f}"]
        if any(d == 0 for d in v.shape):
            continue
        args += ["--input-shape", f"{name}={'x'.join(str(d) for d in v.shape)}"]
    timed = ["/usr/bin/time", "-f", "MAXRSS_KB=%M"] + args if os.path.exists("/usr/bin/time") else args
    p = subprocess.run(timed, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"backplane failed: {p.stderr.strip()[-2000:]}")
    doc = json.loads(p.stdout)
    rss = None
    for line in p.stderr.splitlines():
        if line.startswith("MAXRSS_KB="):
            rss = int(line.split("=")[1]) / 1024
    outs = [np.array(o["values"], dtype=np.float64).reshape(o["shape"]) for o in doc["outputs"]]
    lat = doc["latency_ms"]
    return lat["median"], outs, doc["backends"], rss, lat["min"]


def ort_peak_rss(path, feeds_file):
    code = (
        "import numpy as np, onnxruntime as ort, sys\n"
        "so = ort.SessionOptions(); so.intra_op_num_threads = 1\n"
        "s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
        "d = dict(np.load(sys.argv[2]))\n"
        "for _ in range(3): s.run(None, d)\n"
    )
    # /usr/bin/time reports the child's own high-water mark (getrusage in a child forked from
    # this large process would include the parent's pages).
    if not os.path.exists("/usr/bin/time"):
        return None
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS_KB=%M", sys.executable, "-c", code, path, feeds_file],
                       capture_output=True, text=True, check=False)
    for line in p.stderr.splitlines():
        if line.startswith("MAXRSS_KB="):
            return int(line.split("=")[1]) / 1024
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat each measurement, alternating runtimes; keep the lowest median")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default=os.path.join(ROOT, "target", "bench-models"))
    ap.add_argument("--backplane", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "backplane"))
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    models = [os.path.join(args.models, f"{m}.onnx") for m in ("mobilenet_v2", "resnet18", "bert_tiny")]
    models.append(os.path.join(ROOT, "models", "digits", "model.onnx"))
    if args.only:
        keep = set(args.only.split(","))
        models = [m for m in models if os.path.basename(m)[:-5] in keep]
    rows = []
    for path in models:
        name = os.path.basename(path)[:-5]
        if name == "model":
            name = "digits"
        if not os.path.exists(path):
            print(f"skipping {path} (run make_models.py first)", file=sys.stderr)
            continue
        feeds = inputs_for(path)
        gflop = flops(path) / 1e9
        io_dir = tempfile.mkdtemp(prefix=f"bench-{name}-")
        feeds_file = os.path.join(io_dir, "feeds.npz")
        np.savez(feeds_file, **feeds)
        rounds = max(1, args.rounds)
        tracts = [time_tract(path, feeds, args.iterations) for _ in range(rounds)]
        tract_ms = min((x for x in tracts if x is not None), default=None)
        mem_ort = ort_peak_rss(path, feeds_file)
        for t in threads:
            ort_ms, bp_ms = float("inf"), float("inf")
            ort_fast, bp_fast = float("inf"), float("inf")
            for _ in range(rounds):
                o_ms, ref, o_min = time_ort(path, feeds, t, args.iterations)
                b_ms, outs, backends, rss, b_min = run_backplane(args.backplane, path, feeds, t, args.iterations, io_dir)
                ort_ms, bp_ms = min(ort_ms, o_ms), min(bp_ms, b_ms)
                ort_fast, bp_fast = min(ort_fast, o_min), min(bp_fast, b_min)
            diff = max(float(np.max(np.abs(o - r))) for o, r in zip(outs, ref))
            rows.append(dict(model=name, threads=t, bp=bp_ms, ort=ort_ms, fast=bp_fast / ort_fast,
                             tract=tract_ms, gflop=gflop,
                             diff=diff, backends=backends, rss=rss, rss_ort=mem_ort))
            print(f"{name} t={t}: backplane {bp_ms:.3f} ms, ORT {ort_ms:.3f} ms"
                  + (f", tract {tract_ms:.3f} ms" if tract_ms else "") + f", max|diff| {diff:.2e}",
                  flush=True)
    print()
    print(f"{'model':<14}{'thr':>4}{'backplane':>11}{'ORT':>9}{'tract':>9}{'bp/ORT':>8}{'bp/tract':>9}"
          f"{'fastest':>8}{'GFLOP':>7}{'bp GF/s':>9}{'ORT GF/s':>9}{'max|diff|':>11}{'RSS bp':>8}{'RSS ORT':>8}")
    for r in rows:
        tr = f"{r['tract']:9.2f}" if r["tract"] else f"{'n/a':>9}"
        trr = f"{r['bp'] / r['tract']:9.2f}" if r["tract"] else f"{'n/a':>9}"
        rss = f"{r['rss']:8.0f}" if r["rss"] else f"{'?':>8}"
        rso = f"{r['rss_ort']:8.0f}" if r["rss_ort"] else f"{'?':>8}"
        print(f"{r['model']:<14}{r['threads']:>4}{r['bp']:11.2f}{r['ort']:9.2f}{tr}{r['bp'] / r['ort']:8.2f}{trr}"
              f"{r['fast']:8.2f}{r['gflop']:7.2f}{r['gflop'] / r['bp'] * 1e3:9.1f}{r['gflop'] / r['ort'] * 1e3:9.1f}"
              f"{r['diff']:11.1e}{rss}{rso}")
    print(f"\nlatencies are medians in ms (the lowest of {max(1, args.rounds)} rounds); 'fastest' is bp/ORT of the "
          "fastest single executions (steadier than medians where other work comes and goes); RSS is peak "
          "resident memory in MiB of one process (backplane run vs a 1-thread ONNX Runtime session); tract uses "
          "its own threading.")
    for r in rows:
        if r["threads"] == threads[0]:
            print(f"{r['model']}: layers per backend {r['backends']}")


if __name__ == "__main__":
    main()

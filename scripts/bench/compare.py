#!/usr/bin/env python3
"""Compare backplane (CpuAcc, falling back to CpuRef), ONNX Runtime and tract, in one run.

Models: the benchmark models of make_models.py and the shipped digits model (`--suite old`),
the real architectures of make_real_models.py (`--suite real`), or both (`--suite all`, the
default). For every model and thread count, from the same run:

- median latency of each runtime over `--iterations` executions, the lowest median of
  `--rounds` rounds in which the runtimes alternate, and the noise of each cell: the spread
  of its round medians, (max - min) / min, or with one round (p90 - median) / median of its
  executions;
- the ratios backplane / ONNX Runtime (also of the fastest single executions, the steadiest
  figure on a machine shared with other work) and backplane / tract, and their geometric
  means per thread count;
- GFLOP/s (2 x multiply-adds of Conv/MatMul/Gemm over the median latency);
- the max abs difference of backplane's outputs from ONNX Runtime's, and pass/fail at
  `--rtol` / `--atol` (default 1e-3 / 1e-4, elementwise |bp - ort| <= atol + rtol |ort|);
- peak resident memory (MiB) of one backplane process (`backplane bench`) and one ONNX
  Runtime process, each at one thread;
- how many layers each backend runs (a model with CpuRef layers has ops CpuAcc leaves);
- a row saying FAILED, with the first line of the error, when backplane cannot run a model;
- how far apart the two cores were before each model, where `examples/core_round_trip` is
  built beside the backplane binary (`cargo build --release --example core_round_trip -p
  backplane-cpu-kernels`): two-thread timings taken with the cores on two chiplets are slower.

Warm-up: every runtime gets the same number of warm-up executions per model and thread count,
at least `--warmup` and enough to fill `--warmup-time` seconds (0.25) at ONNX Runtime's speed.
backplane runs in a fresh process each round while ONNX Runtime's session lives through the
run; on the 2-vCPU VM a fresh process's helper thread often shares its caller's CPU for its
first 5-15 ms (ONNX Runtime in a fresh process shows the same), which a few warm-up
executions of a small model did not cover (BERT-tiny at 2 threads measured as at 1).

backplane runs through its CLI (release build): `backplane run --output-dir` once per thread
count for the outputs, `backplane bench` for the timings. tract runs in this process if
`import tract` works (pip install tract), with its own threading (its Python API has no thread
setting), so its figure is the same in every thread row.

Inputs: float inputs are uniform in [-1, 1]; models from make_real_models.py say in their
metadata how to feed the others (`bench.inputs`: token ids below the vocabulary size, an
attention mask of ones) and what their symbolic dimensions are (`bench.dims`); without
metadata, integer inputs named like masks are ones, other integer inputs are in [0, 100).

Usage: compare.py [--suite all|old|real] [--only NAME,...] [--iterations N] [--rounds R]
                  [--threads 1,2] [--markdown FILE] [--json FILE] [--backplane PATH]
                  [--backends GpuAcc,CpuAcc] [--backend-option BACKEND:KEY=VALUE]
                  [--also-backends CpuAcc,CpuRef]
With --also-backends, a second backplane configuration (e.g. CpuAcc beside GpuAcc) is timed
in the same alternating rounds and reported in its own columns ("bp2").
Needs a release build: cargo build --release -p backplane-cli (set CARGO_TARGET_DIR to match
--backplane).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
OLD = ["mobilenet_v2", "resnet18", "bert_tiny", "digits"]
REAL = ["resnet50", "efficientnet_b0", "vit_b_16", "squeezenet1_1", "shufflenet_v2_x1_0", "densenet121",
        "regnet_y_400mf", "mobilenet_v3_large", "deeplabv3_resnet50", "bert_base", "distilbert", "gpt2"]
NP_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
            "tensor(bool)": np.bool_, "tensor(double)": np.float64, "tensor(float16)": np.float16}
TRACT_TYPES = {np.float32: "f32", np.int64: "i64", np.int32: "i32", np.bool_: "bool", np.float64: "f64",
               np.float16: "f16"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def flops(model):
    """2 x multiply-adds of Conv, MatMul and Gemm, from ONNX shape inference."""
    try:
        m = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - shape inference is best effort
        m = model
    g = m.graph
    shapes = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        shapes[vi.name] = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
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


def metadata(model):
    meta = {p.key: p.value for p in model.metadata_props}

    def pairs(key):
        out = {}
        for item in filter(None, meta.get(key, "").split(",")):
            k, _, v = item.partition("=")
            out[k] = v
        return out

    return pairs("bench.inputs"), {k: int(v) for k, v in pairs("bench.dims").items()}


def inputs_for(path, model, seed=0):
    """Feeds for every graph input, following the model's bench metadata."""
    kinds, dims = metadata(model)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else dims.get(d, 1) if isinstance(d, str) else 1
                 for d in i.shape]
        dtype = NP_TYPES.get(i.type, np.float32)
        kind = kinds.get(i.name, "")
        if kind.startswith("tokens:"):
            feeds[i.name] = rng.integers(0, int(kind.split(":")[1]), shape).astype(dtype)
        elif kind == "ones" or (not kind and dtype != np.float32 and "mask" in i.name):
            feeds[i.name] = np.ones(shape, dtype)
        elif kind == "zeros" or (not kind and dtype != np.float32 and "type" in i.name):
            feeds[i.name] = np.zeros(shape, dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            feeds[i.name] = rng.integers(0, 100, shape).astype(dtype)
    return feeds


def noise(medians, times):
    """The spread of a cell: of its round medians, or within its one round."""
    if len(medians) > 1:
        return (max(medians) - min(medians)) / min(medians)
    if times:
        t = sorted(times)
        return (t[int(round((len(t) - 1) * 0.9))] - t[len(t) // 2]) / t[len(t) // 2]
    return float("nan")


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def time_ort(sess, feeds, iterations, warmup):
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return times


class Tract:
    """A tract model made runnable once per benchmark model (None when tract is absent or fails)."""

    def __init__(self, path, feeds):
        self.runnable, self.error = None, None
        try:
            import tract
        except ImportError:
            self.error = "tract not installed"
            return
        try:
            model = tract.onnx().load(path)
            for i, v in enumerate(feeds.values()):
                model.set_input_fact(i, f"{','.join(str(d) for d in v.shape)},{TRACT_TYPES.get(v.dtype.type, 'f32')}")
            self.runnable = model.into_model().into_runnable()
            self.args = list(feeds.values())
        except Exception as e:  # noqa: BLE001 - report and go on
            self.error = first_line(str(e)) or type(e).__name__

    def time(self, iterations, warmup):
        if self.runnable is None:
            return None
        try:
            for _ in range(warmup):
                self.runnable.run(self.args)
            times = []
            for _ in range(iterations):
                t = time.perf_counter()
                self.runnable.run(self.args)
                times.append((time.perf_counter() - t) * 1e3)
            return times
        except Exception as e:  # noqa: BLE001
            self.error = first_line(str(e)) or type(e).__name__
            self.runnable = None
            return None


def first_line(text):
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("MAXRSS"):
            return line[:200]
    return ""


def bp_args(exe, cmd, path, feeds, threads, io_dir, cfg):
    """backplane's arguments; cfg: the command line's --backends and --backend-option."""
    args = [exe, cmd, path, "--backends", cfg.backends, "--backend-option", f"CpuAcc:threads={threads}",
            "--no-time-limit"]
    for opt in cfg.backend_option:
        args += ["--backend-option", opt]
    for name, v in feeds.items():
        f = os.path.join(io_dir, f"in_{name}.npy")
        if not os.path.exists(f):
            np.save(f, v)
        args += ["--input", f"{name}={f}"]
        if v.ndim and all(d > 0 for d in v.shape):
            args += ["--input-shape", f"{name}={'x'.join(str(d) for d in v.shape)}"]
    return args


def bp_outputs(exe, path, feeds, threads, io_dir, names, cfg):
    """Run once and read the outputs back (from .npy files: a JSON of GPT-2's logits is huge)."""
    out_dir = os.path.join(io_dir, f"out{threads}")
    os.makedirs(out_dir, exist_ok=True)
    p = subprocess.run(bp_args(exe, "run", path, feeds, threads, io_dir, cfg) + ["--output-dir", out_dir, "--top-k", "0"],
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(first_line(p.stderr) or f"exit code {p.returncode}")
    outs = []
    for n in names:
        f = os.path.join(out_dir, f"{n}.npy")
        outs.append(np.load(f) if os.path.exists(f) else None)
    return outs


BENCH_LAT = re.compile(r"min ([\d.]+) ms, median ([\d.]+) ms, p90 ([\d.]+) ms")


def bp_bench(exe, path, feeds, threads, iterations, warmup, io_dir, cfg):
    """(median, min, p90) ms, peak MiB and the backend summary of one `backplane bench`."""
    p = subprocess.run(bp_args(exe, "bench", path, feeds, threads, io_dir, cfg)
                       + ["--iterations", str(iterations), "--warmup", str(warmup), "--warmup-time", "0",
                          "--quiet"],
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(first_line(p.stderr) or f"exit code {p.returncode}")
    m = BENCH_LAT.search(p.stdout)
    if not m:
        raise RuntimeError(f"unexpected bench output: {first_line(p.stdout)}")
    peak = re.search(r"peak memory: ([\d.]+) MiB", p.stdout)
    backends = re.search(r"backends: (.*)", p.stdout)
    return (float(m.group(2)), float(m.group(1)), float(m.group(3)),
            float(peak.group(1)) if peak else None, backends.group(1).strip() if backends else "?")


def ort_peak_rss(path, feeds_file):
    """Peak RSS (MiB) of a fresh process that loads the model in ONNX Runtime and runs it 3 times."""
    code = (
        "import numpy as np, onnxruntime as ort, sys\n"
        "so = ort.SessionOptions(); so.intra_op_num_threads = 1\n"
        "s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
        "d = dict(np.load(sys.argv[2]))\n"
        "for _ in range(3): s.run(None, d)\n"
        # VmHWM, not getrusage: Linux carries ru_maxrss across exec, so a child of this large
        # process would report this process's pages.
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1].join(['MAXRSS_KB=', '']))\n"
    )
    p = subprocess.run([sys.executable, "-c", code, path, feeds_file], capture_output=True, text=True, check=False)
    for line in p.stdout.splitlines():
        if line.startswith("MAXRSS_KB="):
            return int(line.split("=")[1]) / 1024
    return None


def compare(outs, refs, rtol, atol):
    """Max abs difference over all outputs, and whether every element is within tolerance."""
    diff, ok = 0.0, True
    for o, r in zip(outs, refs):
        if o is None or o.shape != r.shape:
            return float("inf"), False
        o64, r64 = o.astype(np.float64), r.astype(np.float64)
        if o64.size:
            d = np.abs(o64 - r64)
            diff = max(diff, float(np.nanmax(d)) if np.isfinite(d).any() else float("inf"))
            ok = ok and bool(np.all((d <= atol + rtol * np.abs(r64)) | (np.isnan(o64) & np.isnan(r64))))
    return diff, ok


def model_paths(args):
    paths = []
    if args.suite in ("old", "all"):
        for m in OLD:
            paths.append((m, os.path.join(ROOT, "models", "digits", "model.onnx") if m == "digits"
                          else os.path.join(args.old_models, f"{m}.onnx")))
    if args.suite in ("real", "all"):
        paths += [(m, os.path.join(args.models, f"{m}.onnx")) for m in REAL]
    if args.only:
        keep = set(args.only.split(","))
        paths = [p for p in paths if p[0] in keep]
        known = {p[0] for p in paths}
        for extra in sorted(keep - known):  # any other model file named on the command line
            for d in (args.models, args.old_models):
                f = os.path.join(d, f"{extra}.onnx")
                if os.path.exists(f):
                    paths.append((extra, f))
                    break
    return paths


def bench_model(name, path, args, threads):
    """Every row of one model (one per thread count)."""
    model = onnx.load(path)
    feeds = inputs_for(path, model)
    gflop = flops(model) / 1e9
    del model
    io_dir = tempfile.mkdtemp(prefix=f"bench_{name}_")
    try:
        feeds_file = os.path.join(io_dir, "feeds.npz")
        np.savez(feeds_file, **feeds)
        base = dict(model=name, gflop=gflop)
        rss_ort = ort_peak_rss(path, feeds_file)
        sessions = {t: ort_session(path, t) for t in threads}
        out_names = [o.name for o in sessions[threads[0]].get_outputs()]
        refs = sessions[threads[0]].run(None, feeds)
        tract = Tract(path, feeds)
        rows = {t: dict(base, threads=t, rss_ort=rss_ort, ort_med=[], ort_min=math.inf, ort_times=[],
                        bp_med=[], bp_min=math.inf, bp_p90=[], tract_med=[], tract_times=[], bp2_med=[],
                        tract_error=tract.error) for t in threads}
        # Outputs once per thread count; a failure here is the model's row.
        for t in threads:
            try:
                outs = bp_outputs(args.backplane, path, feeds, t, io_dir, out_names, args)
                rows[t]["diff"], rows[t]["ok"] = compare(outs, refs, args.rtol, args.atol)
            except RuntimeError as e:
                for r in rows.values():
                    r["error"] = str(e)
                log(f"  {name}: backplane FAILED: {e}")
                break
        # Warm-up executions per thread count: at least --warmup, and enough to fill
        # --warmup-time at ONNX Runtime's speed (the same count for every runtime).
        warm = {}
        for t in threads:
            est = min(time_ort(sessions[t], feeds, 3, 0)) / 1000
            warm[t] = max(args.warmup, min(1000, math.ceil(args.warmup_time / max(est, 1e-6))))
        for rnd in range(args.rounds):
            tr = tract.time(args.iterations, max(warm.values()))
            for t in threads:
                r = rows[t]
                times = time_ort(sessions[t], feeds, args.iterations, warm[t])
                r["ort_med"].append(float(np.median(times)))
                r["ort_min"] = min(r["ort_min"], min(times))
                r["ort_times"] = times
                if tr:
                    r["tract_med"].append(float(np.median(tr)))
                    r["tract_times"] = tr
                if "error" not in r:
                    try:
                        med, fast, p90, peak, backends = bp_bench(args.backplane, path, feeds, t, args.iterations,
                                                                  warm[t], io_dir, args)
                        r["bp_med"].append(med)
                        r["bp_min"] = min(r["bp_min"], fast)
                        r["bp_p90"].append((p90 - med) / med if med else float("nan"))
                        r["backends"] = backends
                        if t == threads[0]:
                            r["rss_bp"] = peak if r.get("rss_bp") is None else max(r["rss_bp"], peak or 0)
                    except RuntimeError as e:
                        r["error"] = str(e)
                if args.also and "bp2_error" not in r:
                    try:
                        r["bp2_med"].append(bp_bench(args.backplane, path, feeds, t, args.iterations, warm[t],
                                                     io_dir, args.also)[0])
                    except RuntimeError as e:
                        r["bp2_error"] = str(e)
                bp = f"{r['bp_med'][-1]:.2f} ms" if r["bp_med"] and "error" not in r else "FAILED"
                log(f"  {name} t={t} round {rnd + 1}/{args.rounds} (medians): backplane {bp}, "
                    f"ORT {r['ort_med'][-1]:.2f} ms" + (f", tract {r['tract_med'][-1]:.2f} ms" if tr else ""))
        del sessions
        out = []
        for t in threads:
            r = rows[t]
            res = dict(model=name, threads=t, gflop=gflop, ort=min(r["ort_med"]),
                       ort_noise=noise(r["ort_med"], r["ort_times"]), ort_fastest=r["ort_min"],
                       tract=min(r["tract_med"]) if r["tract_med"] else None,
                       tract_noise=noise(r["tract_med"], r["tract_times"]) if r["tract_med"] else None,
                       tract_error=r["tract_error"] if not r["tract_med"] else None,
                       rss_ort=r["rss_ort"], error=r.get("error"),
                       bp2=min(r["bp2_med"]) if r["bp2_med"] and "bp2_error" not in r else None,
                       bp2_noise=noise(r["bp2_med"], []) if len(r["bp2_med"]) > 1 else None,
                       bp2_error=r.get("bp2_error"))
            if r["bp_med"] and not r.get("error"):
                res.update(bp=min(r["bp_med"]), bp_fastest=r["bp_min"],
                           bp_noise=(noise(r["bp_med"], []) if len(r["bp_med"]) > 1 else r["bp_p90"][0]),
                           diff=r.get("diff"), ok=r.get("ok"), rss_bp=r.get("rss_bp"), backends=r.get("backends"))
            else:
                res["rss_bp"] = None
            out.append(res)
        rss_bp = next((x["rss_bp"] for x in out if x.get("rss_bp")), None)
        for x in out:
            x["rss_bp"] = rss_bp
        return out
    finally:
        shutil.rmtree(io_dir, ignore_errors=True)


def geomean(values):
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fmt(v, spec, width, none="n/a"):
    return f"{v:{width}{spec}}" if v is not None and (not isinstance(v, float) or math.isfinite(v)) \
        else f"{none:>{width}}"


def table(rows, threads, args):
    """The comparison table as text lines (also valid Markdown)."""
    also = any(r.get("bp2") is not None or r.get("bp2_error") for r in rows)
    lines = ["| model | thr | backplane ms | ORT ms | tract ms | bp/ORT | bp/tract | fastest bp/ORT | noise bp/ORT/tract "
             "| GFLOP | bp GF/s | max abs diff | within tol | RSS bp MiB | RSS ORT MiB | layers |"
             + (" bp2 ms | bp2/ORT | bp/bp2 | noise bp2 |" if also else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---|"
             + ("---:|---:|---:|---|" if also else "")]

    def pct(x):
        return f"{100 * x:.0f}%" if x is not None and math.isfinite(x) else "-"

    def bp2_cells(r):
        if not also:
            return ""
        b2 = r.get("bp2")
        if b2 is None:
            return f" FAILED: {(r.get('bp2_error') or '').replace('|', '/')[:80]} | - | - | - |"
        return (f" {b2:.2f} | {b2 / r['ort']:.2f} | {fmt(r['bp'] / b2 if r.get('bp') else None, '.2f', 0)} "
                f"| {pct(r.get('bp2_noise'))} |")
    for r in rows:
        if r.get("bp") is None:
            lines.append(f"| {r['model']} | {r['threads']} | FAILED | {r['ort']:.2f} | {fmt(r['tract'], '.2f', 0)} "
                         f"| - | - | - | - | {r['gflop']:.2f} | - | - | - | - | {fmt(r['rss_ort'], '.0f', 0)} "
                         f"| {(r.get('error') or '').replace('|', '/')} |" + bp2_cells(r))
            continue
        lines.append(
            f"| {r['model']} | {r['threads']} | {r['bp']:.2f} | {r['ort']:.2f} | {fmt(r['tract'], '.2f', 0)} "
            f"| {r['bp'] / r['ort']:.2f} | {fmt(r['bp'] / r['tract'] if r['tract'] else None, '.2f', 0)} "
            f"| {r['bp_fastest'] / r['ort_fastest']:.2f} "
            f"| {pct(r['bp_noise'])}/{pct(r['ort_noise'])}/{pct(r['tract_noise'])} "
            f"| {r['gflop']:.2f} | {r['gflop'] / r['bp'] * 1e3:.1f} | {r['diff']:.1e} | {'yes' if r['ok'] else 'NO'} "
            f"| {fmt(r['rss_bp'], '.0f', 0)} | {fmt(r['rss_ort'], '.0f', 0)} | {r.get('backends', '?')} |"
            + bp2_cells(r))
    lines.append("")
    for t in threads:
        ok = [r for r in rows if r["threads"] == t and r.get("bp") is not None]
        g_ort = geomean([r["bp"] / r["ort"] for r in ok])
        g_tr = geomean([r["bp"] / r["tract"] for r in ok if r["tract"]])
        failed = sum(1 for r in rows if r["threads"] == t and r.get("bp") is None)
        lines.append(f"- {t} thread{'s' if t > 1 else ''}: geometric mean bp/ORT {fmt(g_ort, '.2f', 0)} over {len(ok)} "
                     f"models, bp/tract {fmt(g_tr, '.2f', 0)} over {sum(1 for r in ok if r['tract'])}; "
                     f"{failed} failed; above 1.1: "
                     + (", ".join(r["model"] for r in ok if r["bp"] / r["ort"] > 1.1) or "none"))
        if also:
            ok2 = [r for r in rows if r["threads"] == t and r.get("bp2") is not None]
            both = [r for r in ok2 if r.get("bp") is not None]
            lines.append(f"  - bp2 ({args.also_backends}): geometric mean bp2/ORT "
                         f"{fmt(geomean([r['bp2'] / r['ort'] for r in ok2]), '.2f', 0)} over {len(ok2)} models, "
                         f"bp/bp2 {fmt(geomean([r['bp'] / r['bp2'] for r in both]), '.2f', 0)} over {len(both)}")
    tract_errors = sorted({(r["model"], r["tract_error"]) for r in rows if r.get("tract_error")})
    for m, e in tract_errors:
        lines.append(f"- tract n/a on {m}: {e}")
    lines.append("")
    lines.append(f"Latencies are medians in ms over {args.iterations} executions (after at least {args.warmup} "
                 f"warm-up executions and {args.warmup_time:g} s of them, the same count for each runtime), the lowest "
                 f"of {args.rounds} alternating round(s); noise is the spread of the round medians (max-min)/min, or "
                 "with one round (p90-median)/median; 'fastest' is bp/ORT of the fastest single executions; "
                 f"tolerance rtol {args.rtol:g}, atol {args.atol:g} against ONNX Runtime; RSS is the peak resident "
                 "memory of one process at one thread; tract uses its own threading.")
    trips = [r["round_trip_ns"] for r in rows if r.get("round_trip_ns") is not None]
    if trips:
        lines.append("")
        lines.append(f"The two cores were {min(trips):.0f}-{max(trips):.0f} ns apart a round trip before the "
                     "models (examples/core_round_trip; ~80 ns: one chiplet, ~400 ns: two, where two-thread "
                     "timings are slower).")
    return lines


def round_trip_ns(args):
    """The two cores' distance (ns a round trip, `examples/core_round_trip` beside the backplane
    binary), or None where that example is not built. On a shared host the two vCPUs are
    sometimes on one chiplet (~80 ns) and sometimes on two (~400 ns), and two-thread timings
    differ between the states (docs/perf.md, "Whole suite after session 47")."""
    probe = os.path.join(os.path.dirname(args.backplane), "examples", "core_round_trip")
    if not os.path.exists(probe):
        return None
    p = subprocess.run([probe], capture_output=True, text=True, check=False)
    m = re.search(r"([\d.]+) ns", p.stdout)
    return float(m.group(1)) if p.returncode == 0 and m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=["all", "old", "real"], default="all")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--warmup-time", type=float, default=0.25,
                    help="seconds of warm-up executions at least (counted at ONNX Runtime's speed)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="repeat each measurement, alternating runtimes; keep the lowest median")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--models", default="/work/bench-models", help="make_real_models.py's folder")
    ap.add_argument("--old-models", default=os.path.join(ROOT, "target", "bench-models"),
                    help="make_models.py's folder")
    ap.add_argument("--backplane", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "backplane"))
    ap.add_argument("--backends", default="CpuAcc,CpuRef",
                    help="backplane's --backends (e.g. GpuAcc,CpuAcc on a machine with a GPU)")
    ap.add_argument("--backend-option", action="append", default=[],
                    help="BACKEND:KEY=VALUE passed to backplane (repeatable)")
    ap.add_argument("--also-backends", default="",
                    help="a second backplane --backends list timed in the same rounds (columns bp2), "
                         "e.g. CpuAcc,CpuRef beside --backends GpuAcc,CpuAcc")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--json", help="also write every row as JSON to this file")
    ap.add_argument("--from-json", help="measure nothing: print the table of rows saved by --json "
                    "(comma-separated files, e.g. two runs over different models)")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    args.also = argparse.Namespace(backends=args.also_backends, backend_option=args.backend_option) \
        if args.also_backends else None
    if args.from_json:
        rows = []
        for f in args.from_json.split(","):
            with open(f) as fh:
                rows += json.load(fh)
        order = [n for n, _ in model_paths(args)]
        rows.sort(key=lambda r: (r["threads"], order.index(r["model"]) if r["model"] in order else len(order)))
        lines = table(rows, threads, args)
        print("\n".join(lines))
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write("\n".join(lines) + "\n")
        return
    if not os.path.exists(args.backplane):
        sys.exit(f"{args.backplane} not found: cargo build --release -p backplane-cli (or pass --backplane)")
    rows = []
    paths = model_paths(args)
    started = time.time()
    for k, (name, path) in enumerate(paths):
        if not os.path.exists(path):
            log(f"[{k + 1}/{len(paths)}] skipping {name}: {path} missing (make_models.py / make_real_models.py)")
            continue
        rt = round_trip_ns(args)
        log(f"[{k + 1}/{len(paths)}] {name} ({time.time() - started:.0f} s elapsed"
            + (f", cores {rt:.0f} ns apart)" if rt is not None else ")"))
        try:
            model_rows = bench_model(name, path, args, threads)
            for r in model_rows:
                r["round_trip_ns"] = rt
            rows += model_rows
        except Exception as e:  # noqa: BLE001 - ORT itself failed: say so, go on
            log(f"  {name}: skipped, ONNX Runtime or the inputs failed: {first_line(str(e))}")
        if args.json:  # after every model, so that an interrupted run keeps what it measured
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1, default=str)
    rows.sort(key=lambda r: (r["threads"], [n for n, _ in paths].index(r["model"])))
    lines = table(rows, threads, args)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()

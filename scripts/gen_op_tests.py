#!/usr/bin/env python3
"""Generate single-operator ONNX test tables as JSON: testdata/ops/<family>.json.

Every expected output is computed by the NumPy reference implementations in
this file (written from the ONNX operator specification, computed in float64
and rounded to the output type).  Each case is then cross-checked against
onnxruntime: a one-node model is built with onnx.helper, validated with
onnx.checker (full_check), run on the CPU provider and compared with the
case's own rtol/atol.  The script exits non-zero if any case disagrees, so a
table on disk is known to agree with both.

Schema: see testdata/README.md.

Usage:  python scripts/gen_op_tests.py [--out testdata/ops] [--no-ort]
"""

import argparse
import json
import math
import os
import re
import sys
import zlib

import numpy as np

INT64_MAX = 2 ** 63 - 1
INT64_MIN = -(2 ** 63)
F64 = np.float64
MAX_FILE_BYTES = 400 * 1024

DTYPE_NAMES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.bool_): "bool",
    np.dtype(np.float64): "float64",
}

# Default tolerances (float outputs); integer / bool outputs are always exact.
TOL_EXACT = (1e-6, 1e-7)     # correctly rounded ops: +, -, *, /, sqrt, max, copies
TOL_TRANS = (1e-5, 1e-6)     # transcendental functions
TOL_ACCUM = (1e-4, 1e-5)     # reductions / dot products / normalisation
TOL_F16 = (1e-3, 1e-3)


# ==========================================================================
# Case collection
# ==========================================================================

def T(name, array, init=False):
    """A present input: name, numpy array (dtype preserved), initializer flag."""
    return {"name": name, "array": np.asarray(array), "init": bool(init)}


OMIT = None  # an omitted optional input


class Suite:
    def __init__(self):
        self.families = {}
        self.names = set()

    def add(self, family, name, op_type, inputs, outputs, attrs=None, opset=17, tol=None,
            symbolic_output_shape=False):
        if not re.fullmatch(r"[a-z0-9_]+", name):
            raise ValueError(f"bad case name {name!r}")
        if name in self.names:
            raise ValueError(f"duplicate case name {name!r}")
        self.names.add(name)
        attrs = dict(attrs or {})
        outs = [(n, np.asarray(a)) for n, a in outputs]
        if tol is None:
            if any(a.dtype == np.float16 for _, a in outs) or any(
                    i is not None and i["array"].dtype == np.float16 for i in inputs):
                tol = TOL_F16
            else:
                tol = TOL_EXACT
        for i in inputs:
            if i is not None:
                assert i["array"].dtype in DTYPE_NAMES, (name, i["array"].dtype)
        for n, a in outs:
            assert a.dtype in DTYPE_NAMES, (name, a.dtype)
        self.families.setdefault(family, []).append({
            "name": name, "op_type": op_type, "opset": int(opset), "attrs": attrs,
            "inputs": inputs, "outputs": outs, "rtol": float(tol[0]), "atol": float(tol[1]),
            # onnx's shape inference disagrees with the spec / onnxruntime for this case:
            # declare symbolic output dims in the cross-check model (JSON is unaffected)
            "symbolic_output_shape": bool(symbolic_output_shape),
        })


def sname(shape):
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


class Gen:
    """Deterministic data: floats on a 1/64 grid (exact in float32, short in JSON)."""

    def __init__(self, family):
        self.rng = np.random.default_rng(zlib.crc32(family.encode()))

    def f(self, shape, lo=-4.0, hi=4.0, step=1.0 / 64, nonzero=False, dtype=np.float32):
        k = self.rng.integers(int(round(lo / step)), int(round(hi / step)) + 1, size=shape)
        k = np.asarray(k)
        if nonzero:
            k[k == 0] = 1 if lo < step <= hi else int(round(lo / step))
        return np.asarray(k * step).astype(dtype)

    def i(self, shape, lo, hi, dtype=np.int64, nonzero=False):
        v = np.asarray(self.rng.integers(lo, hi + 1, size=shape))
        if nonzero:
            v[v == 0] = 1
        return v.astype(dtype)

    def b(self, shape):
        return np.asarray(self.rng.integers(0, 2, size=shape)).astype(bool)


def i64(*v):
    return np.array(v, dtype=np.int64)


def f32(v):
    return np.asarray(v, dtype=np.float32)


# ==========================================================================
# NumPy reference implementations (float math in float64)
# ==========================================================================

def cast_out(x, dtype):
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to +-inf is intended
        return np.asarray(x).astype(dtype)


def ref_binary(op, a, b):
    dt = np.result_type(a.dtype, b.dtype) if op != "Pow" else a.dtype
    if np.issubdtype(a.dtype, np.floating):
        A, B = a.astype(F64), b.astype(F64)
        with np.errstate(all="ignore"):
            r = {"Add": lambda: A + B, "Sub": lambda: A - B, "Mul": lambda: A * B,
                 "Div": lambda: A / B, "Pow": lambda: np.power(A, B),
                 "Max": lambda: np.maximum(A, B), "Min": lambda: np.minimum(A, B)}[op]()
        return cast_out(r, dt)
    A, B = a.astype(object), b.astype(object)  # exact python ints
    A, B = np.broadcast_arrays(A, B)
    if op == "Div":
        r = np.vectorize(lambda p, q: abs(p) // abs(q) * (1 if (p >= 0) == (q >= 0) else -1),
                         otypes=[object])(A, B) if A.size else A.copy()
    else:
        r = {"Add": lambda: A + B, "Sub": lambda: A - B, "Mul": lambda: A * B,
             "Max": lambda: np.maximum(A, B), "Min": lambda: np.minimum(A, B)}[op]()
    info = np.iinfo(dt)
    assert all(info.min <= int(v) <= info.max for v in np.ravel(r)), "integer overflow in test data"
    return np.asarray(r, dtype=dt).reshape(np.broadcast_shapes(a.shape, b.shape))


def ref_variadic(op, arrays):
    r = arrays[0]
    for a in arrays[1:]:
        r = ref_binary(op, r, a)
    return r


def erf_f64(x):
    return np.vectorize(math.erf, otypes=[F64])(x) if np.size(x) else np.asarray(x, F64)


def ref_unary(op, x, **at):
    if not np.issubdtype(x.dtype, np.floating):
        v = x.astype(object)
        r = {"Neg": lambda: -v, "Abs": lambda: np.abs(v), "Relu": lambda: np.maximum(v, 0),
             "Identity": lambda: v}[op]()
        return np.asarray(r, dtype=x.dtype).reshape(x.shape)
    X = x.astype(F64)
    with np.errstate(all="ignore"):
        if op == "Sqrt":
            r = np.sqrt(X)
        elif op == "Exp":
            r = np.exp(X)
        elif op == "Log":
            r = np.log(X)
        elif op == "Neg":
            r = -X
        elif op == "Abs":
            r = np.abs(X)
        elif op == "Relu":
            r = np.where((X > 0) | np.isnan(X), X, 0.0)  # NaN propagates (as max(0, NaN) in ORT)
        elif op == "LeakyRelu":
            alpha = F64(np.float32(at.get("alpha", 0.01)))
            r = np.where(X >= 0, X, X * alpha)
        elif op == "Sigmoid":
            r = 1.0 / (1.0 + np.exp(-X))
        elif op == "Tanh":
            r = np.tanh(X)
        elif op == "Erf":
            r = erf_f64(X)
        elif op == "Gelu":
            if at.get("approximate", "none") == "tanh":
                r = 0.5 * X * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (X + 0.044715 * X ** 3)))
            else:
                r = 0.5 * X * (1.0 + erf_f64(X / math.sqrt(2.0)))
        elif op == "Identity":
            r = X
        else:
            raise KeyError(op)
    return cast_out(r, x.dtype)


def ref_clip(x, lo=None, hi=None):
    if np.issubdtype(x.dtype, np.floating):
        r = x.astype(F64)
        if lo is not None:
            r = np.where(r < F64(lo), F64(lo), r)
        if hi is not None:
            r = np.where(r > F64(hi), F64(hi), r)
        return cast_out(r, x.dtype)
    r = x.astype(np.int64)
    if lo is not None:
        r = np.maximum(r, int(lo))
    if hi is not None:
        r = np.minimum(r, int(hi))
    return r.astype(x.dtype)


def norm_axis(axis, rank):
    return axis + rank if axis < 0 else axis


def ref_softmax(x, axis=-1):
    X = x.astype(F64)
    ax = norm_axis(axis, x.ndim)
    m = X.max(axis=ax, keepdims=True)
    e = np.exp(X - m)
    return cast_out(e / e.sum(axis=ax, keepdims=True), x.dtype)


def conv_pads(auto_pad, in_sp, k_eff, strides, pads):
    nd = len(in_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pb, pe = [], []
        for i in range(nd):
            out = -(-in_sp[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + k_eff[i] - in_sp[i])
            small, big = total // 2, total - total // 2
            if auto_pad == "SAME_UPPER":
                pb.append(small)
                pe.append(big)
            else:
                pb.append(big)
                pe.append(small)
        return pb, pe
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    pads = pads or [0] * (2 * nd)
    return list(pads[:nd]), list(pads[nd:])


def ref_conv(x, w, b=None, *, kernel_shape=None, strides=None, pads=None, dilations=None,
             group=1, auto_pad="NOTSET"):
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nd = len(sp)
    m = w.shape[0]
    ks = w.shape[2:]
    if kernel_shape is not None:
        assert tuple(kernel_shape) == tuple(ks)
    st = strides or [1] * nd
    dl = dilations or [1] * nd
    k_eff = [(ks[i] - 1) * dl[i] + 1 for i in range(nd)]
    pb, pe = conv_pads(auto_pad, sp, k_eff, st, pads)
    X = np.pad(x.astype(F64), [(0, 0), (0, 0)] + [(pb[i], pe[i]) for i in range(nd)])
    W = w.astype(F64)
    out_sp = [(sp[i] + pb[i] + pe[i] - k_eff[i]) // st[i] + 1 for i in range(nd)]
    y = np.zeros((n, m) + tuple(out_sp), F64)
    cpg, mpg = c // group, m // group
    assert w.shape[1] == cpg
    for g in range(group):
        xg = X[:, g * cpg:(g + 1) * cpg]
        wg = W[g * mpg:(g + 1) * mpg]
        for kidx in np.ndindex(*ks):
            sl = tuple(slice(kidx[i] * dl[i], kidx[i] * dl[i] + (out_sp[i] - 1) * st[i] + 1, st[i])
                       for i in range(nd))
            patch = xg[(slice(None), slice(None)) + sl]
            y[:, g * mpg:(g + 1) * mpg] += np.einsum("nc...,mc->nm...", patch,
                                                    wg[(slice(None), slice(None)) + kidx])
    if b is not None:
        y += b.astype(F64).reshape((1, m) + (1,) * nd)
    return cast_out(y, x.dtype)


def ref_conv_transpose(x, w, b=None, *, kernel_shape=None, strides=None, pads=None, dilations=None,
                       group=1, output_padding=None):
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nd = len(sp)
    ks = w.shape[2:]
    if kernel_shape is not None:
        assert tuple(kernel_shape) == tuple(ks)
    mpg = w.shape[1]
    m = mpg * group
    cpg = c // group
    st = strides or [1] * nd
    dl = dilations or [1] * nd
    op = output_padding or [0] * nd
    pads = pads or [0] * (2 * nd)
    full = [(sp[i] - 1) * st[i] + (ks[i] - 1) * dl[i] + 1 + op[i] for i in range(nd)]
    y = np.zeros((n, m) + tuple(full), F64)
    X, W = x.astype(F64), w.astype(F64)
    for g in range(group):
        xg = X[:, g * cpg:(g + 1) * cpg]
        wg = W[g * cpg:(g + 1) * cpg]
        for kidx in np.ndindex(*ks):
            contrib = np.einsum("nc...,cm->nm...", xg, wg[(slice(None), slice(None)) + kidx])
            sl = tuple(slice(kidx[i] * dl[i], kidx[i] * dl[i] + (sp[i] - 1) * st[i] + 1, st[i])
                       for i in range(nd))
            y[(slice(None), slice(g * mpg, (g + 1) * mpg)) + sl] += contrib
    crop = tuple(slice(pads[i], full[i] - pads[i + nd]) for i in range(nd))
    y = y[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.astype(F64).reshape((1, m) + (1,) * nd)
    return cast_out(y, x.dtype)


def ref_pool(x, kind, *, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=0,
             count_include_pad=0, auto_pad="NOTSET"):
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nd = len(sp)
    ks = kernel_shape
    st = strides or [1] * nd
    dl = dilations or [1] * nd
    k_eff = [(ks[i] - 1) * dl[i] + 1 for i in range(nd)]
    pb, pe = conv_pads(auto_pad, sp, k_eff, st, pads)
    out = []
    for i in range(nd):
        span = sp[i] + pb[i] + pe[i] - k_eff[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-sp[i] // st[i])
        elif ceil_mode:
            o = -(-span // st[i]) + 1
            if (o - 1) * st[i] >= sp[i] + pb[i]:  # last window must start inside input/left pad
                o -= 1
        else:
            o = span // st[i] + 1
        out.append(o)
    X = x.astype(F64)
    acc = np.full((n, c) + tuple(out), -np.inf if kind == "max" else 0.0)
    cnt = np.zeros(tuple(out))
    for kidx in np.ndindex(*ks):
        pos = [np.arange(out[i]) * st[i] - pb[i] + kidx[i] * dl[i] for i in range(nd)]
        valid = [(p >= 0) & (p < sp[i]) for i, p in enumerate(pos)]
        inpad = [(p >= -pb[i]) & (p < sp[i] + pe[i]) for i, p in enumerate(pos)]
        posc = [np.clip(p, 0, sp[i] - 1) for i, p in enumerate(pos)]
        vals = X[(slice(None), slice(None)) + np.ix_(*posc)]
        mask = valid[0]
        for v in valid[1:]:
            mask = np.multiply.outer(mask, v)
        if kind == "max":
            acc = np.where(mask, np.maximum(acc, vals), acc)
        else:
            acc = acc + np.where(mask, vals, 0.0)
            if count_include_pad:
                pm = inpad[0]
                for v in inpad[1:]:
                    pm = np.multiply.outer(pm, v)
                cnt += pm
            else:
                cnt += mask
    if kind == "avg":
        acc = acc / cnt
    return cast_out(acc, x.dtype)


def ref_global_pool(x, kind):
    axes = tuple(range(2, x.ndim))
    X = x.astype(F64)
    r = X.mean(axis=axes, keepdims=True) if kind == "avg" else X.max(axis=axes, keepdims=True)
    return cast_out(r, x.dtype)


def ref_matmul(a, b):
    if np.issubdtype(a.dtype, np.floating):
        return cast_out(np.matmul(a.astype(F64), b.astype(F64)), a.dtype)
    return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)


def ref_gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    A = a.astype(F64).T if transA else a.astype(F64)
    B = b.astype(F64).T if transB else b.astype(F64)
    y = F64(np.float32(alpha)) * (A @ B)
    if c is not None:
        y = y + F64(np.float32(beta)) * c.astype(F64)
    return cast_out(y, a.dtype)


def ref_batchnorm(x, scale, bias, mean, var, epsilon=1e-5):
    shp = (1, -1) + (1,) * (x.ndim - 2)
    X = x.astype(F64)
    eps = F64(np.float32(epsilon))
    y = (X - mean.astype(F64).reshape(shp)) / np.sqrt(var.astype(F64).reshape(shp) + eps)
    y = y * scale.astype(F64).reshape(shp) + bias.astype(F64).reshape(shp)
    return cast_out(y, x.dtype)


def ref_layernorm(x, scale, bias=None, axis=-1, epsilon=1e-5):
    ax = norm_axis(axis, x.ndim)
    axes = tuple(range(ax, x.ndim))
    X = x.astype(F64)
    mu = X.mean(axis=axes, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (X - mu) / np.sqrt(var + F64(np.float32(epsilon))) * scale.astype(F64)
    if bias is not None:
        y = y + bias.astype(F64)
    return cast_out(y, x.dtype)


def ref_flatten(x, axis=1):
    ax = norm_axis(axis, x.ndim)
    outer = int(np.prod(x.shape[:ax], dtype=np.int64))
    return x.reshape(outer, -1) if x.size else x.reshape(outer, int(np.prod(x.shape[ax:])))


def ref_reshape(x, shape):
    out = []
    for i, s in enumerate(shape.tolist()):
        out.append(x.shape[i] if s == 0 else s)
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = x.size // known
    assert int(np.prod(out, dtype=np.int64)) == x.size
    return x.reshape(out)


def ref_squeeze(x, axes=None):
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(norm_axis(int(a), x.ndim) for a in axes)
    assert all(x.shape[a] == 1 for a in axes)
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


def ref_unsqueeze(x, axes):
    r = x.ndim + len(axes)
    axes = sorted(norm_axis(int(a), r) for a in axes)
    shape, it = [], iter(x.shape)
    for i in range(r):
        shape.append(1 if i in axes else next(it))
    return x.reshape(shape)


def ref_split(x, axis, sizes):
    ax = norm_axis(axis, x.ndim)
    outs, start = [], 0
    for s in sizes:
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(start, start + s)
        outs.append(x[tuple(idx)].copy())
        start += s
    assert start == x.shape[ax]
    return outs


def ref_slice(x, starts, ends, axes=None, steps=None):
    starts, ends = list(map(int, starts)), list(map(int, ends))
    axes = list(range(len(starts))) if axes is None else [norm_axis(int(a), x.ndim) for a in axes]
    steps = [1] * len(starts) if steps is None else list(map(int, steps))
    idx = [np.arange(d) for d in x.shape]
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        d = x.shape[ax]
        if st < 0:
            st += d
        if en < 0:
            en += d
        if sp > 0:
            st, en = min(max(st, 0), d), min(max(en, 0), d)
        else:
            st, en = min(max(st, 0), d - 1), min(max(en, -1), d - 1)
        idx[ax] = np.arange(st, en, sp, dtype=np.int64)
    return x[np.ix_(*idx)]


def ref_gather(data, indices, axis=0):
    ax = norm_axis(axis, data.ndim)
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[ax], idx)
    assert np.all((idx >= 0) & (idx < data.shape[ax]))
    return np.take(data, idx, axis=ax)


def ref_reduce(op, x, axes=None, keepdims=1):
    ax = None if axes is None else tuple(norm_axis(int(a), x.ndim) for a in axes)
    if np.issubdtype(x.dtype, np.floating):
        X = x.astype(F64)
        r = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max}[op](
            X, axis=ax, keepdims=bool(keepdims))
        return cast_out(r, x.dtype)
    r = {"ReduceSum": np.sum, "ReduceMax": np.max}[op](x.astype(np.int64), axis=ax, keepdims=bool(keepdims))
    return np.asarray(r).astype(x.dtype)


def ref_cast(x, to_dtype):
    to_dtype = np.dtype(to_dtype)
    if to_dtype == np.bool_:
        return np.asarray(x != 0)
    if np.issubdtype(x.dtype, np.floating) and np.issubdtype(to_dtype, np.integer):
        t = np.trunc(x.astype(F64))
        info = np.iinfo(to_dtype)
        assert np.all(np.isfinite(t)) and np.all((t >= info.min) & (t <= info.max))
        return np.asarray([int(v) for v in t.ravel()], dtype=to_dtype).reshape(x.shape)
    if np.issubdtype(x.dtype, np.integer) and np.issubdtype(to_dtype, np.integer):
        info = np.iinfo(to_dtype)
        assert np.all((x.astype(object) >= info.min) & (x.astype(object) <= info.max))
    return cast_out(x, to_dtype)


def ref_pad(x, pads, mode="constant", value=0, axes=None):
    r = x.ndim
    axes = list(range(r)) if axes is None else [norm_axis(int(a), r) for a in axes]
    k = len(axes)
    begin, end = [0] * r, [0] * r
    for j, a in enumerate(axes):
        begin[a], end[a] = int(pads[j]), int(pads[j + k])
    # negative pads crop first
    crop = tuple(slice(max(0, -begin[i]), x.shape[i] - max(0, -end[i])) for i in range(r))
    y = x[crop]
    widths = [(max(0, begin[i]), max(0, end[i])) for i in range(r)]
    if mode == "constant":
        return np.pad(y, widths, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    if mode == "reflect":
        for i, (b0, e0) in enumerate(widths):
            assert b0 < y.shape[i] and e0 < y.shape[i]
        return np.pad(y, widths, mode="reflect")
    return np.pad(y, widths, mode="edge")


def ref_resize(x, *, mode="nearest", ctm="half_pixel", nearest_mode="round_prefer_floor",
               scales=None, sizes=None):
    in_shape = x.shape
    if sizes is not None:
        out_shape = [int(s) for s in sizes]
        sc = [F64(np.float32(o) / np.float32(i)) for o, i in zip(out_shape, in_shape)]
    else:
        sc = [F64(np.float32(s)) for s in scales]
        out_shape = [int(math.floor(i * s)) for i, s in zip(in_shape, sc)]
    y = x.astype(F64)
    for ax, (ni, no, s) in enumerate(zip(in_shape, out_shape, sc)):
        if ni == no and s == 1.0:
            continue
        xo = np.arange(no, dtype=F64)
        if ctm == "half_pixel":
            c = (xo + 0.5) / s - 0.5
        elif ctm == "pytorch_half_pixel":
            c = (xo + 0.5) / s - 0.5 if no > 1 else np.zeros(no)
        elif ctm == "align_corners":
            c = xo * (ni - 1) / (no - 1) if no > 1 else np.zeros(no)
        elif ctm == "asymmetric":
            c = xo / s
        else:
            raise KeyError(ctm)
        if mode == "nearest":
            fl = np.floor(c)
            frac = c - fl
            if nearest_mode == "floor":
                r = fl
            elif nearest_mode == "ceil":
                r = np.ceil(c)
            elif nearest_mode == "round_prefer_floor":
                r = np.where(frac == 0.5, fl, np.where(frac < 0.5, fl, fl + 1))
            elif nearest_mode == "round_prefer_ceil":
                r = np.where(frac >= 0.5, fl + 1, fl)
            else:
                raise KeyError(nearest_mode)
            idx = np.clip(r, 0, ni - 1).astype(np.int64)
            y = np.take(y, idx, axis=ax)
        elif mode == "linear":
            c = np.clip(c, 0, ni - 1)
            i0 = np.floor(c).astype(np.int64)
            i1 = np.minimum(i0 + 1, ni - 1)
            w = c - i0
            shp = [1] * y.ndim
            shp[ax] = no
            w = w.reshape(shp)
            y = np.take(y, i0, axis=ax) * (1 - w) + np.take(y, i1, axis=ax) * w
        else:
            raise KeyError(mode)
    return cast_out(y, x.dtype)


# ==========================================================================
# Test case definitions, per family
# ==========================================================================

def gen_elementwise(s):
    fam, g = "elementwise", Gen("elementwise")
    all_pairs = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), ()), ((), (2, 3)), ((5,), (2, 3, 5)),
                 ((2, 1, 5, 1), (7, 1, 3)), ((1,), (3, 1, 7)), ((1, 3, 5, 7), (1, 3, 5, 7)),
                 ((2, 3, 1, 1), (3, 5, 7)), ((3, 5), ())]
    subset = [all_pairs[i] for i in (0, 1, 3, 5, 6, 9)]
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"]:
        for sa, sb in (all_pairs if op in ("Add", "Mul") else subset):
            if op == "Pow":
                a = g.f(sa, 0.25, 3.0, 1 / 16, nonzero=True)
                b = g.f(sb, -2.0, 2.0, 1 / 4)
                tol = TOL_TRANS
            elif op == "Div":
                a = g.f(sa)
                b = g.f(sb, -4.0, 4.0, 1 / 8, nonzero=True)
                tol = TOL_EXACT
            else:
                a, b, tol = g.f(sa), g.f(sb), TOL_EXACT
            s.add(fam, f"{op.lower()}_{sname(sa)}_by_{sname(sb)}", op,
                  [T("a", a), T("b", b)], [("y", ref_binary(op, a, b))], tol=tol)
    # Pow: negative bases with integral exponents, float exponent broadcast, int64 exponent
    a = f32([-3.0, -2.0, -1.5, -1.0, 0.0, 0.5, 2.0, 3.0])
    b = f32([2.0, 3.0, 2.0, 5.0, 2.0, -1.0, 0.5, -2.0])
    s.add(fam, "pow_negative_base_integral_exponent", "Pow", [T("a", a), T("b", b)],
          [("y", ref_binary("Pow", a, b))], tol=TOL_TRANS)
    a = g.f((2, 3, 4))
    b = f32(2.0)
    s.add(fam, "pow_square_scalar_exponent", "Pow", [T("a", a), T("b", b)],
          [("y", ref_binary("Pow", a, b))], tol=TOL_TRANS)
    a = g.f((3, 4), 0.5, 2.0, 1 / 32)
    b = i64(3, -2, 0, 1)
    s.add(fam, "pow_float_base_int64_exponent", "Pow", [T("a", a), T("b", b)],
          [("y", cast_out(np.power(a.astype(F64), b.astype(F64)), np.float32))], tol=TOL_TRANS)
    # integer variants
    for dt in (np.int32, np.int64):
        dn = np.dtype(dt).name
        for op in ["Add", "Sub", "Mul", "Div", "Max", "Min"]:
            for sa, sb in [((2, 3), (2, 3)), ((3, 1), (1, 4)), ((2, 3, 5), ())]:
                lo, hi = (-20, 20) if op != "Mul" else (-50, 50)
                a = g.i(sa, -100, 100, dt)
                b = g.i(sb, lo, hi, dt, nonzero=(op == "Div"))
                s.add(fam, f"{op.lower()}_{dn}_{sname(sa)}_by_{sname(sb)}", op,
                      [T("a", a), T("b", b)], [("y", ref_binary(op, a, b))])
    a = np.array([7, -7, 7, -7, 0, 1, -1, 100], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, 3, -7], dtype=np.int32)
    s.add(fam, "div_int32_truncates_toward_zero", "Div", [T("a", a), T("b", b)],
          [("y", ref_binary("Div", a, b))])
    a = i64(2 ** 40 + 1, -(2 ** 50) + 3, 2 ** 62, -5)
    b = i64(1, 2 ** 33, -(2 ** 61), 2 ** 53 + 1)
    s.add(fam, "add_int64_large_values", "Add", [T("a", a), T("b", b)], [("y", ref_binary("Add", a, b))])
    s.add(fam, "mul_int64_large_values", "Mul", [T("a", i64(2 ** 31, -(2 ** 20) - 1, 3)), T("b", i64(2 ** 30, 2 ** 21, -(2 ** 60)))],
          [("y", ref_binary("Mul", i64(2 ** 31, -(2 ** 20) - 1, 3), i64(2 ** 30, 2 ** 21, -(2 ** 60))))])
    # float16
    for op, sa, sb in [("Add", (2, 3), (2, 3)), ("Mul", (3, 1), (1, 4)), ("Sub", (2, 3, 4), (4,)),
                       ("Div", (5,), ())]:
        a = g.f(sa, -4, 4, 1 / 16, dtype=np.float16)
        b = g.f(sb, -4, 4, 1 / 8, nonzero=True, dtype=np.float16)
        s.add(fam, f"{op.lower()}_float16_{sname(sa)}_by_{sname(sb)}", op,
              [T("a", a), T("b", b)], [("y", ref_binary(op, a, b))])
    # variadic Max / Min
    for op in ("Max", "Min"):
        a, b, c = g.f((3, 1)), g.f((1, 4)), g.f((3, 4))
        s.add(fam, f"{op.lower()}_three_inputs_broadcast", op, [T("a", a), T("b", b), T("c", c)],
              [("y", ref_variadic(op, [a, b, c]))])
        a, b, c = g.i((2, 3), -9, 9, np.int32), g.i((3,), -9, 9, np.int32), g.i((), -9, 9, np.int32)
        s.add(fam, f"{op.lower()}_int32_three_inputs", op, [T("a", a), T("b", b), T("c", c)],
              [("y", ref_variadic(op, [a, b, c]))])
        a = g.f((2, 5))
        s.add(fam, f"{op.lower()}_single_input", op, [T("a", a)], [("y", a.copy())])
    # special values
    a = f32([1.0, np.nan, np.inf, -np.inf, np.inf, 0.0, -0.0])
    b = f32([2.0, 1.0, 1.0, 1.0, -np.inf, -0.0, -0.0])
    s.add(fam, "add_nan_inf", "Add", [T("a", a), T("b", b)], [("y", ref_binary("Add", a, b))])
    a = f32([1.0, -1.0, 0.0, np.inf, 3.0, -2.5])
    b = f32([0.0, 0.0, 0.0, 2.0, np.inf, -np.inf])
    s.add(fam, "div_by_zero_and_inf", "Div", [T("a", a), T("b", b)], [("y", ref_binary("Div", a, b))])
    # unary
    for op in ["Sqrt", "Exp", "Log", "Neg", "Abs"]:
        for shp in [(), (7,), (2, 3, 5), (1, 3, 1, 5)]:
            if op in ("Sqrt", "Log"):
                x = g.f(shp, 1 / 64, 8.0, nonzero=True)
            else:
                x = g.f(shp, -5.0, 5.0)
            s.add(fam, f"{op.lower()}_{sname(shp)}", op, [T("x", x)], [("y", ref_unary(op, x))],
                  tol=TOL_EXACT if op in ("Sqrt", "Neg", "Abs") else TOL_TRANS)
    for op in ["Neg", "Abs"]:
        for dt in (np.int32, np.int64):
            x = g.i((2, 3), -100, 100, dt)
            s.add(fam, f"{op.lower()}_{np.dtype(dt).name}_2x3", op, [T("x", x)], [("y", ref_unary(op, x))])
        x = g.f((2, 4), dtype=np.float16)
        s.add(fam, f"{op.lower()}_float16_2x4", op, [T("x", x)], [("y", ref_unary(op, x))])
    x = g.f((3, 3), 1 / 64, 8.0, nonzero=True, dtype=np.float16)
    s.add(fam, "sqrt_float16_3x3", "Sqrt", [T("x", x)], [("y", ref_unary("Sqrt", x))])
    x = f32([0.0, -0.0, 4.0, np.inf, -1.0, np.nan, 2.0])
    s.add(fam, "sqrt_special_values", "Sqrt", [T("x", x)], [("y", ref_unary("Sqrt", x))])
    x = f32([0.0, -np.inf, np.inf, np.nan, 100.0, -200.0, 88.0, 1.0])
    s.add(fam, "exp_special_values", "Exp", [T("x", x)], [("y", ref_unary("Exp", x))], tol=TOL_TRANS)
    x = f32([0.0, -1.0, np.inf, np.nan, 1.0, 1e-30, 3e38])
    s.add(fam, "log_special_values", "Log", [T("x", x)], [("y", ref_unary("Log", x))], tol=TOL_TRANS)
    x = f32([-np.inf, np.inf, np.nan, -0.0, 0.0])
    s.add(fam, "abs_special_values", "Abs", [T("x", x)], [("y", ref_unary("Abs", x))])
    s.add(fam, "neg_special_values", "Neg", [T("x", x)], [("y", ref_unary("Neg", x))])


def gen_activation(s):
    fam, g = "activation", Gen("activation")
    shapes = [(), (7,), (2, 3, 5), (1, 3, 5, 7)]
    for op, tol in [("Relu", TOL_EXACT), ("Sigmoid", TOL_TRANS), ("Tanh", TOL_TRANS), ("Erf", TOL_TRANS)]:
        for shp in shapes:
            x = g.f(shp, -5.0, 5.0)
            s.add(fam, f"{op.lower()}_{sname(shp)}", op, [T("x", x)], [("y", ref_unary(op, x))], tol=tol)
    x = f32([-100.0, -30.0, -20.0, -10.0, -1e-3, 0.0, 1e-3, 10.0, 20.0, 30.0, 100.0])
    for op in ("Sigmoid", "Tanh", "Erf"):
        s.add(fam, f"{op.lower()}_saturation", op, [T("x", x)], [("y", ref_unary(op, x))], tol=TOL_TRANS)
    x = f32([-np.inf, np.inf, np.nan, -0.0, 0.0, -1.0, 1.0])
    s.add(fam, "relu_special_values", "Relu", [T("x", x)], [("y", ref_unary("Relu", x))])
    x = g.i((2, 5), -9, 9, np.int32)
    s.add(fam, "relu_int32_2x5", "Relu", [T("x", x)], [("y", ref_unary("Relu", x))])
    x = g.i((2, 5), -9, 9, np.int8)
    s.add(fam, "relu_int8_2x5", "Relu", [T("x", x)], [("y", ref_unary("Relu", x))])
    x = g.f((3, 4), dtype=np.float16)
    s.add(fam, "relu_float16_3x4", "Relu", [T("x", x)], [("y", ref_unary("Relu", x))])
    s.add(fam, "sigmoid_float16_3x4", "Sigmoid", [T("x", x)], [("y", ref_unary("Sigmoid", x))])
    # LeakyRelu
    for shp, alpha in [((2, 3, 5), None), ((7,), 0.2), ((1, 3, 5, 7), 0.1), ((), 0.5), ((3, 5), 1.5)]:
        x = g.f(shp)
        at = {} if alpha is None else {"alpha": alpha}
        nm = "default_alpha" if alpha is None else "alpha_" + str(alpha).replace(".", "p")
        s.add(fam, f"leakyrelu_{sname(shp)}_{nm}", "LeakyRelu", [T("x", x)],
              [("y", ref_unary("LeakyRelu", x, **at))], attrs=at)
    # Clip (opset 13: min/max are optional tensor inputs)
    x = g.f((3, 5))
    for nm, lo, hi in [("min_max", -1.0, 1.5), ("min_only", 0.0, None), ("max_only", None, 2.0),
                       ("no_bounds", None, None), ("min_equals_max", 0.5, 0.5)]:
        ins = [T("x", x),
               T("min", f32(lo), True) if lo is not None else OMIT,
               T("max", f32(hi), True) if hi is not None else OMIT]
        while ins and ins[-1] is OMIT:
            ins.pop()
        s.add(fam, f"clip_{nm}", "Clip", ins, [("y", ref_clip(x, lo, hi))], opset=13)
    x4 = g.f((1, 3, 4, 5), -8, 8)
    s.add(fam, "clip_1x3x4x5_relu6", "Clip", [T("x", x4), T("min", f32(0.0), True), T("max", f32(6.0), True)],
          [("y", ref_clip(x4, 0.0, 6.0))], opset=13)
    x0 = f32(3.5)
    s.add(fam, "clip_scalar", "Clip", [T("x", x0), T("min", f32(-1.0), True), T("max", f32(1.0), True)],
          [("y", ref_clip(x0, -1.0, 1.0))], opset=13)
    xi = g.i((2, 6), -50, 50, np.int64)
    s.add(fam, "clip_int64_min_max", "Clip", [T("x", xi), T("min", np.array(-10, np.int64), True),
                                              T("max", np.array(20, np.int64), True)],
          [("y", ref_clip(xi, -10, 20))], opset=13)
    xi = g.i((2, 6), -50, 50, np.int32)
    s.add(fam, "clip_int32_max_only", "Clip", [T("x", xi), OMIT, T("max", np.array(7, np.int32), True)],
          [("y", ref_clip(xi, None, 7))], opset=13)
    # Gelu (opset 20)
    for shp in [(2, 3, 5), (7,), (1, 3, 4, 4)]:
        x = g.f(shp, -5.0, 5.0)
        for approx in ("none", "tanh"):
            s.add(fam, f"gelu_{approx}_{sname(shp)}", "Gelu", [T("x", x)],
                  [("y", ref_unary("Gelu", x, approximate=approx))], attrs={"approximate": approx},
                  opset=20, tol=TOL_TRANS)
    x = g.f((4,), -3, 3)
    s.add(fam, "gelu_default_attr_4", "Gelu", [T("x", x)], [("y", ref_unary("Gelu", x))], opset=20, tol=TOL_TRANS)
    # Softmax (opset 13: softmax along a single axis)
    x = g.f((2, 3, 5))
    for axis in (-1, 0, 1, 2, -2):
        s.add(fam, f"softmax_2x3x5_axis_{axis}".replace("-", "neg"), "Softmax", [T("x", x)],
              [("y", ref_softmax(x, axis))], attrs={"axis": axis}, opset=13, tol=TOL_TRANS)
    x = g.f((7,))
    s.add(fam, "softmax_7_default_axis", "Softmax", [T("x", x)], [("y", ref_softmax(x))], opset=13, tol=TOL_TRANS)
    x = g.f((1, 5, 3, 3))
    s.add(fam, "softmax_1x5x3x3_axis_1", "Softmax", [T("x", x)], [("y", ref_softmax(x, 1))],
          attrs={"axis": 1}, opset=13, tol=TOL_TRANS)
    x = f32([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0], [0.0, 0.0, 0.0]])
    s.add(fam, "softmax_large_values_stable", "Softmax", [T("x", x)], [("y", ref_softmax(x))],
          opset=13, tol=TOL_TRANS)
    x = g.f((3, 1))
    s.add(fam, "softmax_3x1_axis_1_size_one", "Softmax", [T("x", x)], [("y", ref_softmax(x, 1))],
          attrs={"axis": 1}, opset=13, tol=TOL_TRANS)


def gen_conv(s):
    fam, g = "conv", Gen("conv")

    def conv(name, xs, ws, bias=True, **at):
        x = g.f(xs, -2, 2)
        w = g.f(ws, -1, 1)
        ins = [T("x", x), T("w", w, True)]
        b = None
        if bias:
            b = g.f((ws[0],), -1, 1)
            ins.append(T("b", b, True))
        y = ref_conv(x, w, b, **at)
        s.add(fam, name, "Conv", ins, [("y", y)], attrs=at, tol=TOL_ACCUM)

    conv("conv2d_basic_no_bias", (1, 1, 5, 5), (1, 1, 3, 3), bias=False)
    conv("conv2d_pads_1_bias", (1, 3, 7, 7), (4, 3, 3, 3), pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    conv("conv2d_stride_2_pads_1", (1, 2, 7, 7), (3, 2, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
    conv("conv2d_asymmetric_pads", (1, 2, 5, 6), (2, 2, 3, 3), pads=[0, 1, 2, 1])
    conv("conv2d_dilation_2", (1, 2, 9, 9), (3, 2, 3, 3), dilations=[2, 2], pads=[2, 2, 2, 2])
    conv("conv2d_dilation_2x1_stride_1x2", (1, 1, 8, 9), (2, 1, 3, 2), dilations=[2, 1], strides=[1, 2])
    conv("conv2d_group_2", (1, 4, 6, 6), (6, 2, 3, 3), group=2, pads=[1, 1, 1, 1])
    conv("conv2d_depthwise", (1, 3, 7, 7), (3, 1, 3, 3), group=3, pads=[1, 1, 1, 1])
    conv("conv2d_depthwise_multiplier_2_stride_2", (1, 3, 7, 7), (6, 1, 3, 3), group=3, strides=[2, 2])
    conv("conv2d_same_upper_stride_2", (1, 2, 6, 6), (2, 2, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2])
    conv("conv2d_same_lower_stride_2", (1, 2, 6, 6), (2, 2, 3, 3), auto_pad="SAME_LOWER", strides=[2, 2])
    conv("conv2d_same_upper_even_kernel", (1, 1, 5, 5), (2, 1, 2, 2), auto_pad="SAME_UPPER")
    conv("conv2d_same_lower_even_kernel", (1, 1, 5, 5), (2, 1, 2, 2), auto_pad="SAME_LOWER")
    conv("conv2d_valid_stride_2", (1, 2, 7, 8), (3, 2, 3, 3), auto_pad="VALID", strides=[2, 2])
    conv("conv2d_batch_2_rect_kernel", (2, 3, 5, 7), (2, 3, 2, 3), strides=[2, 1], pads=[1, 0, 0, 1])
    conv("conv2d_1x1_kernel", (2, 5, 3, 3), (7, 5, 1, 1))
    conv("conv2d_1x3x17x17_stride_2", (1, 3, 17, 17), (4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
    conv("conv2d_kernel_larger_than_input_with_pads", (1, 1, 2, 2), (1, 1, 3, 3), pads=[1, 1, 1, 1])
    conv("conv1d_basic", (1, 2, 11), (3, 2, 3), kernel_shape=[3])
    conv("conv1d_stride_2_dilation_2_pads", (2, 2, 11), (3, 2, 3), strides=[2], dilations=[2], pads=[1, 2])
    conv("conv1d_group_2", (1, 4, 7), (4, 2, 3), group=2, pads=[1, 1], bias=False)
    conv("conv1d_depthwise_same_lower", (1, 3, 5), (3, 1, 4), group=3, auto_pad="SAME_LOWER")
    conv("conv3d_basic", (1, 2, 4, 4, 4), (2, 2, 2, 2, 2), pads=[1, 0, 0, 0, 1, 0], strides=[1, 2, 1])

    def convt(name, xs, ws, group=1, bias=True, **at):
        x = g.f(xs, -2, 2)
        w = g.f(ws, -1, 1)
        ins = [T("x", x), T("w", w, True)]
        b = None
        if bias:
            b = g.f((ws[1] * group,), -1, 1)
            ins.append(T("b", b, True))
        if group != 1:
            at["group"] = group
        y = ref_conv_transpose(x, w, b, **at)
        s.add(fam, name, "ConvTranspose", ins, [("y", y)], attrs=at, tol=TOL_ACCUM)

    convt("convtranspose2d_basic", (1, 1, 3, 3), (1, 1, 3, 3), bias=False)
    convt("convtranspose2d_stride_2", (1, 2, 3, 3), (2, 3, 3, 3), strides=[2, 2])
    convt("convtranspose2d_stride_2_pads_1_output_padding_1", (1, 2, 4, 4), (2, 2, 3, 3),
          strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    convt("convtranspose2d_group_2", (1, 4, 3, 3), (4, 1, 3, 3), group=2, strides=[1, 1])
    convt("convtranspose2d_depthwise_stride_2", (1, 3, 3, 4), (3, 1, 2, 2), group=3, strides=[2, 2])
    convt("convtranspose2d_dilation_2", (1, 2, 3, 3), (2, 2, 3, 3), dilations=[2, 2])
    convt("convtranspose2d_rect_kernel_strides_asym_pads", (2, 2, 3, 4), (2, 3, 2, 3),
          strides=[2, 3], pads=[0, 1, 1, 0], kernel_shape=[2, 3])
    convt("convtranspose2d_output_padding_stride_3", (1, 1, 2, 3), (1, 2, 3, 3), strides=[3, 2],
          output_padding=[2, 1])
    convt("convtranspose1d_stride_3_pads", (1, 2, 5), (2, 3, 4), strides=[3], pads=[1, 2])
    convt("convtranspose1d_group_2_dilation_2", (1, 4, 5), (4, 1, 3), group=2, dilations=[2], bias=False)


def gen_pool(s):
    fam, g = "pool", Gen("pool")

    def pool(name, op, xs, lo=-4.0, hi=4.0, loose=False, **at):
        x = g.f(xs, lo, hi)
        kind = "max" if op == "MaxPool" else "avg"
        s.add(fam, name, op, [T("x", x)], [("y", ref_pool(x, kind, **at))], attrs=at,
              tol=TOL_EXACT if kind == "max" else TOL_ACCUM, symbolic_output_shape=loose)

    M, A = "MaxPool", "AveragePool"
    pool("maxpool_2x2_stride_2", M, (1, 1, 4, 4), kernel_shape=[2, 2], strides=[2, 2])
    pool("maxpool_3x3_pads_1", M, (1, 2, 5, 5), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    pool("maxpool_3x3_stride_2_7x7", M, (1, 3, 7, 7), kernel_shape=[3, 3], strides=[2, 2])
    pool("maxpool_ceil_mode_6x6", M, (1, 1, 6, 6), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    pool("maxpool_floor_mode_6x6", M, (1, 1, 6, 6), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=0)
    # ceil_mode: a last window that would start inside the right padding is dropped (ONNX spec,
    # onnxruntime, PyTorch); onnx 1.17's shape inference still counts it -> loose=True.
    pool("maxpool_ceil_mode_pads_5x5", M, (1, 2, 5, 5), kernel_shape=[2, 2], strides=[2, 2],
         pads=[1, 1, 1, 1], ceil_mode=1, loose=True)
    pool("maxpool_dilations_2", M, (1, 1, 7, 7), kernel_shape=[2, 2], dilations=[2, 2])
    pool("maxpool_dilations_2_stride_2_pads", M, (1, 2, 8, 8), kernel_shape=[3, 3], dilations=[2, 2],
         strides=[2, 2], pads=[2, 2, 2, 2])
    pool("maxpool_asymmetric_pads", M, (1, 1, 5, 6), kernel_shape=[3, 2], pads=[0, 1, 2, 0])
    pool("maxpool_negative_input_with_pads", M, (1, 2, 4, 4), lo=-8.0, hi=-0.5,
         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    pool("maxpool_rect_kernel_strides", M, (2, 2, 6, 7), kernel_shape=[2, 3], strides=[1, 2])
    pool("maxpool_same_upper", M, (1, 2, 6, 6), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    pool("maxpool_same_lower", M, (1, 2, 6, 6), kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER")
    pool("maxpool_valid", M, (1, 1, 7, 5), kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID")
    pool("maxpool_1d", M, (1, 2, 9), kernel_shape=[3], strides=[2])
    pool("maxpool_1d_pads_ceil", M, (2, 1, 8), kernel_shape=[3], strides=[3], pads=[1, 1], ceil_mode=1,
         loose=True)
    pool("maxpool_1d_pads_ceil_last_window_kept", M, (1, 1, 7), kernel_shape=[3], strides=[3], pads=[1, 1],
         ceil_mode=1)
    pool("maxpool_1x3x17x17_3x3_stride_2_pads_1", M, (1, 3, 17, 17), kernel_shape=[3, 3], strides=[2, 2],
         pads=[1, 1, 1, 1])
    pool("maxpool_3d", M, (1, 1, 4, 4, 4), kernel_shape=[2, 2, 2], strides=[2, 2, 2])

    pool("averagepool_2x2_stride_2", A, (1, 1, 4, 4), kernel_shape=[2, 2], strides=[2, 2])
    pool("averagepool_3x3_pads_1_exclude_pad", A, (1, 2, 5, 5), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    pool("averagepool_3x3_pads_1_include_pad", A, (1, 2, 5, 5), kernel_shape=[3, 3], pads=[1, 1, 1, 1],
         count_include_pad=1)
    pool("averagepool_ceil_mode_6x6", A, (1, 1, 6, 6), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    pool("averagepool_ceil_mode_pads_exclude_pad", A, (1, 2, 5, 5), kernel_shape=[2, 2], strides=[2, 2],
         pads=[1, 1, 1, 1], ceil_mode=1, loose=True)
    pool("averagepool_ceil_mode_pads_include_pad", A, (1, 2, 5, 5), kernel_shape=[2, 2], strides=[2, 2],
         pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1, loose=True)
    # the last (ceil_mode) window runs past the input: only in-bounds positions (plus real
    # padding, when count_include_pad=1) are counted in the divisor
    pool("averagepool_ceil_mode_include_pad_partial_window", A, (1, 1, 6, 6), kernel_shape=[3, 3],
         strides=[2, 2], ceil_mode=1, count_include_pad=1)
    pool("averagepool_ceil_mode_include_pad_pads_partial_window", A, (1, 1, 6, 7), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1, count_include_pad=1)
    pool("averagepool_stride_2_asym_pads_include_pad", A, (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 0, 0, 1], count_include_pad=1)
    pool("averagepool_stride_2_asym_pads_exclude_pad", A, (1, 2, 7, 6), kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 0, 0, 1], count_include_pad=0)
    pool("averagepool_same_upper_exclude_pad", A, (1, 1, 5, 5), kernel_shape=[2, 2], auto_pad="SAME_UPPER")
    pool("averagepool_same_lower_stride_2", A, (1, 2, 6, 6), kernel_shape=[3, 3], strides=[2, 2],
         auto_pad="SAME_LOWER")
    pool("averagepool_valid_rect", A, (2, 1, 5, 7), kernel_shape=[2, 3], strides=[1, 2], auto_pad="VALID")
    pool("averagepool_1d_pads", A, (1, 3, 7), kernel_shape=[3], strides=[2], pads=[1, 1])
    pool("averagepool_1d_include_pad", A, (1, 3, 7), kernel_shape=[3], strides=[2], pads=[1, 1],
         count_include_pad=1)
    pool("averagepool_1x3x17x17_3x3_stride_2", A, (1, 3, 17, 17), kernel_shape=[3, 3], strides=[2, 2])

    for shp in [(1, 3, 5, 5), (2, 4, 1, 1), (1, 2, 7), (1, 1, 3, 4, 5), (2, 3, 17, 17)]:
        x = g.f(shp)
        s.add(fam, f"globalaveragepool_{sname(shp)}", "GlobalAveragePool", [T("x", x)],
              [("y", ref_global_pool(x, "avg"))], tol=TOL_ACCUM)
    for shp in [(1, 3, 5, 5), (2, 2, 7)]:
        x = g.f(shp)
        s.add(fam, f"globalmaxpool_{sname(shp)}", "GlobalMaxPool", [T("x", x)],
              [("y", ref_global_pool(x, "max"))])


def gen_matmul(s):
    fam, g = "matmul", Gen("matmul")
    for sa, sb in [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                   ((2, 1, 3, 4), (5, 4, 2)), ((1, 7), (7, 1)), ((2, 3, 4), (2, 4, 5)), ((7,), (2, 7, 3)),
                   ((2, 3, 5), (5,)), ((1, 1, 3, 5), (5, 7)), ((3, 2, 4), (1, 4, 3)), ((1, 1), (1, 1)),
                   ((5, 13), (13, 11))]:
        a, b = g.f(sa, -2, 2), g.f(sb, -2, 2)
        s.add(fam, f"matmul_{sname(sa)}_by_{sname(sb)}", "MatMul", [T("a", a), T("b", b)],
              [("y", ref_matmul(a, b))], tol=TOL_ACCUM)
    a, b = g.f((3, 4), -2, 2), g.f((4, 6), -2, 2)
    s.add(fam, "matmul_3x4_by_const_4x6", "MatMul", [T("a", a), T("b", b, True)], [("y", ref_matmul(a, b))],
          tol=TOL_ACCUM)
    for dt in (np.int32, np.int64):
        a, b = g.i((2, 3), -9, 9, dt), g.i((3, 4), -9, 9, dt)
        s.add(fam, f"matmul_{np.dtype(dt).name}_2x3_by_3x4", "MatMul", [T("a", a), T("b", b)],
              [("y", ref_matmul(a, b))])

    def gemm(name, sa, sb, sc, binit=False, **at):
        a, b = g.f(sa, -2, 2), g.f(sb, -2, 2)
        ins = [T("a", a), T("b", b, binit)]
        c = None
        if sc is not None:
            c = g.f(sc, -2, 2)
            ins.append(T("c", c))
        s.add(fam, name, "Gemm", ins, [("y", ref_gemm(a, b, c, **at))], attrs=at, tol=TOL_ACCUM)

    gemm("gemm_basic_c_vector", (3, 4), (4, 5), (5,))
    gemm("gemm_transa", (4, 3), (4, 5), (3, 5), transA=1)
    gemm("gemm_transb", (3, 4), (5, 4), (5,), transB=1)
    gemm("gemm_transa_transb", (4, 3), (5, 4), (3, 5), transA=1, transB=1)
    gemm("gemm_alpha_beta", (3, 4), (4, 5), (3, 5), alpha=0.5, beta=2.0)
    gemm("gemm_c_column_3x1", (3, 4), (4, 5), (3, 1))
    gemm("gemm_c_row_1x5", (3, 4), (4, 5), (1, 5), beta=-1.5)
    gemm("gemm_c_scalar", (3, 4), (4, 5), ())
    gemm("gemm_c_size_1", (3, 4), (4, 5), (1,), alpha=2.0)
    gemm("gemm_c_omitted", (3, 4), (4, 5), None)
    gemm("gemm_c_omitted_transb_alpha", (2, 7), (3, 7), None, transB=1, alpha=0.25)
    gemm("gemm_1x7_by_7x1", (1, 7), (7, 1), (1,))
    gemm("gemm_transb_const_weights", (2, 13), (11, 13), (11,), binit=True, transB=1)
    gemm("gemm_beta_zero", (3, 4), (4, 5), (3, 5), beta=0.0)


def gen_norm(s):
    fam, g = "norm", Gen("norm")
    for shp, eps in [((2, 3, 4, 5), None), ((1, 4, 1, 1), 1e-3), ((3, 2), None), ((2, 3, 7), 0.01),
                     ((1, 3, 17, 17), None), ((2, 5, 2, 3, 2), None)]:
        c = shp[1]
        x = g.f(shp)
        sc, bi, mu = g.f((c,), -2, 2), g.f((c,), -1, 1), g.f((c,), -1, 1)
        var = g.f((c,), 0.25, 3.0)
        at = {} if eps is None else {"epsilon": eps}
        nm = f"batchnorm_{sname(shp)}" + ("" if eps is None else "_eps")
        s.add(fam, nm, "BatchNormalization",
              [T("x", x), T("scale", sc, True), T("b", bi, True), T("mean", mu, True), T("var", var, True)],
              [("y", ref_batchnorm(x, sc, bi, mu, var, **at))], attrs=at, tol=TOL_ACCUM)
    x = g.f((2, 3, 4, 5))
    c = 3
    sc, bi, mu, var = g.f((c,), -2, 2), g.f((c,), -1, 1), g.f((c,), -1, 1), g.f((c,), 0.25, 3.0)
    s.add(fam, "batchnorm_momentum_attr_ignored", "BatchNormalization",
          [T("x", x), T("scale", sc, True), T("b", bi, True), T("mean", mu, True), T("var", var, True)],
          [("y", ref_batchnorm(x, sc, bi, mu, var))], attrs={"momentum": 0.7, "training_mode": 0},
          tol=TOL_ACCUM)
    for shp, axis, bias, eps in [((2, 3, 5), -1, True, None), ((2, 3, 5), -1, False, None),
                                 ((2, 3, 5), 1, True, None), ((2, 3, 5), -2, False, 1e-3),
                                 ((4, 7), -1, True, 1e-6), ((1, 2, 3, 4), 2, True, None),
                                 ((3, 4), 0, True, None), ((7,), 0, True, None),
                                 ((2, 17, 16), -1, True, None)]:
        x = g.f(shp, -3, 3)
        nshape = shp[norm_axis(axis, len(shp)):]
        sc = g.f(nshape, -2, 2)
        bi = g.f(nshape, -1, 1) if bias else None
        at = {"axis": axis}
        if eps is not None:
            at["epsilon"] = eps
        ins = [T("x", x), T("scale", sc, True)] + ([T("b", bi, True)] if bias else [])
        nm = f"layernorm_{sname(shp)}_axis_{axis}".replace("-", "neg") + ("" if bias else "_no_bias") + \
            ("_eps" if eps is not None else "")
        s.add(fam, nm, "LayerNormalization", ins,
              [("y", ref_layernorm(x, sc, bi, axis, 1e-5 if eps is None else eps))], attrs=at, tol=TOL_ACCUM)
    x = g.f((2, 3, 4))
    sc, bi = g.f((4,), -2, 2), g.f((4,), -1, 1)
    s.add(fam, "layernorm_2x3x4_default_axis", "LayerNormalization", [T("x", x), T("scale", sc, True), T("b", bi, True)],
          [("y", ref_layernorm(x, sc, bi))], tol=TOL_ACCUM)


def gen_shape(s):
    fam, g = "shape", Gen("shape")
    # Flatten
    x = g.f((2, 3, 4, 5))
    for axis in (0, 1, 2, 3, 4, -1, -3):
        at = {"axis": axis}
        s.add(fam, f"flatten_2x3x4x5_axis_{axis}".replace("-", "neg"), "Flatten", [T("x", x)],
              [("y", ref_flatten(x, axis))], attrs=at)
    s.add(fam, "flatten_default_axis", "Flatten", [T("x", x)], [("y", ref_flatten(x))])
    xi = g.i((5,), -9, 9)
    s.add(fam, "flatten_int64_rank1_axis_0", "Flatten", [T("x", xi)], [("y", ref_flatten(xi, 0))], attrs={"axis": 0})
    s.add(fam, "flatten_int64_rank1_axis_1", "Flatten", [T("x", xi)], [("y", ref_flatten(xi, 1))], attrs={"axis": 1})
    # Reshape
    x = g.f((2, 3, 4))
    for nm, shp in [("4_neg1", [4, -1]), ("0_neg1", [0, -1]), ("0_0_neg1", [0, 0, -1]), ("neg1", [-1]),
                    ("0_12", [0, 12]), ("1_neg1_2_1", [1, -1, 2, 1]), ("2_0_2_2", [2, 0, 2, 2]),
                    ("neg1_3_1", [-1, 3, 1])]:
        sh = i64(*shp)
        s.add(fam, f"reshape_2x3x4_to_{nm}", "Reshape", [T("x", x), T("shape", sh, True)],
              [("y", ref_reshape(x, sh))])
    x1 = g.f((1, 1))
    s.add(fam, "reshape_1x1_to_scalar", "Reshape", [T("x", x1), T("shape", np.zeros((0,), np.int64), True)],
          [("y", x1.reshape(()))])
    x0 = g.f(())
    s.add(fam, "reshape_scalar_to_1x1", "Reshape", [T("x", x0), T("shape", i64(1, 1), True)],
          [("y", x0.reshape(1, 1))])
    xi = g.i((3, 4), -9, 9)
    s.add(fam, "reshape_int64_3x4_to_2x6", "Reshape", [T("x", xi), T("shape", i64(2, 6), True)],
          [("y", ref_reshape(xi, i64(2, 6)))])
    # Transpose
    for shp, perm in [((2, 3, 4), None), ((2, 3, 4), [1, 0, 2]), ((1, 3, 5, 7), [0, 2, 3, 1]),
                      ((1, 3, 5, 7), [0, 3, 1, 2]), ((3, 5), None), ((7,), None), ((2, 3, 4, 5), [3, 2, 1, 0]),
                      ((2, 1, 3), [2, 1, 0])]:
        x = g.f(shp)
        at = {} if perm is None else {"perm": perm}
        nm = "default_perm" if perm is None else "perm_" + "".join(map(str, perm))
        s.add(fam, f"transpose_{sname(shp)}_{nm}", "Transpose", [T("x", x)],
              [("y", np.ascontiguousarray(np.transpose(x, perm)))], attrs=at)
    xb = g.b((2, 3))
    s.add(fam, "transpose_bool_2x3", "Transpose", [T("x", xb)], [("y", np.ascontiguousarray(xb.T))])
    xi = g.i((2, 3, 4), -99, 99)
    s.add(fam, "transpose_int64_2x3x4_perm_201", "Transpose", [T("x", xi)],
          [("y", np.ascontiguousarray(np.transpose(xi, (2, 0, 1))))], attrs={"perm": [2, 0, 1]})
    # Squeeze / Unsqueeze (opset 13: axes as input)
    for shp, axes in [((3, 1, 5), [1]), ((3, 1, 5, 1), [-1]), ((1, 3, 1, 5), [0, 2]), ((1, 3, 1, 1, 5), None),
                      ((1,), None), ((1, 1, 4), [-3, 1])]:
        x = g.f(shp)
        ins = [T("x", x)] + ([T("axes", i64(*axes), True)] if axes is not None else [])
        nm = "all" if axes is None else "axes_" + "_".join(map(str, axes)).replace("-", "neg")
        s.add(fam, f"squeeze_{sname(shp)}_{nm}", "Squeeze", ins, [("y", ref_squeeze(x, axes))])
    for shp, axes in [((3, 5), [0]), ((3, 5), [-1]), ((3, 5), [1, 3]), ((), [0]), ((3,), [0, 1]),
                      ((2, 3), [-1, 0]), ((2, 3, 4), [2])]:
        x = g.f(shp) if shp != () else i64(7).reshape(())
        nm = "axes_" + "_".join(map(str, axes)).replace("-", "neg")
        s.add(fam, f"unsqueeze_{sname(shp)}_{nm}", "Unsqueeze", [T("x", x), T("axes", i64(*axes), True)],
              [("y", ref_unsqueeze(x, axes))])
    # Concat
    for nm, shapes, axis in [("axis_0", [(2, 3), (1, 3)], 0), ("axis_neg1_three", [(2, 1), (2, 3), (2, 2)], -1),
                             ("axis_1_rank4", [(1, 2, 3, 3), (1, 3, 3, 3)], 1),
                             ("axis_neg3_rank4", [(1, 2, 3, 3), (1, 1, 3, 3)], -3),
                             ("single_input", [(2, 3)], 1), ("rank1", [(3,), (5,), (1,)], 0)]:
        xs = [g.f(sh) for sh in shapes]
        ins = [T(f"x{i}", a) for i, a in enumerate(xs)]
        s.add(fam, f"concat_{nm}", "Concat", ins, [("y", np.concatenate(xs, axis=axis))], attrs={"axis": axis})
    a, b = i64(1), i64(-1)
    s.add(fam, "concat_int64_shape_vectors", "Concat", [T("a", a), T("b", b), T("c", i64(4, 4))],
          [("y", i64(1, -1, 4, 4))], attrs={"axis": 0})
    # Split
    x = g.f((6, 3))
    s.add(fam, "split_equal_axis_0", "Split", [T("x", x)], [(f"y{i}", o) for i, o in enumerate(ref_split(x, 0, [3, 3]))],
          attrs={"axis": 0}, opset=13)
    x = g.f((3, 7))
    s.add(fam, "split_given_axis_1", "Split", [T("x", x), T("split", i64(2, 3, 2), True)],
          [(f"y{i}", o) for i, o in enumerate(ref_split(x, 1, [2, 3, 2]))], attrs={"axis": 1}, opset=13)
    x = g.f((2, 6, 2))
    s.add(fam, "split_equal_negative_axis", "Split", [T("x", x)],
          [(f"y{i}", o) for i, o in enumerate(ref_split(x, -2, [2, 2, 2]))], attrs={"axis": -2}, opset=13)
    x = g.f((5,))
    s.add(fam, "split_given_default_axis", "Split", [T("x", x), T("split", i64(1, 4), True)],
          [(f"y{i}", o) for i, o in enumerate(ref_split(x, 0, [1, 4]))], opset=13)
    x = g.f((2, 7))
    s.add(fam, "split_num_outputs_uneven_opset18", "Split", [T("x", x)],
          [(f"y{i}", o) for i, o in enumerate(ref_split(x, 1, [3, 3, 1]))], attrs={"axis": 1, "num_outputs": 3},
          opset=18)
    x = g.f((4, 6))
    s.add(fam, "split_num_outputs_even_opset18", "Split", [T("x", x)],
          [(f"y{i}", o) for i, o in enumerate(ref_split(x, -1, [2, 2, 2]))], attrs={"axis": -1, "num_outputs": 3},
          opset=18)
    x = g.f((5, 2))
    s.add(fam, "split_given_opset18", "Split", [T("x", x), T("split", i64(2, 3), True)],
          [(f"y{i}", o) for i, o in enumerate(ref_split(x, 0, [2, 3]))], attrs={"axis": 0}, opset=18)
    xi = i64(4, -1, 7, 0)
    s.add(fam, "split_int64_equal", "Split", [T("x", xi)], [(f"y{i}", o) for i, o in enumerate(ref_split(xi, 0, [2, 2]))],
          opset=13)
    # Slice
    x = g.f((5, 7))
    for nm, st, en, ax, sp in [
        ("basic", [1, 2], [4, 6], None, None),
        ("negative_starts_ends", [-4, -5], [-1, -1], [0, 1], None),
        ("step_2", [0, 1], [5, 7], [0, 1], [2, 3]),
        ("negative_step_reverse", [-1], [INT64_MIN], [1], [-1]),
        ("negative_step_2", [4, 5], [0, 1], [0, 1], [-2, -2]),
        ("omitted_axes_and_steps", [1], [3], None, None),
        ("negative_axis", [2], [INT64_MAX], [-1], None),
        ("ends_out_of_range", [0, -100], [100, 100], [0, 1], None),
        ("axes_unordered", [1, 0], [3, 2], [1, 0], None),
        ("empty_result", [3], [1], [0], None),
    ]:
        ins = [T("x", x), T("starts", i64(*st), True), T("ends", i64(*en), True)]
        if ax is not None:
            ins.append(T("axes", i64(*ax), True))
        if sp is not None:
            if ax is None:
                ins.append(OMIT)
            ins.append(T("steps", i64(*sp), True))
        s.add(fam, f"slice_{nm}", "Slice", ins, [("y", ref_slice(x, st, en, ax, sp))])
    x = g.f((2, 3, 4, 5))
    s.add(fam, "slice_rank4_axis_2_and_3", "Slice",
          [T("x", x), T("starts", i64(1, 0), True), T("ends", i64(3, -1), True), T("axes", i64(2, -1), True),
           T("steps", i64(1, 2), True)], [("y", ref_slice(x, [1, 0], [3, -1], [2, -1], [1, 2]))])
    xi = i64(2, 3, 5, 7)
    s.add(fam, "slice_int64_shape_tail", "Slice", [T("x", xi), T("starts", i64(2), True), T("ends", i64(INT64_MAX), True)],
          [("y", ref_slice(xi, [2], [INT64_MAX]))])
    # Gather (indices are data, never initializers)
    data = g.f((5, 3))
    for nm, idx, axis in [("axis_0", i64(0, 2, 4), 0), ("axis_1_2d_indices", i64(0, 2, 1, 1).reshape(2, 2), 1),
                          ("negative_indices", i64(-1, -5, 2), 0), ("scalar_index_axis_0", i64(3).reshape(()), 0),
                          ("scalar_index_axis_1", i64(-1).reshape(()), 1), ("axis_neg1", i64(2, 0), -1),
                          ("int32_indices", np.array([4, 0, -2], np.int32), 0)]:
        at = {} if axis == 0 and nm == "axis_0" else {"axis": axis}
        s.add(fam, f"gather_{nm}", "Gather", [T("data", data), T("indices", idx)],
              [("y", ref_gather(data, idx, axis))], attrs=at)
    data = g.f((2, 5, 3))
    idx = np.array([[0, 4, 1], [3, 3, -1]], np.int64)
    s.add(fam, "gather_rank3_axis_1", "Gather", [T("data", data), T("indices", idx)],
          [("y", ref_gather(data, idx, 1))], attrs={"axis": 1})
    sh = i64(1, 3, 17, 17)
    s.add(fam, "gather_shape_vector_scalar_index", "Gather", [T("data", sh), T("indices", i64(0).reshape(()))],
          [("y", ref_gather(sh, i64(0).reshape(()), 0))], attrs={"axis": 0})
    # Shape
    x = g.f((2, 3, 5))
    s.add(fam, "shape_2x3x5", "Shape", [T("x", x)], [("y", i64(2, 3, 5))])
    s.add(fam, "shape_scalar", "Shape", [T("x", f32(1.5))], [("y", np.zeros((0,), np.int64))])
    for nm, at, exp in [("start_1", {"start": 1}, i64(3, 5)), ("end_neg1", {"end": -1}, i64(2, 3)),
                        ("start_neg2", {"start": -2}, i64(3, 5)), ("start_1_end_2", {"start": 1, "end": 2}, i64(3))]:
        s.add(fam, f"shape_2x3x5_{nm}", "Shape", [T("x", x)], [("y", exp)], attrs=at, opset=15)


def gen_reduce(s):
    fam, g = "reduce", Gen("reduce")
    x = g.f((2, 3, 4))
    x4 = g.f((1, 3, 5, 5))
    x1 = g.f((7,))
    variants = [("axes_1_keepdims_1", x, [1], 1), ("axes_neg1_keepdims_0", x, [-1], 0),
                ("axes_0_2_keepdims_1", x, [0, 2], 1), ("all_keepdims_1", x, None, 1),
                ("all_keepdims_0", x, None, 0), ("rank1_keepdims_0", x1, [0], 0),
                ("rank4_axes_2_3", x4, [2, 3], 1), ("rank4_axes_neg3_keepdims_0", x4, [-3], 0)]
    for op in ("ReduceMean", "ReduceMax"):
        for nm, a, axes, kd in variants:
            at = {"keepdims": kd}
            if axes is not None:
                at["axes"] = axes
            s.add(fam, f"{op.lower()}_{nm}", op, [T("x", a)], [("y", ref_reduce(op, a, axes, kd))], attrs=at,
                  opset=13, tol=TOL_ACCUM)
        # opset 18: axes is an (initializer) input
        for nm, a, axes, kd in [("opset18_axes_input_1", x, [1], 1), ("opset18_axes_input_neg1_0", x, [-1, 0], 0),
                                ("opset18_no_axes", x, None, 0)]:
            ins = [T("x", a)] + ([T("axes", i64(*axes), True)] if axes is not None else [])
            s.add(fam, f"{op.lower()}_{nm}", op, ins, [("y", ref_reduce(op, a, axes, kd))],
                  attrs={"keepdims": kd}, opset=18, tol=TOL_ACCUM)
    s.add(fam, "reducemean_default_keepdims", "ReduceMean", [T("x", x)], [("y", ref_reduce("ReduceMean", x, [2], 1))],
          attrs={"axes": [2]}, opset=13, tol=TOL_ACCUM)
    xi = g.i((3, 4), -50, 50)
    s.add(fam, "reducemax_int64_axes_1", "ReduceMax", [T("x", xi)], [("y", ref_reduce("ReduceMax", xi, [1], 0))],
          attrs={"axes": [1], "keepdims": 0}, opset=13)
    # ReduceSum opset 13: axes is an input
    for nm, a, axes, kd in variants:
        ins = [T("x", a)] + ([T("axes", i64(*axes), True)] if axes is not None else [])
        s.add(fam, f"reducesum_{nm}", "ReduceSum", ins, [("y", ref_reduce("ReduceSum", a, axes, kd))],
              attrs={"keepdims": kd}, opset=13, tol=TOL_ACCUM)
    s.add(fam, "reducesum_default_keepdims", "ReduceSum", [T("x", x), T("axes", i64(0), True)],
          [("y", ref_reduce("ReduceSum", x, [0], 1))], opset=13, tol=TOL_ACCUM)
    s.add(fam, "reducesum_noop_with_empty_axes", "ReduceSum", [T("x", x)], [("y", x.copy())],
          attrs={"noop_with_empty_axes": 1}, opset=13)
    s.add(fam, "reducesum_int64_axes_0", "ReduceSum", [T("x", xi), T("axes", i64(0), True)],
          [("y", ref_reduce("ReduceSum", xi, [0], 1))], opset=13)
    xl = g.f((2, 1000), 0.0, 1.0)
    s.add(fam, "reducesum_long_axis_1000", "ReduceSum", [T("x", xl), T("axes", i64(-1), True)],
          [("y", ref_reduce("ReduceSum", xl, [-1], 0))], attrs={"keepdims": 0}, opset=13, tol=TOL_ACCUM)


def gen_resize(s):
    fam, g = "resize", Gen("resize")

    def resize(name, xs, scales=None, sizes=None, **at):
        x = g.f(xs)
        ins = [T("x", x), OMIT]  # roi omitted
        if scales is not None:
            ins.append(T("scales", f32(scales), True))
        else:
            ins += [OMIT, T("sizes", i64(*sizes), True)]
        mode = at.get("mode", "nearest")
        ctm = at.get("coordinate_transformation_mode", "half_pixel")
        nm = at.get("nearest_mode", "round_prefer_floor")
        y = ref_resize(x, mode=mode, ctm=ctm, nearest_mode=nm, scales=scales, sizes=sizes)
        s.add(fam, name, "Resize", ins, [("y", y)], attrs=at, tol=TOL_ACCUM)

    def N(ctm, nm):
        return {"mode": "nearest", "coordinate_transformation_mode": ctm, "nearest_mode": nm}

    def L(ctm):
        return {"mode": "linear", "coordinate_transformation_mode": ctm}

    resize("resize_nearest_asymmetric_floor_scales_2", (1, 1, 2, 3), scales=[1, 1, 2, 2], **N("asymmetric", "floor"))
    resize("resize_nearest_asymmetric_round_prefer_floor_scales_2", (1, 2, 2, 3), scales=[1, 1, 2, 2],
           **N("asymmetric", "round_prefer_floor"))
    resize("resize_nearest_asymmetric_round_prefer_ceil_scales_2", (1, 1, 3, 3), scales=[1, 1, 2, 2],
           **N("asymmetric", "round_prefer_ceil"))
    resize("resize_nearest_asymmetric_ceil_scales_3", (1, 1, 2, 3), scales=[1, 1, 3, 3], **N("asymmetric", "ceil"))
    resize("resize_nearest_half_pixel_floor_scales_2", (1, 1, 3, 3), scales=[1, 1, 2, 2], **N("half_pixel", "floor"))
    resize("resize_nearest_half_pixel_round_prefer_floor_scales_3", (1, 1, 2, 3), scales=[1, 1, 3, 3],
           **N("half_pixel", "round_prefer_floor"))
    resize("resize_nearest_asymmetric_floor_downsample_0p5", (1, 1, 4, 6), scales=[1, 1, 0.5, 0.5],
           **N("asymmetric", "floor"))
    resize("resize_nearest_half_pixel_round_prefer_floor_sizes", (1, 1, 3, 4), sizes=[1, 1, 5, 7],
           **N("half_pixel", "round_prefer_floor"))
    resize("resize_nearest_default_modes_sizes", (1, 2, 3, 4), sizes=[1, 2, 6, 6])
    resize("resize_nearest_asymmetric_floor_sizes_downsample", (1, 1, 5, 7), sizes=[1, 1, 2, 3],
           **N("asymmetric", "floor"))
    resize("resize_nearest_align_corners_round_prefer_floor_sizes", (1, 1, 3, 3), sizes=[1, 1, 5, 4],
           **N("align_corners", "round_prefer_floor"))
    resize("resize_nearest_asymmetric_floor_1d_upsample", (1, 2, 5), scales=[1, 1, 2], **N("asymmetric", "floor"))
    resize("resize_nearest_asymmetric_floor_non_uniform", (1, 1, 2, 4), scales=[1, 1, 3, 0.5],
           **N("asymmetric", "floor"))
    resize("resize_linear_half_pixel_scales_2", (1, 1, 3, 3), scales=[1, 1, 2, 2], **L("half_pixel"))
    resize("resize_linear_half_pixel_downsample_0p5", (1, 2, 4, 6), scales=[1, 1, 0.5, 0.5], **L("half_pixel"))
    resize("resize_linear_align_corners_sizes", (1, 1, 3, 4), sizes=[1, 1, 5, 7], **L("align_corners"))
    resize("resize_linear_align_corners_scales_2", (1, 2, 2, 3), scales=[1, 1, 2, 2], **L("align_corners"))
    resize("resize_linear_asymmetric_scales_2", (1, 1, 3, 3), scales=[1, 1, 2, 2], **L("asymmetric"))
    resize("resize_linear_asymmetric_sizes", (1, 1, 4, 3), sizes=[1, 1, 7, 5], **L("asymmetric"))
    resize("resize_linear_half_pixel_sizes", (1, 3, 4, 4), sizes=[1, 3, 6, 9], **L("half_pixel"))
    resize("resize_linear_pytorch_half_pixel_sizes", (1, 1, 3, 4), sizes=[1, 1, 6, 1], **L("pytorch_half_pixel"))
    resize("resize_linear_half_pixel_non_uniform_scales", (1, 1, 4, 4), scales=[1, 1, 1.5, 3], **L("half_pixel"))
    resize("resize_linear_half_pixel_1d_scale_2p5", (1, 2, 4), scales=[1, 1, 2.5], **L("half_pixel"))
    resize("resize_linear_half_pixel_medium", (1, 3, 9, 9), scales=[1, 1, 2, 2], **L("half_pixel"))


def gen_misc(s):
    fam, g = "misc", Gen("misc")
    # Cast (attribute "to" uses TensorProto data type numbers)
    from onnx import TensorProto as TP
    codes = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.int8: TP.INT8, np.uint8: TP.UINT8,
             np.int32: TP.INT32, np.int64: TP.INT64, np.bool_: TP.BOOL}

    def cast(name, x, to):
        s.add(fam, name, "Cast", [T("x", x)], [("y", ref_cast(x, to))], attrs={"to": int(codes[to])})

    xf = f32([[-2.75, -2.5, -1.0, -0.5, -0.25], [0.0, 0.25, 0.5, 1.5, 2.75], [3.0, 99.9, -99.9, 1e9, -1e9]])
    cast("cast_float32_to_int64", xf, np.int64)
    cast("cast_float32_to_int32", xf, np.int32)
    cast("cast_float32_to_int8", f32([-128.0, -127.9, -1.5, 0.0, 1.9, 127.0]), np.int8)
    cast("cast_float32_to_uint8", f32([0.0, 0.9, 1.5, 254.9, 255.0]), np.uint8)
    cast("cast_float32_to_bool", f32([0.0, -0.0, 0.1, -2.0, np.inf, np.nan, 1e-30]), np.bool_)
    cast("cast_float32_to_float16", f32([0.0, 1.0, -2.5, 0.1, 3.14159, 65504.0, 1e-4, -70000.0, np.inf, np.nan]),
         np.float16)
    cast("cast_float32_to_float32_noop", g.f((2, 3)), np.float32)
    cast("cast_float32_scalar_to_int64", f32(-7.9), np.int64)
    cast("cast_int64_to_float32", i64(0, 1, -1, 2 ** 24 + 1, -(2 ** 40) - 1, 123456789), np.float32)
    cast("cast_int64_to_int32", i64(0, -5, 2 ** 31 - 1, -(2 ** 31)), np.int32)
    cast("cast_int64_to_bool", i64(0, 1, -1, 2 ** 40), np.bool_)
    cast("cast_int32_to_int64", np.array([[0, -1], [2 ** 31 - 1, -(2 ** 31)]], np.int32), np.int64)
    cast("cast_int32_to_float32", np.array([7, -3, 2 ** 24 + 3], np.int32), np.float32)
    cast("cast_bool_to_float32", np.array([[True, False, True], [False, False, True]]), np.float32)
    cast("cast_bool_to_int64", np.array([True, False, True]), np.int64)
    cast("cast_bool_to_int32", np.array([False, True]), np.int32)
    cast("cast_float16_to_float32", np.array([0.0, 1.0, -2.5, 0.0999755859375, 65504.0, np.inf, -np.inf, np.nan],
                                             np.float16), np.float32)
    cast("cast_uint8_to_float32", np.array([0, 1, 128, 255], np.uint8), np.float32)
    cast("cast_int8_to_float32", np.array([-128, -1, 0, 127], np.int8), np.float32)
    cast("cast_uint8_to_int64", np.array([[0, 200], [255, 7]], np.uint8), np.int64)
    # Identity
    for nm, x in [("float32_2x3", g.f((2, 3))), ("int64_4", g.i((4,), -9, 9)), ("bool_2x3", np.array([[True, False, True], [False, False, True]])),
                  ("scalar", f32(2.5)), ("float16_3", g.f((3,), dtype=np.float16)),
                  ("uint8_2x3", g.i((2, 3), 0, 255, np.uint8)), ("float32_1x3x5x7", g.f((1, 3, 5, 7)))]:
        s.add(fam, f"identity_{nm}", "Identity", [T("x", x)], [("y", x.copy())])
    # Pad (opset 13: pads and constant_value are inputs; opset 18 adds axes)
    x = g.f((3, 4))
    x4 = g.f((1, 2, 3, 4))
    for nm, a, pads, mode, cv in [
        ("constant_default_value", x, [1, 2, 0, 1], "constant", None),
        ("constant_value_1p5", x, [0, 1, 2, 0], "constant", 1.5),
        ("reflect", x, [2, 1, 1, 3], "reflect", None),
        ("edge", x, [2, 1, 1, 3], "edge", None),
        ("constant_rank4_spatial", x4, [0, 0, 1, 2, 0, 0, 2, 1], "constant", -1.0),
        ("reflect_rank4_spatial", x4, [0, 0, 1, 2, 0, 0, 2, 1], "reflect", None),
        ("edge_rank4_all_dims", x4, [1, 0, 1, 1, 0, 1, 2, 0], "edge", None),
        ("constant_negative_pads_crop", x, [-1, 1, 0, -2], "constant", 0.5),
        ("constant_zero_pads", x, [0, 0, 0, 0], "constant", None),
    ]:
        at = {} if mode == "constant" and nm.endswith("default_value") else {"mode": mode}
        ins = [T("x", a), T("pads", i64(*pads), True)]
        if cv is not None:
            ins.append(T("constant_value", f32(cv), True))
        s.add(fam, f"pad_{nm}", "Pad", ins, [("y", ref_pad(a, pads, mode, 0.0 if cv is None else cv))], attrs=at)
    x1 = g.f((5,))
    s.add(fam, "pad_1d_reflect", "Pad", [T("x", x1), T("pads", i64(3, 4), True)],
          [("y", ref_pad(x1, [3, 4], "reflect"))], attrs={"mode": "reflect"})
    xi = g.i((2, 3), -9, 9)
    s.add(fam, "pad_int64_constant", "Pad", [T("x", xi), T("pads", i64(1, 0, 0, 2), True),
                                             T("constant_value", i64(7).reshape(()), True)],
          [("y", ref_pad(xi, [1, 0, 0, 2], "constant", 7))])
    s.add(fam, "pad_opset18_axes_input", "Pad",
          [T("x", x4), T("pads", i64(1, 2, 3, 0), True), T("constant_value", f32(2.0), True),
           T("axes", i64(-1, 2), True)],
          [("y", ref_pad(x4, [1, 2, 3, 0], "constant", 2.0, axes=[-1, 2]))], opset=18)
    s.add(fam, "pad_opset18_axes_omitted_value", "Pad",
          [T("x", x), T("pads", i64(1, 1), True), OMIT, T("axes", i64(0), True)],
          [("y", ref_pad(x, [1, 1], "constant", 0.0, axes=[0]))], opset=18)


# ==========================================================================
# JSON encoding
# ==========================================================================

def encode_data(arr):
    flat = np.asarray(arr).reshape(-1)
    if flat.dtype == np.bool_:
        return [bool(v) for v in flat]
    if np.issubdtype(flat.dtype, np.integer):
        return [int(v) for v in flat]
    out = []
    for v in flat:
        f = float(v)  # exact: float16/float32 -> float64 is lossless
        if math.isnan(f):
            out.append("nan")
        elif math.isinf(f):
            out.append("inf" if f > 0 else "-inf")
        else:
            out.append(f)
    return out


def encode_attr(v):
    if isinstance(v, bool):
        raise TypeError("bool attribute")
    if isinstance(v, (int, np.integer)):
        return {"i": int(v)}
    if isinstance(v, (float, np.floating)):
        return {"f": float(v)}
    if isinstance(v, str):
        return {"s": v}
    if isinstance(v, (list, tuple)):
        if all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in v):
            return {"ints": [int(e) for e in v]}
        if all(isinstance(e, (float, np.floating)) for e in v):
            return {"floats": [float(e) for e in v]}
        if all(isinstance(e, str) for e in v):
            return {"strings": list(v)}
    raise TypeError(f"unsupported attribute value {v!r}")


def encode_case(c):
    ins = []
    for i in c["inputs"]:
        if i is None:
            ins.append({"name": ""})
        else:
            a = i["array"]
            ins.append({"name": i["name"], "dtype": DTYPE_NAMES[a.dtype], "shape": list(a.shape),
                        "data": encode_data(a), "initializer": i["init"]})
    outs = [{"name": n, "dtype": DTYPE_NAMES[a.dtype], "shape": list(a.shape), "data": encode_data(a)}
            for n, a in c["outputs"]]
    exact = all(not np.issubdtype(a.dtype, np.floating) for _, a in c["outputs"])
    return {"name": c["name"], "op_type": c["op_type"], "opset": c["opset"],
            "attributes": {k: encode_attr(v) for k, v in c["attrs"].items()},
            "inputs": ins, "outputs": outs,
            "rtol": 0.0 if exact else c["rtol"], "atol": 0.0 if exact else c["atol"]}


# Inputs (by position) that are parameters and therefore must be initializers.
PARAM_INPUTS = {"Reshape": {1}, "Slice": {1, 2, 3, 4}, "Squeeze": {1}, "Unsqueeze": {1}, "Split": {1},
                "Pad": {1, 2, 3}, "Resize": {1, 2, 3}, "Clip": {1, 2}, "ReduceSum": {1},
                "ReduceMean": {1}, "ReduceMax": {1}, "Conv": {1, 2}, "ConvTranspose": {1, 2},
                "BatchNormalization": {1, 2, 3, 4}, "LayerNormalization": {1, 2}}
DATA_INPUTS = {"Gather": {0, 1}}


def validate_table(doc, family, seen):
    """Check a parsed table against the schema described in testdata/README.md."""
    assert set(doc) == {"family", "cases"} and doc["family"] == family
    dtypes = set(DTYPE_NAMES.values())

    def check_tensor(t, where):
        assert set(t) >= {"name", "dtype", "shape", "data"}, where
        assert t["dtype"] in dtypes, where
        assert all(isinstance(d, int) and d >= 0 for d in t["shape"]), where
        assert len(t["data"]) == int(np.prod(t["shape"], dtype=np.int64)), where
        for v in t["data"]:
            if t["dtype"] == "bool":
                assert isinstance(v, bool), where
            elif t["dtype"].startswith(("int", "uint")):
                assert isinstance(v, int) and not isinstance(v, bool), where
            else:
                assert (isinstance(v, float) or v in ("nan", "inf", "-inf")), where

    for c in doc["cases"]:
        name = c["name"]
        assert set(c) == {"name", "op_type", "opset", "attributes", "inputs", "outputs", "rtol", "atol"}, name
        assert re.fullmatch(r"[a-z0-9_]+", name) and name not in seen, name
        seen.add(name)
        for k, v in c["attributes"].items():
            assert len(v) == 1 and next(iter(v)) in ("i", "f", "s", "ints", "floats", "strings"), (name, k)
        for pos, t in enumerate(c["inputs"]):
            if t["name"] == "":
                assert set(t) == {"name"}, name
                continue
            check_tensor(t, (name, t["name"]))
            assert isinstance(t["initializer"], bool)
            if pos in PARAM_INPUTS.get(c["op_type"], ()):
                assert t["initializer"], (name, t["name"], "must be an initializer")
            if pos in DATA_INPUTS.get(c["op_type"], ()):
                assert not t["initializer"], (name, t["name"], "must not be an initializer")
        assert c["outputs"], name
        for t in c["outputs"]:
            assert set(t) == {"name", "dtype", "shape", "data"}, name
            check_tensor(t, (name, t["name"]))
        assert c["rtol"] >= 0 and c["atol"] >= 0


def dump_family(path, family, cases):
    lines = [json.dumps(encode_case(c), allow_nan=False, separators=(", ", ": ")) for c in cases]
    text = '{"family": ' + json.dumps(family) + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]}\n"
    validate_table(json.loads(text), family, set())
    with open(path, "w") as f:
        f.write(text)
    return len(text.encode())


# ==========================================================================
# onnxruntime cross-check
# ==========================================================================

def build_model(c):
    import onnx
    from onnx import helper, numpy_helper

    in_names, graph_inputs, inits, feeds = [], [], [], {}
    for i in c["inputs"]:
        if i is None:
            in_names.append("")
            continue
        a = i["array"]
        in_names.append(i["name"])
        if i["init"]:
            inits.append(numpy_helper.from_array(np.asarray(a, order="C"), i["name"]))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                i["name"], helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
            feeds[i["name"]] = a
    outs = [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(a.dtype),
        [f"{n}_d{k}" for k in range(a.ndim)] if c["symbolic_output_shape"] else list(a.shape))
        for n, a in c["outputs"]]
    node = helper.make_node(c["op_type"], in_names, [n for n, _ in c["outputs"]], name=c["name"], **c["attrs"])
    graph = helper.make_graph([node], c["name"], graph_inputs, outs, initializer=inits)
    opset = [helper.make_opsetid("", c["opset"])]
    model = helper.make_model(graph, opset_imports=opset)
    model.ir_version = helper.find_min_ir_version_for(opset)
    onnx.checker.check_model(model, full_check=True)
    return model, feeds


def compare(expected, got, rtol, atol):
    """Returns (ok, max_abs_err)."""
    got = np.asarray(got)
    if got.dtype != expected.dtype:
        return False, f"dtype {got.dtype} != {expected.dtype}"
    if got.shape != expected.shape:
        return False, f"shape {got.shape} != {expected.shape}"
    if not np.issubdtype(expected.dtype, np.floating):
        return bool(np.array_equal(got, expected)), 0.0
    e, g = expected.astype(F64), got.astype(F64)
    same_nan = np.array_equal(np.isnan(e), np.isnan(g))
    fin = np.isfinite(e)
    same_inf = np.array_equal(e[np.isinf(e)], g[np.isinf(e)])
    err = np.abs(e[fin] - g[fin]) if fin.any() else np.zeros(1)
    ok = same_nan and same_inf and np.isfinite(g[fin]).all() and bool(
        np.all(err <= atol + rtol * np.abs(e[fin])))
    return ok, float(err.max()) if err.size else 0.0


def cross_check(cases):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    failures = []
    for c in cases:
        try:
            model, feeds = build_model(c)
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            got = sess.run([n for n, _ in c["outputs"]], feeds)
        except Exception as ex:  # noqa: BLE001
            failures.append((c["name"], f"error: {str(ex).splitlines()[0][:300]}"))
            continue
        for (n, exp), g in zip(c["outputs"], got):
            ok, info = compare(exp, g, c["rtol"], c["atol"])
            if not ok:
                detail = info if isinstance(info, str) else f"max abs err {info:.3g}"
                failures.append((c["name"], f"output {n}: numpy and onnxruntime disagree ({detail})"))
    return failures


def ref_nll(x, target, weight=None, reduction="mean", ignore_index=None):
    """NegativeLogLikelihoodLoss from its definition, in float64."""
    x64 = x.astype(np.float64)
    n, c = x.shape[0], x.shape[1]
    xs = x64.reshape(n, c, -1)
    ts = target.reshape(n, -1)
    loss = np.zeros(ts.shape)
    wsum = 0.0
    for b in range(n):
        for d in range(ts.shape[1]):
            t = int(ts[b, d])
            if ignore_index is not None and t == ignore_index:
                continue
            w = 1.0 if weight is None else float(weight[t])
            loss[b, d] = -xs[b, t, d] * w
            wsum += w
    if reduction == "none":
        return loss.reshape(target.shape).astype(x.dtype)
    total = loss.sum()
    return np.asarray(total if reduction == "sum" else total / wsum).astype(x.dtype)


def ref_log_softmax_axis1(x):
    x64 = x.astype(np.float64)
    m = x64.max(axis=1, keepdims=True)
    return x64 - m - np.log(np.exp(x64 - m).sum(axis=1, keepdims=True))


def gen_loss(s):
    fam, g = "loss", Gen("loss")
    x3 = g.f((3, 4, 2))
    t3 = g.i((3, 2), 0, 3)
    t3_ignored = t3.copy()
    t3_ignored[1, 0] = -1
    w = g.f((4,), lo=0.25, hi=2.0, nonzero=True)
    x2 = g.f((5, 3))
    t2 = g.i((5,), 0, 2)
    x4 = g.f((2, 3, 2, 2))
    t4 = g.i((2, 2, 2), 0, 2)
    for nm, x, t, wt, red, ii in [
        ("nc_mean", x2, t2, None, "mean", None),
        ("nc_sum_weight", x2, t2, w[:3], "sum", None),
        ("ncd_none", x3, t3, None, "none", None),
        ("ncd_mean_weight", x3, t3, w, "mean", None),
        ("ncd_mean_weight_ignore_negative", x3, t3_ignored, w, "mean", -1),
        ("ncd_none_ignore_index", x3, t3, None, "none", 2),
        ("ncdd_mean_int32_target", x4, t4.astype(np.int32), None, "mean", None),
    ]:
        at = {"reduction": red}
        if ii is not None:
            at["ignore_index"] = ii
        ins = [T("x", x), T("target", t)] + ([T("weight", wt, True)] if wt is not None else [])
        s.add(fam, f"nllloss_{nm}", "NegativeLogLikelihoodLoss", ins,
              [("loss", ref_nll(x, t, wt, red, ii))], attrs=at, opset=13, tol=TOL_TRANS)
    for nm, x, t, wt, red, ii, log_prob in [
        ("nc_mean", x2, t2, None, "mean", None, False),
        ("ncd_sum_weight_log_prob", x3, t3, w, "sum", None, True),
        ("ncd_none_ignore_index", x3, t3_ignored, None, "none", -1, False),
        ("ncdd_mean_weight_log_prob", x4, t4, w[:3], "mean", None, True),
    ]:
        at = {"reduction": red}
        if ii is not None:
            at["ignore_index"] = ii
        lp = ref_log_softmax_axis1(x)
        outs = [("loss", ref_nll(lp.astype(np.float64), t, wt, red, ii).astype(x.dtype))]
        if log_prob:
            outs.append(("log_prob", lp.astype(x.dtype)))
        ins = [T("scores", x), T("labels", t)] + ([T("weights", wt, True)] if wt is not None else [])
        s.add(fam, f"sce_{nm}", "SoftmaxCrossEntropyLoss", ins, outs, attrs=at, opset=13,
              tol=TOL_TRANS)


def ref_grid_sample(x, grid, mode="linear", padding_mode="zeros", align_corners=0):
    """2-D GridSample from the specification (PyTorch's grid_sample), in float64."""
    n, c, h, w = x.shape
    _, oh, ow, _ = grid.shape
    x64, g64 = x.astype(np.float64), grid.astype(np.float64)
    dims = (h, w)

    def bounds(size):
        return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)

    def reflect(v, lo, hi):
        rng = hi - lo
        if rng <= 0:
            return lo
        if lo <= v <= hi:
            return v
        d = lo - v if v < lo else v - hi
        flips = int(d // rng)
        rest = d - flips * rng
        from_low = v < lo
        return lo + rest if (flips % 2 == 0) == from_low else hi - rest

    def pixel(img, iy, ix):
        idx = []
        for i, size in zip((iy, ix), dims):
            if padding_mode == "zeros":
                if i < 0 or i >= size:
                    return 0.0
            elif padding_mode == "border":
                i = min(max(i, 0), size - 1)
            else:
                lo, hi = bounds(size)
                i = min(max(int(reflect(float(i), lo, hi)), 0), size - 1)
            idx.append(i)
        return img[idx[0], idx[1]]

    def cubic(t):
        a = -0.75
        near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1
        far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return [far(t + 1), near(t), near(1 - t), far(2 - t)]

    y = np.zeros((n, c, oh, ow))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                coords = []
                for axis, norm in ((0, g64[b, i, j, 1]), (1, g64[b, i, j, 0])):
                    size = dims[axis]
                    v = (norm + 1) / 2 * (size - 1) if align_corners else ((norm + 1) * size - 1) / 2
                    if mode == "nearest":
                        v = float(np.rint(v))
                    lo, hi = bounds(size)
                    if v < lo or v > hi:
                        if padding_mode == "border":
                            v = min(max(v, 0.0), size - 1.0)
                        elif padding_mode == "reflection":
                            v = reflect(v, lo, hi)
                    coords.append(v)
                taps = []
                for v in coords:
                    base = int(np.floor(v))
                    t = v - base
                    if mode == "nearest":
                        taps.append([(int(v), 1.0)])
                    elif mode == "linear":
                        taps.append([(base, 1 - t), (base + 1, t)])
                    else:
                        taps.append([(base - 1 + k, wk) for k, wk in enumerate(cubic(t))])
                for ch in range(c):
                    img = x64[b, ch]
                    y[b, ch, i, j] = sum(wy * wx * pixel(img, iy, ix)
                                         for iy, wy in taps[0] for ix, wx in taps[1])
    return y.astype(x.dtype)


def gen_sampling(s):
    fam, g = "sampling", Gen("sampling")
    x = g.f((1, 2, 3, 4))
    # Positions on a 1/16 grid inside and outside [-1, 1].
    grid = (g.i((1, 3, 5, 2), -24, 24).astype(np.float64) / 16).astype(np.float32)
    for mode16, mode in [("bilinear", "linear"), ("nearest", "nearest"), ("bicubic", "cubic")]:
        for pad in ["zeros", "border", "reflection"]:
            # Cubic with border padding: onnx's reference clamps the position before taking
            # the 4 taps (as for the other modes; backplane follows it), onnxruntime and
            # PyTorch clamp each tap instead, so the two disagree near the border.
            if mode == "cubic" and pad == "border":
                continue
            for ac in [0, 1]:
                s.add(fam, f"gridsample_{mode}_{pad}_align{ac}", "GridSample",
                      [T("x", x), T("grid", grid)],
                      [("y", ref_grid_sample(x, grid, mode, pad, ac))],
                      attrs={"mode": mode16, "padding_mode": pad, "align_corners": ac}, opset=16,
                      tol=TOL_TRANS)


def gen_float64(s):
    fam, g = "float64", Gen("float64")
    a = g.f((2, 3), dtype=np.float64) + 2.0 ** -40
    b = g.f((3,), dtype=np.float64)
    s.add(fam, "add_float64_broadcast", "Add", [T("a", a), T("b", b)], [("y", a + b)])
    s.add(fam, "max_float64", "Max", [T("a", a), T("b", b)], [("y", np.maximum(a, b))])
    s.add(fam, "reduce_sum_float64", "ReduceSum", [T("x", a), T("axes", i64(1), True)],
          [("y", a.sum(axis=1, keepdims=True))], opset=13)
    s.add(fam, "cast_float64_to_float32", "Cast", [T("x", a)], [("y", a.astype(np.float32))],
          attrs={"to": 1})
    xf = g.f((4,))
    s.add(fam, "cast_float32_to_float64", "Cast", [T("x", xf)], [("y", xf.astype(np.float64))],
          attrs={"to": 11})



GENERATORS = [("elementwise", gen_elementwise), ("activation", gen_activation), ("conv", gen_conv),
              ("pool", gen_pool), ("matmul", gen_matmul), ("norm", gen_norm), ("shape", gen_shape),
              ("reduce", gen_reduce), ("resize", gen_resize), ("misc", gen_misc), ("loss", gen_loss),
              ("sampling", gen_sampling), ("float64", gen_float64)]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "testdata", "ops"))
    ap.add_argument("--no-ort", action="store_true", help="skip the onnxruntime cross-check")
    ap.add_argument("--only", help="comma-separated families to generate")
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)

    suite = Suite()
    for fam, fn in GENERATORS:
        fn(suite)
        assert fam in suite.families
    only = set(args.only.split(",")) if args.only else None

    all_failures = []
    for fam, cases in suite.families.items():
        if only and fam not in only:
            continue
        if not args.no_ort:
            fails = cross_check(cases)
            all_failures += fails
            for name, msg in fails:
                print(f"  MISMATCH {fam}/{name}: {msg}")
        if args.no_ort or not fails:
            size = dump_family(os.path.join(out, f"{fam}.json"), fam, cases)
            ops = sorted({c["op_type"] for c in cases})
            print(f"{fam:12s} {len(cases):4d} cases {size / 1024:7.1f} KiB  ops: {', '.join(ops)}")
            if size > MAX_FILE_BYTES:
                all_failures.append((fam, f"file too large ({size} bytes)"))
    total = sum(len(v) for k, v in suite.families.items() if not only or k in only)
    if all_failures:
        print(f"{len(all_failures)} problem(s) in {total} cases", file=sys.stderr)
        return 1
    if not all_failures and not only:  # names must be unique across all files
        seen = set()
        for fam in suite.families:
            with open(os.path.join(out, f"{fam}.json")) as f:
                validate_table(json.load(f), fam, seen)
    print(f"{total} cases written to {out}" + ("" if args.no_ort else " (all agree with onnxruntime)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

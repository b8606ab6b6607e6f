#!/usr/bin/env python3
"""Finds how LiteRT rounds int8 HARD_SWISH and AVERAGE_POOL_2D (issue 31): builds one-operator
int8 models with several input/output scales and zero points, runs every int8 input value
(HARD_SWISH) and random windows (AVERAGE_POOL_2D) through LiteRT's default interpreter
(XNNPACK) and its reference kernels (BUILTIN_REF), and checks candidate integer rules against
both. Prints, per case, the elements where the two LiteRT paths disagree and where each rule
disagrees with LiteRT's default; with --write DIR also writes the cases as test data
(see testdata/tflite/q8_rules/README.md). The builtin kernels' CONV_2D, DEPTHWISE_CONV_2D,
MUL and MEAN rules, and when LiteRT uses them, are probed by probe_tflite_q8_builtin.py.

    /work/venv-zoo/bin/python scripts/probe_tflite_q8_rules.py [--write testdata/tflite/q8_rules]
"""

import argparse
import json
import math
import pathlib

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter, OpResolverType

keras = tf.keras
L = keras.layers


def convert(model, shape, lo, hi, seed):
    """Full-integer int8 conversion; the representative data spans [lo, hi], which sets the
    input's scale and zero point (and, through the op, the output's)."""
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    rng = np.random.default_rng(seed)

    def representative():
        for k in range(16):
            v = rng.uniform(lo, hi, shape).astype(np.float32)
            v.flat[0], v.flat[1] = lo, hi
            yield [v]

    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    return conv.convert()


def run(buf, x, resolver=None):
    opts = {} if resolver is None else {"experimental_op_resolver_type": resolver}
    it = Interpreter(model_content=buf, **opts)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    it.set_tensor(i["index"], x)
    it.invoke()
    qi, qo = i["quantization"], o["quantization"]
    return it.get_tensor(o["index"]).copy(), qi, qo


def hard_swish_model(n):
    inp = keras.Input((1, n, 1), batch_size=1)
    x = L.Lambda(lambda t: t * tf.nn.relu6(t + 3.0) / 6.0)(inp)
    return keras.Model(inp, x)


def pool_model(h, w, c, k, s, pad):
    inp = keras.Input((h, w, c), batch_size=1)
    return keras.Model(inp, L.AveragePooling2D(k, s, padding=pad)(inp))


# --- candidate rules -------------------------------------------------------------------


def hs_float(q, si, zi, so, zo):
    """The f32 chain: dequantize, hard-swish, quantize (round half to even)."""
    x = (q.astype(np.float32) - zi) * np.float32(si)
    y = x * np.clip(x + 3, 0, 6) / 6
    return np.clip(np.round(y / np.float32(so)) + zo, -128, 127).astype(np.int8)


# TFLite's integer HARD_SWISH (reference_ops::HardSwish and its Prepare), transcribed for
# the comparison: 16-bit fixed point, the multipliers from the f32 scales.
def qmul(m):
    if m == 0: return 0, 0
    q, sh = math.frexp(m)
    qf = int(math.floor(abs(q) * 2**31 + 0.5))
    if qf == 2**31: qf //= 2; sh += 1
    if sh < -31: sh, qf = 0, 0
    return qf, sh
def down16(m32):
    if m32 >= 2**31 - 1 - 2**15: return 32767
    return (m32 + 2**15) >> 16
def tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q
def srdhm(a, b):
    if a == b == -32768: return 32767
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else (1 - (1 << 14))
    return tdiv(ab + nudge, 1 << 15)
def sdhm(a, b):
    if a == b == -32768: return 32767
    return tdiv(a * b, 1 << 15)
def rdpot(x, e):
    mask = (1 << e) - 1; rem = x & mask; th = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > th else 0)
def sls(v, a):
    return max(-32768, min(32767, v * (1 << a)))
def hs_fixed(q, si, zi, so, zo):
    f32 = np.float32
    hires = f32(f32(1.0/128.0) * f32(si))
    om, oe = qmul(float(f32(hires / f32(so)))); om = down16(om)
    rm, re = qmul(float(f32(hires / f32(3.0/32768.0)))); rm = down16(rm)
    assert oe <= 0
    v = q - zi
    hi = v * 128
    pre = srdhm(hi, om)
    r = hi
    if re > 0: r = sls(r, re - 1)
    r = srdhm(r, rm)
    if re > 0: r = sls(r, 1)
    if re < 0: r = rdpot(r, -re)
    r = (r + (1 << 15)) >> 1
    p = sdhm(r, pre)
    o = rdpot(p, -oe) + zo
    return max(-128, min(127, o))


def pool_int(xs, away):
    """Integer average of raw int8 taps, rounded half away from zero (TFLite's kernels) or
    half to even."""
    s = xs.sum(axis=-1).astype(np.int64)
    n = xs.shape[-1]
    if away:
        return np.where(s >= 0, (s + n // 2) // n, -((-s + n // 2) // n))
    return np.round(s / n).astype(np.int64)


def pool_windows(x, k, s, pad):
    """The taps of each output pixel (SAME: only those inside the input), as lists."""
    n, h, w, c = x.shape
    if pad == "valid":
        oh, ow, pt, pl = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    else:
        oh, ow = -(-h // s), -(-w // s)
        pt = max((oh - 1) * s + k - h, 0) // 2
        pl = max((ow - 1) * s + k - w, 0) // 2
    out = np.zeros((n, oh, ow, c), np.int64)
    out_even = np.zeros_like(out)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - pt, j * s - pl
            win = x[:, max(r0, 0):min(r0 + k, h), max(c0, 0):min(c0 + k, w), :]
            taps = win.reshape(n, -1, c).transpose(0, 2, 1)
            out[:, i, j, :] = pool_int(taps, True)
            out_even[:, i, j, :] = pool_int(taps, False)
    return out, out_even


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", help="directory for the recorded cases")
    args = ap.parse_args()
    cases = []
    ranges = [(-3.0, 3.0), (-8.0, 8.0), (-1.0, 5.0), (-6.0, 0.5), (-0.7, 0.9), (-20.0, 11.0)]
    for t, (lo, hi) in enumerate(ranges):
        buf = convert(hard_swish_model(256), (1, 1, 256, 1), lo, hi, t)
        x = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 256, 1)
        y, qi, qo = run(buf, x)
        yr, _, _ = run(buf, x, OpResolverType.BUILTIN_REF)
        f = hs_float(x, qi[0], qi[1], qo[0], qo[1])
        fx = np.array([hs_fixed(int(q), qi[0], qi[1], qo[0], qo[1]) for q in x.reshape(-1)])
        print(f"HARD_SWISH in {qi} out {qo}: default vs ref {int((y != yr).sum())} off, "
              f"f32 chain vs default {int((f != y).sum())} off, "
              f"fixed-point rule vs default {int((fx != y.reshape(-1)).sum())} off")
        cases.append({"op": "HARD_SWISH", "in": [float(qi[0]), int(qi[1])],
                      "out": [float(qo[0]), int(qo[1])],
                      "y": y.reshape(-1).astype(int).tolist(),
                      "y_ref": yr.reshape(-1).astype(int).tolist()})
    rng = np.random.default_rng(7)
    pools = [(6, 6, 5, 2, 2, "valid"), (7, 9, 3, 3, 1, "same"), (7, 7, 4, 3, 2, "same"),
             (8, 8, 17, 2, 2, "same"), (7, 7, 3, 7, 7, "valid"), (5, 6, 2, 3, 2, "valid")]
    for t, (h, w, c, k, s, pad) in enumerate(pools):
        lo, hi = ranges[t % len(ranges)]
        buf = convert(pool_model(h, w, c, k, s, pad), (1, h, w, c), lo, hi, 100 + t)
        x = rng.integers(-128, 128, (1, h, w, c)).astype(np.int8)
        y, qi, qo = run(buf, x)
        yr, _, _ = run(buf, x, OpResolverType.BUILTIN_REF)
        away, even = pool_windows(x.astype(np.int64), k, s, pad)
        print(f"AVERAGE_POOL_2D {k}x{k}/{s} {pad} on {h}x{w}x{c} in {qi} out {qo}: "
              f"default vs ref {int((y != yr).sum())} off of {y.size}, "
              f"half-away rule vs default {int((away != y).sum())}, "
              f"half-even vs default {int((even != y).sum())}")
        cases.append({"op": "AVERAGE_POOL_2D", "in": [float(qi[0]), int(qi[1])],
                      "out": [float(qo[0]), int(qo[1])], "shape": [h, w, c],
                      "kernel": k, "stride": s, "padding": pad,
                      "x": x.reshape(-1).astype(int).tolist(),
                      "y": y.reshape(-1).astype(int).tolist(),
                      "y_ref": yr.reshape(-1).astype(int).tolist()})
    if args.write:
        d = pathlib.Path(args.write)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cases.json").write_text(json.dumps(cases, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Finds LiteRT's builtin int8 requantization rules and when LiteRT falls back to them
(issue 31).

LiteRT runs an int8 model through its XNNPACK delegate unless the delegate refuses it; then
the interpreter's builtin kernels run, and their CONV_2D / DEPTHWISE_CONV_2D / MUL / MEAN
rounding differs from XNNPACK's (which backplane follows). This script

1. `refusal`: edits one convolution's output scale in a model so that its largest per-channel
   requantization scale `x_scale * w_scale / y_scale` (f32) sits just below, at and above
   256, and reports whether the XNNPACK delegate prepares each model;
2. `ops MODEL INPUT`: runs MODEL with the builtin kernels
   (`BUILTIN_WITHOUT_DEFAULT_DELEGATES`), keeps every intermediate tensor, and for each int8
   CONV_2D, DEPTHWISE_CONV_2D, MUL, ADD and MEAN recomputes the output from the layer's
   actual int8 inputs under candidate rules, printing how many elements each rule gets
   wrong; with --write FILE it records per-layer convolution cases (exact integer sums, the
   scales, LiteRT's outputs) as test data (testdata/tflite/q8_rules/README.md);
3. `scan`: prints, for every zoo int8 model, its convolutions whose requantization scale is
   at least 256 (the models LiteRT runs on builtin kernels);
4. `fc`: the same rule comparison on one-layer int8 Dense models (FULLY_CONNECTED, per
   channel and per tensor).

    /work/venv-zoo/bin/python scripts/probe_tflite_q8_builtin.py refusal
    /work/venv-zoo/bin/python scripts/probe_tflite_q8_builtin.py ops \
        /tmp/tflite_zoo/mobilenet_v3_small_head_int8/model.tflite \
        /tmp/tflite_zoo/mobilenet_v3_small_head_int8/input_0.npy \
        [--write testdata/tflite/q8_rules/builtin_conv.json]
"""

import argparse
import glob
import json
import math

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from tensorflow.lite.tools import flatbuffer_utils as fu

HEAD = "/tmp/tflite_zoo/mobilenet_v3_small_head_int8/model.tflite"
PAD = {0: "SAME", 1: "VALID"}

# --- gemmlowp fixed point, as TFLite's builtin kernels use it (transcribed for comparison) ---


def quantize_multiplier(m):
    """TFLite's QuantizeMultiplier: m = q * 2^(shift - 31), q a Q31 integer (std::round)."""
    if m == 0:
        return 0, 0
    f, e = math.frexp(m)
    q = int(math.floor(abs(f) * (1 << 31) + 0.5))
    if q == 1 << 31:
        q //= 2
        e += 1
    if e < -31:
        return 0, 0
    return q, e


def srdhm(a, b):
    """SaturatingRoundingDoublingHighMul (int64 arrays)."""
    a = np.asarray(a, np.int64)
    ab = a * b
    r = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    r = np.where(r >= 0, r >> 31, -((-r) >> 31))
    return np.where((a == -(2**31)) & (b == -(2**31)), 2**31 - 1, r)


def rdpot(x, e):
    """RoundingDivideByPOT: x / 2^e rounded half away from zero."""
    x = np.asarray(x, np.int64)
    mask = (1 << e) - 1
    return (x >> e) + ((x & mask) > (mask >> 1) + (x < 0))


def mbqm(x, q, shift):
    """MultiplyByQuantizedMultiplier (double rounding)."""
    return rdpot(srdhm(np.asarray(x, np.int64) * (1 << max(shift, 0)), q), max(-shift, 0))


def half_up(x, q, shift):
    """Both stages of the multiply rounded half up (toward +inf): `(x q + 2^30) >> 31`, then
    `(h + 2^(k-1)) >> k` for a right shift k. (Found to be the rule of LiteRT's int8 MEAN
    on x86, and of some of its convolution kernels.)"""
    x = np.asarray(x, np.int64) * (1 << max(shift, 0))
    h = (x * q + (1 << 30)) >> 31
    k = max(-shift, 0)
    return (h + ((1 << k) >> 1)) >> k


def single_round(x, q, shift):
    """The single-rounding variant (TFLITE_SINGLE_ROUNDING / newer ruy)."""
    t = 31 - shift
    return (np.asarray(x, np.int64) * q + (1 << (t - 1))) >> t


def per_channel(f, acc, mults):
    out = np.empty_like(acc)
    for c in range(acc.shape[-1]):
        out[..., c] = f(acc[..., c], *mults[c])
    return out


def xnn_requant(acc, scale, zo, lo, hi):
    v = np.round((acc.astype(np.float32) * np.asarray(scale, np.float32)).astype(np.float32))
    return np.clip(v + zo, lo, hi)


def act_range(act, s, z):
    lo, hi = -128, 127

    def q(v):
        return z + int(math.floor(v / s + 0.5))

    if act in (1, 3):
        lo = max(lo, q(0.0))
    if act == 3:
        hi = min(hi, q(6.0))
    return lo, hi


def conv_sums(x, w, b, stride, pad, dil, depthwise, zx):
    """Exact int64 sums (bias included) of an NHWC convolution; w OHWI or 1HWC."""
    x = x - zx
    n, h, wd, c = x.shape
    kh, kw, o = (w.shape[1], w.shape[2], w.shape[3]) if depthwise else (w.shape[1], w.shape[2], w.shape[0])
    sh, sw = stride
    if pad == "SAME":
        oh, ow = -(-h // sh), -(-wd // sw)
        pt = max((oh - 1) * sh + (kh - 1) * dil[0] + 1 - h, 0) // 2
        pl = max((ow - 1) * sw + (kw - 1) * dil[1] + 1 - wd, 0) // 2
    else:
        oh = (h - (kh - 1) * dil[0] - 1) // sh + 1
        ow = (wd - (kw - 1) * dil[1] - 1) // sw + 1
        pt = pl = 0
    xp = np.zeros((n, h + 2 * kh * dil[0] + pt, wd + 2 * kw * dil[1] + pl, c), np.int64)
    xp[:, pt:pt + h, pl:pl + wd, :] = x
    acc = np.zeros((n, oh, ow, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dil[0]:i * dil[0] + sh * oh:sh, j * dil[1]:j * dil[1] + sw * ow:sw, :]
            if depthwise:
                acc += patch * w[0, i, j, :]
            else:
                acc += np.einsum("nhwc,oc->nhwo", patch, w[:, i, j, :])
    return acc + b


def prepares(model):
    try:
        it = Interpreter(model_content=bytes(fu.convert_object_to_bytearray(model)))
        it.allocate_tensors()
        return "prepares"
    except (RuntimeError, ValueError) as e:
        return "refused: " + str(e)[:70]


def refusal(_args):
    """Moves conv 6's largest requantization scale of the mnv3_small head to 255 / 256 / 464."""
    base = fu.read_model(HEAD)
    print("as converted:", prepares(base))
    sg = base.subgraphs[0]
    op = sg.operators[6]
    sx = np.float32(sg.tensors[op.inputs[0]].quantization.scale[0])
    sw = np.asarray(sg.tensors[op.inputs[1]].quantization.scale, np.float32)
    for target in (255.0, 255.99, 256.0, 300.0):
        m = fu.read_model(HEAD)
        t = m.subgraphs[0].tensors[m.subgraphs[0].operators[6].outputs[0]]
        t.quantization.scale = [float(np.float32(sx * sw.max()) / np.float32(target))]
        so = np.float32(t.quantization.scale[0])
        print(f"largest x*w/y (f32) {float(np.float32(sx * sw.max()) / so):.4f}:", prepares(m))


def scan(_args):
    for path in sorted(glob.glob("/tmp/tflite_zoo/*int8*/model.tflite")):
        it = Interpreter(model_path=path, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        td = {t["index"]: t for t in it.get_tensor_details()}
        big = []
        for o in it._get_ops_details():
            if o["op_name"] not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
                continue
            sc = [td[i]["quantization_parameters"]["scales"] for i in o["inputs"][:2]]
            so = td[o["outputs"][0]]["quantization_parameters"]["scales"]
            if len(so) == 0 or len(sc[0]) == 0:
                continue
            r = (np.float32(sc[0][0]) * sc[1].astype(np.float32) / np.float32(so[0])).max()
            if r >= 256:
                big.append((o["index"], o["op_name"], float(r)))
        print(path, big)


def ops(args):
    x_in = np.load(args.input)
    it = Interpreter(model_path=args.model, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x_in)
    it.invoke()
    td = {t["index"]: t for t in it.get_tensor_details()}
    sg = fu.read_model(args.model).subgraphs[0]

    def qp(i):
        p = td[i]["quantization_parameters"]
        return p["scales"], p["zero_points"]

    def val(i):
        return it.get_tensor(i).astype(np.int64)

    records = []
    for k, o in enumerate(it._get_ops_details()):
        name = o["op_name"]
        ins = [i for i in o["inputs"] if i >= 0]
        out = o["outputs"][0]
        if td[out]["dtype"] != np.int8:
            continue
        y = val(out)
        opt = sg.operators[k].builtinOptions
        so, zo = qp(out)
        so, zo = float(so[0]), int(zo[0])
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            sx, zx = qp(ins[0])
            sw = qp(ins[1])[0]
            sx, zx = float(sx[0]), int(zx[0])
            bias = val(ins[2]) if len(ins) > 2 else 0
            dw = name == "DEPTHWISE_CONV_2D"
            acc = conv_sums(val(ins[0]), val(ins[1]), bias, (opt.strideH, opt.strideW), PAD[opt.padding],
                            (opt.dilationHFactor, opt.dilationWFactor), dw, zx)
            lo, hi = act_range(opt.fusedActivationFunction, so, zo)
            mults = [quantize_multiplier(sx * float(w) / so) for w in sw]
            if len(mults) == 1:
                mults = mults * acc.shape[-1]
            xs = np.float32(sx) * sw.astype(np.float32) / np.float32(so)
            rules = {
                "gemmlowp": np.clip(per_channel(mbqm, acc, mults) + zo, lo, hi),
                "single-rounding": np.clip(per_channel(single_round, acc, mults) + zo, lo, hi),
                "half-up": np.clip(per_channel(half_up, acc, mults) + zo, lo, hi),
                "xnnpack(f32)": xnn_requant(acc, xs, zo, lo, hi),
            }
            g = rules["half-up"]
            records.append({"op": name, "layer": k, "x_scale": sx, "w_scales": [float(s) for s in sw],
                            "y": [so, zo], "range": [lo, hi], "channels": int(acc.shape[-1]),
                            "sums": acc.reshape(-1).astype(int).tolist(),
                            "litert": y.reshape(-1).astype(int).tolist(),
                            "half_up_off": int((g != y).sum()),
                            "gemmlowp_off": int((rules["gemmlowp"] != y).sum()),
                            "xnnpack_off": int((rules["xnnpack(f32)"] != y).sum())})
        elif name == "MUL":
            (s1, z1), (s2, z2) = qp(ins[0]), qp(ins[1])
            s1, s2, z1, z2 = float(s1[0]), float(s2[0]), int(z1[0]), int(z2[0])
            prod = (val(ins[0]) - z1) * (val(ins[1]) - z2)
            lo, hi = act_range(opt.fusedActivationFunction, so, zo)
            q, sh = quantize_multiplier(s1 * s2 / so)
            xs = np.float32(np.float32(s1) * np.float32(s2) / np.float32(so))
            rules = {"gemmlowp": np.clip(mbqm(prod, q, sh) + zo, lo, hi),
                     "half-up": np.clip(half_up(prod, q, sh) + zo, lo, hi),
                     "xnnpack(f32)": xnn_requant(prod, xs, zo, lo, hi)}
        elif name == "ADD":
            (s1, z1), (s2, z2) = qp(ins[0]), qp(ins[1])
            s1, s2, z1, z2 = float(s1[0]), float(s2[0]), int(z1[0]), int(z2[0])
            lo, hi = act_range(opt.fusedActivationFunction, so, zo)
            tw = 2 * max(s1, s2)
            a = mbqm((val(ins[0]) - z1) * (1 << 20), *quantize_multiplier(s1 / tw))
            b = mbqm((val(ins[1]) - z2) * (1 << 20), *quantize_multiplier(s2 / tw))
            f = (val(ins[0]) - z1) * np.float32(s1 / so) + (val(ins[1]) - z2) * np.float32(s2 / so)
            rules = {"builtin(shift 20)": np.clip(mbqm(a + b, *quantize_multiplier(tw / ((1 << 20) * so))) + zo, lo, hi),
                     "f32": np.clip(np.round(f) + zo, lo, hi)}
        elif name == "MEAN":
            s1, z1 = qp(ins[0])
            s1, z1 = float(s1[0]), int(z1[0])
            x = val(ins[0])
            n = x.shape[1] * x.shape[2]
            acc = (x - z1).sum(axis=(1, 2), keepdims=True)
            v = mbqm(acc, *quantize_multiplier(s1 / so))
            away = np.where(v > 0, (v + n // 2) // n, -((-v + n // 2) // n))
            # TFLite's optimized int8 Mean: the raw sum times f32(s / (n so)) as a Q31
            # multiplier, plus zo - round(zi s / so) (f32, half away from zero).
            f = np.float32
            t = f(z1) * f(s1) / f(so)
            bias = zo - int(t + f(0.5) if t > 0 else t - f(0.5))
            qm = quantize_multiplier(float(f(s1) / (f(n) * f(so))))
            raw = x.sum(axis=(1, 2), keepdims=True)
            rules = {"raw sum, f32 multiplier, half-up": np.clip(half_up(raw, *qm) + bias, -128, 127),
                     "raw sum, f32 multiplier, gemmlowp": np.clip(mbqm(raw, *qm) + bias, -128, 127),
                     "multiplier then /n (half away)": np.clip(away + zo, -128, 127),
                     "one multiplier s/(n so)": np.clip(mbqm(acc, *quantize_multiplier(s1 / (so * n))) + zo, -128, 127),
                     "f32": np.clip(np.round(acc * np.float32(s1 / so / n)) + zo, -128, 127)}
        else:
            continue
        off = " ".join(f"{r}: {int((v != y).sum())}" for r, v in rules.items())
        print(f"{k:3} {name:18} {y.size:6} elements; off under {off}")
    if args.write:
        with open(args.write, "w") as f:
            # Layers small enough for the test data that tell the rules apart (the half-up
            # rule reproduces every recorded layer).
            keep = [r for r in records if r["half_up_off"] == 0 and 500 <= len(r["sums"]) <= 4200
                    and (r["gemmlowp_off"] > 0 or r["xnnpack_off"] > 0)]
            json.dump(keep, f, separators=(",", ":"))
            f.write("\n")


def fully_connected(_args):
    """One-layer int8 Dense models (per channel and per tensor) on the builtin kernels: how
    many outputs each requantization rule gets wrong."""
    import tensorflow as tf
    keras, layers = tf.keras, tf.keras.layers
    rng = np.random.default_rng(0)
    for n_in, n_out, batch, by_channel in [(53, 37, 5, True), (200, 64, 3, True), (17, 1000, 2, False)]:
        inp = keras.Input((n_in,), batch_size=batch)
        m = keras.Model(inp, layers.Dense(n_out)(inp))
        m.layers[1].set_weights([rng.normal(0, 0.3, (n_in, n_out)).astype(np.float32),
                                 rng.normal(0, 0.1, (n_out,)).astype(np.float32)])
        conv = tf.lite.TFLiteConverter.from_keras_model(m)

        def representative():
            for _ in range(8):
                yield [rng.uniform(-2, 2, (batch, n_in)).astype(np.float32)]

        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
        if not by_channel:
            conv._experimental_disable_per_channel = True
        it = Interpreter(model_content=conv.convert(),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                         experimental_preserve_all_tensors=True)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], rng.integers(-128, 128, (batch, n_in)).astype(np.int8))
        it.invoke()
        td = {t["index"]: t for t in it.get_tensor_details()}
        for o in it._get_ops_details():
            if o["op_name"] != "FULLY_CONNECTED":
                continue
            xi, wi, bi = o["inputs"][:3]
            yi = o["outputs"][0]
            sx, zx = td[xi]["quantization"]
            so, zo = td[yi]["quantization"]
            sw = td[wi]["quantization_parameters"]["scales"]
            val = lambda i: it.get_tensor(i).astype(np.int64)  # noqa: E731
            acc = (val(xi) - zx) @ val(wi).T + val(bi)
            y = val(yi)
            mults = [quantize_multiplier(float(sx) * float(w) / so) for w in sw]
            mults = mults * n_out if len(mults) == 1 else mults
            rules = {"half-up": np.clip(per_channel(half_up, acc, mults) + zo, -128, 127),
                     "gemmlowp": np.clip(per_channel(mbqm, acc, mults) + zo, -128, 127),
                     "xnnpack(f32)": xnn_requant(acc, np.float32(sx) * sw.astype(np.float32) / np.float32(so), zo, -128, 127)}
            off = " ".join(f"{r}: {int((v != y).sum())}" for r, v in rules.items())
            print(f"FULLY_CONNECTED {n_in}->{n_out} batch {batch} per-channel {len(sw) > 1}: "
                  f"{y.size} elements; off under {off}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("refusal")
    sub.add_parser("scan")
    sub.add_parser("fc")
    o = sub.add_parser("ops")
    o.add_argument("model")
    o.add_argument("input")
    o.add_argument("--write")
    args = ap.parse_args()
    {"refusal": refusal, "scan": scan, "ops": ops, "fc": fully_connected}[args.cmd](args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Train a tiny CNN on scikit-learn's 8x8 digits data set in pure NumPy and
export it to ONNX (models/digits/model.onnx).

Everything (forward pass, backward pass, optimiser) is implemented here with
NumPy only; onnx is used to write the model and onnxruntime to validate it.

Architecture (NCHW, input [batch,1,8,8], pixels scaled to [0,1]):

    Conv(1->16, 3x3, pad 1) -> BatchNormalization -> Relu -> MaxPool(2x2, s2)
    -> Conv(16->32, 3x3, pad 1) -> Relu -> AveragePool(2x2, s2)       [N,32,2,2]
    -> Reshape to [N, -1] (shape computed by Shape->Gather->Unsqueeze->Concat)
    -> Gemm(128->10, transB=1) -> Softmax                                [N,10]

Usage:  python scripts/train_digits.py [--out models/digits] [--seed 1234]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

SEED = 1234
TEST_FRACTION = 0.2
C1, C2, NUM_CLASSES = 16, 32, 10
BN_EPS = 1e-5
BN_MOMENTUM = 0.9  # ONNX convention: running = running * momentum + batch * (1 - momentum)
EPOCHS = 40
BATCH = 32
LR = 3e-3
WEIGHT_DECAY = 1e-4


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def load_split(seed):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    # Deterministic stratified 80/20 split (own implementation, fixed seed).
    rng = np.random.default_rng(seed)
    test_idx = []
    for cls in range(NUM_CLASSES):
        idx = np.flatnonzero(y == cls)
        idx = idx[rng.permutation(len(idx))]
        test_idx.extend(idx[: int(round(len(idx) * TEST_FRACTION))].tolist())
    test_mask = np.zeros(len(y), dtype=bool)
    test_mask[test_idx] = True
    train_idx = np.flatnonzero(~test_mask)
    test_idx = np.flatnonzero(test_mask)  # sorted -> stable order
    return (np.ascontiguousarray(x[train_idx]), y[train_idx],
            np.ascontiguousarray(x[test_idx]), y[test_idx])


# --------------------------------------------------------------------------
# Layers (forward returns (out, cache); backward returns input grads)
# --------------------------------------------------------------------------

def conv3x3_forward(x, w, b):
    """3x3 convolution, stride 1, pad 1, via im2col. x [N,C,H,W], w [F,C,3,3]."""
    n, c, h, wd = x.shape
    f = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # [N,C,H,W,3,3]
    cols = np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * h * wd, c * 9)
    out = cols @ w.reshape(f, c * 9).T + b  # [N*H*W, F]
    out = out.reshape(n, h, wd, f).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(out), (x.shape, cols, w)


def conv3x3_backward(dout, cache):
    (n, c, h, wd), cols, w = cache
    f = w.shape[0]
    d2 = dout.transpose(0, 2, 3, 1).reshape(n * h * wd, f)
    dw = (d2.T @ cols).reshape(w.shape)
    db = d2.sum(axis=0)
    dcols = (d2 @ w.reshape(f, c * 9)).reshape(n, h, wd, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, wd + 2), dtype=dout.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + wd] += dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1], dw, db


def bn_forward_train(x, gamma, beta):
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    inv = 1.0 / np.sqrt(var + BN_EPS)
    xhat = (x - mean[None, :, None, None]) * inv[None, :, None, None]
    out = xhat * gamma[None, :, None, None] + beta[None, :, None, None]
    return out, (xhat, inv, gamma), mean, var


def bn_backward(dout, cache):
    xhat, inv, gamma = cache
    m = dout.shape[0] * dout.shape[2] * dout.shape[3]
    dbeta = dout.sum(axis=(0, 2, 3))
    dgamma = (dout * xhat).sum(axis=(0, 2, 3))
    dxhat = dout * gamma[None, :, None, None]
    dx = (inv[None, :, None, None] / m) * (
        m * dxhat
        - dxhat.sum(axis=(0, 2, 3))[None, :, None, None]
        - xhat * (dxhat * xhat).sum(axis=(0, 2, 3))[None, :, None, None])
    return dx, dgamma, dbeta


def bn_forward_eval(x, gamma, beta, mean, var):
    inv = 1.0 / np.sqrt(var + BN_EPS)
    return ((x - mean[None, :, None, None]) * (inv * gamma)[None, :, None, None]
            + beta[None, :, None, None])


def maxpool2_forward(x):
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    arg = win.argmax(axis=-1)
    out = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    return out, (x.shape, arg)


def maxpool2_backward(dout, cache):
    (n, c, h, w), arg = cache
    dwin = np.zeros((n, c, h // 2, w // 2, 4), dtype=dout.dtype)
    np.put_along_axis(dwin, arg[..., None], dout[..., None], axis=-1)
    return dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


def avgpool2_forward(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5))


def avgpool2_backward(dout):
    return np.repeat(np.repeat(dout, 2, axis=2), 2, axis=3) * 0.25


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

def init_params(rng):
    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1_w": he((C1, 1, 3, 3), 9),
        "conv1_b": np.zeros(C1, np.float32),
        "bn_gamma": np.ones(C1, np.float32),
        "bn_beta": np.zeros(C1, np.float32),
        "conv2_w": he((C2, C1, 3, 3), C1 * 9),
        "conv2_b": np.zeros(C2, np.float32),
        "fc_w": he((NUM_CLASSES, C2 * 4), C2 * 4) * np.float32(0.5),
        "fc_b": np.zeros(NUM_CLASSES, np.float32),
    }


def forward_train(p, x):
    c = {}
    a1, c["conv1"] = conv3x3_forward(x, p["conv1_w"], p["conv1_b"])
    b1, c["bn"], mean, var = bn_forward_train(a1, p["bn_gamma"], p["bn_beta"])
    r1 = np.maximum(b1, 0)
    c["relu1"] = b1 > 0
    m1, c["pool1"] = maxpool2_forward(r1)
    a2, c["conv2"] = conv3x3_forward(m1, p["conv2_w"], p["conv2_b"])
    r2 = np.maximum(a2, 0)
    c["relu2"] = a2 > 0
    g = avgpool2_forward(r2)
    flat = g.reshape(g.shape[0], -1)
    c["flat"] = flat
    logits = flat @ p["fc_w"].T + p["fc_b"]
    return logits, c, mean, var


def backward(p, c, dlogits):
    gr = {}
    gr["fc_w"] = dlogits.T @ c["flat"]
    gr["fc_b"] = dlogits.sum(axis=0)
    dflat = dlogits @ p["fc_w"]
    dg = dflat.reshape(-1, C2, 2, 2)
    dr2 = avgpool2_backward(dg)
    da2 = dr2 * c["relu2"]
    dm1, gr["conv2_w"], gr["conv2_b"] = conv3x3_backward(da2, c["conv2"])
    dr1 = maxpool2_backward(dm1, c["pool1"])
    db1 = dr1 * c["relu1"]
    da1, gr["bn_gamma"], gr["bn_beta"] = bn_backward(db1, c["bn"])
    _, gr["conv1_w"], gr["conv1_b"] = conv3x3_backward(da1, c["conv1"])
    return gr


def forward_eval(p, stats, x):
    a1, _ = conv3x3_forward(x, p["conv1_w"], p["conv1_b"])
    b1 = bn_forward_eval(a1, p["bn_gamma"], p["bn_beta"], stats["mean"], stats["var"])
    m1, _ = maxpool2_forward(np.maximum(b1, 0))
    a2, _ = conv3x3_forward(m1, p["conv2_w"], p["conv2_b"])
    g = avgpool2_forward(np.maximum(a2, 0))
    logits = g.reshape(g.shape[0], -1) @ p["fc_w"].T + p["fc_b"]
    return softmax(logits)


class Adam:
    def __init__(self, params, lr, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params, grads, lr):
        self.t += 1
        for k in params:
            g = grads[k]
            if k.endswith("_w"):
                g = g + WEIGHT_DECAY * params[k]
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            mhat = self.m[k] / (1 - self.b1 ** self.t)
            vhat = self.v[k] / (1 - self.b2 ** self.t)
            params[k] = (params[k] - lr * mhat / (np.sqrt(vhat) + self.eps)).astype(np.float32)


def gradient_check(rng):
    """Finite-difference check of the hand-written backward pass (float64)."""
    p = {k: v.astype(np.float64) for k, v in init_params(rng).items()}
    for k in ("bn_beta", "conv1_b", "conv2_b", "fc_b"):
        p[k] = rng.standard_normal(p[k].shape) * 0.1
    p["bn_gamma"] = 1.0 + rng.standard_normal(C1) * 0.1
    x = rng.random((4, 1, 8, 8))
    y = rng.integers(0, NUM_CLASSES, 4)

    def loss_of(params):
        logits, _, _, _ = forward_train(params, x)
        pr = softmax(logits)
        return -np.log(pr[np.arange(len(y)), y]).mean()

    logits, cache, _, _ = forward_train(p, x)
    d = softmax(logits)
    d[np.arange(len(y)), y] -= 1
    grads = backward(p, cache, d / len(y))
    worst = 0.0
    for k in p:
        flat = p[k].reshape(-1)
        for i in rng.choice(flat.size, size=min(6, flat.size), replace=False):
            old = flat[i]
            flat[i] = old + 1e-5
            lp = loss_of(p)
            flat[i] = old - 1e-5
            lm = loss_of(p)
            flat[i] = old
            num = (lp - lm) / 2e-5
            ana = grads[k].reshape(-1)[i]
            err = abs(num - ana) / max(1e-6, abs(num) + abs(ana))
            worst = max(worst, err)
    if worst > 1e-4:
        raise SystemExit(f"gradient check failed: worst relative error {worst:.3g}")
    return worst


def train(x_train, y_train, seed):
    rng = np.random.default_rng(seed)
    p = init_params(rng)
    stats = {"mean": np.zeros(C1, np.float32), "var": np.ones(C1, np.float32)}
    opt = Adam(p, LR)
    n = len(x_train)
    steps_per_epoch = (n + BATCH - 1) // BATCH
    total_steps = EPOCHS * steps_per_epoch
    step = 0
    for epoch in range(EPOCHS):
        order = rng.permutation(n)
        tot_loss, correct = 0.0, 0
        for s in range(steps_per_epoch):
            idx = order[s * BATCH:(s + 1) * BATCH]
            xb, yb = x_train[idx], y_train[idx]
            # light augmentation: random 1-pixel shifts (zero-filled)
            if epoch < EPOCHS - 5:
                dy, dx = rng.integers(-1, 2, size=2)
                xb = np.roll(xb, (dy, dx), axis=(2, 3))
                if dy == 1:
                    xb[:, :, 0, :] = 0
                elif dy == -1:
                    xb[:, :, -1, :] = 0
                if dx == 1:
                    xb[:, :, :, 0] = 0
                elif dx == -1:
                    xb[:, :, :, -1] = 0
            logits, cache, mean, var = forward_train(p, xb)
            m = xb.shape[0] * 64
            stats["mean"] = (stats["mean"] * BN_MOMENTUM + mean * (1 - BN_MOMENTUM)).astype(np.float32)
            stats["var"] = (stats["var"] * BN_MOMENTUM
                            + var * (m / (m - 1)) * (1 - BN_MOMENTUM)).astype(np.float32)
            pr = softmax(logits)
            tot_loss += -np.log(pr[np.arange(len(yb)), yb] + 1e-12).sum()
            correct += int((pr.argmax(axis=1) == yb).sum())
            d = pr.copy()
            d[np.arange(len(yb)), yb] -= 1
            grads = backward(p, cache, (d / len(yb)).astype(np.float32))
            lr = LR * 0.5 * (1 + np.cos(np.pi * step / total_steps))  # cosine decay
            opt.step(p, grads, lr)
            step += 1
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            print(f"  epoch {epoch + 1:3d}: loss {tot_loss / n:.4f}  train acc {correct / n:.4f}")
    return p, stats


# --------------------------------------------------------------------------
# ONNX export
# --------------------------------------------------------------------------

def export_onnx(p, stats, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr, order="C"), name)

    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["conv1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization",
                         ["conv1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["bn1"],
                         name="bn1", epsilon=BN_EPS),
        helper.make_node("Relu", ["bn1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("AveragePool", ["relu2"], ["pool2"], name="pool2",
                         kernel_shape=[2, 2], strides=[2, 2]),
        # Dynamic flatten: shape = Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])
        helper.make_node("Shape", ["pool2"], ["pool2_shape"], name="shape"),
        helper.make_node("Gather", ["pool2_shape", "zero_index"], ["batch_dim"], name="gather_batch", axis=0),
        helper.make_node("Unsqueeze", ["batch_dim", "unsqueeze_axes"], ["batch_dim_1d"], name="unsqueeze_batch"),
        helper.make_node("Concat", ["batch_dim_1d", "minus_one"], ["flat_shape"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["pool2", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc",
                         alpha=1.0, beta=1.0, transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    inits = [
        init("conv1.weight", p["conv1_w"]), init("conv1.bias", p["conv1_b"]),
        init("bn1.scale", p["bn_gamma"]), init("bn1.bias", p["bn_beta"]),
        init("bn1.mean", stats["mean"]), init("bn1.var", stats["var"]),
        init("conv2.weight", p["conv2_w"]), init("conv2.bias", p["conv2_b"]),
        init("zero_index", np.array(0, dtype=np.int64)),
        init("unsqueeze_axes", np.array([0], dtype=np.int64)),
        init("minus_one", np.array([-1], dtype=np.int64)),
        init("fc.weight", p["fc_w"]), init("fc.bias", p["fc_b"]),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", NUM_CLASSES])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="backplane/scripts/train_digits.py",
                              doc_string="Tiny CNN for the scikit-learn 8x8 digits data set; "
                                         "input [batch,1,8,8] float32 in [0,1] (pixel/16).")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return model


def save_npy(path, arr):
    arr = np.asarray(arr, order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
    assert arr.dtype.byteorder in ("<", "=", "|")
    np.save(path, arr)  # format version 1.0, little-endian, C order


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "models", "digits"))
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(os.path.join(out, "samples"), exist_ok=True)

    import onnxruntime as ort

    x_train, y_train, x_test, y_test = load_split(args.seed)
    print(f"digits: {len(x_train)} train / {len(x_test)} test samples, seed {args.seed}")

    worst = gradient_check(np.random.default_rng(args.seed + 1))
    print(f"gradient check ok (worst relative error {worst:.2e})")

    t0 = time.perf_counter()
    params, stats = train(x_train, y_train, args.seed)
    train_seconds = time.perf_counter() - t0

    probs_np = forward_eval(params, stats, x_test)
    np_acc = float((probs_np.argmax(axis=1) == y_test).mean())
    print(f"numpy test accuracy: {np_acc:.4f} ({train_seconds:.1f} s training)")

    model_path = os.path.join(out, "model.onnx")
    export_onnx(params, stats, model_path)

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    probs_ort = sess.run(["probabilities"], {"input": x_test})[0]
    ort_acc = float((probs_ort.argmax(axis=1) == y_test).mean())
    max_diff = float(np.abs(probs_ort - probs_np).max())
    print(f"onnxruntime test accuracy: {ort_acc:.4f} (max |p_ort - p_numpy| = {max_diff:.2e})")
    if ort_acc != np_acc:
        raise SystemExit("onnxruntime accuracy differs from numpy accuracy")
    if max_diff > 1e-4:
        raise SystemExit("onnxruntime probabilities differ from numpy probabilities")
    if ort_acc < 0.95:
        raise SystemExit(f"test accuracy {ort_acc:.4f} below the 0.95 target")
    # batch-size independence (symbolic batch dim)
    for bs in (1, 7):
        pr = sess.run(None, {"input": x_test[:bs]})[0]
        assert pr.shape == (bs, NUM_CLASSES) and np.allclose(pr, probs_ort[:bs], atol=1e-6)

    save_npy(os.path.join(out, "test_set.npy"), x_test.astype(np.float32))
    save_npy(os.path.join(out, "test_labels.npy"), y_test.astype(np.int64))

    labels = {}
    for k in range(5):  # digit_<k>.npy is the first held-out sample of class k
        i = int(np.flatnonzero(y_test == k)[0])
        sample = x_test[i:i + 1].astype(np.float32)
        expected = sess.run(["probabilities"], {"input": sample})[0].astype(np.float32)
        save_npy(os.path.join(out, "samples", f"digit_{k}.npy"), sample)
        save_npy(os.path.join(out, "samples", f"expected_{k}.npy"), expected)
        labels[f"digit_{k}.npy"] = int(y_test[i])
    with open(os.path.join(out, "samples", "labels.json"), "w") as f:
        json.dump(labels, f, indent=2, sort_keys=True)
        f.write("\n")

    metrics = {
        "test_accuracy": ort_acc,
        "num_test": int(len(y_test)),
        "seed": int(args.seed),
        "train_seconds": round(train_seconds, 2),
    }
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    print(f"wrote {model_path} ({os.path.getsize(model_path)} bytes) and metrics {metrics}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

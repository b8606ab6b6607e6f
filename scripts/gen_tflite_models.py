#!/usr/bin/env python3
"""Builds the TFLite test models of testdata/tflite and their reference outputs.

Each model is a small Keras network with seeded random weights, converted by TensorFlow's
TFLite converter twice: in float32, and fully integer-quantized (int8 weights per channel,
int8 activations per tensor, int8 inputs and outputs) with a representative dataset. The
reference outputs come from the LiteRT interpreter (`ai-edge-litert`) on a seeded input.

Layout of each case, testdata/tflite/<name>/:
    model.tflite       the converted model
    input_<k>.npy      the k-th subgraph input, as the interpreter takes it
    output_<k>.npy     the k-th subgraph output, as the interpreter gives it

Run it in its own virtual environment (not in CI; the outputs are committed):
    python3 -m venv /work/venv-tflite
    /work/venv-tflite/bin/pip install numpy ai-edge-litert tensorflow-cpu
    /work/venv-tflite/bin/python scripts/gen_tflite_models.py [--out testdata/tflite] [--big]

unsupported.tflite holds operators the importer does not lower (for its error listing).

`--big` also writes MobileNetV2 (alpha 0.35, 96x96) in both forms to the output folder's
`big/` subfolder: too large to commit, built on demand for measurements. `--big-size N
--big-alpha A` pick another MobileNetV2 (1000 classes, folder `big_N_A/`, e.g. the
compute-bound 224x224 alpha 1.0); `--big-only` skips the small committed cases;
`--big-logits` leaves the softmax out (folder `..._logits/`): with random weights the
softmax of 100 or 1000 classes is one int8 value everywhere, so only the logits show
whether two runtimes agree.
"""

import argparse
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from ai_edge_litert.interpreter import Interpreter  # noqa: E402

keras = tf.keras
L = keras.layers


def hard_swish(x):
    return x * tf.nn.relu6(x + 3.0) / 6.0


def mobile_block_net(seed):
    """A MobileNet-style body exercising the common mobile operators."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((24, 24, 3), batch_size=1, name="image")
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu6")(inp)
    y = L.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    y = L.Conv2D(8, 1)(y)
    x = L.Add()([x, y])
    x = L.Lambda(hard_swish)(x)
    a = L.AveragePooling2D(2)(x)
    m = L.MaxPooling2D(2)(x)
    x = L.Concatenate()([a, m])
    x = L.ZeroPadding2D(((1, 0), (0, 1)))(x)
    x = L.Conv2D(12, 3, strides=2, padding="valid", activation="tanh")(x)
    s = L.Activation("sigmoid")(x)
    x = L.Multiply()([x, s])
    x = L.UpSampling2D(2, interpolation="bilinear")(x)
    x = L.DepthwiseConv2D(3, strides=2, padding="valid", depth_multiplier=2)(x)
    x = L.Subtract()([x, L.Conv2D(24, 1)(x)])
    x = L.UpSampling2D(2, interpolation="nearest")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(10)(x)
    out = L.Softmax(name="probs")(x)
    return keras.Model(inp, out)


def q8_rules_net(seed):
    """int8 HARD_SWISH and AVERAGE_POOL_2D (2x2 VALID, 3x3 SAME stride 1 and 2, a global
    window) after a convolution whose wide output range makes many exact pooling ties and
    fixed-point hard-swish values the f32 chain rounds differently (issue 31)."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((9, 11, 3), batch_size=1, name="image")
    x = L.Conv2D(17, 3, padding="same")(inp)
    x = L.Lambda(hard_swish)(x)
    a = L.AveragePooling2D(2)(x)
    b = L.AveragePooling2D(3, strides=2, padding="same")(x)
    c = L.AveragePooling2D(3, strides=1, padding="same")(x)
    c = L.Lambda(hard_swish)(c)
    c = L.AveragePooling2D((9, 11))(c)
    return keras.Model(inp, [a, b, c])


def squeeze_excite_net(seed):
    """Keras's squeeze-excite block as EfficientNet writes it: the pool a MEAN without kept
    axes, then a RESHAPE to [N, 1, 1, C] before the squeeze convolution (the batch left
    open, as in the zoo's models: with a fixed batch the converter folds the pair into one
    MEAN keeping its axes); a second pool's MEAN is also read by a Dense (two readers: the
    importer must keep its [N, C] form)."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((10, 13, 8), name="image")
    x = L.Conv2D(24, 1, activation="swish")(inp)
    x = L.DepthwiseConv2D(3, padding="same", activation="swish")(x)
    s = L.GlobalAveragePooling2D()(x)
    s = L.Reshape((1, 1, 24))(s)
    s = L.Conv2D(6, 1, activation="swish")(s)
    s = L.Conv2D(24, 1, activation="sigmoid")(s)
    x = L.Multiply()([x, s])
    x = L.Conv2D(8, 1)(x)
    x = L.Add()([x, inp])
    p = L.GlobalAveragePooling2D()(x)
    g = L.Reshape((1, 1, 8))(p)
    g = L.Conv2D(8, 1, activation="sigmoid")(g)
    x = L.Multiply()([x, g])
    x = L.GlobalAveragePooling2D()(x)
    x = L.Concatenate()([x, L.Dense(8)(p)])
    out = L.Dense(5, name="logits")(x)
    return keras.Model(inp, out)


def dense_net(seed):
    """Fully connected layers, reshapes, transposes and slices on a 2-D input."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((6, 8), batch_size=1, name="seq")
    x = L.Dense(16, activation="relu")(inp)
    x = L.Permute((2, 1))(x)
    x = L.Reshape((8, 12))(x)
    x = L.Dense(5)(x)
    x = L.Flatten()(x)
    x = L.Dense(7, activation="tanh")(x)
    return keras.Model(inp, x)


def data_movement_net(seed):
    """Slices, gathers, splits, packing, batched products, padding, resizing, reductions."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((8, 6, 4), batch_size=1, name="grid")
    x = L.Conv2D(4, 1)(inp)

    def body(t):
        a = t[:, 1:7:2, :, 1:]  # STRIDED_SLICE
        b = tf.gather(t, [3, 0, 2], axis=3)  # GATHER
        h1, h2 = tf.split(b, 2, axis=2)  # SPLIT
        p = tf.stack([h1, h2], axis=1)  # PACK
        u0, u1 = tf.unstack(p, axis=1)  # UNPACK
        c = tf.concat([u0 * 2.0, u1], axis=1)  # CONCATENATION (non-channel axis)
        c = tf.pad(c, [[0, 0], [1, 0], [0, 2], [0, 0]], constant_values=0.5)  # PADV2
        m = tf.reduce_mean(c, axis=1, keepdims=True)  # MEAN keep_dims
        r = tf.compat.v1.image.resize_bilinear(a, (5, 7), align_corners=True)
        q = tf.reshape(r, (1, 5, 21))
        bm = tf.matmul(q, q, transpose_b=True)  # BATCH_MATMUL
        s1, s2 = tf.split(t, [1, 3], axis=3)  # SPLIT_V
        e = tf.nn.leaky_relu(tf.transpose(s2, (0, 2, 1, 3)), alpha=0.2)
        return [tf.reshape(m, (1, -1)), tf.reshape(bm, (1, -1)), tf.reshape(e, (1, -1)),
                tf.reshape(s1, (1, -1))]

    outs = L.Lambda(body)(x)
    y = L.Concatenate(axis=1)(outs)
    return keras.Model(inp, y)


def upsampling_net(seed):
    """Transposed convolutions (TRANSPOSE_CONV): SAME and VALID, strides 2 and 1, a fused
    ReLU and a bias; before them a squeeze-and-excite gate whose pool is an
    AVERAGE_POOL_2D over the whole image."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((7, 9, 5), batch_size=1, name="features")
    g = L.AveragePooling2D((7, 9))(inp)
    g = L.Conv2D(5, 1, activation="sigmoid")(g)
    x = L.Multiply()([inp, g])
    x = L.Conv2DTranspose(6, 3, strides=2, padding="same", activation="relu")(x)
    x = L.Conv2DTranspose(4, 4, strides=2, padding="same", use_bias=False)(x)
    x = L.Conv2DTranspose(3, 3, strides=2, padding="valid")(x)
    x = L.Conv2DTranspose(2, 2, strides=1, padding="valid")(x)
    return keras.Model(inp, x)


def unsupported_net(seed):
    """Two operators backplane does not lower (FLOOR, CUMSUM) around a supported one."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((4, 5), batch_size=1, name="x")
    x = L.Lambda(tf.math.floor)(inp)
    x = L.Dense(3)(x)
    x = L.Lambda(lambda t: tf.math.cumsum(t, axis=1))(x)
    return keras.Model(inp, x)


def mobilenet_v2(seed, size=96, alpha=0.35, classes=100, softmax=True):
    keras.utils.set_random_seed(seed)
    model = keras.applications.MobileNetV2(
        input_shape=(size, size, 3),
        alpha=alpha,
        weights=None,
        classes=classes,
        classifier_activation="softmax" if softmax else None,
    )
    calibrate_batch_norms(model, size, seed)
    return model


def calibrate_batch_norms(model, size, seed):
    """Set every BatchNormalization's moving statistics to a batch of random images' own.

    With random weights and the initial statistics (mean 0, variance 1) the signal fades
    layer by layer (logits of about 1e-10), so every int8 output is one value and a
    comparison with LiteRT shows nothing; normalized by the statistics of the data, each
    layer's activations keep their spread to the logits."""
    rng = np.random.default_rng(seed + 2000)
    x = rng.uniform(-1, 1, (16, size, size, 3)).astype(np.float32)
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            layer.momentum = 0.0
    model(x, training=True)


def convert(model, sample_shape, seed, int8):
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        rng = np.random.default_rng(seed + 1000)

        def representative():
            for _ in range(32):
                yield [rng.uniform(-1, 1, sample_shape).astype(np.float32)]

        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    return conv.convert()


def reference(model_bytes, seed, resolver=None):
    """Runs LiteRT on a seeded input; returns (inputs, outputs) in subgraph order. `resolver`:
    LiteRT's op resolver (`OpResolverType`), its default (XNNPACK) when None."""
    options = {} if resolver is None else {"experimental_op_resolver_type": resolver}
    interp = Interpreter(model_content=model_bytes, **options)
    interp.allocate_tensors()
    rng = np.random.default_rng(seed)
    inputs = []
    for d in interp.get_input_details():
        shape = tuple(d["shape"])
        if d["dtype"] == np.float32:
            v = rng.uniform(-1, 1, shape).astype(np.float32)
        else:
            info = np.iinfo(d["dtype"])
            v = rng.integers(info.min, info.max + 1, shape).astype(d["dtype"])
        interp.set_tensor(d["index"], v)
        inputs.append(v)
    interp.invoke()
    outputs = [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]
    return inputs, outputs


def write_case(out, name, model_bytes, seed):
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.tflite").write_bytes(model_bytes)
    inputs, outputs = reference(model_bytes, seed)
    for k, v in enumerate(inputs):
        np.save(d / f"input_{k}.npy", v)
    for k, v in enumerate(outputs):
        np.save(d / f"output_{k}.npy", v)
    print(f"{d}: {len(model_bytes)} bytes, inputs {[v.shape for v in inputs]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/tflite")
    ap.add_argument("--big", action="store_true")
    ap.add_argument("--big-only", action="store_true", help="skip the small committed cases")
    ap.add_argument("--big-size", type=int, default=96, help="MobileNetV2 input side")
    ap.add_argument("--big-alpha", type=float, default=0.35, help="MobileNetV2 width")
    ap.add_argument(
        "--big-logits",
        action="store_true",
        help="no softmax: the output is the logits (random weights make the softmax of"
        " many classes one quantized value, which compares nothing)",
    )
    ap.add_argument("--only", help="write only this small case (e.g. q8_rules)")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    cases = [
        ("mobile_blocks", mobile_block_net, (1, 24, 24, 3), 1),
        ("dense", dense_net, (1, 6, 8), 2),
        ("data_movement", data_movement_net, (1, 8, 6, 4), 5),
        ("upsampling", upsampling_net, (1, 7, 9, 5), 6),
        ("q8_rules", q8_rules_net, (1, 9, 11, 3), 8),
        ("squeeze_excite", squeeze_excite_net, (1, 10, 13, 8), 9),
    ]
    if args.only:
        for name, build, shape, seed in [c for c in cases if c[0] == args.only]:
            model = build(seed)
            write_case(out, f"{name}_f32", convert(model, shape, seed, False), seed)
            write_case(out, f"{name}_int8", convert(model, shape, seed, True), seed)
        return
    for name, build, shape, seed in [] if args.big_only else cases:
        model = build(seed)
        write_case(out, f"{name}_f32", convert(model, shape, seed, False), seed)
        write_case(out, f"{name}_int8", convert(model, shape, seed, True), seed)
    # The first layers of a 224x224 MobileNetV2 (stem, depthwise): 200,704 int8 outputs, one
    # of which lies so near a rounding boundary that only XNNPACK's order of forming the
    # requantization scale (x_scale * w_scale / y_scale in f32) gives LiteRT's value.
    if not args.big_only:
        full = mobilenet_v2(3, 224, 0.35, 1000, False)
        stem = keras.Model(full.input, full.get_layer("expanded_conv_depthwise_relu").output)
        write_case(out, "mobilenet_v2_stem_int8", convert(stem, (1, 224, 224, 3), 3, True), 3)
    # Not a case (no reference outputs): the importer must list both unsupported operators.
    if not args.big_only:
        (out / "unsupported.tflite").write_bytes(
            convert(unsupported_net(4), (1, 4, 5), 4, False)
        )
    if args.big or args.big_only:
        n, a = args.big_size, args.big_alpha
        model = mobilenet_v2(
            3, n, a, 100 if (n, a) == (96, 0.35) else 1000, not args.big_logits
        )
        # The default size keeps its historical folder; others are named by size and width.
        big = out / ("big" if (n, a) == (96, 0.35) else f"big_{n}_{a:g}")
        if args.big_logits:
            big = big.with_name(big.name + "_logits")
        write_case(big, "mobilenet_v2_f32", convert(model, (1, n, n, 3), 3, False), 3)
        write_case(big, "mobilenet_v2_int8", convert(model, (1, n, n, 3), 3, True), 3)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Builds the TFLite models users bring ("the zoo") with LiteRT's reference outputs.

Two families, each case a folder <out>/<name>/ laid out like testdata/tflite's cases
(model.tflite, input_<k>.npy, output_<k>.npy; see gen_tflite_models.py):

* Trained models shipped inside a PyPI wheel: the `.tflite` files of the mediapipe wheel
  (face detection and landmarks, hands, pose, selfie segmentation, iris), used as they are.
  The wheel is fetched by pip (`pip download --no-deps`, never installed). mediapipe is
  Apache-2.0; so are its models (the wheel's LICENSE).
* Keras applications with seeded random weights (BatchNormalization statistics calibrated
  on random images, as gen_tflite_models.py does, so activations keep their spread), each
  converted by TensorFlow's converter in float32 and full-integer int8 (representative
  dataset of seeded random images, int8 input and output). The classifier's softmax is left
  out: with random weights it is one int8 value everywhere, the logits show the agreement.

Models LiteRT cannot run by itself (mediapipe's custom operators) get no reference outputs:
their folder holds the model and `litert_error.txt`.

Run it in its own virtual environment (not in CI):
    python3 -m venv /work/venv-zoo
    /work/venv-zoo/bin/pip install -r scripts/requirements-tflite-zoo.txt
    /work/venv-zoo/bin/python scripts/gen_tflite_zoo.py --out /tmp/tflite_zoo
    /work/venv-zoo/bin/python scripts/gen_tflite_zoo.py --committed   # testdata/tflite/zoo

`--committed` writes only the small cases committed under testdata/tflite/zoo (COMMITTED).
`--only a,b` builds only the named cases; `--no-keras` / `--no-wheels` skip a family.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_tflite_models import calibrate_batch_norms, convert, reference  # noqa: E402

keras = tf.keras

# The mediapipe release whose wheel still bundles its .tflite models (later ones download
# them at run time); cp311 wheels for x86-64 Linux.
MEDIAPIPE = "mediapipe==0.10.14"

# Keras applications: (case name, constructor, input side, extra arguments). The sides are
# small so the int8 conversion and the references stay quick; every application accepts them.
KERAS_APPS = [
    ("mobilenet_v3_small", "MobileNetV3Small", 96, {"minimalistic": False}),
    ("mobilenet_v3_large", "MobileNetV3Large", 96, {}),
    ("efficientnet_b0", "EfficientNetB0", 96, {}),
    ("resnet50", "ResNet50", 64, {}),
    ("densenet121", "DenseNet121", 64, {}),
    ("mobilenet_v1", "MobileNet", 96, {"alpha": 0.5}),
    ("nasnet_mobile", "NASNetMobile", 96, {}),
    ("efficientnet_v2_b0", "EfficientNetV2B0", 96, {}),
    ("inception_v3", "InceptionV3", 96, {}),
]

# The seed of every case's weights, calibration data and input.
SEED = 11

# Cases small enough to commit (testdata/tflite/zoo), each at most a few hundred KB.
COMMITTED = [
    "mp_face_detection_short_range",
    "mp_selfie_segmentation_landscape",
    "efficientnet_b0_head_f32",
    "efficientnet_b0_head_int8",
    "sparse_features_f32",
    "sparse_features_int8",
]


def wheel_models(cache):
    """The .tflite files of the mediapipe wheel ({case name: bytes}) and its LICENSE."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("mediapipe-0.10.14-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
             MEDIAPIPE, "-d", str(cache)],
            check=True,
        )
        wheels = sorted(cache.glob("mediapipe-0.10.14-*.whl"))
    out = {}
    with zipfile.ZipFile(wheels[0]) as z:
        licence = z.read("mediapipe-0.10.14.dist-info/LICENSE")
        for info in z.infolist():
            if info.filename.endswith(".tflite"):
                name = pathlib.PurePosixPath(info.filename).stem
                out[f"mp_{name}"] = z.read(info)
    return out, licence


def keras_app(ctor, side, extra, seed):
    keras.utils.set_random_seed(seed)
    model = getattr(keras.applications, ctor)(
        input_shape=(side, side, 3),
        weights=None,
        classes=100,
        classifier_activation=None,
        **extra,
    )
    calibrate_batch_norms(model, side, seed)
    return model


def mobilenet_v3_small_head(seed):
    """The first blocks of MobileNetV3Small at 64x64 (stem, hard-swish, squeeze-excite,
    depthwise 5x5): small enough to commit."""
    full = keras_app("MobileNetV3Small", 64, {}, seed)
    names = [layer.name for layer in full.layers]
    # The output of the fourth inverted-residual block ("expanded_conv_3"): its last Add or
    # projection BatchNorm, whichever the Keras version names.
    cut = [n for n in names if n.startswith("expanded_conv_3") and n.endswith("_add")]
    if not cut:
        cut = [n for n in names if n.startswith("expanded_conv_3") and "project_bn" in n]
    head = keras.Model(full.input, full.get_layer(cut[-1]).output)
    return head


def sparse_features_net(seed):
    """Pruned weights (four in five zero) the converter stores sparse, behind DENSIFY, with
    PRELU and DEPTH_TO_SPACE: the importer features trained models need, in a small net."""
    keras.utils.set_random_seed(seed)
    layers = keras.layers
    inp = keras.Input((12, 12, 3), batch_size=1, name="image")
    x = layers.Conv2D(16, 3, padding="same")(inp)
    x = layers.PReLU(shared_axes=[1, 2])(x)
    x = layers.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(x)
    x = layers.Conv2D(8, 3, strides=2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(10)(x)
    model = keras.Model(inp, x)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        w = layer.get_weights()
        if w and w[0].ndim >= 2:
            w[0][rng.uniform(size=w[0].shape) < 0.8] = 0.0
            layer.set_weights(w)
        elif isinstance(layer, layers.PReLU):
            layer.set_weights([rng.uniform(0.05, 0.5, w[0].shape).astype(np.float32)])
    return model


def convert_sparse(model, sample_shape, seed, int8):
    """convert() with the converter's sparsity optimization (sparse weight storage)."""
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    if int8:
        rng = np.random.default_rng(seed + 1000)

        def representative():
            for _ in range(32):
                yield [rng.uniform(-1, 1, sample_shape).astype(np.float32)]

        conv.optimizations.append(tf.lite.Optimize.DEFAULT)
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    return conv.convert()


def efficientnet_b0_head(seed):
    """The first blocks of EfficientNetB0 at 64x64 (rescaling and normalization, stem,
    swish as LOGISTIC times x, squeeze-excite): small enough to commit."""
    full = keras_app("EfficientNetB0", 64, {}, seed)
    return keras.Model(full.input, full.get_layer("block2b_add").output)


def write_spread(d, model_bytes, seed, outputs):
    """LiteRT's own spread: per float output, the largest difference between the outputs
    written and those of LiteRT's reference kernels (BUILTIN_REF) on the same input, one
    number a line in `litert_spread.txt`. Float models whose outputs cancel large terms differ
    by more than rtol 1e-4 between LiteRT's own kernel sets; the test accepts a difference
    within twice this spread there (docs/tflite.md)."""
    try:
        _, ref = reference(model_bytes, seed, OpResolverType.BUILTIN_REF)
    except (RuntimeError, ValueError):
        return
    lines = []
    for a, b in zip(outputs, ref):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        lines.append(f"{diff.max() if diff.size else 0.0:.9g}")
    (d / "litert_spread.txt").write_text("\n".join(lines) + "\n")


def write_reference_or_error(out, name, model_bytes, seed):
    """Write the case: the model, the seeded inputs and LiteRT's outputs. LiteRT runs with its
    default delegate (XNNPACK); where XNNPACK refuses the model, with the builtin kernels alone
    (noted in `litert_resolver.txt`). A model LiteRT cannot run at all gets
    `litert_error.txt` instead of outputs."""
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.tflite").write_bytes(model_bytes)
    errors = []
    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        try:
            inputs, outputs = reference(model_bytes, seed, resolver)
        except (RuntimeError, ValueError) as e:
            errors.append(f"{resolver.name}: {e}")
            continue
        for k, v in enumerate(inputs):
            np.save(d / f"input_{k}.npy", v)
        for k, v in enumerate(outputs):
            np.save(d / f"output_{k}.npy", v)
        if errors:
            (d / "litert_resolver.txt").write_text(f"{resolver.name}\n" + "\n".join(errors))
        write_spread(d, model_bytes, seed, outputs)
        print(f"{d}: {len(model_bytes)} bytes, inputs {[v.shape for v in inputs]}")
        return
    (d / "litert_error.txt").write_text("\n".join(errors) + "\n")
    print(f"{d}: LiteRT cannot run it: {errors[-1].splitlines()[0]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/tflite_zoo")
    ap.add_argument("--committed", action="store_true", help="only COMMITTED, to testdata")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--no-keras", action="store_true")
    ap.add_argument("--no-wheels", action="store_true")
    ap.add_argument("--wheel-cache", default="/tmp/zoo-wheels")
    ap.add_argument("--respread", action="store_true",
                    help="only write the missing litert_spread.txt of the cases in the folder")
    args = ap.parse_args()
    out = pathlib.Path("testdata/tflite/zoo" if args.committed else args.out)
    if args.respread:
        for d in sorted(p for p in out.iterdir() if (p / "output_0.npy").is_file()
                        and not (p / "litert_spread.txt").is_file()):
            outputs = [np.load(f) for f in sorted(d.glob("output_*.npy"),
                                                  key=lambda f: int(f.stem.split("_")[1]))]
            write_spread(d, (d / "model.tflite").read_bytes(), SEED, outputs)
        return
    only = set(args.only.split(",")) - {""}
    if args.committed:
        only = set(COMMITTED)

    def wanted(name):
        return not only or name in only

    seed = SEED
    if not args.no_wheels:
        models, licence = wheel_models(pathlib.Path(args.wheel_cache))
        for name, data in sorted(models.items()):
            if wanted(name):
                write_reference_or_error(out, name, data, seed)
                (out / name / "LICENSE").write_bytes(licence)
    if args.no_keras:
        return
    if wanted("mobilenet_v3_small_head_f32") or wanted("mobilenet_v3_small_head_int8"):
        head = mobilenet_v3_small_head(seed)
        shape = (1, 64, 64, 3)
        for kind, int8 in (("f32", False), ("int8", True)):
            name = f"mobilenet_v3_small_head_{kind}"
            if wanted(name):
                write_reference_or_error(out, name, convert(head, shape, seed, int8), seed)
    if wanted("efficientnet_b0_head_f32") or wanted("efficientnet_b0_head_int8"):
        head = efficientnet_b0_head(seed)
        for kind in ("f32", "int8"):
            name = f"efficientnet_b0_head_{kind}"
            if wanted(name):
                write_reference_or_error(
                    out, name, convert(head, (1, 64, 64, 3), seed, kind == "int8"), seed
                )
    if wanted("sparse_features_f32") or wanted("sparse_features_int8"):
        net = sparse_features_net(seed)
        for kind in ("f32", "int8"):
            if wanted(f"sparse_features_{kind}"):
                write_reference_or_error(
                    out, f"sparse_features_{kind}",
                    convert_sparse(net, (1, 12, 12, 3), seed, kind == "int8"), seed,
                )
    for name, ctor, side, extra in KERAS_APPS:
        kinds = [k for k in ("f32", "int8") if wanted(f"{name}_{k}")]
        if not kinds:
            continue
        try:
            model = keras_app(ctor, side, extra, seed)
        except (ValueError, TypeError) as e:
            print(f"{name}: Keras cannot build it here: {e}")
            continue
        for kind in kinds:
            write_reference_or_error(
                out, f"{name}_{kind}",
                convert(model, (1, side, side, 3), seed, kind == "int8"), seed,
            )


if __name__ == "__main__":
    main()

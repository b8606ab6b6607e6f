"""The shipped digits model from Python: metadata, outputs against the CLI's and ONNX
Runtime's stored ones, input layouts, options and providers."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import backplane
from conftest import DIGITS, MODEL


def test_inputs_and_outputs_are_described_like_onnxruntime(session):
    (inp,) = session.get_inputs()
    (out,) = session.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("input", "tensor(float)", ["batch", 1, 8, 8])
    assert (out.name, out.type, out.shape) == ("probabilities", "tensor(float)", ["batch", 10])
    assert repr(inp) == "NodeArg(name='input', type='tensor(float)', shape=['batch', 1, 8, 8])"
    assert session.get_providers() == ["CpuAcc", "CpuRef"]


def test_each_sample_matches_onnxruntime_and_its_label(session):
    labels = json.loads((DIGITS / "samples" / "labels.json").read_text())
    for name, label in labels.items():
        k = name.split("_")[1].split(".")[0]
        x = np.load(DIGITS / "samples" / name)
        (probs,) = session.run(None, {"input": x})
        assert probs.dtype == np.float32 and probs.shape == (1, 10)
        expected = np.load(DIGITS / "samples" / f"expected_{k}.npy")
        np.testing.assert_allclose(probs, expected, rtol=1e-4, atol=1e-6)
        assert int(probs.argmax()) == label


@pytest.mark.parametrize("backends", ["CpuAcc,CpuRef", "CpuRef"])
def test_outputs_equal_the_cli(cli, samples, backends):
    """`backplane run --json` on the shipped samples and session.run on the same batch give
    the same values, bit for bit."""
    done = subprocess.run(
        [str(cli), "run", "--json", "--backends", backends],
        cwd=MODEL.parents[2],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(done.stdout)
    (cli_out,) = doc["outputs"]
    expected = np.array(cli_out["values"], dtype=np.float32).reshape(cli_out["shape"])
    batch, labels = samples
    session = backplane.InferenceSession(str(MODEL), providers=backends.split(","))
    (probs,) = session.run(["probabilities"], {"input": batch})
    np.testing.assert_array_equal(probs, expected)
    assert list(probs.argmax(axis=1)) == labels
    layers = session.get_specializations()[-1]["layers"]
    assert layers == {b["backend"]: b["layers"] for b in doc["backends"]}


def test_the_held_out_set_scores_the_documented_accuracy(session):
    x = np.load(DIGITS / "test_set.npy")
    y = np.load(DIGITS / "test_labels.npy")
    (probs,) = session.run(None, {"input": x})
    metrics = json.loads((DIGITS / "metrics.json").read_text())
    assert (probs.argmax(axis=1) == y).mean() == pytest.approx(metrics["test_accuracy"], abs=1e-4)


def test_non_contiguous_and_misaligned_inputs_give_the_same_outputs(session, samples):
    batch, _ = samples
    (reference,) = session.run(None, {"input": batch})
    fortran = np.asfortranarray(batch)
    strided = np.repeat(batch, 2, axis=3)[:, :, :, ::2]
    raw = np.zeros(batch.nbytes + 1, dtype=np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(batch.shape)
    misaligned[...] = batch
    assert not misaligned.flags.aligned and not strided.flags.c_contiguous
    read_only = batch.copy()
    read_only.setflags(write=False)
    for x in (fortran, strided, misaligned, read_only):
        (probs,) = session.run(None, {"input": x})
        np.testing.assert_array_equal(probs, reference)


def test_outputs_are_new_writable_arrays(session, samples):
    batch, _ = samples
    (a,) = session.run(None, {"input": batch})
    (b,) = session.run(None, {"input": batch})
    assert a is not b and a.flags.c_contiguous and a.flags.writeable and a.flags.owndata
    a[...] = 0
    assert b.any()


def test_each_batch_size_is_loaded_once(samples):
    batch, _ = samples
    session = backplane.InferenceSession(str(MODEL))
    # The model is tried with batch 1 when the session is created.
    assert [s["input_shapes"] for s in session.get_specializations()] == [{"input": [1, 1, 8, 8]}]
    for x in (batch[:1], batch, batch[:1], batch[:3], batch):
        session.run(None, {"input": x})
    shapes = [s["input_shapes"]["input"][0] for s in session.get_specializations()]
    assert shapes == [1, 5, 3]


def test_a_free_dimension_override_fixes_the_batch(samples):
    batch, _ = samples
    options = backplane.SessionOptions()
    options.add_free_dimension_override_by_name("batch", 5)
    assert options.free_dimension_overrides == {"batch": 5}
    session = backplane.InferenceSession(str(MODEL), options)
    assert [s["input_shapes"] for s in session.get_specializations()] == [{"input": [5, 1, 8, 8]}]
    assert session.run(None, {"input": batch})[0].shape == (5, 10)
    with pytest.raises(backplane.InvalidArgument, match=r"must be f32\[5x1x8x8\], got f32\[1x1x8x8\]"):
        session.run(None, {"input": batch[:1]})


def test_the_model_can_be_given_as_bytes(samples):
    batch, labels = samples
    session = backplane.InferenceSession(MODEL.read_bytes())
    (probs,) = session.run(None, {"input": batch})
    assert list(probs.argmax(axis=1)) == labels


def test_providers_and_their_options():
    assert {"CpuAcc", "CpuRef"} <= set(backplane.get_available_providers())
    assert "Builtin" not in backplane.get_available_providers()
    assert backplane.get_device() == "CPU"
    # ONNX Runtime's CPU provider name stands for the default backends.
    session = backplane.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    assert session.get_providers() == ["CpuAcc", "CpuRef"]
    # Options per provider, in a tuple or in provider_options.
    session = backplane.InferenceSession(
        str(MODEL), providers=[("CpuAcc", {"threads": 1}), "CpuRef"]
    )
    assert session.get_provider_options() == {"CpuAcc": {"threads": "1"}, "CpuRef": {}}
    session = backplane.InferenceSession(
        str(MODEL), providers=["CpuAcc", "CpuRef"], provider_options=[{"threads": "2"}, {}]
    )
    assert session.get_provider_options()["CpuAcc"] == {"threads": "2"}
    with pytest.raises(backplane.InvalidArgument, match="one dict per provider"):
        backplane.InferenceSession(str(MODEL), providers=["CpuAcc"], provider_options=[{}, {}])
    with pytest.raises(backplane.Fail, match="threads=0: expected a positive integer"):
        backplane.InferenceSession(str(MODEL), providers=[("CpuAcc", {"threads": "0"})])
    # The per-layer thread choice can be turned on; a bad value is refused with its name.
    session = backplane.InferenceSession(
        str(MODEL), providers=[("CpuAcc", {"threads": 2, "thread_choice": "on"}), "CpuRef"]
    )
    assert session.get_provider_options()["CpuAcc"] == {"threads": "2", "thread_choice": "on"}
    for _ in range(20):
        session.run(None, {"input": np.zeros((1, 1, 8, 8), np.float32)})
    with pytest.raises(backplane.Fail, match="thread_choice=sometimes: expected on or off"):
        backplane.InferenceSession(str(MODEL), providers=[("CpuAcc", {"thread_choice": "sometimes"})])


def test_intra_op_threads_reach_cpuacc():
    options = backplane.SessionOptions()
    options.intra_op_num_threads = 1
    cpu_acc = next(b for b in backplane.backends(options) if b.id == "CpuAcc")
    assert cpu_acc.capabilities["Threads"] == 1
    assert cpu_acc.kind == "static" and cpu_acc.file is None
    with pytest.raises(backplane.InvalidArgument):
        options.intra_op_num_threads = -1
    session = backplane.InferenceSession(str(MODEL), sess_options=options)
    assert session.get_session_options().intra_op_num_threads == 1


def test_per_layer_overrides(samples):
    batch, _ = samples
    options = backplane.SessionOptions()
    options.add_layer_backend("Softmax", "CpuRef")
    assert options.layer_backends == {"Softmax": "CpuRef"}
    session = backplane.InferenceSession(str(MODEL), options=options)
    # CpuAcc fuses the first convolution with its max pooling (and the batch norm before).
    assert session.get_specializations()[0]["layers"] == {"CpuAcc": 7, "CpuRef": 1}
    (probs,) = session.run(None, {"input": batch})
    (reference,) = backplane.InferenceSession(str(MODEL)).run(None, {"input": batch})
    np.testing.assert_allclose(probs, reference, rtol=1e-5, atol=1e-7)
    options.layer_backends = {"no_such_layer": "CpuRef"}
    with pytest.raises(backplane.InvalidArgument, match="'no_such_layer' matches no layer"):
        backplane.InferenceSession(str(MODEL), options=options)

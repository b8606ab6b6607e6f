"""Input validation and failures raise exceptions of the backplane.BackplaneError hierarchy
that carry the runtime's messages."""

from __future__ import annotations

import numpy as np
import pytest

import backplane
import onnx_builder as ob
from conftest import MODEL


def test_the_hierarchy_extends_the_builtin_exceptions():
    assert issubclass(backplane.InvalidArgument, backplane.BackplaneError)
    assert issubclass(backplane.InvalidArgument, ValueError)
    assert issubclass(backplane.NoSuchFile, FileNotFoundError)
    assert issubclass(backplane.Unsupported, NotImplementedError)
    assert issubclass(backplane.Fail, RuntimeError)
    assert issubclass(backplane.InvalidGraph, backplane.BackplaneError)
    assert issubclass(backplane.BackplaneError, Exception)
    assert backplane.InvalidArgument.__module__ == "backplane"


def test_a_wrong_dtype(session):
    x = np.zeros((1, 1, 8, 8), dtype=np.float64)
    with pytest.raises(backplane.InvalidArgument) as e:
        session.run(None, {"input": x})
    assert str(e.value) == "input 'input' must be f32[<batch>x1x8x8], got f64[1x1x8x8]"
    # Lists become float64 arrays, as with ONNX Runtime.
    with pytest.raises(backplane.InvalidArgument, match=r"got f64\[1x1x8x8\]"):
        session.run(None, {"input": x.tolist()})
    with pytest.raises(backplane.InvalidArgument, match=r"got <U1\[2\]"):
        session.run(None, {"input": np.array(["a", "b"])})


def test_a_wrong_shape(session):
    with pytest.raises(backplane.InvalidArgument, match=r"must be f32\[<batch>x1x8x8\], got f32\[1x1x4x8\]"):
        session.run(None, {"input": np.zeros((1, 1, 4, 8), np.float32)})
    with pytest.raises(backplane.InvalidArgument, match=r"got f32\[1x8x8\]"):
        session.run(None, {"input": np.zeros((1, 8, 8), np.float32)})


def test_unknown_and_missing_names(session):
    x = np.zeros((1, 1, 8, 8), np.float32)
    with pytest.raises(backplane.InvalidArgument) as e:
        session.run(None, {"input": x, "image": x})
    assert str(e.value) == "'image' is not an input of the network; its inputs are: input"
    with pytest.raises(backplane.InvalidArgument) as e:
        session.run(None, {})
    assert str(e.value) == (
        "input 'input' (f32[<batch>x1x8x8]) was not given; the network's inputs are: input"
    )
    with pytest.raises(backplane.InvalidArgument, match="'logits' is not an output of the model"):
        session.run(["logits"], {"input": x})
    with pytest.raises(backplane.InvalidArgument, match="input names must be strings"):
        session.run(None, {0: x})
    with pytest.raises(backplane.InvalidArgument, match="input_feed must be a dict"):
        session.run(None, [x])
    with pytest.raises(backplane.InvalidArgument, match="run_options"):
        session.run(None, {"input": x}, object())


def test_the_session_keeps_working_after_errors(session):
    x = np.zeros((2, 1, 8, 8), np.float32)
    for bad in ({"input": x.astype(np.int64)}, {}, {"other": x}):
        with pytest.raises(backplane.InvalidArgument):
            session.run(None, bad)
    assert session.run(None, {"input": x})[0].shape == (2, 10)


def test_files_and_models_that_cannot_be_read(tmp_path):
    with pytest.raises(backplane.NoSuchFile, match="no_such.onnx"):
        backplane.InferenceSession(str(tmp_path / "no_such.onnx"))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not protobuf")
    with pytest.raises(backplane.InvalidGraph, match="is not a valid ONNX model"):
        backplane.InferenceSession(str(bad))
    with pytest.raises(backplane.InvalidGraph):
        backplane.InferenceSession(b"")
    with pytest.raises(backplane.InvalidArgument, match="path_or_bytes"):
        backplane.InferenceSession(42)


def test_unknown_providers():
    with pytest.raises(backplane.InvalidArgument) as e:
        backplane.InferenceSession(str(MODEL), providers=["CUDAExecutionProvider"])
    assert "backend 'CUDAExecutionProvider' is not registered" in str(e.value)
    assert "CpuRef" in str(e.value)
    with pytest.raises(backplane.InvalidArgument, match="list of provider names"):
        backplane.InferenceSession(str(MODEL), providers="CpuAcc")
    with pytest.raises(backplane.InvalidArgument, match="both"):
        backplane.InferenceSession(
            str(MODEL), backplane.SessionOptions(), options=backplane.SessionOptions()
        )


def test_unsupported_operators_are_reported_when_the_session_is_created():
    model = ob.model(
        [ob.node("FancyOp", ["x"], ["y"], name="fancy"), ob.node("Relu", ["y"], ["z"])],
        [ob.value("x", ob.tensor_type(ob.FLOAT, ["n", 4]))],
        [ob.value("z", ob.tensor_type(ob.FLOAT, ["n", 4]))],
    )
    with pytest.raises(backplane.Unsupported, match="node 'fancy' \\(FancyOp"):
        backplane.InferenceSession(model)


def test_sequence_inputs_are_refused():
    model = ob.model(
        [ob.node("SequenceLength", ["s"], ["n"])],
        [ob.value("s", ob.sequence_type(ob.tensor_type(ob.FLOAT, [2])))],
        [ob.value("n", ob.tensor_type(ob.INT64, []))],
    )
    with pytest.raises(backplane.Unsupported, match=r"'s' is a seq\(tensor\(float\)\)"):
        backplane.InferenceSession(model)

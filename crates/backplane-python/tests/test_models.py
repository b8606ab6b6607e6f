"""Small models built in the tests: every NumPy dtype in and out, static shapes loaded when
the session is created, and inputs whose values the import needs."""

from __future__ import annotations

import numpy as np
import pytest

import backplane
import onnx_builder as ob

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_]
CODES = {np.float16: 10, np.uint16: 4, np.int16: 5, np.uint32: 12, np.uint64: 13}


def code(dtype) -> int:
    return ob.NUMPY_CODES.get(np.dtype(dtype)) or CODES[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_goes_in_and_comes_out(dtype):
    model = ob.model(
        [ob.node("Identity", ["x"], ["y"])],
        [ob.value("x", ob.tensor_type(code(dtype), ["n", 3]))],
        [ob.value("y", ob.tensor_type(code(dtype), ["n", 3]))],
    )
    session = backplane.InferenceSession(model)
    x = (np.arange(12).reshape(4, 3) % 2).astype(dtype)
    (y,) = session.run(None, {"x": x})
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


def test_comparisons_return_bool_arrays():
    model = ob.model(
        [ob.node("Greater", ["a", "b"], ["gt"]), ob.node("Add", ["a", "b"], ["sum"])],
        [ob.value("a", ob.tensor_type(ob.INT64, [3])), ob.value("b", ob.tensor_type(ob.INT64, [3]))],
        [ob.value("gt", ob.tensor_type(ob.BOOL, [3])), ob.value("sum", ob.tensor_type(ob.INT64, [3]))],
    )
    session = backplane.InferenceSession(model, providers=["CpuRef"])
    a, b = np.array([1, 5, -2]), np.array([2, 3, -2])
    gt, total = session.run(None, {"a": a, "b": b})
    assert gt.dtype == np.bool_ and gt.tolist() == [False, True, False]
    assert total.dtype == np.int64 and total.tolist() == [3, 8, -4]
    (only,) = session.run(["sum"], {"a": a, "b": b})
    assert only.tolist() == [3, 8, -4]
    # Scalars and lists go through numpy.asarray.
    (gt,) = session.run(["gt"], {"a": [1, 2, 3], "b": [0, 2, 4]})
    assert gt.tolist() == [True, False, False]


def test_a_static_model_is_loaded_when_the_session_is_created():
    weights = np.arange(6, dtype=np.float32).reshape(3, 2)
    model = ob.model(
        [ob.node("MatMul", ["x", "w"], ["y"])],
        [ob.value("x", ob.tensor_type(ob.FLOAT, [2, 3]))],
        [ob.value("y", ob.tensor_type(ob.FLOAT, [2, 2]))],
        initializers=[ob.tensor("w", weights)],
    )
    session = backplane.InferenceSession(model)
    # The initializer is not an input.
    assert [i.name for i in session.get_inputs()] == ["x"]
    assert [s["input_shapes"] for s in session.get_specializations()] == [{"x": [2, 3]}]
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x @ weights)
    with pytest.raises(backplane.InvalidArgument, match=r"must be f32\[2x3\], got f32\[3x3\]"):
        session.run(None, {"x": np.ones((3, 3), np.float32)})


def test_a_model_that_does_not_fit_a_batch_of_one_is_loaded_for_the_shapes_given():
    """The session tries a model with symbolic dimensions at 1 when it is created; a model
    that is invalid for those shapes only is not refused."""
    model = ob.model(
        [ob.node("Reshape", ["x", "shape"], ["y"])],
        [ob.value("x", ob.tensor_type(ob.FLOAT, ["n", 4]))],
        [ob.value("y", ob.tensor_type(ob.FLOAT, [2, 4]))],
        initializers=[ob.tensor("shape", np.array([2, 4], dtype=np.int64))],
    )
    session = backplane.InferenceSession(model)
    assert session.get_specializations() == []
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x)
    with pytest.raises(backplane.InvalidArgument, match="cannot be imported for these inputs"):
        session.run(None, {"x": x[:1]})


def test_unnamed_dimensions_and_undeclared_shapes():
    model = ob.model(
        [ob.node("Relu", ["x"], ["y"])],
        [ob.value("x", ob.tensor_type(ob.FLOAT, [None, 2]))],
        [ob.value("y", ob.tensor_type(ob.FLOAT, None))],
    )
    session = backplane.InferenceSession(model)
    assert session.get_inputs()[0].shape == [None, 2]
    assert session.get_outputs()[0].shape == []
    x = np.array([[-1.0, 2.0], [3.0, -4.0], [0.5, 0.0]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0))


def test_inputs_the_import_needs_the_values_of_are_bound_per_value():
    """A Reshape whose shape is a graph input: the session imports the model for each value
    of that input it is given."""
    model = ob.model(
        [ob.node("Reshape", ["x", "shape"], ["y"])],
        [ob.value("x", ob.tensor_type(ob.FLOAT, [2, 3])), ob.value("shape", ob.tensor_type(ob.INT64, [2]))],
        [ob.value("y", ob.tensor_type(ob.FLOAT, [None, None]))],
    )
    session = backplane.InferenceSession(model)
    assert session.get_specializations() == []
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for shape in ([3, 2], [6, 1], [3, 2]):
        (y,) = session.run(None, {"x": x, "shape": np.array(shape)})
        np.testing.assert_array_equal(y, x.reshape(shape))
    specs = session.get_specializations()
    assert [s["bound_inputs"] for s in specs] == [["shape"], ["shape"]]
    with pytest.raises(backplane.InvalidArgument, match=r"cannot be imported for these inputs: .*cannot reshape"):
        session.run(None, {"x": x, "shape": np.array([4, 2])})

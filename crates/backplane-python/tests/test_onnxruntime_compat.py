"""The example script runs unchanged on ONNX Runtime (when it is installed) and gives the
same predictions as on backplane."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "python"))
import classify  # noqa: E402


def test_the_example_classifies_every_sample_with_backplane():
    probabilities, labels = classify.classify("backplane")
    assert list(probabilities.argmax(axis=1)) == labels


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnxruntime_gives_the_same_predictions():
    ours, labels = classify.classify("backplane")
    theirs, _ = classify.classify("onnxruntime")
    assert list(theirs.argmax(axis=1)) == list(ours.argmax(axis=1)) == labels
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)

"""A dynamic backend loaded from Python: the Rust example plugin (CpuRef exported through the
C ABI as CpuRefDyn), found in a directory given in SessionOptions."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import backplane
from conftest import MODEL


@pytest.fixture()
def plugin_dir(tmp_path, plugin):
    shutil.copy(plugin, tmp_path / "Backplane_CpuRefDyn_backend.so")
    (tmp_path / "Acme_Broken_backend.so").write_text("not a shared object")
    return tmp_path


def test_backends_lists_the_dynamic_backend(plugin_dir):
    options = backplane.SessionOptions()
    options.dynamic_backends_path = str(plugin_dir)
    infos = {b.id: b for b in backplane.backends(options)}
    dynamic = infos["CpuRefDyn"]
    assert dynamic.kind == "dynamic"
    assert dynamic.file is not None and dynamic.file.endswith("Backplane_CpuRefDyn_backend.so")
    assert dynamic.capabilities
    assert "CpuRefDyn" in repr(dynamic)
    assert infos["CpuRef"].kind == "static"
    assert "CpuRefDyn" in backplane.get_available_providers(options)


def test_a_session_runs_on_the_dynamic_backend(plugin_dir, samples):
    batch, labels = samples
    options = backplane.SessionOptions()
    options.dynamic_backends_path = plugin_dir
    session = backplane.InferenceSession(str(MODEL), options, providers=["CpuRefDyn"])
    (probs,) = session.run(None, {"input": batch})
    assert session.get_specializations()[-1]["layers"] == {"CpuRefDyn": 10}
    assert list(probs.argmax(axis=1)) == labels
    # The same kernels as the static CpuRef: the same values.
    (reference,) = backplane.InferenceSession(str(MODEL), providers=["CpuRef"]).run(
        None, {"input": batch}
    )
    np.testing.assert_array_equal(probs, reference)


def test_without_dynamic_backends_the_backend_is_unknown(plugin_dir):
    options = backplane.SessionOptions()
    options.dynamic_backends_path = str(plugin_dir)
    options.use_dynamic_backends = False
    with pytest.raises(backplane.InvalidArgument, match="'CpuRefDyn' is not registered"):
        backplane.InferenceSession(str(MODEL), options, providers=["CpuRefDyn"])


def test_an_unknown_backend_error_says_which_files_were_skipped(plugin_dir):
    options = backplane.SessionOptions()
    options.dynamic_backends_path = str(plugin_dir)
    with pytest.raises(backplane.InvalidArgument) as e:
        backplane.InferenceSession(str(MODEL), options, providers=["Broken"])
    assert "skipped dynamic backend" in str(e.value) and "Acme_Broken_backend.so" in str(e.value)

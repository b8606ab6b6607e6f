"""The type stubs (backplane/_backplane.pyi) describe the native module as it is."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_stubtest_finds_the_stubs_consistent(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "backplane"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # mypy's cache goes there, not into the checkout
    )
    assert done.returncode == 0, done.stdout + done.stderr

"""Shared fixtures: the repository's digits model and samples, the CLI binary and the
example dynamic backend that scripts/python_tests.sh builds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "models" / "digits"
MODEL = DIGITS / "model.onnx"


def _target_dir() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    return Path(target) if target else REPO / "target"


def _built_file(env: str, default: Path, what: str) -> Path:
    """A file scripts/python_tests.sh builds: named by ``env`` (then it must exist), else
    looked for in the cargo target directory (else the test is skipped)."""
    named = os.environ.get(env)
    if named:
        path = Path(named)
        if not path.is_file():
            pytest.fail(f"{env}={named}: no such file ({what})")
        return path
    if not default.is_file():
        pytest.skip(f"{what} is not built ({default}); scripts/python_tests.sh builds it")
    return default


@pytest.fixture(scope="session")
def cli() -> Path:
    """The `backplane` command-line tool."""
    return _built_file("BACKPLANE_CLI", _target_dir() / "debug" / "backplane", "the CLI")


@pytest.fixture(scope="session")
def plugin() -> Path:
    """The Rust example dynamic backend (CpuRef exported as CpuRefDyn)."""
    return _built_file(
        "BACKPLANE_TEST_PLUGIN",
        _target_dir() / "debug" / "libbackplane_cpuref_dyn.so",
        "the example dynamic backend",
    )


@pytest.fixture(scope="session")
def samples() -> tuple[np.ndarray, list[int]]:
    """The shipped samples stacked in file-name order (as `backplane run` stacks them), with
    their labels."""
    labels = json.loads((DIGITS / "samples" / "labels.json").read_text())
    names = sorted(labels)
    batch = np.concatenate([np.load(DIGITS / "samples" / n) for n in names])
    return batch, [labels[n] for n in names]


@pytest.fixture(scope="session")
def session():
    import backplane

    return backplane.InferenceSession(str(MODEL))

#!/usr/bin/env bash
# Runs every test of the workspace. This is the command README.md and .ci/run name.
#
# The test data (models, op tables, expected outputs) is generated ahead of time by
# scripts/gen_testdata.sh and committed, so the tests themselves need no Python; only the ONNX
# conformance suite comes from the onnx Python package (installed into .venv below).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust (https://rustup.rs) and retry" >&2
  exit 1
fi

# The ONNX conformance test (crates/backplane/tests/conformance.rs) reads the node tests that
# ship with the onnx 1.17.0 Python package: install it into .venv once, and point the test at it.
if [ -z "${BACKPLANE_ONNX_NODE_TESTS:-}" ]; then
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import onnx' >/dev/null 2>&1; then
    if command -v python3 >/dev/null 2>&1; then
      # Two tries: a registry hiccup should not cost a CI run.
      python3 -m venv .venv && { .venv/bin/pip install --quiet -r scripts/requirements-conformance.txt \
        || .venv/bin/pip install --quiet -r scripts/requirements-conformance.txt; } \
        || echo "warning: could not install onnx into .venv; the conformance test will be skipped" >&2
    else
      echo "warning: python3 is not installed; the conformance test will be skipped" >&2
    fi
  fi
  if [ -x .venv/bin/python ]; then
    node_tests="$(.venv/bin/python -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node"))' 2>/dev/null || true)"
    if [ -n "$node_tests" ] && [ -d "$node_tests" ]; then
      export BACKPLANE_ONNX_NODE_TESTS="$node_tests"
    fi
  fi
fi

# In CI the conformance suite is required, not optional.
if [ -n "${CI:-}" ] && [ -z "${BACKPLANE_ONNX_NODE_TESTS:-}" ]; then
  echo "error: CI needs the ONNX node tests (pip install onnx==1.17.0 into .venv failed)" >&2
  exit 1
fi

cargo test --workspace --locked "$@"

# The same node tests through the command line, one `backplane run` per case, as a user runs
# them: every case the library-level test passes must pass here too.
if [ -n "${BACKPLANE_ONNX_NODE_TESTS:-}" ] && [ -x .venv/bin/python ]; then
  # --workspace, not -p backplane-cli: cargo unifies features over the packages it is given,
  # so a narrower selection resolves other features for shared crates (num-traits, syn) and
  # rebuilds most of the tree; over the workspace this reuses what `cargo test` built.
  cargo build --workspace --locked --quiet
  for backends in CpuAcc,CpuRef CpuRef; do
    .venv/bin/python scripts/cli_conformance.py --binary "${CARGO_TARGET_DIR:-target}/debug/backplane" \
      --backends "$backends" --jobs 2
  done
fi

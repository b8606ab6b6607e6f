#!/usr/bin/env bash
# Runs every test of the workspace. This is the command README.md and .ci/run name.
#
# The test data (models, op tables, expected outputs) is generated ahead of time by
# scripts/gen_testdata.sh and committed, so the tests themselves need no Python.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust (https://rustup.rs) and retry" >&2
  exit 1
fi

cargo test --workspace --locked "$@"

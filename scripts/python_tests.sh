#!/usr/bin/env bash
# Builds the Python package (crates/backplane-python) into a wheel with maturin, installs it
# into a local virtual environment (.venv-python) and runs its pytest suite
# (crates/backplane-python/tests). Exits non-zero on any failure.
#
# The wheel is a debug build (the Rust dependencies are optimized by the dev profile), built
# into the cargo target directory ($CARGO_TARGET_DIR or target/), so that a warm target makes
# it quick. The tests also need the CLI and the example dynamic backend, built here too (a
# no-op after `cargo test --workspace`).
#
# onnxruntime is installed when the registry has it for this Python (optional: the test that
# compares predictions with it is skipped otherwise; BACKPLANE_PY_NO_ORT=1 skips installing it).
# Extra arguments go to pytest (e.g. -k threads).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${BACKPLANE_PY_VENV:-.venv-python}"
python="${PYTHON:-python3}"
target="${CARGO_TARGET_DIR:-$PWD/target}"

for tool in cargo "$python"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: $tool is not installed" >&2
    exit 1
  fi
done

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip_install() {
  # Two tries: a registry hiccup should not cost a CI run.
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@" \
    || "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
}
pip_install -r crates/backplane-python/requirements-test.txt
if [ -z "${BACKPLANE_PY_NO_ORT:-}" ] && ! "$venv/bin/python" -c 'import onnxruntime' >/dev/null 2>&1; then
  pip_install onnxruntime \
    || echo "warning: could not install onnxruntime; the comparison with it will be skipped" >&2
fi

# What the tests run besides the wheel: `backplane run --json`, and the plugin. Built over the
# whole workspace so that features unify as in `cargo test --workspace` (a -p selection would
# rebuild most of the tree with other features of shared crates).
cargo build --locked --quiet --workspace

wheels="$target/python-wheels"
rm -rf "$wheels"
"$venv/bin/maturin" build --locked --quiet --out "$wheels" \
  --manifest-path crates/backplane-python/Cargo.toml --interpreter "$venv/bin/python"
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheels"/backplane-*.whl

BACKPLANE_CLI="$target/debug/backplane" \
BACKPLANE_TEST_PLUGIN="$target/debug/libbackplane_cpuref_dyn.so" \
  "$venv/bin/python" -m pytest crates/backplane-python/tests -q -rs -p no:cacheprovider "$@"

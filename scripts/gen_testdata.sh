#!/usr/bin/env bash
# Regenerate every Python-generated artifact under models/ and testdata/.
#
#   scripts/gen_testdata.sh            # uses ./.venv/bin/python (or $PYTHON)
#
# Set up the environment once with:
#   python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then
    echo "error: $PYTHON not found; create the venv first:" >&2
    echo "  python3 -m venv .venv && .venv/bin/pip install -r scripts/requirements.txt" >&2
    exit 1
fi
export PYTHONDONTWRITEBYTECODE=1
# keep numpy's BLAS single-threaded so training is reproducible run to run
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
cd "$ROOT"

echo "== op test tables (testdata/ops)"
"$PYTHON" scripts/gen_op_tests.py --out testdata/ops

echo "== end-to-end ConvNet (testdata/e2e)"
"$PYTHON" scripts/gen_e2e_model.py --out testdata/e2e

echo "== control flow (testdata/control_flow)"
"$PYTHON" scripts/gen_control_flow_models.py

echo "== digits classifier (models/digits)"
"$PYTHON" scripts/train_digits.py --out models/digits

echo "== sizes"
du -sh models testdata

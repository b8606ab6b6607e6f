#!/usr/bin/env bash
# Measures the overhead of a dynamic backend (issue 3), in one process so the figures compare:
#   - latency of the digits model through the dynamically loaded CpuRef wrapper (CpuRefDyn)
#     against the static CpuRef, interleaved; the ratio should be 1.00 +- 0.02;
#   - runtime creation time with 0, 1 and 10 dynamic backends present.
# Usage: scripts/bench-dynamic.sh [LATENCY_ITERATIONS] [CREATE_REPEATS]
# Needs a C compiler (cc) for the C backends of the creation benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p backplane-runtime --example dynamic_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/dynamic_bench"
"$bin" latency "${1:-5000}"
"$bin" create "${2:-200}"

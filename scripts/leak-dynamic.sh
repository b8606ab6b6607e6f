#!/usr/bin/env bash
# Loads and unloads dynamic backends many times and checks that nothing leaks: creates and
# drops COUNT runtimes (default 1000), each loading the Rust and C example backends and
# running the digits model on each, under valgrind's leak checker. Libraries stay mapped by
# design (never dlclose'd), so only "definitely" and "indirectly lost" bytes count as leaks;
# what stays reachable (the library cache, about 4 KB) does not grow with COUNT.
# Usage: scripts/leak-dynamic.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null 2>&1; then
  echo "error: valgrind is not installed (apt-get install valgrind)" >&2
  exit 1
fi
cargo build --release --quiet -p backplane-runtime --example dynamic_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/dynamic_bench"
valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect \
  --errors-for-leak-kinds=definite,indirect --error-exitcode=3 \
  "$bin" churn "${1:-1000}"
echo "leak check passed: no definite or indirect leaks"

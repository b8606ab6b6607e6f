#!/usr/bin/env bash
# Runs the tests of the crates with unsafe code under valgrind's memcheck and fails on any
# error: the plugin crate's own tests (C ABI conversions, the header, the loader against the
# zoo of broken backends), the runtime's dynamic-backend tests (every example plugin loaded,
# run and unloaded, ABI 1.0/1.1/1.2), and CpuAcc's tests (its SIMD kernels against CpuRef).
#
# Memory errors (invalid reads/writes, use of uninitialised values, bad frees) and
# "definitely lost" leaks count as errors. Libraries stay mapped by design (never dlclose'd)
# and test harness threads may still hold memory at exit, so reachable and "possibly lost"
# blocks do not. Child processes (the C compiler the tests run) are not traced.
#
# Tests run one at a time (valgrind serializes threads anyway, and some loader tests count
# process-wide libraries, which parallel tests would disturb).
# Usage: scripts/valgrind-suite.sh [extra args for every test binary, e.g. a test-name filter]
# Env:   CARGO_TARGET_DIR as for cargo; VALGRIND_LOGS=DIR keeps the logs there.
# Not in CI: it takes several minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null 2>&1; then
  echo "error: valgrind is not installed (apt-get install valgrind)" >&2
  exit 1
fi

logs="${VALGRIND_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"

# Build the test binaries and list them: package, target name and executable.
# (Target selections apply to every -p of one command, hence one command per crate.)
list="$logs/binaries.txt"
{
  cargo test --no-run --message-format=json -p backplane-plugin
  cargo test --no-run --message-format=json -p backplane-runtime \
    --test dynamic_backends --test dynamic_backends_abi_1_2
  cargo test --no-run --message-format=json -p backplane-cpu-acc --lib --test against_ref
} 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        # "path+file:///.../cpu-acc#backplane-cpu-acc@0.1.0" or ".../backplane-plugin#0.1.0"
        url, _, frag = m["package_id"].partition("#")
        pkg = frag.split("@")[0] if "@" in frag else url.rstrip("/").split("/")[-1]
        print(pkg, m["target"]["name"], m["executable"])
' | sort -u >"$list"
if [ ! -s "$list" ]; then
  echo "error: no test binaries were built (run the cargo command above to see why)" >&2
  exit 1
fi

status=0
total_errors=0
start_all=$(date +%s)
printf '%-26s %-28s %8s %8s %8s\n' package target tests errors seconds
while read -r pkg target exe; do
  log="$logs/$pkg-$target.log"
  out="$logs/$pkg-$target.out"
  start=$(date +%s)
  set +e
  valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
    --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --trace-children=no --log-file="$log" \
    "$exe" --test-threads=1 "$@" >"$out" 2>&1
  rc=$?
  set -e
  secs=$(($(date +%s) - start))
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
  errors=${errors:-?}
  passed=$(sed -n 's/^test result: .*\. \([0-9]*\) passed.*/\1/p' "$out" | paste -sd+ | bc 2>/dev/null || echo 0)
  printf '%-26s %-28s %8s %8s %8s\n' "$pkg" "$target" "${passed:-0}" "$errors" "$secs"
  if [ "$rc" -ne 0 ]; then
    status=1
    if [ "$rc" -eq 99 ]; then
      echo "  memcheck reported errors: see $log" >&2
    else
      echo "  the tests failed (exit $rc): see $out" >&2
    fi
  fi
  if [ "$errors" != "?" ]; then
    total_errors=$((total_errors + errors))
  fi
done <"$list"
echo "total memcheck errors: $total_errors ($(($(date +%s) - start_all)) s; logs in $logs)"
exit "$status"

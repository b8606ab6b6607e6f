#!/bin/bash
# Run CpuAcc's tests on another machine's CPU (one with AVX-512, say, which picks kernels
# this machine never runs) without a Rust toolchain there:
#   scripts/other_cpu_tests.sh pack DIR   # here: build the release test binaries, copy
#                                         # them and the ONNX node tests into DIR
#   DIR/run.sh                            # there, from a checkout of the same commit
set -euo pipefail
cmd=${1:-}
dir=${2:-}
if [ "$cmd" != pack ] || [ -z "$dir" ]; then
    echo "usage: $0 pack DIR" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
mkdir -p "$dir"
# Every test binary of CpuAcc (its unit tests and each tests/*.rs), the kernel crate's unit
# tests (every integer GEMM tier the CPU has against the portable one), and the facade's
# tests that run CpuAcc.
tests=(fusions end_to_end two_backends memory conformance)
for pkg in backplane-cpu-acc backplane-cpu-kernels backplane; do
    cargo test --release -p "$pkg" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])' |
        while read -r name exe; do
            if [ "$pkg" != backplane ]; then cp "$exe" "$dir/$name"; fi
            for t in "${tests[@]}"; do
                if [ "$pkg" = backplane ] && [ "$name" = "$t" ]; then cp "$exe" "$dir/$t"; fi
            done
        done
done
# The int8 GEMM timed on every integer tier of the CPU (one process, no option needed).
cargo build --release -p backplane-cpu-kernels --example qgemm_tiers --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "qgemm_tiers":
        print(m["executable"])' |
    while read -r exe; do cp "$exe" "$dir/qgemm_tiers"; done
# The CLI, for the backend test kit (op table, random sweeps, node tests) on CpuAcc.
cargo build --release -p backplane-cli --quiet
cp target/release/backplane "$dir/backplane"
# Without debug info the pack stays small enough to send to a lent machine (~55 MB).
if command -v strip >/dev/null 2>&1; then
    find "$dir" -maxdepth 1 -type f -perm -u+x ! -name run.sh -exec strip {} +
fi
node=$(.venv/bin/python -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data"))')
tar czf "$dir/node.tgz" -C "$node" node
repo=$(pwd)
cat > "$dir/run.sh" <<RUN
#!/bin/bash
# The tests read the repository at the path they were built in ($repo).
here=\$(cd "\$(dirname "\$0")" && pwd)
[ -e "$repo" ] || { mkdir -p "\$(dirname "$repo")" && ln -s "\${1:-\$(pwd)}" "$repo"; }
grep -m1 "model name" /proc/cpuinfo
grep -o -w 'avx512f\|avx512bw\|avx512_vnni\|avx_vnni\|avx2\|fma' /proc/cpuinfo | sort | uniq -c
mkdir -p /tmp/node && tar xzf "\$here/node.tgz" -C /tmp/node
export BACKPLANE_ONNX_NODE_TESTS=/tmp/node/node
status=0
for exe in "\$here"/*; do
    t=\$(basename "\$exe")
    case "\$t" in run.sh|node.tgz) continue ;; esac
    echo "== \$t"
    if [ "\$t" = backplane ]; then
        "\$exe" backend-test CpuAcc > "/tmp/\$t.log" 2>&1 || status=1
    elif [ "\$t" = qgemm_tiers ]; then
        "\$exe" > "/tmp/\$t.log" 2>&1 || status=1
        cat "/tmp/\$t.log"
        continue
    else
        "\$exe" --nocapture > "/tmp/\$t.log" 2>&1 || status=1
    fi
    grep -E "test result|FAILED|^conformance:|^backend-test|int8 tier|BACKPLANE_REQUIRE" "/tmp/\$t.log" || true
done
exit \$status
RUN
chmod +x "$dir/run.sh"
du -sh "$dir"

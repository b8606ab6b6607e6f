#!/usr/bin/env python3
"""The ONNX backend node tests through the `backplane` command line, as a user runs them.

For every case of the onnx package's node tests (onnx/backend/test/data/node), this runs

    backplane run CASE/model.onnx --backends B --input NAME=CASE/test_data_set_0/input_K.pb ...
        --compare CASE/test_data_set_0 --rtol 1e-3 --atol 1e-7

one process per case, and sorts the outcome by the exit code: 0 passed, 4 unsupported (an
operator, attribute or data type that the importer or no preferred backend supports), anything
else failed (3: outputs differ). The graph's input names come from the model (read with the
onnx package); everything else is the CLI's work: reading TensorProto, SequenceProto and
OptionalProto files, specializing on small integer inputs the model needs at import, serving
models whose shapes depend on the values of data through a DynamicNetwork (no
specialization on data), comparing outputs.

Cases whose shipped data contradict the operator specification take corrected inputs and
outputs from testdata/conformance/errata (see its README), as the library-level test
crates/backplane/tests/conformance.rs does.

With --expected FILE (default: testdata/conformance/<first backend>.txt, the cases the library
test passes), every listed case must pass here too: the script exits 1 otherwise. Prints the
counts as `cli conformance (...): N passed, M failed, K unsupported`.

Usage: scripts/cli_conformance.py [--binary target/debug/backplane] [--backends CpuAcc,CpuRef]
           [--node-tests DIR] [--jobs N] [--filter SUBSTRING] [--verbose] [--json FILE]
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent


def node_tests_dir(given):
    if given:
        return pathlib.Path(given)
    env = os.environ.get("BACKPLANE_ONNX_NODE_TESTS")
    if env:
        return pathlib.Path(env)
    import onnx  # noqa: PLC0415 (only needed to find the data)

    return pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def graph_inputs(model_path):
    """The names of the graph inputs that are not initializers, in order."""
    import onnx  # noqa: PLC0415

    model = onnx.load(str(model_path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def compare_dir(case, data, scratch):
    """The folder of expected outputs: the shipped one, with corrected outputs from the errata
    folder laid over it where the errata has them."""
    errata = REPO / "testdata" / "conformance" / "errata" / case.name
    if not errata.is_dir():
        return data
    merged = pathlib.Path(scratch) / case.name
    merged.mkdir(parents=True, exist_ok=True)
    for f in data.glob("output_*.pb"):
        shutil.copy(f, merged / f.name)
    for f in errata.glob("output_*.pb"):
        shutil.copy(f, merged / f.name)
    return merged


def run_case(case, binary, backends, scratch, timeout):
    data = case / "test_data_set_0"
    try:
        names = graph_inputs(case / "model.onnx")
    except Exception as e:  # a model the onnx package cannot read is the case's problem
        return case.name, "failed", f"onnx could not read the model: {e}"
    cmd = [str(binary), "run", str(case / "model.onnx"), "--backends", backends]
    errata = REPO / "testdata" / "conformance" / "errata" / case.name
    for k, name in enumerate(names):
        pb = errata / f"input_{k}.pb"
        if not pb.is_file():
            pb = data / f"input_{k}.pb"
        if not pb.is_file():
            return case.name, "failed", f"missing {pb}"
        cmd += ["--input", f"{name}={pb}"]
    cmd += ["--compare", str(compare_dir(case, data, scratch)), "--rtol", "1e-3", "--atol", "1e-7"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return case.name, "failed", f"timed out after {timeout} s"
    why = (p.stderr.strip() or p.stdout.strip()).replace("\n", " | ")[:400]
    if p.returncode == 0:
        return case.name, "passed", ""
    if p.returncode == 4:
        return case.name, "unsupported", why
    return case.name, "failed", f"exit {p.returncode}: {why}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=str(REPO / "target" / "debug" / "backplane"))
    ap.add_argument("--backends", default="CpuAcc,CpuRef")
    ap.add_argument("--node-tests")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--expected", help="cases that must pass (default: the library test's list)")
    ap.add_argument("--verbose", action="store_true", help="print why each case failed")
    ap.add_argument("--json", help="write every case's outcome to this file")
    args = ap.parse_args()

    binary = pathlib.Path(args.binary)
    if not binary.is_file():
        sys.exit(f"error: {binary} not found: build it first (cargo build -p backplane-cli)")
    root = node_tests_dir(args.node_tests)
    if not root.is_dir():
        sys.exit(f"error: ONNX node tests not found at {root}")
    cases = sorted(
        p for p in root.iterdir() if (p / "model.onnx").is_file() and args.filter in p.name
    )
    first = args.backends.split(",")[0]
    expected_file = pathlib.Path(
        args.expected or REPO / "testdata" / "conformance" / f"{first}.txt"
    )
    expected = set()
    if expected_file.is_file():
        expected = {
            line.strip()
            for line in expected_file.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        }

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [
                pool.submit(run_case, c, binary, args.backends, scratch, args.timeout)
                for c in cases
            ]
            for n, f in enumerate(concurrent.futures.as_completed(futures), 1):
                name, outcome, why = f.result()
                results[name] = (outcome, why)
                if sys.stderr.isatty():
                    print(f"\r{n}/{len(cases)} cases", end="", file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            print(file=sys.stderr)

    counts = {"passed": 0, "failed": 0, "unsupported": 0}
    for outcome, _ in results.values():
        counts[outcome] += 1
    for name, (outcome, why) in sorted(results.items()):
        if outcome == "failed" or (args.verbose and outcome == "unsupported"):
            print(f"{outcome.upper()} {name}: {why}")
    regressed = sorted(n for n in expected if n in results and results[n][0] != "passed")
    newly = sorted(n for n, (o, _) in results.items() if o == "passed" and n not in expected)
    if newly:
        print(f"{len(newly)} cases pass through the CLI that {expected_file.name} does not list:")
        for n in newly:
            print(f"  {n}")
    for n in regressed:
        print(f"REGRESSION {n}: passes in the library test, not through the CLI: {results[n][1]}")
    if args.json:
        pathlib.Path(args.json).write_text(
            json.dumps({n: {"outcome": o, "why": w} for n, (o, w) in sorted(results.items())}, indent=1)
        )
    label = " then ".join(args.backends.split(","))
    print(
        f"cli conformance ({label}): {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['unsupported']} unsupported"
    )
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())

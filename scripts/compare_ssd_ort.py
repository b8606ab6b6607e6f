"""Run torchvision's ssdlite320_mobilenet_v3_large (random weights, exported by
scripts/bench/make_real_models.py) through `backplane run` and ONNX Runtime on one seeded
input, and compare the detections: boxes, scores and labels, rows matched order-insensitively
(random weights give ties, so the order of equal scores may differ). Not run in CI: the model
is not committed.

    /work/venv-bench/bin/python scripts/compare_ssd_ort.py [MODEL] [--backplane PATH]

Exit code 0 when every row of each side has a partner on the other (same label, score and
box within the tolerances), 1 otherwise.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?",
                        default="/work/bench-models/ssdlite320_mobilenet_v3_large.onnx")
    parser.add_argument("--backplane", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "target"), "release", "backplane"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--atol", type=float, default=1e-3)
    parser.add_argument("--rtol", type=float, default=1e-3)
    args = parser.parse_args()

    session = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    image = np.random.default_rng(args.seed).random((1, 3, 320, 320), dtype=np.float32)
    started = time.perf_counter()
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, {name: image})))
    print(f"onnxruntime: {time.perf_counter() - started:.2f} s")

    with tempfile.TemporaryDirectory(prefix="dyn_ssd_") as tmp:
        path = os.path.join(tmp, "input.npy")
        np.save(path, image)
        out_dir = os.path.join(tmp, "out")
        started = time.perf_counter()
        done = subprocess.run([args.backplane, "-v", "run", args.model, "--input",
                               f"{name}={path}", "--output-dir", out_dir],
                              capture_output=True, text=True)
        print(f"backplane run: {time.perf_counter() - started:.2f} s (import and plans "
              "included)")
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n")
            return 1
        for line in done.stdout.splitlines():
            if line.startswith(("data-dependent", "backends")):
                print(line)
        got = {k: np.load(os.path.join(out_dir, f"{k}.npy")) for k in want}

    for k in want:
        print(f"{k}: backplane {got[k].dtype}{list(got[k].shape)}, "
              f"onnxruntime {want[k].dtype}{list(want[k].shape)}")
    rows = lambda d: [(int(l), float(s), b.astype(np.float64))
                      for b, s, l in zip(d["boxes"], d["scores"], d["labels"])]
    mine, theirs = rows(got), rows(want)
    close = lambda a, b: np.all(np.abs(a - b) <= args.atol + args.rtol * np.abs(b))
    unmatched = list(range(len(mine)))
    missing = 0
    for label, score, box in theirs:
        hit = next((i for i in unmatched if mine[i][0] == label
                    and close(np.array(mine[i][1]), np.array(score))
                    and close(mine[i][2], box)), None)
        if hit is None:
            missing += 1
        else:
            unmatched.remove(hit)
    print(f"rows: {len(theirs)} from onnxruntime, {len(mine)} from backplane; "
          f"{len(theirs) - missing} matched, {missing} onnxruntime rows unmatched, "
          f"{len(unmatched)} backplane rows unmatched")
    return 0 if missing == 0 and not unmatched else 1


if __name__ == "__main__":
    sys.exit(main())

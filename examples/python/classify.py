"""Classify the shipped digit samples with backplane or with ONNX Runtime: the same code,
only the import and the provider names differ.

    python examples/python/classify.py                 # backplane
    python examples/python/classify.py onnxruntime     # ONNX Runtime, if installed
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np

DIGITS = Path(__file__).resolve().parents[2] / "models" / "digits"
PROVIDERS = {
    "backplane": ["CpuAcc", "CpuRef"],
    "onnxruntime": ["CPUExecutionProvider"],
}


def classify(runtime: str = "backplane") -> tuple[np.ndarray, list[int]]:
    """The probabilities of the samples (stacked in file-name order) and their labels."""
    rt = importlib.import_module(runtime)  # import backplane as rt / import onnxruntime as rt

    session = rt.InferenceSession(str(DIGITS / "model.onnx"), providers=PROVIDERS[runtime])
    input_name = session.get_inputs()[0].name
    output_name = session.get_outputs()[0].name

    labels = json.loads((DIGITS / "samples" / "labels.json").read_text())
    names = sorted(labels)
    batch = np.concatenate([np.load(DIGITS / "samples" / n) for n in names])
    (probabilities,) = session.run([output_name], {input_name: batch})
    return probabilities, [labels[n] for n in names]


def main() -> int:
    runtime = sys.argv[1] if len(sys.argv) > 1 else "backplane"
    probabilities, labels = classify(runtime)
    predictions = probabilities.argmax(axis=1)
    for row, (p, label) in enumerate(zip(predictions, labels)):
        print(f"row {row}: predicted {p} ({probabilities[row, p]:.3f}), label {label}")
    correct = int((predictions == np.array(labels)).sum())
    print(f"{runtime}: {correct}/{len(labels)} predictions match the labels")
    return 0 if correct == len(labels) else 1


if __name__ == "__main__":
    sys.exit(main())

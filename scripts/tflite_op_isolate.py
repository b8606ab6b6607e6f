#!/usr/bin/env python3
"""Runs each operator of a TFLite case alone, on LiteRT's own input tensors, through
`backplane run`, and prints the operators whose output differs from LiteRT's (largest
difference, elements off): tells an operator that disagrees from differences that only
grow through the layers. For the cases of gen_tflite_zoo.py / gen_tflite_models.py.

    /work/venv-zoo/bin/python scripts/tflite_op_isolate.py CASE_DIR \\
        [--backends CpuAcc,CpuRef] [--backplane target/release/backplane]

Each single-operator model is the case's flatbuffer with one operator, its non-constant
inputs as the subgraph's inputs and its output renamed (TFLite's fused tensor names can
exceed the file-name limit of `--output-dir`). Operators that read weights the model
computes (the outputs of DENSIFY or DEQUANTIZE) and those DENSIFY/DEQUANTIZE themselves
cannot run alone: they are listed as failing.
"""

import argparse
import subprocess
import tempfile

import flatbuffers
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from tensorflow.lite.python import schema_py_generated as schema


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--backends", default="CpuAcc,CpuRef")
    ap.add_argument("--backplane", default="target/release/backplane")
    args = ap.parse_args()
    buf = open(f"{args.case}/model.tflite", "rb").read()
    try:
        interp = Interpreter(model_content=buf, experimental_preserve_all_tensors=True)
        interp.allocate_tensors()
    except RuntimeError:  # XNNPACK refused the model: LiteRT's builtin kernels
        interp = Interpreter(
            model_content=buf, experimental_preserve_all_tensors=True,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
        interp.allocate_tensors()
    for k, d in enumerate(interp.get_input_details()):
        interp.set_tensor(d["index"], np.load(f"{args.case}/input_{k}.npy"))
    interp.invoke()
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(buf, 0))
    sg = model.subgraphs[0]
    td = tempfile.mkdtemp()
    details = interp._get_ops_details()
    for k, op in enumerate(list(sg.operators)):
        ins = [i for i in op.inputs
               if i >= 0 and model.buffers[sg.tensors[i].buffer].data is None]
        out = op.outputs[0]
        sg.operators, sg.inputs, sg.outputs = [op], ins, [out]
        saved = {i: sg.tensors[i].name for i in ins + [out]}
        cli = []
        for j, i in enumerate(ins):
            sg.tensors[i].name = f"in{j}".encode()
            np.save(f"{td}/in{j}.npy", interp.get_tensor(i))
            cli += ["--input", f"in{j}={td}/in{j}.npy"]
        sg.tensors[out].name = b"zout"
        b = flatbuffers.Builder(1024)
        b.Finish(model.Pack(b), file_identifier=b"TFL3")
        for i, n in saved.items():
            sg.tensors[i].name = n
        open(f"{td}/m.tflite", "wb").write(b.Output())
        r = subprocess.run(
            [args.backplane, "run", f"{td}/m.tflite", "--backends", args.backends,
             "--output-dir", f"{td}/o"] + cli,
            capture_output=True, text=True,
        )
        name = details[k]["op_name"]
        if r.returncode:
            print(k, name, "fails:", r.stderr.strip().splitlines()[-1:])
            continue
        got = np.load(f"{td}/o/zout.npy").astype(np.float64)
        want = interp.get_tensor(out).astype(np.float64)
        diff = np.abs(got - want)
        if diff.max() > 0:
            print(k, name, want.shape, "max", diff.max(), "off", int((diff > 0).sum()),
                  "of", want.size, flush=True)


if __name__ == "__main__":
    main()

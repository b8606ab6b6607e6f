#!/usr/bin/env python3
"""Export real architectures (torchvision, transformers) as ONNX files with random weights.

The architectures users run, for the CpuAcc-against-ONNX-Runtime comparison (compare.py
--suite real) and for the dynamic-shapes work: every model is built from its definition with
random weights (torch.manual_seed per model, so a rerun writes the same weights), batch 1,
opset 17. Nothing is downloaded: torchvision models are created with weights=None, and
transformers models from their configurations (BertConfig(), ...), never from the hub.

Needs torch, torchvision, transformers, onnx (and onnxscript for torch's newer exporter) in
their own virtual environment: torch is large, so this is never run in CI. See
scripts/bench/README.md.

Each file is written to a temporary name beside its target and renamed, so that a reader
(another engineer's benchmark) never sees half a model. Each model records in its metadata
how compare.py should feed it: `bench.inputs` (NAME=KIND[:ARG], comma-separated; KIND is
`tokens:VOCAB` for token ids, `ones`, `zeros` or `uniform`) and `bench.dims` (values of
symbolic dimensions, e.g. `seq=128`).

Usage: make_real_models.py [OUT_DIR] [--only NAME,...] [--force]
       (default OUT_DIR: /work/bench-models; existing files are kept unless --force)
"""
import argparse
import os
import sys
import tempfile
import time
import traceback

OPSET = 17
IMAGE = (1, 3, 224, 224)


def vision(name, build, shape=IMAGE, note=""):
    """A torchvision classifier (or segmenter) with random weights and one image input."""

    def make():
        import torch

        model = build()
        return model, (torch.rand(*shape),), ["input"], None, {"input": "uniform"}, {}, note

    return name, make


def tv(fn_name, **kwargs):
    def build():
        import torchvision

        return getattr(torchvision.models, fn_name)(weights=None, **kwargs)

    return build


def deeplab():
    import torchvision

    return torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, aux_loss=False, num_classes=21)


class OutOnly:
    """Wraps a module whose forward returns a dict or tuple so that the export sees tensors."""

    def __new__(cls, module, key):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, *args):
                out = self.inner(*args)
                return out[key]

        return Wrapped()


def seg_model():
    import torch

    model = OutOnly(deeplab(), "out")
    return (model, (torch.rand(*IMAGE),), ["input"], None, {"input": "uniform"}, {},
            "DeepLabV3-ResNet50: atrous ResNet (dilation 2, 4) and ASPP (rates 12, 24, 36)")


def ssdlite():
    import torch
    import torchvision

    det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=91)

    class Boxes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.det = det

        def forward(self, image):
            out = self.det([image[0]])[0]
            return out["boxes"], out["scores"], out["labels"]

    return (Boxes(), (torch.rand(1, 3, 320, 320),), ["input"], None, {"input": "uniform"}, {},
            "SSDlite320-MobileNetV3: data-dependent output sizes (NMS); for the dynamic-shapes work")


def bert(seq=128, dynamic=False):
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig()  # BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072
    model = BertModel(cfg, add_pooling_layer=False)
    ids = torch.randint(0, cfg.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    axes = {"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}, "output": {1: "seq"}} if dynamic else None
    return (Encoder(), (ids, mask), ["input_ids", "attention_mask"], axes,
            {"input_ids": f"tokens:{cfg.vocab_size}", "attention_mask": "ones"},
            {"seq": seq} if dynamic else {},
            "BERT-base encoder" + (" with a symbolic sequence axis 'seq'" if dynamic else f", sequence {seq}"))


def distilbert(seq=128):
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig()
    model = DistilBertModel(cfg)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.randint(0, cfg.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    return (Encoder(), (ids, mask), ["input_ids", "attention_mask"], None,
            {"input_ids": f"tokens:{cfg.vocab_size}", "attention_mask": "ones"}, {},
            f"DistilBERT encoder, sequence {seq}")


def gpt2(seq=64):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(use_cache=False)
    model = GPT2LMHeadModel(cfg)

    class Lm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            # With a mask, transformers does not look for packed sequences (torch.diff,
            # which no exporter knows).
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    ids = torch.randint(0, cfg.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    return (Lm(), (ids, mask), ["input_ids", "attention_mask"], None,
            {"input_ids": f"tokens:{cfg.vocab_size}", "attention_mask": "ones"}, {},
            f"GPT-2 (124M) with its lm_head, sequence {seq}")


MODELS = dict([
    vision("resnet50", tv("resnet50")),
    vision("efficientnet_b0", tv("efficientnet_b0")),
    vision("vit_b_16", tv("vit_b_16")),
    vision("squeezenet1_1", tv("squeezenet1_1")),
    vision("shufflenet_v2_x1_0", tv("shufflenet_v2_x1_0")),
    vision("densenet121", tv("densenet121")),
    vision("regnet_y_400mf", tv("regnet_y_400mf")),
    vision("mobilenet_v3_large", tv("mobilenet_v3_large")),
    ("deeplabv3_resnet50", seg_model),
    ("ssdlite320_mobilenet_v3_large", ssdlite),
    ("bert_base", lambda: bert(128)),
    ("distilbert", lambda: distilbert(128)),
    ("gpt2", lambda: gpt2(64)),
    ("bert_base_dynamic", lambda: bert(128, dynamic=True)),
])

# The models compare.py benchmarks by default (the dynamic and detection ones are for other work).
BENCH = ["resnet50", "efficientnet_b0", "vit_b_16", "squeezenet1_1", "shufflenet_v2_x1_0", "densenet121",
         "regnet_y_400mf", "mobilenet_v3_large", "deeplabv3_resnet50", "bert_base", "distilbert", "gpt2"]


def export(name, make, out_dir, seed):
    import onnx
    import torch

    # nn.MultiheadAttention's inference fast path (ViT) is one fused op no exporter knows.
    if hasattr(torch.backends, "mha"):
        torch.backends.mha.set_fastpath_enabled(False)
    torch.manual_seed(seed)
    model, args, input_names, axes, feeds, dims, note = make()
    model.eval()
    final = os.path.join(out_dir, f"{name}.onnx")
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".onnx.tmp", dir=out_dir)
    os.close(fd)
    try:
        with torch.no_grad():
            outputs = ["boxes", "scores", "labels"] if name.startswith("ssdlite") else ["output"]
            kwargs = dict(input_names=input_names, output_names=outputs, opset_version=OPSET,
                          dynamic_axes=axes, do_constant_folding=True)
            try:
                torch.onnx.export(model, args, tmp, dynamo=False, **kwargs)
            except TypeError:  # a torch without the dynamo switch
                torch.onnx.export(model, args, tmp, **kwargs)
        m = onnx.load(tmp)
        meta = {"bench.inputs": ",".join(f"{k}={v}" for k, v in feeds.items()),
                "bench.dims": ",".join(f"{k}={v}" for k, v in dims.items()),
                "bench.note": note,
                "bench.source": f"scripts/bench/make_real_models.py, torch {torch.__version__}, seed {seed}"}
        del m.metadata_props[:]
        for k, v in meta.items():
            m.metadata_props.add(key=k, value=v)
        onnx.checker.check_model(m)
        onnx.save(m, tmp)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return final


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="/work/bench-models")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}")
    failed = []
    for i, name in enumerate(names):
        path = os.path.join(args.out, f"{name}.onnx")
        if os.path.exists(path) and not args.force:
            print(f"[{i + 1}/{len(names)}] {name}: exists, kept ({path})", flush=True)
            continue
        t = time.time()
        print(f"[{i + 1}/{len(names)}] {name}: exporting...", flush=True)
        try:
            path = export(name, MODELS[name], args.out, seed=1000 + list(MODELS).index(name))
            print(f"[{i + 1}/{len(names)}] {name}: wrote {path} ({os.path.getsize(path) / 2**20:.0f} MiB, "
                  f"{time.time() - t:.0f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure, export the rest
            traceback.print_exc()
            print(f"[{i + 1}/{len(names)}] {name}: FAILED: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                  flush=True)
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()

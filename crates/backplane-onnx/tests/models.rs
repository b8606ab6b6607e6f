//! The project's real models, when they are present in the tree.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_onnx::{import_file, inspect_file, Dim, ImportOptions};
use common::*;
use std::path::PathBuf;
use std::sync::Arc;

fn repo_file(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipping: {rel} is not there");
        None
    }
}

fn assert_no_shape_ops(net: &backplane_core::Network) {
    for l in net.layers() {
        assert!(
            !matches!(l.op.name(), "Shape" | "Gather" | "Unsqueeze" | "Concat"),
            "layer {} ({}) should have been folded",
            l.name,
            l.op.name()
        );
    }
    net.validate().unwrap();
}

#[test]
fn digits_model() {
    let Some(path) = repo_file("models/digits/model.onnx") else {
        return;
    };
    let inputs = inspect_file(&path).unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].dims[0], Dim::Symbolic("batch".into()));

    let err = import_file(&path, &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("batch"), "{err}");

    let options = ImportOptions::default()
        .with_dim("batch", 1)
        .with_evaluator(Arc::new(TinyEvaluator));
    let net = import_file(&path, &options).unwrap();
    assert_eq!(
        ops(&net),
        vec![
            "Conv",
            "BatchNormalization",
            "Relu",
            "MaxPool",
            "Conv",
            "Relu",
            "AveragePool",
            "Reshape",
            "Gemm",
            "Softmax"
        ]
    );
    assert_no_shape_ops(&net);
    let out = net.outputs()[0];
    assert_eq!(net.tensor(out).info.shape.dims(), &[1, 10]);
}

#[test]
fn e2e_convnet() {
    let Some(path) = repo_file("testdata/e2e/convnet.onnx") else {
        return;
    };
    let options = ImportOptions::default().with_evaluator(Arc::new(TinyEvaluator));
    let net = import_file(&path, &options).unwrap();
    assert_eq!(net.layers().len(), 17, "{:?}", ops(&net));
    assert_no_shape_ops(&net);
    let names: Vec<&str> = net
        .outputs()
        .iter()
        .map(|&t| net.tensor(t).name.as_str())
        .collect();
    assert_eq!(names, vec!["logits", "probs"]);
    for &o in net.outputs() {
        assert_eq!(net.tensor(o).info.shape.dims(), &[1, 10]);
    }
}

//! Constant folding with the CpuRef backend's evaluator.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::Op;
use backplane_cpu_ref::CpuRefEvaluator;
use backplane_onnx::{import_file, ImportOptions};
use common::*;
use std::path::PathBuf;
use std::sync::Arc;

fn options() -> ImportOptions {
    ImportOptions::default().with_evaluator(Arc::new(CpuRefEvaluator))
}

#[test]
fn shape_arithmetic_folds() {
    // y = reshape(x, [shape(x)[0] * shape(x)[1], -1]) computed with Slice, Mul and Concat.
    let net = Model::new(13)
        .input(input("x", &[2, 3, 4]))
        .init(ints("s0", &[0]))
        .init(ints("s1", &[1]))
        .init(ints("s2", &[2]))
        .init(ints("m1", &[-1]))
        .node(node("Shape", &["x"], &["sh"], vec![]))
        .node(node("Slice", &["sh", "s0", "s1"], &["d0"], vec![]))
        .node(node("Slice", &["sh", "s1", "s2"], &["d1"], vec![]))
        .node(node("Mul", &["d0", "d1"], &["rows"], vec![]))
        .node(node(
            "Concat",
            &["rows", "m1"],
            &["target"],
            vec![a_int("axis", 0)],
        ))
        .node(node(
            "Cast",
            &["target"],
            &["t32"],
            vec![a_int("to", INT32 as i64)],
        ))
        .node(named(
            node("Reshape", &["x", "t32"], &["y"], vec![]),
            "reshape",
        ))
        .output("y")
        .import_with(&options())
        .unwrap();
    assert_eq!(only_op(&net), &Op::Reshape { shape: vec![6, 4] });
}

#[test]
fn constant_weights_preprocessing_folds() {
    // A transposed weight computed at load time folds into one constant.
    let net = Model::new(13)
        .input(input("x", &[1, 2]))
        .init(tensor_f32("w", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .node(node("Transpose", &["w"], &["wt"], vec![]))
        .node(node("MatMul", &["x", "wt"], &["y"], vec![]))
        .output("y")
        .import_with(&options())
        .unwrap();
    assert_eq!(ops(&net), vec!["MatMul"]);
    let wt = net.find_tensor("wt").unwrap();
    assert_eq!(
        net.tensor(wt)
            .constant()
            .unwrap()
            .as_slice::<f32>()
            .unwrap(),
        &[1.0, 3.0, 5.0, 2.0, 4.0, 6.0]
    );
}

fn repo_file(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    p.exists().then_some(p)
}

#[test]
fn real_models_fold_with_cpu_ref() {
    if let Some(p) = repo_file("models/digits/model.onnx") {
        let net = import_file(&p, &options().with_dim("batch", 1)).unwrap();
        assert_eq!(net.layers().len(), 10, "{:?}", ops(&net));
        assert!(!ops(&net).iter().any(|o| o == "Shape" || o == "Gather"));
        net.validate().unwrap();
    }
    if let Some(p) = repo_file("testdata/e2e/convnet.onnx") {
        let net = import_file(&p, &options()).unwrap();
        assert_eq!(net.layers().len(), 17, "{:?}", ops(&net));
        assert!(!ops(&net).iter().any(|o| o == "Shape" || o == "Gather"));
        net.validate().unwrap();
    }
}

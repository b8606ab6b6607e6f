//! Versions: IR versions and opsets newer than the importer knows are refused, never
//! misread.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_onnx::{import_model, ImportOptions, OnnxError};
use common::*;

fn relu_model(opset: i64) -> Model {
    Model::new(opset)
        .input(input("x", &[2]))
        .node(named(node("Relu", &["x"], &["y"], vec![]), "relu"))
        .output("y")
}

#[test]
fn an_ir_version_newer_than_known_is_refused() {
    let mut proto = relu_model(13).proto();
    proto.ir_version = Some(99);
    let err = import_model(proto, None, &ImportOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            OnnxError::UnsupportedIrVersion {
                version: 99,
                newest: 10
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("IR version 99"), "{err}");
    // The newest known one imports.
    let mut proto = relu_model(13).proto();
    proto.ir_version = Some(10);
    import_model(proto, None, &ImportOptions::default()).unwrap();
}

#[test]
fn an_opset_newer_than_known_refuses_every_operator_by_name() {
    let err = Model::new(99)
        .input(input("x", &[1, 1, 4, 4]))
        .node(named(node("Relu", &["x"], &["r"], vec![]), "relu"))
        .node(named(
            node("SpaceToDepth", &["r"], &["s"], vec![a_int("blocksize", 2)]),
            "s2d",
        ))
        .node(named(node("Neg", &["s"], &["y"], vec![]), "neg"))
        .output("y")
        .import()
        .unwrap_err();
    let ops = err.unsupported_ops();
    let nodes: Vec<&str> = ops.iter().map(|o| o.node.as_str()).collect();
    assert_eq!(nodes, ["relu", "s2d", "neg"], "{err}");
    assert!(matches!(err, OnnxError::UnsupportedOps(_)), "{err}");
    let s2d = &ops[1].reason;
    assert!(
        s2d.contains("SpaceToDepth: the model imports opset 99 of ai.onnx")
            && s2d.contains("SpaceToDepth up to version 13")
            && s2d.contains("up to opset 22"),
        "{s2d}"
    );
    assert!(ops[0].reason.contains("Relu up to version 14"), "{err}");
}

#[test]
fn an_operator_unchanged_for_long_is_refused_one_opset_past_the_newest() {
    // Relu has not changed since 14, but at opset 23 it might have.
    let err = relu_model(23).import().unwrap_err();
    let ops = err.unsupported_ops();
    assert_eq!(ops.len(), 1, "{err}");
    assert!(ops[0].reason.contains("Relu"), "{err}");
    assert!(ops[0].reason.contains("opset 23"), "{err}");
    // The newest known opset imports.
    assert_eq!(common::ops(&relu_model(22).ok()), ["Relu"]);
}

#[test]
fn an_ml_opset_newer_than_known_is_refused() {
    let m = |version: i64| {
        let mut binarizer = named(node("Binarizer", &["x"], &["y"], vec![]), "bin");
        binarizer.domain = Some("ai.onnx.ml".into());
        let mut m = Model::new(13)
            .input(input("x", &[2]))
            .node(binarizer)
            .output("y");
        m.extra_opsets.push(("ai.onnx.ml".into(), version));
        m
    };
    let err = m(6).import().unwrap_err();
    let ops = err.unsupported_ops();
    assert_eq!(ops.len(), 1, "{err}");
    assert!(
        ops[0]
            .reason
            .contains("Binarizer: the model imports opset 6 of ai.onnx.ml"),
        "{err}"
    );
    m(5).ok();
}

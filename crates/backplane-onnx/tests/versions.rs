//! Versions: IR versions and opsets newer than the importer knows are refused, never
//! misread; SpaceToDepth's `mode`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::Tensor;
use backplane_cpu_ref::CpuRefEvaluator;
use backplane_onnx::{import_model, ImportOptions, OnnxError};
use common::*;
use std::sync::Arc;

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

/// `[1, 2, 2, 4]` holding 0..16.
fn ramp() -> Tensor {
    Tensor::from_vec(vec![1, 2, 2, 4], (0..16).map(|v| v as f32).collect()).unwrap()
}

/// Run `nodes` (reading `x`, writing `y`) on `x`, folded by CpuRef's evaluator.
fn run(nodes: Vec<backplane_onnx::proto::NodeProto>, x: Tensor) -> Vec<f32> {
    let dims: Vec<i64> = x.shape().dims().iter().map(|&d| d as i64).collect();
    let mut m = Model::new(13).input(input("x", &dims)).output("y");
    for n in nodes {
        m = m.node(n);
    }
    let options = ImportOptions::default()
        .with_evaluator(Arc::new(CpuRefEvaluator))
        .with_input_value("x", Arc::new(x));
    let net = m.import_with(&options).unwrap();
    let y = net.tensor(net.outputs()[0]).constant().unwrap();
    y.as_slice::<f32>().unwrap().to_vec()
}

fn space_to_depth(from: &str, to: &str, mode: Option<&str>) -> backplane_onnx::proto::NodeProto {
    let mut attrs = vec![a_int("blocksize", 2)];
    attrs.extend(mode.map(|m| a_str("mode", m)));
    node("SpaceToDepth", &[from], &[to], attrs)
}

fn depth_to_space(from: &str, to: &str, mode: &str) -> backplane_onnx::proto::NodeProto {
    node(
        "DepthToSpace",
        &[from],
        &[to],
        vec![a_int("blocksize", 2), a_str("mode", mode)],
    )
}

#[test]
fn space_to_depth_modes_by_hand() {
    // x[c, h, w] = 8c + 4h + w, blocks of 2x2: output [1, 8, 1, 2].
    // CRD: channel 4c + 2i + j holds x[c, i, 2k + j] at column k.
    let crd = [
        0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0, 8.0, 10.0, 9.0, 11.0, 12.0, 14.0, 13.0, 15.0,
    ];
    // DCR (the default): channel (2i + j) * 2 + c.
    let dcr = [
        0.0, 2.0, 8.0, 10.0, 1.0, 3.0, 9.0, 11.0, 4.0, 6.0, 12.0, 14.0, 5.0, 7.0, 13.0, 15.0,
    ];
    assert_eq!(
        run(vec![space_to_depth("x", "y", Some("CRD"))], ramp()),
        crd
    );
    assert_eq!(
        run(vec![space_to_depth("x", "y", Some("DCR"))], ramp()),
        dcr
    );
    assert_eq!(run(vec![space_to_depth("x", "y", None)], ramp()), dcr);
}

#[test]
fn space_to_depth_inverts_depth_to_space_in_each_mode() {
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    for mode in ["CRD", "DCR"] {
        let y = run(
            vec![
                space_to_depth("x", "s", Some(mode)),
                depth_to_space("s", "y", mode),
            ],
            ramp(),
        );
        assert_eq!(y, x, "{mode}");
    }
    // Mixed modes do not round-trip: the mode matters.
    let y = run(
        vec![
            space_to_depth("x", "s", Some("CRD")),
            depth_to_space("s", "y", "DCR"),
        ],
        ramp(),
    );
    assert_ne!(y, x);
}

#[test]
fn space_to_depth_refuses_an_unknown_mode() {
    let err = Model::new(13)
        .input(input("x", &[1, 2, 2, 4]))
        .node(named(space_to_depth("x", "y", Some("RCD")), "s2d"))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("s2d") && msg.contains("RCD"), "{msg}");
}

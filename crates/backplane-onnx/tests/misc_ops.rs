//! Translation of MaxPool's indices, MaxUnpool, QLinearConv, TfIdfVectorizer, BatchNormalization
//! in training mode, the training-domain optimizers, the ai.onnx.ml operators, and old opsets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::ops::*;
use backplane_core::Op;
use backplane_cpu_ref::CpuRefEvaluator;
use backplane_onnx::proto::TensorProto;
use backplane_onnx::{ImportOptions, OnnxError};
use common::*;
use std::sync::Arc;

const ML: &str = "ai.onnx.ml";
const TRAINING: &str = "ai.onnx.preview.training";

fn folding() -> ImportOptions {
    ImportOptions::default().with_evaluator(Arc::new(CpuRefEvaluator))
}

/// The values of a tensor the import folded into a constant.
fn folded(net: &backplane_core::Network, name: &str) -> Vec<f64> {
    let id = net.find_tensor(name).unwrap();
    net.tensor(id)
        .constant()
        .unwrap_or_else(|| panic!("'{name}' was not folded"))
        .to_f64_vec()
}

fn in_domain(
    mut n: backplane_onnx::proto::NodeProto,
    domain: &str,
) -> backplane_onnx::proto::NodeProto {
    n.domain = Some(domain.into());
    n
}

fn with_domain(mut m: Model, domain: &str, version: i64) -> Model {
    m.extra_opsets.push((domain.into(), version));
    m
}

fn tensor_of(name: &str, code: i32, dims: &[i64], f: impl FnOnce(&mut TensorProto)) -> TensorProto {
    let mut t = TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(code),
        ..Default::default()
    };
    f(&mut t);
    t
}

const UINT8: i32 = 2;
const DOUBLE: i32 = 11;

#[test]
fn not_imports_from_opset_1_but_other_old_operators_do_not() {
    let net = Model::new(1)
        .input(value_info("x", 9, Some(&[D::V(2)])))
        .node(node("Not", &["x"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(ops(&net), ["Not"]);
    // Relu at opset 6 is still refused with the opset message.
    let err = Model::new(6)
        .input(input("x", &[2]))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    let unsupported = err.unsupported_ops();
    assert_eq!(unsupported.len(), 1, "{err}");
    assert!(unsupported[0].reason.contains("opset 6"), "{err}");
    assert!(unsupported[0].reason.contains("opset 7 and later"), "{err}");
}

#[test]
fn max_pool_with_indices_and_storage_order() {
    let net = Model::new(12)
        .input(input("x", &[1, 2, 4, 4]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y", "i"],
            vec![
                a_ints("kernel_shape", &[2, 2]),
                a_ints("strides", &[2, 2]),
                a_int("storage_order", 1),
            ],
        ))
        .output("y")
        .output("i")
        .ok();
    match only_op(&net) {
        Op::MaxPoolWithIndices(d) => {
            assert!(d.column_major);
            assert_eq!(d.pool.window.kernel, [2, 2]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(dims(&net, "i"), [1, 2, 2, 2]);
    // Without the second output, plain pooling.
    let net = Model::new(12)
        .input(input("x", &[1, 2, 4, 4]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![a_ints("kernel_shape", &[2, 2])],
        ))
        .output("y")
        .ok();
    assert!(matches!(only_op(&net), Op::Pool(_)));
    // storage_order 2 is invalid.
    let err = Model::new(12)
        .input(input("x", &[1, 2, 4, 4]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y", "i"],
            vec![a_ints("kernel_shape", &[2, 2]), a_int("storage_order", 2)],
        ))
        .output("i")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("storage_order"), "{err}");
}

#[test]
fn max_unpool_output_shape_default_and_given() {
    let model = || {
        Model::new(11)
            .input(input("x", &[1, 1, 2, 2]))
            .input(value_info(
                "i",
                INT64,
                Some(&[D::V(1), D::V(1), D::V(2), D::V(2)]),
            ))
    };
    let net = model()
        .node(node(
            "MaxUnpool",
            &["x", "i"],
            &["y"],
            vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2])],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::MaxUnpool(MaxUnpoolDesc {
            unpooled: vec![1, 1, 4, 4],
            output: vec![1, 1, 4, 4]
        })
    );
    let net = model()
        .init(ints("shape", &[1, 1, 5, 5]))
        .node(node(
            "MaxUnpool",
            &["x", "i", "shape"],
            &["y"],
            vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2])],
        ))
        .output("y")
        .ok();
    assert_eq!(dims(&net, "y"), [1, 1, 5, 5]);
    // An output_shape far beyond the size limit is refused at import.
    let err = model()
        .init(ints("shape", &[1, 1, 1 << 30, 1 << 30]))
        .node(node(
            "MaxUnpool",
            &["x", "i", "shape"],
            &["y"],
            vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2])],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::TensorTooLarge { .. }), "{err}");
}

#[test]
fn max_unpool_folds_and_checks_indices() {
    let model = |indices: &[i64]| {
        Model::new(11)
            .init(tensor_f32("x", &[1, 1, 1, 2], &[3.0, 4.0]))
            .init(tensor_i64("i", &[1, 1, 1, 2], indices))
            .node(node(
                "MaxUnpool",
                &["x", "i"],
                &["y"],
                vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2])],
            ))
            .output("y")
    };
    let net = model(&[1, 6]).import_with(&folding()).unwrap();
    assert_eq!(folded(&net, "y"), [0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0]);
    // Index 8 is outside the [1, 1, 2, 4] output: the evaluator refuses (no panic), so the
    // layer stays, to fail at execution.
    let net = model(&[1, 8]).import_with(&folding()).unwrap();
    assert!(net
        .tensor(net.find_tensor("y").unwrap())
        .constant()
        .is_none());
}

#[test]
fn training_optimizers_import_with_their_groups() {
    let scalars = |m: Model| {
        m.input(value_info("r", FLOAT, Some(&[])))
            .input(value_info("t", INT64, Some(&[])))
    };
    let net = with_domain(scalars(Model::new(17)), TRAINING, 1)
        .input(input("x1", &[2]))
        .input(input("x2", &[3]))
        .input(input("g1", &[2]))
        .input(input("g2", &[3]))
        .input(input("v1", &[2]))
        .input(input("v2", &[3]))
        .node(in_domain(
            node(
                "Momentum",
                &["r", "t", "x1", "x2", "g1", "g2", "v1", "v2"],
                &["x1n", "x2n", "v1n", "v2n"],
                vec![
                    a_float("alpha", 0.9),
                    a_float("beta", 0.1),
                    a_float("norm_coefficient", 0.0),
                    a_str("mode", "nesterov"),
                ],
            ),
            TRAINING,
        ))
        .output("x2n")
        .output("v1n")
        .ok();
    match only_op(&net) {
        Op::Optimizer(d) => {
            assert_eq!(d.tensors, 2);
            assert!(matches!(
                d.kind,
                OptimizerKind::Momentum { nesterov: true, .. }
            ));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(dims(&net, "x2n"), [3]);
    // Adam with a missing H input is invalid; an optimizer without the domain is unknown.
    let err = with_domain(scalars(Model::new(17)), TRAINING, 1)
        .input(input("x", &[2]))
        .node(in_domain(
            node("Adam", &["r", "t", "x", "x", "x"], &["a", "b", "c"], vec![]),
            TRAINING,
        ))
        .output("a")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("inputs"), "{err}");
    let err = with_domain(scalars(Model::new(17)), TRAINING, 1)
        .input(input("x", &[2]))
        .node(in_domain(
            node("Gradient", &["x"], &["g"], vec![]),
            TRAINING,
        ))
        .output("g")
        .import()
        .unwrap_err();
    assert!(
        err.unsupported_ops()[0]
            .reason
            .contains("Gradient of the domain"),
        "{err}"
    );
}

#[test]
fn adagrad_folds_to_the_specified_values() {
    // r = 0.1 / (1 + 2 * 0.5) = 0.05; g = 1; h = 1 + 1 = 2; x = 1 - 0.05 / sqrt(2).
    let net = with_domain(Model::new(17), TRAINING, 1)
        .init(tensor_f32("r", &[], &[0.1]))
        .init(tensor_i64("t", &[], &[2]))
        .init(floats("x", &[1.0]))
        .init(floats("g", &[1.0]))
        .init(floats("h", &[1.0]))
        .node(in_domain(
            node(
                "Adagrad",
                &["r", "t", "x", "g", "h"],
                &["xn", "hn"],
                vec![a_float("decay_factor", 0.5), a_float("epsilon", 0.0)],
            ),
            TRAINING,
        ))
        .output("xn")
        .output("hn")
        .import_with(&folding())
        .unwrap();
    let x = folded(&net, "xn")[0];
    assert!((x - (1.0 - 0.05 / 2f64.sqrt())).abs() < 1e-6, "{x}");
    assert_eq!(folded(&net, "hn"), [2.0]);
}

#[test]
fn batch_norm_training_mode_updates_the_running_statistics() {
    // One channel, values 1 and 3: mean 2, variance 1; Y = ±1 / sqrt(1 + eps) ≈ ±1.
    let net = Model::new(15)
        .init(tensor_f32("x", &[2, 1], &[1.0, 3.0]))
        .init(floats("s", &[2.0]))
        .init(floats("b", &[0.5]))
        .init(floats("m", &[10.0]))
        .init(floats("v", &[5.0]))
        .node(node(
            "BatchNormalization",
            &["x", "s", "b", "m", "v"],
            &["y", "rm", "rv"],
            vec![
                a_int("training_mode", 1),
                a_float("momentum", 0.75),
                a_float("epsilon", 0.0),
            ],
        ))
        .output("y")
        .output("rm")
        .output("rv")
        .import_with(&folding())
        .unwrap();
    assert_eq!(folded(&net, "y"), [-1.5, 2.5]);
    // 10 * 0.75 + 2 * 0.25 = 8; 5 * 0.75 + 1 * 0.25 = 4.
    assert_eq!(folded(&net, "rm"), [8.0]);
    assert_eq!(folded(&net, "rv"), [4.0]);
}

#[test]
fn binarizer_and_array_feature_extractor() {
    let net = with_domain(Model::new(17), ML, 1)
        .init(tensor_f32("x", &[2, 3], &[0.5, 1.0, 1.5, -2.0, 7.0, 1.0]))
        .init(ints("idx", &[2, 0]))
        .node(in_domain(
            node("Binarizer", &["x"], &["b"], vec![a_float("threshold", 1.0)]),
            ML,
        ))
        .node(in_domain(
            node("ArrayFeatureExtractor", &["x", "idx"], &["z"], vec![]),
            ML,
        ))
        .output("b")
        .output("z")
        .import_with(&folding())
        .unwrap();
    assert_eq!(folded(&net, "b"), [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    assert_eq!(dims(&net, "z"), [2, 2]);
    assert_eq!(folded(&net, "z"), [1.5, 0.5, 1.0, -2.0]);
    // A 1-D X gives one row; an index past the last feature is refused by the evaluator
    // (the Gather stays, to fail at execution) instead of reading out of bounds.
    let model = |idx: &[i64]| {
        with_domain(Model::new(17), ML, 1)
            .init(tensor_f32("x", &[3], &[0.5, 1.0, 1.5]))
            .init(ints("idx", idx))
            .node(in_domain(
                node("ArrayFeatureExtractor", &["x", "idx"], &["z"], vec![]),
                ML,
            ))
            .output("z")
            .import_with(&folding())
            .unwrap()
    };
    let net = model(&[1]);
    assert_eq!(dims(&net, "z"), [1, 1]);
    assert_eq!(folded(&net, "z"), [1.0]);
    let net = model(&[3]);
    assert!(net
        .tensor(net.find_tensor("z").unwrap())
        .constant()
        .is_none());
    // Other operators of the domain are reported.
    let err = with_domain(Model::new(17), ML, 1)
        .input(input("x", &[2]))
        .node(in_domain(node("Normalizer", &["x"], &["y"], vec![]), ML))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        err.unsupported_ops()[0].reason.contains("Normalizer"),
        "{err}"
    );
}

#[test]
fn tfidf_vectorizer_imports_and_counts() {
    let attrs = |mode: &str| {
        vec![
            a_str("mode", mode),
            a_int("min_gram_length", 1),
            a_int("max_gram_length", 2),
            a_int("max_skip_count", 0),
            a_ints("pool_int64s", &[4, 5, 4, 5]),
            a_ints("ngram_counts", &[0, 2]),
            a_ints("ngram_indexes", &[0, 1, 2]),
            a_floats("weights", &[1.0, 2.0, 3.0]),
        ]
    };
    let net = Model::new(9)
        .init(tensor_i64("x", &[2, 3], &[4, 5, 5, 1, 4, 4]))
        .node(node("TfIdfVectorizer", &["x"], &["y"], attrs("TFIDF")))
        .output("y")
        .import_with(&folding())
        .unwrap();
    // Row 0: 4 once, 5 twice, (4,5) once; row 1: 4 twice.
    assert_eq!(folded(&net, "y"), [1.0, 4.0, 3.0, 2.0, 0.0, 0.0]);
    let mut strings = attrs("TF");
    strings.push(a_strs("pool_strings", &["a"]));
    let err = Model::new(9)
        .input(value_info("x", INT64, Some(&[D::V(3)])))
        .node(node("TfIdfVectorizer", &["x"], &["y"], strings))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        err.unsupported_ops()[0].reason.contains("pool_strings"),
        "{err}"
    );
}

#[test]
fn qlinear_conv_folds_with_per_channel_weights() {
    // x = [10, 20] with zero point 10, scale 0.5 → centered [0, 10]; a 1x1 kernel with two
    // output channels: w = [3, 1] less zero points [1, 0], scales [0.25, 1]; bias [4, 0].
    // Channel 0: (0 * 2 + 4, 10 * 2 + 4) = (4, 24) * 0.5 * 0.25 / 0.5 = (1, 6), + 100.
    // Channel 1: (0, 10) * 0.5 * 1 / 0.5 = (0, 10), + 100.
    let u8s = |name: &str, dims: &[i64], v: &[i32]| {
        tensor_of(name, UINT8, dims, |t| t.int32_data = v.to_vec())
    };
    let net = Model::new(10)
        .init(u8s("x", &[1, 1, 1, 2], &[10, 20]))
        .init(tensor_f32("xs", &[], &[0.5]))
        .init(u8s("xz", &[], &[10]))
        .init(u8s("w", &[2, 1, 1, 1], &[3, 1]))
        .init(floats("ws", &[0.25, 1.0]))
        .init(u8s("wz", &[2], &[1, 0]))
        .init(tensor_f32("ys", &[], &[0.5]))
        .init(u8s("yz", &[], &[100]))
        .init(tensor_of("b", INT32, &[2], |t| t.int32_data = vec![4, 0]))
        .node(node(
            "QLinearConv",
            &["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
            &["y"],
            vec![],
        ))
        .output("y")
        .import_with(&folding())
        .unwrap();
    assert_eq!(folded(&net, "y"), [101.0, 106.0, 100.0, 110.0]);
}

#[test]
fn tree_ensemble_reads_tensor_attributes() {
    // x0 <= 1.5 → leaf 0 (target 0, 2.0); else x1 in {3, 4} → leaf 1 (target 1, 5.0), else
    // leaf 2 (target 0, -1.0).
    let doubles = |name: &str, v: &[f64]| {
        tensor_of(name, DOUBLE, &[v.len() as i64], |t| {
            t.double_data = v.to_vec()
        })
    };
    let attrs = |leaf_ids: &[i64]| {
        vec![
            a_ints("nodes_featureids", &[0, 1]),
            a_tensor("nodes_splits", doubles("nodes_splits", &[1.5, 0.0])),
            a_tensor(
                "nodes_modes",
                tensor_of("nodes_modes", UINT8, &[2], |t| t.int32_data = vec![0, 6]),
            ),
            a_ints("nodes_truenodeids", &[0, 1]),
            a_ints("nodes_trueleafs", &[1, 1]),
            a_ints("nodes_falsenodeids", &[1, leaf_ids[0]]),
            a_ints("nodes_falseleafs", &[0, 1]),
            a_tensor(
                "membership_values",
                doubles("membership_values", &[3.0, 4.0, f64::NAN]),
            ),
            a_ints("leaf_targetids", &[0, 1, 0]),
            a_tensor("leaf_weights", doubles("leaf_weights", &[2.0, 5.0, -1.0])),
            a_ints("tree_roots", &[0]),
            a_int("n_targets", 2),
        ]
    };
    let model = |leaf_ids: &[i64]| {
        with_domain(Model::new(21), ML, 5)
            .init(tensor_of("x", DOUBLE, &[3, 2], |t| {
                t.double_data = vec![1.0, 0.0, 2.0, 4.0, 2.0, 5.0]
            }))
            .node(in_domain(
                node("TreeEnsemble", &["x"], &["y"], attrs(leaf_ids)),
                ML,
            ))
            .output("y")
    };
    let net = model(&[2]).import_with(&folding()).unwrap();
    assert_eq!(dims(&net, "y"), [3, 2]);
    assert_eq!(folded(&net, "y"), [2.0, 0.0, 0.0, 5.0, -1.0, 0.0]);
    // A false branch to leaf 7 of 3 is rejected at import.
    assert!(model(&[7]).import_with(&folding()).is_err());
}

//! Constant folding: Shape/Size without help, whole shape subgraphs with an evaluator.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::ops::{BinaryOp, Evaluator};
use backplane_core::{Op, Tensor};
use backplane_onnx::{ImportOptions, OnnxError};
use common::*;
use std::sync::Arc;

/// The exporter idiom `x.reshape(x.shape[0], -1)`:
/// Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape.
fn flatten_idiom(opset: i64) -> Model {
    let m = Model::new(opset)
        .input(value_info(
            "x",
            FLOAT,
            Some(&[D::P("batch"), D::V(3), D::V(4)]),
        ))
        .init(tensor_i64("zero", &[], &[0]))
        .init(ints("minus_one", &[-1]))
        .node(node("Shape", &["x"], &["shape"], vec![]))
        .node(node(
            "Gather",
            &["shape", "zero"],
            &["n"],
            vec![a_int("axis", 0)],
        ));
    let m = if opset >= 13 {
        m.init(ints("axes", &[0]))
            .node(node("Unsqueeze", &["n", "axes"], &["n1"], vec![]))
    } else {
        m.node(node(
            "Unsqueeze",
            &["n"],
            &["n1"],
            vec![a_ints("axes", &[0])],
        ))
    };
    m.node(node(
        "Concat",
        &["n1", "minus_one"],
        &["target"],
        vec![a_int("axis", 0)],
    ))
    .node(named(
        node("Reshape", &["x", "target"], &["y"], vec![]),
        "reshape",
    ))
    .node(node("Relu", &["y"], &["z"], vec![]))
    .output("z")
}

#[test]
fn shape_folds_without_an_evaluator() {
    let net = Model::new(13)
        .input(input("x", &[2, 12]))
        .input(input("t", &[2, 3, 4]))
        .node(node("Shape", &["t"], &["st"], vec![]))
        .node(node("Reshape", &["x", "st"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Reshape {
            shape: vec![2, 3, 4]
        }
    );
    assert!(net.find_tensor("st").is_none(), "the shape is folded away");

    // Shape with start/end (opset 15) feeding a Reshape.
    let net = Model::new(15)
        .input(input("x", &[6, 4]))
        .input(input("t", &[2, 3, 6, 4]))
        .node(node("Shape", &["t"], &["st"], vec![a_int("start", -2)]))
        .node(node("Reshape", &["x", "st"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Reshape { shape: vec![6, 4] });

    // A folded shape that does not fit is found at import: an invalid model.
    let err = Model::new(15)
        .input(input("x", &[6, 4]))
        .input(input("t", &[2, 3, 4]))
        .node(node("Shape", &["t"], &["st"], vec![a_int("end", -1)]))
        .node(node("Reshape", &["x", "st"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");

    // Size folds too.
    let net = Model::new(13)
        .input(input("t", &[2, 3, 4]))
        .node(node("Size", &["t"], &["n"], vec![]))
        .output("n")
        .ok();
    let n = net.tensor(net.outputs()[0]).constant().unwrap().clone();
    assert_eq!(n.as_slice::<i64>().unwrap(), &[24]);
    assert_eq!(n.shape().rank(), 0);
}

#[test]
fn shape_start_end_are_clamped() {
    let net = Model::new(15)
        .input(input("t", &[2, 3, 4]))
        .node(node("Shape", &["t"], &["a"], vec![a_int("start", 1)]))
        .node(node(
            "Shape",
            &["t"],
            &["b"],
            vec![a_int("start", -100), a_int("end", -1)],
        ))
        .node(node(
            "Shape",
            &["t"],
            &["c"],
            vec![a_int("start", 2), a_int("end", 1)],
        ))
        .output("a")
        .output("b")
        .output("c")
        .ok();
    let get = |i: usize| {
        net.tensor(net.outputs()[i])
            .constant()
            .unwrap()
            .as_slice::<i64>()
            .unwrap()
            .to_vec()
    };
    assert_eq!(get(0), vec![3, 4]);
    assert_eq!(get(1), vec![2, 3]);
    assert_eq!(get(2), Vec::<i64>::new());
}

#[test]
fn shape_chain_folds_with_an_evaluator() {
    for opset in [11, 13] {
        let options = ImportOptions::default()
            .with_dim("batch", 5)
            .with_evaluator(Arc::new(TinyEvaluator));
        let net = flatten_idiom(opset).import_with(&options).unwrap();
        assert_eq!(ops(&net), vec!["Reshape", "Relu"], "opset {opset}");
        assert_eq!(net.layers()[0].op, Op::Reshape { shape: vec![5, 12] });
        assert_eq!(net.layers()[0].name, "reshape");
        assert_eq!(net.layers()[0].inputs.len(), 1);
        // Nothing of the folded chain is left in the network.
        for name in ["shape", "n", "n1", "target", "zero", "minus_one"] {
            assert!(net.find_tensor(name).is_none(), "{name} left over");
        }
        assert_eq!(dims(&net, "z"), vec![5, 12]);
        net.validate().unwrap();
    }
}

#[test]
fn shape_chain_without_an_evaluator_is_a_dynamic_reshape() {
    let options = ImportOptions::default().with_dim("batch", 5);
    let err = flatten_idiom(13).import_with(&options).unwrap_err();
    let u = err.unsupported_ops();
    assert_eq!(u.len(), 1, "{err}");
    assert_eq!(u[0].node, "reshape");
    assert_eq!(u[0].op_type, "Reshape");
    assert!(
        u[0].reason.starts_with("dynamic shape") && u[0].reason.contains("not supported"),
        "{}",
        u[0].reason
    );
}

/// Counts calls and refuses everything.
struct Refuser(std::sync::atomic::AtomicUsize);
impl Evaluator for Refuser {
    fn evaluate(&self, _op: &Op, _inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err("no".into())
    }
}

#[test]
fn an_evaluator_that_refuses_leaves_a_layer() {
    let refuser = Arc::new(Refuser(Default::default()));
    let options = ImportOptions::default().with_evaluator(refuser.clone());
    let net = Model::new(13)
        .init(floats("a", &[1.0, 2.0]))
        .init(floats("b", &[3.0, 4.0]))
        .node(named(node("Add", &["a", "b"], &["y"], vec![]), "add"))
        .output("y")
        .import_with(&options)
        .unwrap();
    assert_eq!(ops(&net), vec!["Add"]);
    assert_eq!(refuser.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(net.tensor(net.layers()[0].inputs[0]).constant().is_some());
    net.validate().unwrap();
}

/// Answers with the wrong shape.
struct Liar;
impl Evaluator for Liar {
    fn evaluate(&self, _op: &Op, _inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        Ok(vec![Tensor::from_vec(vec![3], vec![0.0f32; 3]).unwrap()])
    }
}

#[test]
fn an_evaluator_with_wrong_results_is_an_error() {
    let options = ImportOptions::default().with_evaluator(Arc::new(Liar));
    let err = Model::new(13)
        .init(floats("a", &[1.0, 2.0]))
        .init(floats("b", &[3.0, 4.0]))
        .node(named(node("Add", &["a", "b"], &["y"], vec![]), "add"))
        .output("y")
        .import_with(&options)
        .unwrap_err();
    assert!(
        matches!(&err, OnnxError::Evaluator { node, .. } if node == "add"),
        "{err}"
    );
}

/// Adds f32 tensors of equal shape.
struct Adder;
impl Evaluator for Adder {
    fn evaluate(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        if *op != Op::Binary(BinaryOp::Add) || inputs[0].shape() != inputs[1].shape() {
            return Err("unsupported".into());
        }
        let a = inputs[0].as_slice::<f32>().map_err(|e| e.to_string())?;
        let b = inputs[1].as_slice::<f32>().map_err(|e| e.to_string())?;
        let v = a.iter().zip(b).map(|(x, y)| x + y).collect();
        Ok(vec![
            Tensor::from_vec(inputs[0].shape().clone(), v).map_err(|e| e.to_string())?
        ])
    }
}

#[test]
fn folded_constants_feed_layers_and_outputs() {
    let options = ImportOptions::default().with_evaluator(Arc::new(Adder));
    let net = Model::new(13)
        .input(input("x", &[2]))
        .init(floats("a", &[1.0, 2.0]))
        .init(floats("b", &[3.0, 4.0]))
        .node(node("Add", &["a", "b"], &["c"], vec![]))
        .node(node("Mul", &["x", "c"], &["y"], vec![]))
        .output("y")
        .output("c")
        .import_with(&options)
        .unwrap();
    assert_eq!(ops(&net), vec!["Mul"]);
    let c = net.find_tensor("c").unwrap();
    assert_eq!(
        net.tensor(c).constant().unwrap().as_slice::<f32>().unwrap(),
        &[4.0, 6.0]
    );
    assert_eq!(net.outputs()[1], c);
    // The folded value is added once although used twice.
    assert_eq!(net.tensors().iter().filter(|t| t.name == "c").count(), 1);
}

#[test]
fn folding_respects_the_size_limit() {
    // The folded sum would need 400 bytes; with a 256-byte limit it stays a layer.
    let options = ImportOptions::default()
        .with_evaluator(Arc::new(Adder))
        .with_max_tensor_bytes(256);
    let net = Model::new(13)
        .init(tensor_f32("a", &[100], &[1.0; 100]))
        .init(tensor_f32("b", &[1], &[1.0]))
        .node(node("Add", &["a", "b"], &["c"], vec![]))
        .output("c")
        .import_with(&options);
    // 'a' itself is over the limit.
    assert!(matches!(net, Err(OnnxError::TensorTooLarge { .. })));
    let net = Model::new(13)
        .init(tensor_f32("a", &[50], &[1.0; 50]))
        .init(tensor_f32("b", &[2, 1], &[1.0, 2.0]))
        .node(node("Add", &["a", "b"], &["c"], vec![]))
        .output("c")
        .import_with(&options)
        .unwrap();
    assert_eq!(ops(&net), vec!["Add"]);
    assert_eq!(dims(&net, "c"), vec![2, 50]);
}

#[test]
fn identity_and_dropout_of_constants_fold() {
    let net = Model::new(13)
        .input(input("x", &[2]))
        .init(floats("w", &[1.0, 2.0]))
        .node(node("Identity", &["w"], &["w1"], vec![]))
        .node(node("Dropout", &["w1"], &["w2"], vec![]))
        .node(node("Mul", &["x", "w2"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(ops(&net), vec!["Mul"]);
    assert_eq!(input_names(&net, &net.layers()[0]), vec!["x", "w2"]);
}

/// An evaluator that casts 8-bit tensors to int32 (the weights of a lowered MatMulInteger).
struct WideningEvaluator;

impl Evaluator for WideningEvaluator {
    fn evaluate(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        match (op, inputs) {
            (Op::Cast { to, .. }, [x]) if *to == backplane_core::DataType::I32 => {
                let v: Vec<i32> = x.bytes().iter().map(|&b| i32::from(b as i8)).collect();
                Ok(vec![
                    Tensor::from_vec(x.shape().dims().to_vec(), v).map_err(|e| e.to_string())?
                ])
            }
            _ => Err("not handled".into()),
        }
    }
}

/// MatMulInteger of an input and int8 weights of `k × n` (no zero points).
fn matmul_integer(k: usize, n: usize) -> Model {
    use backplane_onnx::proto::tensor_proto::DataType as T;
    let w = backplane_onnx::proto::TensorProto {
        name: Some("w".into()),
        dims: vec![k as i64, n as i64],
        data_type: Some(T::Int8 as i32),
        raw_data: Some((0..k * n).map(|i| (i % 251) as u8).collect()),
        ..Default::default()
    };
    Model::new(13)
        .input(value_info(
            "x",
            T::Uint8 as i32,
            Some(&[D::V(2), D::V(k as i64)]),
        ))
        .init(w)
        .node(node("MatMulInteger", &["x", "w"], &["y"], vec![]))
        .output("y")
}

/// The int8 weights of a MatMulInteger are widened to int32 in the lowering. Large ones (64
/// KiB and up) keep that Cast as a layer, so the weights stay 8-bit in memory (a backend
/// folds the integer product around them); small ones fold to an int32 constant.
#[test]
fn large_8bit_weights_are_not_widened_at_import() {
    let options = ImportOptions::default().with_evaluator(Arc::new(WideningEvaluator));
    let cast_of_constant = |net: &backplane_core::Network| {
        net.layers().iter().any(|l| {
            matches!(l.op, Op::Cast { .. })
                && l.inputs.iter().any(|&t| {
                    net.tensor(t).constant().is_some()
                        && net.tensor(t).info.dtype == backplane_core::DataType::I8
                })
        })
    };
    let large = matmul_integer(256, 256).import_with(&options).unwrap();
    assert!(cast_of_constant(&large), "{:?}", ops(&large));
    let small = matmul_integer(16, 8).import_with(&options).unwrap();
    assert!(!cast_of_constant(&small), "{:?}", ops(&small));
}

//! Error reporting: unsupported nodes, missing dims, bad files, limits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::DataType;
use backplane_onnx::{import_bytes, import_file, inspect_inputs, Dim, ImportOptions, OnnxError};
use common::*;

#[test]
fn every_unsupported_node_is_listed() {
    let mut m = Model::new(13)
        .input(input("x", &[1, 4]))
        .input(value_info("k", INT64, Some(&[D::V(1)])))
        .init(ints("shape", &[4, 1]))
        .node(named(node("Bernoulli", &["x"], &["v"], vec![]), "random"))
        // Downstream of an unsupported node: skipped silently (Relu is fine)...
        .node(named(node("Relu", &["v"], &["r"], vec![]), "relu_after"))
        // ...but an unsupported operator there is still reported.
        .node(named(
            node("StringNormalizer", &["r"], &["nz"], vec![]),
            "strings",
        ))
        .node(named(node("FusedConv", &["x"], &["fc"], vec![]), "fused"))
        // A supported op with a run-time parameter.
        .node(named(
            node("Reshape", &["x", "k"], &["rk"], vec![]),
            "dyn_reshape",
        ))
        // A good branch keeps importing.
        .node(named(
            node("Reshape", &["x", "shape"], &["ok"], vec![]),
            "good",
        ))
        .node(named(node("Col2Im", &["ok"], &["celu"], vec![]), "col2im"))
        .output("nz")
        .output("fc")
        .output("rk")
        .output("celu");
    m.graph.node[3].domain = Some("com.microsoft".into());
    m.extra_opsets.push(("com.microsoft".into(), 1));
    let err = m.import().unwrap_err();
    let u = err.unsupported_ops();
    let got: Vec<(&str, &str, &str, i64)> = u
        .iter()
        .map(|u| {
            (
                u.node.as_str(),
                u.op_type.as_str(),
                u.domain.as_str(),
                u.opset,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("random", "Bernoulli", "", 13),
            ("strings", "StringNormalizer", "", 13),
            ("fused", "FusedConv", "com.microsoft", 1),
            ("col2im", "Col2Im", "", 13),
            // Needs the value of an input: listed after the unsupported operators.
            ("dyn_reshape", "Reshape", "", 13),
        ]
    );
    assert_eq!(u[4].reason, "dynamic shape (computed at run time)");
    assert!(u[2].reason.contains("com.microsoft"));
    let msg = err.to_string();
    assert!(
        msg.starts_with("the model has 5 nodes that backplane cannot import:"),
        "{msg}"
    );
    for name in ["random", "strings", "fused", "dyn_reshape", "col2im"] {
        assert!(
            msg.contains(&format!("node '{name}'")),
            "{name} missing in {msg}"
        );
    }
    assert!(
        msg.contains("node 'fused' (com.microsoft::FusedConv, opset 1)"),
        "{msg}"
    );
    assert!(!msg.contains("relu_after"));
}

#[test]
fn runtime_parameters_ask_for_a_specialization() {
    let m = Model::new(13)
        .input(input("x", &[1, 4]))
        .input(value_info("shape", INT64, Some(&[D::V(2)])))
        .node(node("Reshape", &["x", "shape"], &["y"], vec![]))
        .output("y");
    let bytes = m.bytes();
    let err = import_bytes(&bytes, None, &ImportOptions::default()).unwrap_err();
    match &err {
        OnnxError::NeedsInputValues { inputs, nodes } => {
            assert_eq!(inputs, &["shape".to_string()]);
            assert_eq!(nodes[0].op_type, "Reshape");
        }
        other => panic!("unexpected {other}"),
    }
    let shape = backplane_core::Tensor::from_vec(vec![2], vec![2i64, 2]).unwrap();
    let values = vec![("shape".to_string(), shape)];
    let (net, bound) =
        backplane_onnx::import_specialized(&bytes, None, &ImportOptions::default(), &values)
            .unwrap();
    assert_eq!(bound, ["shape"]);
    assert_eq!(net.inputs().len(), 1);
    let out = net.outputs()[0];
    assert_eq!(net.tensor(out).info.shape.dims(), &[2, 2]);
}

/// Two nodes need run-time values: the import reports both, or with `stop_at_value_need`
/// only the first.
#[test]
fn stop_at_value_need_reports_only_the_first_node() {
    let m = Model::new(13)
        .input(input("x", &[1, 4]))
        .input(value_info("shape", INT64, Some(&[D::V(2)])))
        .input(value_info("shape2", INT64, Some(&[D::V(2)])))
        .node(node("Reshape", &["x", "shape"], &["y"], vec![]))
        .node(node("Reshape", &["x", "shape2"], &["z"], vec![]))
        .output("y")
        .output("z");
    let bytes = m.bytes();
    let labels = |options: &ImportOptions| match import_bytes(&bytes, None, options) {
        Err(OnnxError::NeedsInputValues { inputs, nodes }) => (
            inputs,
            nodes.iter().map(|n| n.node.clone()).collect::<Vec<_>>(),
        ),
        other => panic!("unexpected {other:?}"),
    };
    let (inputs, nodes) = labels(&ImportOptions::default());
    assert_eq!(inputs, ["shape", "shape2"]);
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let first = ImportOptions {
        stop_at_value_need: true,
        ..ImportOptions::default()
    };
    let (inputs, nodes) = labels(&first);
    assert_eq!(inputs, ["shape"]);
    assert_eq!(nodes.len(), 1, "{nodes:?}");
}

#[test]
fn old_opsets_are_unsupported() {
    let err = Model::new(6)
        .input(input("x", &[2]))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.unsupported_ops()[0].reason.contains("opset 6"), "{err}");
}

fn batch_model() -> Model {
    Model::new(13)
        .input(value_info(
            "input",
            FLOAT,
            Some(&[D::P("batch"), D::V(1), D::V(8), D::V(8)]),
        ))
        .node(node("Relu", &["input"], &["y"], vec![]))
        .output("y")
}

#[test]
fn symbolic_dims_need_values() {
    let err = batch_model().import().unwrap_err();
    match &err {
        OnnxError::MissingDim { input, dim_name } => {
            assert_eq!((input.as_str(), dim_name.as_str()), ("input", "batch"));
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("'batch'") && msg.contains("--input-shape input="),
        "{msg}"
    );

    let net = batch_model()
        .import_with(&ImportOptions::default().with_dim("batch", 3))
        .unwrap();
    assert_eq!(dims(&net, "input"), vec![3, 1, 8, 8]);
    let net = batch_model()
        .import_with(&ImportOptions::default().with_input_shape("input", vec![2, 1, 8, 8]))
        .unwrap();
    assert_eq!(dims(&net, "y"), vec![2, 1, 8, 8]);

    let err = batch_model()
        .import_with(&ImportOptions::default().with_input_shape("inptu", vec![1]))
        .unwrap_err();
    assert!(matches!(err, OnnxError::UnknownInput { .. }), "{err}");
    assert!(err.to_string().contains("input"));

    // An unnamed unknown dim is named after the input and its position.
    let m = || {
        Model::new(13)
            .input(value_info("x", FLOAT, Some(&[D::Unknown, D::V(4)])))
            .node(node("Relu", &["x"], &["y"], vec![]))
            .output("y")
    };
    let err = m().import().unwrap_err();
    assert!(
        matches!(&err, OnnxError::MissingDim { dim_name, .. } if dim_name == "x_dim0"),
        "{err}"
    );
    let net = m()
        .import_with(&ImportOptions::default().with_dim("x_dim0", 7))
        .unwrap();
    assert_eq!(dims(&net, "y"), vec![7, 4]);

    // No shape at all.
    let err = Model::new(13)
        .input(value_info("x", FLOAT, None))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::MissingShape { .. }), "{err}");
}

#[test]
fn inspect_lists_runtime_inputs() {
    let bytes = Model::new(13)
        .input(value_info(
            "input",
            FLOAT,
            Some(&[D::P("batch"), D::V(3), D::Unknown]),
        ))
        .input(input("w", &[2]))
        .init(floats("w", &[1.0, 2.0]))
        .node(node("Relu", &["input"], &["y"], vec![]))
        .output("y")
        .bytes();
    let inputs = inspect_inputs(&bytes).unwrap();
    assert_eq!(inputs.len(), 1, "initializers are not runtime inputs");
    assert_eq!(inputs[0].name, "input");
    assert_eq!(inputs[0].dtype, DataType::F32);
    assert_eq!(
        inputs[0].dims,
        vec![
            Dim::Symbolic("batch".into()),
            Dim::Fixed(3),
            Dim::Symbolic("input_dim2".into())
        ]
    );
    assert_eq!(inputs[0].symbolic_dims(), vec!["batch", "input_dim2"]);
    assert!(inputs[0].shape_known);
}

#[test]
fn bad_bytes_are_decode_errors() {
    let bytes = batch_model().bytes();
    for cut in [bytes.len() / 2, bytes.len() - 3, 5] {
        let err = import_bytes(&bytes[..cut], None, &ImportOptions::default()).unwrap_err();
        assert!(matches!(err, OnnxError::Decode { .. }), "cut {cut}: {err}");
        assert!(err.to_string().contains("not a valid ONNX model"), "{err}");
    }
    let err = import_bytes(&[], None, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, OnnxError::Decode { .. }));
    let err =
        import_bytes(b"\xff\xff\xff\xff garbage", None, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, OnnxError::Decode { .. }), "{err}");
    assert!(inspect_inputs(&bytes[..bytes.len() / 2]).is_err());

    let dir = std::env::temp_dir().join(format!("backplane-onnx-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("truncated.onnx");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = import_file(&path, &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("truncated.onnx"), "{err}");
    assert!(matches!(err, OnnxError::Decode { path: Some(_), .. }));
    let err = import_file(&dir.join("missing.onnx"), &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, OnnxError::Io { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_models() {
    // No default-domain opset.
    let mut m = batch_model().proto();
    m.opset_import.clear();
    let err = backplane_onnx::import_model(m, None, &ImportOptions::default().with_dim("batch", 1))
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");

    // A negative input dim.
    let err = Model::new(13)
        .input(input("x", &[-2]))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");

    // Nodes out of order.
    let err = Model::new(13)
        .input(input("x", &[2]))
        .node(node("Relu", &["a"], &["y"], vec![]))
        .node(node("Relu", &["x"], &["a"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("topological"), "{err}");

    // An output nobody produces.
    let err = Model::new(13)
        .input(input("x", &[2]))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("nope")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");

    // Shapes that do not fit: a core error naming the node.
    let err = Model::new(13)
        .input(input("x", &[1, 3, 8, 8]))
        .init(zeros("w", &[4, 2, 3, 3]))
        .node(named(node("Conv", &["x", "w"], &["y"], vec![]), "conv1"))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(&err, OnnxError::Core { node, .. } if node == "conv1"),
        "{err}"
    );
    assert!(err.to_string().contains("conv1"));

    // Huge window parameters are rejected, not overflowed.
    let err = Model::new(13)
        .input(input("x", &[1, 3, 8, 8]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[2, 2]),
                a_ints("pads", &[i64::MAX, 0, 0, 0]),
            ],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");
    let err = Model::new(13)
        .input(input("x", &[1, 3, 8, 8]))
        .init(ints("p", &[0, 0, 0, i64::MAX, 0, 0, 0, 0]))
        .node(node("Pad", &["x", "p"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");
    // A negative conv pad is unsupported rather than invalid.
    let err = Model::new(13)
        .input(input("x", &[1, 3, 8, 8]))
        .init(zeros("w", &[4, 3, 3, 3]))
        .node(node(
            "Conv",
            &["x", "w"],
            &["y"],
            vec![a_ints("pads", &[-1, 0, 0, 0])],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        err.unsupported_ops()[0].reason.contains("negative pads"),
        "{err}"
    );
}

#[test]
fn size_limits() {
    let m = || {
        Model::new(13)
            .input(input("x", &[64]))
            .init(zeros("w", &[64]))
            .node(node("Add", &["x", "w"], &["y"], vec![]))
            .output("y")
    };
    assert!(m()
        .import_with(&ImportOptions::default().with_max_tensor_bytes(256))
        .is_ok());
    let err = m()
        .import_with(&ImportOptions::default().with_max_tensor_bytes(255))
        .unwrap_err();
    assert!(
        matches!(
            &err,
            OnnxError::TensorTooLarge {
                bytes: Some(256),
                limit: 255,
                ..
            }
        ),
        "{err}"
    );
    // Dims whose product overflows.
    let err = Model::new(13)
        .input(input("x", &[1]))
        .init(backplane_onnx::proto::TensorProto {
            name: Some("w".into()),
            dims: vec![1 << 40, 1 << 40, 1 << 40],
            data_type: Some(FLOAT),
            ..Default::default()
        })
        .node(node("Add", &["x", "w"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(err, OnnxError::TensorTooLarge { bytes: None, .. }),
        "{err}"
    );
    // Inputs are held to the limit too.
    let err = Model::new(13)
        .input(input("x", &[1 << 20, 1 << 20]))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(err, OnnxError::TensorTooLarge { .. }), "{err}");
}

#[test]
fn non_tensor_and_unsupported_input_types() {
    let err = Model::new(13)
        .input(value_info("x", 14, Some(&[D::V(2)])))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(&err, OnnxError::UnsupportedDataType { dtype, .. } if dtype == "COMPLEX64"),
        "{err}"
    );
}

/// Cut and corrupt a model in many places: every result must be an answer, never a panic.
#[test]
fn corrupted_models_never_panic() {
    let bytes = Model::new(13)
        .input(value_info(
            "x",
            FLOAT,
            Some(&[D::P("batch"), D::V(2), D::V(6), D::V(6)]),
        ))
        .init(zeros("w", &[2, 2, 3, 3]))
        .init(ints("shape", &[0, -1]))
        .init(floats("sc", &[1.0, 1.0, 2.0, 2.0]))
        .init(ints("pads", &[0, 0, 1, 1, 0, 0, 1, 1]))
        .node(node(
            "Conv",
            &["x", "w"],
            &["c"],
            vec![a_ints("pads", &[1, 1, 1, 1])],
        ))
        .node(node("Pad", &["c", "pads"], &["p"], vec![]))
        .node(node("Resize", &["p", "", "sc"], &["r"], vec![]))
        .node(node(
            "MaxPool",
            &["r"],
            &["m"],
            vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2])],
        ))
        .node(node("Shape", &["m"], &["s"], vec![]))
        .node(node("Reshape", &["m", "shape"], &["y"], vec![]))
        .node(node("Softmax", &["y"], &["z"], vec![]))
        .output("z")
        .output("s")
        .bytes();
    let options = ImportOptions::default()
        .with_dim("batch", 1)
        .with_max_tensor_bytes(1 << 20);
    assert!(import_bytes(&bytes, None, &options).is_ok());
    let mut answers = 0usize;
    for cut in 0..bytes.len() {
        let _ = import_bytes(&bytes[..cut], None, &options);
        answers += 1;
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state % b.len() as u64) as usize;
            b[i] = (state >> 32) as u8;
        }
        let _ = import_bytes(&b, None, &options);
        let _ = inspect_inputs(&b);
        answers += 1;
    }
    assert_eq!(answers, bytes.len() + 3000);

    // Structured damage: odd values in attributes and dims.
    let base = backplane_onnx::decode_model(&bytes).unwrap();
    let odd = [0i64, -1, -2, 3, 1 << 31, 1 << 40, i64::MAX, i64::MIN];
    for it in 0..4000usize {
        let mut m = base.clone();
        let g = m.graph.as_mut().unwrap();
        let v = odd[it % odd.len()];
        let k = it / odd.len();
        match k % 3 {
            0 => {
                let n = g.node.len();
                let node = &mut g.node[k % n];
                if let Some(a) = node.attribute.get_mut(k % 2) {
                    if let Some(x) = a.ints.get_mut(k % 4) {
                        *x = v;
                    }
                }
            }
            1 => {
                let n = g.initializer.len();
                let t = &mut g.initializer[k % n];
                if let Some(d) = t.dims.get_mut(0) {
                    *d = v;
                }
                if t.data_type == Some(INT64) {
                    if let Some(x) = t.int64_data.get_mut(k % 2) {
                        *x = v;
                    }
                }
            }
            _ => {
                if let Some(backplane_onnx::proto::type_proto::Value::TensorType(tt)) =
                    g.input[0].r#type.as_mut().and_then(|t| t.value.as_mut())
                {
                    if let Some(s) = tt.shape.as_mut() {
                        let n = s.dim.len();
                        s.dim[k % n].value = Some(
                            backplane_onnx::proto::tensor_shape_proto::dimension::Value::DimValue(
                                v,
                            ),
                        );
                    }
                }
            }
        }
        let _ = backplane_onnx::import_model(m, None, &options);
    }
}

#[test]
fn minus_one_is_an_unknown_dimension() {
    // Other frameworks' exporters declare unknown dims as dim_value -1 (on inputs, outputs
    // and value_info alike).
    let m = || {
        let mut m = Model::new(13)
            .input(value_info("x", FLOAT, Some(&[D::V(-1), D::V(4)])))
            .node(node("Relu", &["x"], &["r"], vec![]))
            .node(node("Neg", &["r"], &["y"], vec![]));
        m.graph
            .output
            .push(value_info("y", FLOAT, Some(&[D::V(-1), D::V(4)])));
        m.graph
            .value_info
            .push(value_info("r", FLOAT, Some(&[D::V(-1), D::V(-1)])));
        m
    };
    let err = m().import().unwrap_err();
    assert!(
        matches!(&err, OnnxError::MissingDim { dim_name, .. } if dim_name == "x_dim0"),
        "{err}"
    );
    let inputs = inspect_inputs(&m().bytes()).unwrap();
    assert_eq!(
        inputs[0].dims,
        vec![Dim::Symbolic("x_dim0".into()), Dim::Fixed(4)]
    );
    let net = m()
        .import_with(&ImportOptions::default().with_input_shape("x", vec![3, 4]))
        .unwrap();
    assert_eq!(dims(&net, "y"), vec![3, 4]);
    let net = m()
        .import_with(&ImportOptions::default().with_dim("x_dim0", 5))
        .unwrap();
    assert_eq!(dims(&net, "y"), vec![5, 4]);
}

#[test]
fn negative_dimensions_other_than_minus_one_are_refused() {
    let err = Model::new(13)
        .input(value_info("x", FLOAT, Some(&[D::V(-2), D::V(4)])))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import_with(&ImportOptions::default().with_dim("x_dim0", 5))
        .unwrap_err();
    assert!(matches!(err, OnnxError::InvalidModel(_)), "{err}");
    assert!(err.to_string().contains("-2"), "{err}");
}

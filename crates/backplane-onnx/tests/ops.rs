//! Operator translation, one test per operator family and opset variant.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::ops::*;
use backplane_core::{DataType, Op};
use common::*;

fn unary_model(opset: i64, op: &str, attrs: Vec<backplane_onnx::proto::AttributeProto>) -> Model {
    Model::new(opset)
        .input(input("x", &[2, 3]))
        .node(named(node(op, &["x"], &["y"], attrs), "n"))
        .output("y")
}

#[test]
fn activations_and_math() {
    let cases: Vec<(&str, UnaryOp)> = vec![
        ("Relu", UnaryOp::Relu),
        ("Sigmoid", UnaryOp::Sigmoid),
        ("Tanh", UnaryOp::Tanh),
        ("Erf", UnaryOp::Erf),
        ("Sqrt", UnaryOp::Sqrt),
        ("Exp", UnaryOp::Exp),
        ("Log", UnaryOp::Log),
        ("Neg", UnaryOp::Neg),
        ("Abs", UnaryOp::Abs),
        ("LeakyRelu", UnaryOp::LeakyRelu { alpha: 0.01 }),
    ];
    for (name, want) in cases {
        let net = unary_model(13, name, vec![]).ok();
        assert_eq!(only_op(&net), &Op::Unary(want), "{name}");
        let l = only_layer(&net);
        assert_eq!(l.name, "n");
        assert_eq!(net.tensor(l.outputs[0]).name, "y");
        assert_eq!(net.outputs(), &l.outputs[..]);
    }
    let net = unary_model(13, "LeakyRelu", vec![a_float("alpha", 0.2)]).ok();
    assert_eq!(only_op(&net), &Op::Unary(UnaryOp::LeakyRelu { alpha: 0.2 }));
}

#[test]
fn gelu_needs_opset_20() {
    let net = unary_model(20, "Gelu", vec![]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Unary(UnaryOp::Gelu {
            tanh_approximation: false
        })
    );
    let net = unary_model(20, "Gelu", vec![a_str("approximate", "tanh")]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Unary(UnaryOp::Gelu {
            tanh_approximation: true
        })
    );
    let err = unary_model(17, "Gelu", vec![]).import().unwrap_err();
    assert!(err.to_string().contains("opset 20"), "{err}");
}

#[test]
fn clip_attributes_before_11_inputs_after() {
    let net = unary_model(
        6 + 1,
        "Clip",
        vec![a_float("min", -1.0), a_float("max", 6.0)],
    )
    .ok();
    assert_eq!(
        only_op(&net),
        &Op::Unary(UnaryOp::Clip {
            min: -1.0,
            max: 6.0
        })
    );
    let net = unary_model(7, "Clip", vec![]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Unary(UnaryOp::Clip {
            min: f32::MIN,
            max: f32::MAX
        })
    );
    // opset 13: min and max are inputs; min omitted as "".
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .init(tensor_f32("hi", &[], &[6.0]))
        .node(node("Clip", &["x", "", "hi"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Unary(UnaryOp::Clip {
            min: f32::NEG_INFINITY,
            max: 6.0
        })
    );
    assert_eq!(
        only_layer(&net).inputs.len(),
        1,
        "min/max are not layer inputs"
    );
    let net = Model::new(11)
        .input(input("x", &[2, 3]))
        .init(tensor_f32("lo", &[], &[0.0]))
        .node(node("Clip", &["x", "lo"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Unary(UnaryOp::Clip {
            min: 0.0,
            max: f32::INFINITY
        })
    );
    // A runtime bound is not supported.
    let err = Model::new(13)
        .input(input("x", &[2, 3]))
        .input(input("lo", &[]))
        .node(node("Clip", &["x", "lo"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        err.unsupported_ops()[0].reason,
        "dynamic min (computed at run time)"
    );
}

#[test]
fn binary_ops_keep_both_inputs() {
    for (name, want) in [
        ("Add", BinaryOp::Add),
        ("Sub", BinaryOp::Sub),
        ("Mul", BinaryOp::Mul),
        ("Div", BinaryOp::Div),
        ("Pow", BinaryOp::Pow),
    ] {
        let net = Model::new(14)
            .input(input("a", &[2, 3]))
            .init(tensor_f32("b", &[3], &[1.0, 2.0, 3.0]))
            .node(node(name, &["a", "b"], &["y"], vec![]))
            .output("y")
            .ok();
        assert_eq!(only_op(&net), &Op::Binary(want));
        assert_eq!(input_names(&net, only_layer(&net)), vec!["a", "b"]);
        let b = net.find_tensor("b").unwrap();
        assert!(net.tensor(b).constant().is_some());
        assert_eq!(dims(&net, "y"), vec![2, 3]);
    }
}

#[test]
fn variadic_ops_chain_binary_layers() {
    let net = Model::new(13)
        .input(input("a", &[2]))
        .input(input("b", &[2]))
        .input(input("c", &[2]))
        .node(named(node("Max", &["a", "b", "c"], &["y"], vec![]), "m"))
        .output("y")
        .ok();
    assert_eq!(ops(&net), vec!["Max", "Max"]);
    assert_eq!(net.layers()[1].name, "m");
    assert_eq!(net.tensor(net.layers()[1].outputs[0]).name, "y");
    assert_eq!(
        net.layers()[1].inputs[0],
        net.layers()[0].outputs[0],
        "chained"
    );

    let net = Model::new(13)
        .input(input("a", &[2]))
        .node(node("Min", &["a"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Identity);

    let net = Model::new(13)
        .input(input("a", &[2]))
        .input(input("b", &[2]))
        .node(node("Sum", &["a", "b"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Binary(BinaryOp::Add));

    let net = Model::new(13)
        .input(input("a", &[2]))
        .input(input("b", &[2]))
        .node(node("Mean", &["a", "b"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(ops(&net), vec!["Add", "Div"]);
    let div = &net.layers()[1];
    let divisor = net.tensor(div.inputs[1]).constant().unwrap();
    assert_eq!(divisor.as_slice::<f32>().unwrap(), &[2.0]);
}

#[test]
fn conv_takes_kernel_from_weights() {
    let net = Model::new(11)
        .input(input("x", &[1, 3, 8, 8]))
        .init(zeros("w", &[4, 3, 3, 3]))
        .init(zeros("b", &[4]))
        .node(node(
            "Conv",
            &["x", "w", "b"],
            &["y"],
            vec![a_ints("pads", &[1, 1, 1, 1]), a_ints("strides", &[2, 2])],
        ))
        .output("y")
        .ok();
    let Op::Conv(c) = only_op(&net) else { panic!() };
    assert_eq!(c.window.kernel, vec![3, 3]);
    assert_eq!(c.window.pads, vec![1, 1, 1, 1]);
    assert_eq!(c.window.strides, vec![2, 2]);
    assert_eq!(c.group, 1);
    assert_eq!(only_layer(&net).inputs.len(), 3);
    assert_eq!(dims(&net, "y"), vec![1, 4, 4, 4]);

    let net = Model::new(11)
        .input(input("x", &[1, 4, 8, 8]))
        .init(zeros("w", &[4, 1, 3, 3]))
        .node(node(
            "Conv",
            &["x", "w"],
            &["y"],
            vec![
                a_int("group", 4),
                a_str("auto_pad", "SAME_UPPER"),
                a_ints("kernel_shape", &[3, 3]),
                a_ints("dilations", &[2, 2]),
            ],
        ))
        .output("y")
        .ok();
    let Op::Conv(c) = only_op(&net) else { panic!() };
    assert_eq!(c.group, 4);
    assert_eq!(c.window.auto_pad, AutoPad::SameUpper);
    assert_eq!(c.window.dilations, vec![2, 2]);
    assert_eq!(only_layer(&net).inputs.len(), 2);
    assert_eq!(dims(&net, "y"), vec![1, 4, 8, 8]);
}

#[test]
fn conv_transpose() {
    let net = Model::new(11)
        .input(input("x", &[1, 2, 4, 4]))
        .init(zeros("w", &[2, 3, 3, 3]))
        .node(node(
            "ConvTranspose",
            &["x", "w"],
            &["y"],
            vec![
                a_ints("strides", &[2, 2]),
                a_ints("pads", &[1, 1, 1, 1]),
                a_ints("output_padding", &[1, 1]),
            ],
        ))
        .output("y")
        .ok();
    let Op::ConvTranspose(c) = only_op(&net) else {
        panic!()
    };
    assert_eq!(c.output_padding, vec![1, 1]);
    assert_eq!(c.window.kernel, vec![3, 3]);
    assert_eq!(dims(&net, "y"), vec![1, 3, 8, 8]);

    let net = Model::new(11)
        .input(input("x", &[1, 2, 4, 4]))
        .init(zeros("w", &[2, 3, 3, 3]))
        .node(node(
            "ConvTranspose",
            &["x", "w"],
            &["y"],
            vec![
                a_ints("strides", &[2, 2]),
                a_ints("output_shape", &[1, 3, 8, 8]),
            ],
        ))
        .output("y")
        .ok();
    let Op::ConvTranspose(c) = only_op(&net) else {
        panic!()
    };
    assert_eq!(c.output_shape, vec![8, 8]);
    assert_eq!(dims(&net, "y"), vec![1, 3, 8, 8]);
}

fn bn_model(
    opset: i64,
    outputs: &[&str],
    attrs: Vec<backplane_onnx::proto::AttributeProto>,
) -> Model {
    Model::new(opset)
        .input(input("x", &[1, 2, 4, 4]))
        .init(zeros("s", &[2]))
        .init(zeros("b", &[2]))
        .init(zeros("m", &[2]))
        .init(zeros("v", &[2]))
        .node(node(
            "BatchNormalization",
            &["x", "s", "b", "m", "v"],
            outputs,
            attrs,
        ))
        .output("y")
}

#[test]
fn batch_norm_inference_and_training_mode() {
    let net = bn_model(15, &["y"], vec![a_float("epsilon", 1e-3)]).ok();
    assert_eq!(only_op(&net), &Op::BatchNormalization { epsilon: 1e-3 });
    assert_eq!(only_layer(&net).inputs.len(), 5);
    let net = bn_model(9, &["y"], vec![]).ok();
    assert_eq!(only_op(&net), &Op::BatchNormalization { epsilon: 1e-5 });

    // Training mode is lowered to reductions (see misc_ops.rs).
    let net = bn_model(15, &["y"], vec![a_int("training_mode", 1)]).ok();
    assert!(
        ops(&net).contains(&"ReduceMean".to_string()),
        "{:?}",
        ops(&net)
    );
    let err = bn_model(9, &["y", "rm", "rv"], vec![])
        .import()
        .unwrap_err();
    assert_eq!(err.unsupported_ops().len(), 1);
    let err = bn_model(7, &["y"], vec![a_int("spatial", 0)])
        .import()
        .unwrap_err();
    assert!(err.unsupported_ops()[0].reason.contains("spatial"));
}

#[test]
fn matmul_and_gemm() {
    let net = Model::new(13)
        .input(input("a", &[2, 3, 4]))
        .init(zeros("b", &[4, 5]))
        .node(node("MatMul", &["a", "b"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::MatMul);
    assert_eq!(dims(&net, "y"), vec![2, 3, 5]);

    let net = Model::new(13)
        .input(input("a", &[2, 3]))
        .init(zeros("b", &[5, 3]))
        .init(zeros("c", &[5]))
        .node(node(
            "Gemm",
            &["a", "b", "c"],
            &["y"],
            vec![a_int("transB", 1), a_float("alpha", 0.5)],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Gemm(GemmDesc {
            alpha: 0.5,
            beta: 1.0,
            trans_a: false,
            trans_b: true
        })
    );
    assert_eq!(dims(&net, "y"), vec![2, 5]);
    let net = Model::new(13)
        .input(input("a", &[2, 3]))
        .init(zeros("b", &[3, 5]))
        .node(node("Gemm", &["a", "b"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_layer(&net).inputs.len(), 2);
}

#[test]
fn pooling() {
    let net = Model::new(12)
        .input(input("x", &[1, 2, 8, 8]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[2, 2]),
                a_ints("strides", &[2, 2]),
                a_int("ceil_mode", 1),
            ],
        ))
        .output("y")
        .ok();
    let Op::Pool(p) = only_op(&net) else { panic!() };
    assert_eq!(p.kind, PoolKind::Max);
    assert!(p.ceil_mode);
    assert_eq!(dims(&net, "y"), vec![1, 2, 4, 4]);

    let net = Model::new(11)
        .input(input("x", &[1, 2, 8, 8]))
        .node(node(
            "AveragePool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[3, 3]),
                a_ints("pads", &[1, 1, 1, 1]),
                a_int("count_include_pad", 1),
            ],
        ))
        .output("y")
        .ok();
    let Op::Pool(p) = only_op(&net) else { panic!() };
    assert_eq!(p.kind, PoolKind::Average);
    assert!(p.count_include_pad);
    assert_eq!(dims(&net, "y"), vec![1, 2, 8, 8]);

    // An unused Indices output is not computed; a used one makes MaxPool with indices.
    let net = Model::new(12)
        .input(input("x", &[1, 2, 8, 8]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y", "idx"],
            vec![a_ints("kernel_shape", &[2, 2])],
        ))
        .output("y")
        .ok();
    assert!(matches!(only_op(&net), Op::Pool(_)));
    let net = Model::new(12)
        .input(input("x", &[1, 2, 8, 8]))
        .node(node(
            "MaxPool",
            &["x"],
            &["y", "idx"],
            vec![a_ints("kernel_shape", &[2, 2])],
        ))
        .output("y")
        .output("idx")
        .ok();
    assert!(matches!(only_op(&net), Op::MaxPoolWithIndices(_)));
    assert_eq!(dims(&net, "idx"), vec![1, 2, 7, 7]);

    for (name, kind) in [
        ("GlobalAveragePool", PoolKind::Average),
        ("GlobalMaxPool", PoolKind::Max),
    ] {
        let net = Model::new(12)
            .input(input("x", &[1, 2, 8, 8]))
            .node(node(name, &["x"], &["y"], vec![]))
            .output("y")
            .ok();
        assert_eq!(only_op(&net), &Op::GlobalPool(kind));
        assert_eq!(dims(&net, "y"), vec![1, 2, 1, 1]);
    }
}

#[test]
fn flatten_transpose_concat_gather_cast_identity() {
    let net = unary_model(13, "Flatten", vec![]).ok();
    assert_eq!(only_op(&net), &Op::Flatten { axis: 1 });

    let net = Model::new(13)
        .input(input("x", &[2, 3, 4]))
        .node(node("Transpose", &["x"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Transpose {
            perm: vec![2, 1, 0]
        }
    );
    assert_eq!(dims(&net, "y"), vec![4, 3, 2]);
    let net = Model::new(13)
        .input(input("x", &[2, 3, 4]))
        .node(node(
            "Transpose",
            &["x"],
            &["y"],
            vec![a_ints("perm", &[0, 2, 1])],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Transpose {
            perm: vec![0, 2, 1]
        }
    );

    let net = Model::new(13)
        .input(input("a", &[2, 3]))
        .input(input("b", &[2, 5]))
        .node(node("Concat", &["a", "b"], &["y"], vec![a_int("axis", -1)]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Concat { axis: -1 });
    assert_eq!(dims(&net, "y"), vec![2, 8]);

    let net = Model::new(13)
        .input(input("x", &[5, 3]))
        .init(ints("i", &[4, 0]))
        .node(node("Gather", &["x", "i"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Gather { axis: 0 });
    assert_eq!(dims(&net, "y"), vec![2, 3]);

    let net = unary_model(13, "Cast", vec![a_int("to", INT64 as i64)]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Cast {
            to: DataType::I64,
            saturate: true
        }
    );
    let net = unary_model(13, "Cast", vec![a_int("to", 11)]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Cast {
            to: DataType::F64,
            saturate: true
        }
    );
    let net = unary_model(13, "Cast", vec![a_int("to", 16)]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Cast {
            to: DataType::BF16,
            saturate: true
        }
    );
    let net = unary_model(19, "Cast", vec![a_int("to", 19), a_int("saturate", 0)]).ok();
    assert_eq!(
        only_op(&net),
        &Op::Cast {
            to: DataType::F8E5M2,
            saturate: false
        }
    );
    let err = unary_model(13, "Cast", vec![a_int("to", 8)])
        .import()
        .unwrap_err();
    assert!(err.unsupported_ops()[0].reason.contains("STRING"));

    let net = unary_model(13, "Identity", vec![]).ok();
    assert_eq!(only_op(&net), &Op::Identity);
}

#[test]
fn dropout_is_identity_in_inference() {
    let net = unary_model(13, "Dropout", vec![]).ok();
    assert_eq!(only_op(&net), &Op::Identity);
    let net = Model::new(10)
        .input(input("x", &[2]))
        .node(node(
            "Dropout",
            &["x"],
            &["y", "mask"],
            vec![a_float("ratio", 0.3)],
        ))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Identity);
    // The mask of a Dropout that drops nothing is all true.
    let net = Model::new(10)
        .input(input("x", &[2]))
        .node(node("Dropout", &["x"], &["y", "mask"], vec![]))
        .output("y")
        .output("mask")
        .ok();
    assert_eq!(dims(&net, "mask"), [2]);
    let mask = net.tensor(net.find_tensor("mask").unwrap());
    assert_eq!(mask.info.dtype, DataType::Bool);
    let err = Model::new(13)
        .input(input("x", &[2]))
        .init(TensorProtoBool::scalar("t", true))
        .node(node("Dropout", &["x", "", "t"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.unsupported_ops()[0].reason.contains("training_mode"));
}

/// Bool tensors for tests.
struct TensorProtoBool;
impl TensorProtoBool {
    fn scalar(name: &str, v: bool) -> backplane_onnx::proto::TensorProto {
        backplane_onnx::proto::TensorProto {
            name: Some(name.into()),
            data_type: Some(backplane_onnx::proto::tensor_proto::DataType::Bool as i32),
            int32_data: vec![i32::from(v)],
            ..Default::default()
        }
    }
}

#[test]
fn reshape_resolves_zero_and_minus_one() {
    let net = Model::new(13)
        .input(input("x", &[2, 3, 4]))
        .init(ints("s", &[0, -1]))
        .node(node("Reshape", &["x", "s"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Reshape { shape: vec![2, 12] });
    assert_eq!(
        only_layer(&net).inputs.len(),
        1,
        "the shape is not a layer input"
    );
    assert!(net.find_tensor("s").is_none(), "unused constant not added");

    let net = Model::new(14)
        .input(input("x", &[2, 3, 4]))
        .init(ints("s", &[-1, 0, 2]))
        .node(node("Reshape", &["x", "s"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Reshape {
            shape: vec![4, 3, 2]
        }
    );

    // allowzero=1: a 0 is a real zero-size dimension.
    let net = Model::new(14)
        .input(input("x", &[0, 3]))
        .init(ints("s", &[3, 0]))
        .node(node(
            "Reshape",
            &["x", "s"],
            &["y"],
            vec![a_int("allowzero", 1)],
        ))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Reshape { shape: vec![3, 0] });

    let err = Model::new(13)
        .input(input("x", &[2, 3]))
        .init(ints("s", &[-1, -1]))
        .node(node("Reshape", &["x", "s"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(err, backplane_onnx::OnnxError::InvalidModel(_)),
        "{err}"
    );

    let err = Model::new(13)
        .input(input("x", &[2, 3]))
        .input(value_info("s", INT64, Some(&[D::V(2)])))
        .node(named(node("Reshape", &["x", "s"], &["y"], vec![]), "r"))
        .output("y")
        .import()
        .unwrap_err();
    let u = &err.unsupported_ops()[0];
    assert_eq!(
        (u.node.as_str(), u.reason.as_str()),
        ("r", "dynamic shape (computed at run time)")
    );
}

#[test]
fn squeeze_unsqueeze_attr_before_13_input_after() {
    let net = Model::new(11)
        .input(input("x", &[2, 1, 3]))
        .node(node("Squeeze", &["x"], &["y"], vec![a_ints("axes", &[1])]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Squeeze { axes: vec![1] });
    let net = Model::new(13)
        .input(input("x", &[2, 1, 3]))
        .init(ints("a", &[-2]))
        .node(node("Squeeze", &["x", "a"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Squeeze { axes: vec![-2] });
    assert_eq!(dims(&net, "y"), vec![2, 3]);
    let net = Model::new(13)
        .input(input("x", &[2, 1, 3]))
        .node(node("Squeeze", &["x"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Squeeze { axes: vec![] });

    let net = Model::new(11)
        .input(input("x", &[2, 3]))
        .node(node(
            "Unsqueeze",
            &["x"],
            &["y"],
            vec![a_ints("axes", &[0, 3])],
        ))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Unsqueeze { axes: vec![0, 3] });
    assert_eq!(dims(&net, "y"), vec![1, 2, 3, 1]);
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .init(ints("a", &[1]))
        .node(node("Unsqueeze", &["x", "a"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Unsqueeze { axes: vec![1] });
}

#[test]
fn split_variants() {
    // opset 11: split attribute.
    let net = Model::new(11)
        .input(input("x", &[2, 6]))
        .node(node(
            "Split",
            &["x"],
            &["a", "b"],
            vec![a_int("axis", 1), a_ints("split", &[2, 4])],
        ))
        .output("a")
        .output("b")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Split {
            axis: 1,
            splits: vec![2, 4]
        }
    );
    assert_eq!(dims(&net, "b"), vec![2, 4]);
    assert_eq!(net.outputs().len(), 2);
    // opset 11: equal split by output count.
    let net = Model::new(11)
        .input(input("x", &[6]))
        .node(node("Split", &["x"], &["a", "b", "c"], vec![]))
        .output("a")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Split {
            axis: 0,
            splits: vec![2, 2, 2]
        }
    );
    // opset 13: split input.
    let net = Model::new(13)
        .input(input("x", &[6]))
        .init(ints("s", &[1, 5]))
        .node(node("Split", &["x", "s"], &["a", "b"], vec![]))
        .output("a")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Split {
            axis: 0,
            splits: vec![1, 5]
        }
    );
    // opset 18: num_outputs, last chunk smaller.
    let net = Model::new(18)
        .input(input("x", &[7]))
        .node(node(
            "Split",
            &["x"],
            &["a", "b", "c"],
            vec![a_int("num_outputs", 3)],
        ))
        .output("c")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Split {
            axis: 0,
            splits: vec![3, 3, 1]
        }
    );
    assert_eq!(dims(&net, "c"), vec![1]);
    // Bad splits are invalid models.
    assert!(Model::new(13)
        .input(input("x", &[6]))
        .init(ints("s", &[1, 4]))
        .node(node("Split", &["x", "s"], &["a", "b"], vec![]))
        .output("a")
        .import()
        .is_err());
    assert!(Model::new(11)
        .input(input("x", &[7]))
        .node(node("Split", &["x"], &["a", "b"], vec![]))
        .output("a")
        .import()
        .is_err());
}

#[test]
fn slice_attrs_before_10_inputs_after() {
    let net = Model::new(9)
        .input(input("x", &[4, 10]))
        .node(node(
            "Slice",
            &["x"],
            &["y"],
            vec![
                a_ints("starts", &[1]),
                a_ints("ends", &[-1]),
                a_ints("axes", &[1]),
            ],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Slice(SliceDesc {
            starts: vec![1],
            ends: vec![-1],
            axes: vec![1],
            steps: vec![]
        })
    );
    assert_eq!(dims(&net, "y"), vec![4, 8]);
    let net = Model::new(13)
        .input(input("x", &[4, 10]))
        .init(ints("st", &[0, 9]))
        .init(ints("en", &[2, i64::MIN]))
        .init(ints("ax", &[0, 1]))
        .init(ints("sp", &[1, -2]))
        .node(node(
            "Slice",
            &["x", "st", "en", "ax", "sp"],
            &["y"],
            vec![],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Slice(SliceDesc {
            starts: vec![0, 9],
            ends: vec![2, i64::MIN],
            axes: vec![0, 1],
            steps: vec![1, -2]
        })
    );
    assert_eq!(dims(&net, "y"), vec![2, 5]);
    // i32 parameters are accepted too, and axes may be omitted.
    let mut st = ints("st", &[1]);
    st.data_type = Some(INT32);
    st.int32_data = vec![1];
    st.int64_data.clear();
    let net = Model::new(13)
        .input(input("x", &[4, 10]))
        .init(st)
        .init(ints("en", &[3]))
        .node(node("Slice", &["x", "st", "en"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(dims(&net, "y"), vec![2, 10]);
    let err = Model::new(13)
        .input(input("x", &[4, 10]))
        .input(value_info("st", INT64, Some(&[D::V(1)])))
        .init(ints("en", &[3]))
        .node(node("Slice", &["x", "st", "en"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        err.unsupported_ops()[0].reason,
        "dynamic starts (computed at run time)"
    );
}

#[test]
fn softmax_before_13_coerces_to_2d() {
    // Last axis: a plain softmax.
    let net = Model::new(11)
        .input(input("x", &[2, 3]))
        .node(node("Softmax", &["x"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Softmax { axis: 1 });
    // Axis 1 of a rank-4 input: Flatten -> Softmax(1) -> Reshape back.
    let net = Model::new(11)
        .input(input("x", &[2, 3, 4, 5]))
        .node(named(node("Softmax", &["x"], &["y"], vec![]), "sm"))
        .output("y")
        .ok();
    assert_eq!(ops(&net), vec!["Flatten", "Softmax", "Reshape"]);
    assert_eq!(net.layers()[0].op, Op::Flatten { axis: 1 });
    assert_eq!(net.layers()[1].op, Op::Softmax { axis: 1 });
    assert_eq!(
        net.layers()[2].op,
        Op::Reshape {
            shape: vec![2, 3, 4, 5]
        }
    );
    assert_eq!(net.layers()[2].name, "sm");
    assert_eq!(dims(&net, "y"), vec![2, 3, 4, 5]);
    assert_eq!(
        net.tensor(net.layers()[0].outputs[0]).info.shape.dims(),
        &[2, 60]
    );
    // Opset 13: plain softmax, default axis -1.
    let net = Model::new(13)
        .input(input("x", &[2, 3, 4, 5]))
        .node(node("Softmax", &["x"], &["y"], vec![a_int("axis", 1)]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Softmax { axis: 1 });
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .node(node("Softmax", &["x"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Softmax { axis: -1 });
}

#[test]
fn layer_normalization() {
    let m = |outputs: &[&str], extra_out: Option<&str>| {
        let mut m = Model::new(17)
            .input(input("x", &[2, 3, 4]))
            .init(zeros("s", &[4]))
            .init(zeros("b", &[4]))
            .node(node(
                "LayerNormalization",
                &["x", "s", "b"],
                outputs,
                vec![a_float("epsilon", 1e-6)],
            ))
            .output("y");
        if let Some(o) = extra_out {
            m = m.output(o);
        }
        m
    };
    let net = m(&["y"], None).ok();
    assert_eq!(
        only_op(&net),
        &Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-6
        }
    );
    assert_eq!(only_layer(&net).inputs.len(), 3);
    let net = m(&["y", "mean", "inv"], None).ok();
    assert_eq!(net.layers().len(), 1);
    // A consumed Mean output: lowered to reductions and elementwise layers.
    let net = m(&["y", "mean"], Some("mean")).ok();
    assert!(net.layers().len() > 1);
    assert!(net.layers().iter().any(|l| l.op.name() == "ReduceMean"));
}

#[test]
fn reductions_attr_or_input_axes() {
    use ReduceKind::*;
    let kinds = [
        ("ReduceMean", Mean),
        ("ReduceSum", Sum),
        ("ReduceMax", Max),
        ("ReduceMin", Min),
        ("ReduceProd", Prod),
        ("ReduceL1", L1),
        ("ReduceL2", L2),
        ("ReduceLogSum", LogSum),
        ("ReduceLogSumExp", LogSumExp),
        ("ReduceSumSquare", SumSquare),
    ];
    for (name, kind) in kinds {
        // Attribute axes: opset 11 for all.
        let net = Model::new(11)
            .input(input("x", &[2, 3, 4]))
            .node(node(
                name,
                &["x"],
                &["y"],
                vec![a_ints("axes", &[1]), a_int("keepdims", 0)],
            ))
            .output("y")
            .ok();
        assert_eq!(
            only_op(&net),
            &Op::Reduce(ReduceDesc {
                kind,
                axes: vec![1],
                keepdims: false,
                noop_with_empty_axes: false
            }),
            "{name}"
        );
        assert_eq!(dims(&net, "y"), vec![2, 4]);
        // Input axes: opset 18 for all.
        let net = Model::new(18)
            .input(input("x", &[2, 3, 4]))
            .init(ints("ax", &[-1]))
            .node(node(name, &["x", "ax"], &["y"], vec![]))
            .output("y")
            .ok();
        assert_eq!(
            only_op(&net),
            &Op::Reduce(ReduceDesc {
                kind,
                axes: vec![-1],
                keepdims: true,
                noop_with_empty_axes: false
            }),
            "{name}"
        );
        assert_eq!(dims(&net, "y"), vec![2, 3, 1]);
    }
    // ReduceSum switched to input axes at 13, ReduceMean still uses the attribute there.
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .init(ints("ax", &[0]))
        .node(node(
            "ReduceSum",
            &["x", "ax"],
            &["y"],
            vec![a_int("noop_with_empty_axes", 1)],
        ))
        .output("y")
        .ok();
    let Op::Reduce(r) = only_op(&net) else {
        panic!()
    };
    assert_eq!((r.axes.clone(), r.noop_with_empty_axes), (vec![0], true));
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .node(node(
            "ReduceMean",
            &["x"],
            &["y"],
            vec![a_ints("axes", &[0])],
        ))
        .output("y")
        .ok();
    let Op::Reduce(r) = only_op(&net) else {
        panic!()
    };
    assert_eq!(r.axes, vec![0]);
    // No axes at all: reduce everything.
    let net = Model::new(18)
        .input(input("x", &[2, 3]))
        .node(node(
            "ReduceMax",
            &["x"],
            &["y"],
            vec![a_int("keepdims", 0)],
        ))
        .output("y")
        .ok();
    assert_eq!(dims(&net, "y"), Vec::<usize>::new());
}

#[test]
fn pad_variants() {
    // opset 2..10: attributes.
    let net = Model::new(7)
        .input(input("x", &[1, 2, 3]))
        .node(node(
            "Pad",
            &["x"],
            &["y"],
            vec![
                a_ints("pads", &[0, 0, 1, 0, 0, 2]),
                a_float("value", 1.5),
                a_str("mode", "constant"),
            ],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Pad(PadDesc {
            mode: PadMode::Constant,
            pads: vec![0, 0, 1, 0, 0, 2],
            value: 1.5
        })
    );
    assert_eq!(dims(&net, "y"), vec![1, 2, 6]);
    // opset 11: inputs.
    let net = Model::new(11)
        .input(input("x", &[1, 2, 3]))
        .init(ints("p", &[0, 1, 1, 0, 1, 1]))
        .init(tensor_f32("v", &[], &[-1.0]))
        .node(node(
            "Pad",
            &["x", "p", "v"],
            &["y"],
            vec![a_str("mode", "reflect")],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Pad(PadDesc {
            mode: PadMode::Reflect,
            pads: vec![0, 1, 1, 0, 1, 1],
            value: -1.0
        })
    );
    // opset 18: axes select which axes the pads apply to.
    let net = Model::new(18)
        .input(input("x", &[1, 2, 3]))
        .init(ints("p", &[2, 3]))
        .init(ints("ax", &[-1]))
        .node(node(
            "Pad",
            &["x", "p", "", "ax"],
            &["y"],
            vec![a_str("mode", "edge")],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Pad(PadDesc {
            mode: PadMode::Edge,
            pads: vec![0, 0, 2, 0, 0, 3],
            value: 0.0
        })
    );
    let net = Model::new(19)
        .input(input("x", &[1, 2, 3]))
        .init(ints("p", &[0, 0, 1, 0, 0, 1]))
        .node(node(
            "Pad",
            &["x", "p"],
            &["y"],
            vec![a_str("mode", "wrap")],
        ))
        .output("y")
        .ok();
    let Op::Pad(p) = only_op(&net) else { panic!() };
    assert_eq!(p.mode, PadMode::Wrap);
    let err = Model::new(13)
        .input(input("x", &[1, 2, 3]))
        .input(value_info("p", INT64, Some(&[D::V(6)])))
        .node(node("Pad", &["x", "p"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        err.unsupported_ops()[0].reason,
        "dynamic pads (computed at run time)"
    );
}

fn resize_desc(net: &backplane_core::Network) -> ResizeDesc {
    match only_op(net) {
        Op::Resize(r) => r.clone(),
        other => panic!("not a resize: {other:?}"),
    }
}

#[test]
fn resize_opset_10_and_upsample() {
    let net = Model::new(10)
        .input(input("x", &[1, 1, 2, 3]))
        .init(floats("sc", &[1.0, 1.0, 2.0, 1.5]))
        .node(node(
            "Resize",
            &["x", "sc"],
            &["y"],
            vec![a_str("mode", "linear")],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Linear);
    assert_eq!(r.coordinate_transform, CoordinateTransform::Asymmetric);
    assert_eq!(r.output_shape, vec![1, 1, 4, 4]);
    assert_eq!(r.scales, vec![1.0, 1.0, 2.0, 1.5]);
    assert_eq!(only_layer(&net).inputs.len(), 1);

    let net = Model::new(7)
        .input(input("x", &[1, 1, 2, 3]))
        .node(node(
            "Upsample",
            &["x"],
            &["y"],
            vec![a_floats("scales", &[1.0, 1.0, 2.0, 2.0])],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Nearest);
    assert_eq!(r.nearest_mode, NearestMode::Floor);
    assert_eq!(r.output_shape, vec![1, 1, 4, 6]);
    let net = Model::new(9)
        .input(input("x", &[1, 1, 2, 3]))
        .init(floats("sc", &[1.0, 1.0, 3.0, 3.0]))
        .node(node(
            "Upsample",
            &["x", "sc"],
            &["y"],
            vec![a_str("mode", "linear")],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Linear);
    assert_eq!(r.output_shape, vec![1, 1, 6, 9]);

    // Opset-10 nearest downsampling rounds up.
    let net = Model::new(10)
        .input(input("x", &[1, 1, 2, 4]))
        .init(floats("sc", &[1.0, 1.0, 0.6, 0.6]))
        .node(node("Resize", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.nearest_mode, NearestMode::Ceil);
    assert_eq!(r.output_shape, vec![1, 1, 1, 2]);
    let err = Model::new(10)
        .input(input("x", &[1, 1, 2, 4]))
        .init(floats("sc", &[1.0, 1.0, 2.0, 0.5]))
        .node(node("Resize", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.unsupported_ops()[0].reason.contains("shrinks"), "{err}");
}

#[test]
fn resize_opset_11_and_13() {
    // opset 11: roi and scales are required inputs; empty scales with sizes.
    let net = Model::new(11)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("roi", &[]))
        .init(floats("sc", &[]))
        .init(ints("sz", &[1, 1, 8, 2]))
        .node(node(
            "Resize",
            &["x", "roi", "sc", "sz"],
            &["y"],
            vec![
                a_str("mode", "cubic"),
                a_str("coordinate_transformation_mode", "align_corners"),
                a_float("cubic_coeff_a", -0.5),
                a_int("exclude_outside", 1),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Cubic);
    assert_eq!(r.coordinate_transform, CoordinateTransform::AlignCorners);
    assert_eq!(r.cubic_coeff_a, -0.5);
    assert!(r.exclude_outside);
    assert_eq!(r.output_shape, vec![1, 1, 8, 2]);
    assert_eq!(r.scales, vec![1.0, 1.0, 2.0, 0.5]);
    assert_eq!(dims(&net, "y"), vec![1, 1, 8, 2]);

    // opset 13: roi omitted, scales given; defaults half_pixel / round_prefer_floor.
    let net = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("sc", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![a_str("nearest_mode", "ceil")],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.mode, ResizeMode::Nearest);
    assert_eq!(r.coordinate_transform, CoordinateTransform::HalfPixel);
    assert_eq!(r.nearest_mode, NearestMode::Ceil);
    assert_eq!(r.output_shape, vec![1, 1, 2, 2]);

    let err = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .init(floats("sc", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![a_str(
                "coordinate_transformation_mode",
                "tf_crop_and_resize",
            )],
        ))
        .output("y")
        .import()
        .unwrap_err();
    // tf_crop_and_resize needs its roi input.
    assert!(err.to_string().contains("roi"), "{err}");
    let err = Model::new(13)
        .input(input("x", &[1, 1, 4, 4]))
        .input(value_info("sz", INT64, Some(&[D::V(4)])))
        .node(node("Resize", &["x", "", "", "sz"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        err.unsupported_ops()[0].reason,
        "dynamic sizes (computed at run time)"
    );
}

#[test]
fn resize_opset_18_19_axes_and_aspect_ratio() {
    let net = Model::new(18)
        .input(input("x", &[1, 3, 4, 8]))
        .init(ints("sz", &[8, 8]))
        .node(node(
            "Resize",
            &["x", "", "", "sz"],
            &["y"],
            vec![
                a_ints("axes", &[2, 3]),
                a_str("keep_aspect_ratio_policy", "not_larger"),
                a_str("mode", "linear"),
                a_str("coordinate_transformation_mode", "pytorch_half_pixel"),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.output_shape, vec![1, 3, 4, 8]);
    assert_eq!(
        r.coordinate_transform,
        CoordinateTransform::PytorchHalfPixel
    );
    let net = Model::new(18)
        .input(input("x", &[1, 3, 4, 8]))
        .init(ints("sz", &[8, 8]))
        .node(node(
            "Resize",
            &["x", "", "", "sz"],
            &["y"],
            vec![
                a_ints("axes", &[2, 3]),
                a_str("keep_aspect_ratio_policy", "not_smaller"),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.output_shape, vec![1, 3, 8, 16]);
    assert_eq!(r.scales, vec![1.0, 1.0, 2.0, 2.0]);
    let net = Model::new(19)
        .input(input("x", &[1, 3, 4, 8]))
        .init(floats("sc", &[0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![
                a_ints("axes", &[-1]),
                a_str("coordinate_transformation_mode", "half_pixel_symmetric"),
            ],
        ))
        .output("y")
        .ok();
    let r = resize_desc(&net);
    assert_eq!(r.output_shape, vec![1, 3, 4, 4]);
    assert_eq!(r.scales, vec![1.0, 1.0, 1.0, 0.5]);
    assert_eq!(
        r.coordinate_transform,
        CoordinateTransform::HalfPixelSymmetric
    );
    let net = Model::new(18)
        .input(input("x", &[1, 3, 4, 8]))
        .init(floats("sc", &[1.0, 1.0, 0.5, 0.5]))
        .node(node(
            "Resize",
            &["x", "", "sc"],
            &["y"],
            vec![a_int("antialias", 1)],
        ))
        .output("y")
        .ok();
    assert!(resize_desc(&net).antialias);
}

#[test]
fn constant_nodes_of_every_form() {
    // Each constant feeds an Add so that it becomes a network constant.
    let forms = vec![
        (
            "value",
            a_tensor("value", tensor_f32("", &[2], &[1.0, 2.0])),
            vec![2usize],
        ),
        ("value_float", a_float("value_float", 3.0), vec![]),
        (
            "value_floats",
            a_floats("value_floats", &[4.0, 5.0]),
            vec![2],
        ),
    ];
    for (what, attr, want_dims) in forms {
        let net = Model::new(13)
            .input(input("x", &[2]))
            .node(node("Constant", &[], &["c"], vec![attr]))
            .node(node("Add", &["x", "c"], &["y"], vec![]))
            .output("y")
            .ok();
        let c = net.find_tensor("c").unwrap_or_else(|| panic!("{what}"));
        assert_eq!(net.tensor(c).info.shape.dims(), &want_dims[..], "{what}");
        assert!(net.tensor(c).constant().is_some());
        assert_eq!(ops(&net), vec!["Add"]);
    }
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .node(node(
            "Constant",
            &[],
            &["s"],
            vec![a_ints("value_ints", &[3, 2])],
        ))
        .node(node("Reshape", &["x", "s"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Reshape { shape: vec![3, 2] });
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .init(ints("ax0", &[0]))
        .node(node("Constant", &[], &["a"], vec![a_int("value_int", 1)]))
        .node(node("Unsqueeze", &["a", "ax0"], &["a1"], vec![]))
        .node(node("Gather", &["x", "a1"], &["y"], vec![a_int("axis", 1)]))
        .output("y")
        .ok();
    // The Unsqueeze of a constant folds by itself (it only relabels the shape).
    assert_eq!(ops(&net), vec!["Gather"]);
    assert_eq!(dims(&net, "a1"), vec![1]);
}

#[test]
fn graph_output_that_is_a_constant_or_an_input() {
    let net = Model::new(13)
        .input(input("x", &[2, 3]))
        .node(node("Shape", &["x"], &["s"], vec![]))
        .output("s")
        .output("x")
        .ok();
    assert!(net.layers().is_empty());
    let s = net.outputs()[0];
    assert_eq!(net.tensor(s).name, "s");
    assert_eq!(
        net.tensor(s).constant().unwrap().as_slice::<i64>().unwrap(),
        &[2, 3]
    );
    assert_eq!(net.tensor(net.outputs()[1]).name, "x");
}

#[test]
fn unnamed_nodes_get_generated_layer_names() {
    let net = Model::new(13)
        .input(input("x", &[2]))
        .node(node("Relu", &["x"], &["a"], vec![]))
        .node(node("Relu", &["a"], &["b"], vec![]))
        .node(named(node("Relu", &["b"], &["c"], vec![]), "Relu_0"))
        .output("c")
        .ok();
    let names: Vec<&str> = net.layers().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, vec!["Relu_0", "Relu_1", "Relu_0_2"]);
}

#[test]
fn quantize_linear_low_precision_and_blocked() {
    use backplane_onnx::proto::TensorProto;
    // A packed int4 zero point [2, 2]: 1, -1, 0, 7 → bytes 0xF1, 0x70.
    let zp = TensorProto {
        name: Some("zp".into()),
        dims: vec![2, 2],
        data_type: Some(22),
        raw_data: Some(vec![0xF1, 0x70]),
        ..Default::default()
    };
    let net = Model::new(21)
        .input(input("x", &[2, 4]))
        .init(tensor_f32("s", &[2, 2], &[1.0, 2.0, 3.0, 4.0]))
        .init(zp)
        .node(node(
            "QuantizeLinear",
            &["x", "s", "zp"],
            &["y"],
            vec![a_int("axis", 1), a_int("block_size", 2)],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::QuantizeLinear {
            axis: 1,
            to: DataType::I4,
            block_size: 2,
            saturate: true
        }
    );
    // output_dtype picks a float8 type when there is no zero point; saturate=0 is kept.
    let net = Model::new(21)
        .input(input("x", &[2, 4]))
        .init(tensor_f32("s", &[], &[0.5]))
        .node(node(
            "QuantizeLinear",
            &["x", "s"],
            &["y"],
            vec![a_int("output_dtype", 19), a_int("saturate", 0)],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::QuantizeLinear {
            axis: 1,
            to: DataType::F8E5M2,
            block_size: 0,
            saturate: false
        }
    );
    // DequantizeLinear of a float8 input.
    let net = Model::new(21)
        .input(value_info("x", 17, Some(&[D::V(3)])))
        .init(tensor_f32("s", &[], &[2.0]))
        .node(node("DequantizeLinear", &["x", "s"], &["y"], vec![]))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::DequantizeLinear {
            axis: 1,
            to: DataType::F32,
            block_size: 0
        }
    );
    // A blocked scale of the wrong shape, and a type QuantizeLinear cannot produce.
    let err = Model::new(21)
        .input(input("x", &[2, 4]))
        .init(tensor_f32("s", &[2, 3], &[1.0; 6]))
        .node(node(
            "QuantizeLinear",
            &["x", "s"],
            &["y"],
            vec![a_int("axis", 1), a_int("block_size", 2)],
        ))
        .output("y")
        .import();
    assert!(err.is_err());
    let err = Model::new(21)
        .input(input("x", &[2, 4]))
        .init(tensor_f32("s", &[], &[1.0]))
        .node(node(
            "QuantizeLinear",
            &["x", "s"],
            &["y"],
            vec![a_int("output_dtype", 1)],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        err.unsupported_ops()[0].reason.contains("output_dtype 1"),
        "{err}"
    );
}

//! Data movement and shape ops: Flatten, Transpose, Concat, Gather, Cast, Reshape, Squeeze,
//! Split, Slice, Pad, Dropout.

use super::*;

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

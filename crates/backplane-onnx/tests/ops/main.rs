//! Operator translation, one test per operator family and opset variant.
//!
//! Convolutions, normalization, products and pooling are in `nn`, data movement and shape ops
//! in `movement`, Resize/Upsample in `resize`; the rest here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;
mod movement;
mod nn;
mod resize;

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
            saturate: true,
            requant: backplane_core::quant::Requantization::F32,
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
            saturate: false,
            requant: backplane_core::quant::Requantization::F32,
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

//! Translation of the loss functions, GridSample, LpPool, Einsum and the ops whose shapes
//! depend on constant index inputs (Compress).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::ops::*;
use backplane_core::Op;
use common::*;

const INT64: i32 = 7;

fn labels(name: &str, dims: &[i64]) -> backplane_onnx::proto::ValueInfoProto {
    let d: Vec<D> = dims.iter().map(|&v| D::V(v)).collect();
    value_info(name, INT64, Some(&d))
}

#[test]
fn softmax_cross_entropy_is_log_softmax_then_nll() {
    let model = |outputs: &[&str]| {
        let mut m = Model::new(13)
            .input(input("scores", &[2, 3, 4]))
            .input(labels("labels", &[2, 4]))
            .node(named(
                node(
                    "SoftmaxCrossEntropyLoss",
                    &["scores", "labels"],
                    outputs,
                    vec![a_str("reduction", "sum"), a_int("ignore_index", -1)],
                ),
                "sce",
            ));
        for o in outputs {
            m = m.output(o);
        }
        m
    };
    let net = model(&["loss"]).ok();
    assert_eq!(ops(&net), ["LogSoftmax", "NegativeLogLikelihoodLoss"]);
    assert_eq!(net.layers()[0].op, Op::LogSoftmax { axis: 1 });
    assert_eq!(
        net.layers()[1].op,
        Op::NegativeLogLikelihoodLoss(NllLossDesc {
            reduction: LossReduction::Sum,
            ignore_index: Some(-1),
        })
    );
    assert!(dims(&net, "loss").is_empty());
    // The log_prob output is the LogSoftmax's.
    let net = model(&["loss", "log_prob"]).ok();
    assert_eq!(
        ops(&net),
        ["LogSoftmax", "NegativeLogLikelihoodLoss", "Identity"]
    );
    assert_eq!(dims(&net, "log_prob"), [2, 3, 4]);
}

#[test]
fn nll_loss_reduction_none_keeps_the_target_shape() {
    let net = Model::new(13)
        .input(input("x", &[2, 3, 4]))
        .input(labels("t", &[2, 4]))
        .input(input("w", &[3]))
        .node(node(
            "NegativeLogLikelihoodLoss",
            &["x", "t", "w"],
            &["loss"],
            vec![a_str("reduction", "none")],
        ))
        .output("loss")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::NegativeLogLikelihoodLoss(NllLossDesc {
            reduction: LossReduction::None,
            ignore_index: None,
        })
    );
    assert_eq!(dims(&net, "loss"), [2, 4]);
    let err = Model::new(13)
        .input(input("x", &[2, 3]))
        .input(labels("t", &[2]))
        .node(node(
            "NegativeLogLikelihoodLoss",
            &["x", "t"],
            &["loss"],
            vec![a_str("reduction", "avg")],
        ))
        .output("loss")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("reduction"), "{err}");
}

#[test]
fn grid_sample_modes_by_opset() {
    let model = |opset: i64, attrs| {
        Model::new(opset)
            .input(input("x", &[1, 2, 4, 5]))
            .input(input("grid", &[1, 6, 7, 2]))
            .node(node("GridSample", &["x", "grid"], &["y"], attrs))
            .output("y")
    };
    let net = model(
        16,
        vec![a_str("mode", "bicubic"), a_int("align_corners", 1)],
    )
    .ok();
    assert_eq!(
        only_op(&net),
        &Op::GridSample(GridSampleDesc {
            mode: GridSampleMode::Cubic,
            padding: GridSamplePadding::Zeros,
            align_corners: true,
        })
    );
    assert_eq!(dims(&net, "y"), [1, 2, 6, 7]);
    let net = model(20, vec![a_str("padding_mode", "border")]).ok();
    assert_eq!(
        only_op(&net),
        &Op::GridSample(GridSampleDesc {
            mode: GridSampleMode::Linear,
            padding: GridSamplePadding::Border,
            align_corners: false,
        })
    );
    let err = model(20, vec![a_str("mode", "area")]).import().unwrap_err();
    assert!(err.to_string().contains("area"), "{err}");
}

#[test]
fn lp_pool_is_a_scaled_average_of_powers() {
    let net = Model::new(18)
        .input(input("x", &[1, 1, 4, 4]))
        .node(node(
            "LpPool",
            &["x"],
            &["y"],
            vec![a_ints("kernel_shape", &[2, 2]), a_int("p", 3)],
        ))
        .output("y")
        .ok();
    assert_eq!(ops(&net), ["Abs", "Pow", "AveragePool", "Mul", "Pow"]);
    match &net.layers()[2].op {
        Op::Pool(p) => assert!(p.count_include_pad && !p.ceil_mode),
        other => panic!("{other:?}"),
    }
    assert_eq!(dims(&net, "y"), [1, 1, 3, 3]);
}

#[test]
fn compress_with_a_constant_condition_is_a_gather() {
    let net = Model::new(11)
        .input(input("x", &[3, 2]))
        .init(tensor_i64("condition", &[3], &[0, 1, 1]))
        .node(node(
            "Compress",
            &["x", "condition"],
            &["y"],
            vec![a_int("axis", 0)],
        ))
        .output("y")
        .ok();
    assert_eq!(only_op(&net), &Op::Gather { axis: 0 });
    assert_eq!(dims(&net, "y"), [2, 2]);
}

#[test]
fn einsum_keeps_its_equation_and_infers_the_shape() {
    let net = Model::new(12)
        .input(input("a", &[5, 2, 3]))
        .input(input("b", &[5, 3, 4]))
        .node(node(
            "Einsum",
            &["a", "b"],
            &["y"],
            vec![a_str("equation", "bij, bjk -> bik")],
        ))
        .output("y")
        .ok();
    assert_eq!(
        only_op(&net),
        &Op::Einsum(EinsumDesc {
            equation: "bij, bjk -> bik".into()
        })
    );
    assert_eq!(dims(&net, "y"), [5, 2, 4]);
    let err = Model::new(12)
        .input(input("a", &[2, 3]))
        .node(node(
            "Einsum",
            &["a"],
            &["y"],
            vec![a_str("equation", "ij->ik")],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("output label"), "{err}");
}

//! Convolutions, batch normalization, MatMul/Gemm and pooling.

use super::*;

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

use super::*;
use crate::ops::*;
use crate::{Quantization, Shape, TensorInfo};

/// One example of each op [`ext_to_attributes`] handles (for the round-trip test).
fn ext_examples() -> Vec<Op> {
    let mut v: Vec<Op> = MATH
        .iter()
        .map(|&m| Op::Math(m))
        .chain(BINARY_EXT.iter().map(|&b| Op::BinaryExt(b)))
        .collect();
    v.extend([
        Op::Permute {
            from: vec![0, 1, 2, 3],
            to: vec![0, 2, 3, 1],
        },
        Op::Where,
        Op::ArgReduce(ArgReduceDesc {
            max: false,
            axis: -1,
            keepdims: true,
            select_last_index: true,
        }),
        Op::Expand { shape: vec![2, 3] },
        Op::Tile {
            repeats: vec![1, 2],
        },
        Op::Trilu {
            upper: false,
            k: -2,
        },
        Op::GatherElements { axis: 1 },
        Op::GatherND { batch_dims: 1 },
        Op::ScatterND {
            reduction: ScatterReduction::Mul,
        },
        Op::ScatterElements {
            axis: 0,
            reduction: ScatterReduction::Max,
        },
        Op::OneHot { axis: -1, depth: 5 },
        Op::TopK(TopKDesc {
            axis: 1,
            k: 3,
            largest: false,
            sorted: true,
        }),
        Op::CumSum {
            axis: 0,
            exclusive: true,
            reverse: false,
        },
        Op::LogSoftmax { axis: -1 },
        Op::Hardmax { axis: 0 },
        Op::InstanceNormalization { epsilon: 1e-5 },
        Op::QuantizeLinear {
            axis: 1,
            to: crate::DataType::I8,
            block_size: 0,
            saturate: true,
            requant: crate::quant::Requantization::FixedPoint,
        },
        Op::QuantizeLinear {
            axis: 0,
            to: crate::DataType::F8E5M2,
            block_size: 4,
            saturate: false,
            requant: crate::quant::Requantization::F32,
        },
        Op::DequantizeLinear {
            axis: 0,
            to: crate::DataType::F16,
            block_size: 2,
        },
        Op::DynamicQuantizeLinear,
        Op::Lrn {
            alpha: 1e-4,
            beta: 0.75,
            bias: 1.0,
            size: 3,
        },
        Op::NegativeLogLikelihoodLoss(crate::ops::NllLossDesc {
            reduction: crate::ops::LossReduction::Sum,
            ignore_index: Some(-1),
        }),
        Op::NegativeLogLikelihoodLoss(crate::ops::NllLossDesc::default()),
        Op::GridSample(crate::ops::GridSampleDesc {
            mode: crate::ops::GridSampleMode::Cubic,
            padding: crate::ops::GridSamplePadding::Reflection,
            align_corners: true,
        }),
        Op::Einsum(crate::ops::EinsumDesc {
            equation: "...ij,jk->...ik".into(),
        }),
        Op::Det,
        Op::Rnn(crate::ops::RnnDesc {
            kind: crate::ops::RnnKind::Gru,
            direction: crate::ops::RnnDirection::Bidirectional,
            hidden_size: 5,
            activations: vec![
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::Sigmoid),
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::HardSigmoid),
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::LeakyRelu),
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::Tanh),
            ],
            clip: Some(2.5),
            linear_before_reset: true,
            input_forget: false,
            batch_first: true,
            outputs: [false, true, false],
        }),
        Op::Rnn(crate::ops::RnnDesc {
            kind: crate::ops::RnnKind::Lstm,
            direction: crate::ops::RnnDirection::Reverse,
            hidden_size: 3,
            activations: vec![
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::Sigmoid),
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::Tanh),
                crate::ops::RnnActivation::new(crate::ops::RnnActivationKind::Relu),
            ],
            clip: None,
            linear_before_reset: false,
            input_forget: true,
            batch_first: false,
            outputs: [true, true, true],
        }),
    ]);
    v.extend(crate::ops::flat::examples());
    v.extend(crate::ops::image::examples());
    v
}

fn window() -> Window {
    Window {
        kernel: vec![3, 3],
        strides: vec![2, 1],
        dilations: vec![1, 2],
        pads: vec![1, 0, 1, 0],
        auto_pad: AutoPad::SameLower,
    }
}

/// One value of every variant (and of every unit-like sub-variant).
fn every_op() -> Vec<Op> {
    let mut ops = vec![
        Op::Identity,
        Op::MemCopy,
        Op::MemImport,
        Op::Unary(UnaryOp::Relu),
        Op::Unary(UnaryOp::LeakyRelu { alpha: 0.125 }),
        Op::Unary(UnaryOp::Clip {
            min: -1.5,
            max: 6.0,
        }),
        Op::Unary(UnaryOp::Sigmoid),
        Op::Unary(UnaryOp::Tanh),
        Op::Unary(UnaryOp::Erf),
        Op::Unary(UnaryOp::Gelu {
            tanh_approximation: true,
        }),
        Op::Unary(UnaryOp::Gelu {
            tanh_approximation: false,
        }),
        Op::Unary(UnaryOp::Sqrt),
        Op::Unary(UnaryOp::Exp),
        Op::Unary(UnaryOp::Log),
        Op::Unary(UnaryOp::Neg),
        Op::Unary(UnaryOp::Abs),
        Op::Conv(ConvDesc {
            window: window(),
            group: 2,
        }),
        Op::ConvTranspose(ConvTransposeDesc {
            window: window(),
            group: 1,
            output_padding: vec![1, 0],
            output_shape: vec![9, 9],
        }),
        Op::BatchNormalization { epsilon: 1e-5 },
        Op::MatMul,
        Op::Gemm(GemmDesc {
            alpha: 0.5,
            beta: 2.0,
            trans_a: true,
            trans_b: false,
        }),
        Op::Pool(PoolDesc {
            kind: PoolKind::Max,
            window: window(),
            ceil_mode: true,
            count_include_pad: false,
        }),
        Op::Pool(PoolDesc {
            kind: PoolKind::Average,
            window: Window::default(),
            ceil_mode: false,
            count_include_pad: true,
        }),
        Op::GlobalPool(PoolKind::Max),
        Op::GlobalPool(PoolKind::Average),
        Op::IntegerAveragePool(PoolDesc {
            kind: PoolKind::Average,
            window: window(),
            ceil_mode: false,
            count_include_pad: false,
        }),
        Op::Lookup,
        Op::Flatten { axis: -1 },
        Op::Reshape { shape: vec![1, 64] },
        Op::Transpose {
            perm: vec![0, 2, 3, 1],
        },
        Op::Squeeze { axes: vec![] },
        Op::Unsqueeze { axes: vec![0, -1] },
        Op::Concat { axis: 1 },
        Op::Split {
            axis: 0,
            splits: vec![2, 3],
        },
        Op::Slice(SliceDesc {
            starts: vec![0, -3],
            ends: vec![i64::MAX, -1],
            axes: vec![0, 2],
            steps: vec![1, -2],
        }),
        Op::Gather { axis: 2 },
        Op::Softmax { axis: -1 },
        Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-6,
        },
        Op::Pad(PadDesc {
            mode: PadMode::Reflect,
            pads: vec![0, 1, 0, -1],
            value: 0.1,
        }),
        Op::Resize(ResizeDesc {
            mode: ResizeMode::Cubic,
            coordinate_transform: CoordinateTransform::PytorchHalfPixel,
            nearest_mode: NearestMode::Ceil,
            cubic_coeff_a: -0.75,
            exclude_outside: true,
            output_shape: vec![1, 3, 8, 8],
            scales: vec![1.0, 1.0, 2.0, 2.0],
            antialias: false,
            roi: vec![],
            extrapolation_value: 0.0,
        }),
        Op::Resize(ResizeDesc {
            mode: ResizeMode::Linear,
            coordinate_transform: CoordinateTransform::TfCropAndResize,
            nearest_mode: NearestMode::RoundPreferFloor,
            cubic_coeff_a: -0.5,
            exclude_outside: false,
            output_shape: vec![1, 1, 3, 3],
            scales: vec![1.0, 1.0, 0.75, 0.75],
            antialias: true,
            roi: vec![0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 0.6, 0.8],
            extrapolation_value: 10.0,
        }),
        Op::Custom(CustomOp {
            domain: "Acme".into(),
            op_type: "FusedConvRelu".into(),
            attributes: vec![
                ("k".into(), AttrValue::Int(3)),
                ("f".into(), AttrValue::Float(0.5)),
                ("d".into(), AttrValue::Double(0.25)),
                ("s".into(), AttrValue::String("x".into())),
                ("is".into(), AttrValue::Ints(vec![1, 2])),
                ("fs".into(), AttrValue::Floats(vec![1.5])),
            ],
            outputs: vec![
                TensorInfo::new(DataType::F32, vec![1, 8]),
                TensorInfo {
                    dtype: DataType::U8,
                    shape: Shape::new(vec![2]),
                    quant: Quantization::PerTensor {
                        scale: 0.5,
                        zero_point: 128,
                    },
                },
                TensorInfo {
                    dtype: DataType::I8,
                    shape: Shape::new(vec![2, 3]),
                    quant: Quantization::PerAxis {
                        axis: 1,
                        scales: vec![0.1, 0.2, 0.3],
                        zero_points: vec![0, 1, -1],
                    },
                },
            ],
            payload: None,
        }),
    ];
    for b in BINARY {
        ops.push(Op::Binary(b));
    }
    for kind in REDUCE {
        ops.push(Op::Reduce(ReduceDesc {
            kind,
            axes: vec![1, -1],
            keepdims: true,
            noop_with_empty_axes: false,
        }));
    }
    for to in DataType::ALL {
        ops.push(Op::Cast { to, saturate: true });
    }
    ops.push(Op::Cast {
        to: DataType::F8E4M3Fn,
        saturate: false,
    });
    for mode in [PadMode::Constant, PadMode::Edge, PadMode::Wrap] {
        ops.push(Op::Pad(PadDesc {
            mode,
            pads: vec![1, 1],
            value: -2.0,
        }));
    }
    ops
}

/// Fails to compile when a variant is added without a case above (and an arm in this file).
fn covered(op: &Op) -> bool {
    match op {
        Op::Identity
        | Op::MemCopy
        | Op::MemImport
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Conv(_)
        | Op::ConvTranspose(_)
        | Op::BatchNormalization { .. }
        | Op::MatMul
        | Op::Gemm(_)
        | Op::Pool(_)
        | Op::GlobalPool(_)
        | Op::IntegerAveragePool(_)
        | Op::Lookup
        | Op::Flatten { .. }
        | Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice(_)
        | Op::Gather { .. }
        | Op::Softmax { .. }
        | Op::LayerNormalization { .. }
        | Op::Reduce(_)
        | Op::Cast { .. }
        | Op::Pad(_)
        | Op::Resize(_)
        | Op::Math(_)
        | Op::BinaryExt(_)
        | Op::Where
        | Op::ArgReduce(_)
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::Trilu { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::ScatterND { .. }
        | Op::ScatterElements { .. }
        | Op::OneHot { .. }
        | Op::TopK(_)
        | Op::CumSum { .. }
        | Op::LogSoftmax { .. }
        | Op::Hardmax { .. }
        | Op::InstanceNormalization { .. }
        | Op::Lrn { .. }
        | Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. }
        | Op::DynamicQuantizeLinear
        | Op::Permute { .. }
        | Op::If(_)
        | Op::Loop(_)
        | Op::Scan(_)
        | Op::NegativeLogLikelihoodLoss(_)
        | Op::GridSample(_)
        | Op::Einsum(_)
        | Op::Det
        | Op::Rnn(_)
        | Op::MaxPoolWithIndices(_)
        | Op::MaxUnpool(_)
        | Op::Optimizer(_)
        | Op::TfIdfVectorizer(_)
        | Op::TreeEnsemble(_)
        | Op::Dft(_)
        | Op::Stft(_)
        | Op::Col2Im(_)
        | Op::AffineGrid(_)
        | Op::RoiAlign(_)
        | Op::DeformConv(_)
        | Op::Custom(_) => true,
    }
}

#[test]
fn every_op_round_trips_through_attributes() {
    for op in every_op().into_iter().chain(ext_examples()) {
        assert!(covered(&op));
        let (op_type, attrs) = op.to_attributes();
        let back = Op::from_attributes(&op_type, &attrs)
            .unwrap_or_else(|e| panic!("{op:?} as {op_type} {attrs:?}: {e}"));
        assert_eq!(back, op, "{op_type} {attrs:?}");
    }
}

#[test]
fn standard_ops_use_onnx_names() {
    let (t, a) = Op::Gemm(GemmDesc::default()).to_attributes();
    assert_eq!(t, "Gemm");
    let names: Vec<&str> = a.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "transA", "transB"]);
    let (t, a) = Op::Cast {
        to: DataType::I64,
        saturate: true,
    }
    .to_attributes();
    assert_eq!((t.as_str(), &a[0].1), ("Cast", &AttrValue::Int(7)));
    // Attributes written before `saturate` existed read as ONNX's default.
    assert_eq!(
        Op::from_attributes("Cast", &[("to".into(), AttrValue::Int(17))]).unwrap(),
        Op::Cast {
            to: DataType::F8E4M3Fn,
            saturate: true
        }
    );
    assert_eq!(
        Op::Pool(PoolDesc {
            kind: PoolKind::Average,
            window: Window::default(),
            ceil_mode: false,
            count_include_pad: false
        })
        .to_attributes()
        .0,
        "AveragePool"
    );
}

#[test]
fn bad_attributes_are_errors_naming_what_is_wrong() {
    let err = Op::from_attributes("NoSuchOp", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("NoSuchOp"), "{err}");
    let err = Op::from_attributes("Flatten", &[]).unwrap_err().to_string();
    assert!(err.contains("'axis' is missing"), "{err}");
    let err = Op::from_attributes("Flatten", &[("axis".into(), AttrValue::Float(1.0))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("must be an integer"), "{err}");
    let err = Op::from_attributes("Reshape", &[("shape".into(), AttrValue::Ints(vec![-1]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid value '-1'"), "{err}");
    // 8 is STRING, which backplane has no type for.
    let err = Op::from_attributes("Cast", &[("to".into(), AttrValue::Int(8))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("'to'"), "{err}");
}

#[test]
fn custom_ops_keep_domain_attributes_and_outputs() {
    let op = Op::Custom(CustomOp {
        domain: String::new(),
        op_type: "Thing".into(),
        attributes: vec![],
        outputs: vec![],
        payload: None,
    });
    let (t, a) = op.to_attributes();
    assert_eq!(t, ":Thing");
    assert!(a.is_empty());
    assert_eq!(Op::from_attributes(&t, &a).unwrap(), op);
}

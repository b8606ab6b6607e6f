//! Layer support: which layers CpuRef runs, and a precise reason for those it does not.
//!
//! The answer is [`plan_layer`]'s: the plan ([`crate::ops::plan`]) that the workload factory
//! builds from and [`crate::evaluate`] runs, so "supported" and "runs" cannot disagree, and a
//! kernel only ever sees combinations the plan lists.

use crate::ops::{plan, Plan};
use backplane_backend_api::{LayerDesc, LayerSupport, Support};
use backplane_core::{Op, TensorInfo};

/// CpuRef's layer-support oracle.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuRefLayerSupport;

impl LayerSupport for CpuRefLayerSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match plan_layer(layer) {
            Ok(_) => Support::Supported,
            Err(reason) => Support::no(reason),
        }
    }

    fn answer_holds_for_every_shape(&self, layer: &LayerDesc) -> bool {
        holds_for_every_shape(&layer.op)
    }
}

/// Whether [`plan_layer`]'s answer for a layer of this operator holds at every shape of the
/// layer (same operator, input data types and ranks). CpuRef's plans check input types and
/// quantization, and that the declared outputs are what the op's shape inference gives (the
/// importer declared them with that inference); no plan reads a dimension or a constant. The
/// builtin backend's operators and other backends' custom operators are refused whatever
/// their shapes. Every operator is named, so a new one must be decided here.
pub(crate) fn holds_for_every_shape(op: &Op) -> bool {
    match op {
        // Refused at every shape.
        Op::MemCopy | Op::MemImport | Op::Permute { .. } => true,
        // Others' custom operators are refused at every shape; CpuRef's integer layers check
        // their inputs' shapes against their descriptions.
        Op::Custom(c) => c.domain != crate::CPU_REF_ID,
        Op::If(_) | Op::Loop(_) | Op::Scan(_) => true,
        // Types only.
        Op::Identity | Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } => true,
        Op::Unsqueeze { .. } | Op::Transpose { .. } | Op::Concat { .. } | Op::Split { .. } => true,
        Op::Slice(_) | Op::Gather { .. } | Op::Pad(_) | Op::Expand { .. } | Op::Tile { .. } => true,
        Op::Unary(_) | Op::Binary(_) | Op::Math(_) | Op::BinaryExt(_) | Op::Where => true,
        Op::Cast { .. } | Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::Hardmax { .. } => true,
        Op::LayerNormalization { .. } | Op::BatchNormalization { .. } => true,
        Op::InstanceNormalization { .. } | Op::Lrn { .. } => true,
        Op::MatMul | Op::Gemm(_) | Op::Einsum(_) | Op::Det => true,
        Op::Conv(_) | Op::ConvTranspose(_) | Op::DeformConv(_) | Op::Col2Im(_) => true,
        Op::Pool(_) | Op::GlobalPool(_) | Op::MaxPoolWithIndices(_) | Op::MaxUnpool(_) => true,
        Op::IntegerAveragePool(_) | Op::Lookup => true,
        Op::Reduce(_) | Op::ArgReduce(_) | Op::CumSum { .. } | Op::TopK(_) => true,
        Op::Resize(_) | Op::GridSample(_) | Op::AffineGrid(_) | Op::RoiAlign(_) => true,
        Op::Trilu { .. } | Op::GatherElements { .. } | Op::GatherND { .. } => true,
        Op::ScatterND { .. } | Op::ScatterElements { .. } | Op::OneHot { .. } => true,
        Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => true,
        Op::DynamicQuantizeLinear | Op::NegativeLogLikelihoodLoss(_) => true,
        Op::Rnn(_) | Op::Optimizer(_) | Op::TfIdfVectorizer(_) | Op::TreeEnsemble(_) => true,
        Op::Dft(_) | Op::Stft(_) => true,
    }
}

/// Plan `layer`: its op's plan, checked against the layer's inputs and declared outputs; or
/// the reason CpuRef cannot run it.
pub(crate) fn plan_layer(layer: &LayerDesc) -> Result<Plan, String> {
    let inputs: Vec<&TensorInfo> = layer.inputs.iter().collect();
    let (plan, inferred) = check(&layer.op, &inputs)?;
    if layer.outputs.len() != inferred.len() {
        return Err(format!(
            "{} has {} outputs declared but produces {}",
            layer.op.name(),
            layer.outputs.len(),
            inferred.len()
        ));
    }
    for (slot, (declared, computed)) in layer.outputs.iter().zip(&inferred).enumerate() {
        if !declared.same_layout(computed) {
            return Err(format!(
                "{} output {slot} is declared as {declared} but CpuRef computes {computed}",
                layer.op.name()
            ));
        }
    }
    Ok(plan)
}

/// The plan of `op` on inputs described by `inputs` and its output descriptions (from shape
/// inference), or the reason CpuRef cannot run it.
pub(crate) fn check(op: &Op, inputs: &[&TensorInfo]) -> Result<(Plan, Vec<TensorInfo>), String> {
    let plan = plan::plan(op)?;
    let outputs = plan.check(op, inputs)?;
    if let Op::Custom(c) = op {
        // CpuRef's integer layers: their shapes agree with their descriptions.
        crate::ops::qlinear::kernel(c, inputs).map(drop)?;
    }
    Ok((plan, outputs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::test_util::{iota, tensor};
    use crate::{evaluate, CpuRefBackend};
    use backplane_backend_api::Backend;
    use backplane_core::ops::{
        AutoPad, ConvDesc, CustomOp, GemmDesc, NearestMode, PoolDesc, PoolKind, ReduceDesc,
        ReduceKind, ResizeDesc, Window,
    };
    use backplane_core::ops::{BinaryOp, ResizeMode, UnaryOp};
    use backplane_core::Tensor;
    use backplane_core::{DataType, Quantization};

    fn desc(op: Op, inputs: Vec<TensorInfo>) -> LayerDesc {
        let refs: Vec<&TensorInfo> = inputs.iter().collect();
        let outputs = op.infer(&refs).unwrap_or_default();
        LayerDesc {
            name: "layer".to_string(),
            op,
            constants: vec![None; inputs.len()],
            inputs,
            outputs,
        }
    }

    fn reason(s: Support) -> String {
        match s {
            Support::Unsupported(r) => r,
            Support::Supported => panic!("expected unsupported"),
        }
    }

    #[test]
    fn unsupported_dtype_names_the_op_input_and_type() {
        let support = CpuRefBackend.layer_support();
        let conv = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![1],
                ..Window::default()
            },
            group: 1,
        });
        let x = TensorInfo::new(DataType::F16, vec![1, 1, 4]);
        let w = TensorInfo::new(DataType::F16, vec![1, 1, 1]);
        let r = reason(support.is_layer_supported(&desc(conv.clone(), vec![x, w.clone()])));
        assert!(r.contains("Conv"), "{r}");
        assert!(r.contains("input 0 (X)"), "{r}");
        assert!(r.contains("f16"), "{r}");
        assert!(r.contains("f32 only"), "{r}");
        // f32 data with f16 weights: the reason names the weights.
        let x32 = TensorInfo::new(DataType::F32, vec![1, 1, 4]);
        let r = reason(support.is_layer_supported(&desc(conv.clone(), vec![x32.clone(), w])));
        assert!(r.contains("input 1 (W)") && r.contains("f16"), "{r}");
        let w32 = TensorInfo::new(DataType::F32, vec![1, 1, 1]);
        assert!(support
            .is_layer_supported(&desc(conv, vec![x32, w32]))
            .is_supported());
        // Integer Exp, u8 Neg, bool Reduce.
        let i = TensorInfo::new(DataType::I32, vec![3]);
        let r = reason(support.is_layer_supported(&desc(Op::Unary(UnaryOp::Exp), vec![i])));
        assert!(r.contains("Exp") && r.contains("i32"), "{r}");
        let u = TensorInfo::new(DataType::U8, vec![3]);
        let r = reason(support.is_layer_supported(&desc(Op::Unary(UnaryOp::Neg), vec![u])));
        assert!(
            r.contains("u8") && r.contains("f32, f16, f64, i8, i16, i32, i64"),
            "{r}"
        );
        let b = TensorInfo::new(DataType::Bool, vec![3]);
        let sum = Op::Reduce(ReduceDesc {
            kind: ReduceKind::Sum,
            axes: vec![],
            keepdims: true,
            noop_with_empty_axes: false,
        });
        let r = reason(support.is_layer_supported(&desc(sum, vec![b])));
        assert!(r.contains("ReduceSum") && r.contains("bool"), "{r}");
    }

    #[test]
    fn other_rejections_explain_themselves() {
        let support = CpuRefLayerSupport;
        let custom = Op::Custom(CustomOp {
            domain: "com.example".to_string(),
            op_type: "FusedThing".to_string(),
            attributes: vec![],
            outputs: vec![],
            payload: None,
        });
        let r = reason(support.is_layer_supported(&desc(custom, vec![])));
        assert!(r.contains("FusedThing") && r.contains("com.example"), "{r}");
        // Quantized arithmetic is refused, quantized data movement is fine.
        let mut q = TensorInfo::new(DataType::U8, vec![4]);
        q.quant = Quantization::PerTensor {
            scale: 0.5,
            zero_point: 3,
        };
        let r =
            reason(support.is_layer_supported(&desc(Op::Unary(UnaryOp::Relu), vec![q.clone()])));
        assert!(r.contains("quantized"), "{r}");
        assert!(support
            .is_layer_supported(&desc(Op::Transpose { perm: vec![0] }, vec![q]))
            .is_supported());
        // Invalid shapes: the shape-inference message.
        let a = TensorInfo::new(DataType::F32, vec![2, 3]);
        let r = reason(support.is_layer_supported(&desc(Op::MatMul, vec![a.clone(), a.clone()])));
        assert!(r.contains("inner dimensions"), "{r}");
        // Declared outputs that disagree with inference.
        let mut d = desc(Op::Identity, vec![a]);
        d.outputs = vec![TensorInfo::new(DataType::F32, vec![3, 2])];
        let r = reason(support.is_layer_supported(&d));
        assert!(r.contains("declared"), "{r}");
    }

    /// One valid example of every op, with small inputs of a given type where that makes
    /// sense: support and the kernels must agree on what runs.
    fn examples(dt: DataType) -> Vec<(Op, Vec<Tensor>)> {
        let x = || iota(dt, &[1, 2, 3]);
        let pos = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            tensor(dt, shape, &(1..=n).map(|v| v as f64).collect::<Vec<_>>())
        };
        let window = |kernel: Vec<usize>| Window {
            kernel,
            strides: vec![],
            dilations: vec![],
            pads: vec![],
            auto_pad: AutoPad::NotSet,
        };
        let reduce = |kind| {
            Op::Reduce(ReduceDesc {
                kind,
                axes: vec![-1],
                keepdims: false,
                noop_with_empty_axes: false,
            })
        };
        let resize = |mode| {
            Op::Resize(ResizeDesc {
                mode,
                coordinate_transform: backplane_core::ops::CoordinateTransform::HalfPixel,
                nearest_mode: NearestMode::RoundPreferFloor,
                cubic_coeff_a: -0.75,
                exclude_outside: false,
                output_shape: vec![1, 2, 6],
                scales: vec![1.0, 1.0, 2.0],
                antialias: false,
                roi: vec![],
                extrapolation_value: 0.0,
            })
        };
        let mut v = vec![
            (Op::Identity, vec![x()]),
            (Op::Reshape { shape: vec![6] }, vec![x()]),
            (
                Op::Transpose {
                    perm: vec![2, 1, 0],
                },
                vec![x()],
            ),
            (
                Op::Cast {
                    to: DataType::F32,
                    saturate: true,
                },
                vec![x()],
            ),
            (
                Op::Gather { axis: 1 },
                vec![x(), Tensor::from_vec(vec![1], vec![1i64]).unwrap()],
            ),
            (Op::Softmax { axis: -1 }, vec![x()]),
            (Op::GlobalPool(PoolKind::Max), vec![x()]),
            (
                Op::Pool(PoolDesc {
                    kind: PoolKind::Average,
                    window: window(vec![2]),
                    ceil_mode: false,
                    count_include_pad: false,
                }),
                vec![x()],
            ),
            (
                Op::Conv(ConvDesc {
                    window: window(vec![1]),
                    group: 1,
                }),
                vec![x(), pos(&[1, 2, 1])],
            ),
            (Op::MatMul, vec![pos(&[2, 3]), pos(&[3, 2])]),
            (
                Op::Gemm(GemmDesc::default()),
                vec![pos(&[2, 3]), pos(&[3, 2])],
            ),
            (
                Op::BatchNormalization { epsilon: 0.0 },
                vec![x(), pos(&[2]), pos(&[2]), pos(&[2]), pos(&[2])],
            ),
            (
                Op::LayerNormalization {
                    axis: -1,
                    epsilon: 1e-5,
                },
                vec![x(), pos(&[3])],
            ),
            (resize(ResizeMode::Nearest), vec![x()]),
            (resize(ResizeMode::Linear), vec![x()]),
            (resize(ResizeMode::Cubic), vec![x()]),
        ];
        for kind in [
            ReduceKind::Sum,
            ReduceKind::Mean,
            ReduceKind::Max,
            ReduceKind::Min,
            ReduceKind::Prod,
            ReduceKind::L1,
            ReduceKind::L2,
            ReduceKind::LogSum,
            ReduceKind::LogSumExp,
            ReduceKind::SumSquare,
        ] {
            v.push((reduce(kind), vec![pos(&[2, 3])]));
        }
        for u in [
            UnaryOp::Relu,
            UnaryOp::LeakyRelu { alpha: 0.1 },
            UnaryOp::Clip { min: 0.0, max: 1.0 },
            UnaryOp::Sigmoid,
            UnaryOp::Tanh,
            UnaryOp::Erf,
            UnaryOp::Gelu {
                tanh_approximation: false,
            },
            UnaryOp::Sqrt,
            UnaryOp::Exp,
            UnaryOp::Log,
            UnaryOp::Neg,
            UnaryOp::Abs,
        ] {
            v.push((Op::Unary(u), vec![x()]));
        }
        for b in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Pow,
            BinaryOp::Max,
            BinaryOp::Min,
        ] {
            v.push((Op::Binary(b), vec![x(), pos(&[3])]));
        }
        v
    }

    #[test]
    fn support_and_kernels_agree_for_every_op_and_dtype() {
        let support = CpuRefLayerSupport;
        for dt in DataType::ALL {
            for (op, inputs) in examples(dt) {
                let infos: Vec<TensorInfo> = inputs.iter().map(|t| t.info().clone()).collect();
                let refs: Vec<&Tensor> = inputs.iter().collect();
                let answer = support.is_layer_supported(&desc(op.clone(), infos));
                let result = evaluate(&op, &refs);
                assert_eq!(
                    answer.is_supported(),
                    result.is_ok(),
                    "{} on {dt}: support says {answer:?}, evaluate gives {result:?}",
                    op.name()
                );
            }
        }
    }

    #[test]
    fn supported_type_matrix() {
        // Spot checks of the documented matrix.
        let support = CpuRefLayerSupport;
        let ok = |op: Op, dt: DataType| {
            let inputs = vec![TensorInfo::new(dt, vec![2, 3])];
            support.is_layer_supported(&desc(op, inputs)).is_supported()
        };
        for dt in DataType::ALL {
            assert!(ok(Op::Transpose { perm: vec![1, 0] }, dt), "{dt}");
            for to in DataType::ALL {
                assert!(ok(Op::Cast { to, saturate: true }, dt), "{dt} -> {to}");
            }
        }
        assert!(ok(Op::Unary(UnaryOp::Relu), DataType::U8));
        assert!(ok(Op::Unary(UnaryOp::Abs), DataType::I64));
        assert!(ok(Op::Unary(UnaryOp::Relu), DataType::F16));
        assert!(ok(Op::Unary(UnaryOp::Sigmoid), DataType::F16));
        assert!(!ok(Op::Unary(UnaryOp::Relu), DataType::Bool));
        assert!(!ok(Op::Unary(UnaryOp::Exp), DataType::I64));
        assert!(!ok(Op::Unary(UnaryOp::Sigmoid), DataType::I32));
        assert!(!ok(Op::Softmax { axis: 1 }, DataType::F16));
    }
}

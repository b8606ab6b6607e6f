//! # backplane-cpu-ref: the reference CPU backend
//!
//! CpuRef runs every standard operator of [`backplane_core::Op`] (of `Custom`, its own only) with plain,
//! obviously-correct kernels: no SIMD, no threads, no `unsafe`. It is the correctness oracle
//! other backends are tested against, and it folds constant subgraphs for the importer through
//! [`CpuRefEvaluator`]. It is not meant to be fast.
//!
//! ## Semantics
//!
//! The ONNX operator specification is the authority. Float math is done on f32 tensors with
//! intermediate values (sums, statistics, transcendental functions) in f64, rounded once to
//! f32. Integer arithmetic wraps on overflow; integer division truncates toward zero, and
//! integer division by zero, out-of-range Gather indices and similar data-dependent failures
//! are errors ([`BackendError::Execution`]), never panics.
//!
//! ## Data types
//!
//! | Ops | Types |
//! |-----|-------|
//! | Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Gather (i32/i64 indices), Pad, Resize (nearest) | all |
//! | Cast | every pair of types, bool, f16, bf16, float8 and int4/uint4 included |
//! | Add, Sub, Mul, Div, Max, Min, Relu, Abs, Clip | f32, f16, i8, u8, i32, i64 |
//! | Neg | f32, f16, i8, i32, i64 |
//! | LeakyRelu, Sigmoid, Tanh, Erf, Gelu, Sqrt, Exp, Log | f32, f16 |
//! | Pow | base f32, f16, i32 or i64; exponent of any numeric type |
//! | MatMul, Reduce* (all kinds) | f32, i32, i64 |
//! | Conv, ConvTranspose, BatchNormalization, Gemm, MaxPool/AveragePool, global pooling, Softmax, LayerNormalization, Resize (linear, cubic) | f32 |
//! | Expand, Tile, Trilu, GatherElements, GatherND (i32/i64 indices) | all |
//! | Where, ScatterND, ScatterElements | all but bf16, float8, int4/uint4 |
//! | Math (Floor … Mish, HardSigmoid, Elu, …), LogSoftmax, Hardmax, InstanceNormalization, LRN | f32, f16 (Sign: all numeric) |
//! | Comparisons; And/Or/Xor/Not (bool); Bitwise*, Mod (integers; fmod also floats); BitShift (u8); PRelu | as the op defines |
//! | ArgMax/ArgMin, TopK, CumSum | numeric; ReduceMax/ReduceMin also bool |
//! | QuantizeLinear (to 8/16-bit integers, int4/uint4, float8), DequantizeLinear (from those and i32), DynamicQuantizeLinear | f32/f16 scales; per tensor, per axis or blocked |
//!
//! f16 elementwise math is computed in f64 and rounded once to f16.
//!
//! Quantized tensors are accepted only by the data-movement ops and by CpuRef's two integer
//! layers (custom ops of domain `CpuRef`, `QLinearConv` and `QLinearGemm`), which its
//! `optimize_subgraph` makes of `DequantizeLinear → Conv | Gemm | MatMul → QuantizeLinear`
//! chains with constant 8-bit weights: exact integer sums requantized by XNNPACK's rule
//! (`backplane_core::quant::requantize`), LiteRT's and ONNX Runtime's integer semantics.
//! [`CpuRefLayerSupport`] explains every refusal (op, input, data type).
//!
//! ## Entry points
//!
//! * [`CpuRefBackend`]: the [`Backend`] the runtime registers under id `CpuRef`.
//! * [`evaluate`]: run one op on owned tensors (tests, tools, constant folding).
//! * [`CpuRefEvaluator`]: [`evaluate`] behind backplane-core's `Evaluator` trait.

mod fold;
mod memory;
mod ops;
mod support;
#[cfg(test)]
mod test_util;
mod workload;

pub use memory::CpuRefMemoryManager;
pub use support::CpuRefLayerSupport;
pub use workload::CpuRefWorkloadFactory;

use backplane_backend_api::{
    Backend, BackendError, BackendId, Capabilities, CapabilityValue, LayerSupport, MemoryManager,
    OptimizationViews, Result, SubgraphView, WorkloadFactory,
};
use backplane_core::ops::Evaluator;
use backplane_core::{Op, Tensor, TensorInfo, TensorView, TensorViewMut};
use std::sync::Arc;

/// The id CpuRef registers under.
pub const CPU_REF_ID: &str = "CpuRef";

/// The layer name used in errors from [`evaluate`], which runs ops outside any network.
const EVALUATE_LAYER: &str = "(evaluate)";

/// The reference backend. Stateless: everything it hands out is independent of it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuRefBackend;

impl CpuRefBackend {
    /// The backend.
    pub fn new() -> Self {
        CpuRefBackend
    }
}

impl Backend for CpuRefBackend {
    #[allow(clippy::expect_used)]
    fn id(&self) -> BackendId {
        // A constant made of ASCII letters: always a valid id (see the `identity` test).
        BackendId::new(CPU_REF_ID).expect("CpuRef is a valid backend id")
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(CpuRefLayerSupport)
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        Some(Arc::new(CpuRefMemoryManager::new()))
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(CpuRefWorkloadFactory::new(memory_manager)))
    }

    /// Quantized chains with constant 8-bit weights become integer layers (`fold`).
    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        fold::optimize(subgraph)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            // Weights may be ordinary inputs computed at run time.
            .with("NonConstWeights", CapabilityValue::Bool(true))
            // Constants may be fed as inputs to any layer.
            .with("ConstantTensorsAsInputs", CapabilityValue::Bool(true))
            // Workloads keep no per-execution state: concurrent executions are safe.
            .with("AsyncExecution", CapabilityValue::Bool(true))
            .with("ProtectedContentAllocation", CapabilityValue::Bool(false))
    }
}

/// Compute `op` on `inputs`: infer the outputs' descriptions, allocate them zeroed, and run
/// the reference kernel. Fails with [`BackendError::Unsupported`] for what
/// [`CpuRefLayerSupport`] refuses (the reason says why) and [`BackendError::Execution`] for
/// data-dependent failures.
pub fn evaluate(op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, BackendError> {
    let infos: Vec<&TensorInfo> = inputs.iter().map(|t| t.info()).collect();
    let (plan, output_infos) =
        support::check(op, &infos).map_err(|reason| BackendError::Unsupported {
            layer: EVALUATE_LAYER.to_string(),
            op: op.name().to_string(),
            reason,
        })?;
    // Ops that only move elements keep the data's quantization.
    let keeps_quantization = plan.keeps_quantization();
    let mut outputs = output_infos
        .into_iter()
        .map(|mut info| {
            if let (true, Some(first)) = (keeps_quantization, inputs.first()) {
                info.quant = first.info().quant.clone();
            }
            Tensor::zeros(info)
        })
        .collect::<Result<Vec<Tensor>, _>>()?;
    let views: Vec<TensorView<'_>> = inputs.iter().map(|t| t.view()).collect();
    let mut output_views: Vec<TensorViewMut<'_>> =
        outputs.iter_mut().map(Tensor::view_mut).collect();
    ops::execute(EVALUATE_LAYER, op, &plan, &views, &mut output_views)?;
    Ok(outputs)
}

/// [`evaluate`] as backplane-core's [`Evaluator`], for the importer's constant folding.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuRefEvaluator;

impl Evaluator for CpuRefEvaluator {
    fn evaluate(&self, op: &Op, inputs: &[&Tensor]) -> std::result::Result<Vec<Tensor>, String> {
        evaluate(op, inputs).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::test_util::f32s;
    use backplane_backend_api::{LayerDesc, BACKEND_API_VERSION};
    use backplane_core::ops::{BinaryOp, UnaryOp};
    use backplane_core::{DataType, Quantization};

    fn layer(name: &str, op: Op, inputs: &[&Tensor]) -> LayerDesc {
        let infos: Vec<TensorInfo> = inputs.iter().map(|t| t.info().clone()).collect();
        let refs: Vec<&TensorInfo> = infos.iter().collect();
        let outputs = op.infer(&refs).unwrap();
        LayerDesc {
            name: name.to_string(),
            op,
            constants: vec![None; infos.len()],
            inputs: infos,
            outputs,
        }
    }

    #[test]
    fn identity() {
        let b = CpuRefBackend::new();
        assert_eq!(b.id().as_str(), "CpuRef");
        assert_eq!(b.version(), env!("CARGO_PKG_VERSION"));
        assert_eq!(b.api_version(), BACKEND_API_VERSION);
        let caps = b.capabilities();
        assert_eq!(
            caps.get("NonConstWeights"),
            Some(&CapabilityValue::Bool(true))
        );
        assert_eq!(
            caps.get("ProtectedContentAllocation"),
            Some(&CapabilityValue::Bool(false))
        );
    }

    #[test]
    fn workloads_run_through_the_factory() {
        let backend = CpuRefBackend;
        let memory = Arc::new(CpuRefMemoryManager::new());
        let factory = backend
            .create_workload_factory(Some(memory.clone() as Arc<dyn MemoryManager>))
            .unwrap();
        let a = f32s(&[2, 2], &[1.0, -2.0, 3.0, -4.0]);
        let b = f32s(&[2], &[10.0, 20.0]);
        let add = factory
            .create_workload(&layer("add", Op::Binary(BinaryOp::Add), &[&a, &b]))
            .unwrap();
        let mut y = Tensor::zeros(TensorInfo::new(DataType::F32, vec![2, 2])).unwrap();
        add.execute(&[a.view(), b.view()], &mut [y.view_mut()])
            .unwrap();
        assert_eq!(y.as_slice::<f32>().unwrap(), &[11.0, 18.0, 13.0, 16.0]);
        // The memory manager is only counted, never needed.
        memory.acquire().unwrap();
        memory.release();
        assert_eq!((memory.acquire_count(), memory.release_count()), (1, 1));
        assert!(backend.create_memory_manager().is_some());
    }

    #[test]
    fn factory_refuses_unsupported_layers_with_the_reason() {
        let factory = CpuRefBackend.create_workload_factory(None).unwrap();
        let x = crate::test_util::tensor(DataType::F16, &[3], &[1.0, 2.0, 3.0]);
        let err = factory
            .create_workload(&layer("sig", Op::Softmax { axis: 0 }, &[&x]))
            .err()
            .unwrap();
        match err {
            BackendError::Unsupported { layer, op, reason } => {
                assert_eq!((layer.as_str(), op.as_str()), ("sig", "Softmax"));
                assert!(reason.contains("f16"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn execute_checks_the_buffers_it_is_given() {
        let factory = CpuRefBackend.create_workload_factory(None).unwrap();
        let x = f32s(&[3], &[1.0, -2.0, 3.0]);
        let relu = factory
            .create_workload(&layer("relu", Op::Unary(UnaryOp::Relu), &[&x]))
            .unwrap();
        // Output of the wrong shape.
        let mut wrong = Tensor::zeros(TensorInfo::new(DataType::F32, vec![4])).unwrap();
        assert!(relu.execute(&[x.view()], &mut [wrong.view_mut()]).is_err());
        // No output at all.
        assert!(relu.execute(&[x.view()], &mut []).is_err());
        // A view whose bytes do not match its description.
        let short = TensorView {
            info: x.info(),
            data: &x.bytes()[..8],
        };
        let mut y = Tensor::zeros(x.info().clone()).unwrap();
        assert!(relu.execute(&[short], &mut [y.view_mut()]).is_err());
        // Wrong input type at run time (the layer was created for f32).
        let i = Tensor::from_vec(vec![3], vec![1i32, 2, 3]).unwrap();
        let mut yi = Tensor::zeros(i.info().clone()).unwrap();
        // Relu supports i32, so this runs; with bool it is refused.
        relu.execute(&[i.view()], &mut [yi.view_mut()]).unwrap();
        let b = Tensor::from_bools(vec![3], &[true, false, true]).unwrap();
        let mut yb = Tensor::zeros(b.info().clone()).unwrap();
        assert!(relu.execute(&[b.view()], &mut [yb.view_mut()]).is_err());
    }

    #[test]
    fn evaluator_folds_constants_and_reports_errors_as_text() {
        // Shape -> Gather -> Unsqueeze -> Concat, as an importer folds it (i64 all along).
        let shape = Tensor::from_vec(vec![4], vec![1i64, 16, 3, 3]).unwrap();
        let first = evaluate(&Op::Gather { axis: 0 }, &[&shape, &Tensor::scalar(0i64)])
            .unwrap()
            .remove(0);
        let n = CpuRefEvaluator
            .evaluate(&Op::Unsqueeze { axes: vec![0] }, &[&first])
            .unwrap()
            .remove(0);
        let minus_one = Tensor::from_vec(vec![1], vec![-1i64]).unwrap();
        let target = CpuRefEvaluator
            .evaluate(&Op::Concat { axis: 0 }, &[&n, &minus_one])
            .unwrap()
            .remove(0);
        assert_eq!(target.as_slice::<i64>().unwrap(), &[1, -1]);
        let zero = Tensor::from_vec(vec![1], vec![0i64]).unwrap();
        let err = CpuRefEvaluator
            .evaluate(&Op::Binary(BinaryOp::Div), &[&target, &zero])
            .unwrap_err();
        assert!(err.contains("division by zero"), "{err}");
    }

    #[test]
    fn empty_tensors_never_panic() {
        use backplane_core::ops::{
            AutoPad, ConvDesc, ConvTransposeDesc, CoordinateTransform, GemmDesc, NearestMode,
            PadDesc, PadMode, PoolKind, ReduceDesc, ReduceKind, ResizeDesc, ResizeMode, SliceDesc,
            Window,
        };
        let e = |shape: &[usize]| crate::test_util::tensor(DataType::F32, shape, &[]);
        let ones = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            f32s(shape, &vec![1.0; n])
        };
        let window = |kernel: Vec<usize>| Window {
            kernel,
            strides: vec![],
            dilations: vec![],
            pads: vec![],
            auto_pad: AutoPad::NotSet,
        };
        let conv_t = ConvTransposeDesc {
            window: window(vec![2]),
            group: 1,
            output_padding: vec![],
            output_shape: vec![],
        };
        let cases: Vec<(Op, Vec<Tensor>, Vec<usize>)> = vec![
            (
                Op::Conv(ConvDesc {
                    window: window(vec![1]),
                    group: 1,
                }),
                vec![e(&[0, 1, 3]), ones(&[1, 1, 1])],
                vec![0, 1, 3],
            ),
            // An empty input still produces the kernel-sized full output (bias only).
            (
                Op::ConvTranspose(conv_t),
                vec![e(&[1, 1, 0]), ones(&[1, 1, 2]), ones(&[1])],
                vec![1, 1, 2],
            ),
            (Op::MatMul, vec![e(&[2, 0]), e(&[0, 3])], vec![2, 3]),
            (
                Op::Gemm(GemmDesc::default()),
                vec![e(&[2, 0]), e(&[0, 3]), ones(&[3])],
                vec![2, 3],
            ),
            (Op::Softmax { axis: 0 }, vec![e(&[0, 3])], vec![0, 3]),
            (
                Op::GlobalPool(PoolKind::Average),
                vec![e(&[1, 1, 0])],
                vec![1, 1, 1],
            ),
            (
                Op::BatchNormalization { epsilon: 1e-5 },
                vec![e(&[0, 2]), ones(&[2]), ones(&[2]), ones(&[2]), ones(&[2])],
                vec![0, 2],
            ),
            (
                Op::Reduce(ReduceDesc {
                    kind: ReduceKind::LogSumExp,
                    axes: vec![],
                    keepdims: false,
                    noop_with_empty_axes: false,
                }),
                vec![e(&[0, 4])],
                vec![],
            ),
            (
                Op::Transpose { perm: vec![1, 0] },
                vec![e(&[0, 3])],
                vec![3, 0],
            ),
            (
                Op::Gather { axis: 0 },
                vec![
                    ones(&[3]),
                    Tensor::from_vec(vec![0], Vec::<i64>::new()).unwrap(),
                ],
                vec![0],
            ),
            (
                Op::Slice(SliceDesc {
                    starts: vec![0],
                    ends: vec![5],
                    axes: vec![1],
                    steps: vec![-1],
                }),
                vec![e(&[0, 3])],
                vec![0, 0],
            ),
            (
                Op::Pad(PadDesc {
                    mode: PadMode::Constant,
                    pads: vec![0, 1, 0, 1],
                    value: 0.0,
                }),
                vec![e(&[0, 3])],
                vec![0, 5],
            ),
            (
                Op::Resize(ResizeDesc {
                    mode: ResizeMode::Linear,
                    coordinate_transform: CoordinateTransform::HalfPixel,
                    nearest_mode: NearestMode::Floor,
                    cubic_coeff_a: -0.75,
                    exclude_outside: false,
                    output_shape: vec![0, 4],
                    scales: vec![1.0, 2.0],
                    antialias: false,
                    roi: vec![],
                    extrapolation_value: 0.0,
                }),
                vec![e(&[0, 2])],
                vec![0, 4],
            ),
            (
                Op::Split {
                    axis: -1,
                    splits: vec![0, 3],
                },
                vec![ones(&[2, 3])],
                vec![2, 0],
            ),
        ];
        for (op, inputs, first_shape) in cases {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let outputs = evaluate(&op, &refs).unwrap();
            assert_eq!(outputs[0].shape().dims(), &first_shape[..], "{}", op.name());
        }
        // Pooling an empty axis has no valid window: an error, not a panic.
        let pool = Op::Pool(backplane_core::ops::PoolDesc {
            kind: PoolKind::Max,
            window: window(vec![1]),
            ceil_mode: false,
            count_include_pad: false,
        });
        assert!(evaluate(&pool, &[&e(&[1, 1, 0])]).is_err());
    }

    #[test]
    fn evaluate_keeps_quantization_through_data_movement() {
        let mut info = TensorInfo::new(DataType::U8, vec![2, 2]);
        info.quant = Quantization::PerTensor {
            scale: 0.1,
            zero_point: 128,
        };
        let x = Tensor::from_bytes(info.clone(), &[1, 2, 3, 4]).unwrap();
        let y = evaluate(&Op::Transpose { perm: vec![1, 0] }, &[&x])
            .unwrap()
            .remove(0);
        assert_eq!(y.info().quant, info.quant);
        assert_eq!(y.bytes(), &[1, 3, 2, 4]);
        let err = evaluate(&Op::Unary(UnaryOp::Relu), &[&x]).unwrap_err();
        assert!(err.to_string().contains("quantized"), "{err}");
        // DequantizeLinear reads a quantized tensor with its explicit scale and zero point.
        let dq = Op::DequantizeLinear {
            axis: 1,
            to: DataType::F32,
            block_size: 0,
        };
        let scale = Tensor::scalar(0.5f32);
        let zp = Tensor::scalar(2u8);
        let y = evaluate(&dq, &[&x, &scale, &zp]).unwrap().remove(0);
        assert_eq!(y.info().quant, Quantization::None);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[-0.5, 0.0, 0.5, 1.0]);
    }
}

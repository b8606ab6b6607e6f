//! What CpuRef does with each op, decided in one place: [`plan`] matches every [`Op`] variant
//! by name (no catch-all arm) and answers either a [`Plan`] — the data types each input may
//! have and the kernel that runs the op — or the reason CpuRef refuses it. Layer support,
//! the workload factory and [`crate::evaluate`] all go through [`plan`], so an op is
//! reported supported exactly when there is a kernel to run it, and a new `Op` variant does
//! not compile until it is given a kernel or a refusal here.

use super::{
    axis, cast, conv, conv_transpose, einsum, elementwise, gather_scatter, image, layout, linalg,
    loss, math, matmul, ml, norm, pool, qint, quantize, recurrent, reduce, resize, sampling,
    signal, training, unpool,
};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{BinaryOp, PoolKind, ReduceKind, ResizeMode, UnaryOp};
use backplane_core::{DataType, Op, Quantization, TensorInfo, TensorView, TensorViewMut};

/// A kernel bound to its op's parameters: reads the inputs, writes the outputs.
pub(crate) type Kernel =
    Box<dyn Fn(&[TensorView<'_>], &mut [TensorViewMut<'_>]) -> Result<()> + Send + Sync>;

/// How CpuRef runs one op: the types it accepts per input, and its kernel.
pub(crate) struct Plan {
    /// The types of every input not listed in `slots`.
    types: &'static [DataType],
    /// Inputs with types of their own (indices, conditions, scales).
    slots: Vec<(usize, &'static [DataType])>,
    /// The ONNX input names, for messages.
    names: &'static [&'static str],
    /// The op moves or converts elements without computing on their values (so quantized
    /// inputs are fine).
    moves_data: bool,
    /// The outputs keep the first input's quantization.
    keeps_quantization: bool,
    /// The kernel.
    kernel: Kernel,
}

impl Plan {
    /// An op whose inputs all take `types`, run by `kernel`.
    fn new(types: &'static [DataType], kernel: Kernel) -> Plan {
        Plan {
            types,
            slots: Vec::new(),
            names: &["X"],
            moves_data: false,
            keeps_quantization: false,
            kernel,
        }
    }

    /// Input `slot` takes `types` instead.
    fn slot(mut self, slot: usize, types: &'static [DataType]) -> Plan {
        self.slots.push((slot, types));
        self
    }

    /// The ONNX names of the inputs.
    fn names(mut self, names: &'static [&'static str]) -> Plan {
        self.names = names;
        self
    }

    /// Pure data movement: quantized inputs are accepted and kept.
    fn moves_data(mut self) -> Plan {
        self.moves_data = true;
        self.keeps_quantization = true;
        self
    }

    /// An integer layer of quantized inputs: they are accepted, the outputs are as declared.
    fn quantized(mut self) -> Plan {
        self.moves_data = true;
        self
    }

    /// A conversion (Cast): quantized inputs are accepted, the outputs are plain.
    fn converts(mut self) -> Plan {
        self.moves_data = true;
        self
    }

    /// Whether the outputs keep the first input's quantization.
    pub(crate) fn keeps_quantization(&self) -> bool {
        self.keeps_quantization
    }

    /// The types input `slot` may have.
    fn allowed(&self, slot: usize) -> &'static [DataType] {
        self.slots
            .iter()
            .find(|(s, _)| *s == slot)
            .map_or(self.types, |(_, t)| t)
    }

    fn input_name(&self, slot: usize) -> &'static str {
        self.names.get(slot).copied().unwrap_or("inputs")
    }

    /// Check inputs described by `inputs` against the plan and `op`'s shape inference; on
    /// success, the output descriptions, otherwise the reason.
    pub(crate) fn check(&self, op: &Op, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>, String> {
        for (slot, info) in inputs.iter().enumerate() {
            let allowed = self.allowed(slot);
            if !allowed.contains(&info.dtype) {
                return Err(format!(
                    "{} input {slot} ({}) has data type {}; CpuRef supports {} there",
                    op.name(),
                    self.input_name(slot),
                    info.dtype,
                    type_list(allowed)
                ));
            }
            if info.quant != Quantization::None && !self.moves_data {
                return Err(format!(
                    "{} input {slot} ({}) is quantized; CpuRef computes {} on plain values only",
                    op.name(),
                    self.input_name(slot),
                    op.name()
                ));
            }
        }
        op.infer(inputs).map_err(|e| e.to_string())
    }

    /// Run the kernel.
    pub(crate) fn run(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> Result<()> {
        (self.kernel)(inputs, outputs)
    }
}

fn type_list(types: &[DataType]) -> String {
    match types {
        [only] => format!("{only} only"),
        _ => types
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Every type, the storage-only low-precision ones included: data movement and Cast.
const ANY_TYPE: &[DataType] = &DataType::ALL;
/// Every type but the low-precision ones: ops that select or compare values.
const ORDINARY: &[DataType] = &DataType::ORDINARY;
/// What QuantizeLinear produces and DequantizeLinear reads (besides i32 for the latter).
const QUANTIZED: &[DataType] = &[
    DataType::I8,
    DataType::U8,
    DataType::I16,
    DataType::U16,
    DataType::I4,
    DataType::U4,
    DataType::F8E4M3Fn,
    DataType::F8E4M3Fnuz,
    DataType::F8E5M2,
    DataType::F8E5M2Fnuz,
];
const DEQUANTIZABLE: &[DataType] = &[
    DataType::I8,
    DataType::U8,
    DataType::I16,
    DataType::U16,
    DataType::I32,
    DataType::I4,
    DataType::U4,
    DataType::F8E4M3Fn,
    DataType::F8E4M3Fnuz,
    DataType::F8E5M2,
    DataType::F8E5M2Fnuz,
];
const EIGHT_BIT: &[DataType] = &[DataType::I8, DataType::U8];
const F32_ONLY: &[DataType] = &[DataType::F32];
const FLOATS: &[DataType] = &[DataType::F32, DataType::F16];
/// Float types of kernels that compute in f64 (through `Scalar`s or f64 values).
const FLOATS_F64: &[DataType] = &[DataType::F32, DataType::F16, DataType::F64];
const NUMERIC: &[DataType] = &DataType::NUMERIC;
const SIGNED: &[DataType] = &DataType::SIGNED;
const POW_BASE: &[DataType] = &[
    DataType::F32,
    DataType::F16,
    DataType::F64,
    DataType::I32,
    DataType::I64,
];
const F32_I32_I64: &[DataType] = &[DataType::F32, DataType::I32, DataType::I64];
const REDUCIBLE: &[DataType] = &[DataType::F32, DataType::F64, DataType::I32, DataType::I64];
const MIN_MAX_REDUCIBLE: &[DataType] = &[
    DataType::F32,
    DataType::F64,
    DataType::I32,
    DataType::I64,
    DataType::Bool,
];
const EINSUM: &[DataType] = &[
    DataType::F32,
    DataType::F16,
    DataType::F64,
    DataType::I32,
    DataType::I64,
];
const INDICES: &[DataType] = &[DataType::I32, DataType::I64];
const I64_ONLY: &[DataType] = &[DataType::I64];
const BOOL_ONLY: &[DataType] = &[DataType::Bool];
/// MaxPool (with or without indices): the types of its specification.
const MAX_POOL: &[DataType] = &[
    DataType::F32,
    DataType::F16,
    DataType::F64,
    DataType::I8,
    DataType::U8,
];

/// Box a kernel (the closure's argument types are fixed here, for every lifetime).
fn run<F>(f: F) -> Kernel
where
    F: Fn(&[TensorView<'_>], &mut [TensorViewMut<'_>]) -> Result<()> + Send + Sync + 'static,
{
    Box::new(f)
}

fn input<'a, 'b>(inputs: &'a [TensorView<'b>], slot: usize) -> Result<&'a TensorView<'b>> {
    inputs
        .get(slot)
        .ok_or_else(|| BackendError::Other(format!("input {slot} is missing")))
}

fn x<'a, 'b>(inputs: &'a [TensorView<'b>]) -> Result<&'a TensorView<'b>> {
    input(inputs, 0)
}

fn out<'a, 'b>(outputs: &'a mut [TensorViewMut<'b>]) -> Result<&'a mut TensorViewMut<'b>> {
    outputs
        .first_mut()
        .ok_or_else(|| BackendError::Other("the output buffer is missing".to_string()))
}

/// A plan of a kernel taking input 0 and writing output 0, with no parameters.
fn unary_kernel(
    types: &'static [DataType],
    f: fn(&TensorView<'_>, &mut TensorViewMut<'_>) -> Result<()>,
) -> Plan {
    Plan::new(types, run(move |i, o| f(x(i)?, out(o)?)))
}

/// How CpuRef runs `op`, or why it does not. Every variant is named: a new one must be
/// given a kernel or a refusal here before CpuRef compiles.
pub(crate) fn plan(op: &Op) -> Result<Plan, String> {
    let builtin = || {
        Err(format!(
            "{} is run by the builtin backend, not by CpuRef",
            op.name()
        ))
    };
    Ok(match op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => unary_kernel(ANY_TYPE, layout::copy).moves_data(),
        Op::MemCopy | Op::MemImport | Op::Permute { .. } => return builtin(),
        Op::If(_) | Op::Loop(_) | Op::Scan(_) => return builtin(),
        // CpuRef's own integer layers (folded quantized chains); other custom ops are refused.
        Op::Custom(custom) => Plan::new(EIGHT_BIT, super::qlinear::deferred(custom)?)
            .slot(2, &[DataType::I32])
            .names(&["x", "w", "bias"])
            .quantized(),
        Op::Unary(u) => {
            let types = match u {
                UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Clip { .. } => NUMERIC,
                UnaryOp::Neg => SIGNED,
                UnaryOp::LeakyRelu { .. }
                | UnaryOp::Sigmoid
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Gelu { .. }
                | UnaryOp::Sqrt
                | UnaryOp::Exp
                | UnaryOp::Log => FLOATS_F64,
            };
            let u = *u;
            Plan::new(
                types,
                run(move |i, o| elementwise::unary(u, x(i)?, out(o)?)),
            )
        }
        Op::Binary(b) => {
            let b = *b;
            let kernel = run(move |i, o| elementwise::binary(b, x(i)?, input(i, 1)?, out(o)?));
            match b {
                BinaryOp::Pow => Plan::new(NUMERIC, kernel)
                    .slot(0, POW_BASE)
                    .names(&["X", "Y"]),
                _ => Plan::new(NUMERIC, kernel).names(&["A", "B"]),
            }
        }
        Op::Conv(d) => {
            let d = d.clone();
            Plan::new(
                F32_ONLY,
                run(move |i, o| conv::conv(&d, x(i)?, input(i, 1)?, i.get(2), out(o)?)),
            )
            .names(&["X", "W", "B"])
        }
        Op::ConvTranspose(d) => {
            let d = d.clone();
            Plan::new(
                F32_ONLY,
                run(move |i, o| {
                    conv_transpose::conv_transpose(&d, x(i)?, input(i, 1)?, i.get(2), out(o)?)
                }),
            )
            .names(&["X", "W", "B"])
        }
        Op::BatchNormalization { epsilon } => {
            let epsilon = *epsilon;
            Plan::new(
                F32_ONLY,
                run(move |i, o| {
                    let params = [input(i, 1)?, input(i, 2)?, input(i, 3)?, input(i, 4)?];
                    norm::batch_norm(epsilon, x(i)?, params, out(o)?)
                }),
            )
            .names(&["X", "scale", "B", "input_mean", "input_var"])
        }
        Op::MatMul => Plan::new(
            F32_I32_I64,
            run(|i, o| matmul::matmul(x(i)?, input(i, 1)?, out(o)?)),
        )
        .names(&["A", "B"]),
        Op::Gemm(d) => {
            let d = *d;
            Plan::new(
                F32_ONLY,
                run(move |i, o| matmul::gemm(&d, x(i)?, input(i, 1)?, i.get(2), out(o)?)),
            )
            .names(&["A", "B", "C"])
        }
        Op::Pool(d) => {
            let d = d.clone();
            let max = d.kind == PoolKind::Max;
            let kernel = run(move |i, o| {
                let x = x(i)?;
                if max && x.info.dtype != DataType::F32 {
                    pool::max_pool_any(&d, x, out(o)?)
                } else {
                    pool::pool(&d, x, out(o)?)
                }
            });
            Plan::new(if max { MAX_POOL } else { F32_ONLY }, kernel)
        }
        Op::IntegerAveragePool(d) => {
            let d = d.clone();
            Plan::new(
                EIGHT_BIT,
                run(move |i, o| qint::integer_average_pool(&d, x(i)?, out(o)?)),
            )
            .quantized()
        }
        Op::Lookup => Plan::new(
            EIGHT_BIT,
            run(move |i, o| qint::lookup(x(i)?, input(i, 1)?, out(o)?)),
        )
        .slot(1, EIGHT_BIT)
        .names(&["X", "table"])
        .quantized(),
        Op::GlobalPool(kind) => {
            let kind = *kind;
            Plan::new(
                F32_ONLY,
                run(move |i, o| pool::global_pool(kind, x(i)?, out(o)?)),
            )
        }
        Op::Transpose { perm } => {
            let perm = perm.clone();
            Plan::new(
                ANY_TYPE,
                run(move |i, o| layout::transpose(&perm, x(i)?, out(o)?)),
            )
            .moves_data()
        }
        Op::Concat { axis } => {
            let axis = *axis;
            Plan::new(ANY_TYPE, run(move |i, o| layout::concat(axis, i, out(o)?)))
                .names(&[])
                .moves_data()
        }
        Op::Split { axis, .. } => {
            let axis = *axis;
            Plan::new(ANY_TYPE, run(move |i, o| layout::split(axis, x(i)?, o))).moves_data()
        }
        Op::Slice(d) => {
            let d = d.clone();
            Plan::new(ANY_TYPE, run(move |i, o| layout::slice(&d, x(i)?, out(o)?))).moves_data()
        }
        Op::Gather { axis } => {
            let axis = *axis;
            Plan::new(
                ANY_TYPE,
                run(move |i, o| layout::gather(axis, x(i)?, input(i, 1)?, out(o)?)),
            )
            .slot(1, INDICES)
            .names(&["data", "indices"])
            .moves_data()
        }
        Op::Softmax { axis } => {
            let axis = *axis;
            Plan::new(
                F32_ONLY,
                run(move |i, o| norm::softmax(axis, x(i)?, out(o)?)),
            )
        }
        Op::LayerNormalization { axis, epsilon } => {
            let (axis, epsilon) = (*axis, *epsilon);
            Plan::new(
                F32_ONLY,
                run(move |i, o| {
                    norm::layer_norm(axis, epsilon, x(i)?, input(i, 1)?, i.get(2), out(o)?)
                }),
            )
            .names(&["X", "Scale", "B"])
        }
        Op::Reduce(d) => {
            let types = match d.kind {
                ReduceKind::Max | ReduceKind::Min => MIN_MAX_REDUCIBLE,
                ReduceKind::Sum
                | ReduceKind::Mean
                | ReduceKind::Prod
                | ReduceKind::L1
                | ReduceKind::L2
                | ReduceKind::LogSum
                | ReduceKind::LogSumExp
                | ReduceKind::SumSquare => REDUCIBLE,
            };
            let d = d.clone();
            Plan::new(types, run(move |i, o| reduce::reduce(&d, x(i)?, out(o)?)))
        }
        Op::Cast { saturate, .. } => {
            let saturate = *saturate;
            Plan::new(
                ANY_TYPE,
                run(move |i, o| cast::cast(x(i)?, out(o)?, saturate)),
            )
            .converts()
        }
        Op::Pad(d) => {
            let d = d.clone();
            Plan::new(ANY_TYPE, run(move |i, o| layout::pad(&d, x(i)?, out(o)?))).moves_data()
        }
        Op::Resize(d) => {
            let nearest = d.mode == ResizeMode::Nearest;
            let d = d.clone();
            let kernel = run(move |i, o| resize::resize(&d, x(i)?, out(o)?));
            if nearest {
                Plan::new(ANY_TYPE, kernel).moves_data()
            } else {
                Plan::new(F32_ONLY, kernel)
            }
        }
        Op::Math(m) => {
            let m = *m;
            Plan::new(
                m.input_types(),
                run(move |i, o| math::math(m, x(i)?, out(o)?)),
            )
        }
        Op::BinaryExt(b) => {
            let b = *b;
            Plan::new(
                b.input_types(),
                run(move |i, o| math::binary_ext(b, x(i)?, input(i, 1)?, out(o)?)),
            )
        }
        Op::Where => Plan::new(
            ORDINARY,
            run(|i, o| math::select(x(i)?, input(i, 1)?, input(i, 2)?, out(o)?)),
        )
        .slot(0, BOOL_ONLY),
        Op::ArgReduce(d) => {
            let d = *d;
            Plan::new(
                NUMERIC,
                run(move |i, o| axis::arg_reduce(&d, x(i)?, out(o)?)),
            )
        }
        Op::Expand { .. } => unary_kernel(ANY_TYPE, gather_scatter::expand).moves_data(),
        Op::Tile { .. } => unary_kernel(ANY_TYPE, gather_scatter::tile).moves_data(),
        Op::Trilu { upper, k } => {
            let (upper, k) = (*upper, *k);
            Plan::new(
                ANY_TYPE,
                run(move |i, o| gather_scatter::trilu(upper, k, x(i)?, out(o)?)),
            )
            .moves_data()
        }
        Op::GatherElements { axis } => {
            let axis = *axis;
            Plan::new(
                ANY_TYPE,
                run(move |i, o| {
                    gather_scatter::gather_elements(axis, x(i)?, input(i, 1)?, out(o)?)
                }),
            )
            .slot(1, INDICES)
            .moves_data()
        }
        Op::GatherND { batch_dims } => {
            let batch_dims = *batch_dims;
            Plan::new(
                ANY_TYPE,
                run(move |i, o| {
                    gather_scatter::gather_nd(batch_dims, x(i)?, input(i, 1)?, out(o)?)
                }),
            )
            .slot(1, INDICES)
            .moves_data()
        }
        Op::ScatterND { reduction } => {
            let reduction = *reduction;
            Plan::new(
                ORDINARY,
                run(move |i, o| {
                    gather_scatter::scatter_nd(
                        reduction,
                        x(i)?,
                        input(i, 1)?,
                        input(i, 2)?,
                        out(o)?,
                    )
                }),
            )
            .slot(1, INDICES)
        }
        Op::ScatterElements { axis, reduction } => {
            let (axis, reduction) = (*axis, *reduction);
            Plan::new(
                ORDINARY,
                run(move |i, o| {
                    gather_scatter::scatter_elements(
                        axis,
                        reduction,
                        x(i)?,
                        input(i, 1)?,
                        input(i, 2)?,
                        out(o)?,
                    )
                }),
            )
            .slot(1, INDICES)
        }
        Op::OneHot { axis, depth } => {
            let (axis, depth) = (*axis, *depth);
            Plan::new(
                ORDINARY,
                run(move |i, o| gather_scatter::one_hot(axis, depth, x(i)?, input(i, 1)?, out(o)?)),
            )
            .slot(0, NUMERIC)
        }
        Op::TopK(d) => {
            let d = *d;
            Plan::new(NUMERIC, run(move |i, o| axis::top_k(&d, x(i)?, o)))
        }
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => {
            let (axis, exclusive, reverse) = (*axis, *exclusive, *reverse);
            Plan::new(
                NUMERIC,
                run(move |i, o| axis::cum_sum(axis, exclusive, reverse, x(i)?, out(o)?)),
            )
        }
        Op::LogSoftmax { axis } => {
            let axis = *axis;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| axis::log_softmax(axis, x(i)?, out(o)?)),
            )
        }
        Op::Hardmax { axis } => {
            let axis = *axis;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| axis::hardmax(axis, x(i)?, out(o)?)),
            )
        }
        Op::InstanceNormalization { epsilon } => {
            let epsilon = *epsilon;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| {
                    axis::instance_norm(epsilon, x(i)?, input(i, 1)?, input(i, 2)?, out(o)?)
                }),
            )
        }
        Op::Lrn {
            alpha,
            beta,
            bias,
            size,
        } => {
            let (alpha, beta, bias, size) = (*alpha, *beta, *bias, *size);
            Plan::new(
                FLOATS_F64,
                run(move |i, o| axis::lrn(alpha, beta, bias, size, x(i)?, out(o)?)),
            )
        }
        Op::QuantizeLinear {
            axis,
            block_size,
            saturate,
            ..
        } => {
            let (layout, saturate) = (quantize::Layout::new(*axis, *block_size), *saturate);
            Plan::new(
                QUANTIZED,
                run(move |i, o| {
                    quantize::quantize(layout, saturate, x(i)?, input(i, 1)?, i.get(2), out(o)?)
                }),
            )
            .slot(0, &[DataType::F32, DataType::F16, DataType::I32])
            .slot(1, FLOATS)
        }
        Op::DequantizeLinear {
            axis, block_size, ..
        } => {
            let layout = quantize::Layout::new(*axis, *block_size);
            Plan::new(
                DEQUANTIZABLE,
                run(move |i, o| {
                    quantize::dequantize(layout, x(i)?, input(i, 1)?, i.get(2), out(o)?)
                }),
            )
            .slot(1, FLOATS)
            // X may carry its quantization (as a TFLite model's tensors do): the scale and
            // zero point inputs are what the kernel reads.
            .converts()
        }
        Op::DynamicQuantizeLinear => {
            Plan::new(F32_ONLY, run(|i, o| quantize::dynamic_quantize(x(i)?, o)))
        }
        Op::NegativeLogLikelihoodLoss(d) => {
            let d = *d;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| loss::nll_loss(&d, x(i)?, input(i, 1)?, i.get(2), out(o)?)),
            )
            .slot(1, INDICES)
            .names(&["input", "target", "weight"])
        }
        Op::GridSample(d) => {
            let d = *d;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| sampling::grid_sample(&d, x(i)?, input(i, 1)?, out(o)?)),
            )
            .names(&["X", "grid"])
        }
        Op::Einsum(d) => {
            let d = d.clone();
            Plan::new(EINSUM, run(move |i, o| einsum::einsum(&d, i, out(o)?)))
        }
        Op::Det => unary_kernel(FLOATS_F64, linalg::det),
        Op::Rnn(d) => {
            let d = d.clone();
            Plan::new(FLOATS_F64, run(move |i, o| recurrent::recurrent(&d, i, o)))
                .slot(4, INDICES)
                .names(&[
                    "X",
                    "W",
                    "R",
                    "B",
                    "sequence_lens",
                    "initial_h",
                    "initial_c",
                    "P",
                ])
        }
        Op::MaxPoolWithIndices(d) => {
            let d = d.clone();
            Plan::new(
                MAX_POOL,
                run(move |i, o| pool::max_pool_indices(&d, x(i)?, o)),
            )
        }
        Op::MaxUnpool(d) => {
            let d = d.clone();
            Plan::new(
                FLOATS_F64,
                run(move |i, o| unpool::max_unpool(&d, x(i)?, input(i, 1)?, out(o)?)),
            )
            .slot(1, I64_ONLY)
            .names(&["X", "I"])
        }
        Op::Optimizer(d) => {
            let d = *d;
            Plan::new(
                &[DataType::F32, DataType::F64],
                run(move |i, o| training::optimizer(&d, i, o)),
            )
            .slot(1, I64_ONLY)
            .names(&["R", "T"])
        }
        Op::TfIdfVectorizer(d) => {
            let d = d.clone();
            Plan::new(INDICES, run(move |i, o| ml::tfidf(&d, x(i)?, out(o)?)))
        }
        Op::TreeEnsemble(d) => {
            let d = d.clone();
            Plan::new(
                FLOATS_F64,
                run(move |i, o| ml::tree_ensemble(&d, x(i)?, out(o)?)),
            )
        }
        Op::Dft(d) => {
            let d = *d;
            Plan::new(FLOATS_F64, run(move |i, o| signal::dft(&d, x(i)?, out(o)?)))
        }
        Op::Stft(d) => {
            let d = *d;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| signal::stft(&d, x(i)?, i.get(1), out(o)?)),
            )
            .names(&["signal", "window"])
        }
        Op::Col2Im(d) => {
            let d = d.clone();
            Plan::new(
                FLOATS_F64,
                run(move |i, o| image::col2im(&d, x(i)?, out(o)?)),
            )
        }
        Op::AffineGrid(d) => {
            let d = d.clone();
            Plan::new(
                FLOATS_F64,
                run(move |i, o| image::affine_grid(&d, x(i)?, out(o)?)),
            )
        }
        Op::RoiAlign(d) => {
            let d = *d;
            Plan::new(
                FLOATS_F64,
                run(move |i, o| image::roi_align(&d, x(i)?, input(i, 1)?, input(i, 2)?, out(o)?)),
            )
            .slot(2, I64_ONLY)
            .names(&["X", "rois", "batch_indices"])
        }
        Op::DeformConv(d) => {
            let d = d.clone();
            Plan::new(
                FLOATS_F64,
                run(move |i, o| image::deform_conv(&d, i, out(o)?)),
            )
            .names(&["X", "W", "offset", "B", "mask"])
        }
    })
}

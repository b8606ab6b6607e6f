//! Planning: what CpuAcc does with a layer, decided in one place. [`plan`] matches every
//! [`Op`] variant by name (no catch-all arm) and sends it to its family's planning function,
//! which either refuses the layer with a reason or answers a [`Plan`]: the checks passed,
//! and the recipe that builds the workload. Layer support is "the plan succeeds"
//! ([`crate::CpuAccLayerSupport`]) and the workload factory builds from the same plan, so
//! "supported" cannot disagree with "can build"; a new `Op` variant does not compile until it
//! is planned or refused here.

mod fused;

use crate::act::{Activation, FromOp};
use crate::arg_reduce::ArgReduceWorkload;
use crate::concat::{ConcatWorkload, CopyWorkload};
use crate::conv::ConvWorkload;
use crate::conv_transpose::ConvTransposeWorkload;
use crate::elementwise::Bin;
use crate::io::Io;
use crate::matmul::{GemmWorkload, MatMulViews, MatMulWorkload};
use crate::ops::{
    check_pool, BatchNormWorkload, BinaryWorkload, GlobalPoolWorkload, InstanceNormWorkload,
    LayerNormWorkload, PoolWorkload, ReduceWorkload, SoftmaxWorkload, UnaryWorkload,
};
use crate::recurrent::RecurrentWorkload;
use crate::reduce::ReducePlan;
use crate::resize::ResizeWorkload;
use crate::threads::Threads;
use crate::transpose::TransposeWorkload;
use crate::{cast, int_arith, movement, pow, predicate};
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{BinaryExtOp, BinaryOp, MathOp};
use backplane_core::{DataType, Op, Quantization, TensorInfo};

/// Builds a planned layer's workload from its buffers' descriptions and the threads.
type Build<'a> = Box<dyn FnOnce(Io, Threads) -> Result<Box<dyn Workload>> + 'a>;

/// A layer CpuAcc accepted: everything checked, and the recipe for its workload.
pub struct Plan<'a> {
    build: Build<'a>,
}

impl<'a> Plan<'a> {
    /// A plan whose workload `build` makes.
    pub(crate) fn new(build: impl FnOnce(Io, Threads) -> Result<Box<dyn Workload>> + 'a) -> Self {
        Plan {
            build: Box::new(build),
        }
    }

    /// Build the workload.
    pub fn build(self, io: Io, threads: Threads) -> Result<Box<dyn Workload>> {
        (self.build)(io, threads)
    }
}

/// Box a workload as a build result.
pub(crate) fn done(workload: impl Workload + 'static) -> Result<Box<dyn Workload>> {
    Ok(Box::new(workload))
}

/// The error for a layer CpuAcc refuses while building it.
pub(crate) fn refused(layer: &LayerDesc, reason: String) -> BackendError {
    BackendError::Unsupported {
        layer: layer.name.clone(),
        op: layer.op.name().to_string(),
        reason,
    }
}

/// Every input is f32, or the reason.
fn all_f32(layer: &LayerDesc) -> std::result::Result<(), String> {
    let op = &layer.op;
    for (slot, i) in layer.inputs.iter().enumerate() {
        if i.dtype != DataType::F32 {
            return Err(format!(
                "{} input {slot} is {}; CpuAcc computes {} on f32 only",
                op.name(),
                i.dtype,
                op.name()
            ));
        }
    }
    Ok(())
}

/// The dimensions of input `slot` (empty when it is absent).
fn dims(layer: &LayerDesc, slot: usize) -> Vec<usize> {
    layer
        .inputs
        .get(slot)
        .map(|i| i.shape.dims().to_vec())
        .unwrap_or_default()
}

/// The type of the first input (Bool when there is none: no integer path takes it).
fn first_type(layer: &LayerDesc) -> DataType {
    layer.inputs.first().map_or(DataType::Bool, |i| i.dtype)
}

/// Refuse an op CpuAcc has no workload for (the optimizer hands it to the next backend).
fn not_implemented(name: &str) -> std::result::Result<Plan<'static>, String> {
    Err(format!("CpuAcc does not implement {name}"))
}

/// How CpuAcc runs `layer`, or why it cannot.
pub fn plan(layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let op = &layer.op;
    let quantized = layer
        .inputs
        .iter()
        .position(|i| i.quant != Quantization::None);
    if let (Some(slot), false) = (quantized, crate::quant::takes_quantized(op)) {
        return Err(format!(
            "{} input {slot} is quantized; CpuAcc runs plain tensors only",
            op.name()
        ));
    }
    // Fused layers declare their outputs; the standard ops' are inferred and must agree.
    if !matches!(op, Op::Custom(_)) {
        let refs: Vec<&TensorInfo> = layer.inputs.iter().collect();
        let inferred = op.infer(&refs).map_err(|e| e.to_string())?;
        if inferred.len() != layer.outputs.len()
            || inferred
                .iter()
                .zip(&layer.outputs)
                .any(|(a, b)| !a.same_layout(b))
        {
            return Err(format!(
                "{} outputs are declared differently from what CpuAcc computes",
                op.name()
            ));
        }
    }
    match op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => Ok(Plan::new(|io, th| done(CopyWorkload::new(io, th)))),
        Op::Transpose { perm } => Ok(Plan::new(move |io, th| {
            done(TransposeWorkload::new(io, perm, th)?)
        })),
        Op::Concat { axis } => concat(layer, *axis),
        Op::Slice(desc) => movement::plan_slice(layer, desc),
        Op::Gather { axis } => movement::plan_gather(layer, *axis),
        Op::Where => movement::plan_where(layer),
        Op::Expand { .. } => movement::plan_expand(layer),
        Op::Tile { repeats } => movement::plan_tile(layer, repeats),
        Op::Pad(desc) => movement::plan_pad(layer, desc),
        Op::Split { axis, .. } => movement::plan_split(layer, *axis),
        Op::Cast { to, .. } => cast::plan(layer, *to),
        Op::Unary(u) => unary(layer, Some(Activation::from_unary(*u))),
        Op::Math(m) => math(layer, *m),
        Op::Binary(BinaryOp::Pow) => pow::plan(layer),
        Op::Binary(b) if first_type(layer).is_integer() => int_arith::plan(layer, *b),
        Op::Binary(b) => binary(layer, Bin::from_op(*b)),
        Op::BinaryExt(b) => binary_ext(layer, *b),
        Op::Softmax { axis } => {
            all_f32(layer)?;
            let axis = *axis;
            Ok(Plan::new(move |io, th| {
                done(SoftmaxWorkload::new(io, axis, th)?)
            }))
        }
        Op::LogSoftmax { axis } => {
            all_f32(layer)?;
            let axis = *axis;
            Ok(Plan::new(move |io, th| {
                done(SoftmaxWorkload::new(io, axis, th)?.log())
            }))
        }
        Op::LayerNormalization { axis, epsilon } => {
            all_f32(layer)?;
            let (axis, epsilon) = (*axis, *epsilon);
            Ok(Plan::new(move |io, th| {
                let (scale, bias) = (layer.constant(1), layer.constant(2));
                done(LayerNormWorkload::new(io, axis, epsilon, scale, bias, th)?)
            }))
        }
        Op::InstanceNormalization { epsilon } => {
            all_f32(layer)?;
            if dims(layer, 0).len() < 2 {
                return Err("InstanceNormalization needs rank >= 2".into());
            }
            let epsilon = *epsilon;
            Ok(Plan::new(move |io, th| {
                let (scale, bias) = (layer.constant(1), layer.constant(2));
                done(InstanceNormWorkload::new(io, epsilon, scale, bias, th)?)
            }))
        }
        Op::BatchNormalization { epsilon } => {
            all_f32(layer)?;
            if dims(layer, 0).len() < 2 {
                return Err("BatchNormalization needs rank >= 2".into());
            }
            let epsilon = *epsilon;
            Ok(Plan::new(move |io, th| {
                let k = |slot| layer.constant(slot);
                done(BatchNormWorkload::new(
                    io,
                    epsilon,
                    [k(1), k(2), k(3), k(4)],
                    th,
                )?)
            }))
        }
        Op::ArgReduce(desc) => {
            all_f32(layer)?;
            let d = dims(layer, 0);
            let a = backplane_core::shape::normalize_axis(desc.axis, d.len())
                .map_err(|e| e.to_string())?;
            if d.get(a) == Some(&0) {
                return Err("ArgMax/ArgMin over an empty axis".into());
            }
            Ok(Plan::new(move |io, th| {
                done(ArgReduceWorkload::new(io, desc, th)?)
            }))
        }
        Op::Reduce(desc) => {
            all_f32(layer)?;
            let reduce = ReducePlan::new(desc, &dims(layer, 0))?;
            Ok(Plan::new(move |io, th| {
                done(ReduceWorkload::new(io, reduce, th))
            }))
        }
        Op::Conv(desc) => {
            all_f32(layer)?;
            crate::conv::check(desc, &dims(layer, 0), &dims(layer, 1))?;
            Ok(Plan::new(move |io, th| {
                let w = layer.constants.get(1).and_then(Option::as_ref);
                let b = layer.constants.get(2).and_then(Option::as_ref);
                done(ConvWorkload::new(io, desc, w, b, Activation::None, th)?)
            }))
        }
        Op::ConvTranspose(desc) => {
            all_f32(layer)?;
            let bias = (layer.inputs.len() > 2).then(|| dims(layer, 2));
            crate::conv_transpose::check(desc, &dims(layer, 0), &dims(layer, 1), bias.as_deref())?;
            Ok(Plan::new(move |io, th| {
                let w = layer.constants.get(1).and_then(Option::as_ref);
                let b = layer.constants.get(2).and_then(Option::as_ref);
                done(ConvTransposeWorkload::new(io, desc, w, b, th)?)
            }))
        }
        Op::Resize(desc) => {
            all_f32(layer)?;
            crate::resize::check(desc, &dims(layer, 0))?;
            Ok(Plan::new(move |io, th| {
                done(ResizeWorkload::new(io, desc, th)?)
            }))
        }
        Op::MatMul if first_type(layer) == DataType::I32 => crate::int_matmul::plan(layer),
        Op::MatMul => {
            all_f32(layer)?;
            Ok(Plan::new(move |io, th| {
                let views = MatMulViews::default();
                let b = layer.constants.get(1).and_then(Option::as_ref);
                done(MatMulWorkload::new(
                    io,
                    b,
                    None,
                    Activation::None,
                    views,
                    th,
                )?)
            }))
        }
        Op::Gemm(desc) => {
            all_f32(layer)?;
            let desc = *desc;
            Ok(Plan::new(move |io, th| {
                let b = layer.constants.get(1).and_then(Option::as_ref);
                done(GemmWorkload::new(
                    io,
                    desc,
                    b,
                    layer.constant(2),
                    Activation::None,
                    th,
                )?)
            }))
        }
        Op::Pool(desc) => {
            all_f32(layer)?;
            let geo = check_pool(desc, &dims(layer, 0))?;
            Ok(Plan::new(move |io, th| {
                done(PoolWorkload::new(io, desc, geo, th)?)
            }))
        }
        Op::GlobalPool(kind) => {
            all_f32(layer)?;
            let kind = *kind;
            Ok(Plan::new(move |io, threads| {
                done(GlobalPoolWorkload { io, kind, threads })
            }))
        }
        Op::Rnn(desc) => {
            crate::recurrent::check(desc, layer)?;
            Ok(Plan::new(move |io, th| {
                done(RecurrentWorkload::new(
                    io,
                    desc,
                    |slot| layer.constant(slot),
                    th,
                )?)
            }))
        }
        Op::Custom(custom) if crate::quant::is_quant_custom(custom) => {
            crate::quant::plan_custom(custom, layer)
        }
        Op::Custom(custom) => fused::plan(custom, layer),
        Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => crate::quant::plan_qdq(layer),
        Op::DynamicQuantizeLinear => crate::quant::plan_dynamic_quantize(layer),
        // The 8-bit integer forms: the byte table and the quantized pool (folded into
        // channels-last regions by `quant::fold` where they join one).
        Op::IntegerAveragePool(_) | Op::Lookup => crate::quant::plan_integer_form(layer),
        // Inserted by the optimizer or holding nested networks: the builtin backend's.
        Op::MemCopy
        | Op::MemImport
        | Op::Permute { .. }
        | Op::If(_)
        | Op::Loop(_)
        | Op::Scan(_) => Err(format!(
            "{} is run by the builtin backend, not by CpuAcc",
            op.name()
        )),
        // Rare, integer, quantized or training ops: left to the next backend (CpuRef).
        Op::Trilu { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::ScatterND { .. }
        | Op::ScatterElements { .. }
        | Op::OneHot { .. }
        | Op::TopK(_)
        | Op::CumSum { .. }
        | Op::Hardmax { .. }
        | Op::Lrn { .. }
        | Op::NegativeLogLikelihoodLoss(_)
        | Op::GridSample(_)
        | Op::Einsum(_)
        | Op::Det
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
        | Op::DeformConv(_) => not_implemented(op.name()),
    }
}

/// Concat of inputs of one type.
fn concat(layer: &LayerDesc, axis: i64) -> std::result::Result<Plan<'static>, String> {
    let first = layer.inputs.first().map(|i| i.dtype);
    if layer.inputs.iter().any(|i| Some(i.dtype) != first) {
        return Err("Concat inputs of different types".into());
    }
    Ok(Plan::new(move |io, th| {
        done(ConcatWorkload::new(io, axis, th)?)
    }))
}

/// An elementwise function (`None`: one CpuAcc does not implement).
fn unary(layer: &LayerDesc, act: Option<Activation>) -> std::result::Result<Plan<'static>, String> {
    let act = act.ok_or_else(|| format!("CpuAcc does not implement {}", layer.op.name()))?;
    all_f32(layer)?;
    Ok(Plan::new(move |io, threads| {
        done(UnaryWorkload { io, act, threads })
    }))
}

/// A math function: the activations of real networks and the float predicates; the rest
/// stay on CpuRef.
fn math(layer: &LayerDesc, m: MathOp) -> std::result::Result<Plan<'static>, String> {
    match (Activation::from_math(m), m) {
        (Some(act), _) => unary(layer, Some(act)),
        (None, MathOp::IsNaN | MathOp::IsInf { .. } | MathOp::Not) => {
            predicate::plan_unary(layer, m)
        }
        (None, _) => not_implemented(m.name()),
    }
}

/// A broadcasting binary function (`None`: one CpuAcc does not implement).
fn binary(layer: &LayerDesc, bin: Option<Bin>) -> std::result::Result<Plan<'static>, String> {
    let bin = bin.ok_or_else(|| format!("CpuAcc does not implement {}", layer.op.name()))?;
    all_f32(layer)?;
    Ok(Plan::new(move |io, th| {
        done(BinaryWorkload::new(io, bin, th)?)
    }))
}

/// A binary op beyond the core set: PRelu, comparisons and logical operators.
fn binary_ext(layer: &LayerDesc, b: BinaryExtOp) -> std::result::Result<Plan<'static>, String> {
    match Bin::from_ext(b) {
        Some(bin) => binary(layer, Some(bin)),
        None if b.is_predicate() => predicate::plan_binary(layer, b),
        None => not_implemented(b.name()),
    }
}

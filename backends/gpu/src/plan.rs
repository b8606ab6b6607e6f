//! Planning: what GpuAcc does with a layer, decided in one place. [`plan`] matches every
//! [`Op`] variant by name (no catch-all arm) and either refuses the layer with a reason or
//! answers the kernel [`Step`]s that compute it. Layer support is "the plan succeeds" and the
//! workload is built from the same plan, so "supported" cannot disagree with "can build";
//! the optimizer hands refused layers to the next backend (CpuAcc, CpuRef).

use crate::kernels::elementwise::{self, Act};
use crate::kernels::tiles::Tiles;
use crate::kernels::typed::{self, Storage};
use crate::kernels::{
    conv, half, linalg, movement, norm, pool, product, reduce, resize, Bind, Step,
};
use backplane_backend_api::LayerDesc;
use backplane_core::ops::{BinaryOp, CustomOp, MathOp, PadMode};
use backplane_core::shape::normalize_axis;
use backplane_core::{DataType, Op, Quantization, TensorInfo};

/// A planned layer: the steps, in order, of one GPU layer.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The dispatches.
    pub steps: Vec<Step>,
}

/// The dimensions of input `slot` (empty when absent).
fn dims(layer: &LayerDesc, slot: usize) -> Vec<usize> {
    layer
        .inputs
        .get(slot)
        .map(|i| i.shape.dims().to_vec())
        .unwrap_or_default()
}

/// Refuse an op GpuAcc has no kernel for.
fn not_implemented(name: &str) -> Result<Plan, String> {
    Err(format!("GpuAcc does not implement {name}"))
}

fn ok(steps: Vec<Step>) -> Result<Plan, String> {
    Ok(Plan { steps })
}

/// No input or output is quantized and every output has elements, or the reason.
fn plain(layer: &LayerDesc) -> Result<(), String> {
    let name = layer.op.name();
    for (what, list) in [("input", &layer.inputs), ("output", &layer.outputs)] {
        for (slot, t) in list.iter().enumerate() {
            if t.quant != Quantization::None {
                return Err(format!(
                    "{name} {what} {slot} is quantized; GpuAcc runs plain tensors"
                ));
            }
            // An empty result has no device buffer to read back: such layers stay with the
            // host backends (empty inputs, as to a Concat, are read by nobody).
            if what == "output" && t.shape.elements() == 0 {
                return Err(format!(
                    "{name} output {slot} has no elements; GpuAcc makes non-empty outputs only"
                ));
            }
        }
    }
    Ok(())
}

/// Every input and output is a plain tensor of one float type, f32 or f16 (which the
/// compute kernels take, see [`crate::kernels::half`]), or the reason.
fn all_float(layer: &LayerDesc) -> Result<(), String> {
    let name = layer.op.name();
    let first = layer.inputs.first().map(|t| t.dtype);
    for (what, list) in [("input", &layer.inputs), ("output", &layer.outputs)] {
        for (slot, t) in list.iter().enumerate() {
            let float = matches!(t.dtype, DataType::F32 | DataType::F16);
            if !float || Some(t.dtype) != first {
                return Err(format!(
                    "{name} {what} {slot} is {}; GpuAcc computes on f32 or f16 tensors of one type",
                    t.dtype
                ));
            }
        }
    }
    plain(layer)
}

/// Ops GpuAcc runs on tensors of other types than f32 (data movement by element size,
/// comparisons, Cast, Where): see [`typed`].
fn is_typed(op: &Op) -> bool {
    matches!(
        op,
        Op::Identity
            | Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Gather { .. }
            | Op::Where
            | Op::BinaryExt(_)
            | Op::Cast { .. }
            | Op::Split { .. }
            | Op::Resize(_)
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::Transpose { .. }
            | Op::Concat { .. }
            | Op::Slice(_)
            | Op::Pad(_)
    ) || matches!(op, Op::Math(m) if is_predicate(*m))
}

/// The math ops with bool results GpuAcc runs (see [`typed::predicate`]).
fn is_predicate(m: MathOp) -> bool {
    matches!(m, MathOp::IsNaN | MathOp::IsInf { .. } | MathOp::Not)
}

/// The type of input `slot` (f32 when absent).
fn dtype(layer: &LayerDesc, slot: usize) -> DataType {
    layer
        .inputs
        .get(slot)
        .map(|i| i.dtype)
        .unwrap_or(DataType::F32)
}

/// The output's element count.
fn out_len(layer: &LayerDesc) -> usize {
    layer
        .outputs
        .first()
        .map(|o| product(o.shape.dims()))
        .unwrap_or(0)
}

/// How GpuAcc runs `layer`, or why it cannot; products and convolutions take the layout
/// `tiles` asks for. `f16_kernels` says whether the device runs f16 compute kernels, or why not: a
/// step that would store a layer tensor as f16 (see [`crate::kernels::half`]) is refused
/// with that reason, so the layer falls to the next backend. Layers that only move f16
/// values (the kernels of [`typed`]) run on any adapter.
pub fn plan(
    layer: &LayerDesc,
    tiles: Tiles,
    f16_kernels: Result<(), &str>,
) -> Result<Plan, String> {
    let planned = plan_f32(layer, tiles, f16_kernels)?;
    let f16 = |bind: Bind| {
        let t = match bind {
            Bind::Input(s) => layer.inputs.get(s),
            Bind::Output(s) => layer.outputs.get(s),
            Bind::Scratch { .. } | Bind::Status => None,
        };
        t.is_some_and(|t| t.dtype == DataType::F16)
    };
    let mut steps = Vec::with_capacity(planned.steps.len());
    for step in planned.steps {
        let source = step.source.clone();
        let step = half::specialize(step, f16)?;
        if step.source != source {
            if let Err(why) = f16_kernels {
                return Err(format!(
                    "{} on f16 tensors needs GpuAcc's f16 kernels: {why}",
                    layer.op.name()
                ));
            }
        }
        steps.push(step);
    }
    ok(steps)
}

/// [`plan`]'s steps, their layer tensors bound as f32; f16 compute layers are refused here
/// when `f16_kernels` says the device has none.
fn plan_f32(
    layer: &LayerDesc,
    tiles: Tiles,
    f16_kernels: Result<(), &str>,
) -> Result<Plan, String> {
    let op = &layer.op;
    // Layers the optimizer inserts, control flow and fused layers: refused before the checks
    // below, whose messages would not fit them (their arm in the match says the same).
    if matches!(
        op,
        Op::MemCopy | Op::MemImport | Op::Permute { .. } | Op::If(_) | Op::Loop(_) | Op::Scan(_)
    ) {
        return Err(format!("{} is not run by GpuAcc", op.name()));
    }
    if is_typed(op) {
        plain(layer)?;
    } else {
        all_float(layer)?;
        // A compute op on f16 tensors runs its kernel's f16 variant: only with f16 kernels.
        if let (DataType::F16, Err(why)) = (dtype(layer, 0), f16_kernels) {
            return Err(format!(
                "{} on f16 tensors needs GpuAcc's f16 kernels: {why}",
                op.name()
            ));
        }
    }
    let refs: Vec<&TensorInfo> = layer.inputs.iter().collect();
    // Fused layers declare their outputs; the standard ops' are inferred and must agree.
    let inferred = match op {
        Op::Custom(_) => Ok(layer.outputs.clone()),
        _ => op.infer(&refs),
    };
    let inferred = inferred.map_err(|e| e.to_string())?;
    if inferred.len() != layer.outputs.len()
        || inferred
            .iter()
            .zip(&layer.outputs)
            .any(|(a, b)| !a.same_layout(b))
    {
        return Err(format!(
            "{} outputs are declared differently from what GpuAcc computes",
            op.name()
        ));
    }
    if layer.outputs.len() != 1 && !matches!(op, Op::Split { .. }) {
        return Err(format!("GpuAcc runs {} with one output only", op.name()));
    }
    let n = out_len(layer);
    match op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => {
            let bytes = layer.outputs.first().map(|o| o.num_bytes().unwrap_or(0));
            ok(typed::copy(bytes.unwrap_or(0))?)
        }
        Op::Gather { axis } => gather(layer, *axis),
        Op::Where => {
            let out = layer
                .outputs
                .first()
                .map(|o| o.shape.dims().to_vec())
                .unwrap_or_default();
            ok(typed::select(
                Storage::of(dtype(layer, 1)),
                &dims(layer, 0),
                &dims(layer, 1),
                &dims(layer, 2),
                &out,
            )?)
        }
        Op::BinaryExt(b) => {
            let out = layer
                .outputs
                .first()
                .map(|o| o.shape.dims().to_vec())
                .unwrap_or_default();
            ok(typed::compare(
                *b,
                dtype(layer, 0),
                &dims(layer, 0),
                &dims(layer, 1),
                &out,
            )?)
        }
        Op::Cast { to, .. } => ok(typed::cast(dtype(layer, 0), *to, n)?),
        Op::Split { axis, splits } => {
            let d = dims(layer, 0);
            let a = normalize_axis(*axis, d.len()).map_err(|e| e.to_string())?;
            ok(typed::split(Storage::of(dtype(layer, 0)), &d, a, splits)?)
        }
        Op::Resize(desc) => {
            if layer.inputs.len() != 1 {
                return Err("GpuAcc resizes to sizes or scales given as attributes only".into());
            }
            let t = dtype(layer, 0);
            let float = t == DataType::F32 || (t == DataType::F16 && f16_kernels.is_ok());
            ok(resize::resize(
                desc,
                &dims(layer, 0),
                Storage::of(t),
                float,
            )?)
        }
        Op::Transpose { perm } => ok(movement::transpose(
            Storage::of(dtype(layer, 0)),
            &dims(layer, 0),
            perm,
        )?),
        Op::Concat { axis } => {
            let d0 = dims(layer, 0);
            let a = normalize_axis(*axis, d0.len()).map_err(|e| e.to_string())?;
            let all: Vec<Vec<usize>> = (0..layer.inputs.len()).map(|s| dims(layer, s)).collect();
            ok(movement::concat(Storage::of(dtype(layer, 0)), &all, a)?)
        }
        Op::Unary(u) => ok(elementwise::unary(Act::Unary(*u), n)?),
        Op::Math(m) if is_predicate(*m) => ok(typed::predicate(*m, dtype(layer, 0), n)?),
        Op::Math(m) => match Act::from_math(*m) {
            Some(act) => ok(elementwise::unary(act, n)?),
            None => not_implemented(m.name()),
        },
        Op::Binary(b) => binary(layer, *b),
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let d = dims(layer, 0);
            let a = normalize_axis(*axis, d.len()).map_err(|e| e.to_string())?;
            ok(norm::softmax(&d, a, matches!(op, Op::LogSoftmax { .. }))?)
        }
        Op::LayerNormalization { axis, epsilon } => {
            let d = dims(layer, 0);
            let a = normalize_axis(*axis, d.len()).map_err(|e| e.to_string())?;
            let row = product(&d[a..]);
            let count = |slot: usize| product(&dims(layer, slot));
            let fits = |c: usize| c == 1 || c == row;
            if !fits(count(1)) || (layer.inputs.len() > 2 && !fits(count(2))) {
                return Err("GpuAcc's LayerNormalization takes a scale and bias of one value or one per normalized element".into());
            }
            let bias = (layer.inputs.len() > 2).then(|| count(2));
            ok(norm::layer_norm(&d, a, *epsilon, count(1), bias)?)
        }
        Op::Conv(_) | Op::Gemm(_) | Op::MatMul => product_with(layer, op, false, Act::None, tiles),
        Op::Pool(desc) => {
            let x = dims(layer, 0);
            if x.len() != 3 && x.len() != 4 {
                return Err("GpuAcc pools 1-D and 2-D inputs only".into());
            }
            ok(pool::pool(desc, &x)?)
        }
        Op::BatchNormalization { epsilon } => {
            let x = dims(layer, 0);
            if x.len() < 2 || layer.inputs.len() != 5 {
                return Err(
                    "GpuAcc's BatchNormalization needs rank >= 2 and all five inputs".into(),
                );
            }
            if (1..5).any(|s| product(&dims(layer, s)) != x[1]) {
                return Err("BatchNormalization parameters must hold one value per channel".into());
            }
            ok(norm::batch_norm(&x, *epsilon)?)
        }
        Op::Slice(desc) => {
            if layer.inputs.len() != 1 {
                return Err("GpuAcc slices with bounds given as attributes only".into());
            }
            let x = dims(layer, 0);
            let ranges = desc.resolve(&x).map_err(|e| e.to_string())?;
            let ranges: Vec<(i64, i64, usize)> =
                ranges.iter().map(|r| (r.start, r.step, r.len)).collect();
            ok(movement::slice(Storage::of(dtype(layer, 0)), &x, &ranges)?)
        }
        Op::Expand { .. } | Op::Tile { .. } => {
            if layer.inputs.len() != 1 {
                return Err(format!(
                    "GpuAcc runs {} with its shape given as an attribute only",
                    op.name()
                ));
            }
            let out = layer
                .outputs
                .first()
                .map(|o| o.shape.dims().to_vec())
                .unwrap_or_default();
            ok(typed::repeat(
                Storage::of(dtype(layer, 0)),
                &dims(layer, 0),
                &out,
            )?)
        }
        Op::Pad(desc) => {
            if layer.inputs.len() != 1 {
                return Err("GpuAcc pads with pads and value given as attributes only".into());
            }
            let x = dims(layer, 0);
            let out = layer
                .outputs
                .first()
                .map(|o| o.shape.dims().to_vec())
                .unwrap_or_default();
            let fill = match desc.mode {
                PadMode::Constant => movement::PadFill::Constant(movement::constant_bits(
                    dtype(layer, 0),
                    desc.value,
                )?),
                PadMode::Reflect => movement::PadFill::Reflect,
                PadMode::Edge => movement::PadFill::Edge,
                PadMode::Wrap => movement::PadFill::Wrap,
            };
            let begins = desc.pads.get(..x.len()).unwrap_or_default();
            ok(movement::pad(
                Storage::of(dtype(layer, 0)),
                &x,
                begins,
                &out,
                fill,
            )?)
        }
        Op::Reduce(desc) => {
            if layer.inputs.len() != 1 {
                return Err("GpuAcc reduces over axes given as an attribute only".into());
            }
            let x = dims(layer, 0);
            let mask = desc.reduced_mask(x.len()).map_err(|e| e.to_string())?;
            ok(reduce::reduce(desc.kind, &x, &mask)?)
        }
        Op::GlobalPool(kind) => ok(pool::global_pool(*kind, &dims(layer, 0))?),
        Op::MemCopy
        | Op::MemImport
        | Op::Permute { .. }
        | Op::If(_)
        | Op::Loop(_)
        | Op::Scan(_) => Err(format!("{} is not run by GpuAcc", op.name())),
        Op::Custom(c) => fused(layer, c, tiles),
        // Not yet on the GPU: left to the next backend.
        Op::InstanceNormalization { .. }
        | Op::ArgReduce(_)
        | Op::ConvTranspose(_)
        | Op::Rnn(_)
        | Op::Trilu { .. }
        | Op::GatherElements { .. }
        | Op::GatherND { .. }
        | Op::ScatterND { .. }
        | Op::ScatterElements { .. }
        | Op::OneHot { .. }
        | Op::TopK(_)
        | Op::CumSum { .. }
        | Op::Hardmax { .. }
        | Op::Lrn { .. }
        | Op::QuantizeLinear { .. }
        | Op::DequantizeLinear { .. }
        | Op::DynamicQuantizeLinear
        | Op::IntegerAveragePool(_)
        | Op::Lookup
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

/// Gather along `axis`; constant indices are checked here (an index out of range is then
/// refused, so the host backend reports it), run-time ones by the kernel, whose status word
/// the workload reports as an error (see [`typed::gather`]).
fn gather(layer: &LayerDesc, axis: i64) -> Result<Plan, String> {
    let d = dims(layer, 0);
    let a = normalize_axis(axis, d.len()).map_err(|e| e.to_string())?;
    let len = d[a];
    if let Some(indices) = layer.constant(1) {
        let bound = len as f64;
        if indices
            .to_f64_vec()
            .iter()
            .any(|&k| k < -bound || k >= bound)
        {
            return Err(format!(
                "a Gather index is outside the axis of {len}; left to the host backend to report"
            ));
        }
    }
    ok(typed::gather(
        Storage::of(dtype(layer, 0)),
        product(&d[..a]),
        len,
        product(&d[a + 1..]),
        product(&dims(layer, 1)),
        dtype(layer, 1),
    )?)
}

/// A broadcasting binary op.
/// The dimensions of a layer's output (none when it has no such output).
fn dims_of(t: Option<&TensorInfo>) -> Vec<usize> {
    t.map(|o| o.shape.dims().to_vec()).unwrap_or_default()
}

fn binary(layer: &LayerDesc, op: BinaryOp) -> Result<Plan, String> {
    let out = dims_of(layer.outputs.first());
    ok(elementwise::binary(
        op,
        Act::None,
        &dims(layer, 0),
        &dims(layer, 1),
        &out,
    )?)
}

/// A product (Conv, Gemm, MatMul) with `act` in its epilogue, after the bias of input 2 when
/// `bias` (a fused MatMul + Add).
fn product_with(
    layer: &LayerDesc,
    op: &Op,
    bias: bool,
    act: Act,
    tiles: Tiles,
) -> Result<Plan, String> {
    match op {
        Op::Conv(desc) => {
            let (x, w) = (dims(layer, 0), dims(layer, 1));
            if x.len() != 3 && x.len() != 4 {
                return Err("GpuAcc runs 1-D and 2-D convolutions only".into());
            }
            ok(conv::conv(
                desc,
                &x,
                &w,
                layer.inputs.len() > 2,
                act,
                tiles,
            )?)
        }
        Op::MatMul => {
            let b = dims(layer, 1);
            if bias {
                let n = b.last().copied().unwrap_or(0);
                let c = dims(layer, 2);
                if b.len() < 2 || product(&c) != n || c.last() != Some(&n) {
                    return Err("GpuAcc adds a MatMul bias of one value per column only".into());
                }
            }
            ok(linalg::matmul(&dims(layer, 0), &b, bias, act, tiles)?)
        }
        Op::Gemm(desc) => {
            let c = (layer.inputs.len() > 2).then(|| dims(layer, 2));
            ok(linalg::gemm(
                desc,
                &dims(layer, 0),
                &dims(layer, 1),
                c.as_deref(),
                act,
                tiles,
            )?)
        }
        other => Err(format!("GpuAcc does not fuse after {}", other.name())),
    }
}

/// A fused layer of GpuAcc's `optimize_subgraph`.
fn fused(layer: &LayerDesc, c: &CustomOp, tiles: Tiles) -> Result<Plan, String> {
    let f = crate::fusion::decode(c)?;
    if f.bias && layer.inputs.len() != 3 {
        return Err("a fused MatMul + bias takes three inputs".into());
    }
    if let Op::Binary(op) = f.product {
        let out = dims_of(layer.outputs.first());
        return ok(elementwise::binary(
            op,
            f.act,
            &dims(layer, 0),
            &dims(layer, 1),
            &out,
        )?);
    }
    product_with(layer, &f.product, f.bias, f.act, tiles)
}

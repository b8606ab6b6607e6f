//! Elementwise arithmetic, activations, quantize/dequantize, softmax and mean.

use super::{invalid, unsupported, Cx, Tx};
use crate::layout::NHWC_TO_NCHW;
use crate::schema::options as opt;
use backplane_core::ops::{BinaryExtOp, BinaryOp, ReduceDesc, ReduceKind, UnaryOp};
use backplane_core::{DataType, Op, Tensor};

/// ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM with broadcasting and a fused activation.
pub(super) fn binary(cx: &mut Cx<'_, '_, '_>, op: BinaryOp) -> Tx<()> {
    let ty = match op {
        BinaryOp::Add => opt::arith::ADD,
        BinaryOp::Sub => opt::arith::SUB,
        BinaryOp::Mul => opt::arith::MUL,
        BinaryOp::Div => opt::arith::DIV,
        _ => 0,
    };
    let act = match cx.options(ty) {
        Some(o) if ty != 0 => o.i8(opt::arith::ACTIVATION, 0)?,
        _ => 0,
    };
    broadcast(cx, Op::Binary(op), act)
}

/// PRELU: `x` where it is positive, `alpha * x` elsewhere, the slopes broadcast to `x`.
pub(super) fn prelu(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    broadcast(cx, Op::BinaryExt(BinaryExtOp::PRelu), 0)
}

/// A two-input operator with broadcasting, then a fused activation, in f32 (quantized
/// operands go through f32), channels-first where an operand already is.
fn broadcast(cx: &mut Cx<'_, '_, '_>, op: Op, act: i8) -> Tx<()> {
    let (a, b, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    let out_rank = cx.shape(out)?.len();
    let dtype = cx.dtype(out)?;
    if dtype != DataType::F32 && !cx.quantized(out) {
        return unsupported(format!("{} on {dtype} tensors is not supported", op.name()));
    }
    // Channels-first when an operand already is and the other can follow (a 4-D tensor, or
    // a constant that broadcasts).
    let follows = |cx: &Cx<'_, '_, '_>, t: usize| -> Tx<bool> {
        Ok(cx.shape(t)?.len() == 4 || cx.is_constant(t))
    };
    let nchw =
        out_rank == 4 && (cx.is_nchw(a) || cx.is_nchw(b)) && follows(cx, a)? && follows(cx, b)?;
    let xa = operand(cx, a, nchw)?;
    let xb = operand(cx, b, nchw)?;
    let name = cx.fresh(op.name());
    let y = cx.g.layer(&name, op, &[xa, xb])?;
    let y = cx.activation(y, act)?;
    cx.emit(out, y, nchw)
}

/// An f32 operand of a broadcasting operator in the given form: a lower-rank constant in a
/// channels-first operation is first given rank 4 (leading ones), then permuted.
fn operand(cx: &mut Cx<'_, '_, '_>, t: usize, nchw: bool) -> Tx<backplane_core::TensorId> {
    let rank = cx.shape(t)?.len();
    if !nchw || rank == 4 {
        return Ok(cx.float(t, Some(nchw))?.0);
    }
    let (id, _) = cx.float(t, Some(false))?;
    let Some(value) = cx.g.net.tensor(id).constant().cloned() else {
        return invalid("a broadcast operand of a channels-first operation must be constant");
    };
    let mut dims = vec![1usize; 4 - rank.min(4)];
    dims.extend_from_slice(value.shape().dims());
    let reshaped = (*value)
        .clone()
        .reinterpret(backplane_core::TensorInfo::new(value.dtype(), dims))?;
    let permuted = crate::layout::permute(&reshaped, &crate::layout::TO_NCHW)?;
    Ok(cx.g.constant(&format!("{}/nchw", cx.name), permuted)?)
}

/// An elementwise unary operator (in f32; quantized tensors go through f32).
pub(super) fn unary(cx: &mut Cx<'_, '_, '_>, op: Op) -> Tx<()> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    let (id, nchw) = cx.float(x, None)?;
    let name = cx.fresh(op.name());
    let y = cx.g.layer(&name, op, &[id])?;
    cx.emit(out, y, nchw)
}

/// LEAKY_RELU with its alpha.
pub(super) fn leaky_relu(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let alpha = match cx.options(opt::leaky_relu::TYPE) {
        Some(o) => o.f32(opt::leaky_relu::ALPHA, 0.0)?,
        None => return invalid("LEAKY_RELU without its options"),
    };
    unary(cx, Op::Unary(UnaryOp::LeakyRelu { alpha }))
}

/// QUANTIZE: f32 → integers, or integers → integers of another scale (requantize).
pub(super) fn quantize(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    if !cx.quantized(out) {
        return unsupported("QUANTIZE to a tensor without quantization parameters");
    }
    let (id, nchw) = cx.float(x, None)?;
    cx.emit(out, id, nchw)
}

/// DEQUANTIZE: integers (or f16 weights) → f32.
pub(super) fn dequantize(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    let (id, nchw) = cx.float(x, None)?;
    if cx.dtype(out)? != DataType::F32 {
        return unsupported("DEQUANTIZE to a type other than f32");
    }
    // The f32 value may be the input itself (an f32 input): copy so the output has a layer.
    let name = cx.fresh("Identity");
    let y = cx.g.layer(&name, Op::Identity, &[id])?;
    cx.emit(out, y, nchw)
}

/// SOFTMAX over the last axis, with beta.
pub(super) fn softmax(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let beta = match cx.options(opt::softmax::TYPE) {
        Some(o) => o.f32(opt::softmax::BETA, 0.0)?,
        None => 1.0,
    };
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    let rank = cx.shape(x)?.len();
    let (mut id, nchw) = cx.float(x, None)?;
    if beta != 1.0 {
        let b = cx.g.constant("beta", Tensor::scalar(beta))?;
        let name = cx.fresh("beta");
        id = cx.g.layer(&name, Op::Binary(BinaryOp::Mul), &[id, b])?;
    }
    let axis = if nchw { 1 } else { rank as i64 - 1 };
    let name = cx.fresh("Softmax");
    let y = cx.g.layer(&name, Op::Softmax { axis }, &[id])?;
    cx.emit(out, y, nchw)
}

/// MEAN over constant axes (keep_dims from the options).
pub(super) fn mean(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let keep = match cx.options(opt::reducer::TYPE) {
        Some(o) => o.bool(opt::reducer::KEEP_DIMS, false)?,
        None => false,
    };
    let (x, axes_t, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    let rank = cx.shape(x)?.len();
    let mut axes: Vec<usize> = Vec::new();
    for a in cx.const_ints(axes_t)? {
        let a = if a < 0 { a + rank as i64 } else { a };
        if a < 0 || a >= rank as i64 {
            return invalid(format!("MEAN axis {a} out of range for rank {rank}"));
        }
        if !axes.contains(&(a as usize)) {
            axes.push(a as usize);
        }
    }
    // Channels-first works when the kept axes come out in TFLite's order: the channels
    // reduced, or both spatial axes reduced.
    let nchw = rank == 4
        && cx.is_nchw(x)
        && (keep || axes.contains(&3) || (axes.contains(&1) && axes.contains(&2)));
    let (id, nchw) = cx.float(x, Some(nchw))?;
    let mapped: Vec<i64> = axes
        .iter()
        .map(|&a| {
            if nchw {
                NHWC_TO_NCHW[a] as i64
            } else {
                a as i64
            }
        })
        .collect();
    // Keras writes a squeeze-excite pool as a MEAN over H and W to [N, C], then a RESHAPE to
    // [N, 1, 1, C] for the convolutions: the mean then keeps its axes, giving the NCHW
    // [N, C, 1, 1] those convolutions read (the bytes of [N, C]), so that the block stays in
    // one channels-first (and in CpuAcc, channels-last) region with no transpose.
    let plane = axes.len() == 2 && axes.contains(&1) && axes.contains(&2);
    let expand = nchw && !keep && plane && expands_to_image(cx, out);
    let name = cx.fresh("ReduceMean");
    let y = cx.g.layer(
        &name,
        Op::Reduce(ReduceDesc {
            kind: ReduceKind::Mean,
            axes: mapped,
            keepdims: keep || expand,
            noop_with_empty_axes: true,
        }),
        &[id],
    )?;
    if expand {
        return cx.emit_expanded(out, y);
    }
    cx.emit(out, y, nchw && keep)
}

/// Whether the `[N, C]` tensor `t` is read only by a RESHAPE to `[N, 1, 1, C]`.
fn expands_to_image(cx: &Cx<'_, '_, '_>, t: usize) -> bool {
    let Ok(dims) = cx.shape(t) else {
        return false;
    };
    let Some(reader) = cx.sole_reader(t) else {
        return false;
    };
    let target = reader.outputs.first().and_then(|&o| cx.tensor(o).ok());
    dims.len() == 2
        && super::code_name(&reader.code) == "RESHAPE"
        && reader.inputs.first() == Some(&Some(t))
        && target.is_some_and(|o| o.shape == [dims[0], 1, 1, dims[1]])
}

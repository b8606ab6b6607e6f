//! Data movement: concatenation, padding, reshapes, transposes, slices, gathers, splits and
//! packing. Only CONCATENATION and PAD (which may requantize or pad with a real zero) go
//! through f32 for quantized tensors; the others move the stored values as they are.

use super::{invalid, unsupported, Cx, Tx};
use crate::layout::NHWC_TO_NCHW;
use crate::schema::options as opt;
use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
use backplane_core::{DataType, Op, Tensor, TensorId};

fn norm_axis(axis: i64, rank: usize) -> Tx<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if a < 0 || a >= rank as i64 {
        return invalid(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(a as usize)
}

/// CONCATENATION along an axis, with a fused activation.
pub(super) fn concatenation(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::concatenation as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("CONCATENATION without its options");
    };
    let out = cx.output(0)?;
    let rank = cx.shape(out)?.len();
    let axis = norm_axis(i64::from(o.i32(f::AXIS, 0)?), rank)?;
    let n = cx.op.inputs.len();
    let mut ts = Vec::with_capacity(n);
    for k in 0..n {
        ts.push(cx.input(k)?);
    }
    let nchw = rank == 4 && ts.iter().any(|&t| cx.is_nchw(t));
    let mut ids = Vec::with_capacity(n);
    for &t in &ts {
        ids.push(cx.float(t, Some(nchw))?.0);
    }
    let axis = if nchw { NHWC_TO_NCHW[axis] } else { axis };
    let name = cx.fresh("Concat");
    let y = cx.g.layer(&name, Op::Concat { axis: axis as i64 }, &ids)?;
    let y = cx.activation(y, o.i8(f::ACTIVATION, 0)?)?;
    cx.emit(out, y, nchw)
}

/// PAD / PADV2 with constant paddings [rank, 2] (and a constant pad value for PADV2).
pub(super) fn pad(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, p, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    let rank = cx.shape(x)?.len();
    let pads = cx.const_ints(p)?;
    if pads.len() != 2 * rank || pads.iter().any(|&v| v < 0) {
        return invalid(format!("PAD paddings {pads:?} for rank {rank}"));
    }
    let value = match cx.opt_input(2) {
        Some(v) => {
            let (vid, _) = cx.float(v, Some(false))?;
            match cx.g.net.tensor(vid).constant() {
                Some(t) => t.to_f64_vec().first().copied().unwrap_or(0.0),
                None => return unsupported("PADV2 with a computed pad value"),
            }
        }
        None => 0.0,
    };
    let (id, nchw) = cx.float(x, None)?;
    let order: Vec<usize> = if nchw {
        crate::layout::TO_NCHW.to_vec()
    } else {
        (0..rank).collect()
    };
    let mut flat = Vec::with_capacity(2 * rank);
    for &a in &order {
        flat.push(pads[2 * a]);
    }
    for &a in &order {
        flat.push(pads[2 * a + 1]);
    }
    let name = cx.fresh("Pad");
    let y = cx.g.layer(
        &name,
        Op::Pad(PadDesc {
            mode: PadMode::Constant,
            pads: flat,
            value,
        }),
        &[id],
    )?;
    cx.emit(out, y, nchw)
}

/// RESHAPE, SQUEEZE, EXPAND_DIMS: to the output tensor's declared shape.
pub(super) fn reshape(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    same_quantization(cx, x, out)?;
    let shape = cx.shape(out)?;
    // [N, 1, 1, C] has the bytes of NCHW [N, C, 1, 1]: the channels-first form is made
    // directly (no transpose for the convolutions reading it), and is the MEAN's own result
    // when it was computed keeping its axes for this reshape.
    let (shape, nchw) = match shape[..] {
        [n, 1, 1, c] => {
            let expanded = cx.g.expanded(x);
            if let Some(y) = expanded.filter(|&y| cx.g.info(y).shape.dims() == [n, c, 1, 1]) {
                return cx.emit(out, y, true);
            }
            (vec![n, c, 1, 1], true)
        }
        _ => (shape, false),
    };
    let id = cx.nhwc(x)?;
    let name = cx.fresh("Reshape");
    let y = cx.g.layer(&name, Op::Reshape { shape }, &[id])?;
    cx.emit(out, y, nchw)
}

/// The data-movement operators move stored integers: input and output must agree on them.
fn same_quantization(cx: &Cx<'_, '_, '_>, x: usize, out: usize) -> Tx<()> {
    let (a, b) = (cx.tensor(x)?, cx.tensor(out)?);
    if cx.quantized(x) && a.quant != b.quant {
        return unsupported(format!(
            "'{}' and '{}' have different quantization parameters",
            a.name, b.name
        ));
    }
    Ok(())
}

/// TRANSPOSE by a constant permutation.
pub(super) fn transpose(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, p, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    same_quantization(cx, x, out)?;
    let rank = cx.shape(x)?.len();
    let perm: Vec<usize> = cx
        .const_ints(p)?
        .into_iter()
        .map(|a| norm_axis(a, rank))
        .collect::<Tx<_>>()?;
    let id = cx.nhwc(x)?;
    let name = cx.fresh("Transpose");
    let y = cx.g.transpose(&name, id, &perm)?;
    cx.emit(out, y, false)
}

/// STRIDED_SLICE with constant begin/end/strides, begin/end masks and shrink_axis_mask.
pub(super) fn strided_slice(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::strided_slice as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("STRIDED_SLICE without its options");
    };
    if o.i32(f::ELLIPSIS_MASK, 0)? != 0 || o.i32(f::NEW_AXIS_MASK, 0)? != 0 {
        return unsupported("STRIDED_SLICE with an ellipsis or new-axis mask");
    }
    if o.bool(f::OFFSET, false)? {
        return unsupported("STRIDED_SLICE with offset");
    }
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    same_quantization(cx, x, out)?;
    let begin = cx.const_ints(cx.input(1)?)?;
    let end = cx.const_ints(cx.input(2)?)?;
    let strides = match cx.opt_input(3) {
        Some(s) => cx.const_ints(s)?,
        None => vec![1; begin.len()],
    };
    let xd = cx.shape(x)?;
    if begin.len() != end.len() || begin.len() != strides.len() || begin.len() > xd.len() {
        return invalid("STRIDED_SLICE begin/end/strides lengths differ");
    }
    let (bm, em, sm) = (
        o.i32(f::BEGIN_MASK, 0)?,
        o.i32(f::END_MASK, 0)?,
        o.i32(f::SHRINK_AXIS_MASK, 0)?,
    );
    let mut desc = SliceDesc {
        starts: Vec::new(),
        ends: Vec::new(),
        axes: Vec::new(),
        steps: Vec::new(),
    };
    for (i, ((&b, &e), &s)) in begin.iter().zip(&end).zip(&strides).enumerate() {
        if s == 0 {
            return invalid("STRIDED_SLICE stride 0");
        }
        let bit = |m: i32| (m >> i) & 1 == 1;
        let (start, stop) = if bit(sm) {
            let b = if b < 0 { b + xd[i] as i64 } else { b };
            (b, b + 1)
        } else {
            let start = if bit(bm) {
                if s > 0 {
                    0
                } else {
                    i64::MAX
                }
            } else {
                b
            };
            let stop = if bit(em) {
                if s > 0 {
                    i64::MAX
                } else {
                    i64::MIN
                }
            } else {
                e
            };
            (start, stop)
        };
        desc.starts.push(start);
        desc.ends.push(stop);
        desc.axes.push(i as i64);
        desc.steps.push(if bit(sm) { 1 } else { s });
    }
    let id = cx.nhwc(x)?;
    let name = cx.fresh("Slice");
    let mut y = cx.g.layer(&name, Op::Slice(desc), &[id])?;
    let od = cx.shape(out)?;
    if cx.g.info(y).shape.dims() != od.as_slice() {
        let name = cx.fresh("Reshape");
        y = cx.g.layer(&name, Op::Reshape { shape: od }, &[y])?;
    }
    cx.emit(out, y, false)
}

/// GATHER along an axis (batch_dims 0).
pub(super) fn gather(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::gather as f;
    let (axis, batch_dims) = match cx.options(f::TYPE) {
        Some(o) => (o.i32(f::AXIS, 0)?, o.i32(f::BATCH_DIMS, 0)?),
        None => (0, 0),
    };
    if batch_dims != 0 {
        return unsupported("GATHER with batch_dims");
    }
    let (x, i, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    same_quantization(cx, x, out)?;
    let xi = cx.nhwc(x)?;
    let ii = cx.nhwc(i)?;
    let name = cx.fresh("Gather");
    let y = cx.g.layer(
        &name,
        Op::Gather {
            axis: i64::from(axis),
        },
        &[xi, ii],
    )?;
    cx.emit(out, y, false)
}

/// SPLIT (axis, input; equal parts) and SPLIT_V (input, sizes, axis).
pub(super) fn split(cx: &mut Cx<'_, '_, '_>, sized: bool) -> Tx<()> {
    let (x, axis_t) = if sized {
        (cx.input(0)?, cx.input(2)?)
    } else {
        (cx.input(1)?, cx.input(0)?)
    };
    let xd = cx.shape(x)?;
    let axis_v = cx.const_ints(axis_t)?;
    let Some(&a) = axis_v.first() else {
        return invalid("SPLIT without an axis");
    };
    let axis = norm_axis(a, xd.len())?;
    let outs = cx.op.outputs.clone();
    let splits: Vec<usize> = outs
        .iter()
        .map(|&t| cx.shape(t).map(|d| d.get(axis).copied().unwrap_or(0)))
        .collect::<Tx<_>>()?;
    if splits.iter().sum::<usize>() != xd[axis] {
        return invalid(format!("SPLIT parts {splits:?} of {}", xd[axis]));
    }
    for &t in &outs {
        same_quantization(cx, x, t)?;
    }
    let (id, nchw) = cx.any(x)?;
    let nchw = nchw && xd.len() == 4;
    let id = if nchw { id } else { cx.nhwc(x)? };
    let core_axis = if nchw { NHWC_TO_NCHW[axis] } else { axis };
    let name = cx.fresh("Split");
    let ys = cx.g.net.add_layer(
        &name,
        Op::Split {
            axis: core_axis as i64,
            splits,
        },
        &[id],
    )?;
    for (&t, &y) in outs.iter().zip(&ys) {
        cx.emit(t, y, nchw)?;
    }
    Ok(())
}

/// PACK: stack along a new axis.
pub(super) fn pack(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let Some(o) = cx.options(opt::pack::TYPE) else {
        return invalid("PACK without its options");
    };
    let out = cx.output(0)?;
    let rank = cx.shape(out)?.len();
    let axis = norm_axis(i64::from(o.i32(opt::pack::AXIS, 0)?), rank)? as i64;
    let mut ids: Vec<TensorId> = Vec::new();
    for k in 0..cx.op.inputs.len() {
        let t = cx.input(k)?;
        same_quantization(cx, t, out)?;
        let id = cx.nhwc(t)?;
        let name = cx.fresh("Unsqueeze");
        ids.push(cx.g.layer(&name, Op::Unsqueeze { axes: vec![axis] }, &[id])?);
    }
    let name = cx.fresh("Concat");
    let y = cx.g.layer(&name, Op::Concat { axis }, &ids)?;
    cx.emit(out, y, false)
}

/// UNPACK: split into slices along an axis, dropping it.
pub(super) fn unpack(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let Some(o) = cx.options(opt::unpack::TYPE) else {
        return invalid("UNPACK without its options");
    };
    let x = cx.input(0)?;
    let xd = cx.shape(x)?;
    let axis = norm_axis(i64::from(o.i32(opt::unpack::AXIS, 0)?), xd.len())?;
    let outs = cx.op.outputs.clone();
    if outs.len() != xd[axis] {
        return invalid(format!("UNPACK into {} of {}", outs.len(), xd[axis]));
    }
    let id = cx.nhwc(x)?;
    let name = cx.fresh("Split");
    let ys = cx.g.net.add_layer(
        &name,
        Op::Split {
            axis: axis as i64,
            splits: vec![1; outs.len()],
        },
        &[id],
    )?;
    for (&t, &y) in outs.iter().zip(&ys) {
        same_quantization(cx, x, t)?;
        let name = cx.fresh("Squeeze");
        let s = cx.g.layer(
            &name,
            Op::Squeeze {
                axes: vec![axis as i64],
            },
            &[y],
        )?;
        cx.emit(t, s, false)?;
    }
    Ok(())
}

/// TILE by constant multiples.
pub(super) fn tile(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, m, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    same_quantization(cx, x, out)?;
    let repeats: Vec<usize> = cx
        .const_ints(m)?
        .into_iter()
        .map(|r| usize::try_from(r).map_or_else(|_| invalid(format!("TILE multiple {r}")), Ok))
        .collect::<Tx<_>>()?;
    let id = cx.nhwc(x)?;
    let name = cx.fresh("Tile");
    let y = cx.g.layer(&name, Op::Tile { repeats }, &[id])?;
    cx.emit(out, y, false)
}

/// SHAPE of a tensor: its dimensions are known at import, so the result is a constant
/// (int32 or int64, as the output tensor is declared).
pub(super) fn shape(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    let dims = cx.shape(x)?;
    let value = match cx.dtype(out)? {
        DataType::I32 => Tensor::from_vec(
            vec![dims.len()],
            dims.iter()
                .map(|&d| i32::try_from(d))
                .collect::<Result<Vec<_>, _>>()
                .or_else(|_| invalid(format!("{}: a dimension beyond int32", cx.name)))?,
        )?,
        DataType::I64 => Tensor::from_vec(
            vec![dims.len()],
            dims.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        )?,
        other => return unsupported(format!("SHAPE to {other}")),
    };
    let c = cx.g.constant(&format!("{}/shape", cx.name), value)?;
    cx.emit(out, c, false)
}

/// DEPTH_TO_SPACE (channels-last, depth index `(i·b + j)·C + c`): a reshape to
/// `[N, H, W, b, b, C]`, a transpose to `[N, H, b, W, b, C]` and a reshape to
/// `[N, H·b, W·b, C]`. The block size is read from the shapes (the output's height over
/// the input's); stored integers move as they are.
pub(super) fn depth_to_space(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    same_quantization(cx, x, out)?;
    let (xs, ys) = (cx.shape(x)?, cx.shape(out)?);
    let ([n, h, w, c_in], [_, h2, w2, c]) = (xs.as_slice(), ys.as_slice()) else {
        return unsupported("DEPTH_TO_SPACE of a tensor that is not 4-D");
    };
    let b = if *h > 0 { h2 / h } else { 0 };
    if b == 0 || h * b != *h2 || w * b != *w2 || b * b * c != *c_in {
        return invalid(format!(
            "{}: DEPTH_TO_SPACE from {xs:?} to {ys:?} has no block size",
            cx.name
        ));
    }
    let id = cx.nhwc(x)?;
    let name = cx.fresh("Reshape");
    let split = vec![*n, *h, *w, b, b, *c];
    let s = cx.g.layer(&name, Op::Reshape { shape: split }, &[id])?;
    let name = cx.fresh("Transpose");
    let t = cx.g.transpose(&name, s, &[0, 1, 3, 2, 4, 5])?;
    let name = cx.fresh("Reshape");
    let y = cx.g.layer(&name, Op::Reshape { shape: ys.clone() }, &[t])?;
    cx.emit(out, y, false)
}

//! Convolutions, fully connected layers, batched products, pooling and resizing: the
//! operators whose weights are re-laid out at import and that run channels-first.

use super::{invalid, unsupported, Cx, Tx};
use crate::layout::permute;
use crate::schema::options as opt;
use crate::schema::PADDING_SAME;
use backplane_core::ops::{
    AutoPad, ConvDesc, ConvTransposeDesc, CoordinateTransform, GemmDesc, NearestMode, PoolDesc,
    PoolKind, ResizeDesc, ResizeMode, Window,
};
use backplane_core::{DataType, Op, Quantization, Tensor, TensorId};

fn auto_pad(p: i8) -> AutoPad {
    if p == PADDING_SAME {
        // TFLite's SAME puts the odd padding pixel at the end, as ONNX's SAME_UPPER does.
        AutoPad::SameUpper
    } else {
        AutoPad::Valid
    }
}

/// Constant weights `t` as f32: quantized ones dequantized with their per-tensor or per-axis
/// scales (`(q - zero_point) * scale`), f16 ones widened.
pub(super) fn float_weights(cx: &Cx<'_, '_, '_>, t: usize) -> Tx<Tensor> {
    if !cx.is_constant(t) {
        return unsupported(format!(
            "weights '{}' computed at run time are not supported",
            cx.tensor(t)?.name
        ));
    }
    let value = cx.constant(t)?;
    match crate::fold::to_f32(&value, &cx.tensor(t)?.name)? {
        Some(f) => Ok(f),
        None => unsupported(format!(
            "{} weights without quantization parameters",
            value.dtype()
        )),
    }
}

/// The 8-bit weights of a quantized convolution (input, weights and output quantized, the
/// weights per tensor or per output channel) kept as integers: the constant permuted by
/// `perm` and a DequantizeLinear along the output channels, so that a backend can fold the
/// DequantizeLinear → Conv → QuantizeLinear chain into an integer convolution (CpuAcc
/// does). `None` where the layer is not of that form (the weights are then dequantized at
/// import).
fn quantized_weights(
    cx: &mut Cx<'_, '_, '_>,
    x: usize,
    w: usize,
    out: usize,
    perm: &[usize],
) -> Tx<Option<TensorId>> {
    let wt = cx.dtype(w)?;
    if !matches!(wt, DataType::I8 | DataType::U8)
        || !cx.quantized(x)
        || !cx.quantized(out)
        || !cx.is_constant(w)
    {
        return Ok(None);
    }
    let value = cx.constant(w)?;
    let (scales, zeros): (Vec<f32>, Vec<i32>) = match &value.info().quant {
        Quantization::PerTensor { scale, zero_point } => (vec![*scale], vec![*zero_point]),
        Quantization::PerAxis {
            axis,
            scales,
            zero_points,
        } if perm.first() == Some(axis) => (scales.clone(), zero_points.clone()),
        _ => return Ok(None),
    };
    let permuted = permute(&value, perm)?;
    let shape = permuted.shape().clone();
    let plain = permuted.reinterpret(backplane_core::TensorInfo::new(wt, shape))?;
    let m = plain.shape().dims().first().copied().unwrap_or(0);
    if scales.len() != 1 && scales.len() != m || zeros.len() != scales.len() {
        return invalid(format!(
            "{}: {} weight scales for {m} output channels",
            cx.name,
            scales.len()
        ));
    }
    let zp_tensor = |zs: &[i32]| -> Tx<Tensor> {
        if let [z] = zs {
            return super::zero_point(wt, *z);
        }
        let what = format!("{}: a weight zero point does not fit {wt}", cx.name);
        Ok(match wt {
            DataType::I8 => match zs.iter().map(|&z| i8::try_from(z).ok()).collect() {
                Some(v) => Tensor::from_vec::<i8>(vec![zs.len()], v)?,
                None => return invalid(what),
            },
            _ => match zs.iter().map(|&z| u8::try_from(z).ok()).collect() {
                Some(v) => Tensor::from_vec::<u8>(vec![zs.len()], v)?,
                None => return invalid(what),
            },
        })
    };
    let z = zp_tensor(&zeros)?;
    let s = if let [s] = scales.as_slice() {
        Tensor::scalar(*s)
    } else {
        Tensor::from_vec(vec![scales.len()], scales)?
    };
    let c = cx.g.constant(&format!("{}/weights_q", cx.name), plain)?;
    let s = cx.g.constant(&format!("{}/weights_scale", cx.name), s)?;
    let z =
        cx.g.constant(&format!("{}/weights_zero_point", cx.name), z)?;
    let name = cx.fresh("dequantize_weights");
    let dq = cx.g.layer(
        &name,
        Op::DequantizeLinear {
            axis: 0,
            to: DataType::F32,
            block_size: 0,
        },
        &[c, s, z],
    )?;
    Ok(Some(dq))
}

/// The int32 bias of a quantized convolution kept as integers behind a DequantizeLinear
/// (its scales, per tensor or per channel, as the file gives them). `None` where the bias
/// is absent or not a quantized int32 constant.
fn quantized_bias(cx: &mut Cx<'_, '_, '_>, k: usize, channels: usize) -> Tx<Option<TensorId>> {
    let Some(t) = cx.opt_input(k) else {
        return Ok(None);
    };
    if cx.dtype(t)? != DataType::I32 || !cx.is_constant(t) {
        return Ok(None);
    }
    let value = cx.constant(t)?;
    let scales = match &value.info().quant {
        Quantization::PerTensor {
            scale,
            zero_point: 0,
        } => vec![*scale],
        Quantization::PerAxis {
            scales,
            zero_points,
            ..
        } if zero_points.iter().all(|&z| z == 0) && scales.len() == channels => scales.clone(),
        _ => return Ok(None),
    };
    if value.shape().elements() != channels {
        return invalid(format!(
            "{}: bias has {} values for {channels} channels",
            cx.name,
            value.shape().elements()
        ));
    }
    let plain = value.reinterpret(backplane_core::TensorInfo::new(
        DataType::I32,
        vec![channels],
    ))?;
    let s = if let [s] = scales.as_slice() {
        Tensor::scalar(*s)
    } else {
        Tensor::from_vec(vec![channels], scales)?
    };
    let c = cx.g.constant(&format!("{}/bias_q", cx.name), plain)?;
    let s = cx.g.constant(&format!("{}/bias_scale", cx.name), s)?;
    let name = cx.fresh("dequantize_bias");
    let dq = cx.g.layer(
        &name,
        Op::DequantizeLinear {
            axis: 0,
            to: DataType::F32,
            block_size: 0,
        },
        &[c, s],
    )?;
    Ok(Some(dq))
}

/// The bias of output `k`'s operator as an f32 constant of `channels` values.
fn bias(cx: &mut Cx<'_, '_, '_>, k: usize, channels: usize) -> Tx<Option<TensorId>> {
    let Some(t) = cx.opt_input(k) else {
        return Ok(None);
    };
    let b = float_weights(cx, t)?;
    if b.shape().elements() != channels {
        return invalid(format!(
            "{}: bias has {} values for {channels} channels",
            cx.name,
            b.shape().elements()
        ));
    }
    let b = b.reinterpret(backplane_core::TensorInfo::new(
        DataType::F32,
        vec![channels],
    ))?;
    Ok(Some(cx.g.constant(&format!("{}/bias", cx.name), b)?))
}

fn check_activation_types(cx: &Cx<'_, '_, '_>, x: usize, out: usize) -> Tx<()> {
    for t in [x, out] {
        let dt = cx.dtype(t)?;
        if dt != DataType::F32 && !cx.quantized(t) {
            return unsupported(format!(
                "{dt} activations without quantization are not supported"
            ));
        }
    }
    Ok(())
}

/// CONV_2D: filter [O, KH, KW, I] → the core's [O, I, KH, KW].
pub(super) fn conv_2d(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::conv2d as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("CONV_2D without its options");
    };
    let (x, w, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    check_activation_types(cx, x, out)?;
    let weights = float_weights(cx, w)?;
    let wd = weights.shape().dims().to_vec();
    let xd = cx.shape(x)?;
    if wd.len() != 4 || xd.len() != 4 {
        return unsupported("CONV_2D on tensors that are not 4-D");
    }
    let (cin, cout) = (wd[3], wd[0]);
    if cin == 0 || !xd[3].is_multiple_of(cin) {
        return invalid(format!(
            "CONV_2D filter depth {cin} does not divide {} channels",
            xd[3]
        ));
    }
    let group = xd[3] / cin;
    let weights = permute(&weights, &[0, 3, 1, 2])?;
    let int8 = quantized_weights(cx, x, w, out, &[0, 3, 1, 2])?;
    conv_common(
        cx,
        x,
        out,
        (weights, int8),
        cout,
        group,
        o.i8(f::PADDING, 0)?,
        [o.i32(f::STRIDE_H, 1)?, o.i32(f::STRIDE_W, 1)?],
        [o.i32(f::DILATION_H, 1)?, o.i32(f::DILATION_W, 1)?],
        o.i8(f::ACTIVATION, 0)?,
    )
}

/// DEPTHWISE_CONV_2D: filter [1, KH, KW, C·M] → the core's [C·M, 1, KH, KW], C groups.
pub(super) fn depthwise_conv_2d(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::depthwise as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("DEPTHWISE_CONV_2D without its options");
    };
    let (x, w, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    check_activation_types(cx, x, out)?;
    let weights = float_weights(cx, w)?;
    let wd = weights.shape().dims().to_vec();
    let xd = cx.shape(x)?;
    if wd.len() != 4 || xd.len() != 4 || wd[0] != 1 {
        return unsupported("DEPTHWISE_CONV_2D on tensors that are not 4-D");
    }
    let cout = wd[3];
    let group = xd[3];
    if group == 0 || !cout.is_multiple_of(group) {
        return invalid(format!(
            "DEPTHWISE_CONV_2D with {cout} outputs over {group} channels"
        ));
    }
    let weights = permute(&weights, &[3, 0, 1, 2])?;
    let int8 = quantized_weights(cx, x, w, out, &[3, 0, 1, 2])?;
    conv_common(
        cx,
        x,
        out,
        (weights, int8),
        cout,
        group,
        o.i8(f::PADDING, 0)?,
        [o.i32(f::STRIDE_H, 1)?, o.i32(f::STRIDE_W, 1)?],
        [o.i32(f::DILATION_H, 1)?, o.i32(f::DILATION_W, 1)?],
        o.i8(f::ACTIVATION, 0)?,
    )
}

/// Strides or dilations as read from the options: positive, or the model is invalid.
fn positive(v: [i32; 2], what: &str) -> Tx<Vec<usize>> {
    v.iter()
        .map(|&s| {
            usize::try_from(s)
                .ok()
                .filter(|&s| s > 0)
                .map_or_else(|| invalid(format!("{what} {s}")), Ok)
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn conv_common(
    cx: &mut Cx<'_, '_, '_>,
    x: usize,
    out: usize,
    (weights, int8): (Tensor, Option<TensorId>),
    cout: usize,
    group: usize,
    padding: i8,
    strides: [i32; 2],
    dilations: [i32; 2],
    act: i8,
) -> Tx<()> {
    let kernel = weights.shape().dims()[2..].to_vec();
    let window = Window {
        kernel,
        strides: positive(strides, "stride")?,
        dilations: positive(dilations, "dilation")?,
        pads: Vec::new(),
        auto_pad: auto_pad(padding),
    };
    let (xi, _) = cx.float(x, Some(true))?;
    let wi = match int8 {
        Some(dq) => dq,
        None => cx.g.constant(&format!("{}/weights", cx.name), weights)?,
    };
    let mut inputs = vec![xi, wi];
    let b = match int8 {
        Some(_) => quantized_bias(cx, 2, cout)?,
        None => None,
    };
    if let Some(b) = b.map_or_else(|| bias(cx, 2, cout), |b| Ok(Some(b)))? {
        inputs.push(b);
    }
    let name = cx.fresh("Conv");
    let y =
        cx.g.layer(&name, Op::Conv(ConvDesc { window, group }), &inputs)?;
    let y = cx.activation(y, act)?;
    cx.emit(out, y, true)
}

/// TRANSPOSE_CONV: inputs output shape, weights [O, KH, KW, I], image and an optional bias;
/// the output tensor's shape is the one the output-shape input names.
pub(super) fn transpose_conv(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::transpose_conv as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("TRANSPOSE_CONV without its options");
    };
    let (w, x, out) = (cx.input(1)?, cx.input(2)?, cx.output(0)?);
    let shape_input = cx.input(0)?;
    if cx.is_constant(shape_input) {
        let named = cx.const_ints(shape_input)?;
        let od = cx.shape(out)?;
        if named.len() != od.len() || named.iter().zip(&od).any(|(&n, &d)| n != d as i64) {
            return invalid(format!(
                "{}: output shape input {named:?} is not the output tensor's {od:?}",
                cx.name
            ));
        }
    }
    let padding = if o.i8(f::PADDING, 0)? == PADDING_SAME {
        TransposePadding::Same
    } else {
        TransposePadding::Valid
    };
    transpose_conv_common(
        cx,
        (x, w, cx.opt_input(3), out),
        padding,
        [o.i32(f::STRIDE_H, 1)?, o.i32(f::STRIDE_W, 1)?],
        o.i8(f::ACTIVATION, 0)?,
    )
}

/// mediapipe's custom `Convolution2DTransposeBias`: inputs image, weights [O, KH, KW, I] and
/// bias; its options are TFLite's C struct of transposed-convolution parameters as raw
/// little-endian 32-bit integers: padding (1 same, 2 valid), stride across, stride down.
pub(super) fn transpose_conv_bias(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let words: Vec<i32> = cx
        .op
        .custom_options
        .unwrap_or_default()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let (padding, stride_w, stride_h) = match words.as_slice() {
        [p, sw, sh, rest @ ..] if rest.iter().all(|&v| v == 0) => (*p, *sw, *sh),
        [_, _, _, ..] => {
            return unsupported("Convolution2DTransposeBias with options past padding and strides")
        }
        _ => return invalid("Convolution2DTransposeBias without its 12 bytes of options"),
    };
    let padding = match padding {
        1 => TransposePadding::Same,
        2 => TransposePadding::Valid,
        p => return invalid(format!("Convolution2DTransposeBias padding {p}")),
    };
    let (x, w, b, out) = (cx.input(0)?, cx.input(1)?, cx.input(2)?, cx.output(0)?);
    transpose_conv_common(cx, (x, w, Some(b), out), padding, [stride_h, stride_w], 0)
}

/// TFLite's padding of a transposed convolution.
#[derive(Clone, Copy)]
enum TransposePadding {
    Same,
    Valid,
}

/// A transposed convolution of image `x` (NHWC) by weights `w` ([O, KH, KW, I]) with an
/// optional bias, producing `out` (NHWC, its shape the model's). The rows and columns cut
/// from the start of the full output follow TFLite's rule: for SAME, half (rounded down) of
/// the padding a convolution from `out`'s size back to the image's would add, for VALID none;
/// the rest of the full output past `out` is cut from the end.
fn transpose_conv_common(
    cx: &mut Cx<'_, '_, '_>,
    (x, w, b, out): (usize, usize, Option<usize>, usize),
    padding: TransposePadding,
    strides: [i32; 2],
    act: i8,
) -> Tx<()> {
    check_activation_types(cx, x, out)?;
    let weights = float_weights(cx, w)?;
    let wd = weights.shape().dims().to_vec();
    let (xd, od) = (cx.shape(x)?, cx.shape(out)?);
    if wd.len() != 4 || xd.len() != 4 || od.len() != 4 {
        return unsupported("transposed convolutions on tensors that are not 4-D");
    }
    let (cout, cin) = (wd[0], wd[3]);
    if xd[3] != cin || od[3] != cout || od[0] != xd[0] {
        return invalid(format!(
            "{}: image {xd:?}, weights {wd:?} and output {od:?} do not agree",
            cx.name
        ));
    }
    let steps = positive(strides, "stride")?;
    let mut pads = vec![0usize; 4];
    let mut output_padding = vec![0usize; 2];
    for (axis, &s) in steps.iter().enumerate() {
        let (input, k, size) = (xd[1 + axis], wd[1 + axis], od[1 + axis]);
        if input == 0 || k == 0 {
            return invalid(format!("{}: empty image or kernel", cx.name));
        }
        let begin = match padding {
            TransposePadding::Same => {
                ((size.div_ceil(s).saturating_sub(1)) * s + k).saturating_sub(size) / 2
            }
            TransposePadding::Valid => 0,
        };
        let full = input.saturating_sub(1) * s + k;
        let Some(end) = full.checked_sub(begin) else {
            return invalid(format!("{}: padding past the output", cx.name));
        };
        pads[axis] = begin;
        if end >= size {
            pads[2 + axis] = end - size;
        } else if size - end < s {
            output_padding[axis] = size - end;
        } else {
            return invalid(format!(
                "{}: output size {size} too large for input {input}, kernel {k} and stride {s}",
                cx.name
            ));
        }
    }
    // [O, KH, KW, I] → [I, O, KH, KW], the core's (one group).
    let weights = permute(&weights, &[3, 0, 1, 2])?;
    let window = Window {
        kernel: wd[1..3].to_vec(),
        strides: steps,
        dilations: vec![1, 1],
        pads,
        auto_pad: AutoPad::NotSet,
    };
    let (xi, _) = cx.float(x, Some(true))?;
    let wi = cx.g.constant(&format!("{}/weights", cx.name), weights)?;
    let mut inputs = vec![xi, wi];
    if let Some(k) = b {
        let b = float_weights(cx, k)?;
        if b.shape().elements() != cout {
            return invalid(format!(
                "{}: bias has {} values for {cout} channels",
                cx.name,
                b.shape().elements()
            ));
        }
        let b = b.reinterpret(backplane_core::TensorInfo::new(DataType::F32, vec![cout]))?;
        inputs.push(cx.g.constant(&format!("{}/bias", cx.name), b)?);
    }
    let name = cx.fresh("ConvTranspose");
    let y = cx.g.layer(
        &name,
        Op::ConvTranspose(ConvTransposeDesc {
            window,
            group: 1,
            output_padding,
            output_shape: Vec::new(),
        }),
        &inputs,
    )?;
    let y = cx.activation(y, act)?;
    cx.emit(out, y, true)
}

/// FULLY_CONNECTED: rows of K values against weights [O, K], as a Gemm.
pub(super) fn fully_connected(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::fully_connected as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("FULLY_CONNECTED without its options");
    };
    if o.i8(f::WEIGHTS_FORMAT, 0)? != 0 {
        return unsupported("FULLY_CONNECTED with shuffled weights");
    }
    let (x, w, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    check_activation_types(cx, x, out)?;
    let weights = float_weights(cx, w)?;
    let wd = weights.shape().dims().to_vec();
    if wd.len() != 2 {
        return invalid("FULLY_CONNECTED weights must be 2-D");
    }
    let (cout, k) = (wd[0], wd[1]);
    let xd = cx.shape(x)?;
    let total: usize = xd.iter().product();
    if k == 0 || !total.is_multiple_of(k) {
        return invalid(format!("FULLY_CONNECTED input {xd:?} is not rows of {k}"));
    }
    let rows = total / k;
    let (mut xi, _) = cx.float(x, Some(false))?;
    if xd.len() != 2 || xd[0] != rows {
        let name = cx.fresh("Reshape");
        xi = cx.g.layer(
            &name,
            Op::Reshape {
                shape: vec![rows, k],
            },
            &[xi],
        )?;
    }
    // Quantized weights stay integers behind a DequantizeLinear, as for convolutions, so
    // that a backend can fold the chain into an int8 fully connected layer.
    let int8 = quantized_weights(cx, x, w, out, &[0, 1])?;
    let wi = match int8 {
        Some(dq) => dq,
        None => cx.g.constant(&format!("{}/weights", cx.name), weights)?,
    };
    let mut inputs = vec![xi, wi];
    let b = match int8 {
        Some(_) => quantized_bias(cx, 2, cout)?,
        None => None,
    };
    if let Some(b) = b.map_or_else(|| bias(cx, 2, cout), |b| Ok(Some(b)))? {
        inputs.push(b);
    }
    let name = cx.fresh("Gemm");
    let y = cx.g.layer(
        &name,
        Op::Gemm(GemmDesc {
            trans_b: true,
            ..GemmDesc::default()
        }),
        &inputs,
    )?;
    let mut y = cx.activation(y, o.i8(f::ACTIVATION, 0)?)?;
    let od = cx.shape(out)?;
    if od != [rows, cout] {
        let name = cx.fresh("Reshape");
        y = cx.g.layer(&name, Op::Reshape { shape: od }, &[y])?;
    }
    cx.emit(out, y, false)
}

/// BATCH_MATMUL with optional adjoints (transposes of the last two axes).
pub(super) fn batch_matmul(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    use opt::batch_matmul as f;
    let (adj_x, adj_y) = match cx.options(f::TYPE) {
        Some(o) => (o.bool(f::ADJ_X, false)?, o.bool(f::ADJ_Y, false)?),
        None => (false, false),
    };
    let (a, b, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    check_activation_types(cx, a, out)?;
    let mut ids = Vec::new();
    for (t, adj) in [(a, adj_x), (b, adj_y)] {
        let (mut id, _) = cx.float(t, Some(false))?;
        if adj {
            let rank = cx.shape(t)?.len();
            if rank < 2 {
                return invalid("BATCH_MATMUL operands need rank 2 or more");
            }
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.swap(rank - 2, rank - 1);
            let name = cx.fresh("adjoint");
            id = cx.g.transpose(&name, id, &perm)?;
        }
        ids.push(id);
    }
    let name = cx.fresh("MatMul");
    let y = cx.g.layer(&name, Op::MatMul, &ids)?;
    cx.emit(out, y, false)
}

/// AVERAGE_POOL_2D / MAX_POOL_2D (the average counts only the taps inside the input).
pub(super) fn pool_2d(cx: &mut Cx<'_, '_, '_>, max: bool) -> Tx<()> {
    use opt::pool2d as f;
    let Some(o) = cx.options(f::TYPE) else {
        return invalid("pooling without its options");
    };
    let (x, out) = (cx.input(0)?, cx.output(0)?);
    check_activation_types(cx, x, out)?;
    let dim = |v: i32, what: &str| -> Tx<usize> {
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .map_or_else(|| invalid(format!("pooling {what} {v}")), Ok)
    };
    let window = Window {
        kernel: vec![
            dim(o.i32(f::FILTER_H, 0)?, "height")?,
            dim(o.i32(f::FILTER_W, 0)?, "width")?,
        ],
        strides: vec![
            dim(o.i32(f::STRIDE_H, 0)?, "stride")?,
            dim(o.i32(f::STRIDE_W, 0)?, "stride")?,
        ],
        dilations: Vec::new(),
        pads: Vec::new(),
        auto_pad: auto_pad(o.i8(f::PADDING, 0)?),
    };
    let kind = if max {
        PoolKind::Max
    } else {
        PoolKind::Average
    };
    // A window over the whole image giving one pixel (how TensorFlow writes a
    // squeeze-and-excite block's pool) is a global pooling: no padding can enter it, so the
    // two agree; backends run the global form faster and fold it into their patterns.
    let (xd, od) = (cx.shape(x)?, cx.shape(out)?);
    let global =
        xd.len() == 4 && od.len() == 4 && window.kernel[..] == xd[1..3] && od[1..3] == [1, 1];
    let act = o.i8(f::ACTIVATION, 0)?;
    if !max {
        if let Some(xi) = super::qint::integer_pool_input(cx, x, out, act)? {
            // TFLite's integer average (see `qint`); a whole-image window has no padding.
            let name = cx.fresh("IntegerAveragePool");
            let op = Op::IntegerAveragePool(PoolDesc {
                kind,
                window,
                ceil_mode: false,
                count_include_pad: false,
            });
            let y = cx.g.layer(&name, op, &[xi])?;
            return cx.emit(out, y, true);
        }
    }
    let (xi, _) = cx.float(x, Some(true))?;
    let name = cx.fresh(if max { "MaxPool" } else { "AveragePool" });
    let op = if global {
        Op::GlobalPool(kind)
    } else {
        Op::Pool(PoolDesc {
            kind,
            window,
            ceil_mode: false,
            count_include_pad: false,
        })
    };
    let y = cx.g.layer(&name, op, &[xi])?;
    let y = cx.activation(y, act)?;
    cx.emit(out, y, true)
}

/// RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR to a constant size.
pub(super) fn resize(cx: &mut Cx<'_, '_, '_>, nearest: bool) -> Tx<()> {
    let (align, half) = if nearest {
        use opt::resize_nearest as f;
        match cx.options(f::TYPE) {
            Some(o) => (
                o.bool(f::ALIGN_CORNERS, false)?,
                o.bool(f::HALF_PIXEL_CENTERS, false)?,
            ),
            None => (false, false),
        }
    } else {
        use opt::resize_bilinear as f;
        match cx.options(f::TYPE) {
            Some(o) => (
                o.bool(f::ALIGN_CORNERS, false)?,
                o.bool(f::HALF_PIXEL_CENTERS, false)?,
            ),
            None => (false, false),
        }
    };
    let (x, size, out) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    check_activation_types(cx, x, out)?;
    let xd = cx.shape(x)?;
    let sz = cx.const_ints(size)?;
    if xd.len() != 4 || sz.len() != 2 || sz.iter().any(|&v| v <= 0) {
        return invalid(format!("resize of {xd:?} to {sz:?}"));
    }
    let (h, w) = (sz[0] as usize, sz[1] as usize);
    let output_shape = vec![xd[0], xd[3], h, w];
    let scales = vec![
        1.0,
        1.0,
        h as f32 / xd[1].max(1) as f32,
        w as f32 / xd[2].max(1) as f32,
    ];
    let coordinate_transform = if align {
        CoordinateTransform::AlignCorners
    } else if half && !nearest {
        CoordinateTransform::HalfPixel
    } else if half {
        // TFLite's nearest with half-pixel centers takes floor((x + 0.5) / scale): ONNX's
        // half_pixel coordinate, rounded half up.
        CoordinateTransform::HalfPixel
    } else {
        CoordinateTransform::Asymmetric
    };
    let nearest_mode = if align || half {
        NearestMode::RoundPreferCeil
    } else {
        NearestMode::Floor
    };
    let (xi, _) = cx.float(x, Some(true))?;
    let name = cx.fresh("Resize");
    let y = cx.g.layer(
        &name,
        Op::Resize(ResizeDesc {
            mode: if nearest {
                ResizeMode::Nearest
            } else {
                ResizeMode::Linear
            },
            coordinate_transform,
            nearest_mode,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            output_shape,
            scales,
            antialias: false,
            roi: Vec::new(),
            extrapolation_value: 0.0,
        }),
        &[xi],
    )?;
    cx.emit(out, y, true)
}

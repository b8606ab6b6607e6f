//! Signal processing and image geometry: DFT, STFT, MelWeightMatrix, Col2Im, AffineGrid,
//! RoiAlign and DeformConv.
//!
//! Their size parameters (DFT length and axis, STFT frame step and length, Col2Im's shapes,
//! AffineGrid's size) are constant inputs resolved here; when a model computes them at run
//! time the import asks for those inputs' values (specialization). MelWeightMatrix depends
//! only on such parameters, so it becomes a constant.

use super::{to_usize, Lowering, NodeCx, Src, Tx, TxError, MAX_WINDOW_PARAM};
use crate::tensor::check_size;
use backplane_core::ops::{
    AffineGridDesc, Col2ImDesc, DeformConvDesc, DftDesc, RoiAlignDesc, StftDesc,
};
use backplane_core::{DataType, Op, Tensor, TensorInfo};
use std::sync::Arc;

/// A required constant integer scalar input.
fn scalar_int(cx: &NodeCx<'_>, i: usize, what: &str) -> Tx<Option<i64>> {
    match cx.const_ints(i, what)? {
        None => Ok(None),
        Some(v) if v.len() == 1 => Ok(Some(v[0])),
        Some(v) => Err(cx.invalid(format!("{what} must be a scalar, got {} values", v.len()))),
    }
}

/// A size parameter: a positive integer no larger than [`MAX_WINDOW_PARAM`].
fn size_param(cx: &NodeCx<'_>, what: &str, v: i64) -> Tx<usize> {
    if v < 1 {
        return Err(cx.invalid(format!("{what} must be positive, got {v}")));
    }
    to_usize(cx, what, v, MAX_WINDOW_PARAM)
}

/// DFT (opset 17: `axis` attribute, default 1; opset 20: `axis` input, default -2).
pub(super) fn dft(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(17)?;
    let x = cx.info(0)?;
    let rank = x.shape.rank() as i64;
    let axis = if cx.opset >= 20 {
        scalar_int(cx, 2, "axis")?.unwrap_or(-2)
    } else {
        cx.attr(cx.attrs.int_or("axis", 1))?
    };
    // Valid: [-r, -2] and [0, r - 2] (the last axis holds the complex parts).
    let resolved = if axis < 0 { axis + rank } else { axis };
    if !(0..rank - 1).contains(&resolved) {
        return Err(cx.invalid(format!(
            "axis {axis} is not a signal axis of an input of rank {rank}"
        )));
    }
    let axis = resolved as usize;
    let length = match scalar_int(cx, 1, "dft_length")? {
        Some(v) => size_param(cx, "dft_length", v)?,
        None => x.shape.dims()[axis],
    };
    let inverse = cx.attr(cx.attrs.flag("inverse", false))?;
    let onesided = cx.attr(cx.attrs.flag("onesided", false))?;
    if onesided && inverse {
        return Err(TxError::Unsupported(
            "DFT with both inverse and onesided is not supported".into(),
        ));
    }
    if onesided && x.shape.dims().last() == Some(&2) {
        return Err(cx.invalid("a one-sided DFT needs a real input (last axis 1)"));
    }
    Ok(Lowering::single(
        Op::Dft(DftDesc {
            axis,
            length,
            inverse,
            onesided,
        }),
        vec![Src::Input(0)],
    ))
}

/// STFT (opset 17): frame_step and frame_length are constant inputs; the frame length
/// comes from the window when frame_length is omitted.
pub(super) fn stft(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(17)?;
    let step = scalar_int(cx, 1, "frame_step")?
        .ok_or_else(|| cx.invalid("the frame_step input is required"))?;
    let frame_step = size_param(cx, "frame_step", step)?;
    let window_len = match cx.input_name(2) {
        Some(_) => {
            let w = cx.info(2)?;
            match w.shape.dims() {
                [n] => Some(*n),
                _ => return Err(cx.invalid(format!("the window must be 1-D, got {}", w.shape))),
            }
        }
        None => None,
    };
    let frame_length = match (scalar_int(cx, 3, "frame_length")?, window_len) {
        (Some(v), w) => {
            let v = size_param(cx, "frame_length", v)?;
            if w.is_some_and(|w| w != v) {
                return Err(cx.invalid(format!(
                    "frame_length {v} differs from the window length {w:?}"
                )));
            }
            v
        }
        (None, Some(w)) => w,
        (None, None) => {
            return Err(cx.invalid("either a window or frame_length is required"));
        }
    };
    let onesided = cx.attr(cx.attrs.flag("onesided", true))?;
    if onesided && cx.info(0)?.shape.dims().last() == Some(&2) {
        return Err(
            cx.invalid("a one-sided STFT needs a real signal (last axis 1); set onesided to 0")
        );
    }
    let mut inputs = vec![Src::Input(0)];
    if window_len.is_some() {
        inputs.push(Src::Input(2));
    }
    Ok(Lowering::single(
        Op::Stft(StftDesc {
            frame_step,
            frame_length,
            onesided,
        }),
        inputs,
    ))
}

/// The mel scale of a frequency in hertz.
fn mel(hz: f64) -> f64 {
    2595.0 * (1.0 + hz / 700.0).log10()
}

/// The frequency in hertz of a mel value.
fn hertz(mel: f64) -> f64 {
    700.0 * (10f64.powf(mel / 2595.0) - 1.0)
}

/// MelWeightMatrix (opset 17): a constant [dft_length / 2 + 1, num_mel_bins] of triangular
/// filters with peak 1, computed from its (constant) inputs.
///
/// The specification gives the mel formula and the triangles' peaks but not how band edges
/// map to spectrogram bins; this follows the ONNX reference: num_mel_bins + 2 edges spaced
/// by (mel(upper) - mel(lower)) / (num_mel_bins + 2) on the mel scale, each mapped to bin
/// floor((dft_length + 1) * hz / sample_rate).
pub(super) fn mel_weight_matrix(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(17)?;
    let int = |i: usize, what: &str| -> Tx<i64> {
        scalar_int(cx, i, what)?.ok_or_else(|| cx.invalid(format!("the {what} input is required")))
    };
    let float = |i: usize, what: &str| -> Tx<f64> {
        cx.const_scalar(i, what)?
            .ok_or_else(|| cx.invalid(format!("the {what} input is required")))
    };
    let mel_bins = size_param(cx, "num_mel_bins", int(0, "num_mel_bins")?)?;
    let dft_length = size_param(cx, "dft_length", int(1, "dft_length")?)?;
    let sample_rate = size_param(cx, "sample_rate", int(2, "sample_rate")?)?;
    let (lower, upper) = (float(3, "lower_edge_hertz")?, float(4, "upper_edge_hertz")?);
    if !(lower.is_finite() && upper.is_finite() && 0.0 <= lower && lower <= upper) {
        return Err(cx.invalid(format!(
            "the band [{lower}, {upper}] Hz must be finite, non-negative and ordered"
        )));
    }
    let code = cx.attr(cx.attrs.int_or("output_datatype", 1))?;
    let dtype = DataType::from_onnx_code(code)
        .ok_or_else(|| TxError::Unsupported(format!("output_datatype {code} is not supported")))?;
    let spectrum_bins = dft_length / 2 + 1;
    let dims = vec![spectrum_bins, mel_bins];
    check_size(cx.name, &dims, dtype.size(), cx.imp.max_tensor_bytes())?;
    let (low_mel, high_mel) = (mel(lower), mel(upper));
    let step = (high_mel - low_mel) / (mel_bins + 2) as f64;
    let edges: Vec<i64> = (0..mel_bins + 2)
        .map(|i| {
            let hz = hertz(low_mel + i as f64 * step);
            // Finite and bounded by (dft_length + 1) * upper / sample_rate.
            ((dft_length + 1) as f64 * hz / sample_rate as f64).floor() as i64
        })
        .collect();
    let mut values = vec![0.0; spectrum_bins * mel_bins];
    let mut set = |bin: i64, band: usize, v: f64| {
        // Edges past the last spectrum bin (an upper edge above the Nyquist frequency) are
        // dropped.
        if let Some(b) = usize::try_from(bin).ok().filter(|&b| b < spectrum_bins) {
            values[b * mel_bins + band] = v;
        }
    };
    for band in 0..mel_bins {
        let (left, center, right) = (edges[band], edges[band + 1], edges[band + 2]);
        if center == left {
            set(center, band, 1.0);
        } else {
            for j in left..=center {
                set(j, band, (j - left) as f64 / (center - left) as f64);
            }
        }
        if right > center {
            for j in center..right {
                set(j, band, (right - j) as f64 / (right - center) as f64);
            }
        }
    }
    let t = Tensor::from_f64_values(TensorInfo::new(dtype, dims), &values)
        .map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

/// A list attribute of `r` non-negative values (default `fill` each).
fn window_attr(cx: &NodeCx<'_>, name: &str, len: usize, fill: i64, min: i64) -> Tx<Vec<usize>> {
    let v = cx
        .attr(cx.attrs.ints(name))?
        .unwrap_or_else(|| vec![fill; len]);
    if v.len() != len {
        return Err(cx.invalid(format!("{name} must have {len} values, got {}", v.len())));
    }
    v.into_iter()
        .map(|x| {
            if x < min {
                Err(cx.invalid(format!("{name} values must be at least {min}, got {x}")))
            } else {
                to_usize(cx, name, x, MAX_WINDOW_PARAM)
            }
        })
        .collect()
}

/// Col2Im (opset 18): image_shape and block_shape are constant inputs.
pub(super) fn col2im(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(18)?;
    let shape = |i: usize, what: &str| -> Tx<Vec<usize>> {
        cx.const_ints(i, what)?
            .ok_or_else(|| cx.invalid(format!("the {what} input is required")))?
            .into_iter()
            .map(|v| size_param(cx, what, v))
            .collect()
    };
    let image_shape = shape(1, "image_shape")?;
    let block_shape = shape(2, "block_shape")?;
    let r = image_shape.len();
    if r == 0 || block_shape.len() != r {
        return Err(cx.invalid(format!(
            "image_shape {image_shape:?} and block_shape {block_shape:?} must have one value \
             per spatial axis"
        )));
    }
    let desc = Col2ImDesc {
        image_shape,
        block_shape,
        dilations: window_attr(cx, "dilations", r, 1, 1)?,
        pads: window_attr(cx, "pads", 2 * r, 0, 0)?,
        strides: window_attr(cx, "strides", r, 1, 1)?,
    };
    Ok(Lowering::single(Op::Col2Im(desc), vec![Src::Input(0)]))
}

/// AffineGrid (opset 20): the size input is constant.
pub(super) fn affine_grid(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(20)?;
    let size: Vec<usize> = cx
        .const_ints(1, "size")?
        .ok_or_else(|| cx.invalid("the size input is required"))?
        .into_iter()
        .map(|v| to_usize(cx, "size", v, MAX_WINDOW_PARAM))
        .collect::<Tx<_>>()?;
    if !(size.len() == 4 || size.len() == 5) {
        return Err(cx.invalid(format!(
            "size must be [N, C, H, W] or [N, C, D, H, W], got {size:?}"
        )));
    }
    let theta = cx.info(0)?;
    let elems = size[2..]
        .iter()
        .try_fold(size[0], |a, &b| a.checked_mul(b))
        .and_then(|p| p.checked_mul(size.len() - 2));
    let dims = vec![elems.unwrap_or(usize::MAX)];
    check_size(
        cx.name,
        &dims,
        theta.dtype.size(),
        cx.imp.max_tensor_bytes(),
    )?;
    let desc = AffineGridDesc {
        size,
        align_corners: cx.attr(cx.attrs.flag("align_corners", false))?,
    };
    Ok(Lowering::single(Op::AffineGrid(desc), vec![Src::Input(0)]))
}

/// RoiAlign (opset 10: output_half_pixel coordinates; opset 16 on: the
/// coordinate_transformation_mode attribute, default half_pixel).
pub(super) fn roi_align(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let default_mode = if cx.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let transform = cx.attr(
        cx.attrs
            .string_or("coordinate_transformation_mode", default_mode),
    )?;
    let half_pixel = match transform.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(cx.invalid(format!("unknown coordinate_transformation_mode '{other}'")))
        }
    };
    let max = match cx.attr(cx.attrs.string_or("mode", "avg"))?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(cx.invalid(format!("unknown mode '{other}'"))),
    };
    let int = |name: &str, default: i64, min: i64| -> Tx<usize> {
        let v = cx.attr(cx.attrs.int_or(name, default))?;
        if v < min {
            return Err(cx.invalid(format!("{name} must be at least {min}, got {v}")));
        }
        to_usize(cx, name, v, MAX_WINDOW_PARAM)
    };
    let spatial_scale = cx.attr(cx.attrs.float_or("spatial_scale", 1.0))?;
    if !spatial_scale.is_finite() {
        return Err(cx.invalid(format!("spatial_scale must be finite, got {spatial_scale}")));
    }
    let desc = RoiAlignDesc {
        output_height: int("output_height", 1, 1)?,
        output_width: int("output_width", 1, 1)?,
        sampling_ratio: int("sampling_ratio", 0, 0)?,
        spatial_scale,
        max,
        half_pixel,
    };
    Ok(Lowering::single(Op::RoiAlign(desc), cx.data_inputs(3, 0)?))
}

/// DeformConv (opset 19): B may be omitted before a given mask (a zero bias is supplied).
pub(super) fn deform_conv(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(19)?;
    let x = cx.info(0)?;
    let w = cx.info(1)?;
    let wd = w.shape.dims();
    if wd.len() < 3 {
        return Err(cx.invalid(format!(
            "W must be [M, C / group, kernel...], got {}",
            w.shape
        )));
    }
    let r = wd.len() - 2;
    let kernel = match cx.attr(cx.attrs.ints("kernel_shape"))? {
        Some(_) => window_attr(cx, "kernel_shape", r, 1, 1)?,
        None => wd[2..].to_vec(),
    };
    let positive = |name: &str| -> Tx<usize> {
        let v = cx.attr(cx.attrs.int_or(name, 1))?;
        size_param(cx, name, v)
    };
    let desc = DeformConvDesc {
        kernel,
        strides: window_attr(cx, "strides", r, 1, 1)?,
        dilations: window_attr(cx, "dilations", r, 1, 1)?,
        pads: window_attr(cx, "pads", 2 * r, 0, 0)?,
        group: positive("group")?,
        offset_group: positive("offset_group")?,
    };
    let mut inputs = vec![Src::Input(0), Src::Input(1), Src::Input(2)];
    for i in [0, 1, 2] {
        if cx.input_name(i).is_none() {
            return Err(cx.invalid(format!("required input #{i} is missing")));
        }
    }
    let has_mask = cx.input_name(4).is_some();
    match cx.input_name(3) {
        Some(_) => inputs.push(Src::Input(3)),
        None if has_mask => {
            let zeros =
                Tensor::zeros(TensorInfo::new(x.dtype, vec![wd[0]])).map_err(|e| cx.invalid(e))?;
            inputs.push(Src::Const(Arc::new(zeros)));
        }
        None => {}
    }
    if has_mask {
        inputs.push(Src::Input(4));
    }
    Ok(Lowering::single(Op::DeformConv(desc), inputs))
}

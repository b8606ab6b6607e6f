//! Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7, 9), resolved to a fixed output
//! shape and per-axis scales.

use super::{Lowering, NodeCx, Src, Tx, TxError};
use backplane_core::ops::{CoordinateTransform, NearestMode, ResizeDesc, ResizeMode};
use backplane_core::shape::normalize_axis;
use backplane_core::Op;

/// How `sizes` is honoured when it would change the aspect ratio (Resize 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AspectPolicy {
    /// Use the sizes as given.
    Stretch,
    /// Scale uniformly so that no axis exceeds its size.
    NotLarger,
    /// Scale uniformly so that no axis falls short of its size.
    NotSmaller,
}

/// Largest output dimension accepted.
const MAX_DIM: f64 = (1u64 << 32) as f64;

fn dim_from(v: f32, what: &str) -> Result<usize, String> {
    let v = f64::from(v);
    if v.is_finite() && (0.0..=MAX_DIM).contains(&v) {
        Ok(v as usize)
    } else {
        Err(format!("{what} gives an output dimension of {v}"))
    }
}

/// The output shape and the per-axis scales of a Resize over `input`.
///
/// `axes` (Resize 18) selects the axes `scales`/`sizes` apply to (default: all); exactly one
/// of `scales` and `sizes` must be given. With scales, each output dim is
/// `floor(input * scale)`; with sizes, the scale is `size / input` (or, under a keep-aspect
/// policy, one common scale and `round(input * scale)` as the size).
pub(crate) fn resize_output(
    input: &[usize],
    axes: Option<&[i64]>,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
    policy: AspectPolicy,
) -> Result<(Vec<usize>, Vec<f32>), String> {
    let rank = input.len();
    let axes: Vec<usize> = match axes {
        None => (0..rank).collect(),
        Some(a) => {
            let mut seen = vec![false; rank];
            let mut out = Vec::with_capacity(a.len());
            for &ax in a {
                let n = normalize_axis(ax, rank).map_err(|e| e.to_string())?;
                if std::mem::replace(&mut seen[n], true) {
                    return Err(format!("axis {ax} is listed twice"));
                }
                out.push(n);
            }
            out
        }
    };
    let mut out_shape = input.to_vec();
    let mut out_scales = vec![1.0f32; rank];
    match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != axes.len() {
                return Err(format!(
                    "scales has {} values for {} axes",
                    s.len(),
                    axes.len()
                ));
            }
            for (&a, &sc) in axes.iter().zip(s) {
                if !(sc.is_finite() && sc > 0.0) {
                    return Err(format!("scale {sc} is not a positive number"));
                }
                out_shape[a] = dim_from((input[a] as f32 * sc).floor(), "scales")?;
                out_scales[a] = sc;
            }
        }
        (None, Some(sz)) => {
            if sz.len() != axes.len() {
                return Err(format!(
                    "sizes has {} values for {} axes",
                    sz.len(),
                    axes.len()
                ));
            }
            if let Some(&bad) = sz.iter().find(|&&v| v < 0) {
                return Err(format!("sizes has the negative value {bad}"));
            }
            let ratio = |a: usize, size: i64| {
                if input[a] == 0 {
                    1.0
                } else {
                    size as f32 / input[a] as f32
                }
            };
            match policy {
                AspectPolicy::Stretch => {
                    for (&a, &size) in axes.iter().zip(sz) {
                        out_shape[a] = usize::try_from(size)
                            .ok()
                            .filter(|&d| d as f64 <= MAX_DIM)
                            .ok_or_else(|| format!("size {size} is too large"))?;
                        out_scales[a] = ratio(a, size);
                    }
                }
                AspectPolicy::NotLarger | AspectPolicy::NotSmaller => {
                    let ratios = axes.iter().zip(sz).map(|(&a, &size)| ratio(a, size));
                    let scale = if policy == AspectPolicy::NotLarger {
                        ratios.fold(f32::INFINITY, f32::min)
                    } else {
                        ratios.fold(0.0, f32::max)
                    };
                    for &a in &axes {
                        // round half up, as the spec's round_int
                        out_shape[a] = dim_from((input[a] as f32 * scale + 0.5).floor(), "sizes")?;
                        out_scales[a] = scale;
                    }
                }
            }
        }
        (Some(_), Some(_)) => return Err("gives both scales and sizes".into()),
        (None, None) => return Err("needs scales or sizes".into()),
    }
    Ok((out_shape, out_scales))
}

fn mode(cx: &NodeCx<'_>, allow_cubic: bool) -> Tx<ResizeMode> {
    Ok(
        match cx.attr(cx.attrs.string_or("mode", "nearest"))?.as_str() {
            "nearest" => ResizeMode::Nearest,
            "linear" | "bilinear" | "trilinear" => ResizeMode::Linear,
            "cubic" if allow_cubic => ResizeMode::Cubic,
            other => return Err(cx.invalid(format!("unknown mode '{other}'"))),
        },
    )
}

fn floats_to_f32(v: Vec<f64>) -> Vec<f32> {
    v.into_iter().map(|x| x as f32).collect()
}

/// Resize 10 and Upsample: output = floor(input * scale) and asymmetric coordinates. Nearest
/// mode rounds down when upsampling and up when downsampling (the behaviour of the opset-10
/// conformance tests); an axis that shrinks next to one that grows cannot be expressed.
fn legacy(cx: &NodeCx<'_>, mode: ResizeMode, scales: Vec<f32>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let (output_shape, scales) = resize_output(
        x.shape.dims(),
        None,
        Some(&scales),
        None,
        AspectPolicy::Stretch,
    )
    .map_err(|m| cx.invalid(m))?;
    let down = scales.iter().any(|&s| s < 1.0);
    let up = scales.iter().any(|&s| s > 1.0);
    if mode == ResizeMode::Nearest && down && up {
        return Err(TxError::Unsupported(
            "nearest resizing that shrinks some axes and grows others is not supported before \
             opset 11"
                .into(),
        ));
    }
    let nearest_mode = if down {
        NearestMode::Ceil
    } else {
        NearestMode::Floor
    };
    Ok(Lowering::single(
        Op::Resize(ResizeDesc {
            mode,
            coordinate_transform: CoordinateTransform::Asymmetric,
            nearest_mode,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            output_shape,
            scales,
            antialias: false,
            roi: vec![],
            extrapolation_value: 0.0,
        }),
        vec![Src::Input(0)],
    ))
}

pub(super) fn upsample(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let mode = mode(cx, false)?;
    let scales = if cx.opset < 9 {
        cx.attr(cx.attrs.floats("scales"))?
    } else {
        cx.const_floats(1, "scales")?.map(floats_to_f32)
    }
    .ok_or_else(|| cx.invalid("scales are required"))?;
    legacy(cx, mode, scales)
}

pub(super) fn resize(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(10)?;
    if cx.opset < 11 {
        let mode = mode(cx, false)?;
        let scales = cx
            .const_floats(1, "scales")?
            .map(floats_to_f32)
            .ok_or_else(|| cx.invalid("scales are required"))?;
        return legacy(cx, mode, scales);
    }
    let mode = mode(cx, true)?;
    let coordinate_transform = match cx
        .attr(
            cx.attrs
                .string_or("coordinate_transformation_mode", "half_pixel"),
        )?
        .as_str()
    {
        "half_pixel" => CoordinateTransform::HalfPixel,
        "pytorch_half_pixel" => CoordinateTransform::PytorchHalfPixel,
        "align_corners" => CoordinateTransform::AlignCorners,
        "asymmetric" => CoordinateTransform::Asymmetric,
        "half_pixel_symmetric" => CoordinateTransform::HalfPixelSymmetric,
        "tf_crop_and_resize" => CoordinateTransform::TfCropAndResize,
        m @ "tf_half_pixel_for_nn" => {
            return Err(TxError::Unsupported(format!(
                "coordinate_transformation_mode '{m}' is not supported"
            )))
        }
        other => {
            return Err(cx.invalid(format!("unknown coordinate_transformation_mode '{other}'")))
        }
    };
    let nearest_mode = match cx
        .attr(cx.attrs.string_or("nearest_mode", "round_prefer_floor"))?
        .as_str()
    {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(cx.invalid(format!("unknown nearest_mode '{other}'"))),
    };
    let antialias = cx.opset >= 18 && cx.attr(cx.attrs.flag("antialias", false))?;
    let (axes, policy) = if cx.opset >= 18 {
        let policy = match cx
            .attr(cx.attrs.string_or("keep_aspect_ratio_policy", "stretch"))?
            .as_str()
        {
            "stretch" => AspectPolicy::Stretch,
            "not_larger" => AspectPolicy::NotLarger,
            "not_smaller" => AspectPolicy::NotSmaller,
            other => return Err(cx.invalid(format!("unknown keep_aspect_ratio_policy '{other}'"))),
        };
        (cx.attr(cx.attrs.ints("axes"))?, policy)
    } else {
        (None, AspectPolicy::Stretch)
    };
    // roi (input 1) only matters for tf_crop_and_resize.
    let roi = if coordinate_transform == CoordinateTransform::TfCropAndResize {
        crop_region(cx, axes.as_deref())?
    } else {
        vec![]
    };
    let scales = cx
        .const_floats(2, "scales")?
        .filter(|s| !s.is_empty())
        .map(floats_to_f32);
    let sizes = cx.const_ints(3, "sizes")?.filter(|s| !s.is_empty());
    let x = cx.info(0)?;
    let (output_shape, scales) = resize_output(
        x.shape.dims(),
        axes.as_deref(),
        scales.as_deref(),
        sizes.as_deref(),
        policy,
    )
    .map_err(|m| cx.invalid(m))?;
    Ok(Lowering::single(
        Op::Resize(ResizeDesc {
            mode,
            coordinate_transform,
            nearest_mode,
            cubic_coeff_a: cx.attr(cx.attrs.float_or("cubic_coeff_a", -0.75))?,
            exclude_outside: cx.attr(cx.attrs.flag("exclude_outside", false))?,
            output_shape,
            scales,
            antialias,
            roi,
            extrapolation_value: cx.attr(cx.attrs.float_or("extrapolation_value", 0.0))?,
        }),
        vec![Src::Input(0)],
    ))
}

/// tf_crop_and_resize's region as starts of every axis then ends, from the constant roi
/// input (one start and end per axis, or per axis of `axes`; other axes are whole).
fn crop_region(cx: &NodeCx<'_>, axes: Option<&[i64]>) -> Tx<Vec<f32>> {
    let rank = cx.info(0)?.shape.rank();
    let roi = cx
        .const_floats(1, "roi")?
        .filter(|r| !r.is_empty())
        .ok_or_else(|| cx.invalid("tf_crop_and_resize needs the roi input"))?;
    let listed: Vec<usize> = match axes {
        None => (0..rank).collect(),
        Some(axes) => axes
            .iter()
            .map(|&a| {
                let r = rank as i64;
                let a = if a < 0 { a + r } else { a };
                usize::try_from(a)
                    .ok()
                    .filter(|&a| a < rank)
                    .ok_or_else(|| cx.invalid(format!("axis {a} is out of range")))
            })
            .collect::<Tx<_>>()?,
    };
    if roi.len() != 2 * listed.len() {
        return Err(cx.invalid(format!(
            "roi must hold a start and an end for each of {} axes, got {} values",
            listed.len(),
            roi.len()
        )));
    }
    let mut region: Vec<f32> = [vec![0.0; rank], vec![1.0; rank]].concat();
    for (k, &a) in listed.iter().enumerate() {
        region[a] = roi[k] as f32;
        region[rank + a] = roi[listed.len() + k] as f32;
    }
    Ok(region)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{resize_output, AspectPolicy::*};

    #[test]
    fn scales_floor_the_output() {
        let (s, sc) = resize_output(
            &[1, 3, 5, 5],
            None,
            Some(&[1.0, 1.0, 0.6, 2.5]),
            None,
            Stretch,
        )
        .unwrap();
        assert_eq!(s, vec![1, 3, 3, 12]);
        assert_eq!(sc, vec![1.0, 1.0, 0.6, 2.5]);
    }

    #[test]
    fn sizes_give_scales() {
        let (s, sc) =
            resize_output(&[1, 1, 4, 8], None, None, Some(&[1, 1, 8, 4]), Stretch).unwrap();
        assert_eq!(s, vec![1, 1, 8, 4]);
        assert_eq!(sc, vec![1.0, 1.0, 2.0, 0.5]);
    }

    #[test]
    fn axes_and_aspect_policies() {
        // Input 4x8 asked for 8x8 on axes (2, 3).
        let (s, sc) = resize_output(
            &[1, 1, 4, 8],
            Some(&[2, -1]),
            None,
            Some(&[8, 8]),
            NotLarger,
        )
        .unwrap();
        assert_eq!(s, vec![1, 1, 4, 8]);
        assert_eq!(sc, vec![1.0, 1.0, 1.0, 1.0]);
        let (s, sc) = resize_output(
            &[1, 1, 4, 8],
            Some(&[2, 3]),
            None,
            Some(&[8, 8]),
            NotSmaller,
        )
        .unwrap();
        assert_eq!(s, vec![1, 1, 8, 16]);
        assert_eq!(sc, vec![1.0, 1.0, 2.0, 2.0]);
        let (s, _) =
            resize_output(&[2, 3, 10, 10], Some(&[3]), Some(&[0.5]), None, Stretch).unwrap();
        assert_eq!(s, vec![2, 3, 10, 5]);
        // not_larger with a non-integer product rounds half up: 3 * (5/3 = 1.6666666) = 5.
        let (s, _) = resize_output(
            &[1, 1, 3, 6],
            Some(&[2, 3]),
            None,
            Some(&[5, 20]),
            NotLarger,
        )
        .unwrap();
        assert_eq!(s, vec![1, 1, 5, 10]);
    }

    #[test]
    fn bad_parameters() {
        assert!(resize_output(&[1, 4], None, Some(&[1.0]), None, Stretch).is_err());
        assert!(resize_output(&[1, 4], None, Some(&[1.0, -2.0]), None, Stretch).is_err());
        assert!(resize_output(&[1, 4], None, Some(&[1.0, f32::INFINITY]), None, Stretch).is_err());
        assert!(resize_output(&[1, 4], None, None, Some(&[1, -4]), Stretch).is_err());
        assert!(resize_output(&[1, 4], None, None, None, Stretch).is_err());
        assert!(resize_output(&[1, 4], Some(&[1, 1]), None, Some(&[2, 2]), Stretch).is_err());
        assert!(resize_output(&[1, 4], None, Some(&[1.0, 1e30]), None, Stretch).is_err());
        assert!(resize_output(&[1, 4], None, None, Some(&[1, 1 << 40]), Stretch).is_err());
    }
}

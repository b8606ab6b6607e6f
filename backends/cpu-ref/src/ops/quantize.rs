//! Linear quantization: QuantizeLinear, DequantizeLinear (per tensor or per axis) and
//! DynamicQuantizeLinear. Math in f64; quantized values round half to even and saturate.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::product;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::shape::normalize_axis;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// The range of a quantized type.
fn bounds(dtype: DataType) -> (f64, f64) {
    match dtype {
        DataType::I8 => (-128.0, 127.0),
        DataType::U8 => (0.0, 255.0),
        DataType::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
        DataType::U16 => (0.0, f64::from(u16::MAX)),
        DataType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        _ => (f64::MIN, f64::MAX),
    }
}

/// For each element of `x`, the index of its scale / zero point (0 for per-tensor values).
fn param_index(axis: i64, dims: &[usize], params: usize) -> Result<impl Fn(usize) -> usize> {
    let (inner, len) = if params == 1 {
        (1, 1)
    } else {
        let a = normalize_axis(axis, dims.len())?;
        (product(&dims[a + 1..]), dims[a])
    };
    Ok(move |i: usize| (i / inner) % len)
}

fn params(
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    zero_point: Option<&TensorView<'_>>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let s = scale.to_f64_vec();
    let z = zero_point.map_or_else(|| vec![0.0; s.len()], TensorView::to_f64_vec);
    if z.len() != s.len() {
        return Err(BackendError::Execution(format!(
            "{} scales but {} zero points for {}",
            s.len(),
            z.len(),
            x.info
        )));
    }
    Ok((s, z))
}

/// y = saturate(round(x / scale) + zero_point).
pub(crate) fn quantize(
    axis: i64,
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    zero_point: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (s, z) = params(x, scale, zero_point)?;
    let at = param_index(axis, x.dims(), s.len())?;
    let (lo, hi) = bounds(y.info.dtype);
    let xs = x.to_f64_vec();
    // The quotient is formed in the input's precision (f32 for f32 inputs), as the reference
    // does, so that values on a rounding boundary round the same way.
    let f32_math = x.info.dtype == DataType::F32;
    let out: Vec<Scalar> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let k = at(i);
            let quotient = if f32_math {
                f64::from(v as f32 / s[k] as f32)
            } else {
                v / s[k]
            };
            let q = (quotient.round_ties_even() + z[k]).clamp(lo, hi);
            Scalar::Int(q as i64)
        })
        .collect();
    write_scalars(y, &out)
}

/// y = (x - zero_point) * scale.
pub(crate) fn dequantize(
    axis: i64,
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    zero_point: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (s, z) = params(x, scale, zero_point)?;
    let at = param_index(axis, x.dims(), s.len())?;
    let xs = read_scalars(x)?;
    let out: Vec<Scalar> = xs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let k = at(i);
            // The product is formed in the scale's precision, as the reference does.
            let d = (v.to_f64() - z[k]) as f32 * s[k] as f32;
            Scalar::Float(f64::from(d))
        })
        .collect();
    write_scalars(y, &out)
}

/// DynamicQuantizeLinear: scale = (max(0, max x) - min(0, min x)) / 255, zero point =
/// saturate(round(-min / scale)), y = saturate(round(x / scale) + zero point).
pub(crate) fn dynamic_quantize(
    x: &TensorView<'_>,
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let xs = x.as_slice::<f32>()?;
    let max = xs.iter().fold(0.0f32, |m, &v| m.max(v));
    let min = xs.iter().fold(0.0f32, |m, &v| m.min(v));
    let scale = (max - min) / 255.0;
    let zp = if scale == 0.0 {
        0.0
    } else {
        (f64::from(-min) / f64::from(scale))
            .round_ties_even()
            .clamp(0.0, 255.0)
    };
    let [y, s, z] = outputs else {
        return Err(BackendError::Other(
            "DynamicQuantizeLinear needs three output buffers".into(),
        ));
    };
    let q: Vec<Scalar> = xs
        .iter()
        .map(|&v| {
            let r = if scale == 0.0 {
                zp
            } else {
                f64::from(v / scale).round_ties_even() + zp
            };
            Scalar::Int(r.clamp(0.0, 255.0) as i64)
        })
        .collect();
    write_scalars(y, &q)?;
    write_scalars(s, &[Scalar::Float(f64::from(scale))])?;
    write_scalars(z, &[Scalar::Int(zp as i64)])
}

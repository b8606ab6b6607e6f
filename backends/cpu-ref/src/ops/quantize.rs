//! Linear quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis or blocked)
//! and DynamicQuantizeLinear. Math in f64; integer results (8/16-bit, int4, uint4) round half
//! to even and saturate; float8 results are `x / scale + zero point` rounded to nearest even
//! by the float8 conversion, with the op's `saturate`.

use super::cast::{read_scalars, write_scalars, write_scalars_saturating, Scalar};
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
        DataType::I4 => (-8.0, 7.0),
        DataType::U4 => (0.0, 15.0),
        _ => (f64::MIN, f64::MAX),
    }
}

/// How scales and zero points map onto x: the op's axis and block size (0: per tensor or
/// per axis, by the scale's element count).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    axis: i64,
    block_size: usize,
}

impl Layout {
    /// The layout of a QuantizeLinear / DequantizeLinear layer.
    pub(crate) fn new(axis: i64, block_size: usize) -> Self {
        Layout { axis, block_size }
    }
}

/// For each element of `x`, the index of its scale / zero point: 0 for per-tensor values,
/// the coordinate along the axis per axis, and for blocks the element's own index with the
/// axis coordinate divided by the block size.
fn param_index(layout: Layout, dims: &[usize], params: usize) -> Result<impl Fn(usize) -> usize> {
    let (inner, len, block, blocks) = if layout.block_size > 0 {
        let a = normalize_axis(layout.axis, dims.len())?;
        let len = dims[a];
        (
            product(&dims[a + 1..]),
            len,
            layout.block_size,
            len.div_ceil(layout.block_size),
        )
    } else if params == 1 {
        (1, 1, 1, 0)
    } else {
        let a = normalize_axis(layout.axis, dims.len())?;
        (product(&dims[a + 1..]), dims[a], 1, 0)
    };
    Ok(move |i: usize| {
        let along = (i / inner) % len;
        if blocks == 0 {
            along
        } else {
            let outer = i / (inner * len);
            (outer * blocks + along / block) * inner + i % inner
        }
    })
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

/// The scale and zero point at index `k` (an error, not a panic, if the layer's parameters
/// do not match x; shape inference already rejects such layers).
fn param_at(s: &[f64], z: &[f64], k: usize) -> Result<(f64, f64)> {
    match (s.get(k), z.get(k)) {
        (Some(&s), Some(&z)) => Ok((s, z)),
        _ => Err(BackendError::Execution(format!(
            "scale index {k} is out of range: {} scales",
            s.len()
        ))),
    }
}

/// y = saturate(round(x / scale) + zero_point); for float8 y, the float8 conversion of
/// x / scale + zero_point (saturating or not by `saturate`).
pub(crate) fn quantize(
    layout: Layout,
    saturate: bool,
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    zero_point: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (s, z) = params(x, scale, zero_point)?;
    let at = param_index(layout, x.dims(), s.len())?;
    let float8 = y.info.dtype.is_float8();
    let (lo, hi) = bounds(y.info.dtype);
    let xs = x.to_f64_vec();
    // The quotient is formed in the input's precision (f32 for f32 inputs), as the reference
    // does, so that values on a rounding boundary round the same way.
    let f32_math = x.info.dtype == DataType::F32;
    let out = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (scale, zero) = param_at(&s, &z, at(i))?;
            let quotient = if f32_math {
                f64::from(v as f32 / scale as f32)
            } else {
                v / scale
            };
            if float8 {
                return Ok(Scalar::Float(quotient + zero));
            }
            let q = (quotient.round_ties_even() + zero).clamp(lo, hi);
            Ok(Scalar::Int(q as i64))
        })
        .collect::<Result<Vec<Scalar>>>()?;
    write_scalars_saturating(y, &out, saturate)
}

/// y = (x - zero_point) * scale (float8 x and zero points decoded exactly first).
pub(crate) fn dequantize(
    layout: Layout,
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    zero_point: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (s, z) = params(x, scale, zero_point)?;
    let at = param_index(layout, x.dims(), s.len())?;
    let xs = read_scalars(x)?;
    let out = xs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (scale, zero) = param_at(&s, &z, at(i))?;
            // The product is formed in the scale's precision, as the reference does.
            let d = (v.to_f64() - zero) as f32 * scale as f32;
            Ok(Scalar::Float(f64::from(d)))
        })
        .collect::<Result<Vec<Scalar>>>()?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval1, f32s, tensor};
    use backplane_core::{DataType, Op};

    fn quantize(to: DataType, axis: i64, block_size: usize, saturate: bool) -> Op {
        Op::QuantizeLinear {
            axis,
            to,
            block_size,
            saturate,
            requant: backplane_core::quant::Requantization::F32,
        }
    }

    fn dequantize(axis: i64, block_size: usize) -> Op {
        Op::DequantizeLinear {
            axis,
            to: DataType::F32,
            block_size,
        }
    }

    #[test]
    fn float8_results_round_to_nearest_even_and_saturate_by_the_attribute() {
        let x = f32s(&[4], &[0.0, 1.0, 300.0, -1000.0]);
        let s = f32s(&[], &[2.0]);
        // 0.5 = 0x30; 150 lies between 144 and 160, nearer 144 (0x71); -500 saturates to
        // -448 (0xFE), or is NaN (0xFF) without saturation.
        let y = eval1(&quantize(DataType::F8E4M3Fn, 1, 0, true), &[&x, &s]);
        assert_eq!(y.dtype(), DataType::F8E4M3Fn);
        assert_eq!(y.bytes(), &[0x00, 0x30, 0x71, 0xFE]);
        let y = eval1(&quantize(DataType::F8E4M3Fn, 1, 0, false), &[&x, &s]);
        assert_eq!(y.bytes(), &[0x00, 0x30, 0x71, 0xFF]);
        // The zero point's type picks the result; E5M2 overflows to -inf without saturation.
        let zp = tensor(DataType::F8E5M2, &[], &[0.0]);
        let y = eval1(&quantize(DataType::F8E5M2, 1, 0, false), &[&x, &s, &zp]);
        assert_eq!(y.to_f64_vec(), vec![0.0, 0.5, 160.0, -512.0]);
        let big = f32s(&[1], &[-1e6]);
        let y = eval1(&quantize(DataType::F8E5M2, 1, 0, false), &[&big, &s, &zp]);
        assert_eq!(y.to_f64_vec(), vec![f64::NEG_INFINITY]);
        // And back: exact values times the scale.
        let back = eval1(&dequantize(1, 0), &[&y, &s]);
        assert_eq!(back.to_f64_vec(), vec![f64::NEG_INFINITY]);
        let f8 = tensor(DataType::F8E4M3Fnuz, &[3], &[0.5, -240.0, 3.0]);
        let back = eval1(&dequantize(1, 0), &[&f8, &s]);
        assert_eq!(back.to_f64_vec(), vec![1.0, -480.0, 6.0]);
    }

    #[test]
    fn four_bit_results_saturate_with_the_zero_point() {
        let x = f32s(&[4], &[-20.0, -3.0, 2.5, 40.0]);
        let s = f32s(&[], &[1.0]);
        let zp = tensor(DataType::I4, &[], &[1.0]);
        let y = eval1(&quantize(DataType::I4, 1, 0, true), &[&x, &s, &zp]);
        assert_eq!(y.dtype(), DataType::I4);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-8, -2, 3, 7]);
        let back = eval1(&dequantize(1, 0), &[&y, &s, &zp]);
        assert_eq!(back.to_f64_vec(), vec![-9.0, -3.0, 2.0, 6.0]);
        let zp = tensor(DataType::U4, &[], &[3.0]);
        let y = eval1(&quantize(DataType::U4, 1, 0, true), &[&x, &s, &zp]);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[0, 0, 5, 15]);
    }

    #[test]
    fn blocked_scales_cover_blocks_along_the_axis() {
        // x [2, 5], blocks of 2 along axis 1: scales [2, 3] (the last block is short).
        let x = f32s(
            &[2, 5],
            &[1.0, 2.0, 30.0, 40.0, 5.0, 4.0, 6.0, 8.0, 12.0, 9.0],
        );
        let s = f32s(&[2, 3], &[1.0, 10.0, 5.0, 2.0, 4.0, 3.0]);
        let zp = tensor(DataType::U8, &[2, 3], &[0.0, 1.0, 0.0, 0.0, 0.0, 10.0]);
        let y = eval1(&quantize(DataType::U8, 1, 2, true), &[&x, &s, &zp]);
        assert_eq!(
            y.as_slice::<u8>().unwrap(),
            &[1, 2, 4, 5, 1, 2, 3, 2, 3, 13]
        );
        let back = eval1(&dequantize(1, 2), &[&y, &s, &zp]);
        assert_eq!(
            back.to_f64_vec(),
            vec![1.0, 2.0, 30.0, 40.0, 5.0, 4.0, 6.0, 8.0, 12.0, 9.0]
        );
        // Blocks along axis 0 of a [4, 1] tensor.
        let x = f32s(&[4, 1], &[2.0, 4.0, 9.0, 12.0]);
        let s = f32s(&[2, 1], &[2.0, 3.0]);
        let y = eval1(&quantize(DataType::I8, 0, 2, true), &[&x, &s]);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[1, 2, 3, 4]);
        // A scale of the wrong blocked shape is refused by shape inference.
        let bad = f32s(&[1, 1], &[1.0]);
        assert!(crate::evaluate(&quantize(DataType::I8, 0, 2, true), &[&x, &bad]).is_err());
    }
}

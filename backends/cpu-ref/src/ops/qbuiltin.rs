//! CpuRef's integer forms of LiteRT's builtin int8 MUL and MEAN, which [`crate::fold`] makes
//! of `DequantizeLinear → Mul → (Relu | Clip)? → QuantizeLinear` and `DequantizeLinear →
//! ReduceMean → QuantizeLinear` chains whose QuantizeLinear asks for
//! [`Requantization::FixedPoint`] (the TFLite importer's choice for models LiteRT runs on its
//! builtin kernels). The f32 chains (XNNPACK's results) differ from these where a value lies
//! next to a rounding boundary. The rules were found by experiment
//! (`scripts/probe_tflite_q8_builtin.py`, docs/tflite.md):
//!
//! * MUL: `(a - a_zero) · (b - b_zero)` through gemmlowp's
//!   [`multiply_by_quantized_multiplier`] with `a_scale · b_scale / y_scale` (f64), plus the
//!   output zero point, clamped;
//! * MEAN: the sum of the raw 8-bit values (not centered) through
//!   [`multiply_by_quantized_multiplier_half_up`] with `x_scale / (n · y_scale)` (f32), plus
//!   `y_zero - round(x_zero · x_scale / y_scale)` (f32, half away from zero), clamped to the
//!   type. LiteRT's kernel runs blocks of 16 channels vectorized (NEON code, emulated on
//!   x86, whose rounding shifts round half up) and the last `channels % 16` with gemmlowp's
//!   scalar [`multiply_by_quantized_multiplier`]; on one thread, which is what this
//!   follows (with more, each thread's share of the channels has its own tail).
//!
//! [`Requantization::FixedPoint`]: backplane_core::quant::Requantization::FixedPoint

use super::indexing::broadcast_offsets;
use super::qlinear::range;
use backplane_backend_api::BackendError;
use backplane_core::ops::CustomOp;
use backplane_core::quant::{
    multiply_by_quantized_multiplier, quantize_multiplier, FixedPointMean,
};
use backplane_core::{DataType, TensorInfo, TensorView};

/// The folded int8 multiplication.
pub(crate) const QMUL: &str = "QMulFixedPoint";
/// The folded int8 mean.
pub(crate) const QMEAN: &str = "QMeanFixedPoint";

/// The multiplication's quantization: a's, b's and y's scale and zero point, and y's range.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QMulDesc {
    /// Scale and zero point of a.
    pub a: (f32, i32),
    /// Scale and zero point of b.
    pub b: (f32, i32),
    /// Scale and zero point of y.
    pub y: (f32, i32),
    /// The lowest and highest output integer.
    pub clamp: (i32, i32),
}

/// The mean's quantization and the axes it reduces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QMeanDesc {
    /// Scale and zero point of x.
    pub x: (f32, i32),
    /// Scale and zero point of y.
    pub y: (f32, i32),
    /// Which of x's axes are averaged.
    pub reduced: Vec<bool>,
}

/// Whether `c` is one of this module's layers.
pub(crate) fn is_ours(c: &CustomOp) -> bool {
    c.domain == super::qlinear::DOMAIN && (c.op_type == QMUL || c.op_type == QMEAN)
}

/// The kernel of layer `c` (one of this module's) with inputs `inputs`, or why there is none.
pub(crate) fn kernel(
    c: &CustomOp,
    inputs: &[&TensorInfo],
) -> std::result::Result<super::plan::Kernel, String> {
    let y = c.outputs.first().ok_or("no output")?.clone();
    let payload = c.payload.as_ref();
    match (c.op_type.as_str(), inputs) {
        (QMUL, [a, b]) => {
            let d = payload
                .and_then(|p| p.get::<QMulDesc>())
                .cloned()
                .ok_or("QMulFixedPoint carries no CpuRef description")?;
            mul_kernel(d, a, b, &y)
        }
        (QMEAN, [x]) => {
            let d = payload
                .and_then(|p| p.get::<QMeanDesc>())
                .cloned()
                .ok_or("QMeanFixedPoint carries no CpuRef description")?;
            mean_kernel(d, x, &y)
        }
        _ => Err(format!(
            "{}: not CpuRef's layer of {} inputs",
            c.op_type,
            inputs.len()
        )),
    }
}

/// Element `i` of an 8-bit view as an integer.
fn int_at(v: &TensorView<'_>, i: usize) -> i32 {
    match v.info.dtype {
        DataType::I8 => i32::from(v.data[i] as i8),
        _ => i32::from(v.data[i]),
    }
}

fn eight_bit(infos: &[&TensorInfo]) -> std::result::Result<(), String> {
    match infos.iter().all(|i| range(i.dtype).is_some()) {
        true => Ok(()),
        false => Err("takes and gives 8-bit tensors".to_string()),
    }
}

fn mul_kernel(
    d: QMulDesc,
    a: &TensorInfo,
    b: &TensorInfo,
    y: &TensorInfo,
) -> std::result::Result<super::plan::Kernel, String> {
    eight_bit(&[a, b, y]).map_err(|e| format!("QMulFixedPoint {e}"))?;
    let out = y.shape.dims().to_vec();
    let fits = |t: &TensorInfo| {
        let d = t.shape.dims();
        d.len() <= out.len()
            && d.iter()
                .rev()
                .zip(out.iter().rev())
                .all(|(&i, &o)| i == o || i == 1)
    };
    if !fits(a) || !fits(b) {
        return Err(format!(
            "QMulFixedPoint: {} and {} do not broadcast to {}",
            a.shape, b.shape, y.shape
        ));
    }
    let (ad, bd) = (a.shape.dims().to_vec(), b.shape.dims().to_vec());
    let m = quantize_multiplier(f64::from(d.a.0) * f64::from(d.b.0) / f64::from(d.y.0));
    Ok(Box::new(move |inputs, outputs| {
        let ([av, bv], [yv]) = (inputs, outputs) else {
            return Err(BackendError::Other("QMulFixedPoint takes a and b".into()));
        };
        let (ao, bo) = (broadcast_offsets(&ad, &out), broadcast_offsets(&bd, &out));
        for (i, (&ia, &ib)) in ao.iter().zip(&bo).enumerate() {
            let p = (int_at(av, ia) - d.a.1) * (int_at(bv, ib) - d.b.1);
            let v = multiply_by_quantized_multiplier(p, m.0, m.1).saturating_add(d.y.1);
            yv.data[i] = v.clamp(d.clamp.0, d.clamp.1) as u8;
        }
        Ok(())
    }))
}

fn mean_kernel(
    d: QMeanDesc,
    x: &TensorInfo,
    y: &TensorInfo,
) -> std::result::Result<super::plan::Kernel, String> {
    eight_bit(&[x, y]).map_err(|e| format!("QMeanFixedPoint {e}"))?;
    let dims = x.shape.dims().to_vec();
    if d.reduced.len() != dims.len() {
        return Err("QMeanFixedPoint: the reduced axes do not fit x".to_string());
    }
    let kept: usize = dims
        .iter()
        .zip(&d.reduced)
        .filter(|(_, r)| !**r)
        .map(|(d, _)| d)
        .product();
    let n: usize = dims
        .iter()
        .zip(&d.reduced)
        .filter(|(_, r)| **r)
        .map(|(d, _)| d)
        .product();
    let y_count = y.shape.num_elements().map_err(|e| e.to_string())?;
    if n == 0 || kept != y_count {
        return Err(format!(
            "QMeanFixedPoint: y {} does not fit x {}",
            y.shape, x.shape
        ));
    }
    let (lo, hi) = range(y.dtype).ok_or("QMeanFixedPoint: y is not 8-bit")?;
    let rule = FixedPointMean::new(d.x, d.y, n);
    // The output index of each input element: row-major over the kept axes.
    let mut out_strides = vec![0usize; dims.len()];
    let mut s = 1;
    for k in (0..dims.len()).rev() {
        if !d.reduced[k] {
            out_strides[k] = s;
            s *= dims[k];
        }
    }
    let targets = super::indexing::strided_offsets(&dims, &out_strides);
    // The channels: the kept values per batch image (the first axis, when kept).
    let depth = match (dims.first(), d.reduced.first()) {
        (Some(&b), Some(false)) if b > 0 => kept / b,
        _ => kept,
    };
    Ok(Box::new(move |inputs, outputs| {
        let ([xv], [yv]) = (inputs, outputs) else {
            return Err(BackendError::Other("QMeanFixedPoint takes x".into()));
        };
        let mut sums = vec![0i64; kept];
        for (i, &o) in targets.iter().enumerate() {
            sums[o] += i64::from(int_at(xv, i));
        }
        for (o, &sum) in sums.iter().enumerate() {
            let v = rule.value(sum, o % depth.max(1), depth.max(1));
            yv.data[o] = v.clamp(lo, hi) as u8;
        }
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use backplane_core::quant::multiply_by_quantized_multiplier;

    fn run(k: super::super::plan::Kernel, ins: &[(&TensorInfo, &[u8])], y: &TensorInfo) -> Vec<i8> {
        let views: Vec<TensorView<'_>> = ins
            .iter()
            .map(|(info, data)| TensorView { info, data })
            .collect();
        let mut out = vec![0u8; y.shape.num_elements().unwrap()];
        let mut yv = [backplane_core::TensorViewMut {
            info: y,
            data: &mut out,
        }];
        k(&views, &mut yv).unwrap();
        out.iter().map(|&b| b as i8).collect()
    }

    fn bytes(v: &[i8]) -> Vec<u8> {
        v.iter().map(|&b| b as u8).collect()
    }

    #[test]
    fn mul_broadcasts_and_requantizes_by_gemmlowp() {
        let a = TensorInfo::new(DataType::I8, vec![2, 3]);
        let b = TensorInfo::new(DataType::I8, vec![3]);
        let y = TensorInfo::new(DataType::I8, vec![2, 3]);
        let d = QMulDesc {
            a: (0.5, 1),
            b: (0.25, -2),
            y: (0.0625, 3),
            clamp: (-128, 127),
        };
        let k = mul_kernel(d.clone(), &a, &b, &y).unwrap();
        let (av, bv) = ([5i8, -7, 0, 100, -128, 1], [3i8, -2, 127]);
        let got = run(k, &[(&a, &bytes(&av)), (&b, &bytes(&bv))], &y);
        let m = quantize_multiplier(0.5 * 0.25 / 0.0625);
        for i in 0..6 {
            let p = (i32::from(av[i]) - 1) * (i32::from(bv[i % 3]) + 2);
            let want = (multiply_by_quantized_multiplier(p, m.0, m.1) + 3).clamp(-128, 127);
            assert_eq!(i32::from(got[i]), want, "element {i}");
        }
        // a multiplier of 2: (5 - 1) · (3 + 2) · 2 + 3 = 43; saturation at both ends.
        assert_eq!(got[0], 43);
        assert_eq!(got[3], 127);
        // b does not broadcast to y.
        let b4 = TensorInfo::new(DataType::I8, vec![4]);
        assert!(mul_kernel(d, &a, &b4, &y).is_err());
    }

    #[test]
    fn mean_sums_raw_values_rounding_blocks_half_up_and_the_tail_as_gemmlowp() {
        // Two channels (axis 1 kept) of three values each (axis 0 reduced).
        let x = TensorInfo::new(DataType::I8, vec![3, 2]);
        let y = TensorInfo::new(DataType::I8, vec![1, 2]);
        let d = QMeanDesc {
            x: (0.5, -3),
            y: (0.5, -3),
            reduced: vec![true, false],
        };
        let k = mean_kernel(d.clone(), &x, &y).unwrap();
        let xv = [1i8, -10, 2, -10, 4, -11];
        let got = run(k, &[(&x, &bytes(&xv))], &y);
        // Two channels, all in the scalar tail (gemmlowp). Scales equal: bias
        // -3 - round(-3) = 0, multiplier 1/3 = 0.667 · 2^-1, rounded twice: 7 · 0.667 = 4.67
        // → 5, 5 / 2 → 3 (7 / 3 is 2.33); -31 · 0.667 = -20.67 → -21, -21 / 2 → -11.
        assert_eq!(got, vec![3, -11]);
        // The high multiply rounds -1.5 to -1 and 1.5 to 2.
        let x2 = TensorInfo::new(DataType::I8, vec![2, 2]);
        let k = mean_kernel(d.clone(), &x2, &y).unwrap();
        assert_eq!(run(k, &[(&x2, &bytes(&[1, -1, 2, -2]))], &y), vec![2, -1]);
        // 17 channels of four values summing to -6 (multiplier 1/4 = 0.5 · 2^-1): the
        // first 16 round -1.5 half up to -1, the 17th as gemmlowp's shift, to -2.
        let x17 = TensorInfo::new(DataType::I8, vec![1, 4, 17]);
        let y17 = TensorInfo::new(DataType::I8, vec![1, 1, 17]);
        let d17 = QMeanDesc {
            reduced: vec![false, true, false],
            ..d.clone()
        };
        let k = mean_kernel(d17, &x17, &y17).unwrap();
        let mut xv = vec![-1i8; 68];
        xv[17..34].fill(-2);
        xv[51..].fill(-2);
        let got = run(k, &[(&x17, &bytes(&xv))], &y17);
        assert_eq!(got[..16], [-1; 16]);
        assert_eq!(got[16], -2);
        // y with the wrong number of values.
        let y3 = TensorInfo::new(DataType::I8, vec![3]);
        assert!(mean_kernel(d, &x, &y3).is_err());
    }
}

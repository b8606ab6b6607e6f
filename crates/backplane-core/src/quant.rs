//! Quantization parameters carried by a [`crate::TensorInfo`].

/// How the integers of a tensor map to real values: `real = scale * (q - zero_point)`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Quantization {
    /// Not quantized.
    #[default]
    None,
    /// One scale and zero point for the whole tensor.
    PerTensor {
        /// Scale.
        scale: f32,
        /// Zero point.
        zero_point: i32,
    },
    /// One scale and zero point per slice along `axis`.
    PerAxis {
        /// The quantized axis.
        axis: usize,
        /// One scale per slice.
        scales: Vec<f32>,
        /// One zero point per slice.
        zero_points: Vec<i32>,
    },
}

/// The requantization multiplier of an integer product's output channel:
/// `x_scale · w_scale / y_scale`, formed in f32 in that order (two roundings), as XNNPACK
/// (LiteRT's default delegate) and ONNX Runtime's MLAS form it. The real quotient rounded
/// once to f32 can be one unit in the last place off, which moves a sum lying next to a
/// rounding boundary by one quantum. Every backend's integer convolution and product forms
/// the scale here.
pub fn requant_scale(x_scale: f32, w_scale: f32, y_scale: f32) -> f32 {
    x_scale * w_scale / y_scale
}

/// Requantize one exact integer sum (bias included) to an output value: the sum rounded to
/// f32, times `scale` ([`requant_scale`]) in f32, rounded half to even, plus `zero`, clamped
/// to `[lo, hi]` (the output type's range, or the fused activation's). XNNPACK's rule,
/// written once for the reference backend; CpuAcc's kernels compute the same per element
/// (they clamp before rounding, which is the same since rounding is monotone).
pub fn requantize(sum: i64, scale: f32, zero: i32, lo: i32, hi: i32) -> i32 {
    let v = (sum as f32 * scale).round_ties_even();
    if v.is_nan() {
        return zero.clamp(lo, hi);
    }
    // Far outside any 8- to 32-bit range: saturate before the integer addition.
    let v = v.clamp(-4e9, 4e9) as i64 + i64::from(zero);
    v.clamp(i64::from(lo), i64::from(hi)) as i32
}

/// The activation range `[act_lo, act_hi]` (real values; infinite for none) in output units
/// of a quantization `(scale, zero)` whose integers lie in `[qlo, qhi]`: each bound divided
/// by the scale, rounded half to even, plus the zero point, within the type's range.
pub fn activation_range(
    (scale, zero): (f32, i32),
    (act_lo, act_hi): (f32, f32),
    (qlo, qhi): (i32, i32),
) -> (i32, i32) {
    let q = |v: f32| {
        let r = (v / scale).round_ties_even();
        if r.is_nan() {
            zero
        } else {
            (r.clamp(-1e9, 1e9) as i32).saturating_add(zero)
        }
    };
    let lo = if act_lo == f32::NEG_INFINITY {
        qlo
    } else {
        q(act_lo).max(qlo)
    };
    let hi = if act_hi == f32::INFINITY {
        qhi
    } else {
        q(act_hi).min(qhi)
    };
    (lo, hi.max(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_formed_in_two_f32_roundings() {
        // A case where the once-rounded quotient differs from the twice-rounded one.
        let (x, w, y) = (0.003_921_569_f32, 0.011_730_3_f32, 0.023_529_412_f32);
        assert_eq!(requant_scale(x, w, y), (x * w) / y);
        let mut differs = false;
        for i in 0..2000 {
            let w = 0.01 + i as f32 * 1.37e-5;
            let once = (f64::from(x) * f64::from(w) / f64::from(y)) as f32;
            differs |= once != requant_scale(x, w, y);
        }
        assert!(differs, "no case where the two roundings matter");
    }

    #[test]
    fn requantize_rounds_half_to_even_and_clamps() {
        assert_eq!(requantize(5, 0.5, 0, -128, 127), 2);
        assert_eq!(requantize(7, 0.5, 0, -128, 127), 4);
        assert_eq!(requantize(-5, 0.5, 3, -128, 127), 1);
        assert_eq!(requantize(1000, 1.0, 0, -128, 127), 127);
        assert_eq!(requantize(-1000, 1.0, 10, 0, 255), 0);
        assert_eq!(requantize(i64::from(i32::MAX), 1e9, 0, -128, 127), 127);
    }

    #[test]
    fn activation_range_in_output_units() {
        assert_eq!(
            activation_range((0.5, -3), (0.0, 6.0), (-128, 127)),
            (-3, 9)
        );
        assert_eq!(
            activation_range((0.5, 0), (f32::NEG_INFINITY, f32::INFINITY), (0, 255)),
            (0, 255)
        );
        assert_eq!(
            activation_range((0.01, 0), (0.0, 6.0), (-128, 127)),
            (0, 127)
        );
    }
}

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

/// How an integer layer (a convolution or product folded from a quantized chain) turns its
/// exact integer sum into an output integer. The two rules agree except next to rounding
/// boundaries; which one a model's reference used decides whether results match it bit
/// for bit. Carried by [`crate::Op::QuantizeLinear`] (the end of the chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Requantization {
    /// [`requant_scale`] in f32, [`requantize`]: XNNPACK's rule (LiteRT's default
    /// delegate) and ONNX Runtime's.
    #[default]
    F32,
    /// A Q31 fixed-point multiplier and shift ([`fixed_point_multiplier`],
    /// [`requantize_fixed_point`]): the rule of LiteRT's builtin convolution kernels, which
    /// run when its XNNPACK delegate refuses a model.
    FixedPoint,
}

impl Requantization {
    /// The rule's name in attributes and options: `f32` or `fixed-point`.
    pub fn name(self) -> &'static str {
        match self {
            Requantization::F32 => "f32",
            Requantization::FixedPoint => "fixed-point",
        }
    }

    /// The rule named `name` ([`Requantization::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f32" => Some(Requantization::F32),
            "fixed-point" => Some(Requantization::FixedPoint),
            _ => None,
        }
    }
}

/// TFLite's `QuantizeMultiplier`: `m ≈ q · 2^(shift - 31)` with `q` a Q31 integer in
/// `[2^30, 2^31)` (or 0), the mantissa rounded half away from zero. Multipliers too small
/// to shift (`shift < -31`) become 0.
pub fn quantize_multiplier(m: f64) -> (i32, i32) {
    if m == 0.0 || !m.is_finite() {
        return (0, 0);
    }
    // frexp: m = f · 2^e with |f| in [0.5, 1).
    let mut e = m.abs().log2().floor() as i32 + 1;
    let mut f = m / 2f64.powi(e);
    if f.abs() >= 1.0 {
        f /= 2.0;
        e += 1;
    } else if f.abs() < 0.5 {
        f *= 2.0;
        e -= 1;
    }
    let mut q = (f * 2f64.powi(31)).round() as i64;
    if q == 1 << 31 {
        q /= 2;
        e += 1;
    }
    if e < -31 {
        return (0, 0);
    }
    (q as i32, e)
}

/// The fixed-point requantization multiplier of an output channel, as LiteRT's builtin
/// convolutions form it: `x_scale · w_scale / y_scale` in f64, then
/// [`quantize_multiplier`].
pub fn fixed_point_multiplier(x_scale: f32, w_scale: f32, y_scale: f32) -> (i32, i32) {
    quantize_multiplier(f64::from(x_scale) * f64::from(w_scale) / f64::from(y_scale))
}

/// The multiplier `(q, shift)` as one f32 (`q · 2^(shift - 31)`, rounded once): what a
/// kernel that requantizes in f32 uses to follow the fixed-point rule except where a value
/// lies within an f32 rounding of a half-way point.
pub fn fixed_point_scale((q, shift): (i32, i32)) -> f32 {
    (f64::from(q) * 2f64.powi(shift - 31)) as f32
}

/// gemmlowp's `MultiplyByQuantizedMultiplier`: `x · 2^max(shift, 0)` (saturated to i32),
/// times `q / 2^31` rounded half away from zero (`SaturatingRoundingDoublingHighMul`),
/// then divided by `2^max(-shift, 0)` rounded half away from zero (`RoundingDivideByPOT`).
pub fn multiply_by_quantized_multiplier(x: i32, q: i32, shift: i32) -> i32 {
    let left = shift.clamp(0, 31);
    let right = (-shift).clamp(0, 31);
    let x = (i64::from(x) << left).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
    // SaturatingRoundingDoublingHighMul.
    let high = if x == i64::from(i32::MIN) && q == i32::MIN {
        i64::from(i32::MAX)
    } else {
        let ab = x * i64::from(q);
        let nudge = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
        // Division truncating toward zero, as C++'s.
        (ab + nudge) / (1i64 << 31)
    };
    // RoundingDivideByPOT.
    let mask = (1i64 << right) - 1;
    let remainder = high & mask;
    let threshold = (mask >> 1) + i64::from(high < 0);
    let r = (high >> right) + i64::from(remainder > threshold);
    r as i32
}

/// The variant of [`multiply_by_quantized_multiplier`] LiteRT's optimized int8
/// convolution, depthwise convolution and mean kernels compute on x86 (found by
/// experiment, `scripts/probe_tflite_q8_builtin.py`): both roundings half up (toward
/// +∞), `h = (x · 2^max(shift, 0) · q + 2^30) >> 31`, then `(h + 2^(k-1)) >> k` for the
/// right shift `k = max(-shift, 0)`. It differs from gemmlowp's reference where either
/// step is a tie on a negative value.
pub fn multiply_by_quantized_multiplier_half_up(x: i32, q: i32, shift: i32) -> i32 {
    let left = shift.clamp(0, 31);
    let right = (-shift).clamp(0, 31);
    let x = (i64::from(x) << left).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
    let high = (x * i64::from(q) + (1 << 30)) >> 31;
    let r = (high + ((1i64 << right) >> 1)) >> right;
    r.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// Requantize one exact integer sum (bias included) by the fixed-point rule of LiteRT's
/// builtin convolutions: the sum (saturated to i32, as LiteRT's int32 accumulator) through
/// [`multiply_by_quantized_multiplier_half_up`], plus `zero`, clamped to `[lo, hi]`.
pub fn requantize_fixed_point(
    sum: i64,
    (q, shift): (i32, i32),
    zero: i32,
    lo: i32,
    hi: i32,
) -> i32 {
    let s = sum.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    let v = i64::from(multiply_by_quantized_multiplier_half_up(s, q, shift)) + i64::from(zero);
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

/// LiteRT's builtin int8 MEAN (its optimized kernel, on one thread): the sum of the raw
/// 8-bit values times the Q31 multiplier `x_scale / (n · y_scale)` (f32), channels in blocks
/// of [`FixedPointMean::BLOCK`] with both roundings half up and the last `C mod 16` by
/// gemmlowp's reference, plus `y_zero − round(x_zero · x_scale / y_scale)` (f32, half away
/// from zero). Shared by the backends that follow the rule, so they agree bit for bit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedPointMean {
    /// The Q31 multiplier and its shift.
    pub multiplier: (i32, i32),
    /// What is added after the multiplication.
    pub bias: i32,
}

impl FixedPointMean {
    /// The channel block of LiteRT's vectorized part.
    pub const BLOCK: usize = 16;

    /// The constants of a mean of `n` values of `x` (scale, zero point) into `y`, every step
    /// in f32 as LiteRT's kernel takes it.
    pub fn new((sx, zx): (f32, i32), (sy, zy): (f32, i32), n: usize) -> Self {
        let t = zx as f32 * sx / sy;
        let t = if t > 0.0 { t + 0.5 } else { t - 0.5 };
        FixedPointMean {
            multiplier: quantize_multiplier(f64::from(sx / (n as f32 * sy))),
            bias: zy.saturating_sub(t.clamp(-2e9, 2e9) as i32),
        }
    }

    /// The output value (before the type's clamp) of channel `ch` of `depth` from its sum.
    pub fn value(&self, sum: i64, ch: usize, depth: usize) -> i32 {
        let s = sum.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let (q, shift) = self.multiplier;
        let v = if ch < depth - depth % Self::BLOCK {
            multiply_by_quantized_multiplier_half_up(s, q, shift)
        } else {
            multiply_by_quantized_multiplier(s, q, shift)
        };
        v.saturating_add(self.bias)
    }
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
    fn quantize_multiplier_is_a_q31_mantissa_and_exponent() {
        assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
        assert_eq!(quantize_multiplier(1.0), (1 << 30, 1));
        assert_eq!(quantize_multiplier(0.75), (3 << 29, 0));
        assert_eq!(quantize_multiplier(0.0), (0, 0));
        assert_eq!(quantize_multiplier(1e-12), (0, 0));
        // A mantissa that rounds up to 2^31 moves to the next exponent.
        assert_eq!(quantize_multiplier(1.0 - 1e-12), (1 << 30, 1));
        let (q, e) = quantize_multiplier(464.08);
        assert_eq!(e, 9);
        assert!((f64::from(q) * 2f64.powi(e - 31) - 464.08).abs() < 1e-6);
        let (q, e) = quantize_multiplier(0.002_345);
        assert!((1 << 30..=i32::MAX).contains(&q));
        assert!((f64::from(q) * 2f64.powi(e - 31) - 0.002_345).abs() < 1e-12);
    }

    #[test]
    fn gemmlowp_rounds_twice_ties_away_from_zero_but_the_high_multiply() {
        let half = quantize_multiplier(0.5);
        // The high multiply rounds 2.5 up to 3 but -2.5 to -2 (its negative nudge is one
        // short of a half).
        assert_eq!(multiply_by_quantized_multiplier(5, half.0, half.1), 3);
        assert_eq!(multiply_by_quantized_multiplier(-5, half.0, half.1), -2);
        // 1/8 = 0.5 · 2^-2: the shift rounds half away from zero, 12 / 8 → 2, -12 / 8 →
        // -2; and twice: 11 · 0.5 → 6, 6 / 4 → 2 (11 / 8 is 1.375).
        let eighth = quantize_multiplier(0.125);
        assert_eq!(eighth.1, -2);
        assert_eq!(multiply_by_quantized_multiplier(12, eighth.0, eighth.1), 2);
        assert_eq!(
            multiply_by_quantized_multiplier(-12, eighth.0, eighth.1),
            -2
        );
        assert_eq!(multiply_by_quantized_multiplier(11, eighth.0, eighth.1), 2);
        assert_eq!(
            multiply_by_quantized_multiplier(-20, eighth.0, eighth.1),
            -3
        );
        assert_eq!(
            multiply_by_quantized_multiplier(i32::MIN, i32::MIN, 0),
            i32::MAX
        );
    }

    #[test]
    fn fixed_point_rounds_half_up_twice() {
        let half = quantize_multiplier(0.5);
        assert_eq!(requantize_fixed_point(5, half, 0, -128, 127), 3);
        assert_eq!(requantize_fixed_point(-5, half, 0, -128, 127), -2);
        assert_eq!(requantize(5, 0.5, 0, -128, 127), 2);
        let eighth = quantize_multiplier(0.125);
        // -12 / 8 = -1.5 → -1 (gemmlowp: -2); -20 / 8 = -2.5 → -2 (gemmlowp: -3).
        assert_eq!(requantize_fixed_point(-12, eighth, 0, -128, 127), -1);
        assert_eq!(requantize_fixed_point(-20, eighth, 0, -128, 127), -2);
        assert_eq!(requantize_fixed_point(12, eighth, 0, -128, 127), 2);
        assert_eq!(requantize_fixed_point(11, eighth, 0, -128, 127), 2);
        assert_eq!(requantize_fixed_point(10, eighth, 0, -128, 127), 1);
        // Multipliers above one shift left first; sums saturate, outputs clamp.
        let big = quantize_multiplier(300.0);
        assert_eq!(requantize_fixed_point(1, big, -100, -128, 127), 127);
        assert_eq!(requantize_fixed_point(-1, big, 100, -128, 127), -128);
        assert_eq!(requantize_fixed_point(i64::MAX, half, 0, -128, 127), 127);
        assert_eq!(requantize_fixed_point(i64::MIN, half, 0, -128, 127), -128);
        assert_eq!(fixed_point_scale(half), 0.5);
    }

    #[test]
    fn requantization_names_round_trip() {
        for r in [Requantization::F32, Requantization::FixedPoint] {
            assert_eq!(Requantization::from_name(r.name()), Some(r));
        }
        assert_eq!(Requantization::from_name("even"), None);
        assert_eq!(Requantization::default(), Requantization::F32);
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

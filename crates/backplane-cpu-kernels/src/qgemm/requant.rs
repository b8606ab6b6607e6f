//! Requantization of int32 sums by TFLite's rule: a real multiplier held as a 32-bit
//! fixed-point value and a power-of-two shift, applied with a rounding doubling high
//! multiply and a rounding right shift (both round half away from zero), as TFLite's
//! reference kernels (`QuantizeMultiplier`, `MultiplyByQuantizedMultiplier`) define it.
//!
//! ONNX's QLinearConv/QLinearMatMul define the result as the real value `acc · scale`
//! rounded half to even; the two rules agree except where the real result lies within the
//! fixed-point multiplier's precision (2⁻³¹ relative) of a rounding boundary, or exactly on
//! one (a tie: away from zero here, to even in ONNX's reading).

/// A real multiplier as TFLite stores it: `multiplier · 2^(shift - 31)`, `multiplier` in
/// `[2³⁰, 2³¹)` (or 0 for a zero scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizedMultiplier {
    /// The Q0.31 fixed-point mantissa.
    pub multiplier: i32,
    /// The power of two (left when positive, right when negative).
    pub shift: i32,
}

impl QuantizedMultiplier {
    /// TFLite's `QuantizeMultiplier`: the mantissa rounded half away from zero to 31 bits;
    /// a scale too small to represent (below 2⁻³²) becomes zero. Negative, NaN or infinite
    /// scales give `None`.
    pub fn new(real: f64) -> Option<QuantizedMultiplier> {
        if !real.is_finite() || real < 0.0 {
            return None;
        }
        if real == 0.0 {
            return Some(QuantizedMultiplier {
                multiplier: 0,
                shift: 0,
            });
        }
        let (fraction, mut shift) = frexp(real);
        let mut q = (fraction * 2_147_483_648.0).round() as i64;
        if q == 1 << 31 {
            q /= 2;
            shift += 1;
        }
        if shift < -31 {
            return Some(QuantizedMultiplier {
                multiplier: 0,
                shift: 0,
            });
        }
        if shift > 30 {
            // Larger than 2^30: no real layer's scale; refuse rather than overflow.
            return None;
        }
        Some(QuantizedMultiplier {
            multiplier: i32::try_from(q).ok()?,
            shift,
        })
    }

    /// TFLite's `MultiplyByQuantizedMultiplier`: `x · multiplier · 2^(shift-31)`, rounded.
    #[inline]
    pub fn apply(self, x: i32) -> i32 {
        let left = self.shift.max(0) as u32;
        let right = (-self.shift).max(0) as u32;
        let shifted = x.saturating_mul(1i32.checked_shl(left).unwrap_or(i32::MAX));
        rounding_divide_by_pot(
            saturating_rounding_doubling_high_mul(shifted, self.multiplier),
            right,
        )
    }
}

/// `(m, e)` with `x = m · 2^e`, `m` in `[0.5, 1)`, for a finite positive `x`.
fn frexp(x: f64) -> (f64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scale up first.
        let (m, e) = frexp(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (m, exp - 1022)
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: the high 32 bits of `2·a·b`, rounded
/// half away from zero.
#[inline]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge = if ab >= 0 {
        1i64 << 30
    } else {
        1 - (1i64 << 30)
    };
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded half away from zero.
#[inline]
pub fn rounding_divide_by_pot(x: i32, exponent: u32) -> i32 {
    let e = exponent.min(62);
    let x = i64::from(x);
    let mask = (1i64 << e) - 1;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i64::from(x < 0);
    ((x >> e) + i64::from(remainder > threshold)) as i32
}

/// The parameters of [`requantize_f32`] for one output channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloatRequant {
    /// Added to each sum first (the int32 bias).
    pub bias: i32,
    /// The real multiplier `sx·sw/sy`, rounded to f32.
    pub scale: f32,
    /// The output zero point.
    pub zero: f32,
    /// The lowest and highest output less the zero point (the type's range, or the fused
    /// activation's).
    pub lo: f32,
    /// See `lo`.
    pub hi: f32,
}

/// Round half to even for |v| < 2²² by the float adder (adding and taking away 1.5·2²³
/// leaves the nearest integer under the default rounding mode); vectorizes where
/// `round_ties_even` becomes a call.
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

#[inline(always)]
fn requantize_f32_body(sums: &[i32], out: &mut [u8], p: FloatRequant) {
    for (o, &s) in out.iter_mut().zip(sums) {
        let v = (s.wrapping_add(p.bias) as f32 * p.scale)
            .max(p.lo)
            .min(p.hi);
        // The two's-complement byte is the i8 and the u8 value alike.
        *o = ((round_even(v) + p.zero) as i32) as u8;
    }
}

crate::multiversion! {
    /// Requantize int32 sums to 8-bit outputs in f32, as XNNPACK (LiteRT's default CPU
    /// delegate) does: `clamp(round_half_even((sum + bias) · scale), lo, hi) + zero`, the
    /// byte of an i8 or u8 output. The product is rounded to f32 once, so a result may be
    /// one quantum off the exact real one where it lies within f32 precision of a rounding
    /// boundary (as it may be for TFLite's fixed-point rule, [`QuantizedMultiplier`]).
    pub fn requantize_f32(sums: &[i32], out: &mut [u8], p: FloatRequant) => requantize_f32_body;
}

#[inline(always)]
fn accumulate_taps_body(acc: &mut [i32], src: &[i16], tap: i32) {
    for (a, &v) in acc.iter_mut().zip(src) {
        *a += tap * i32::from(v);
    }
}

crate::multiversion! {
    /// `acc[i] += tap · src[i]`: one tap of a depthwise convolution along an output row
    /// (unit stride), compiled per tier.
    pub fn accumulate_taps(acc: &mut [i32], src: &[i16], tap: i32) => accumulate_taps_body;
}

//! Requantization of int32 sums: each sum times its channel's real scale, rounded half to
//! even in f32, plus the output zero point, clamped to the output range — the rule of
//! XNNPACK, LiteRT's default delegate, whose outputs the TFLite tests compare against.
//!
//! TFLite's reference kernels instead hold the scale as a 32-bit fixed-point multiplier and a
//! shift, rounding half away from zero; the two agree except within 2⁻³¹ (relative) of a
//! rounding boundary or on a tie. ONNX's QLinearConv/QLinearMatMul define the result as the
//! real value rounded half to even, as here.

/// The requantization multiplier of a convolution's or product's output channel,
/// `x_scale · w_scale / y_scale` in f32 in that order: backplane-core's rule, which CpuRef
/// uses too.
pub use backplane_core::quant::requant_scale;

use super::channels::RequantRange;
use crate::aligned::AlignedVec;

/// The parameters of [`requantize_f32`] for one output channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloatRequant {
    /// Added to each sum first (the int32 bias).
    pub bias: i32,
    /// The multiplier `sx·sw/sy` as [`requant_scale`] forms it in f32.
    pub scale: f32,
    /// The output zero point.
    pub zero: f32,
    /// The lowest and highest output less the zero point (the type's range, or the fused
    /// activation's).
    pub lo: f32,
    /// See `lo`.
    pub hi: f32,
}

/// 1.5·2²³: added to an f32 below 2²² in magnitude, leaves its integer part rounded half to
/// even in the low mantissa bits ([`rounded_int`]).
pub(super) const MAGIC: f32 = 12_582_912.0;

/// `v` rounded half to even, as an integer, for |v| < 2²²: after adding 1.5·2²³ the integer
/// sits in the low mantissa bits, so the conversion is integer arithmetic on the bits, which
/// vectorizes (a saturating `as i32` of a float does not: it checks for NaN per element).
#[inline(always)]
pub(super) fn rounded_int(v: f32) -> i32 {
    (v + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32
}

#[inline(always)]
fn requantize_f32_body(sums: &[i32], out: &mut [u8], p: FloatRequant) {
    let zero = p.zero as i32;
    for (o, &s) in out.iter_mut().zip(sums) {
        let v = (s.wrapping_add(p.bias) as f32 * p.scale)
            .max(p.lo)
            .min(p.hi);
        // The two's-complement byte is the i8 and the u8 value alike.
        *o = (rounded_int(v) + zero) as u8;
    }
}

crate::multiversion! {
    /// Requantize int32 sums to 8-bit outputs in f32, as XNNPACK (LiteRT's default CPU
    /// delegate) does: `clamp(round_half_even((sum + bias) · scale), lo, hi) + zero`, the
    /// byte of an i8 or u8 output. The product is rounded to f32 once, so a result may be
    /// one quantum off the exact real one where it lies within f32 precision of a rounding
    /// boundary (as it may be for TFLite's fixed-point rule, `QuantizedMultiplier`).
    pub fn requantize_f32(sums: &[i32], out: &mut [u8], p: FloatRequant) => requantize_f32_body;
}

/// One sum requantized by the fixed-point rule of LiteRT's builtin kernels
/// ([`backplane_core::quant::requantize_fixed_point`], CpuRef's): `sum + bias` (wrapping, as
/// the int32 accumulators of the tiles) times the Q31 multiplier `m = (q, shift)`, both
/// roundings half up, plus the zero point, clamped to the range; the byte of an i8 or u8
/// output. Equal to CpuRef's whenever the exact sum fits in i32.
#[inline(always)]
pub fn requant_fixed_one(sum: i32, bias: i32, m: (i32, i32), r: RequantRange) -> u8 {
    let zero = r.zero as i32;
    let (lo, hi) = (r.lo as i32 + zero, r.hi as i32 + zero);
    let (q, shift) = m;
    let (left, right) = (shift.clamp(0, 31), (-shift).clamp(0, 31));
    // backplane-core's `multiply_by_quantized_multiplier_half_up`, written here so that it
    // inlines into the loops (the tests check both agree).
    let x =
        (i64::from(sum.wrapping_add(bias)) << left).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
    let high = (x * i64::from(q) + (1 << 30)) >> 31;
    let v = (high + ((1i64 << right) >> 1)) >> right;
    // The two's-complement byte is the i8 and the u8 value alike.
    (v + i64::from(zero)).clamp(i64::from(lo), i64::from(hi)) as u8
}

/// Fixed-point multipliers laid out for the vector bodies ([`super::fixed_avx512`]): per
/// lane the Q31 multiplier and the left and right shifts [`requant_fixed_one`] takes apart
/// from the multiplier's one signed shift. Lanes no multiplier is placed in hold zeros.
#[derive(Debug, Clone)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) struct FixedLanes {
    pub q: AlignedVec<i32>,
    pub left: AlignedVec<i32>,
    pub right: AlignedVec<i32>,
}

impl FixedLanes {
    /// `n` lanes, multiplier `k` of `m` in lane `place(k)` (below `n`). `None` when a
    /// place is past the lanes or the lanes cannot be allocated.
    pub(super) fn placed(
        n: usize,
        m: &[(i32, i32)],
        place: impl Fn(usize) -> usize,
    ) -> Option<FixedLanes> {
        let mut lanes = FixedLanes::zeros(n)?;
        for (k, &mk) in m.iter().enumerate() {
            lanes.set(place(k), mk)?;
        }
        Some(lanes)
    }

    /// `n` lanes of zeros, `None` when they cannot be allocated.
    pub(super) fn zeros(n: usize) -> Option<FixedLanes> {
        let zeros = || AlignedVec::try_zeroed(n).ok();
        Some(FixedLanes {
            q: zeros()?,
            left: zeros()?,
            right: zeros()?,
        })
    }

    /// Lane `at` takes multiplier `(q, shift)`; `None` when `at` is past the lanes.
    pub(super) fn set(&mut self, at: usize, (q, shift): (i32, i32)) -> Option<()> {
        *self.q.get_mut(at)? = q;
        self.left[at] = shift.clamp(0, 31);
        self.right[at] = (-shift).clamp(0, 31);
        Some(())
    }
}

#[inline(always)]
fn requantize_fixed_body(sums: &[i32], out: &mut [u8], p: FloatRequant, m: (i32, i32)) {
    let r = RequantRange {
        zero: p.zero,
        lo: p.lo,
        hi: p.hi,
    };
    for (o, &s) in out.iter_mut().zip(sums) {
        *o = requant_fixed_one(s, p.bias, m, r);
    }
}

crate::multiversion! {
    /// [`requantize_f32`] by the fixed-point rule instead ([`requant_fixed_one`]): the
    /// multiplier `m = (q, shift)` replaces `p.scale`, which is not read; `p`'s bias, zero
    /// point and range apply as there.
    pub fn requantize_fixed(sums: &[i32], out: &mut [u8], p: FloatRequant, m: (i32, i32)) => requantize_fixed_body;
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

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::quant::requantize;

    /// The fixed-point requantization gives backplane-core's rule (CpuRef's) on every sum:
    /// left and right shifts, ties on both signs, signed and unsigned outputs, activation
    /// ranges.
    #[test]
    fn requantize_fixed_equals_the_core_rule() {
        use backplane_core::quant::{quantize_multiplier, requantize_fixed_point};
        let mut sums: Vec<i32> = (-3000..3000).map(|i| i * 37 + (i % 7) * 1001).collect();
        // Ties of the high multiply and of the shift: multiples of powers of two.
        sums.extend((-64..64).map(|i| i << 20));
        sums.extend([i32::MAX / 2, i32::MIN / 2, 1 << 30, -(1 << 30)]);
        for (bias, m, zero, lo, hi) in [
            (0, quantize_multiplier(0.013), 0, -128, 127),
            (-517, quantize_multiplier(0.002_1), -7, -7, 127),
            (40, quantize_multiplier(0.031), 128, 128, 200),
            (3, quantize_multiplier(0.5), 5, -128, 127),
            (0, quantize_multiplier(0.25), 0, -128, 127),
            (1, quantize_multiplier(3.75), -3, -128, 127),
            (0, quantize_multiplier(300.0), 0, 0, 255),
            (9, (1 << 30, -40), 2, -128, 127),
        ] {
            let p = FloatRequant {
                bias,
                scale: 0.0,
                zero: zero as f32,
                lo: (lo - zero) as f32,
                hi: (hi - zero) as f32,
            };
            let mut out = vec![0u8; sums.len()];
            requantize_fixed(&sums, &mut out, p, m);
            let unsigned = lo >= 0;
            for (&s, &o) in sums.iter().zip(&out) {
                let exact = i64::from(s.wrapping_add(bias));
                let want = requantize_fixed_point(exact, m, zero, lo, hi);
                let got = if unsigned {
                    i32::from(o)
                } else {
                    i32::from(o as i8)
                };
                assert_eq!(got, want, "sum {s} bias {bias} multiplier {m:?}");
            }
        }
    }

    /// The vectorized requantization gives backplane-core's scalar rule (CpuRef's) on every
    /// sum, signed and unsigned outputs, with and without an activation's range.
    #[test]
    fn requantize_f32_equals_the_core_rule() {
        let sums: Vec<i32> = (-3000..3000).map(|i| i * 37 + (i % 7) * 1001).collect();
        for (bias, scale, zero, lo, hi) in [
            (0, 0.013_f32, 0, -128, 127),
            (-517, 0.002_1, -7, -7, 127),
            (40, 0.031, 128, 128, 200),
            (3, requant_scale(0.02, 0.003_3, 0.047), 5, -128, 127),
        ] {
            let p = FloatRequant {
                bias,
                scale,
                zero: zero as f32,
                lo: (lo - zero) as f32,
                hi: (hi - zero) as f32,
            };
            let mut out = vec![0u8; sums.len()];
            requantize_f32(&sums, &mut out, p);
            let unsigned = lo >= 0;
            for (&s, &o) in sums.iter().zip(&out) {
                let want = requantize(i64::from(s) + i64::from(bias), scale, zero, lo, hi);
                let got = if unsigned {
                    i32::from(o)
                } else {
                    i32::from(o as i8)
                };
                assert_eq!(got, want, "sum {s} bias {bias} scale {scale}");
            }
        }
    }
}

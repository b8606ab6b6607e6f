//! Channels-last (NHWC) pieces of the int8 layers: the per-pixel step of a depthwise
//! convolution (one tap over a pixel's channels), the centering of 8-bit pixels into the
//! 16-bit rows the integer GEMM reads, and the requantization of a pixel's sums with one
//! scale and bias per channel. Compiled per tier (the bodies vectorize over the channels).

/// The part of a requantization shared by every channel of a layer (see
/// [`requantize_channels`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequantRange {
    /// The output zero point.
    pub zero: f32,
    /// The lowest output less the zero point (the type's or the activation's bound).
    pub lo: f32,
    /// The highest output less the zero point.
    pub hi: f32,
}

/// Round half to even for |v| < 2²² (as `requant::round_even`).
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

#[inline(always)]
fn requantize_channels_body(
    sums: &[i32],
    out: &mut [u8],
    bias: &[i32],
    scale: &[f32],
    r: RequantRange,
) {
    for (((o, &s), &b), &m) in out.iter_mut().zip(sums).zip(bias).zip(scale) {
        let v = (s.wrapping_add(b) as f32 * m).max(r.lo).min(r.hi);
        *o = ((round_even(v) + r.zero) as i32) as u8;
    }
}

crate::multiversion! {
    /// Requantize one pixel's int32 sums (channel `c` at `sums[c]`) to 8-bit outputs:
    /// `clamp(round_half_even((sum + bias[c]) · scale[c]), lo, hi) + zero`, the same f32
    /// operations as [`super::requantize_f32`] does per channel, so both layouts give the
    /// same bytes.
    pub fn requantize_channels(
        sums: &[i32],
        out: &mut [u8],
        bias: &[i32],
        scale: &[f32],
        r: RequantRange,
    ) => requantize_channels_body;
}

#[inline(always)]
fn taps_i8_body(acc: &mut [i32], x: &[u8], w: &[i16], zero: i32) {
    for ((a, &v), &t) in acc.iter_mut().zip(x).zip(w) {
        *a += i32::from(t) * (i32::from(v as i8) - zero);
    }
}

#[inline(always)]
fn taps_u8_body(acc: &mut [i32], x: &[u8], w: &[i16], zero: i32) {
    for ((a, &v), &t) in acc.iter_mut().zip(x).zip(w) {
        *a += i32::from(t) * (i32::from(v) - zero);
    }
}

crate::multiversion! {
    /// `acc[c] += w[c] · (x[c] − zero)` for int8 `x`: one tap of a channels-last depthwise
    /// convolution at one output pixel.
    pub fn depthwise_tap_i8(acc: &mut [i32], x: &[u8], w: &[i16], zero: i32) => taps_i8_body;
}

crate::multiversion! {
    /// [`depthwise_tap_i8`] for uint8 `x`.
    pub fn depthwise_tap_u8(acc: &mut [i32], x: &[u8], w: &[i16], zero: i32) => taps_u8_body;
}

#[inline(always)]
fn center_i8_body(out: &mut [i16], x: &[u8], zero: i32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (i32::from(v as i8) - zero) as i16;
    }
}

#[inline(always)]
fn center_u8_body(out: &mut [i16], x: &[u8], zero: i32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (i32::from(v) - zero) as i16;
    }
}

crate::multiversion! {
    /// `out[i] = x[i] − zero` for int8 `x` (|result| ≤ 255 for an 8-bit zero point): a
    /// pixel's channels as a 16-bit GEMM row.
    pub fn center_i8(out: &mut [i16], x: &[u8], zero: i32) => center_i8_body;
}

crate::multiversion! {
    /// [`center_i8`] for uint8 `x`.
    pub fn center_u8(out: &mut [i16], x: &[u8], zero: i32) => center_u8_body;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn taps_and_centering_match_scalar_on_odd_lengths() {
        for n in [1usize, 2, 7, 8, 15, 16, 17, 31, 64, 97, 333] {
            let x = bytes(n, n as u32);
            let w: Vec<i16> = bytes(n, 7 + n as u32)
                .iter()
                .map(|&b| i16::from(b) - 128)
                .collect();
            for (signed, zero) in [(true, -3), (true, 127), (false, 0), (false, 200)] {
                let mut acc: Vec<i32> = (0..n as i32).collect();
                let mut c = vec![0i16; n];
                if signed {
                    depthwise_tap_i8(&mut acc, &x, &w, zero);
                    center_i8(&mut c, &x, zero);
                } else {
                    depthwise_tap_u8(&mut acc, &x, &w, zero);
                    center_u8(&mut c, &x, zero);
                }
                for i in 0..n {
                    let v = if signed {
                        i32::from(x[i] as i8)
                    } else {
                        i32::from(x[i])
                    } - zero;
                    assert_eq!(acc[i], i as i32 + i32::from(w[i]) * v, "n {n} at {i}");
                    assert_eq!(i32::from(c[i]), v, "n {n} at {i}");
                }
            }
        }
    }

    #[test]
    fn channel_requantization_equals_the_per_channel_rule() {
        for n in [1usize, 3, 8, 13, 16, 41, 100] {
            let sums: Vec<i32> = (0..n as i32).map(|i| (i * 7919) % 20011 - 10000).collect();
            let bias: Vec<i32> = (0..n as i32).map(|i| i * 13 - 50).collect();
            let scale: Vec<f32> = (0..n).map(|i| 0.001 + 0.0007 * i as f32).collect();
            let r = RequantRange {
                zero: -5.0,
                lo: -123.0,
                hi: 132.0,
            };
            let mut out = vec![0u8; n];
            requantize_channels(&sums, &mut out, &bias, &scale, r);
            for c in 0..n {
                let p = crate::qgemm::FloatRequant {
                    bias: bias[c],
                    scale: scale[c],
                    zero: r.zero,
                    lo: r.lo,
                    hi: r.hi,
                };
                let mut one = [0u8];
                crate::qgemm::requantize_f32(&sums[c..=c], &mut one, p);
                assert_eq!(out[c], one[0], "n {n} channel {c}");
            }
        }
    }
}

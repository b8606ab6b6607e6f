//! Channels-last (NHWC) pieces of the int8 layers: the centering of 8-bit values into the
//! 16-bit operands the integer GEMM reads, and the requantization of sums with one scale and
//! bias per channel (a test reference). Compiled per tier (the bodies vectorize over the
//! channels).

/// The part of a requantization shared by every channel of a layer (see
/// `requantize_channels`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequantRange {
    /// The output zero point.
    pub zero: f32,
    /// The lowest output less the zero point (the type's or the activation's bound).
    pub lo: f32,
    /// The highest output less the zero point.
    pub hi: f32,
}

#[cfg(test)]
#[inline(always)]
fn requantize_channels_body(
    sums: &[i32],
    out: &mut [u8],
    bias: &[i32],
    scale: &[f32],
    r: RequantRange,
) {
    let n = out.len().min(sums.len()).min(bias.len()).min(scale.len());
    let (out, sums, bias, scale) = (&mut out[..n], &sums[..n], &bias[..n], &scale[..n]);
    let zero = r.zero as i32;
    for i in 0..n {
        let v = (sums[i].wrapping_add(bias[i]) as f32 * scale[i])
            .max(r.lo)
            .min(r.hi);
        out[i] = (super::requant::rounded_int(v) + zero) as u8;
    }
}

#[cfg(test)]
crate::multiversion! {
    /// Test reference (the fused tiles compute this in registers):
    /// requantize int32 sums to 8-bit outputs, element by element (a pixel's channels, or
    /// a row of pixels with `bias` and `scale` repeated per pixel):
    /// `clamp(round_half_even((sum + bias[i]) · scale[i]), lo, hi) + zero`, the same f32
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
fn center_i8_body(out: &mut [i16], x: &[u8], zero: i32) {
    let n = out.len().min(x.len());
    let (out, x) = (&mut out[..n], &x[..n]);
    for i in 0..n {
        out[i] = (i32::from(x[i] as i8) - zero) as i16;
    }
}

#[inline(always)]
fn center_u8_body(out: &mut [i16], x: &[u8], zero: i32) {
    let n = out.len().min(x.len());
    let (out, x) = (&mut out[..n], &x[..n]);
    for i in 0..n {
        out[i] = (i32::from(x[i]) - zero) as i16;
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
    fn centering_matches_scalar_on_odd_lengths() {
        for n in [1usize, 2, 7, 8, 15, 16, 17, 31, 64, 97, 333] {
            let x = bytes(n, n as u32);
            for (signed, zero) in [(true, -3), (true, 127), (false, 0), (false, 200)] {
                let mut c = vec![0i16; n];
                if signed {
                    center_i8(&mut c, &x, zero);
                } else {
                    center_u8(&mut c, &x, zero);
                }
                for i in 0..n {
                    let v = if signed {
                        i32::from(x[i] as i8)
                    } else {
                        i32::from(x[i])
                    } - zero;
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

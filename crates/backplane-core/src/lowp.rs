//! The storage-only low-precision types: bit-level conversions of bfloat16 and the four ONNX
//! float8 formats, and the packing of 4-bit integers.
//!
//! Kernels never compute in these types; they convert to and from wider types here:
//!
//! * **Decoding** ([`MiniFloat::decode`]) is exact: every bf16 and float8 value is an f32.
//! * **Encoding** ([`MiniFloat::encode`]) rounds an f64 once, to nearest with ties to even, at
//!   the format's precision (subnormals included), then handles what falls outside the range
//!   as ONNX's Cast specifies: with `saturate`, finite overflow and infinities become the
//!   largest finite value of the same sign; without it, they become infinity where the format
//!   has one (E5M2, bf16) and NaN otherwise. bf16 has no saturating mode (it overflows to
//!   infinity like any IEEE type). NaN stays NaN; formats without negative zero ("FNUZ")
//!   give +0 for -0 and for negative values that round to zero. (Cast's table says an
//!   infinity becomes NaN in the FNUZ formats even when saturating; ONNX's reference and its
//!   test data saturate it to the largest value, and so does backplane.)
//! * **4-bit integers** are stored one per byte in tensors; ONNX packs two per byte, the first
//!   element in the low nibble ([`unpack_4bit`], [`pack_4bit`]).

use crate::DataType;

/// A small binary float format: bf16 or one of the float8 formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniFloat {
    /// bfloat16: 8 exponent bits (bias 127), 7 mantissa bits, IEEE infinities and NaNs.
    BF16,
    /// float8 E4M3FN: bias 7, no infinities, NaN `S.1111.111`, largest finite 448.
    E4M3Fn,
    /// float8 E4M3FNUZ: bias 8, no infinities, no -0, NaN `0x80`, largest finite 240.
    E4M3Fnuz,
    /// float8 E5M2: bias 15, IEEE infinities and NaNs, largest finite 57344.
    E5M2,
    /// float8 E5M2FNUZ: bias 16, no infinities, no -0, NaN `0x80`, largest finite 57344.
    E5M2Fnuz,
}

impl MiniFloat {
    /// The format of `dtype`, if it is bf16 or a float8 type.
    pub fn of(dtype: DataType) -> Option<MiniFloat> {
        Some(match dtype {
            DataType::BF16 => MiniFloat::BF16,
            DataType::F8E4M3Fn => MiniFloat::E4M3Fn,
            DataType::F8E4M3Fnuz => MiniFloat::E4M3Fnuz,
            DataType::F8E5M2 => MiniFloat::E5M2,
            DataType::F8E5M2Fnuz => MiniFloat::E5M2Fnuz,
            _ => return None,
        })
    }

    /// (exponent bits, mantissa bits, exponent bias).
    fn layout(self) -> (u32, u32, i32) {
        match self {
            MiniFloat::BF16 => (8, 7, 127),
            MiniFloat::E4M3Fn => (4, 3, 7),
            MiniFloat::E4M3Fnuz => (4, 3, 8),
            MiniFloat::E5M2 => (5, 2, 15),
            MiniFloat::E5M2Fnuz => (5, 2, 16),
        }
    }

    /// IEEE-style: an all-ones exponent means infinity (mantissa 0) or NaN.
    fn ieee(self) -> bool {
        matches!(self, MiniFloat::BF16 | MiniFloat::E5M2)
    }

    /// No negative zero and no infinities; `1000...0` is the only NaN.
    fn fnuz(self) -> bool {
        matches!(self, MiniFloat::E4M3Fnuz | MiniFloat::E5M2Fnuz)
    }

    fn sign_bit(self) -> u16 {
        let (e, m, _) = self.layout();
        1 << (e + m)
    }

    /// The bits of the largest finite value.
    pub fn max_bits(self) -> u16 {
        let (e, m, _) = self.layout();
        let all = (1u16 << (e + m)) - 1;
        match self {
            // The exponent below all ones, full mantissa.
            MiniFloat::BF16 | MiniFloat::E5M2 => all - (1 << m),
            // All ones is NaN.
            MiniFloat::E4M3Fn => all - 1,
            MiniFloat::E4M3Fnuz | MiniFloat::E5M2Fnuz => all,
        }
    }

    /// The largest finite value.
    pub fn max_value(self) -> f32 {
        self.decode(self.max_bits())
    }

    /// The canonical NaN (sign bit as given where the format has signed NaNs).
    fn nan_bits(self, negative: bool) -> u16 {
        let sign = if negative { self.sign_bit() } else { 0 };
        let (e, m, _) = self.layout();
        match self {
            MiniFloat::E4M3Fnuz | MiniFloat::E5M2Fnuz => self.sign_bit(),
            // Quiet NaN: all-ones exponent, top mantissa bit.
            MiniFloat::BF16 => sign | (((1 << e) - 1) << m) | (1 << (m - 1)),
            // E5M2 and E4M3FN: all ones.
            MiniFloat::E5M2 | MiniFloat::E4M3Fn => sign | ((1 << (e + m)) - 1),
        }
    }

    /// The value of `bits` (the low 8 bits for float8, 16 for bf16), exactly.
    pub fn decode(self, bits: u16) -> f32 {
        let (e_bits, m_bits, bias) = self.layout();
        // Keep the format's bits (all 16 for bf16).
        let bits = (u32::from(bits) & ((1u32 << (e_bits + m_bits + 1)) - 1)) as u16;
        let negative = bits & self.sign_bit() != 0;
        let exp = i32::from((bits >> m_bits) & ((1 << e_bits) - 1));
        let man = bits & ((1 << m_bits) - 1);
        let all_ones = (1 << e_bits) - 1;
        let magnitude = if self.fnuz() && bits == self.sign_bit() {
            f32::NAN
        } else if self.ieee() && exp == all_ones {
            if man == 0 {
                f32::INFINITY
            } else {
                f32::NAN
            }
        } else if self == MiniFloat::E4M3Fn && exp == all_ones && man == (1 << m_bits) - 1 {
            f32::NAN
        } else if exp == 0 {
            // Subnormal: man * 2^(1 - bias - m).
            f32::from(man) * pow2(1 - bias - m_bits as i32)
        } else {
            f32::from((1 << m_bits) | man) * pow2(exp - bias - m_bits as i32)
        };
        if negative && !magnitude.is_nan() {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The bits of `x` in this format: one rounding to nearest (ties to even), then overflow
    /// handled by `saturate` as the module documentation describes.
    pub fn encode(self, x: f64, saturate: bool) -> u16 {
        let negative = x.is_sign_negative();
        let sign = if negative { self.sign_bit() } else { 0 };
        if x.is_nan() {
            return self.nan_bits(negative);
        }
        let overflow = || {
            if saturate && self != MiniFloat::BF16 {
                sign | self.max_bits()
            } else if self.ieee() {
                // Infinity: all-ones exponent, zero mantissa.
                let (e, m, _) = self.layout();
                sign | (((1 << e) - 1) << m)
            } else {
                self.nan_bits(negative)
            }
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow();
        }
        let zero = if self.fnuz() { 0 } else { sign };
        let (_, m_bits, bias) = self.layout();
        let min_exp = 1 - bias;
        // Far below half the smallest subnormal of every format (2^-133 for bf16): zero.
        if a < f64::MIN_POSITIVE {
            return zero;
        }
        // The binary exponent of a normal f64.
        let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
        // The spacing of representable values around `a`.
        let quantum = e.max(min_exp) - m_bits as i32;
        let r = (a * pow2_f64(-quantum)).round_ties_even();
        if r * pow2_f64(quantum) > f64::from(self.max_value()) {
            return overflow();
        }
        if r == 0.0 {
            return zero;
        }
        // r < 2^(m + 1) + 1 here, so it fits in u16.
        let r = r as u16;
        let bits = if e < min_exp {
            // Subnormal; r = 2^m is the smallest normal number, which the same bits encode.
            r
        } else if r == 1 << (m_bits + 1) {
            // Rounded up to the next binade.
            ((e + 1 + bias) as u16) << m_bits
        } else {
            (((e + bias) as u16) << m_bits) | (r - (1 << m_bits))
        };
        sign | bits
    }
}

/// 2^k as an f32 for the exponents of these formats (-133 ..= 127); exact.
fn pow2(k: i32) -> f32 {
    pow2_f64(k) as f32
}

/// 2^k as an f64 for |k| ≤ 1022; exact.
fn pow2_f64(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// The value of one stored element of a float8 type (`bits` is its byte), or `None` when
/// `dtype` is not a float8 type.
pub fn float8_to_f32(dtype: DataType, bits: u8) -> Option<f32> {
    match MiniFloat::of(dtype) {
        Some(f) if f != MiniFloat::BF16 => Some(f.decode(u16::from(bits))),
        _ => None,
    }
}

/// The byte of `x` in a float8 type (see [`MiniFloat::encode`]), or `None` when `dtype` is not
/// a float8 type.
pub fn f64_to_float8(dtype: DataType, x: f64, saturate: bool) -> Option<u8> {
    match MiniFloat::of(dtype) {
        // float8 codes fit in the low byte.
        Some(f) if f != MiniFloat::BF16 => Some((f.encode(x, saturate) & 0xFF) as u8),
        _ => None,
    }
}

/// `x` as bf16, rounded once to nearest with ties to even (overflow becomes infinity).
pub fn f64_to_bf16(x: f64) -> half::bf16 {
    half::bf16::from_bits(MiniFloat::BF16.encode(x, false))
}

/// Unpack `count` 4-bit integers stored two per byte, the first in the low nibble, into one
/// byte each (sign-extended two's complement when `signed`). `None` when `packed` is shorter
/// than `count` needs.
pub fn unpack_4bit(packed: &[u8], count: usize, signed: bool) -> Option<Vec<u8>> {
    if packed.len() < count.div_ceil(2) {
        return None;
    }
    Some(
        (0..count)
            .map(|i| {
                let nibble = (packed[i / 2] >> (4 * (i % 2))) & 0x0F;
                if signed && nibble & 0x08 != 0 {
                    nibble | 0xF0
                } else {
                    nibble
                }
            })
            .collect(),
    )
}

/// Pack 4-bit integers stored one per byte (only the low nibble of each is kept) two per byte,
/// the first in the low nibble; an odd count leaves the last high nibble zero.
pub fn pack_4bit(values: &[u8]) -> Vec<u8> {
    values
        .chunks(2)
        .map(|pair| (pair[0] & 0x0F) | (pair.get(1).copied().unwrap_or(0) << 4))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const F8: [MiniFloat; 4] = [
        MiniFloat::E4M3Fn,
        MiniFloat::E4M3Fnuz,
        MiniFloat::E5M2,
        MiniFloat::E5M2Fnuz,
    ];

    fn enc(f: MiniFloat, x: f64) -> u16 {
        f.encode(x, true)
    }

    #[test]
    fn largest_finite_values() {
        assert_eq!(MiniFloat::E4M3Fn.max_value(), 448.0);
        assert_eq!(MiniFloat::E4M3Fnuz.max_value(), 240.0);
        assert_eq!(MiniFloat::E5M2.max_value(), 57344.0);
        assert_eq!(MiniFloat::E5M2Fnuz.max_value(), 57344.0);
        assert_eq!(MiniFloat::BF16.max_value(), half::bf16::MAX.to_f32());
        assert_eq!(MiniFloat::E4M3Fn.max_bits(), 0x7E);
        assert_eq!(MiniFloat::E5M2.max_bits(), 0x7B);
    }

    #[test]
    fn every_code_decodes_and_encodes_back() {
        for f in F8 {
            for b in 0u16..256 {
                let v = f.decode(b);
                if v.is_nan() {
                    assert!(f.decode(f.encode(f64::NAN, true)).is_nan());
                    continue;
                }
                if f.ieee() && v.is_infinite() {
                    assert_eq!(f.encode(f64::from(v), false), b, "{f:?} {b:#x}");
                    continue;
                }
                assert_eq!(f.encode(f64::from(v), true), b, "{f:?} {b:#x} = {v}");
                assert_eq!(f.encode(f64::from(v), false), b, "{f:?} {b:#x} = {v}");
            }
        }
    }

    #[test]
    fn nan_codes() {
        assert!(MiniFloat::E4M3Fn.decode(0x7F).is_nan());
        assert!(MiniFloat::E4M3Fn.decode(0xFF).is_nan());
        assert_eq!(MiniFloat::E4M3Fn.decode(0x7E), 448.0);
        assert!(MiniFloat::E4M3Fnuz.decode(0x80).is_nan());
        assert!(MiniFloat::E5M2Fnuz.decode(0x80).is_nan());
        assert!(MiniFloat::E5M2.decode(0x7E).is_nan());
        assert_eq!(MiniFloat::E5M2.decode(0x7C), f32::INFINITY);
        assert_eq!(MiniFloat::E5M2.decode(0xFC), f32::NEG_INFINITY);
        assert_eq!(enc(MiniFloat::E4M3Fnuz, f64::NAN), 0x80);
        assert_eq!(enc(MiniFloat::E4M3Fn, f64::NAN), 0x7F);
        assert_eq!(enc(MiniFloat::E5M2, -f64::NAN), 0xFF);
    }

    #[test]
    fn overflow_with_and_without_saturation() {
        let inf = f64::INFINITY;
        // Saturated: the largest finite value of the same sign.
        assert_eq!(MiniFloat::E4M3Fn.encode(1e6, true), 0x7E);
        assert_eq!(MiniFloat::E4M3Fn.encode(-1e6, true), 0xFE);
        assert_eq!(MiniFloat::E4M3Fn.encode(inf, true), 0x7E);
        assert_eq!(MiniFloat::E4M3Fnuz.encode(-inf, true), 0xFF);
        assert_eq!(MiniFloat::E5M2.encode(inf, true), 0x7B);
        assert_eq!(MiniFloat::E5M2Fnuz.encode(1e9, true), 0x7F);
        // Not saturated: infinity for E5M2, NaN for the others.
        assert_eq!(MiniFloat::E4M3Fn.encode(1e6, false), 0x7F);
        assert_eq!(MiniFloat::E4M3Fn.encode(-inf, false), 0xFF);
        assert_eq!(MiniFloat::E4M3Fnuz.encode(1e6, false), 0x80);
        assert_eq!(MiniFloat::E5M2.encode(1e6, false), 0x7C);
        assert_eq!(MiniFloat::E5M2.encode(-inf, false), 0xFC);
        assert_eq!(MiniFloat::E5M2Fnuz.encode(-1e6, false), 0x80);
        // bf16 overflows to infinity.
        assert_eq!(f64_to_bf16(1e39).to_f32(), f32::INFINITY);
    }

    #[test]
    fn rounding_near_the_largest_value() {
        let f = MiniFloat::E4M3Fn;
        // 448 and 480 (not representable: NaN's code) are neighbours; 464 is the tie and
        // goes to the even mantissa, 448.
        assert_eq!(f.encode(460.0, false), 0x7E);
        assert_eq!(f.encode(464.0, false), 0x7E);
        assert_eq!(f.encode(465.0, false), 0x7F);
        assert_eq!(f.encode(465.0, true), 0x7E);
        // E5M2: 57344 = 1.75 * 2^15; the next step would be 65536, the tie 61440 goes to even
        // (65536, mantissa 0 of the next binade): overflow.
        assert_eq!(MiniFloat::E5M2.encode(61439.0, false), 0x7B);
        assert_eq!(MiniFloat::E5M2.encode(61440.0, false), 0x7C);
    }

    #[test]
    fn ties_go_to_even() {
        let f = MiniFloat::E4M3Fn;
        // 1.0625 is halfway between 1 (mantissa 0) and 1.125 (mantissa 1): 1.
        assert_eq!(f.decode(f.encode(1.0625, true)), 1.0);
        // 1.1875 is halfway between 1.125 and 1.25 (mantissa 2): 1.25.
        assert_eq!(f.decode(f.encode(1.1875, true)), 1.25);
        assert_eq!(f.decode(f.encode(1.19, true)), 1.25);
        // bf16: 1 + 2^-8 is the tie between 1 and 1 + 2^-7.
        assert_eq!(f64_to_bf16(1.0 + 1.0 / 256.0).to_f32(), 1.0);
        assert_eq!(f64_to_bf16(1.0 + 3.0 / 256.0).to_f32(), 1.0 + 4.0 / 256.0);
        // Rounding carries into the next binade: 1.96875 → 2 in E4M3.
        assert_eq!(f.decode(f.encode(1.96875, true)), 2.0);
    }

    #[test]
    fn subnormals_and_zeros() {
        let f = MiniFloat::E4M3Fn;
        // Smallest subnormal 2^-9; half of it is a tie to 0, a bit more goes up.
        assert_eq!(f.decode(1), 2f32.powi(-9));
        assert_eq!(f.encode(2f64.powi(-10), true), 0);
        assert_eq!(f.encode(2f64.powi(-10) * 1.01, true), 1);
        assert_eq!(f.encode(3.0 * 2f64.powi(-10), true), 2);
        // The largest subnormal rounds up into the smallest normal.
        assert_eq!(f.encode(7.9 * 2f64.powi(-9), true), 0x08);
        assert_eq!(f.decode(0x08), 2f32.powi(-6));
        // -0 keeps its sign where the format has one.
        assert_eq!(f.encode(-0.0, true), 0x80);
        assert_eq!(MiniFloat::E5M2.encode(-0.0, true), 0x80);
        assert_eq!(MiniFloat::E4M3Fnuz.encode(-0.0, true), 0);
        assert_eq!(MiniFloat::E5M2Fnuz.encode(-1e-30, true), 0);
        assert_eq!(MiniFloat::E4M3Fnuz.decode(1), 2f32.powi(-10));
        assert_eq!(MiniFloat::E5M2.decode(1), 2f32.powi(-16));
        assert_eq!(MiniFloat::E5M2Fnuz.decode(1), 2f32.powi(-17));
        // bf16 subnormal.
        let tiny = 2f64.powi(-133);
        assert_eq!(f64_to_bf16(tiny).to_bits(), 1);
        assert_eq!(f64_to_bf16(-tiny / 2.0).to_bits(), 0x8000);
    }

    #[test]
    fn bf16_matches_halfs_rounding() {
        let mut s = 0x1234_5678u32;
        for _ in 0..10_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let x = f32::from_bits(s);
            let ours = f64_to_bf16(f64::from(x));
            if x.is_nan() {
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), half::bf16::from_f32(x).to_bits(), "{x:e}");
            }
        }
    }

    #[test]
    fn type_level_helpers() {
        assert_eq!(float8_to_f32(DataType::F8E5M2, 0x3C), Some(1.0));
        assert_eq!(float8_to_f32(DataType::BF16, 0x3C), None);
        assert_eq!(f64_to_float8(DataType::F8E4M3Fn, 1.0, true), Some(0x38));
        assert_eq!(f64_to_float8(DataType::U8, 1.0, true), None);
    }

    #[test]
    fn four_bit_packing() {
        // -1, 7, -8, 3, 5 → low nibble first, odd count padded with zero.
        let values = [0xFFu8, 7, 0xF8, 3, 5];
        let packed = pack_4bit(&values);
        assert_eq!(packed, vec![0x7F, 0x38, 0x05]);
        assert_eq!(unpack_4bit(&packed, 5, true).unwrap(), values.to_vec());
        assert_eq!(
            unpack_4bit(&packed, 5, false).unwrap(),
            vec![15, 7, 8, 3, 5]
        );
        assert!(unpack_4bit(&packed, 7, false).is_none());
        assert_eq!(unpack_4bit(&[], 0, true).unwrap(), Vec::<u8>::new());
    }
}

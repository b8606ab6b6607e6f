//! Scalar rules every backend shares, stated once: how an element is widened and narrowed by
//! Cast ([`Scalar`]), and the formulas of the math functions computed in f64
//! ([`math_f64`]). A backend that computes one of these differently (a vectorized
//! approximation) does so on purpose and says so; one that must agree with the reference bit
//! for bit calls these.
//!
//! Cast's rules: each element is first widened without loss (floats to f64, integers to i64,
//! bool as is), then converted to the target type with one rounding step:
//!
//! * float → float: round to nearest even (f16 overflow becomes ±inf);
//! * float → integer: truncate toward zero, saturating at the type's range, NaN → 0 (ONNX
//!   leaves out-of-range values undefined; saturation is the defined behaviour chosen here);
//! * integer → integer: two's-complement wrap-around (as C's and numpy's casts);
//! * integer → float: round to nearest even;
//! * anything → bool: `x != 0` (so NaN → true); bool → anything: 0 or 1;
//! * bf16 and float8 results round once to nearest even from the widened value; float8
//!   results follow Cast's `saturate` (see [`crate::lowp`]);
//! * int4 / uint4 results round to nearest even (floats) and saturate to -8..=7 / 0..=15
//!   (integers are clamped, not wrapped), as ONNX's reference does.

use crate::erf::{erf, erfc};
use crate::lowp::{f64_to_bf16, f64_to_float8};

/// sqrt(2 / pi), for the tanh approximation of Gelu.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
use crate::ops::{MathOp, UnaryOp};
use crate::DataType;
use half::f16;

/// One element, widened losslessly from its storage type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// From a float type.
    Float(f64),
    /// From any integer type.
    Int(i64),
    /// From bool.
    Bool(bool),
}

impl Scalar {
    /// As f64 (integers beyond 2^53 round to nearest).
    #[inline]
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Float(f) => f,
            Scalar::Int(i) => i as f64,
            Scalar::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// As f32, rounded once to nearest even.
    #[inline]
    pub fn to_f32(self) -> f32 {
        match self {
            // Exact for values that came from f32/f16; rounds to nearest for f64 results.
            Scalar::Float(f) => f as f32,
            // Rust's int → float conversion rounds to nearest even in one step.
            Scalar::Int(i) => i as f32,
            Scalar::Bool(b) => f32::from(u8::from(b)),
        }
    }

    /// As f16, rounded once to nearest even (overflow to ±inf).
    #[inline]
    pub fn to_f16(self) -> f16 {
        // Via f64: exact for every source except |i| > 2^53, which overflows f16 anyway.
        f16::from_f64(self.to_f64())
    }

    /// As bf16, rounded once to nearest even.
    #[inline]
    pub fn to_bf16(self) -> half::bf16 {
        f64_to_bf16(self.to_f64())
    }

    /// As i64: floats truncate toward zero and saturate (NaN → 0).
    #[inline]
    pub fn to_i64(self) -> i64 {
        match self {
            // `as` truncates toward zero, saturates, and maps NaN to 0.
            Scalar::Float(f) => f as i64,
            Scalar::Int(i) => i,
            Scalar::Bool(b) => i64::from(b),
        }
    }

    /// A 4-bit value in `lo..=hi` (rounded to nearest even, saturated; NaN → 0).
    #[inline]
    pub fn to_4bit(self, lo: i64, hi: i64) -> i64 {
        match self {
            Scalar::Float(f) if f.is_nan() => 0,
            Scalar::Float(f) => f.round_ties_even().clamp(lo as f64, hi as f64) as i64,
            other => other.to_i64().clamp(lo, hi),
        }
    }

    /// The stored byte of a float8 `dtype` (`saturate`: Cast's attribute).
    #[inline]
    pub fn to_float8(self, dtype: DataType, saturate: bool) -> u8 {
        f64_to_float8(dtype, self.to_f64(), saturate).unwrap_or(0)
    }

    /// The stored byte of `self` in a one-byte low-precision type (float8, int4, uint4).
    #[inline]
    pub fn to_low_byte(self, dtype: DataType, saturate: bool) -> u8 {
        match dtype {
            // Two's complement in the byte (an i8 view reads it back).
            DataType::I4 => (self.to_4bit(-8, 7) as i8) as u8,
            DataType::U4 => self.to_4bit(0, 15) as u8,
            _ => self.to_float8(dtype, saturate),
        }
    }

    /// As bool: `x != 0` (NaN is true).
    #[inline]
    pub fn to_bool(self) -> bool {
        match self {
            Scalar::Float(f) => f != 0.0,
            Scalar::Int(i) => i != 0,
            Scalar::Bool(b) => b,
        }
    }

    /// The little-endian bytes of one element of `dtype` holding `self` (float8 results
    /// saturate), e.g. Pad's fill value.
    pub fn to_le_bytes(self, dtype: DataType) -> Vec<u8> {
        match dtype {
            DataType::F32 => self.to_f32().to_le_bytes().to_vec(),
            DataType::F16 => self.to_f16().to_le_bytes().to_vec(),
            DataType::F64 => self.to_f64().to_le_bytes().to_vec(),
            DataType::I8 => self.to_i8().to_le_bytes().to_vec(),
            DataType::U8 => self.to_u8().to_le_bytes().to_vec(),
            DataType::I32 => self.to_i32().to_le_bytes().to_vec(),
            DataType::I64 => self.to_i64().to_le_bytes().to_vec(),
            DataType::I16 => self.to_i16().to_le_bytes().to_vec(),
            DataType::U16 => self.to_u16().to_le_bytes().to_vec(),
            DataType::U32 => self.to_u32().to_le_bytes().to_vec(),
            DataType::U64 => self.to_u64().to_le_bytes().to_vec(),
            DataType::Bool => vec![u8::from(self.to_bool())],
            DataType::BF16 => self.to_bf16().to_le_bytes().to_vec(),
            DataType::I4
            | DataType::U4
            | DataType::F8E4M3Fn
            | DataType::F8E4M3Fnuz
            | DataType::F8E5M2
            | DataType::F8E5M2Fnuz => vec![self.to_low_byte(dtype, true)],
        }
    }
}

/// Defines the narrowing conversions: floats truncate and saturate, integers wrap.
macro_rules! to_integer {
    ($name:ident, $t:ty) => {
        impl Scalar {
            #[doc = concat!("As ", stringify!($t), ": floats truncate toward zero and saturate ")]
            #[doc = "(NaN → 0), integers wrap."]
            #[inline]
            pub fn $name(self) -> $t {
                match self {
                    Scalar::Float(f) => f as $t,
                    other => other.to_i64() as $t,
                }
            }
        }
    };
}
to_integer!(to_i8, i8);
to_integer!(to_u8, u8);
to_integer!(to_i16, i16);
to_integer!(to_u16, u16);
to_integer!(to_i32, i32);
to_integer!(to_u32, u32);
to_integer!(to_u64, u64);

/// The reference formula of a float [`MathOp`] on `x`, in f64 (callers round once to their
/// type). `IsNaN`, `IsInf`, `Not` and `BitwiseNot` have bool or integer results and are not
/// float functions: they return `x` unchanged.
#[inline]
pub fn math_f64(op: MathOp, x: f64) -> f64 {
    match op {
        MathOp::Floor => x.floor(),
        MathOp::Ceil => x.ceil(),
        MathOp::Round => x.round_ties_even(),
        MathOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        MathOp::Reciprocal => 1.0 / x,
        MathOp::Sin => x.sin(),
        MathOp::Cos => x.cos(),
        MathOp::Tan => x.tan(),
        MathOp::Asin => x.asin(),
        MathOp::Acos => x.acos(),
        MathOp::Atan => x.atan(),
        MathOp::Sinh => x.sinh(),
        MathOp::Cosh => x.cosh(),
        MathOp::Asinh => x.asinh(),
        MathOp::Acosh => x.acosh(),
        MathOp::Atanh => x.atanh(),
        MathOp::Softplus => softplus(x),
        MathOp::Softsign => x / (1.0 + x.abs()),
        MathOp::Mish => x * softplus(x).tanh(),
        MathOp::HardSigmoid { alpha, beta } => {
            (f64::from(alpha) * x + f64::from(beta)).clamp(0.0, 1.0)
        }
        MathOp::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        MathOp::Selu { alpha, gamma } => {
            let g = f64::from(gamma);
            if x > 0.0 {
                g * x
            } else {
                g * f64::from(alpha) * x.exp_m1()
            }
        }
        MathOp::Elu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                f64::from(alpha) * x.exp_m1()
            }
        }
        MathOp::Celu { alpha } => {
            let a = f64::from(alpha);
            x.max(0.0) + (a * (x / a).exp_m1()).min(0.0)
        }
        MathOp::ThresholdedRelu { alpha } => {
            if x > f64::from(alpha) {
                x
            } else {
                0.0
            }
        }
        MathOp::Shrink { bias, lambd } => {
            let (b, l) = (f64::from(bias), f64::from(lambd));
            if x < -l {
                x + b
            } else if x > l {
                x - b
            } else {
                0.0
            }
        }
        // Bool or integer results: computed on scalars by the backends.
        MathOp::IsNaN | MathOp::IsInf { .. } | MathOp::Not | MathOp::BitwiseNot => x,
    }
}

/// ln(1 + e^x) without overflow for large x.
#[inline]
fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The reference formula of a float [`UnaryOp`] on `x`, in f64; the caller rounds the result
/// once to its type (CpuRef's unary layers, CpuAcc's byte tables). (For the exact operations this gives the correctly rounded result; for
/// LeakyRelu the product of an f32 alpha and x is exact in f64.)
pub fn unary_f64(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Relu => {
            // Written so that NaN stays NaN.
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryOp::LeakyRelu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                f64::from(alpha) * x
            }
        }
        UnaryOp::Clip { min, max } => {
            // min(max(x, min), max), literally: NaN stays NaN, and min > max gives max.
            let lower = if x < f64::from(min) { min.into() } else { x };
            if lower > f64::from(max) {
                max.into()
            } else {
                lower
            }
        }
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Erf => erf(x),
        UnaryOp::Gelu {
            tanh_approximation: false,
        } => {
            // x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, accurate in both tails.
            0.5 * x * erfc(-x / std::f64::consts::SQRT_2)
        }
        UnaryOp::Gelu {
            tanh_approximation: true,
        } => 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh()),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_saturates_floats_and_wraps_integers() {
        assert_eq!(Scalar::Float(300.7).to_u8(), 255);
        assert_eq!(Scalar::Float(f64::NAN).to_i32(), 0);
        assert_eq!(Scalar::Int(300).to_u8(), 44);
        assert_eq!(Scalar::Int(-1).to_u16(), u16::MAX);
        assert_eq!(Scalar::Float(2.5).to_4bit(-8, 7), 2);
        assert_eq!(Scalar::Int(300).to_4bit(0, 15), 15);
        assert!(Scalar::Float(f64::NAN).to_bool());
        assert_eq!(Scalar::Bool(true).to_le_bytes(DataType::I16), vec![1, 0]);
        assert_eq!(Scalar::Float(-1.0).to_le_bytes(DataType::I4), vec![0xFF]);
    }

    #[test]
    fn math_formulas() {
        assert_eq!(math_f64(MathOp::Sign, -0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(math_f64(MathOp::Round, 2.5), 2.0);
        assert_eq!(math_f64(MathOp::Softplus, 100.0), 100.0);
        assert_eq!(
            math_f64(
                MathOp::Shrink {
                    bias: 1.0,
                    lambd: 0.5
                },
                -2.0
            ),
            -1.0
        );
        assert!(math_f64(MathOp::IsNaN, f64::NAN).is_nan());
    }
}

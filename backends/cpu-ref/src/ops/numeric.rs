//! The element arithmetic behind the dtype-generic elementwise kernels.
//!
//! Floats follow IEEE (NaN propagates through Max/Min, as in numpy). f16 arithmetic is done in
//! f64 and rounded once, which gives the correctly rounded f16 result for +, -, * and / (f64
//! has more than twice f16's precision, so the double rounding is harmless). Integers wrap on
//! overflow (two's complement, as numpy and onnxruntime do), integer division truncates toward
//! zero, and integer division by zero is an error instead of a crash.

use backplane_core::dtype::Element;
use half::f16;

/// Arithmetic on one element type.
pub(crate) trait Arithmetic: Element + PartialOrd {
    /// a + b.
    fn add(self, rhs: Self) -> Self;
    /// a - b.
    fn sub(self, rhs: Self) -> Self;
    /// a * b.
    fn mul(self, rhs: Self) -> Self;
    /// a / b; integer division by zero is an error.
    fn div(self, rhs: Self) -> Result<Self, String>;
    /// max(a, b).
    fn maximum(self, rhs: Self) -> Self;
    /// min(a, b).
    fn minimum(self, rhs: Self) -> Self;
    /// -a.
    fn neg(self) -> Self;
    /// |a|.
    fn abs(self) -> Self;
    /// max(a, 0).
    fn relu(self) -> Self;
    /// The value as f64 (exact except for i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// The value of this type nearest to `v`; integers truncate toward zero and saturate.
    fn from_f64(v: f64) -> Self;
}

/// IEEE arithmetic on a native float type (f32, f64).
macro_rules! float_arithmetic {
    ($t:ty) => {
        impl Arithmetic for $t {
            fn add(self, rhs: Self) -> Self {
                self + rhs
            }
            fn sub(self, rhs: Self) -> Self {
                self - rhs
            }
            fn mul(self, rhs: Self) -> Self {
                self * rhs
            }
            fn div(self, rhs: Self) -> Result<Self, String> {
                Ok(self / rhs)
            }
            fn maximum(self, rhs: Self) -> Self {
                if self.is_nan() || rhs.is_nan() {
                    <$t>::NAN
                } else if self >= rhs {
                    self
                } else {
                    rhs
                }
            }
            fn minimum(self, rhs: Self) -> Self {
                if self.is_nan() || rhs.is_nan() {
                    <$t>::NAN
                } else if self <= rhs {
                    self
                } else {
                    rhs
                }
            }
            fn neg(self) -> Self {
                -self
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn relu(self) -> Self {
                // Written so that NaN stays NaN.
                if self < 0.0 {
                    0.0
                } else {
                    self
                }
            }
            fn to_f64(self) -> f64 {
                self.into()
            }
            #[allow(clippy::unnecessary_cast)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
float_arithmetic!(f32);
float_arithmetic!(f64);

impl Arithmetic for f16 {
    fn add(self, rhs: Self) -> Self {
        f16::from_f64(self.to_f64() + rhs.to_f64())
    }
    fn sub(self, rhs: Self) -> Self {
        f16::from_f64(self.to_f64() - rhs.to_f64())
    }
    fn mul(self, rhs: Self) -> Self {
        f16::from_f64(self.to_f64() * rhs.to_f64())
    }
    fn div(self, rhs: Self) -> Result<Self, String> {
        Ok(f16::from_f64(self.to_f64() / rhs.to_f64()))
    }
    fn maximum(self, rhs: Self) -> Self {
        if self.is_nan() || rhs.is_nan() {
            f16::NAN
        } else if self >= rhs {
            self
        } else {
            rhs
        }
    }
    fn minimum(self, rhs: Self) -> Self {
        if self.is_nan() || rhs.is_nan() {
            f16::NAN
        } else if self <= rhs {
            self
        } else {
            rhs
        }
    }
    fn neg(self) -> Self {
        -self
    }
    fn abs(self) -> Self {
        f16::from_bits(self.to_bits() & 0x7fff)
    }
    fn relu(self) -> Self {
        if self < f16::ZERO {
            f16::ZERO
        } else {
            self
        }
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

/// Implements [`Arithmetic`] for integer types; `$abs` and `$neg` differ for unsigned types.
macro_rules! integer_arithmetic {
    ($t:ty, $abs:expr, $neg:expr) => {
        impl Arithmetic for $t {
            fn add(self, rhs: Self) -> Self {
                self.wrapping_add(rhs)
            }
            fn sub(self, rhs: Self) -> Self {
                self.wrapping_sub(rhs)
            }
            fn mul(self, rhs: Self) -> Self {
                self.wrapping_mul(rhs)
            }
            fn div(self, rhs: Self) -> Result<Self, String> {
                if rhs == 0 {
                    Err(format!("integer division by zero ({self} / 0)"))
                } else {
                    // Truncates toward zero; MIN / -1 wraps to MIN.
                    Ok(self.wrapping_div(rhs))
                }
            }
            fn maximum(self, rhs: Self) -> Self {
                Ord::max(self, rhs)
            }
            fn minimum(self, rhs: Self) -> Self {
                Ord::min(self, rhs)
            }
            fn neg(self) -> Self {
                let f: fn($t) -> $t = $neg;
                f(self)
            }
            fn abs(self) -> Self {
                let f: fn($t) -> $t = $abs;
                f(self)
            }
            fn relu(self) -> Self {
                Ord::max(self, 0)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                // `as` truncates toward zero, saturates and maps NaN to 0.
                v as $t
            }
        }
    };
}

integer_arithmetic!(i8, i8::wrapping_abs, i8::wrapping_neg);
integer_arithmetic!(i32, i32::wrapping_abs, i32::wrapping_neg);
integer_arithmetic!(i64, i64::wrapping_abs, i64::wrapping_neg);
integer_arithmetic!(u8, |x| x, u8::wrapping_neg);
integer_arithmetic!(i16, i16::wrapping_abs, i16::wrapping_neg);
integer_arithmetic!(u16, |x| x, u16::wrapping_neg);
integer_arithmetic!(u32, |x| x, u32::wrapping_neg);
integer_arithmetic!(u64, |x| x, u64::wrapping_neg);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn integers_wrap_truncate_and_refuse_division_by_zero() {
        assert_eq!(Arithmetic::add(i8::MAX, 1), i8::MIN);
        assert_eq!(Arithmetic::sub(0u8, 1), 255);
        assert_eq!(Arithmetic::mul(i32::MAX, 2), -2);
        // -7 / 2 = -3.5, truncated toward zero: -3 (not floor's -4).
        assert_eq!(Arithmetic::div(-7i64, 2), Ok(-3));
        assert_eq!(Arithmetic::div(7i32, -2), Ok(-3));
        assert!(Arithmetic::div(1i32, 0).is_err());
        assert_eq!(Arithmetic::div(i32::MIN, -1), Ok(i32::MIN));
        assert_eq!(Arithmetic::abs(i8::MIN), i8::MIN);
        assert_eq!(Arithmetic::neg(5i64), -5);
        assert_eq!(Arithmetic::relu(-3i32), 0);
        assert_eq!(Arithmetic::relu(200u8), 200);
    }

    #[test]
    fn float_max_min_propagate_nan() {
        assert!(Arithmetic::maximum(f32::NAN, 1.0).is_nan());
        assert!(Arithmetic::minimum(1.0, f32::NAN).is_nan());
        assert_eq!(Arithmetic::maximum(-1.0f32, 2.0), 2.0);
        assert_eq!(Arithmetic::minimum(-1.0f32, 2.0), -1.0);
        assert!(Arithmetic::relu(f32::NAN).is_nan());
        assert_eq!(Arithmetic::div(1.0f32, 0.0), Ok(f32::INFINITY));
    }

    #[test]
    fn f16_rounds_once_to_nearest_even() {
        let h = f16::from_f32;
        // 2048 + 1 is a tie between 2048 and 2050: even mantissa wins.
        assert_eq!(Arithmetic::add(h(2048.0), h(1.0)), h(2048.0));
        assert_eq!(Arithmetic::add(h(2050.0), h(1.0)), h(2052.0));
        // 1/3 rounds to the nearest f16, 0.33325195.
        assert_eq!(
            Arithmetic::div(h(1.0), h(3.0)).unwrap().to_f32(),
            0.333_251_95
        );
        // Overflow becomes infinity.
        assert_eq!(Arithmetic::mul(h(300.0), h(300.0)), f16::INFINITY);
        assert_eq!(Arithmetic::abs(h(-0.5)), h(0.5));
        assert!(Arithmetic::maximum(f16::NAN, h(1.0)).is_nan());
        assert_eq!(Arithmetic::relu(h(-1.0)), f16::ZERO);
    }
}

#[cfg(test)]
mod f64_tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval1, tensor};
    use backplane_core::ops::{BinaryOp, ReduceDesc, ReduceKind, UnaryOp};
    use backplane_core::{DataType, Op};

    #[test]
    fn f64_keeps_double_precision_through_kernels() {
        // 1 + 2^-40 is not representable in f32: an f32 path would lose the difference.
        let tiny = 2f64.powi(-40);
        let a = tensor(DataType::F64, &[2], &[1.0 + tiny, -3.0]);
        let b = tensor(DataType::F64, &[2], &[1.0, 0.5]);
        let sub = eval1(&Op::Binary(BinaryOp::Sub), &[&a, &b]);
        assert_eq!(sub.dtype(), DataType::F64);
        assert_eq!(sub.as_slice::<f64>().unwrap(), &[tiny, -3.5]);
        let max = eval1(&Op::Binary(BinaryOp::Max), &[&a, &b]);
        assert_eq!(max.as_slice::<f64>().unwrap(), &[1.0 + tiny, 0.5]);
        let abs = eval1(&Op::Unary(UnaryOp::Abs), &[&a]);
        assert_eq!(abs.as_slice::<f64>().unwrap(), &[1.0 + tiny, 3.0]);
        let sum = Op::Reduce(ReduceDesc {
            kind: ReduceKind::Sum,
            axes: vec![],
            keepdims: false,
            noop_with_empty_axes: false,
        });
        let s = eval1(&sum, &[&a]);
        assert_eq!(s.as_slice::<f64>().unwrap(), &[-2.0 + tiny]);
        let cast = eval1(
            &Op::Cast {
                to: DataType::F32,
                saturate: true,
            },
            &[&a],
        );
        assert_eq!(cast.as_slice::<f32>().unwrap(), &[1.0, -3.0]);
    }

    #[test]
    fn sixteen_bit_and_wide_unsigned_integers() {
        use backplane_core::ops::BinaryExtOp;
        use backplane_core::Tensor;
        // i16 arithmetic wraps.
        let a = Tensor::from_vec(vec![2], vec![i16::MAX, -5i16]).unwrap();
        let b = Tensor::from_vec(vec![2], vec![1i16, 2]).unwrap();
        let y = eval1(&Op::Binary(BinaryOp::Add), &[&a, &b]);
        assert_eq!(y.as_slice::<i16>().unwrap(), &[i16::MIN, -3]);
        // u64 compares as unsigned, even above i64::MAX.
        let a = Tensor::from_vec(vec![2], vec![u64::MAX, 1u64]).unwrap();
        let b = Tensor::from_vec(vec![2], vec![7u64, 9]).unwrap();
        let y = eval1(&Op::Binary(BinaryOp::Max), &[&a, &b]);
        assert_eq!(y.as_slice::<u64>().unwrap(), &[u64::MAX, 9]);
        // Right shifts are logical; left shifts drop the bits beyond the type.
        let by = Tensor::from_vec(vec![2], vec![63u64, 1]).unwrap();
        let y = eval1(&Op::BinaryExt(BinaryExtOp::BitShiftRight), &[&a, &by]);
        assert_eq!(y.as_slice::<u64>().unwrap(), &[1, 0]);
        let x = Tensor::from_vec(vec![1], vec![0x8001u16]).unwrap();
        let by = Tensor::from_vec(vec![1], vec![1u16]).unwrap();
        let y = eval1(&Op::BinaryExt(BinaryExtOp::BitShiftLeft), &[&x, &by]);
        assert_eq!(y.as_slice::<u16>().unwrap(), &[2]);
    }
}

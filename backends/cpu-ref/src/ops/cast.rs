//! Cast between every pair of data types, through a lossless intermediate [`Scalar`].
//!
//! Each element is first widened without loss (f32/f16 to f64, integers to i64, bool as is),
//! then converted to the target type with one rounding step:
//!
//! * float → float: round to nearest even (f16 overflow becomes ±inf);
//! * float → integer: truncate toward zero, saturating at the type's range, NaN → 0 (ONNX leaves
//!   out-of-range values undefined; saturation is the defined behaviour chosen here);
//! * integer → integer: two's-complement wrap-around (as C's and numpy's casts);
//! * integer → float: round to nearest even;
//! * anything → bool: `x != 0` (so NaN → true); bool → anything: 0 or 1.
//!
//! The storage-only low-precision types (see `backplane_core::lowp`):
//!
//! * bf16 and float8 read exactly as floats; writing rounds once to nearest even from the
//!   widened value (integers beyond 2^53 round twice); float8 results follow Cast's
//!   `saturate` (by default, out-of-range values and infinities become the largest finite
//!   value; without it, infinity for E5M2 and NaN for the others).
//! * int4 / uint4 read as integers; writing *any* value to them rounds to nearest even (floats)
//!   and saturates to -8..=7 / 0..=15, as ONNX's reference and test data do (integers are
//!   clamped, not wrapped).

use crate::Result;
use backplane_core::lowp::{f64_to_bf16, f64_to_float8, float8_to_f32};
use backplane_core::{DataType, TensorView, TensorViewMut};
use half::f16;

/// One element, widened losslessly from its storage type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    /// From f32, f16 or f64.
    Float(f64),
    /// From any integer type.
    Int(i64),
    /// From bool.
    Bool(bool),
}

impl Scalar {
    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Scalar::Float(f) => f,
            Scalar::Int(i) => i as f64,
            Scalar::Bool(b) => f64::from(u8::from(b)),
        }
    }

    fn to_f32(self) -> f32 {
        match self {
            // Exact for values that came from f32/f16; rounds to nearest for f64 results.
            Scalar::Float(f) => f as f32,
            // Rust's int → float conversion rounds to nearest even in one step.
            Scalar::Int(i) => i as f32,
            Scalar::Bool(b) => f32::from(u8::from(b)),
        }
    }

    fn to_f16(self) -> f16 {
        // Via f64: exact for every source except |i| > 2^53, which overflows f16 anyway.
        f16::from_f64(self.to_f64())
    }

    pub(crate) fn to_i64(self) -> i64 {
        match self {
            // `as` truncates toward zero, saturates, and maps NaN to 0.
            Scalar::Float(f) => f as i64,
            Scalar::Int(i) => i,
            Scalar::Bool(b) => i64::from(b),
        }
    }

    /// A 4-bit value in `lo..=hi` (rounded to nearest even, saturated).
    fn to_4bit(self, lo: i64, hi: i64) -> i64 {
        match self {
            Scalar::Float(f) if f.is_nan() => 0,
            Scalar::Float(f) => f.round_ties_even().clamp(lo as f64, hi as f64) as i64,
            other => other.to_i64().clamp(lo, hi),
        }
    }

    /// The stored byte of a float8 `dtype`.
    fn to_float8(self, dtype: DataType, saturate: bool) -> u8 {
        f64_to_float8(dtype, self.to_f64(), saturate).unwrap_or(0)
    }

    /// The stored byte of `self` in a one-byte low-precision type (float8, int4, uint4).
    fn to_low_byte(self, dtype: DataType, saturate: bool) -> u8 {
        match dtype {
            // Two's complement in the byte (an i8 view reads it back).
            DataType::I4 => (self.to_4bit(-8, 7) as i8) as u8,
            DataType::U4 => self.to_4bit(0, 15) as u8,
            _ => self.to_float8(dtype, saturate),
        }
    }

    pub(crate) fn to_bool(self) -> bool {
        match self {
            Scalar::Float(f) => f != 0.0,
            Scalar::Int(i) => i != 0,
            Scalar::Bool(b) => b,
        }
    }
}

/// Defines the narrowing conversions: floats saturate, integers wrap.
macro_rules! to_integer {
    ($name:ident, $t:ty) => {
        impl Scalar {
            fn $name(self) -> $t {
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
to_integer!(to_i32, i32);
to_integer!(to_i16, i16);
to_integer!(to_u16, u16);
to_integer!(to_u32, u32);
to_integer!(to_u64, u64);

/// The elements of a tensor, widened.
pub(crate) fn read_scalars(view: &TensorView<'_>) -> Result<Vec<Scalar>> {
    Ok(match view.info.dtype {
        DataType::F32 => view
            .as_slice::<f32>()?
            .iter()
            .map(|&x| Scalar::Float(f64::from(x)))
            .collect(),
        DataType::F16 => view
            .as_slice::<f16>()?
            .iter()
            .map(|&x| Scalar::Float(x.to_f64()))
            .collect(),
        DataType::F64 => view
            .as_slice::<f64>()?
            .iter()
            .map(|&x| Scalar::Float(x))
            .collect(),
        DataType::I8 => ints(view.as_slice::<i8>()?),
        DataType::U8 => ints(view.as_slice::<u8>()?),
        DataType::I32 => ints(view.as_slice::<i32>()?),
        DataType::I64 => ints(view.as_slice::<i64>()?),
        DataType::I16 => ints(view.as_slice::<i16>()?),
        DataType::U16 => ints(view.as_slice::<u16>()?),
        DataType::U32 => ints(view.as_slice::<u32>()?),
        // Values above i64::MAX wrap to negative numbers (kernels compute on i64).
        DataType::U64 => view
            .as_slice::<u64>()?
            .iter()
            .map(|&x| Scalar::Int(x as i64))
            .collect(),
        DataType::Bool => view
            .as_slice::<u8>()?
            .iter()
            .map(|&x| Scalar::Bool(x != 0))
            .collect(),
        DataType::BF16 => view
            .as_slice::<half::bf16>()?
            .iter()
            .map(|&x| Scalar::Float(x.to_f64()))
            .collect(),
        DataType::I4 => ints(view.as_slice::<i8>()?),
        DataType::U4 => ints(view.as_slice::<u8>()?),
        dtype @ (DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz) => view
            .as_slice::<u8>()?
            .iter()
            .map(|&b| Scalar::Float(f64::from(float8_to_f32(dtype, b).unwrap_or(f32::NAN))))
            .collect(),
    })
}

fn ints<T: Copy + Into<i64>>(values: &[T]) -> Vec<Scalar> {
    values.iter().map(|&x| Scalar::Int(x.into())).collect()
}

/// Write `values` (one per element, in order) into `out`, converting to its type (float8
/// results saturate).
pub(crate) fn write_scalars(out: &mut TensorViewMut<'_>, values: &[Scalar]) -> Result<()> {
    write_scalars_saturating(out, values, true)
}

/// [`write_scalars`] with Cast's `saturate` for float8 results.
pub(crate) fn write_scalars_saturating(
    out: &mut TensorViewMut<'_>,
    values: &[Scalar],
    saturate: bool,
) -> Result<()> {
    fn fill<T: backplane_core::dtype::Element>(
        out: &mut TensorViewMut<'_>,
        values: &[Scalar],
        convert: impl Fn(Scalar) -> T,
    ) -> Result<()> {
        for (slot, &v) in out.as_mut_slice::<T>()?.iter_mut().zip(values) {
            *slot = convert(v);
        }
        Ok(())
    }
    match out.info.dtype {
        DataType::F32 => fill(out, values, Scalar::to_f32),
        DataType::F16 => fill(out, values, Scalar::to_f16),
        DataType::F64 => fill(out, values, Scalar::to_f64),
        DataType::I8 => fill(out, values, Scalar::to_i8),
        DataType::U8 => fill(out, values, Scalar::to_u8),
        DataType::I32 => fill(out, values, Scalar::to_i32),
        DataType::I64 => fill(out, values, Scalar::to_i64),
        DataType::I16 => fill(out, values, Scalar::to_i16),
        DataType::U16 => fill(out, values, Scalar::to_u16),
        DataType::U32 => fill(out, values, Scalar::to_u32),
        DataType::U64 => fill(out, values, Scalar::to_u64),
        DataType::Bool => fill(out, values, |v| u8::from(v.to_bool())),
        DataType::BF16 => fill(out, values, |v| f64_to_bf16(v.to_f64())),
        DataType::I4 => fill(out, values, |v| v.to_4bit(-8, 7) as i8),
        DataType::U4 => fill(out, values, |v| v.to_4bit(0, 15) as u8),
        dtype @ (DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz) => fill(out, values, |v| v.to_float8(dtype, saturate)),
    }
}

/// The little-endian bytes of one element of `dtype` holding `value` (e.g. Pad's fill value).
pub(crate) fn encode(dtype: DataType, value: Scalar) -> Vec<u8> {
    match dtype {
        DataType::F32 => value.to_f32().to_le_bytes().to_vec(),
        DataType::F16 => value.to_f16().to_le_bytes().to_vec(),
        DataType::F64 => value.to_f64().to_le_bytes().to_vec(),
        DataType::I8 => value.to_i8().to_le_bytes().to_vec(),
        DataType::U8 => value.to_u8().to_le_bytes().to_vec(),
        DataType::I32 => value.to_i32().to_le_bytes().to_vec(),
        DataType::I64 => value.to_i64().to_le_bytes().to_vec(),
        DataType::I16 => value.to_i16().to_le_bytes().to_vec(),
        DataType::U16 => value.to_u16().to_le_bytes().to_vec(),
        DataType::U32 => value.to_u32().to_le_bytes().to_vec(),
        DataType::U64 => value.to_u64().to_le_bytes().to_vec(),
        DataType::Bool => vec![u8::from(value.to_bool())],
        DataType::BF16 => f64_to_bf16(value.to_f64()).to_le_bytes().to_vec(),
        DataType::I4
        | DataType::U4
        | DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz => vec![value.to_low_byte(dtype, true)],
    }
}

/// Cast: convert every element of `x` to the type of `y` (`saturate`: see the module
/// documentation).
pub(crate) fn cast(x: &TensorView<'_>, y: &mut TensorViewMut<'_>, saturate: bool) -> Result<()> {
    write_scalars_saturating(y, &read_scalars(x)?, saturate)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval1, tensor};
    use backplane_core::{DataType, Op, Tensor};

    fn cast(x: &Tensor, to: DataType) -> Vec<f64> {
        let y = eval1(&Op::Cast { to, saturate: true }, &[x]);
        assert_eq!(y.dtype(), to);
        assert_eq!(y.shape(), x.shape());
        y.to_f64_vec()
    }

    #[test]
    fn float_to_integers_truncates_toward_zero_and_saturates() {
        let x = Tensor::from_vec(
            vec![7],
            vec![2.7f32, -2.7, 0.5, 1e10, -1e10, f32::NAN, 300.0],
        )
        .unwrap();
        assert_eq!(
            cast(&x, DataType::I32),
            vec![2.0, -2.0, 0.0, 2147483647.0, -2147483648.0, 0.0, 300.0]
        );
        assert_eq!(
            cast(&x, DataType::U8),
            vec![2.0, 0.0, 0.0, 255.0, 0.0, 0.0, 255.0]
        );
        assert_eq!(
            cast(&x, DataType::I8),
            vec![2.0, -2.0, 0.0, 127.0, -128.0, 0.0, 127.0]
        );
        // Nonzero (and NaN) is true.
        assert_eq!(
            cast(&x, DataType::Bool),
            vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
        );
    }

    #[test]
    fn integer_narrowing_wraps() {
        let x = Tensor::from_vec(vec![4], vec![300i64, -1, 128, 1 << 40]).unwrap();
        // 300 = 256 + 44; -1 = 0xFF...; 128 = 0x80; 2^40 has no low bits.
        assert_eq!(cast(&x, DataType::U8), vec![44.0, 255.0, 128.0, 0.0]);
        assert_eq!(cast(&x, DataType::I8), vec![44.0, -1.0, -128.0, 0.0]);
        assert_eq!(cast(&x, DataType::I32), vec![300.0, -1.0, 128.0, 0.0]);
        let y = Tensor::from_vec(vec![2], vec![-1i8, 5]).unwrap();
        assert_eq!(cast(&y, DataType::U8), vec![255.0, 5.0]);
        assert_eq!(cast(&y, DataType::I64), vec![-1.0, 5.0]);
    }

    #[test]
    fn float_precision_changes_round_to_nearest_even() {
        // 2049 lies halfway between the f16 values 2048 and 2050: ties go to even (2048).
        // 65520 is halfway between f16::MAX (65504) and 65536: it rounds up and overflows.
        let x = Tensor::from_vec(vec![4], vec![2049.0f32, 2051.0, 65520.0, 0.1]).unwrap();
        let y = cast(&x, DataType::F16);
        assert_eq!(&y[..3], &[2048.0, 2052.0, f64::INFINITY]);
        // 0.1 becomes the nearest f16, 0.0999755859375.
        assert_eq!(y[3], 0.099_975_585_937_5);
        // i64 → f32: 2^24 + 1 is not representable; ties to even give 2^24.
        let i = Tensor::from_vec(vec![2], vec![16_777_217i64, -3]).unwrap();
        assert_eq!(cast(&i, DataType::F32), vec![16_777_216.0, -3.0]);
        assert_eq!(cast(&i, DataType::F16), vec![f64::INFINITY, -3.0]);
    }

    #[test]
    fn bool_round_trips_through_every_type() {
        let b = Tensor::from_bools(vec![3], &[true, false, true]).unwrap();
        for to in DataType::ALL {
            assert_eq!(cast(&b, to), vec![1.0, 0.0, 1.0], "bool -> {to}");
            let back = eval1(
                &Op::Cast {
                    to: DataType::Bool,
                    saturate: true,
                },
                &[&eval1(&Op::Cast { to, saturate: true }, &[&b])],
            );
            assert_eq!(back.bytes(), &[1, 0, 1], "bool -> {to} -> bool");
        }
    }

    /// The raw bytes of casting `x` to `to` with `saturate`.
    fn cast_bytes(x: &Tensor, to: DataType, saturate: bool) -> Vec<u8> {
        eval1(&Op::Cast { to, saturate }, &[x]).bytes().to_vec()
    }

    #[test]
    fn float_to_float8_saturates_or_overflows() {
        let x = Tensor::from_vec(
            vec![8],
            vec![
                1.0f32,
                -2.5,
                1e6,
                -1e6,
                f32::INFINITY,
                f32::NAN,
                -0.0,
                464.0,
            ],
        )
        .unwrap();
        // E4M3FN: 448 is 0x7E, NaN 0x7F; 464 is the tie between 448 and 480: even, 448.
        assert_eq!(
            cast_bytes(&x, DataType::F8E4M3Fn, true),
            vec![0x38, 0xC2, 0x7E, 0xFE, 0x7E, 0x7F, 0x80, 0x7E]
        );
        assert_eq!(
            cast_bytes(&x, DataType::F8E4M3Fn, false),
            vec![0x38, 0xC2, 0x7F, 0xFF, 0x7F, 0x7F, 0x80, 0x7E]
        );
        // E5M2 keeps infinities when not saturating.
        assert_eq!(
            cast_bytes(&x, DataType::F8E5M2, false),
            vec![0x3C, 0xC1, 0x7C, 0xFC, 0x7C, 0x7F, 0x80, 0x5F]
        );
        // FNUZ: no -0, a single NaN 0x80.
        assert_eq!(
            cast_bytes(&x, DataType::F8E4M3Fnuz, true),
            vec![0x40, 0xCA, 0x7F, 0xFF, 0x7F, 0x80, 0x00, 0x7F]
        );
        assert_eq!(
            cast_bytes(&x, DataType::F8E5M2Fnuz, false),
            vec![0x40, 0xC5, 0x80, 0x80, 0x80, 0x80, 0x00, 0x63]
        );
        // And back: exact.
        let f8 = eval1(
            &Op::Cast {
                to: DataType::F8E4M3Fn,
                saturate: true,
            },
            &[&x],
        );
        let back = cast(&f8, DataType::F32);
        assert_eq!(&back[..5], &[1.0, -2.5, 448.0, -448.0, 448.0]);
        assert!(back[5].is_nan());
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is the tie between 1 and 1 + 2^-7: even (1). 1 + 3 * 2^-8 rounds up.
        let x = Tensor::from_vec(
            vec![4],
            vec![1.0f32 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::MAX, -0.0],
        )
        .unwrap();
        let y = eval1(
            &Op::Cast {
                to: DataType::BF16,
                saturate: true,
            },
            &[&x],
        );
        let bits: Vec<u16> = y
            .as_slice::<half::bf16>()
            .unwrap()
            .iter()
            .map(|b| b.to_bits())
            .collect();
        assert_eq!(bits, vec![0x3F80, 0x3F82, 0x7F80, 0x8000]);
    }

    #[test]
    fn four_bit_targets_round_and_saturate() {
        let x = Tensor::from_vec(vec![6], vec![-9.0f32, -8.5, 2.5, 3.5, 7.6, f32::NAN]).unwrap();
        assert_eq!(cast(&x, DataType::I4), vec![-8.0, -8.0, 2.0, 4.0, 7.0, 0.0]);
        assert_eq!(cast(&x, DataType::U4), vec![0.0, 0.0, 2.0, 4.0, 8.0, 0.0]);
        // Integers clamp (as ONNX's reference does) rather than wrap.
        let i = Tensor::from_vec(vec![3], vec![300i64, -20, 9]).unwrap();
        assert_eq!(cast(&i, DataType::I4), vec![7.0, -8.0, 7.0]);
        assert_eq!(cast(&i, DataType::U4), vec![15.0, 0.0, 9.0]);
        // int4 stores an i8 per element; reading back sign-extends.
        let y = eval1(
            &Op::Cast {
                to: DataType::I4,
                saturate: true,
            },
            &[&i],
        );
        assert_eq!(y.as_slice::<i8>().unwrap(), &[7, -8, 7]);
        assert_eq!(cast(&y, DataType::U8), vec![7.0, 248.0, 7.0]);
    }

    #[test]
    fn every_pair_of_types_converts_small_values_exactly() {
        // 0, 1, 5 and 6 exist in every type, the low-precision ones included.
        for from in DataType::ALL {
            for to in DataType::ALL {
                if from == DataType::Bool || to == DataType::Bool {
                    continue;
                }
                let x = tensor(from, &[2, 2], &[0.0, 1.0, 5.0, 6.0]);
                assert_eq!(cast(&x, to), vec![0.0, 1.0, 5.0, 6.0], "{from} -> {to}");
            }
        }
    }

    #[test]
    fn every_pair_of_types_converts_small_integers_exactly() {
        // 0, 1, 5 and 100 exist in every ordinary numeric type, so every cast preserves them.
        for from in DataType::ORDINARY {
            for to in DataType::ORDINARY {
                if from == DataType::Bool || to == DataType::Bool {
                    continue;
                }
                let x = tensor(from, &[2, 2], &[0.0, 1.0, 5.0, 100.0]);
                assert_eq!(cast(&x, to), vec![0.0, 1.0, 5.0, 100.0], "{from} -> {to}");
            }
        }
    }

    #[test]
    fn cast_of_an_empty_and_a_scalar_tensor() {
        let e = tensor(DataType::F32, &[0, 3], &[]);
        assert!(cast(&e, DataType::I64).is_empty());
        let s = Tensor::scalar(-4i32);
        assert_eq!(cast(&s, DataType::F16), vec![-4.0]);
    }
}

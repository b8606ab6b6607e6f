//! Cast between every pair of data types, through a lossless intermediate [`Scalar`]: the
//! widening and narrowing rules are `backplane_core::scalar`'s (shared with every backend
//! that casts); this file reads and writes whole tensors with them.

use crate::Result;
use backplane_core::lowp::float8_to_f32;
pub(crate) use backplane_core::scalar::Scalar;
use backplane_core::{DataType, TensorView, TensorViewMut};
use half::f16;

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
        DataType::BF16 => fill(out, values, Scalar::to_bf16),
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
    value.to_le_bytes(dtype)
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

//! Elementwise kernels: one-input functions and two-input functions with numpy broadcasting.
//!
//! Float math (f32 and f16) is evaluated in f64 and rounded once to the element type, so the
//! results are as close to the correctly rounded value as the f64 functions allow. Integer
//! arithmetic wraps; integer division by zero is an error.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::broadcast_offsets;
use super::numeric::Arithmetic;
use super::unsupported;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::dtype::Element;
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::scalar::unary_f64;
use backplane_core::{DataType, TensorView, TensorViewMut};
use half::f16;

/// Apply a unary op.
pub(crate) fn unary(op: UnaryOp, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    // Integer types support Relu, Neg, Abs and Clip only (integer_unary refuses the rest);
    // Neg of an unsigned type is meaningless.
    match x.info.dtype {
        DataType::F32 => map(x, y, |v: f32| unary_f64(op, v.into()) as f32),
        DataType::F64 => map(x, y, |v: f64| unary_f64(op, v)),
        DataType::F16 => map(x, y, |v: f16| f16::from_f64(unary_f64(op, v.to_f64()))),
        DataType::I8 => integer_unary::<i8>(op, x, y),
        DataType::U8 if op != UnaryOp::Neg => integer_unary::<u8>(op, x, y),
        DataType::I32 => integer_unary::<i32>(op, x, y),
        DataType::I64 => integer_unary::<i64>(op, x, y),
        DataType::I16 => integer_unary::<i16>(op, x, y),
        DataType::U16 if op != UnaryOp::Neg => integer_unary::<u16>(op, x, y),
        DataType::U32 if op != UnaryOp::Neg => integer_unary::<u32>(op, x, y),
        DataType::U64 if op != UnaryOp::Neg => integer_unary::<u64>(op, x, y),
        dt => Err(unsupported(op.name(), dt)),
    }
}

fn integer_unary<T: Arithmetic>(
    op: UnaryOp,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    match op {
        UnaryOp::Relu => map(x, y, T::relu),
        UnaryOp::Neg => map(x, y, T::neg),
        UnaryOp::Abs => map(x, y, T::abs),
        UnaryOp::Clip { min, max } => map(x, y, |v: T| {
            // min(max(x, min), max), comparing as reals; the bounds convert to T (an
            // infinite bound saturates to the type's range, so it never clips).
            let lower = if v.to_f64() < f64::from(min) {
                T::from_f64(min.into())
            } else {
                v
            };
            if lower.to_f64() > f64::from(max) {
                T::from_f64(max.into())
            } else {
                lower
            }
        }),
        other => Err(unsupported(other.name(), T::DTYPE)),
    }
}

fn map<T: Element>(
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
    f: impl Fn(T) -> T,
) -> Result<()> {
    let xs = x.as_slice::<T>()?;
    for (out, &v) in y.as_mut_slice::<T>()?.iter_mut().zip(xs) {
        *out = f(v);
    }
    Ok(())
}

/// Apply a binary op with numpy broadcasting.
pub(crate) fn binary(
    op: BinaryOp,
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    if op == BinaryOp::Pow {
        return pow(a, b, y);
    }
    match a.info.dtype {
        DataType::F32 => arithmetic::<f32>(op, a, b, y),
        DataType::F64 => arithmetic::<f64>(op, a, b, y),
        DataType::F16 => arithmetic::<f16>(op, a, b, y),
        DataType::I8 => arithmetic::<i8>(op, a, b, y),
        DataType::U8 => arithmetic::<u8>(op, a, b, y),
        DataType::I32 => arithmetic::<i32>(op, a, b, y),
        DataType::I64 => arithmetic::<i64>(op, a, b, y),
        DataType::I16 => arithmetic::<i16>(op, a, b, y),
        DataType::U16 => arithmetic::<u16>(op, a, b, y),
        DataType::U32 => arithmetic::<u32>(op, a, b, y),
        DataType::U64 => arithmetic::<u64>(op, a, b, y),
        dt => Err(unsupported(op.name(), dt)),
    }
}

fn arithmetic<T: Arithmetic>(
    op: BinaryOp,
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let f: fn(T, T) -> std::result::Result<T, String> = match op {
        BinaryOp::Add => |p, q| Ok(p.add(q)),
        BinaryOp::Sub => |p, q| Ok(p.sub(q)),
        BinaryOp::Mul => |p, q| Ok(p.mul(q)),
        BinaryOp::Div => T::div,
        BinaryOp::Max => |p, q| Ok(p.maximum(q)),
        BinaryOp::Min => |p, q| Ok(p.minimum(q)),
        BinaryOp::Pow => return Err(unsupported(op.name(), T::DTYPE)),
    };
    let (xa, xb) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
    let out_dims = y.dims().to_vec();
    let a_at = broadcast_offsets(a.dims(), &out_dims);
    let b_at = broadcast_offsets(b.dims(), &out_dims);
    for ((slot, &i), &j) in y.as_mut_slice::<T>()?.iter_mut().zip(&a_at).zip(&b_at) {
        *slot =
            f(xa[i], xb[j]).map_err(|e| BackendError::Execution(format!("{}: {e}", op.name())))?;
    }
    Ok(())
}

/// Pow with broadcasting. Base and exponent may have different numeric types; the result has
/// the base's type. Integer to integer powers are exact (with wrap-around); everything else is
/// computed in f64 and converted like Cast (rounded for floats, truncated for integers).
fn pow(a: &TensorView<'_>, b: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let (base, exponent) = (read_scalars(a)?, read_scalars(b)?);
    let out_dims = y.dims().to_vec();
    let a_at = broadcast_offsets(a.dims(), &out_dims);
    let b_at = broadcast_offsets(b.dims(), &out_dims);
    let results = a_at
        .iter()
        .zip(&b_at)
        .map(|(&i, &j)| match (base[i], exponent[j]) {
            (Scalar::Int(p), Scalar::Int(q)) => int_pow(p, q).map(Scalar::Int),
            (p, q) => Ok(Scalar::Float(p.to_f64().powf(q.to_f64()))),
        })
        .collect::<std::result::Result<Vec<Scalar>, String>>()
        .map_err(|e| BackendError::Execution(format!("Pow: {e}")))?;
    write_scalars(y, &results)
}

/// Integer power with wrap-around. A negative exponent gives the truncated real result
/// (1 and -1 stay ±1, everything else becomes 0); 0 to a negative power is an error.
fn int_pow(base: i64, exponent: i64) -> std::result::Result<i64, String> {
    if exponent < 0 {
        return match base {
            0 => Err(format!("0 raised to the negative power {exponent}")),
            1 => Ok(1),
            -1 => Ok(if exponent % 2 == 0 { 1 } else { -1 }),
            _ => Ok(0),
        };
    }
    // Square-and-multiply; wrapping arithmetic keeps the low bits exact for narrower types.
    let (mut result, mut square, mut e) = (1i64, base, exponent.unsigned_abs());
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(square);
        }
        square = square.wrapping_mul(square);
        e >>= 1;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{assert_close, eval1, f32s, tensor};
    use backplane_core::ops::{BinaryOp, UnaryOp};
    use backplane_core::{DataType, Op, Tensor};

    fn unary(op: UnaryOp, x: &[f32]) -> Vec<f32> {
        let t = f32s(&[x.len()], x);
        eval1(&Op::Unary(op), &[&t])
            .as_slice::<f32>()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn activations() {
        assert_eq!(unary(UnaryOp::Relu, &[-2.0, 0.0, 3.5]), vec![0.0, 0.0, 3.5]);
        assert_eq!(
            unary(UnaryOp::LeakyRelu { alpha: 0.1 }, &[-2.0, 0.0, 3.0]),
            vec![-0.2, 0.0, 3.0]
        );
        assert_eq!(
            unary(
                UnaryOp::Clip {
                    min: -1.0,
                    max: 2.0
                },
                &[-5.0, 0.5, 7.0]
            ),
            vec![-1.0, 0.5, 2.0]
        );
        // min > max: min(max(x, 3), 1) = 1 everywhere.
        assert_eq!(
            unary(UnaryOp::Clip { min: 3.0, max: 1.0 }, &[0.0, 2.0, 5.0]),
            vec![1.0, 1.0, 1.0]
        );
        let clip_open = UnaryOp::Clip {
            min: f32::NEG_INFINITY,
            max: f32::INFINITY,
        };
        assert!(unary(clip_open, &[f32::NAN])[0].is_nan());
        // sigmoid(0) = 1/2, sigmoid(ln 3) = 1/(1 + 1/3) = 3/4; saturates without NaN.
        let s = unary(UnaryOp::Sigmoid, &[0.0, 3f32.ln(), -100.0, 100.0]);
        assert_close(&s[..2], &[0.5, 0.75], 1e-7);
        // 1 / (1 + e^100) = 3.7e-44 (an f32 subnormal); 1 / (1 + e^-100) rounds to 1.
        assert!(s[2] >= 0.0 && s[2] < 1e-43, "{}", s[2]);
        assert_eq!(s[3], 1.0);
        // tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6.
        assert_close(&unary(UnaryOp::Tanh, &[2f32.ln(), 0.0]), &[0.6, 0.0], 1e-7);
    }

    #[test]
    fn math_functions() {
        assert_eq!(unary(UnaryOp::Sqrt, &[4.0, 2.25, 0.0]), vec![2.0, 1.5, 0.0]);
        assert!(unary(UnaryOp::Sqrt, &[-1.0])[0].is_nan());
        assert_close(
            &unary(UnaryOp::Exp, &[0.0, 1.0]),
            &[1.0, std::f32::consts::E],
            1e-7,
        );
        assert_eq!(
            unary(UnaryOp::Log, &[1.0, 0.0])[..],
            [0.0, f32::NEG_INFINITY]
        );
        assert!(unary(UnaryOp::Log, &[-1.0])[0].is_nan());
        assert_eq!(unary(UnaryOp::Neg, &[1.5, -0.0]), vec![-1.5, 0.0]);
        assert_eq!(unary(UnaryOp::Abs, &[-1.5, 2.0]), vec![1.5, 2.0]);
        // erf(0.5) = 0.5204998778..., erf(-2) = -0.9953222650...
        assert_close(
            &unary(UnaryOp::Erf, &[0.5, -2.0, 0.0]),
            &[0.520_499_9, -0.995_322_3, 0.0],
            1e-7,
        );
    }

    #[test]
    fn gelu_exact_and_tanh() {
        let exact = UnaryOp::Gelu {
            tanh_approximation: false,
        };
        // gelu(x) = x * Phi(x): Phi(1) = 0.8413447461, Phi(-1) = 0.1586552539,
        // Phi(-5) = 2.866515719e-7 (a tail that 1 + erf(x) would lose).
        assert_close(
            &unary(exact, &[0.0, 1.0, -1.0, -5.0]),
            &[0.0, 0.841_344_8, -0.158_655_25, -1.433_257_9e-6],
            1e-6,
        );
        let approx = UnaryOp::Gelu {
            tanh_approximation: true,
        };
        // x = 1: 0.5 * (1 + tanh(0.7978845608 * 1.044715)) = 0.5 * (1 + tanh(0.8335594)) =
        // 0.5 * (1 + 0.6823040) = 0.8411920.
        assert_close(&unary(approx, &[1.0, 0.0]), &[0.841_192, 0.0], 1e-6);
    }

    #[test]
    fn integer_unary_ops_for_every_integer_type() {
        for dt in [DataType::I8, DataType::I32, DataType::I64] {
            let x = tensor(dt, &[3], &[-3.0, 0.0, 5.0]);
            let run = |op| eval1(&Op::Unary(op), &[&x]).to_f64_vec();
            assert_eq!(run(UnaryOp::Relu), vec![0.0, 0.0, 5.0], "{dt}");
            assert_eq!(run(UnaryOp::Neg), vec![3.0, 0.0, -5.0], "{dt}");
            assert_eq!(run(UnaryOp::Abs), vec![3.0, 0.0, 5.0], "{dt}");
        }
        let u = tensor(DataType::U8, &[2], &[0.0, 200.0]);
        assert_eq!(
            eval1(&Op::Unary(UnaryOp::Abs), &[&u]).to_f64_vec(),
            vec![0.0, 200.0]
        );
        assert!(evaluate(&Op::Unary(UnaryOp::Neg), &[&u]).is_err());
        let i = tensor(DataType::I32, &[1], &[1.0]);
        assert!(evaluate(&Op::Unary(UnaryOp::Exp), &[&i]).is_err());
    }

    fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Tensor {
        eval1(&Op::Binary(op), &[a, b])
    }

    #[test]
    fn arithmetic_broadcasts_like_numpy() {
        // [2,3] + [3]: the row [10,20,30] is added to both rows.
        let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let row = f32s(&[3], &[10.0, 20.0, 30.0]);
        let y = binary(BinaryOp::Add, &a, &row);
        assert_eq!(y.shape().dims(), &[2, 3]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
        );
        // [3,1] - [1,5]: outer difference, shape [3,5].
        let col = f32s(&[3, 1], &[0.0, 10.0, 20.0]);
        let line = f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let y = binary(BinaryOp::Sub, &col, &line);
        assert_eq!(y.shape().dims(), &[3, 5]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[-1.0, -2.0, -3.0, -4.0, -5.0, 9.0, 8.0, 7.0, 6.0, 5.0, 19.0, 18.0, 17.0, 16.0, 15.0]
        );
        // Scalar * [7].
        let s = Tensor::scalar(2.0f32);
        let v = f32s(&[7], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(
            binary(BinaryOp::Mul, &s, &v).as_slice::<f32>().unwrap(),
            &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
        );
        // [2,1,3] / [5,1] → [2,5,3]; check one element: a[1,0,2] / b[4,0] = 6 / 5.
        let a3 = f32s(&[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b2 = f32s(&[5, 1], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let y = binary(BinaryOp::Div, &a3, &b2);
        assert_eq!(y.shape().dims(), &[2, 5, 3]);
        assert_eq!(y.as_slice::<f32>().unwrap()[15 + 4 * 3 + 2], 1.2);
        assert_eq!(
            binary(BinaryOp::Div, &f32s(&[1], &[1.0]), &f32s(&[1], &[0.0]))
                .as_slice::<f32>()
                .unwrap(),
            &[f32::INFINITY]
        );
    }

    #[test]
    fn every_arithmetic_dtype() {
        for dt in [
            DataType::F32,
            DataType::I8,
            DataType::U8,
            DataType::I32,
            DataType::I64,
        ] {
            let a = tensor(dt, &[2, 2], &[7.0, 8.0, 9.0, 10.0]);
            let b = tensor(dt, &[2], &[2.0, 3.0]);
            let run = |op| binary(op, &a, &b).to_f64_vec();
            assert_eq!(run(BinaryOp::Add), vec![9.0, 11.0, 11.0, 13.0], "{dt}");
            assert_eq!(run(BinaryOp::Sub), vec![5.0, 5.0, 7.0, 7.0], "{dt}");
            assert_eq!(run(BinaryOp::Mul), vec![14.0, 24.0, 18.0, 30.0], "{dt}");
            assert_eq!(run(BinaryOp::Max), vec![7.0, 8.0, 9.0, 10.0], "{dt}");
            assert_eq!(run(BinaryOp::Min), vec![2.0, 3.0, 2.0, 3.0], "{dt}");
            let div = run(BinaryOp::Div);
            if dt == DataType::F32 {
                assert_close(
                    &div.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                    &[3.5, 8.0 / 3.0, 4.5, 10.0 / 3.0],
                    1e-7,
                );
            } else {
                // Integer division truncates: 7/2=3, 8/3=2, 9/2=4, 10/3=3.
                assert_eq!(div, vec![3.0, 2.0, 4.0, 3.0], "{dt}");
            }
        }
    }

    #[test]
    fn integer_division_truncates_toward_zero_and_refuses_zero() {
        let a = Tensor::from_vec(vec![4], vec![-7i32, 7, -7, 0]).unwrap();
        let b = Tensor::from_vec(vec![4], vec![2i32, -2, -2, 5]).unwrap();
        assert_eq!(
            binary(BinaryOp::Div, &a, &b).as_slice::<i32>().unwrap(),
            &[-3, -3, 3, 0]
        );
        let zero = Tensor::from_vec(vec![1], vec![0i64]).unwrap();
        let one = Tensor::from_vec(vec![3], vec![1i64, 2, 3]).unwrap();
        let err = evaluate(&Op::Binary(BinaryOp::Div), &[&one, &zero]).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
        let z8 = tensor(DataType::U8, &[1], &[0.0]);
        assert!(evaluate(&Op::Binary(BinaryOp::Div), &[&z8, &z8]).is_err());
    }

    #[test]
    fn integer_overflow_wraps() {
        let a = Tensor::from_vec(vec![2], vec![i32::MAX, i32::MIN]).unwrap();
        let b = Tensor::from_vec(vec![2], vec![1i32, 1]).unwrap();
        assert_eq!(
            binary(BinaryOp::Add, &a, &b).as_slice::<i32>().unwrap(),
            &[i32::MIN, i32::MIN + 1]
        );
        let u = tensor(DataType::U8, &[1], &[250.0]);
        let v = tensor(DataType::U8, &[1], &[10.0]);
        assert_eq!(binary(BinaryOp::Add, &u, &v).to_f64_vec(), vec![4.0]);
    }

    #[test]
    fn pow_with_mixed_exponent_types() {
        let base = f32s(&[3], &[2.0, 9.0, -2.0]);
        let half = f32s(&[1], &[0.5]);
        // 2^0.5 = 1.41421356, 9^0.5 = 3, (-2)^0.5 = NaN.
        let y = binary(BinaryOp::Pow, &base, &half);
        let y = y.as_slice::<f32>().unwrap();
        assert_close(&y[..2], &[std::f32::consts::SQRT_2, 3.0], 1e-7);
        assert!(y[2].is_nan());
        let e64 = Tensor::from_vec(vec![3], vec![3i64, 2, 3]).unwrap();
        assert_eq!(
            binary(BinaryOp::Pow, &base, &e64)
                .as_slice::<f32>()
                .unwrap(),
            &[8.0, 81.0, -8.0]
        );
        let e32 = Tensor::from_vec(vec![1], vec![-1i32]).unwrap();
        assert_eq!(
            binary(BinaryOp::Pow, &base, &e32)
                .as_slice::<f32>()
                .unwrap(),
            &[0.5, 1.0 / 9.0, -0.5]
        );
        // Integer base: exact powers with wrap-around, truncation for negative exponents.
        let ib = Tensor::from_vec(vec![5], vec![3i64, -2, 2, 1, -1]).unwrap();
        let ie = Tensor::from_vec(vec![5], vec![4i32, 3, -1, -5, -3]).unwrap();
        assert_eq!(
            binary(BinaryOp::Pow, &ib, &ie).as_slice::<i64>().unwrap(),
            &[81, -8, 0, 1, -1]
        );
        let big = Tensor::from_vec(vec![1], vec![2i32]).unwrap();
        let e = Tensor::from_vec(vec![1], vec![32i64]).unwrap();
        // 2^32 wraps to 0 in i32.
        assert_eq!(
            binary(BinaryOp::Pow, &big, &e).as_slice::<i32>().unwrap(),
            &[0]
        );
        let fe = f32s(&[1], &[2.5]);
        // 2^2.5 = 5.657 truncates to 5.
        assert_eq!(
            binary(BinaryOp::Pow, &big, &fe).as_slice::<i32>().unwrap(),
            &[5]
        );
        let zero = Tensor::from_vec(vec![1], vec![0i32]).unwrap();
        assert!(evaluate(&Op::Binary(BinaryOp::Pow), &[&zero, &e32]).is_err());
        let u = tensor(DataType::U8, &[1], &[2.0]);
        assert!(evaluate(&Op::Binary(BinaryOp::Pow), &[&u, &u]).is_err());
    }

    #[test]
    fn float16_elementwise_rounds_once() {
        let h = |shape: &[usize], v: &[f64]| tensor(DataType::F16, shape, v);
        // [2,2] op [2]: 1/3 → 0.33325195 (nearest f16); 2048 + 1 ties to even 2048.
        let a = h(&[2, 2], &[1.0, 2048.0, -3.0, 0.5]);
        let b = h(&[2], &[3.0, 1.0]);
        let run = |op| {
            let y = binary(op, &a, &b);
            assert_eq!(y.dtype(), DataType::F16);
            y.to_f64_vec()
        };
        assert_eq!(run(BinaryOp::Add), vec![4.0, 2048.0, 0.0, 1.5]);
        // 2047 is exact (f16 spacing is 1 below 2048).
        assert_eq!(run(BinaryOp::Sub), vec![-2.0, 2047.0, -6.0, -0.5]);
        assert_eq!(run(BinaryOp::Mul), vec![3.0, 2048.0, -9.0, 0.5]);
        assert_eq!(
            run(BinaryOp::Div),
            vec![0.333_251_953_125, 2048.0, -1.0, 0.5]
        );
        assert_eq!(run(BinaryOp::Max), vec![3.0, 2048.0, 3.0, 1.0]);
        assert_eq!(run(BinaryOp::Min), vec![1.0, 1.0, -3.0, 0.5]);
        // Unary functions: sqrt(2) = 1.41421356 → f16 1.4140625; sigmoid(0) = 0.5.
        let x = h(&[3], &[2.0, 0.0, -1.5]);
        let u = |op| eval1(&Op::Unary(op), &[&x]).to_f64_vec();
        assert_eq!(u(UnaryOp::Sqrt)[..2], [1.414_062_5, 0.0]);
        assert_eq!(u(UnaryOp::Sigmoid)[1], 0.5);
        assert_eq!(u(UnaryOp::Relu), vec![2.0, 0.0, 0.0]);
        assert_eq!(u(UnaryOp::Neg), vec![-2.0, 0.0, 1.5]);
        assert_eq!(u(UnaryOp::Abs), vec![2.0, 0.0, 1.5]);
        assert_eq!(
            u(UnaryOp::Clip {
                min: -1.0,
                max: 1.0
            }),
            vec![1.0, 0.0, -1.0]
        );
        // exp(2) = 7.389 → f16 spacing there is 1/128: 7.390625.
        assert_eq!(u(UnaryOp::Exp)[0], 7.390_625);
    }

    #[test]
    fn clip_on_integers() {
        for dt in [DataType::I8, DataType::U8, DataType::I32, DataType::I64] {
            let x = tensor(dt, &[5], &[0.0, 3.0, 7.0, 10.0, 100.0]);
            let clip = |min, max| eval1(&Op::Unary(UnaryOp::Clip { min, max }), &[&x]).to_f64_vec();
            assert_eq!(clip(3.0, 10.0), vec![3.0, 3.0, 7.0, 10.0, 10.0], "{dt}");
            // Absent bounds are infinite and never clip.
            assert_eq!(
                clip(f32::NEG_INFINITY, 7.0),
                vec![0.0, 3.0, 7.0, 7.0, 7.0],
                "{dt}"
            );
            assert_eq!(
                clip(f32::NEG_INFINITY, f32::INFINITY),
                vec![0.0, 3.0, 7.0, 10.0, 100.0],
                "{dt}"
            );
        }
        let x = Tensor::from_vec(vec![3], vec![-50i64, 0, i64::MAX]).unwrap();
        let y = eval1(
            &Op::Unary(UnaryOp::Clip {
                min: -10.0,
                max: 20.0,
            }),
            &[&x],
        );
        assert_eq!(y.as_slice::<i64>().unwrap(), &[-10, 0, 20]);
    }

    #[test]
    fn pow_over_more_type_pairs() {
        // f16 base with an i64 exponent: 1.5^2 = 2.25, 1.5^-1 = 0.6667 → f16 0.66650391.
        let base = tensor(DataType::F16, &[2], &[1.5, 1.5]);
        let e = Tensor::from_vec(vec![2], vec![2i64, -1]).unwrap();
        let y = binary(BinaryOp::Pow, &base, &e);
        assert_eq!(y.dtype(), DataType::F16);
        assert_eq!(y.to_f64_vec(), vec![2.25, 0.666_503_906_25]);
        // i32 base with a u8 exponent: 3^4 = 81; with an f16 exponent 4^0.5 = 2.
        let ib = Tensor::from_vec(vec![2], vec![3i32, 4]).unwrap();
        let ue = tensor(DataType::U8, &[1], &[4.0]);
        assert_eq!(
            binary(BinaryOp::Pow, &ib, &ue).as_slice::<i32>().unwrap(),
            &[81, 256]
        );
        let he = tensor(DataType::F16, &[1], &[0.5]);
        assert_eq!(
            binary(BinaryOp::Pow, &ib, &he).as_slice::<i32>().unwrap(),
            &[1, 2]
        );
    }

    #[test]
    fn mismatched_shapes_and_bool_inputs_are_rejected() {
        let a = f32s(&[3], &[1.0, 2.0, 3.0]);
        let b = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
        assert!(evaluate(&Op::Binary(BinaryOp::Add), &[&a, &b]).is_err());
        let t = Tensor::from_bools(vec![1], &[true]).unwrap();
        assert!(evaluate(&Op::Binary(BinaryOp::Add), &[&t, &t]).is_err());
    }
}

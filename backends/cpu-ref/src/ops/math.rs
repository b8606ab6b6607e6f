//! Elementwise math beyond the core set: math functions and parameterised activations
//! ([`MathOp`]), comparisons, logical and bitwise operators, Mod and PRelu ([`BinaryExtOp`]),
//! and Where.
//!
//! Every element is widened losslessly to a [`Scalar`] (floats to f64, integers to i64),
//! computed, and rounded once to the output type.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::broadcast_offsets;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{BinaryExtOp, MathOp};
use backplane_core::scalar::math_f64;
use backplane_core::{TensorView, TensorViewMut};

/// Apply a [`MathOp`].
pub(crate) fn math(op: MathOp, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let xs = read_scalars(x)?;
    let out: Vec<Scalar> = xs.into_iter().map(|v| math_one(op, v)).collect();
    write_scalars(y, &out)
}

fn math_one(op: MathOp, v: Scalar) -> Scalar {
    match (op, v) {
        (MathOp::Not, v) => Scalar::Bool(!v.to_bool()),
        (MathOp::BitwiseNot, v) => Scalar::Int(!v.to_i64()),
        (MathOp::Sign, Scalar::Int(i)) => Scalar::Int(i.signum()),
        (MathOp::Shrink { bias, lambd }, Scalar::Int(i)) => {
            let (b, l) = (f64::from(bias), f64::from(lambd));
            let x = i as f64;
            let r = if x < -l {
                x + b
            } else if x > l {
                x - b
            } else {
                0.0
            };
            Scalar::Int(r as i64)
        }
        (MathOp::IsNaN, v) => Scalar::Bool(v.to_f64().is_nan()),
        (
            MathOp::IsInf {
                detect_negative,
                detect_positive,
            },
            v,
        ) => {
            let x = v.to_f64();
            Scalar::Bool(
                (detect_positive && x == f64::INFINITY)
                    || (detect_negative && x == f64::NEG_INFINITY),
            )
        }
        (op, v) => Scalar::Float(math_f64(op, v.to_f64())),
    }
}

/// Apply a [`BinaryExtOp`] with numpy broadcasting.
pub(crate) fn binary_ext(
    op: BinaryExtOp,
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let out_dims = y.dims().to_vec();
    let (xa, xb) = (read_scalars(a)?, read_scalars(b)?);
    let oa = broadcast_offsets(a.dims(), &out_dims);
    let ob = broadcast_offsets(b.dims(), &out_dims);
    let mut out = Vec::with_capacity(oa.len());
    for (&i, &j) in oa.iter().zip(&ob) {
        out.push(binary_one(op, xa[i], xb[j])?);
    }
    write_scalars(y, &out)
}

fn binary_one(op: BinaryExtOp, a: Scalar, b: Scalar) -> Result<Scalar> {
    use std::cmp::Ordering;
    let cmp = || match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => Some(x.cmp(&y)),
        _ => a.to_f64().partial_cmp(&b.to_f64()),
    };
    Ok(match op {
        BinaryExtOp::Equal => Scalar::Bool(cmp() == Some(Ordering::Equal)),
        BinaryExtOp::Less => Scalar::Bool(cmp() == Some(Ordering::Less)),
        BinaryExtOp::LessOrEqual => {
            Scalar::Bool(matches!(cmp(), Some(Ordering::Less | Ordering::Equal)))
        }
        BinaryExtOp::Greater => Scalar::Bool(cmp() == Some(Ordering::Greater)),
        BinaryExtOp::GreaterOrEqual => {
            Scalar::Bool(matches!(cmp(), Some(Ordering::Greater | Ordering::Equal)))
        }
        BinaryExtOp::And => Scalar::Bool(a.to_bool() && b.to_bool()),
        BinaryExtOp::Or => Scalar::Bool(a.to_bool() || b.to_bool()),
        BinaryExtOp::Xor => Scalar::Bool(a.to_bool() != b.to_bool()),
        BinaryExtOp::BitwiseAnd => Scalar::Int(a.to_i64() & b.to_i64()),
        BinaryExtOp::BitwiseOr => Scalar::Int(a.to_i64() | b.to_i64()),
        BinaryExtOp::BitwiseXor => Scalar::Int(a.to_i64() ^ b.to_i64()),
        BinaryExtOp::BitShiftLeft => {
            let s = b.to_i64();
            Scalar::Int(if (0..64).contains(&s) {
                a.to_i64() << s
            } else {
                0
            })
        }
        BinaryExtOp::BitShiftRight => {
            let s = b.to_i64();
            // A logical shift of the bits: unsigned u64 values above i64::MAX arrive as
            // negative i64s.
            Scalar::Int(if (0..64).contains(&s) {
                ((a.to_i64() as u64) >> s) as i64
            } else {
                0
            })
        }
        BinaryExtOp::Mod => {
            let (x, y) = (a.to_i64(), b.to_i64());
            if y == 0 {
                return Err(BackendError::Execution(
                    "Mod: integer division by zero".to_string(),
                ));
            }
            // The result takes the sign of the divisor.
            let r = x.wrapping_rem(y);
            Scalar::Int(if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            })
        }
        BinaryExtOp::Fmod => match (a, b) {
            (Scalar::Int(x), Scalar::Int(y)) => {
                if y == 0 {
                    return Err(BackendError::Execution(
                        "Mod: integer division by zero".to_string(),
                    ));
                }
                Scalar::Int(x.wrapping_rem(y))
            }
            _ => Scalar::Float(a.to_f64() % b.to_f64()),
        },
        BinaryExtOp::PRelu => match (a, b) {
            (Scalar::Int(x), Scalar::Int(s)) => {
                Scalar::Int(if x < 0 { x.wrapping_mul(s) } else { x })
            }
            _ => {
                let x = a.to_f64();
                Scalar::Float(if x < 0.0 { x * b.to_f64() } else { x })
            }
        },
    })
}

/// Where(condition, X, Y) with broadcasting.
pub(crate) fn select(
    c: &TensorView<'_>,
    x: &TensorView<'_>,
    y: &TensorView<'_>,
    out: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = out.dims().to_vec();
    let size = x.info.dtype.size();
    let cs = c.as_slice::<u8>()?;
    let (oc, ox, oy) = (
        broadcast_offsets(c.dims(), &dims),
        broadcast_offsets(x.dims(), &dims),
        broadcast_offsets(y.dims(), &dims),
    );
    for (k, ((&ic, &ix), &iy)) in oc.iter().zip(&ox).zip(&oy).enumerate() {
        let (src, at) = if cs[ic] != 0 {
            (x.data, ix)
        } else {
            (y.data, iy)
        };
        out.data[k * size..(k + 1) * size].copy_from_slice(&src[at * size..(at + 1) * size]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval1, eval_f32, f32s, tensor};
    use backplane_core::ops::{BinaryExtOp, MathOp};
    use backplane_core::{DataType, Op, Tensor};

    #[test]
    fn math_functions() {
        let x = f32s(&[4], &[-1.5, -0.5, 0.5, 2.5]);
        let y = eval_f32(&Op::Math(MathOp::Round), &[&x]);
        assert_eq!(y, [-2.0, -0.0, 0.0, 2.0]);
        let y = eval_f32(&Op::Math(MathOp::Floor), &[&x]);
        assert_eq!(y, [-2.0, -1.0, 0.0, 2.0]);
        let y = eval_f32(&Op::Math(MathOp::Elu { alpha: 2.0 }), &[&x]);
        assert!((y[0] - 2.0 * ((-1.5f32).exp() - 1.0)).abs() < 1e-6);
        assert_eq!(y[3], 2.5);
        let y = eval_f32(&Op::Math(MathOp::HardSwish), &[&x]);
        assert!((y[3] - 2.5 * (2.5 / 6.0 + 0.5)).abs() < 1e-6);
        let nan = f32s(&[3], &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        let isinf = Op::Math(MathOp::IsInf {
            detect_negative: false,
            detect_positive: true,
        });
        assert_eq!(eval1(&isinf, &[&nan]).bytes(), &[0, 1, 0]);
        assert_eq!(eval1(&Op::Math(MathOp::IsNaN), &[&nan]).bytes(), &[1, 0, 0]);
        let i = tensor(DataType::I32, &[3], &[-7.0, 0.0, 3.0]);
        let s = eval1(&Op::Math(MathOp::Sign), &[&i]);
        assert_eq!(s.as_slice::<i32>().unwrap(), &[-1, 0, 1]);
    }

    #[test]
    fn comparisons_logic_and_mod() {
        let a = f32s(&[2, 2], &[1.0, 2.0, 3.0, f32::NAN]);
        let b = f32s(&[2], &[2.0, 2.0]);
        let lt = eval1(&Op::BinaryExt(BinaryExtOp::Less), &[&a, &b]);
        assert_eq!(lt.dtype(), DataType::Bool);
        assert_eq!(lt.bytes(), &[1, 0, 0, 0]);
        let eq = eval1(&Op::BinaryExt(BinaryExtOp::Equal), &[&a, &b]);
        assert_eq!(eq.bytes(), &[0, 1, 0, 0]);
        let x = tensor(DataType::I32, &[4], &[-7.0, 7.0, -7.0, 7.0]);
        let y = tensor(DataType::I32, &[4], &[3.0, -3.0, -3.0, 3.0]);
        let m = eval1(&Op::BinaryExt(BinaryExtOp::Mod), &[&x, &y]);
        assert_eq!(m.as_slice::<i32>().unwrap(), &[2, -2, -1, 1]);
        let f = eval1(&Op::BinaryExt(BinaryExtOp::Fmod), &[&x, &y]);
        assert_eq!(f.as_slice::<i32>().unwrap(), &[-1, 1, -1, 1]);
        let zero = tensor(DataType::I32, &[1], &[0.0]);
        assert!(crate::evaluate(&Op::BinaryExt(BinaryExtOp::Mod), &[&x, &zero]).is_err());
        let t = Tensor::from_bools(vec![2], &[true, false]).unwrap();
        let u = Tensor::from_bools(vec![2], &[true, true]).unwrap();
        let xor = eval1(&Op::BinaryExt(BinaryExtOp::Xor), &[&t, &u]);
        assert_eq!(xor.bytes(), &[0, 1]);
        let sh = tensor(DataType::U8, &[2], &[1.0, 255.0]);
        let by = tensor(DataType::U8, &[2], &[3.0, 1.0]);
        let l = eval1(&Op::BinaryExt(BinaryExtOp::BitShiftLeft), &[&sh, &by]);
        assert_eq!(l.bytes(), &[8, 254]);
    }

    #[test]
    fn prelu_and_where_broadcast() {
        let x = f32s(&[2, 2], &[-1.0, 2.0, -3.0, 4.0]);
        let slope = f32s(&[2], &[0.5, 0.25]);
        let y = eval_f32(&Op::BinaryExt(BinaryExtOp::PRelu), &[&x, &slope]);
        assert_eq!(y, [-0.5, 2.0, -1.5, 4.0]);
        let c = Tensor::from_bools(vec![2], &[true, false]).unwrap();
        let other = f32s(&[1], &[9.0]);
        let y = eval_f32(&Op::Where, &[&c, &x, &other]);
        assert_eq!(y, [-1.0, 9.0, -3.0, 9.0]);
    }
}

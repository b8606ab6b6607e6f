//! Helpers for the unit tests: building tensors of any type and comparing results.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::evaluate;
use crate::ops::cast::{encode, Scalar};
use backplane_core::{DataType, Op, Tensor, TensorInfo};

/// An f32 tensor.
pub(crate) fn f32s(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), values.to_vec()).unwrap()
}

/// A tensor of any type from values given as f64 (converted like Cast would).
pub(crate) fn tensor(dtype: DataType, shape: &[usize], values: &[f64]) -> Tensor {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| encode(dtype, Scalar::Float(v)))
        .collect();
    Tensor::from_bytes(TensorInfo::new(dtype, shape.to_vec()), &bytes).unwrap()
}

/// The value [`iota`] stores at position `i`: `i`, or `i % 2` for bool; for the types too
/// narrow for that, distinct values: `i % 16` (less 8 for int4) for 4-bit integers, and the
/// float8 value whose bit pattern is `i % 120` (all finite and distinct) for float8.
pub(crate) fn value_of(dtype: DataType, i: usize) -> f64 {
    match dtype {
        DataType::Bool => (i % 2) as f64,
        DataType::U4 => (i % 16) as f64,
        DataType::I4 => (i % 16) as f64 - 8.0,
        d if d.is_float8() => {
            f64::from(backplane_core::lowp::float8_to_f32(d, (i % 120) as u8).unwrap())
        }
        _ => i as f64,
    }
}

/// A tensor whose element `i` is [`value_of`]`(dtype, i)` (keep it under 128 elements for i8).
pub(crate) fn iota(dtype: DataType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|i| value_of(dtype, i)).collect();
    tensor(dtype, shape, &values)
}

/// Asserts that element `k` of `y` is the iota value at `picks[k]`: a data-movement op took
/// exactly those input elements, in that order.
pub(crate) fn expect_picks(y: &Tensor, picks: &[usize]) {
    let expected: Vec<f64> = picks.iter().map(|&i| value_of(y.dtype(), i)).collect();
    assert_eq!(y.to_f64_vec(), expected, "{} {}", y.dtype(), y.shape());
}

/// Evaluate an op that has one output.
pub(crate) fn eval1(op: &Op, inputs: &[&Tensor]) -> Tensor {
    let mut outputs = evaluate(op, inputs).unwrap();
    assert_eq!(outputs.len(), 1);
    outputs.remove(0)
}

/// Evaluate a one-output f32 op and return its values.
pub(crate) fn eval_f32(op: &Op, inputs: &[&Tensor]) -> Vec<f32> {
    eval1(op, inputs).as_slice::<f32>().unwrap().to_vec()
}

/// Asserts `|actual - expected| <= tol * |expected|` elementwise (exact equality, including
/// infinities, and NaN against NaN also pass).
pub(crate) fn assert_close(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = a == e || (a.is_nan() && e.is_nan()) || (a - e).abs() <= tol * e.abs();
        assert!(
            ok,
            "element {i}: got {a}, expected {e}\n{actual:?}\n{expected:?}"
        );
    }
}

/// Asserts `|actual - expected| <= tol` elementwise.
pub(crate) fn assert_near(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= tol,
            "element {i}: got {a}, expected {e}\n{actual:?}\n{expected:?}"
        );
    }
}

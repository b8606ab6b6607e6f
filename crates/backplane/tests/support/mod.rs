//! Shared test helpers: the repository root and comparing tensors with tolerances. (The op
//! table runs in the backend test kit, crates/backplane-backend-tests.)
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::{DataType, Tensor};
use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compare `actual` with `expected`: same type and shape, every value within
/// `atol + rtol * |expected|`, NaN where NaN is expected, infinities equal. bf16 and float8
/// values compare as their (exact) f32 values with the given tolerances; integer types,
/// int4/uint4 included, exactly.
pub fn compare(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if actual.info().dtype != expected.info().dtype || actual.shape() != expected.shape() {
        return Err(format!(
            "got {}, expected {}",
            actual.info(),
            expected.info()
        ));
    }
    let (a, e) = (actual.to_f64_vec(), expected.to_f64_vec());
    let dtype = expected.dtype();
    let exact = !(dtype.is_float() || dtype == DataType::BF16 || dtype.is_float8());
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        let ok = if y.is_nan() {
            x.is_nan()
        } else if y.is_infinite() || exact {
            x == y
        } else {
            (x - y).abs() <= atol + rtol * y.abs()
        };
        if !ok {
            return Err(format!("element {i}: got {x}, expected {y}"));
        }
    }
    Ok(())
}

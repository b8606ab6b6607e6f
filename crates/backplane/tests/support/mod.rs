//! Shared test helpers: the repository root and comparing tensors with tolerances. (The op
//! table runs in the backend test kit, crates/backplane-backend-tests.)
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::{DataType, Tensor, TensorInfo};
use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compare `actual` with `expected` by the facade's one rule ([`backplane::compare`]).
pub fn compare(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    backplane::compare::compare(actual, expected, rtol, atol)
        .map(|_| ())
        .map_err(|m| m.message)
}

/// BERT-shaped token ids `[1, seq]`: `(i·step + seq) mod 64`, so each length (and each
/// test's `step`) gives other ids.
pub fn token_ids(seq: usize, step: usize) -> Tensor {
    let values: Vec<f64> = (0..seq).map(|i| ((i * step + seq) % 64) as f64).collect();
    Tensor::from_f64_values(TensorInfo::new(DataType::I64, vec![1, seq]), &values).unwrap()
}

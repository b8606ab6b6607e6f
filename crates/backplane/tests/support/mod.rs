//! Shared test helpers: the repository root and comparing tensors with tolerances. (The op
//! table runs in the backend test kit, crates/backplane-backend-tests.)
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::Tensor;
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

//! The SGEMM's block-wise activations against the unfused pass with the process's kernels
//! capped at the portable tier before any runs (see `sgemm_acts/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod sgemm_acts;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn sgemm_activations_on_the_portable_tier_match_the_unfused_pass() {
    assert!(
        limit_isa(Isa::Portable),
        "the tier was chosen first: {:?}",
        isa_in_use()
    );
    sgemm_acts::activations_in_the_tiles_match_the_unfused_pass();
}

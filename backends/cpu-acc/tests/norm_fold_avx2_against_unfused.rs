//! The folded input normalization of a 1×1 convolution with the process's kernels capped at
//! the avx2 tier before any runs (see `norm_fold/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod norm_fold;
mod support;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn folded_normalization_on_the_avx2_tier_matches_the_unfused_layers() {
    assert!(
        limit_isa(Isa::Avx2),
        "the tier was chosen first: {:?}",
        isa_in_use()
    );
    norm_fold::folded_normalization_matches_the_unfused_layers();
}

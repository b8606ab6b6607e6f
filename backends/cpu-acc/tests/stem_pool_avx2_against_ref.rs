//! The fused first layer and max pooling (`FusedConvMaxPool`) on the AVX2 tier (this test
//! binary caps the process's kernels at AVX2 before any runs: the channel-lanes kernels of
//! one 16-channel block as two 8-lane halves, and the pooling compiled for AVX2), against
//! CpuRef, the cases of `stem_pool_against_ref.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod stem_pool;
mod support;

use backplane_cpu_kernels::isa::{avx2_in_use, isa_in_use, limit_isa, Isa};
use support::Rng;

#[test]
fn first_layer_and_max_pool_on_the_avx2_tier_against_ref() {
    let capped = limit_isa(Isa::Avx2);
    assert!(
        capped,
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    assert_ne!(isa_in_use(), Isa::Avx512);
    if !avx2_in_use() {
        // A CPU without AVX2 runs the portable kernels, which fuse nothing here.
        return;
    }
    let mut r = Rng(4703);
    for (i, case) in stem_pool::cases().into_iter().enumerate() {
        let op = stem_pool::check(&mut r, case, i % 3 == 2, i % 4 != 3);
        assert_eq!(op, "FusedConvMaxPool", "{case:?}");
    }
}

//! The channels-last int8 depthwise + 1×1 pair (`QLinearConvPair`) on the avx2 tier (this
//! test binary caps the process's kernels before any runs): the same bytes as the two
//! layers apart at one, two and three threads, within one quantum of CpuRef
//! ([`support::qpair::pairs_give_the_two_layers_bytes`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn depthwise_and_pointwise_pairs_on_the_avx2_tier_give_the_two_layers_bytes() {
    let capped = limit_isa(Isa::Avx2);
    assert!(
        capped,
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    assert_ne!(isa_in_use(), Isa::Avx512);
    support::qpair::pairs_give_the_two_layers_bytes();
}

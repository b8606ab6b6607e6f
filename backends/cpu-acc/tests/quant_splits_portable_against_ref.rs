//! The channels-last int8 convolution's thread splits on the portable tier (this test binary
//! caps the process's kernels before any runs): the same bytes at one, two and three
//! threads, within one quantum of CpuRef and equal to the NCHW layer
//! ([`support::qconv::splits_give_equal_bytes`]; the default tier runs them in
//! `quant_against_ref.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn channels_last_gemm_splits_on_the_portable_tier_give_equal_bytes() {
    let capped = limit_isa(Isa::Portable);
    assert!(
        capped,
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    assert_ne!(isa_in_use(), Isa::Avx512);
    support::qconv::splits_give_equal_bytes();
}

//! Composed int8 batch norms on the avx2 tier (this test binary caps the process's kernels
//! before any runs): the bytes of CpuRef's chain ([`support::bn::batch_norms_equal_the_chain`];
//! the default tier runs it in `quant_lookup_mean_against_ref.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn batch_norms_on_the_avx2_tier_equal_the_chain() {
    let capped = limit_isa(Isa::Avx2);
    assert!(
        capped,
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    assert_eq!(isa_in_use(), Isa::Avx2);
    support::bn::batch_norms_equal_the_chain();
}

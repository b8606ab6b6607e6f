//! Winograd convolutions with a fused activation against CpuRef with the kernels capped at
//! the Portable tier for this test binary (see `winograd_acts`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod winograd_acts;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn winograd_convolutions_with_activations_on_the_portable_tier_against_ref() {
    assert!(
        limit_isa(Isa::Portable),
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    winograd_acts::check_all();
}

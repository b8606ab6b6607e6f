//! Convolutions with a window on tiny output planes against CpuRef with the kernels capped
//! at the Portable tier for this test binary (see `tiny_planes`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod tiny_planes;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn tiny_plane_convolutions_on_the_portable_tier_against_ref() {
    assert!(
        limit_isa(Isa::Portable),
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    tiny_planes::check_all();
    tiny_planes::check_fused();
}

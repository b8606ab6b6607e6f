//! Convolutions with a window on tiny output planes against CpuRef with the kernels capped
//! at the Avx2 tier for this test binary (see `tiny_planes`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod tiny_planes;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn tiny_plane_convolutions_on_the_avx2_tier_against_ref() {
    assert!(
        limit_isa(Isa::Avx2),
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    tiny_planes::check_all();
    tiny_planes::check_fused();
}

//! Pointwise convolutions ending in a narrow GEMM panel against CpuRef with the kernels
//! capped at the Portable tier for this test binary (see `narrow_panel`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod narrow_panel;
mod support;

use backplane_cpu_kernels::isa::{isa_in_use, limit_isa, Isa};

#[test]
fn narrow_last_panel_pointwise_on_the_portable_tier_against_ref() {
    assert!(
        limit_isa(Isa::Portable),
        "the tier was chosen before this test: {:?}",
        isa_in_use()
    );
    narrow_panel::check_all();
}

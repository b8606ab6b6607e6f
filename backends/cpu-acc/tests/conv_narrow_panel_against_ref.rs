//! Pointwise convolutions ending in a narrow GEMM panel against CpuRef on the default ISA
//! tier (AVX-512 where the machine has it); the AVX2 and portable tiers run the same shapes
//! in `conv_narrow_panel_avx2_against_ref.rs` and `conv_narrow_panel_portable_against_ref.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod narrow_panel;
mod support;

#[test]
fn narrow_last_panel_pointwise_against_ref() {
    narrow_panel::check_all();
}

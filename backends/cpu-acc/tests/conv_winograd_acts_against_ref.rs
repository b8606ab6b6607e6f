//! Winograd convolutions with a fused activation against CpuRef on the tier the CPU offers
//! (AVX-512 on the development host; see `winograd_acts`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod winograd_acts;

#[test]
fn winograd_convolutions_with_activations_against_ref() {
    winograd_acts::check_all();
}

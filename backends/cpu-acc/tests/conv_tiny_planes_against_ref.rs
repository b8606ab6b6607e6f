//! Convolutions with a window on tiny output planes against CpuRef on the tier the CPU
//! offers (AVX-512 on the development host; see `tiny_planes`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
mod tiny_planes;

#[test]
fn tiny_plane_convolutions_against_ref() {
    tiny_planes::check_all();
}

#[test]
fn tiny_plane_convolutions_with_an_activation_against_ref() {
    tiny_planes::check_fused();
}

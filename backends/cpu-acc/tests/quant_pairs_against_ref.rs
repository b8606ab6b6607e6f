//! The channels-last int8 depthwise + 1×1 pair (`QLinearConvPair`) on the process's int8
//! tier (AVX-512 VNNI where the CPU has it): the same bytes as the two layers apart at one,
//! two and three threads, within one quantum of CpuRef
//! ([`support::qpair::pairs_give_the_two_layers_bytes`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

#[test]
fn depthwise_and_pointwise_pairs_give_the_two_layers_bytes() {
    support::qpair::pairs_give_the_two_layers_bytes();
}

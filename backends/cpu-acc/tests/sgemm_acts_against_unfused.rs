//! The SGEMM's block-wise activations against the unfused pass on the process's best tier
//! (AVX-512 where the CPU has it); `sgemm_acts_avx2_against_unfused.rs` and
//! `sgemm_acts_portable_against_unfused.rs` run the same checks capped to the lesser tiers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod sgemm_acts;

#[test]
fn sgemm_activations_on_the_best_tier_match_the_unfused_pass() {
    sgemm_acts::activations_in_the_tiles_match_the_unfused_pass();
}

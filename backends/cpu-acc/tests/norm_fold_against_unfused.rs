//! The folded input normalization of a 1×1 convolution on the default tier (see
//! `norm_fold/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod norm_fold;
mod support;

#[test]
fn folded_normalization_matches_the_unfused_layers() {
    norm_fold::folded_normalization_matches_the_unfused_layers();
}

#[test]
fn layers_the_fold_does_not_fit_stay_apart() {
    norm_fold::layers_the_fold_does_not_fit_stay_apart();
}

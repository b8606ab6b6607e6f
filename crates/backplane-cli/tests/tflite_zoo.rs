//! Models users bring (testdata/tflite/zoo, from scripts/gen_tflite_zoo.py) through
//! `backplane run --compare`, as a user would: a trained mediapipe model with f16 weights
//! and a net with sparse weights, PRELU and DEPTH_TO_SPACE; the int8 EfficientNetB0 head as
//! one int8 region on CpuAcc.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, text};

/// Run the case on CpuRef and on CpuAcc,CpuRef and compare with LiteRT's outputs.
fn run_matches(dir: &str, input: &str, atol: &str) {
    for backends in ["CpuRef", "CpuAcc,CpuRef"] {
        let o = backplane(&[
            "run",
            &format!("{dir}/model.tflite"),
            "--backends",
            backends,
            "--input",
            &format!("{input}={dir}/input_0.npy"),
            "--compare",
            dir,
            "--rtol",
            "1e-4",
            "--atol",
            atol,
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{dir} on {backends}: {out}\n{err}");
        assert!(out.contains("every output matches"), "{out}");
    }
}

/// The trained face detector's box regressors cancel large terms: LiteRT's own kernels
/// disagree by 4.6e-5 there (its litert_spread.txt), so atol is 1e-4 (about twice that).
#[test]
fn a_trained_mediapipe_model_matches_litert() {
    run_matches(
        "testdata/tflite/zoo/mp_face_detection_short_range",
        "input",
        "1e-4",
    );
}

#[test]
fn sparse_weights_prelu_and_depth_to_space_match_litert() {
    run_matches(
        "testdata/tflite/zoo/sparse_features_f32",
        "serving_default_image:0",
        "1e-5",
    );
}

/// mediapipe's trained selfie segmentation ends in its custom `Convolution2DTransposeBias`
/// (a transposed convolution with bias, options in TFLite's C struct): imported, it matches
/// LiteRT on both backends.
#[test]
fn mediapipe_custom_transposed_convolution_matches_litert() {
    run_matches(
        "testdata/tflite/zoo/mp_selfie_segmentation_landscape",
        "input_1",
        "1e-5",
    );
}

/// The int8 EfficientNetB0 head (squeeze-excite blocks, SiLU as LOGISTIC and MUL, MEAN, the
/// gate's broadcasting MUL) runs on CpuAcc as int8 layers in one channels-last region: no
/// DequantizeLinear or QuantizeLinear is left, only the region's way out is a transpose
/// (the way in is absorbed), and the output is LiteRT's to the byte on both backends.
#[test]
fn the_int8_efficientnet_head_runs_as_one_int8_region_and_matches_litert() {
    let dir = "testdata/tflite/zoo/efficientnet_b0_head_int8";
    let o = backplane(&["inspect", &format!("{dir}/model.tflite")]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let after = out
        .split("layers after optimization")
        .nth(1)
        .expect("the optimized layers");
    let count = |op: &str| {
        after
            .lines()
            .filter(|l| l.split_whitespace().any(|w| w == op))
            .count()
    };
    assert_eq!(count("DequantizeLinear"), 0, "{after}");
    assert_eq!(count("QuantizeLinear"), 0, "{after}");
    assert!(count("Transpose") <= 2, "{after}");
    for op in [
        "QLinearLookup",
        "QLinearMean",
        "QLinearBinary",
        "QLinearConv",
    ] {
        assert!(count(op) > 0, "{op}: {after}");
    }
    run_matches(dir, "serving_default_keras_tensor:0", "0");
}

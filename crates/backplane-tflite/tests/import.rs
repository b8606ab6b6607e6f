//! The importer on the committed test models (testdata/tflite): what a network looks like,
//! the listing of unsupported operators, and malformed files (truncated, corrupted bytes)
//! giving errors, never panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane_core::quant::Requantization;
use backplane_tflite::{import_bytes, ImportOptions, Int8Requant, TfliteError};
use std::path::PathBuf;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tflite")
}

fn models() -> Vec<Vec<u8>> {
    [
        "mobile_blocks_f32",
        "mobile_blocks_int8",
        "dense_f32",
        "dense_int8",
        "zoo/sparse_features_f32",
        "zoo/sparse_features_int8",
    ]
    .iter()
    .map(|m| std::fs::read(testdata().join(m).join("model.tflite")).unwrap())
    .collect()
}

/// Pruned weights stored sparse behind DENSIFY, PRELU and DEPTH_TO_SPACE (the zoo's
/// sparse_features cases): the weights are densified into constants at read time, so no
/// layer computes them, and the operators lower to PRelu and a reshape-transpose-reshape.
#[test]
fn sparse_weights_become_dense_constants() {
    for case in ["zoo/sparse_features_f32", "zoo/sparse_features_int8"] {
        let bytes = std::fs::read(testdata().join(case).join("model.tflite")).unwrap();
        let net = import_bytes(&bytes, &ImportOptions::default()).unwrap();
        let ops: Vec<&str> = net.layers().iter().map(|l| l.op.name()).collect();
        assert!(ops.contains(&"PRelu"), "{case}: {ops:?}");
        assert_eq!(
            ops.iter().filter(|&&o| o == "Conv").count(),
            2,
            "{case}: {ops:?}"
        );
        for l in net.layers().iter().filter(|l| l.op.name() == "Conv") {
            // The weights, or the stored integers an int8 model's DequantizeLinear reads.
            let w = net
                .tensor(l.inputs[1])
                .constant()
                .cloned()
                .unwrap_or_else(|| {
                    let producer = net
                        .layers()
                        .iter()
                        .find(|p| p.outputs.contains(&l.inputs[1]))
                        .unwrap();
                    assert_eq!(producer.op.name(), "DequantizeLinear", "{case}");
                    net.tensor(producer.inputs[0]).constant().cloned().unwrap()
                });
            // Four in five weights were pruned to zero before conversion.
            let zeros = w.to_f64_vec().iter().filter(|&&v| v == 0.0).count();
            assert!(
                zeros * 2 > w.shape().elements(),
                "{case}: {zeros} zeros of {}",
                w.shape().elements()
            );
        }
    }
}

#[test]
fn committed_models_import_with_their_inputs_and_outputs() {
    for bytes in models() {
        assert!(backplane_tflite::is_tflite(&bytes));
        let net = import_bytes(&bytes, &ImportOptions::default()).unwrap();
        assert_eq!(net.inputs().len(), 1);
        assert_eq!(net.outputs().len(), 1);
        net.validate().unwrap();
    }
}

#[test]
fn every_unsupported_operator_is_listed_at_once() {
    let bytes = std::fs::read(testdata().join("unsupported.tflite")).unwrap();
    match import_bytes(&bytes, &ImportOptions::default()) {
        Err(TfliteError::UnsupportedOps(ops)) => {
            let names: Vec<&str> = ops.iter().map(|o| o.op_type.as_str()).collect();
            assert_eq!(names, ["FLOOR", "CUMSUM"], "{ops:?}");
        }
        other => panic!("expected the unsupported operators, got {other:?}"),
    }
}

#[test]
fn other_files_are_decode_errors() {
    for bytes in [&b""[..], b"TFL3", b"\x08\0\0\0TFL3", b"\x00\0\0\0ONNX....."] {
        let e = import_bytes(bytes, &ImportOptions::default()).unwrap_err();
        assert!(matches!(e, TfliteError::Decode(_)), "{e}");
    }
}

/// SplitMix64, for reproducible mutations.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn truncated_and_mutated_models_fail_cleanly() {
    let mut state = 7u64;
    let mut errors = 0;
    for bytes in models() {
        // Truncations at a stride, then random byte mutations: each must import or fail
        // with an error (a panic fails the test).
        for len in (0..bytes.len()).step_by(97) {
            if import_bytes(&bytes[..len], &ImportOptions::default()).is_err() {
                errors += 1;
            }
        }
        for _ in 0..600 {
            let mut m = bytes.clone();
            for _ in 0..1 + next(&mut state) % 4 {
                let i = (next(&mut state) as usize) % m.len();
                m[i] = next(&mut state) as u8;
            }
            if import_bytes(&m, &ImportOptions::default()).is_err() {
                errors += 1;
            }
        }
    }
    // Most mutations land in weights (still a valid model); many must not.
    assert!(errors > 100, "only {errors} mutated models were refused");
}

/// The requantization rule each QuantizeLinear of `bytes` imported with `options` carries.
fn rules(bytes: &[u8], options: &ImportOptions) -> Vec<Requantization> {
    let net = import_bytes(bytes, options).unwrap();
    net.layers()
        .iter()
        .filter_map(|l| match l.op {
            backplane_core::Op::QuantizeLinear { requant, .. } => Some(requant),
            _ => None,
        })
        .collect()
}

/// By default the importer follows LiteRT: a model with a convolution whose requantization
/// scale reaches 256 (mobilenet_v3_small's squeeze-excite head, which LiteRT's XNNPACK
/// delegate refuses) gets the fixed-point rule of LiteRT's builtin kernels on every quantized
/// output, other int8 models the f32 rule; the f32 and fixed-point choices apply to any model.
#[test]
fn int8_requantization_follows_the_kernels_litert_runs() {
    let builtin = std::fs::read(testdata().join("q8_builtin_int8/model.tflite")).unwrap();
    let xnnpack = std::fs::read(testdata().join("mobile_blocks_int8/model.tflite")).unwrap();
    let with = |int8_requant| ImportOptions {
        int8_requant,
        ..Default::default()
    };
    let all =
        |r: &[Requantization], want: Requantization| !r.is_empty() && r.iter().all(|&x| x == want);
    // The default follows LiteRT: fixed point where XNNPACK refuses the model, f32 elsewhere.
    let default = ImportOptions::default();
    assert_eq!(default.int8_requant, Int8Requant::Litert);
    assert!(all(&rules(&builtin, &default), Requantization::FixedPoint));
    assert!(all(&rules(&xnnpack, &default), Requantization::F32));
    // f32 asked for: every model.
    let f32_rule = with(Int8Requant::F32);
    assert!(all(&rules(&builtin, &f32_rule), Requantization::F32));
    let fixed = with(Int8Requant::FixedPoint);
    assert!(all(&rules(&xnnpack, &fixed), Requantization::FixedPoint));
}

/// Keras's squeeze-excite pool (testdata/tflite/squeeze_excite_*, scripts/gen_tflite_models.py):
/// a MEAN over H and W without kept axes whose only reader is a RESHAPE to [N, 1, 1, C]
/// imports as one ReduceMean keeping its axes, whose NCHW [N, C, 1, 1] output the squeeze
/// convolution reads with no Reshape or Transpose between. The MEAN also read by a
/// FULLY_CONNECTED keeps its [N, C] form (its RESHAPE to [N, 1, 1, C] is written
/// channels-first directly, no transpose), and the head's MEAN stays as it is.
#[test]
fn squeeze_excite_pool_keeps_its_axes_for_the_reshape() {
    use backplane_core::ops::ReduceDesc;
    use backplane_core::Op;
    for case in ["squeeze_excite_f32", "squeeze_excite_int8"] {
        let bytes = std::fs::read(testdata().join(case).join("model.tflite")).unwrap();
        let net = import_bytes(&bytes, &ImportOptions::default()).unwrap();
        let layers = net.layers();
        let count = |name: &str| layers.iter().filter(|l| l.op.name() == name).count();
        let ops: Vec<&str> = layers.iter().map(|l| l.op.name()).collect();
        // The input's transpose to NCHW only; one Reshape of an image (the second pool's; the
        // others reshape the shape arithmetic's scalars, not folded without an evaluator).
        assert_eq!(count("Transpose"), 1, "{case}: {ops:?}");
        let images = |l: &&backplane_core::network::Layer| {
            l.op.name() == "Reshape" && net.tensor(l.outputs[0]).info.shape.dims().len() == 4
        };
        assert_eq!(layers.iter().filter(images).count(), 1, "{case}: {ops:?}");
        let means: Vec<(bool, Vec<usize>)> = layers
            .iter()
            .filter_map(|l| match &l.op {
                Op::Reduce(ReduceDesc { keepdims, .. }) => Some((
                    *keepdims,
                    net.tensor(l.outputs[0]).info.shape.dims().to_vec(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            means,
            [
                (true, vec![1, 24, 1, 1]),
                (false, vec![1, 8]),
                (false, vec![1, 8])
            ],
            "{case}"
        );
        // The kept-axes mean (quantized, in the int8 model) feeds the squeeze convolution.
        let mean = layers
            .iter()
            .find(|l| matches!(l.op, Op::Reduce(ReduceDesc { keepdims: true, .. })))
            .unwrap();
        let mut t = mean.outputs[0];
        let conv = loop {
            let reader = layers.iter().find(|l| l.inputs.contains(&t)).unwrap();
            match reader.op.name() {
                "QuantizeLinear" | "DequantizeLinear" => t = reader.outputs[0],
                _ => break reader,
            }
        };
        assert_eq!(conv.op.name(), "Conv", "{case}");
        let reshaped = layers.iter().find(images).unwrap();
        assert_eq!(
            net.tensor(reshaped.outputs[0]).info.shape.dims(),
            [1, 8, 1, 1],
            "{case}"
        );
    }
}

//! An ONNX model in ONNX Runtime's QOperator format (QLinearConv, QLinearMatMul; made by
//! scripts/gen_qoperator_model.py with onnxruntime's outputs beside it) through `backplane
//! run` and `inspect`: its layers run on CpuAcc's int8 kernels and match onnxruntime.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::section_lines;

const DIR: &str = "testdata/qoperator";

/// The lines of `inspect`'s "layers after optimization" section.
fn layers_after(args: &[&str]) -> Vec<String> {
    section_lines(args, "layers after optimization", "tensor memory")
}

#[test]
fn qoperator_layers_run_on_cpu_acc_as_int8() {
    let model = format!("{DIR}/model.onnx");
    let lines = layers_after(&["inspect", &model]);
    let all = lines.join("\n");
    // Three QLinearConv nodes become CpuAcc's int8 convolution, channels-last (8×8 pixels
    // of 16 and 24 channels, bytes; the depthwise one and the 1×1 after it as one pair),
    // the QLinearMatMul its int8 product.
    let int8_conv: usize = lines
        .iter()
        .filter(|l| l.contains("QLinearConv") && l.contains("CpuAcc") && l.contains("-> u8["))
        .map(|l| if l.contains("QLinearConvPair") { 2 } else { 1 })
        .sum();
    assert_eq!(int8_conv, 3, "{all}");
    assert!(all.contains("QLinearConvPair"), "{all}");
    assert!(
        lines.iter().any(|l| l.contains("QLinearGemm")
            && l.contains("CpuAcc")
            && l.contains("-> u8[1x10]")),
        "{all}"
    );
    // No f32 convolution, product or requantizing Mul is left.
    for op in [" Conv ", " MatMul ", " Mul ", " Cast "] {
        assert!(!all.contains(op), "{op}: {all}");
    }
    // The QDQ chain on CpuRef keeps f32 layers: the int8 layers are CpuAcc's doing.
    let on_ref = layers_after(&["inspect", &model, "--backends", "CpuRef"]).join("\n");
    assert!(on_ref.contains(" Conv "), "{on_ref}");
}

#[test]
fn qoperator_model_matches_onnxruntime() {
    let model = format!("{DIR}/model.onnx");
    // CpuRef computes the exact integer chain: equal to onnxruntime; CpuAcc's folded layers
    // compute the same operations, the QLinearMatMul within one quantum.
    common::assert_quantized_outputs_match(&model, DIR);
}

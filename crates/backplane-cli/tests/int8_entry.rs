//! Both ends of CpuAcc's channels-last int8 region on an ONNX QDQ model as ONNX Runtime's
//! quantizer writes a classifier (made by scripts/gen_qdq_entry_model.py with onnxruntime's
//! outputs beside it): the f32 image's QuantizeLinear becomes one quantization straight into
//! the channels-last layout, and the `DequantizeLinear → GlobalAveragePool → QuantizeLinear`
//! after the last convolution is an int8 mean of the channels-last tensor, so no layer
//! transposes; outputs match onnxruntime within one quantum.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::section_lines;

const DIR: &str = "testdata/qdq_entry";

/// The lines of `inspect`'s "layers after optimization" section.
fn layers_after(args: &[&str]) -> Vec<String> {
    section_lines(
        args,
        "layers after optimization",
        "fusions and substitutions",
    )
}

#[test]
fn quantized_image_enters_and_pooling_leaves_the_region_without_transposes() {
    let model = format!("{DIR}/model.onnx");
    let lines = layers_after(&["inspect", &model]);
    let all = lines.join("\n");
    assert!(
        lines.iter().any(|l| l.contains("QuantizeToNhwc")
            && l.contains("CpuAcc")
            && l.contains("-> i8[1x13x11x3]")),
        "{all}"
    );
    // Three int8 convolutions; the depthwise one and the 1×1 after it run as one pair.
    let convs: usize = lines
        .iter()
        .filter(|l| l.contains("QLinearConv") && l.contains("CpuAcc"))
        .map(|l| if l.contains("QLinearConvPair") { 2 } else { 1 })
        .sum();
    assert_eq!(convs, 3, "{all}");
    assert!(all.contains("QLinearConvPair"), "{all}");
    for op in ["Transpose", "GlobalAveragePool", " Conv "] {
        assert!(!all.contains(op), "{op}: {all}");
    }
    // The pool and its quantization fold into CpuAcc's int8 mean over the channels-last
    // pixels.
    assert!(all.contains("QLinearMean"), "{all}");
}

#[test]
fn qdq_entry_model_matches_onnxruntime() {
    let model = format!("{DIR}/model.onnx");
    // CpuRef's folded integer convolutions equal onnxruntime's bytes; CpuAcc within a
    // quantum.
    common::assert_quantized_outputs_match(&model, DIR);
}

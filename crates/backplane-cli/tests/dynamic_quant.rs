//! A transformer feed-forward block quantized by ONNX Runtime's `quantize_dynamic`
//! (DynamicQuantizeLinear, MatMulInteger with int8 weights; made by
//! scripts/gen_dynamic_quant_model.py with onnxruntime's outputs beside it) through `backplane
//! inspect` and `run`: every layer runs on CpuAcc, each MatMulInteger with its dequantization
//! as one integer product, and the outputs match onnxruntime's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::section_lines;

const DIR: &str = "testdata/dynamic_quant";

#[test]
fn dynamic_quantization_runs_on_cpu_acc_as_integer_products() {
    let model = format!("{DIR}/model.onnx");
    let lines = section_lines(
        &["inspect", &model],
        "layers after optimization",
        "tensor memory",
    );
    let all = lines.join("\n");
    let on = |op: &str| {
        lines
            .iter()
            .filter(|l| l.contains(op) && l.contains("CpuAcc"))
            .count()
    };
    assert_eq!(on("DynamicQuantizeLinear"), 2, "{all}");
    // The product, the Cast of its sums, the scale's Mul and the bias's Add: one f32 layer.
    let products = lines
        .iter()
        .filter(|l| l.contains("MatMulInteger ") && l.contains("CpuAcc") && l.contains("-> f32["))
        .count();
    assert_eq!(products, 2, "{all}");
    assert!(!all.contains("CpuRef"), "{all}");
    for op in [" MatMul ", " Cast ", " Sub "] {
        assert!(!all.contains(op), "{op}: {all}");
    }
}

#[test]
fn dynamic_quantization_matches_onnxruntime() {
    let model = format!("{DIR}/model.onnx");
    for backends in ["CpuAcc,CpuRef", "CpuRef"] {
        common::assert_outputs_match(
            &[
                "run",
                &model,
                "--backends",
                backends,
                "--input",
                &format!("x={DIR}/input_0.npy"),
                "--compare",
                DIR,
            ],
            backends,
        );
    }
}

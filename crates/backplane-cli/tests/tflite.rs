//! TFLite models through `backplane run`, `inspect` and `bench`, as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, text};

#[test]
fn run_compares_a_tflite_model_with_litert() {
    let dir = "testdata/tflite/mobile_blocks_f32";
    for backends in ["CpuRef", "CpuAcc,CpuRef"] {
        common::assert_outputs_match(
            &[
                "run",
                &format!("{dir}/model.tflite"),
                "--backends",
                backends,
                "--input",
                &format!("serving_default_image:0={dir}/input_0.npy"),
                "--compare",
                dir,
                "--rtol",
                "1e-4",
                "--atol",
                "1e-5",
            ],
            backends,
        );
    }
}

#[test]
fn inspect_shows_a_quantized_input() {
    let o = backplane(&["inspect", "testdata/tflite/mobile_blocks_int8/model.tflite"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("input  'serving_default_image:0' i8"), "{out}");
    assert!(out.contains("Conv"), "{out}");
}

#[test]
fn bench_runs_an_int8_model() {
    let o = backplane(&[
        "bench",
        "testdata/tflite/dense_int8/model.tflite",
        "--generate",
        "random",
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("latency over 3 executions"), "{out}");
}

#[test]
fn unsupported_operators_are_listed_with_exit_code_4() {
    let o = backplane(&[
        "run",
        "testdata/tflite/unsupported.tflite",
        "--generate",
        "random",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(4), "{out}\n{err}");
    assert!(err.contains("FLOOR") && err.contains("CUMSUM"), "{err}");
}

#[test]
fn inspect_shows_int8_convolutions_running_channels_last() {
    let model = "testdata/tflite/mobile_blocks_int8/model.tflite";
    let o = backplane(&["inspect", model]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let after = out
        .split("layers after optimization")
        .nth(1)
        .unwrap_or_default();
    // The image's NHWC → NCHW transpose is gone: the first convolutions read the model's
    // NHWC input and write NHWC (12×12 pixels of 8 channels).
    assert!(!after.contains("i8[1x3x24x24]"), "{after}");
    assert!(
        after
            .lines()
            .any(|l| l.contains("QLinearConv") && l.contains("-> i8[1x12x12x8]")),
        "{after}"
    );
    // The residual Add and the int8 HARD_SWISH table after it stay in that region, though
    // the candidate region with the AVERAGE_POOL_2D after them was not convex (an f32
    // MAX_POOL_2D reads the same tensor): it is cut back, not dropped.
    for op in ["QLinearBinary", "QLinearLookup"] {
        assert!(
            after
                .lines()
                .any(|l| l.contains(op) && l.contains("-> i8[1x12x12x8]")),
            "{op}: {after}"
        );
    }
    // The option that keeps every layer NCHW brings the transpose back.
    let o = backplane(&["inspect", model, "--backend-option", "CpuAcc:nhwc=off"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let after = out
        .split("layers after optimization")
        .nth(1)
        .unwrap_or_default();
    assert!(
        after.contains("Transpose") && after.contains("i8[1x3x24x24]"),
        "{after}"
    );
    assert!(
        after
            .lines()
            .any(|l| l.contains("QLinearConv") && l.contains("-> i8[1x8x12x12]")),
        "{after}"
    );
}

#[test]
fn int8_fully_connected_layers_fold_and_match_litert() {
    let dir = "testdata/tflite/dense_int8";
    let model = format!("{dir}/model.tflite");
    let o = backplane(&["inspect", &model]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let after = out
        .split("layers after optimization")
        .nth(1)
        .unwrap_or_default();
    // The quantized FULLY_CONNECTED layers run as integer GEMMs (no f32 Gemm between a
    // DequantizeLinear and a QuantizeLinear).
    assert!(
        after
            .lines()
            .any(|l| l.contains("QLinearGemm") && l.contains("-> i8[8x5]")),
        "{after}"
    );
    // Within one quantum of LiteRT.
    common::assert_outputs_match(
        &[
            "run",
            &model,
            "--backends",
            "CpuAcc,CpuRef",
            "--input",
            &format!("serving_default_seq:0={dir}/input_0.npy"),
            "--compare",
            dir,
            "--atol",
            "1",
        ],
        "int8 fully connected layers against LiteRT",
    );
}

/// CpuRef alone computes the int8 MobileNetV2 stem with LiteRT's integer semantics: its
/// quantized convolutions fold into CpuRef's integer layers, and every output byte equals
/// LiteRT's (the case holds a sum that one quantum separates from the f32 chain's).
#[test]
fn cpu_ref_runs_the_int8_stem_exactly_as_litert() {
    let dir = "testdata/tflite/mobilenet_v2_stem_int8";
    let model = format!("{dir}/model.tflite");
    let o = backplane(&["inspect", &model, "--backends", "CpuRef"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let after = out
        .split("layers after optimization")
        .nth(1)
        .unwrap_or_default();
    let folded = after
        .lines()
        .filter(|l| l.contains("QLinearConv") && l.contains("CpuRef"))
        .count();
    assert!(folded >= 2, "{after}");
    let o = backplane(&[
        "run",
        &model,
        "--backends",
        "CpuRef",
        "--input",
        &format!("serving_default_keras_tensor_39:0={dir}/input_0.npy"),
        "--compare",
        dir,
        "--rtol",
        "0",
        "--atol",
        "0",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("every output matches (rtol 0, atol 0)"),
        "{out}"
    );
}

/// `run MODEL --backends BACKENDS --input INPUT=DIR/input_0.npy --compare DIR --rtol 0
/// --atol 0` followed by `extra`: a run whose every output byte must equal the stored one.
fn exact_run(model: &str, backends: &str, input: &str, dir: &str, extra: &[&str]) -> Vec<String> {
    let x = format!("{input}={dir}/input_0.npy");
    let mut args: Vec<String> = [
        "run",
        model,
        "--backends",
        backends,
        "--input",
        &x,
        "--compare",
        dir,
        "--rtol",
        "0",
        "--atol",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The CLI on `args`, as `backplane` takes them.
fn run_args(args: &[String]) -> std::process::Output {
    backplane(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// [`common::assert_outputs_match`] on `args`, named by them.
fn assert_exact(args: &[String]) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    common::assert_outputs_match(&refs, &args.join(" "));
}

/// CpuAcc computes the int8 models' bytes exactly as LiteRT on both of its int8 GEMM paths:
/// the best tier (on a CPU with AVX-512 VNNI, the `vpdpbusd` byte GEMM for the convolutions
/// and fully connected layers) and the AVX2 tier's 16-bit pair GEMM (`isa=avx2`, which also
/// keeps a CPU without AVX2 on its portable tier). `backplane backends` names the int8 path.
#[test]
fn cpu_acc_int8_layers_match_litert_exactly_on_every_gemm_path() {
    let o = backplane(&["backends"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    eprintln!(
        "int8 path: {}",
        out.lines().find(|l| l.contains("Int8Isa")).unwrap_or("?")
    );
    let cases = [
        (
            "mobilenet_v2_stem_int8",
            "serving_default_keras_tensor_39:0",
        ),
        ("mobile_blocks_int8", "serving_default_image:0"),
        ("dense_int8", "serving_default_seq:0"),
    ];
    for (name, input) in cases {
        let dir = format!("testdata/tflite/{name}");
        let model = format!("{dir}/model.tflite");
        for extra in [&[][..], &["--backend-option", "CpuAcc:isa=avx2"]] {
            assert_exact(&exact_run(&model, "CpuAcc,CpuRef", input, &dir, extra));
        }
    }
}

/// int8 HARD_SWISH and AVERAGE_POOL_2D (2×2 VALID, 3×3 SAME at strides 1 and 2, a
/// whole-image window) by TFLite's integer rules (issue 31): the importer writes them as
/// `Lookup` and `IntegerAveragePool`, CpuAcc runs them in its int8 region, and every output
/// byte equals LiteRT's on CpuRef and on CpuAcc (the f32 chain was one quantum off in 91 of
/// 867 bytes of this case).
#[test]
fn int8_hard_swish_and_average_pools_equal_litert() {
    let dir = "testdata/tflite/q8_rules_int8";
    let model = format!("{dir}/model.tflite");
    let o = backplane(&["inspect", &model, "--backends", "CpuAcc,CpuRef"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let after = out
        .split("layers after optimization")
        .nth(1)
        .unwrap_or_default();
    let on_acc = |kind: &str| {
        after
            .lines()
            .filter(|l| l.contains(kind) && l.contains("CpuAcc"))
            .count()
    };
    assert_eq!(on_acc("QLinearLookup"), 2, "{after}");
    assert_eq!(on_acc("QLinearPool"), 4, "{after}");
    for backends in ["CpuRef", "CpuAcc,CpuRef"] {
        for extra in [&[][..], &["--backend-option", "CpuAcc:isa=avx2"]] {
            let input = "serving_default_image:0";
            assert_exact(&exact_run(&model, backends, input, dir, extra));
        }
    }
}

/// mobilenet_v3_small's int8 squeeze-excite head, which LiteRT's XNNPACK delegate refuses (a
/// convolution's requantization scale reaches 256), so LiteRT runs its builtin kernels
/// (issue 31). Following LiteRT (`--int8-requant litert`, the default) the importer picks
/// their fixed-point rules (-v says so), and every output byte equals LiteRT's on CpuRef and
/// on CpuAcc, at every CpuAcc tier, with every layer on CpuAcc (its int8 layers follow the
/// fixed-point rules: none is left to CpuRef). With `--int8-requant f32` the outputs differ.
#[test]
fn int8_builtin_kernel_rules_equal_litert() {
    let dir = "testdata/tflite/q8_builtin_int8";
    let model = format!("{dir}/model.tflite");
    let run = |backends: &str, extra: &[&str]| {
        exact_run(
            &model,
            backends,
            "serving_default_keras_tensor:0",
            dir,
            extra,
        )
    };
    for backends in ["CpuRef", "CpuAcc,CpuRef"] {
        for option in [None, Some("CpuAcc:isa=avx2"), Some("CpuAcc:isa=portable")] {
            let mut extra: Vec<&str> = vec!["--int8-requant", "litert"];
            if let Some(o) = option {
                extra.extend(["--backend-option", o]);
            }
            assert_exact(&run(backends, &extra));
        }
    }
    let o = run_args(&run("CpuRef", &["--int8-requant", "litert", "-v"]));
    let (_, err) = text(&o);
    assert!(err.contains("int8 requantization: fixed-point"), "{err}");
    // CpuAcc takes every layer of the fixed-point model: the run's placement names no CpuRef.
    let o = run_args(&run("CpuAcc,CpuRef", &["--int8-requant", "litert"]));
    let (out, err) = text(&o);
    let placement = format!("{out}{err}");
    let line = placement
        .lines()
        .find(|l| l.starts_with("backends:"))
        .unwrap_or_else(|| panic!("no placement line: {placement}"));
    assert!(
        line.contains("CpuAcc") && !line.contains("CpuRef"),
        "{line}"
    );
    // The default follows LiteRT too; the f32 rule, asked for, differs (exit code 3) and -v
    // says why.
    assert_exact(&run("CpuAcc,CpuRef", &[]));
    let o = run_args(&run("CpuAcc,CpuRef", &["--int8-requant", "f32", "-v"]));
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        err.contains("f32 as asked, while LiteRT runs this model on its builtin kernels"),
        "{err}"
    );
}

//! `backplane bench` and `backplane inspect`, driven as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::backplane;

use std::process::Output;

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn bench_reports_percentiles_throughput_and_memory() {
    let out = stdout(&backplane(&[
        "bench",
        "testdata/e2e/convnet.onnx",
        "--generate",
        "random",
        "--iterations",
        "20",
        "--warmup",
        "2",
        "--quiet",
    ]));
    assert!(out.contains("latency over 20 executions: min"), "{out}");
    for word in ["median", "p90", "max", "throughput:", "peak memory:"] {
        assert!(out.contains(word), "{word} missing: {out}");
    }
}

#[test]
fn bench_with_a_time_budget_stops_early() {
    let out = stdout(&backplane(&[
        "bench",
        "testdata/e2e/convnet.onnx",
        "--generate",
        "zeros",
        "--iterations",
        "1000000",
        "--time",
        "0.2",
        "--quiet",
    ]));
    let count: usize = out
        .split("latency over ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(count < 1_000_000, "{out}");
}

/// The warm-up runs its --warmup executions and, with --warmup-time, as many more as fill
/// that time; it is reported, and a negative time is refused.
#[test]
fn bench_warms_up_for_a_count_and_a_time() {
    let warmups = |extra: &[&str]| -> usize {
        let mut args = vec![
            "bench",
            "testdata/e2e/convnet.onnx",
            "--generate",
            "zeros",
            "--iterations",
            "2",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let out = stdout(&backplane(&args));
        out.split("warm-up: ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no warm-up line: {out}"))
    };
    assert_eq!(warmups(&["--warmup", "3", "--warmup-time", "0"]), 3);
    assert_eq!(warmups(&["--warmup", "0", "--warmup-time", "0"]), 0);
    // The model runs in well under 0.1 s, so a 0.3 s warm-up takes several executions.
    assert!(warmups(&["--warmup", "1", "--warmup-time", "0.3"]) > 1);
    let o = backplane(&["bench", "testdata/e2e/convnet.onnx", "--warmup-time", "-1"]);
    assert!(!o.status.success());
}

/// With `--backend-option CpuAcc:thread_choice=on`, at two threads each CpuAcc layer times
/// its steps shared and alone and says (with -vv) which way it runs; by default every layer
/// shares and nothing is said; one thread has nothing to choose.
#[test]
fn bench_chooses_each_layers_threads_unless_told_not_to() {
    let choices = |extra: &[&str]| -> usize {
        let mut args = vec![
            "-vv",
            "bench",
            "testdata/e2e/convnet.onnx",
            "--generate",
            "random",
            "--iterations",
            "10",
            "--warmup",
            "2",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let o = backplane(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        err.lines()
            .filter(|l| l.contains("CpuAcc layer") && l.contains("timed shared"))
            .count()
    };
    let on = ["--backend-option", "CpuAcc:thread_choice=on"];
    assert!(choices(&[&["--threads", "2"][..], &on].concat()) > 0);
    assert_eq!(choices(&["--threads", "2"]), 0);
    assert_eq!(choices(&[&["--threads", "1"][..], &on].concat()), 0);
    let bad = backplane(&[
        "bench",
        "testdata/e2e/convnet.onnx",
        "--generate",
        "random",
        "--backend-option",
        "CpuAcc:thread_choice=sometimes",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("thread_choice"));
}

#[test]
fn bench_without_inputs_says_how_to_give_them() {
    let o = backplane(&["bench", "testdata/e2e/convnet.onnx"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--input x=") && err.contains("--generate random"),
        "{err}"
    );
}

#[test]
fn inspect_shows_inputs_ops_and_placement() {
    let out = stdout(&backplane(&[
        "inspect",
        "models/digits/model.onnx",
        "--input-shape",
        "input=2x1x8x8",
    ]));
    assert!(out.contains("input  'input' f32[2x1x8x8]"), "{out}");
    assert!(out.contains("output 'probabilities' f32[2x10]"), "{out}");
    assert!(out.contains("Conv x2"), "{out}");
    // The default preference: CpuAcc first (it fuses the batch norm into the convolution,
    // and the first convolution with its max pooling).
    assert!(out.contains("backends: CpuAcc: 8"), "{out}");
    assert!(out.contains("FusedConvMaxPool"), "{out}");
}

#[test]
fn inspect_defaults_symbolic_dims_to_one_and_says_so() {
    let out = stdout(&backplane(&["inspect", "models/digits/model.onnx"]));
    assert!(out.contains("symbolic dims [\"batch\"]"), "{out}");
    assert!(out.contains("f32[1x1x8x8]"), "{out}");
}

/// The profile is Chrome-trace JSON: a traceEvents array of complete events with the fields
/// Perfetto needs, one per workload per execution.
#[test]
fn profile_is_valid_chrome_trace_json() {
    let dir = std::env::temp_dir().join(format!("backplane-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    let out = stdout(&backplane(&[
        "run",
        "--backends",
        "CpuRef",
        "--iterations",
        "2",
        "--profile",
        path.to_str().unwrap(),
    ]));
    assert!(
        out.contains("top layers by time (mean over 2 executions)"),
        "{out}"
    );
    assert!(
        out.contains("not timed: 1 layer whose output is a view or part of another tensor's"),
        "{out}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    // The digits model's 10 layers but its Reshape, a view of its input's memory that does
    // not run.
    assert_eq!(events.len(), 18, "9 running layers x 2 executions");
    let mut last_end = 0.0;
    for e in events {
        assert_eq!(e["ph"], "X");
        assert!(e["name"].is_string() && e["cat"].is_string());
        assert_eq!(e["args"]["backend"], "CpuRef");
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(
            dur >= 0.0 && ts + 1e-6 >= last_end,
            "events overlap or go backwards"
        );
        last_end = ts + dur;
        assert!(e["pid"].is_number() && e["tid"].is_number());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The SVG of a two-backend partition is well-formed XML and names every layer and backend.
#[test]
fn inspect_draws_the_partition_as_svg() {
    let dir = std::env::temp_dir().join(format!("backplane-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("digits.svg");
    let out = stdout(&backplane(&[
        "inspect",
        "models/digits/model.onnx",
        "--backends",
        "CpuRef",
        "--svg",
        path.to_str().unwrap(),
    ]));
    assert!(out.contains("graph drawn to"), "{out}");
    let text = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for layer in [
        "conv1", "bn1", "relu1", "pool1", "conv2", "relu2", "pool2", "flatten", "fc", "softmax",
    ] {
        assert!(texts.contains(&layer), "layer {layer} not drawn");
    }
    assert!(texts.contains(&"CpuRef"), "legend missing");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inspect_prints_the_tensor_memory_plan() {
    let out = stdout(&backplane(&["inspect", "testdata/e2e/convnet.onnx"]));
    assert!(
        out.contains("tensor memory (edge: from -> to, strategy):"),
        "{out}"
    );
    assert!(
        out.contains("direct (Backplane/Host/Cpu -> Backplane/Host/Cpu"),
        "{out}"
    );
    assert!(out.contains("copies per execution: 0 (0 bytes)"), "{out}");
    let line = out.lines().find(|l| l.starts_with("host arena:")).unwrap();
    // "host arena: A bytes planned for S bytes of tensors (largest live set L bytes, ratio R)"
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .map(|s| s.parse().unwrap())
        .collect();
    let (arena, sum, lower) = (nums[0], nums[1], nums[2]);
    assert!(lower <= arena && arena < sum, "{line}");
}

#[test]
fn threads_reach_cpuacc_and_zero_is_refused() {
    let out = stdout(&backplane(&[
        "run",
        "--backends",
        "CpuAcc,CpuRef",
        "--threads",
        "1",
    ]));
    assert!(
        out.contains("CpuAcc:") && out.contains("5/5 predictions match the labels"),
        "{out}"
    );
    let o = backplane(&["run", "--threads", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("'0'") && err.contains("--threads"), "{err}");
}

#[test]
fn layer_backend_overrides_by_op_type_and_by_name() {
    let out = stdout(&backplane(&[
        "run",
        "--backends",
        "CpuAcc,CpuRef",
        "--layer-backend",
        "Softmax=CpuRef",
    ]));
    assert!(out.contains("CpuRef: 1 layer"), "{out}");
    let out = stdout(&backplane(&[
        "inspect",
        "models/digits/model.onnx",
        "--backends",
        "CpuRef",
        "--layer-backend",
        "fc=CpuAcc",
    ]));
    let fc = out
        .lines()
        .find(|l| l.trim_start().starts_with("fc "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(fc.contains("CpuAcc"), "{fc}");
    let o = backplane(&["run", "--layer-backend", "nosuchlayer=CpuRef"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("'nosuchlayer' matches no layer"));
}

#[test]
fn inspect_shows_the_partition_of_a_loop_body() {
    let out = stdout(&backplane(&[
        "inspect",
        "testdata/control_flow/loop_mixed.onnx",
        "--backends",
        "CpuAcc,CpuRef",
    ]));
    // The Loop runs on the builtin backend; its body is listed below it, split across both.
    let loop_line = out
        .lines()
        .find(|l| l.trim_start().starts_with("loop ") && l.contains("Loop"))
        .unwrap_or_else(|| panic!("no Loop line: {out}"));
    assert!(loop_line.contains("Builtin"), "{loop_line}");
    let body = out
        .lines()
        .find(|l| l.contains("body of 'loop'"))
        .unwrap_or_else(|| panic!("no body header: {out}"));
    assert!(body.contains("CpuAcc") && body.contains("CpuRef"), "{body}");
    let cumsum = out
        .lines()
        .find(|l| l.contains("CumSum"))
        .unwrap_or_else(|| panic!("no CumSum: {out}"));
    assert!(cumsum.contains("CpuRef"), "{cumsum}");
    let matmul = out
        .lines()
        .find(|l| l.contains("MatMul") || l.contains("CpuAcc") && l.contains("->"))
        .unwrap_or_else(|| panic!("no CpuAcc layer: {out}"));
    assert!(matmul.contains("CpuAcc"), "{matmul}");
}

#[test]
fn run_executes_a_loop_model() {
    let out = stdout(&backplane(&[
        "run",
        "testdata/control_flow/loop_mixed.onnx",
        "--backends",
        "CpuAcc,CpuRef",
        "--generate",
        "random",
    ]));
    assert!(out.contains("output 'ys' f32[100x2x3]"), "{out}");
}

#[test]
fn run_stops_a_loop_at_the_limits_given() {
    let o = backplane(&[
        "run",
        "testdata/control_flow/loop_mixed.onnx",
        "--generate",
        "zeros",
        "--max-loop-iterations",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(1), "a failed execution exits 1");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("iteration limit (10)"), "{err}");
    let o = backplane(&[
        "run",
        "testdata/control_flow/loop_mixed.onnx",
        "--generate",
        "zeros",
        "--time-limit",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2), "bad usage exits 2");
}

/// Every model shipped in the repository plans without a rejected optimization: a backend's
/// invalid substitution is only a warning at run time (the layers stay as they were), so a
/// regression in a fusion would otherwise go unnoticed.
#[test]
fn shipped_models_plan_without_rejected_optimizations() {
    let models = [
        "models/digits/model.onnx",
        "testdata/e2e/convnet.onnx",
        "testdata/dynamic/bert_tiny.onnx",
        "testdata/control_flow/if_scan.onnx",
        "testdata/control_flow/loop_mixed.onnx",
        "testdata/control_flow/sequences.onnx",
        "testdata/tflite/data_movement_f32/model.tflite",
        "testdata/tflite/data_movement_int8/model.tflite",
        "testdata/tflite/dense_f32/model.tflite",
        "testdata/tflite/dense_int8/model.tflite",
        "testdata/tflite/mobile_blocks_f32/model.tflite",
        "testdata/tflite/mobile_blocks_int8/model.tflite",
    ];
    for model in models {
        for backends in ["CpuAcc,CpuRef", "CpuRef"] {
            let out = stdout(&backplane(&["inspect", model, "--backends", backends]));
            assert!(out.contains("layers"), "{model} ({backends}): {out}");
            assert!(
                !out.contains("rejected optimizations"),
                "{model} ({backends}): {out}"
            );
        }
    }
}

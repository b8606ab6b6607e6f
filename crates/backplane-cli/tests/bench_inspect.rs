//! `backplane bench` and `backplane inspect`, driven as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn backplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_backplane"))
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap()
}

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
    assert!(out.contains("backends: CpuRef: 10"), "{out}");
}

#[test]
fn inspect_defaults_symbolic_dims_to_one_and_says_so() {
    let out = stdout(&backplane(&["inspect", "models/digits/model.onnx"]));
    assert!(out.contains("symbolic dims [\"batch\"]"), "{out}");
    assert!(out.contains("f32[1x1x8x8]"), "{out}");
}

//! The `backplane` binary, driven as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn backplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_backplane"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn run_without_a_model_classifies_the_shipped_samples() {
    let o = backplane(&["run", "--iterations", "3"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("models/digits/model.onnx"), "{out}");
    assert!(out.contains("backends: CpuRef:"), "{out}");
    assert!(out.contains("5/5 predictions match the labels"), "{out}");
    assert!(
        out.contains("latency: median") && out.contains("over 3 iterations"),
        "{out}"
    );
}

#[test]
fn run_a_model_with_an_npy_input() {
    let o = backplane(&[
        "run",
        "testdata/e2e/convnet.onnx",
        "--input",
        "x=testdata/e2e/input_x.npy",
        "--backends",
        "CpuRef",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("output 'probs' f32[1x"), "{out}");
}

#[test]
fn symbolic_dims_come_from_input_shape_or_the_input_file() {
    let o = backplane(&[
        "run",
        "models/digits/model.onnx",
        "--input",
        "input=models/digits/samples/digit_2.npy",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("row 0: top-3: 2 ("), "{out}");
}

#[test]
fn backends_lists_cpuref_with_version_and_capabilities() {
    let o = backplane(&["backends"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("CpuRef"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("static") && line.contains("1.0"), "{line}");
}

#[test]
fn errors_name_what_is_wrong_and_exit_non_zero() {
    let o = backplane(&["run", "no/such/model.onnx"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("no/such/model.onnx"), "{err}");

    let o = backplane(&["run", "--backends", "NoSuchBackend"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("'NoSuchBackend' is not registered"), "{err}");

    let o = backplane(&["run", "testdata/e2e/convnet.onnx"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("--input x="), "{err}");

    let o = backplane(&["run", "--input", "oops"]);
    assert_eq!(o.status.code(), Some(2));

    let o = backplane(&[
        "run",
        "models/digits/model.onnx",
        "--input",
        "input=README.md",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("README.md") && err.contains("not a .npy file"),
        "{err}"
    );
}

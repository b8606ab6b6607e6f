//! Hostile command lines, inputs and files: each ends in a clear error and an exit code, never
//! an abort, a panic or a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, scratch};

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const DIGITS: &str = "models/digits/model.onnx";

#[test]
fn an_input_contradicting_a_static_dim_is_refused() {
    let dir = scratch("static-dims");
    let file = dir.join("x.npy");
    let t = backplane::Tensor::from_vec(vec![1, 1, 8, 9], vec![0.5f32; 72]).unwrap();
    backplane::npy::write_file(&file, &t).unwrap();
    let arg = format!("input={}", file.display());
    let o = backplane(&["run", DIGITS, "--input", &arg]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("input 'input'") && err.contains("dimension 3 is declared as 8"),
        "{err}"
    );
    // The symbolic batch dimension still comes from the file.
    let t = backplane::Tensor::from_vec(vec![2, 1, 8, 8], vec![0.5f32; 128]).unwrap();
    backplane::npy::write_file(&file, &t).unwrap();
    let o = backplane(&["run", DIGITS, "--input", &arg]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_device_as_an_input_file_is_refused_at_once() {
    if !Path::new("/dev/zero").exists() {
        return;
    }
    {
        let arg = "input=/dev/zero".to_string();
        let started = Instant::now();
        let o = backplane(&["run", DIGITS, "--input", &arg]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("a device"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}

#[cfg(unix)]
#[test]
fn a_model_that_is_a_fifo_is_refused_without_blocking() {
    let dir = scratch("fifo");
    let fifo = dir.join("model.onnx");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return;
    }
    let path = fifo.display().to_string();
    for command in ["run", "inspect", "bench"] {
        let o = backplane(&[command, &path]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{command}: {err}");
        assert!(err.contains("FIFO"), "{command}: {err}");
    }
    // Input files too, .npy and .pb.
    for name in ["x.npy", "x.pb"] {
        let input = dir.join(name);
        assert!(Command::new("mkfifo")
            .arg(&input)
            .status()
            .unwrap()
            .success());
        let arg = format!("input={}", input.display());
        let o = backplane(&["run", DIGITS, "--input", &arg]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains("FIFO"), "{name}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn numbers_out_of_range_are_usage_errors() {
    let cases: &[&[&str]] = &[
        &["run", "--iterations", "18446744073709551615"],
        &["run", "--iterations", "4000000000"],
        &["run", "--iterations", "0"],
        &["run", "--threads", "0"],
        &["run", "--threads", "100000"],
        &["run", "--time-limit", "NaN"],
        &["run", "--time-limit", "inf"],
        &["run", "--time-limit=-1"],
        &["run", "--time-limit", "1e300"],
        &["run", "--max-loop-iterations", "0"],
        &["run", "--max-memory", "0"],
        &["run", "--max-memory", "99999999999T"],
        &["run", "--max-memory", "8Q"],
        &["run", "--rtol", "NaN"],
        &["bench", DIGITS, "--time", "NaN"],
        &["bench", DIGITS, "--time", "inf"],
        &["bench", DIGITS, "--time=-1"],
        &["bench", DIGITS, "--time", "1e300"],
        &["bench", DIGITS, "--iterations", "18446744073709551615"],
        &["bench", DIGITS, "--warmup", "18446744073709551615"],
    ];
    for args in cases {
        let o = backplane(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid value"), "{args:?}: {err}");
    }
}

#[test]
fn a_model_over_the_memory_budget_is_refused_naming_its_largest_tensor() {
    let o = backplane(&["run", "--max-memory", "1K"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("more than the memory budget of 1024 bytes") && err.contains("layer '"),
        "{err}"
    );
    let o = backplane(&["run", "--max-memory", "64M", "--no-time-limit"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn inspect_reports_the_working_memory_and_refuses_a_model_over_the_budget() {
    let o = backplane(&["inspect", DIGITS, "--max-memory", "1K"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    // The plan is shown first, then the refusal names the budget, the bytes and a layer.
    assert!(out.contains("host arena: "), "{out}");
    assert!(
        out.contains("working memory per execution: ") && out.contains("memory budget: 1024 bytes"),
        "{out}"
    );
    assert!(
        err.contains("more than the memory budget of 1024 bytes") && err.contains("layer '"),
        "{err}"
    );
    let o = backplane(&["inspect", DIGITS, "--max-memory", "64M"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("memory budget: 67108864 bytes"), "{out}");
    let o = backplane(&["inspect", DIGITS, "--max-memory", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Static backend ids have the dynamic ones' length limit: a 100 KiB id given on the command
/// line (one argument can hold no more) is an error that does not echo it.
#[test]
fn a_huge_backend_id_is_refused_without_being_echoed() {
    let id = "A".repeat(100 << 10);
    for cmd in ["run", "inspect"] {
        let mut args = vec![cmd];
        if cmd == "inspect" {
            args.push(DIGITS);
        }
        args.extend(["--backends", id.as_str()]);
        let o = backplane(&args);
        let err = stderr(&o);
        let head: String = err.chars().take(500).collect();
        assert_eq!(o.status.code(), Some(1), "{cmd}: {head}");
        assert!(
            err.contains("102400 bytes; backend ids have at most 64"),
            "{cmd}: {head}"
        );
        assert!(err.len() < 1000, "{cmd}: {} bytes of error", err.len());
    }
}

#[test]
fn inspect_and_bench_take_the_dynamic_backend_flags() {
    let o = backplane(&["inspect", DIGITS, "--no-dynamic-backends"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = backplane(&[
        "bench",
        DIGITS,
        "--generate",
        "zeros",
        "--input-shape",
        "input=1x1x8x8",
        "--iterations",
        "2",
        "--quiet",
        "--no-dynamic-backends",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = backplane(&[
        "inspect",
        DIGITS,
        "--dynamic-backends-path",
        "/nonexistent-backplane-dir",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

//! What the CLI tests share: running the binary from the repository root as a user would, its
//! output as text, and scratch folders.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod onnx;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run the binary in the repository root, killing it (and failing) if it has not ended
/// within a minute.
pub fn backplane(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_backplane"))
        .args(args)
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("backplane {args:?} did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Stdout and stderr as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A test's scratch folder, removed with everything in it when the test ends (also when it
/// fails), so runs leave nothing behind in the temporary directory.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines of a successful `backplane ARGS` (an `inspect`) from the section headed `start`
/// up to the next one headed `end` (to the end when there is none).
pub fn section_lines(args: &[&str], start: &str, end: &str) -> Vec<String> {
    let o = backplane(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    out.split(start)
        .nth(1)
        .unwrap_or_default()
        .split(end)
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Run `backplane ARGS` (a `run ... --compare DIR`) and assert that it succeeds and that
/// every output matches; `what` names the case in a failure.
pub fn assert_outputs_match(args: &[&str], what: &str) {
    let o = backplane(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{what}:\n{out}\n{err}");
    assert!(
        out.contains("compare: every output matches"),
        "{what}:\n{out}"
    );
}

/// Run the quantized model `model` on input `x` from DIR's `input_0.npy` and compare it with
/// DIR's expected outputs: exact on CpuRef (its integer layers), within one quantum on
/// CpuAcc with CpuRef behind it.
pub fn assert_quantized_outputs_match(model: &str, dir: &str) {
    for (backends, atol) in [("CpuRef", "0"), ("CpuAcc,CpuRef", "1")] {
        assert_outputs_match(
            &[
                "run",
                model,
                "--backends",
                backends,
                "--input",
                &format!("x={dir}/input_0.npy"),
                "--compare",
                dir,
                "--atol",
                atol,
            ],
            backends,
        );
    }
}

/// A fresh, empty scratch folder for one test.
pub fn scratch(tag: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("backplane-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// The backend option that lets GpuAcc take a software Vulkan adapter (lavapipe in CI).
pub const GPU_SOFTWARE: &str = "GpuAcc:allow_software=true";

/// GpuAcc's line of `backplane backends` (software adapters allowed), or `None` (said) when it
/// has no adapter here; with `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (CI) that is a failure.
pub fn gpu_line() -> Option<String> {
    let o = backplane(&["backends", "--backend-option", GPU_SOFTWARE]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("GpuAcc"))
        .unwrap_or_else(|| panic!("GpuAcc is not listed:\n{out}"))
        .to_string();
    if line.contains("no GPU adapter") {
        if std::env::var("BACKPLANE_REQUIRE_GPU_ADAPTER").as_deref() == Ok("1") {
            panic!("BACKPLANE_REQUIRE_GPU_ADAPTER=1 but GpuAcc has none: {line}");
        }
        println!("SKIPPED: no Vulkan adapter on this machine: {line}");
        return None;
    }
    Some(line)
}

//! Helpers for tests that compile C: a scratch directory and the C compiler.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch directory, removed when dropped (loaded libraries stay mapped after their file
/// is removed, so removing it early is harmless).
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh scratch directory for one test, removed at the end of it.
pub fn scratch(tag: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("backplane-plugin-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Run a compiler command and fail the test with its output if it fails.
pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {cmd:?}: {e} (a C compiler is needed: install gcc)")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compile C `sources` into the shared object `out` with extra flags (e.g. `-DNAME`).
pub fn shared_object(sources: &[&Path], out: &Path, flags: &[&str]) -> PathBuf {
    let include = repo().join("include");
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC", "-shared",
    ])
    .arg("-fvisibility=hidden")
    .arg("-I")
    .arg(&include)
    .args(flags)
    .arg("-o")
    .arg(out)
    .args(sources);
    run(&mut cmd);
    out.to_path_buf()
}

//! Helpers for the dynamic-backend tests: scratch directories, the C compiler, and the Rust
//! example plugins that Cargo builds for these tests (they are dev-dependencies).

#![allow(dead_code)]

use backplane_backend_api::{Backend, BackendId, BackendOptions};
use backplane_runtime::{BackendRegistry, DynamicBackendsOption, Runtime, RuntimeOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

// Scratch directories and the C compiler are shared with the plugin crate's own tests.
#[path = "../../../backplane-plugin/tests/common/mod.rs"]
mod c_tools;

pub use c_tools::{repo, scratch};

/// A shared object Cargo built for this test binary: it lies in the same `deps` directory.
fn built_plugin(file: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let path = deps.join(file);
    assert!(
        path.is_file(),
        "{} is missing: it is built by Cargo as a dev-dependency of backplane-runtime \
         (package {package}); run the tests through cargo",
        path.display()
    );
    path
}

/// The Rust example: CpuRef exported as `CpuRefDyn`.
pub fn rust_example() -> PathBuf {
    built_plugin("libbackplane_cpuref_dyn.so", "dynamic-backend-rust")
}

/// The Rust fixture `RustZoo`, which panics where its `panic` option says.
pub fn rust_zoo() -> PathBuf {
    built_plugin("libbackplane_rust_zoo.so", "dynamic-backend-rust-zoo")
}

/// Copy `src` into `dir` as `name`.
pub fn install(src: &Path, dir: &Path, name: &str) -> PathBuf {
    let dst = dir.join(name);
    std::fs::copy(src, &dst).unwrap();
    dst
}

/// Compile C sources into the shared object `dir/name`.
fn compile(sources: &[PathBuf], dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let sources: Vec<&Path> = sources.iter().map(PathBuf::as_path).collect();
    c_tools::shared_object(&sources, &dir.join(name), flags)
}

/// The C example backend (`ElementwiseC`) compiled into `dir/name`.
pub fn c_example(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    compile(
        &[repo().join("examples/dynamic-backend-c/elementwise_backend.c")],
        dir,
        name,
        flags,
    )
}

/// The zoo backend (`Zoo`, f32 Relu) compiled with `flags` into `dir/name`.
pub fn zoo(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    compile(
        &[repo().join("crates/backplane-plugin/tests/zoo/zoo_backend.c")],
        dir,
        name,
        flags,
    )
}

/// A registry with the static CpuRef backend.
pub fn cpu_ref_registry() -> BackendRegistry {
    let mut reg = BackendRegistry::new();
    reg.register(
        BackendId::new("CpuRef").unwrap(),
        Arc::new(|| Box::new(backplane_cpu_ref::CpuRefBackend) as Box<dyn Backend>),
    )
    .unwrap();
    reg
}

/// Runtime options loading dynamic backends from `dir` only.
pub fn options(dir: &Path) -> RuntimeOptions {
    RuntimeOptions {
        dynamic_backends: DynamicBackendsOption::Path(dir.to_path_buf()),
        ..RuntimeOptions::default()
    }
}

/// Options with backend options for one backend.
pub fn options_with(dir: &Path, id: &str, pairs: &[(&str, &str)]) -> RuntimeOptions {
    let mut o = options(dir);
    let mut b = BackendOptions::default();
    for (k, v) in pairs {
        b.values.insert(k.to_string(), v.to_string());
    }
    o.backend_options.insert(BackendId::new(id).unwrap(), b);
    o
}

/// A runtime with static CpuRef and the dynamic backends of `dir`.
pub fn runtime(dir: &Path) -> Runtime {
    Runtime::new(cpu_ref_registry(), options(dir)).unwrap()
}

/// The reason recorded for `file` (by file name), if it was rejected.
pub fn reason(rt: &Runtime, file: &str) -> Option<String> {
    rt.dynamic_backends()
        .rejected
        .iter()
        .find(|r| r.file.file_name().is_some_and(|n| n == file))
        .map(|r| r.reason.to_string())
}

/// Ids of the loaded dynamic backends, in load order.
pub fn loaded(rt: &Runtime) -> Vec<String> {
    rt.dynamic_backends()
        .loaded
        .iter()
        .map(|b| b.id.to_string())
        .collect()
}

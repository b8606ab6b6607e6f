//! The kit on every backend this repository has — CpuRef, CpuAcc, the Rust example plugin and
//! the C example plugin loaded through the C ABI — and on a deliberately broken plugin, whose
//! faults it must find and name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../backplane-plugin/tests/common/mod.rs"]
mod c_tools;

use backplane::runtime::DynamicBackendsOption;
use backplane::{BackendId, Runtime, RuntimeOptions};
use backplane_backend_tests::{check, KitOptions, NodeTests, Report};
use std::path::{Path, PathBuf};

/// Fewer random cases than the CLI's default: every backend runs them in this test.
fn options() -> KitOptions {
    KitOptions {
        sweep_cases: 12,
        // A slice of the node tests exercises that suite where the data is at hand (CI).
        node_tests: std::env::var_os("BACKPLANE_ONNX_NODE_TESTS").map(|d| NodeTests {
            dir: PathBuf::from(d),
            errata: Some(c_tools::repo().join("testdata/conformance/errata")),
            filter: "test_add".into(),
        }),
        ..KitOptions::default()
    }
}

fn assert_passes(report: &Report) {
    let text = report.to_text();
    println!("{text}");
    assert!(report.ok(), "{text}");
    let (passed, _) = report.totals();
    assert!(passed > 100, "too little was checked: {text}");
}

/// A shared object Cargo built for this test (a dev-dependency): in the same `deps` folder.
fn built_plugin(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().join(file);
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

fn runtime_with_plugins(dir: &Path, backend_options: &[(&str, &str, &str)]) -> Runtime {
    let mut options = RuntimeOptions {
        dynamic_backends: DynamicBackendsOption::Path(dir.to_path_buf()),
        ..RuntimeOptions::default()
    };
    for (id, k, v) in backend_options {
        let entry = options
            .backend_options
            .entry(BackendId::new(*id).unwrap())
            .or_default();
        entry.values.insert(k.to_string(), v.to_string());
    }
    Runtime::new(backplane::builtin_registry(), options).unwrap()
}

#[test]
fn the_built_in_backends_pass() {
    let runtime = backplane::RuntimeBuilder::new().build().unwrap();
    for backend in ["CpuRef", "CpuAcc"] {
        let report = check(&runtime, &BackendId::new(backend).unwrap(), &options());
        assert_passes(&report);
        // Every case of the op table ran (claimed or refused), none was unreadable.
        let cases: usize = report
            .ops
            .iter()
            .filter(|((suite, _), _)| suite == "op table")
            .map(|(_, t)| t.claimed + t.refused)
            .sum();
        assert!(
            cases > 400,
            "expected the full op table, found {cases} cases"
        );
        // Both run the typed elementwise sweeps themselves (none left to another backend).
        for family in ["Compare", "Predicate", "Pow"] {
            let t = &report.ops[&("random sweeps".to_string(), family.to_string())];
            assert!(
                t.passed > 0 && t.refused == 0,
                "{backend} {family}: {t:?}\n{}",
                report.to_text()
            );
        }
    }
}

#[test]
fn the_example_plugins_pass_through_the_c_abi() {
    let dir = c_tools::scratch("kit-examples");
    std::fs::copy(
        built_plugin("libbackplane_cpuref_dyn.so"),
        dir.join("Backplane_CpuRefDyn_backend.so"),
    )
    .unwrap();
    c_tools::run(
        std::process::Command::new(c_tools::cc())
            .args([
                "-std=c11",
                "-O2",
                "-fPIC",
                "-shared",
                "-fvisibility=hidden",
                "-I",
            ])
            .arg(c_tools::repo().join("include"))
            .arg("-o")
            .arg(dir.join("Acme_ElementwiseC_backend.so"))
            .arg(c_tools::repo().join("examples/dynamic-backend-c/elementwise_backend.c")),
    );
    let runtime = runtime_with_plugins(&dir, &[]);
    let rust = check(&runtime, &BackendId::new("CpuRefDyn").unwrap(), &options());
    assert_passes(&rust);
    // Memory managers, handles and the plugin's mappings balanced after unloading.
    let balanced = &rust.ops[&(
        "contract".to_string(),
        "memory and handles balanced".to_string(),
    )];
    assert!(
        balanced.passed >= 5 && balanced.failed == 0,
        "{}",
        rust.to_text()
    );
    // The C example runs a few elementwise ops: it refuses the rest, each with a reason.
    let c = check(
        &runtime,
        &BackendId::new("ElementwiseC").unwrap(),
        &options(),
    );
    println!("{}", c.to_text());
    assert!(c.ok(), "{}", c.to_text());
    assert!(c.totals().0 > 10, "{}", c.to_text());
}

#[test]
fn a_broken_plugin_is_caught_with_the_op_and_the_case_named() {
    let dir = c_tools::scratch("kit-broken");
    std::fs::copy(
        built_plugin("libbackplane_rust_zoo.so"),
        dir.join("Acme_RustZoo_backend.so"),
    )
    .unwrap();
    let id = BackendId::new("RustZoo").unwrap();
    let quick = KitOptions {
        node_tests: None,
        ..options()
    };

    // An Add that subtracts for outputs of an odd number of elements.
    let runtime = runtime_with_plugins(&dir, &[("RustZoo", "wrong", "add")]);
    let report = check(&runtime, &id, &quick);
    let text = report.to_text();
    assert!(!report.ok(), "{text}");
    let add = &report.ops[&("op table".to_string(), "Add".to_string())];
    assert!(add.failed > 0 && add.passed > 0, "{text}");
    let (case, why) = add.first_failure.clone().unwrap();
    assert!(case.starts_with("elementwise/"), "{case}");
    assert!(why.contains("expected"), "{why}");
    assert!(
        report
            .failures
            .iter()
            .any(|(suite, case, _)| suite == "random sweeps" && case.contains("--seed")),
        "random failures name their seed: {text}"
    );
    // And are shrunk: the smallest failing case found is printed with them.
    assert!(
        report
            .failures
            .iter()
            .any(|(suite, _, why)| suite == "random sweeps"
                && why.contains("smallest failing case: Binary(Add)")),
        "random failures are shrunk: {text}"
    );
    assert!(text.contains("failed"), "{text}");
    // Nothing else is wrong with it.
    assert!(
        report
            .failures
            .iter()
            .all(|(_, case, why)| case.contains("Add")
                || case.starts_with("elementwise/")
                || case.starts_with("Binary")
                || why.contains("Add")),
        "{text}"
    );

    // A refusal without a reason.
    let runtime = runtime_with_plugins(&dir, &[("RustZoo", "wrong", "refusal")]);
    let report = check(&runtime, &id, &quick);
    let text = report.to_text();
    let reasons = &report.ops[&(
        "contract".to_string(),
        "refusals carry a reason".to_string(),
    )];
    assert!(reasons.failed > 0, "{text}");
    assert!(
        reasons.first_failure.as_ref().is_some_and(
            |(case, why)| case.starts_with("Binary") && why.contains("without a reason")
        ),
        "{text}"
    );
}

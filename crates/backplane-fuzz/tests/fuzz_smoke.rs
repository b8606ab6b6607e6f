//! A bounded fuzzing run of each target on the repo's models: no input may panic.

use backplane_fuzz::{fuzz, load_corpus, mutate, Rng, Target};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `BACKPLANE_FUZZ_SECONDS=N` turns the smoke runs into time-bounded fuzzing runs (CI uses
/// it); otherwise each target runs a fixed, small number of inputs.
fn budget(default_executions: u64) -> (u64, Instant) {
    match std::env::var("BACKPLANE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    {
        Some(secs) => (u64::MAX, Instant::now() + Duration::from_secs_f64(secs)),
        None => (default_executions, Instant::now() + Duration::from_secs(20)),
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    load_corpus(&[
        repo.join("models"),
        repo.join("testdata/e2e"),
        repo.join("testdata/control_flow"),
        repo.join("testdata/fuzz"),
        repo.join("testdata/tflite"),
    ])
}

#[test]
fn mutations_are_deterministic_and_change_the_input() {
    let corpus = corpus();
    assert!(corpus.len() >= 2, "seed corpus missing");
    let (mut a, mut b) = (corpus[0].clone(), corpus[0].clone());
    mutate(&mut a, &corpus, &mut Rng::new(42));
    mutate(&mut b, &corpus, &mut Rng::new(42));
    assert_eq!(a, b);
    let changed = (0..20u64).filter(|s| {
        let mut c = corpus[0].clone();
        mutate(&mut c, &corpus, &mut Rng::new(*s));
        c != corpus[0]
    });
    assert!(changed.count() >= 18);
}

#[test]
fn import_target_never_panics() {
    let corpus = corpus();
    let (max, deadline) = budget(3000);
    let s = fuzz(Target::Import, &corpus, 7, max, deadline);
    println!(
        "fuzz import: {} executions, {} ok, {} rejected, {} panics, corpus {} models",
        s.executions,
        s.ok,
        s.rejected,
        s.panics.len(),
        corpus.len()
    );
    assert!(s.panics.is_empty(), "{:?}", s.panics);
    assert!(s.executions >= 100, "too few executions: {s:?}");
    assert!(
        s.rejected > 0,
        "mutations should be rejected sometimes: {s:?}"
    );
    assert!(s.ok > 0, "some mutated models should still import: {s:?}");
}

#[test]
fn pipeline_target_never_panics() {
    let corpus = corpus();
    let (max, deadline) = budget(1500);
    let s = fuzz(Target::Pipeline, &corpus, 11, max, deadline);
    println!(
        "fuzz pipeline: {} executions, {} ok, {} rejected, {} panics, corpus {} models",
        s.executions,
        s.ok,
        s.rejected,
        s.panics.len(),
        corpus.len()
    );
    assert!(s.panics.is_empty(), "{:?}", s.panics);
    assert!(s.executions >= 100, "too few executions: {s:?}");
    assert!(s.ok > 0, "some mutated models should still run: {s:?}");
}

/// The hostile seeds (scripts/gen_hostile_models.py): outputs of terabytes and Loops nested
/// three deep with 2^20 iterations each. Each ends in a typed error, in bounded time.
#[test]
fn hostile_seeds_end_in_typed_errors() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/fuzz");
    let runtime = backplane_fuzz::budget_runtime().expect("a runtime");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("testdata/fuzz") {
        let path = entry.expect("an entry").path();
        let bytes = std::fs::read(&path).expect("a model");
        let outcome = backplane_fuzz::run_one(Target::Budget, &runtime, &bytes);
        assert_eq!(
            outcome,
            backplane_fuzz::Outcome::Rejected,
            "{}",
            path.display()
        );
        names.push(path.file_name().map(|n| n.to_string_lossy().into_owned()));
    }
    assert!(names.len() >= 6, "{names:?}");
}

#[test]
fn budget_target_never_panics() {
    let corpus = corpus();
    let (max, deadline) = budget(500);
    let s = fuzz(Target::Budget, &corpus, 13, max, deadline);
    println!(
        "fuzz budget: {} executions, {} ok, {} rejected, {} panics, corpus {} models",
        s.executions,
        s.ok,
        s.rejected,
        s.panics.len(),
        corpus.len()
    );
    assert!(s.panics.is_empty(), "{:?}", s.panics);
    assert!(s.executions >= 50, "too few executions: {s:?}");
}

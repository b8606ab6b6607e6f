//! Shared by GpuAcc's kernel tests: a runtime with GpuAcc on any Vulkan adapter (software
//! included), cases of one layer, and a check that every case runs on GpuAcc alone and
//! matches CpuRef (a refusal is a failure).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::core::{DataType, Op};
use backplane::{BackendId, Runtime, RuntimeOptions};
use backplane_backend_tests::sweeps::{run_case, Rng, SweepCase};
use backplane_backend_tests::Outcome;

pub fn gpu() -> BackendId {
    BackendId::new("GpuAcc").unwrap()
}

/// A runtime with GpuAcc allowed on a software adapter, or `None` (after saying why) when the
/// machine has no Vulkan adapter at all and CI did not ask for one.
pub fn runtime() -> Option<Runtime> {
    runtime_with(&[])
}

/// [`runtime`] with more GpuAcc options (`tiles=64`, ...).
pub fn runtime_with(extra: &[(&str, &str)]) -> Option<Runtime> {
    let mut options = RuntimeOptions::default();
    let mut gpu_options = backplane::BackendOptions::default();
    gpu_options
        .values
        .insert("allow_software".into(), "true".into());
    for (k, v) in extra {
        gpu_options.values.insert((*k).into(), (*v).into());
    }
    options.backend_options.insert(gpu(), gpu_options);
    let rt = Runtime::new(backplane::builtin_registry(), options).unwrap();
    let caps = rt.backend(&gpu()).unwrap().capabilities();
    let adapter = caps
        .get("Adapter")
        .map(|v| v.to_string())
        .unwrap_or_default();
    if adapter.starts_with("no GPU adapter") {
        if std::env::var("BACKPLANE_REQUIRE_GPU_ADAPTER").as_deref() == Ok("1") {
            panic!("BACKPLANE_REQUIRE_GPU_ADAPTER=1 but GpuAcc has none: {adapter}");
        }
        println!("SKIPPED: GpuAcc has no adapter on this machine ({adapter})");
        return None;
    }
    println!("GpuAcc adapter: {adapter}");
    Some(rt)
}

pub fn t(r: &mut Rng, dims: &[usize]) -> backplane::Tensor {
    r.tensor(DataType::F32, dims, -2.0, 2.0).expect("tensor")
}

pub fn case(op: Op, inputs: Vec<(backplane::Tensor, bool)>) -> SweepCase {
    SweepCase {
        family: "gpu",
        op,
        inputs,
        rtol: 1e-4,
        atol: 1e-5,
    }
}

/// Run every case on GpuAcc alone; all must pass (none refused).
pub fn expect_pass(rt: &Runtime, cases: Vec<SweepCase>) {
    expect_all(&cases, "cases", |c| run_case(rt, &gpu(), c));
}

/// Run every case with `run`; all must pass (none refused). `what` names them in messages.
pub fn expect_all(cases: &[SweepCase], what: &str, run: impl Fn(&SweepCase) -> Outcome) {
    let mut failures = Vec::new();
    let total = cases.len();
    for c in cases {
        match run(c) {
            Outcome::Passed => {}
            other => {
                let shapes: Vec<String> =
                    c.inputs.iter().map(|(t, _)| t.info().to_string()).collect();
                failures.push(format!("{:?} on [{}]: {other:?}", c.op, shapes.join(", ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} {what} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{total} {what} passed");
}

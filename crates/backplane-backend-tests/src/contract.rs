//! Contract checks: what every backend owes the runtime beyond correct numbers. Support answers
//! are stable (asked twice, answered the same), refusals carry a reason, a loaded network's
//! workloads serve several threads at once with the results of one, and a failed execution
//! (a bad input) leaves the network working.

use crate::report::{Outcome, Report};
use crate::sweeps::{network, Rng, SweepCase, FAMILIES};
use backplane::backend_api::{LayerDesc, Support};
use backplane::compare::compare;
use backplane::{BackendId, OptimizerOptions, Runtime, Tensor};

/// The suite's name in reports.
pub const SUITE: &str = "contract";

/// Run the contract checks on `backend` into `report`, on cases generated from `seed`.
pub fn run(runtime: &Runtime, backend: &BackendId, seed: u64, report: &mut Report) {
    let support = match runtime.backend(backend) {
        Ok(b) => b.layer_support(),
        Err(e) => {
            report.record(
                SUITE,
                "create",
                "the backend object",
                Outcome::Failed {
                    why: format!("cannot create the backend: {e}"),
                    worst: None,
                },
            );
            return;
        }
    };
    // A few cases of every family: the claimed ones serve the threading checks.
    let mut claimed: Vec<(String, SweepCase)> = Vec::new();
    for (fi, (family, generate)) in FAMILIES.iter().enumerate() {
        for i in 0..4u64 {
            let case_seed = seed.wrapping_add(7_000_000 + fi as u64 * 100 + i);
            let Ok(case) = generate(&mut Rng::new(case_seed)) else {
                continue;
            };
            let name = format!("{family} (case seed {case_seed})");
            let Ok((net, _)) = network(&case) else {
                continue;
            };
            let Some(layer) = net.layers().first() else {
                continue;
            };
            let desc = LayerDesc::from_layer(&net, layer);
            let (first, second) = (
                support.is_layer_supported(&desc),
                support.is_layer_supported(&desc),
            );
            let outcome = if first != second {
                Outcome::Failed {
                    why: format!("support answered {first:?}, then {second:?}"),
                    worst: None,
                }
            } else {
                Outcome::Passed
            };
            report.record(SUITE, "stable support answers", &name, outcome);
            match first {
                Support::Unsupported(reason) => {
                    let outcome = if reason.trim().is_empty() {
                        Outcome::Failed {
                            why: "refused without a reason".into(),
                            worst: None,
                        }
                    } else {
                        Outcome::Passed
                    };
                    report.record(SUITE, "refusals carry a reason", &name, outcome);
                }
                Support::Supported => claimed.push((name, case)),
            }
        }
    }
    for (name, case) in claimed.iter().take(6) {
        let outcome = threads_and_errors(runtime, backend, case);
        report.record(SUITE, "threads and failed executions", name, outcome);
    }
}

/// Load the case's network on `backend`, run it once, then from 4 threads at once (8 runs
/// each, every result equal to the first), then with an input of the wrong shape (an error),
/// then once more (the first result again).
fn threads_and_errors(runtime: &Runtime, backend: &BackendId, case: &SweepCase) -> Outcome {
    let fail = |why: String| Outcome::Failed { why, worst: None };
    let (net, feed) = match network(case) {
        Ok(v) => v,
        Err(e) => return Outcome::Skipped(e),
    };
    let optimized = match runtime.optimize(&net, &OptimizerOptions::new(vec![backend.clone()])) {
        Ok(o) => o,
        Err(e) => return fail(format!("optimize of a claimed layer: {e}")),
    };
    let id = match runtime.load_network(optimized) {
        Ok(id) => id,
        Err(e) => return fail(format!("load: {e}")),
    };
    let named: Vec<(&str, &Tensor)> = feed.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let outcome = (|| {
        let first = runtime
            .execute(id, &named)
            .map_err(|e| format!("execute: {e}"))?;
        let same = |got: &[(String, Tensor)]| -> Result<(), String> {
            for ((_, g), (_, w)) in got.iter().zip(&first) {
                compare(g, w, 0.0, 0.0).map_err(|m| m.message)?;
            }
            Ok(())
        };
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        for _ in 0..8 {
                            let got = runtime
                                .execute(id, &named)
                                .map_err(|e| format!("execute on a thread: {e}"))?;
                            same(&got).map_err(|e| format!("a thread got another result: {e}"))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
                .collect()
        });
        results.into_iter().collect::<Result<Vec<()>, String>>()?;
        if let Some((name, t)) = feed.first() {
            // Every dim one larger; a scalar (no dims) becomes two values.
            let mut dims: Vec<usize> = t.shape().dims().iter().map(|d| d + 1).collect();
            if dims.is_empty() {
                dims.push(2);
            }
            let wrong = Tensor::zeros(backplane::TensorInfo::new(t.dtype(), dims))
                .map_err(|e| e.to_string())?;
            let mut bad = named.clone();
            bad[0] = (name.as_str(), &wrong);
            if runtime.execute(id, &bad).is_ok() {
                return Err("an input of the wrong shape was accepted".into());
            }
            let again = runtime
                .execute(id, &named)
                .map_err(|e| format!("execute after a failed one: {e}"))?;
            same(&again).map_err(|e| format!("after a failed execution: {e}"))?;
        }
        Ok(())
    })();
    let _ = runtime.unload_network(id);
    match outcome {
        Ok(()) => Outcome::Passed,
        Err(why) => fail(why),
    }
}

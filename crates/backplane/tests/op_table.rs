//! The shared op-test table: every case in testdata/ops (expected values computed in numpy
//! and cross-checked against ONNX Runtime when generated) runs through the ONNX importer and
//! each backend, and must match.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;

/// Backends checked against the table. Each new backend joins this list.
const BACKENDS: &[&str] = &["CpuRef", "CpuAcc"];

/// The preference list a backend is tested with: CpuAcc claims only what it runs fast, so
/// the rest of each model falls back to CpuRef.
fn preference(backend: &str) -> Vec<&str> {
    match backend {
        "CpuAcc" => vec!["CpuAcc", "CpuRef"],
        other => vec![other],
    }
}

/// Optimize `model` for `backends` and check that every layer the first backend claims is
/// assigned to it; returns how many layers it runs.
fn claimed_layers_run_on(
    runtime: &backplane::Runtime,
    model: &[u8],
    backends: &[&str],
) -> Result<usize, String> {
    use backplane::backend_api::LayerDesc;
    let options = backplane::ImportOptions::default()
        .with_evaluator(std::sync::Arc::new(backplane::cpu_ref::CpuRefEvaluator));
    let network =
        backplane::onnx::import_bytes(model, None, &options).map_err(|e| e.to_string())?;
    let ids: Vec<backplane::BackendId> = backends
        .iter()
        .map(|b| backplane::BackendId::new(*b).unwrap())
        .collect();
    let first = ids[0].clone();
    let support = runtime
        .backend(&first)
        .map_err(|e| e.to_string())?
        .layer_support();
    let optimized = runtime
        .optimize(&network, &backplane::OptimizerOptions::new(ids))
        .map_err(|e| e.to_string())?;
    let net = optimized.network();
    let mut ran = 0;
    for (i, layer) in net.layers().iter().enumerate() {
        let claimed = support
            .is_layer_supported(&LayerDesc::from_layer(net, layer))
            .is_supported();
        let on = &optimized.assignment()[i];
        if claimed && *on != first {
            return Err(format!(
                "{first} claims layer '{}' but it ran on {on}",
                layer.name
            ));
        }
        ran += usize::from(*on == first);
    }
    Ok(ran)
}

#[test]
fn every_backend_matches_the_op_table() {
    let runtime = backplane::RuntimeBuilder::new().build().unwrap();
    let cases = support::op_tables();
    assert!(
        cases.len() > 400,
        "expected the full op table, found {} cases",
        cases.len()
    );
    let mut failures = Vec::new();
    let mut per_op: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    // Layers each backend itself ran (the rest fell back to the next preference).
    let mut ran_on: BTreeMap<String, usize> = BTreeMap::new();
    for backend in BACKENDS {
        for (family, json) in &cases {
            let case = support::op_case(json);
            let entry = per_op
                .entry(format!("{backend}/{}", case.op_type))
                .or_default();
            entry.1 += 1;
            let prefs = preference(backend);
            let result = claimed_layers_run_on(&runtime, &case.model, &prefs)
                .and_then(|ran| {
                    *ran_on
                        .entry(format!("{backend}/{}", case.op_type))
                        .or_default() += ran;
                    support::run_model(&runtime, &case.model, &prefs, &case.inputs)
                })
                .and_then(|outs| {
                    if outs.len() != case.outputs.len() {
                        return Err(format!(
                            "{} outputs, expected {}",
                            outs.len(),
                            case.outputs.len()
                        ));
                    }
                    for ((name, got), (ename, want)) in outs.iter().zip(&case.outputs) {
                        if name != ename {
                            return Err(format!("output '{name}', expected '{ename}'"));
                        }
                        support::compare(got, want, case.rtol, case.atol)
                            .map_err(|e| format!("output '{name}': {e}"))?;
                    }
                    Ok(())
                });
            match result {
                Ok(()) => entry.0 += 1,
                Err(e) => failures.push(format!("{backend} {family}/{}: {e}", case.name)),
            }
        }
    }
    for (op, (pass, total)) in &per_op {
        let ran = ran_on.get(op).copied().unwrap_or(0);
        println!("{op:<28} {pass}/{total}  (layers run by the backend itself: {ran})");
    }
    let total: usize = per_op.values().map(|v| v.1).sum();
    println!(
        "op table: {} passed, {} failed",
        total - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

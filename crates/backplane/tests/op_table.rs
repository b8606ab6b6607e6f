//! The shared op-test table: every case in testdata/ops (expected values computed in numpy
//! and cross-checked against ONNX Runtime when generated) runs through the ONNX importer and
//! each backend, and must match.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;

/// Backends checked against the table. Each new backend joins this list.
const BACKENDS: &[&str] = &["CpuRef"];

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
    for backend in BACKENDS {
        for (family, json) in &cases {
            let case = support::op_case(json);
            let entry = per_op
                .entry(format!("{backend}/{}", case.op_type))
                .or_default();
            entry.1 += 1;
            let result = support::run_model(&runtime, &case.model, &[backend], &case.inputs)
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
        println!("{op:<28} {pass}/{total}");
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

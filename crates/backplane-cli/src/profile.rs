//! `--profile`: per-workload timings as a Chrome trace (loads in Perfetto or
//! chrome://tracing) and a top-10 table.

use crate::CliError;
use backplane::backend_api::CapabilityValue;
use backplane::runtime::LayerTiming;
use backplane::Runtime;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

/// What the backends that ran layers say about how their layer times read (their
/// `Profiling` capability, e.g. GpuAcc's submit and timestamp mode), by backend.
pub fn notes(runtime: &Runtime, runs: &[Vec<LayerTiming>]) -> BTreeMap<String, String> {
    let mut notes = BTreeMap::new();
    for t in runs.iter().flatten() {
        if notes.contains_key(t.backend.as_str()) {
            continue;
        }
        let Ok(backend) = runtime.backend(&t.backend) else {
            continue;
        };
        if let Some(CapabilityValue::Text(note)) = backend.capabilities().get("Profiling") {
            notes.insert(t.backend.as_str().to_string(), note.clone());
        }
    }
    notes
}

/// Write the executions' timings as Chrome-trace JSON: one complete ("X") event per workload,
/// executions laid end to end on one track; `notes` (by backend) go into its `otherData`.
pub fn write_trace(
    path: &Path,
    runs: &[Vec<LayerTiming>],
    notes: &BTreeMap<String, String>,
) -> Result<(), CliError> {
    let mut events = Vec::new();
    let mut offset = Duration::ZERO;
    for (i, run) in runs.iter().enumerate() {
        for t in run {
            events.push(serde_json::json!({
                "name": t.layer,
                "cat": t.op,
                "ph": "X",
                "ts": (offset + t.start).as_secs_f64() * 1e6,
                "dur": t.duration.as_secs_f64() * 1e6,
                "pid": 1,
                "tid": 1,
                "args": { "op": t.op, "backend": t.backend.as_str(), "execution": i },
            }));
        }
        let end = run
            .iter()
            .map(|t| t.start + t.duration)
            .max()
            .unwrap_or_default();
        offset += end;
    }
    let doc = serde_json::json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": notes,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| CliError::failed(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| CliError::failed(format!("{}: {e}", path.display())))
}

/// Write the trace to `path` and, when `print`, the top-10 table, how many layers did not
/// run (`views`: outputs that are views or parts of another tensor's memory), the backends'
/// notes on their timings and where the file went.
pub fn report(
    path: &Path,
    runtime: &Runtime,
    views: usize,
    runs: &[Vec<LayerTiming>],
    print: bool,
) -> Result<(), CliError> {
    let notes = notes(runtime, runs);
    write_trace(path, runs, &notes)?;
    if print {
        print_top(runs)?;
        if views > 0 {
            out!(
                "not timed: {views} layer{} whose output is a view or part of another tensor's \
                 memory (Reshape, Flatten, Squeeze, Unsqueeze, Identity, one-range Slice; Concat \
                 and Split along an outer axis), which {} not run",
                if views == 1 { "" } else { "s" },
                if views == 1 { "does" } else { "do" }
            );
        }
        for note in notes.values() {
            out!("{note}");
        }
        out!("profile written to {}", path.display());
    }
    Ok(())
}

/// Print the 10 layers that took the most time over all executions, with their share.
pub fn print_top(runs: &[Vec<LayerTiming>]) -> Result<(), CliError> {
    let mut per_layer: HashMap<&str, (Duration, &str, &str)> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for t in runs.iter().flatten() {
        let e = per_layer.entry(&t.layer).or_insert_with(|| {
            order.push(&t.layer);
            (Duration::ZERO, &t.op, t.backend.as_str())
        });
        e.0 += t.duration;
    }
    let total: Duration = per_layer.values().map(|v| v.0).sum();
    let mut rows: Vec<(&str, Duration, &str, &str)> = order
        .iter()
        .map(|l| (*l, per_layer[l].0, per_layer[l].1, per_layer[l].2))
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    let n = runs.len().max(1) as f64;
    out!(
        "top layers by time (mean over {} execution{}):",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    for (layer, d, op, backend) in rows.iter().take(10) {
        let share = if total.is_zero() {
            0.0
        } else {
            d.as_secs_f64() / total.as_secs_f64() * 100.0
        };
        out!(
            "  {:>6.2}%  {:>9.3} ms  {layer} ({op}, {backend})",
            share,
            d.as_secs_f64() * 1e3 / n
        );
    }
    Ok(())
}

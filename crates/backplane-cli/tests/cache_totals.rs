//! The runtime's plan-cache totals through the CLI (`bench` prints them, `run -v` logs them)
//! and the one memory budget a served model's caches share (`--max-memory`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, text};

const BERT: &str = "testdata/dynamic/bert_tiny.onnx";
const DETECTOR: &str = "testdata/dynamic/data_dependent.onnx";
const CASE: &str = "testdata/dynamic/data_dependent/a";

/// The line of `out` that starts with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{out}"))
}

/// `bench --input-shapes` with two shapes: the runtime's totals (one network, two plans, two
/// misses, every timed execution a hit; the second plan re-shaped from the first's
/// optimization) follow the network's own counts.
#[test]
fn bench_input_shapes_prints_the_runtime_totals() {
    let o = backplane(&[
        "bench",
        BERT,
        "--input-shapes",
        "input_ids=1x5",
        "--input-shapes",
        "input_ids=1x11",
        "--warmup",
        "1",
        "--warmup-time",
        "0",
        "--iterations",
        "2",
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let totals = line(&out, "runtime plan caches: ");
    // 2 plans built by the first look-ups, then 2 warm-up and 4 timed executions: 6 hits.
    assert!(
        totals.starts_with("runtime plan caches: 1 network, 2 plans held (")
            && totals.contains("), 6 hits, 2 misses, 0 evicted, 1 optimizer run, 1 plan reshaped; split nodes: 0 held (0 B), 0 hits, 0 imports, 0 evicted"),
        "{totals}"
    );
}

/// `bench` on the data-dependent detector: its three networks (the part before the first cut
/// and the two nested ones) and its two cut nodes, in the runtime's totals.
#[test]
fn bench_data_dependent_prints_the_runtime_totals() {
    let o = backplane(&[
        "bench",
        DETECTOR,
        "--input",
        &format!("logits={CASE}/logits.npy"),
        "--input",
        &format!("boxes={CASE}/boxes.npy"),
        "--warmup",
        "1",
        "--iterations",
        "3",
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let totals = line(&out, "runtime plan caches: ");
    assert!(
        totals.starts_with("runtime plan caches: 3 networks, 3 plans held (")
            && totals.contains(
                "), 12 hits, 3 misses, 0 evicted, 3 optimizer runs, 0 plans reshaped; split nodes: 2 held ("
            )
            && totals.ends_with("), 8 hits, 2 imports, 0 evicted"),
        "{totals}"
    );
}

/// `run -v` logs the totals after a data-dependent run and after `--input-shapes`.
#[test]
fn run_verbose_logs_the_runtime_totals() {
    let o = backplane(&[
        "-v",
        "run",
        DETECTOR,
        "--input",
        &format!("logits={CASE}/logits.npy"),
        "--input",
        &format!("boxes={CASE}/boxes.npy"),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("runtime plan caches: 3 networks, 3 plans held (")
            && err.contains(
                "3 misses, 0 evicted, 3 optimizer runs, 0 plans reshaped; split nodes: 2 held ("
            ),
        "{err}"
    );
    let o = backplane(&[
        "-v",
        "run",
        BERT,
        "--input-shapes",
        "input_ids=1x3",
        "--input-shapes",
        "input_ids=1x4",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("runtime plan caches: 1 network, 2 plans held (")
            && err.contains(", 0 hits, 2 misses, 0 evicted, 1 optimizer run, 1 plan reshaped;"),
        "{err}"
    );
    // Without -v the totals are not printed by `run`.
    let o = backplane(&["run", BERT, "--input-shapes", "input_ids=1x3"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(!out.contains("runtime plan caches") && !err.contains("runtime plan caches"));
}

/// The values `run` printed (every line from the first output to the latency).
fn printed_outputs(out: &str) -> Vec<&str> {
    out.lines()
        .skip_while(|l| !l.starts_with("output '"))
        .take_while(|l| !l.starts_with("latency"))
        .collect()
}

/// `--max-memory` below what the detector's caches hold after a run (1.1 KiB of plans in three
/// networks and 300 B of cut-node entries) but above each entry and the copies at a cut: the
/// caches evict one another's least recently used entries to stay within it (each network
/// caches a single shape, so no cache is over its own capacity), and the outputs are those of
/// a run with room.
#[test]
fn run_keeps_a_models_caches_within_one_budget() {
    let args = |budget: &str| {
        vec![
            "-v".to_string(),
            "run".into(),
            DETECTOR.into(),
            "--input".into(),
            format!("logits={CASE}/logits.npy"),
            "--input".into(),
            format!("boxes={CASE}/boxes.npy"),
            "--iterations".into(),
            "3".into(),
            "--max-memory".into(),
            budget.into(),
        ]
    };
    let run = |budget: &str| {
        let a = args(budget);
        let o = backplane(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        (out, err)
    };
    let (roomy, roomy_log) = run("1000000");
    let (tight, tight_log) = run("1300");
    assert_eq!(printed_outputs(&tight), printed_outputs(&roomy), "{tight}");
    assert_eq!(printed_outputs(&roomy).len(), 9, "{roomy}");
    let evicted = |log: &str| -> u64 {
        let totals = log
            .lines()
            .find(|l| l.contains("runtime plan caches: "))
            .unwrap_or_else(|| panic!("no totals in:\n{log}"));
        let plans = totals
            .split(" evicted")
            .next()
            .and_then(|t| t.rsplit(", ").next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no eviction count in {totals}"));
        plans
    };
    assert_eq!(evicted(&roomy_log), 0, "{roomy_log}");
    assert!(evicted(&tight_log) > 0, "{tight_log}");
    // Within the budget after every admission: nothing was kept over it.
    assert!(
        !tight_log.contains("leave no room within the memory budget"),
        "{tight_log}"
    );
}

//! One loaded model across several input shapes through the CLI: `run` and `bench` with
//! `--input-shapes`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{backplane, text};

const BERT: &str = "testdata/dynamic/bert_tiny.onnx";

/// Three sequence lengths on one network: a plan each (three misses), every execution after
/// planning a hit, latency reported per shape, and each miss logged with -v.
#[test]
fn bench_cycles_input_shapes_and_reports_the_plan_cache() {
    let o = backplane(&[
        "-v",
        "bench",
        BERT,
        "--input-shapes",
        "input_ids=1x7",
        "--input-shapes",
        "input_ids=1x16",
        "--input-shapes",
        "input_ids=2x33",
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
    for shape in ["input_ids=1x7", "input_ids=1x16", "input_ids=2x33"] {
        assert!(out.contains(&format!("shape {shape}:")), "{shape}: {out}");
    }
    assert_eq!(out.matches("latency over 2 executions").count(), 3, "{out}");
    assert!(out.contains("backends: CpuAcc:"), "{out}");
    // 3 warm-up and 6 timed executions, all hits after the three plans.
    assert!(
        out.contains("plan cache: 3 plans cached (capacity 3), 9 hits, 3 misses, 0 evicted"),
        "{out}"
    );
    // The plans' working memory, which the runtime's memory budget bounds: BERT-tiny's
    // activations at these lengths take kibibytes to mebibytes, never bytes.
    assert!(
        out.contains("0 evicted, ") && (out.contains(" KiB held") || out.contains(" MiB held")),
        "{out}"
    );
    assert_eq!(err.matches("plan cache miss").count(), 3, "{err}");
    // Each plan's miss, phase by phase.
    assert_eq!(
        out.matches("ms (import ").count(),
        3,
        "each plan says what its miss cost: {out}"
    );
    assert!(
        out.contains(" ms, optimize ") && out.contains(" ms, load "),
        "{out}"
    );
}

/// `bench` on the BERT model cycling these sequence lengths, one execution per length, with
/// `extra` arguments: its standard output (the run must succeed).
fn bench_lengths(lengths: &[usize], extra: &[&str]) -> String {
    let shapes: Vec<String> = lengths.iter().map(|n| format!("input_ids=1x{n}")).collect();
    let mut args = vec!["bench", BERT];
    for shape in &shapes {
        args.extend(["--input-shapes", shape.as_str()]);
    }
    args.extend([
        "--warmup",
        "0",
        "--warmup-time",
        "0",
        "--iterations",
        "1",
        "--quiet",
    ]);
    args.extend(extra);
    let o = backplane(&args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    out
}

/// The BERT-shaped sequence lengths 7, 16, 33, 128 and 7 again on one loaded network: four
/// plans (four misses: one optimizer run, then three plans of the first plan's structure
/// re-shaped by replaying its optimization), the second 7 a hit, every execution a hit.
#[test]
fn bench_serves_bert_sequence_lengths_with_one_plan_each() {
    let out = bench_lengths(&[7, 16, 33, 128, 7], &[]);
    assert!(
        out.contains("plan cache: 4 plans cached (capacity 5), 6 hits, 4 misses, 0 evicted"),
        "{out}"
    );
    assert!(
        out.contains(" held, 1 optimizer run, 3 plans reshaped"),
        "{out}"
    );
    // The imports at 16, 33 and 128 had seq 7's structure: each replayed its optimization
    // (no replay was refused, so no optimizer run had a kept structure).
    assert!(
        out.contains(
            "plan structure: 3 plans reshaped (an earlier plan's optimization replayed); 0 of 1 \
             optimizer runs had an earlier plan's structure (not replayed), 0 of them its \
             decisions"
        ),
        "{out}"
    );
    assert_eq!(
        out.matches("; optimization replayed); backends:").count(),
        3,
        "{out}"
    );
    // The second 7 found seq 7's plan: it says so rather than repeating that plan's miss.
    assert_eq!(
        out.matches("plan from the cache (a hit: an earlier set's plan)")
            .count(),
        1,
        "{out}"
    );
    assert_eq!(out.matches("latency over 1 execution:").count(), 5, "{out}");
    // CpuAcc packed the products' constant weights for the first plan (and at most once more
    // per other panel layout); the later plans took them packed.
    let (packed, reused) = packing_counts(&out);
    assert!(
        packed > 0 && reused >= packed,
        "packed {packed}, reused {reused}: {out}"
    );
}

/// The counts of the "weights packed N, reused M" line of `bench --input-shapes`.
fn packing_counts(out: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("weights packed "))
        .unwrap_or_else(|| panic!("no packing line: {out}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(2)
        .map(|w| w.parse().unwrap())
        .collect();
    (numbers[0], numbers[1])
}

/// `--no-replay` optimizes every plan in full: the same lengths give four optimizer runs,
/// three of them of seq 7's structure with its decisions (what the replay serves by default).
#[test]
fn bench_no_replay_optimizes_every_plan() {
    let out = bench_lengths(&[7, 16, 33, 128], &["--no-replay"]);
    assert!(
        out.contains(" held, 4 optimizer runs, 0 plans reshaped"),
        "{out}"
    );
    assert!(
        out.contains(
            "plan structure: 0 plans reshaped (an earlier plan's optimization replayed); 3 of 4 \
             optimizer runs had an earlier plan's structure (not replayed), 3 of them its \
             decisions"
        ),
        "{out}"
    );
    assert!(!out.contains("; optimization replayed)"), "{out}");
}

/// A cache smaller than the cycle rebuilds a plan at every execution: the counts say so.
#[test]
fn a_plan_cache_smaller_than_the_cycle_evicts() {
    let o = backplane(&[
        "bench",
        BERT,
        "--input-shapes",
        "input_ids=1x5",
        "--input-shapes",
        "input_ids=1x6",
        "--plan-cache",
        "1",
        "--warmup",
        "0",
        "--warmup-time",
        "0",
        "--iterations",
        "2",
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // Planning: 5 miss, 6 miss (evicts 5); then 5, 6, 5, 6 each a miss evicting the other.
    assert!(
        out.contains("plan cache: 1 plan cached (capacity 1), 0 hits, 6 misses, 5 evicted"),
        "{out}"
    );
}

/// Usage errors: a symbolic input without a shape, a shape for an unknown input, and
/// --input-shapes with --input-shape.
#[test]
fn input_shapes_usage_errors_name_what_is_wrong() {
    let o = backplane(&["bench", BERT, "--input-shapes", "other=1x3", "--quiet"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("'other' is not an input"), "{err}");

    let o = backplane(&["bench", BERT, "--input-shapes", "input_ids=1xq", "--quiet"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not a shape"), "{err}");

    let o = backplane(&[
        "bench",
        BERT,
        "--input-shapes",
        "input_ids=1x3",
        "--input-shape",
        "input_ids=1x3",
    ]);
    assert_eq!(o.status.code(), Some(2));

    let o = backplane(&["bench", BERT, "--input-shapes", ";", "--quiet"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("symbolic dimensions"), "{err}");
}

/// `run --input-shapes` executes each set on one network and prints its outputs' shapes; a
/// set repeated is a cache hit.
#[test]
fn run_executes_each_shape_set_on_one_network() {
    let o = backplane(&[
        "run",
        BERT,
        "--input-shapes",
        "input_ids=1x7",
        "--input-shapes",
        "input_ids=3x128",
        "--input-shapes",
        "input_ids=1x7",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("hidden: f32 [1, 7, 96]"), "{out}");
    assert!(out.contains("hidden: f32 [3, 128, 96]"), "{out}");
    assert!(
        out.contains("plan cache: 2 plans cached (capacity 3), 1 hit, 2 misses, 0 evicted"),
        "{out}"
    );
    // Both runs of 1x7 print the same outputs.
    let firsts: Vec<&str> = out.lines().filter(|l| l.contains("[1, 7, 96]")).collect();
    assert_eq!(firsts.len(), 2, "{out}");
    assert_eq!(firsts[0], firsts[1]);
}

/// `run` on a model whose shapes depend on data (NonZero, a TopK with a computed k,
/// NonMaxSuppression) falls back to a DynamicNetwork, says so (and logs why with -v), and
/// its outputs match ONNX Runtime's (--compare, both input sets; --json too).
#[test]
fn run_serves_data_dependent_shapes_through_a_dynamic_network() {
    let model = "testdata/dynamic/data_dependent.onnx";
    for case in ["a", "b"] {
        let dir = format!("testdata/dynamic/data_dependent/{case}");
        let o = backplane(&[
            "-v",
            "run",
            model,
            "--input",
            &format!("logits={dir}/logits.npy"),
            "--input",
            &format!("boxes={dir}/boxes.npy"),
            "--compare",
            &dir,
            "--iterations",
            "2",
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(out.contains("compare: every output matches"), "{out}");
        assert!(
            out.contains("served by a DynamicNetwork (split at node 'nonzero' (NonZero))"),
            "{out}"
        );
        // Two executions: the second builds no plan (3 misses: before the NonZero, between
        // it and the NMS, after the NMS).
        assert!(out.contains("3 misses"), "{out}");
        assert!(
            err.contains("serving the model through a DynamicNetwork"),
            "{err}"
        );
        assert!(err.contains("op=NonMaxSuppression"), "{err}");
    }
    let dir = "testdata/dynamic/data_dependent/a";
    let o = backplane(&[
        "run",
        model,
        "--input",
        &format!("logits={dir}/logits.npy"),
        "--input",
        &format!("boxes={dir}/boxes.npy"),
        "--json",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["outputs"][0]["name"], "det_boxes");
    assert_eq!(doc["outputs"][0]["shape"], serde_json::json!([4, 4]));
    assert_eq!(
        doc["outputs"][2]["values"],
        serde_json::json!([0.0, 1.0, 2.0, 3.0])
    );
    assert!(
        doc["dynamic"].as_str().unwrap().contains("NonZero"),
        "{out}"
    );
}

/// `bench` on a model whose shapes depend on data serves it through a DynamicNetwork (data
/// is not bound at import): the first execution builds the plans (3 misses), every later one
/// finds them, and the split nodes' one-node imports are cached (the same inputs each time).
#[test]
fn bench_serves_data_dependent_shapes_through_a_dynamic_network() {
    let dir = "testdata/dynamic/data_dependent/a";
    let o = backplane(&[
        "-v",
        "bench",
        "testdata/dynamic/data_dependent.onnx",
        "--input",
        &format!("logits={dir}/logits.npy"),
        "--input",
        &format!("boxes={dir}/boxes.npy"),
        "--warmup",
        "1",
        "--iterations",
        "3",
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("plans cut at 2 nodes: 'nonzero' (NonZero), 'nms' (NonMaxSuppression)"),
        "{out}"
    );
    assert!(out.contains("backends (before the first cut): "), "{out}");
    assert!(out.contains("latency over 3 executions"), "{out}");
    // The first execution: 3 plans built; then 4 executions, 3 look-ups each, all hits.
    assert!(
        out.contains("first execution (builds the plans): "),
        "{out}"
    );
    assert!(
        out.contains("plan caches: 3 plans cached in 3 networks (capacity 24 in all), 12 hits, 3 misses, 0 evicted"),
        "{out}"
    );
    assert!(
        out.contains("split nodes: 2 node runs cached (at most 8 per node), 8 hits, 2 imports"),
        "{out}"
    );
    assert!(
        err.contains("serving the model through a DynamicNetwork"),
        "{err}"
    );
    // --profile times one static network: refused with the reason.
    let o = backplane(&[
        "bench",
        "testdata/dynamic/data_dependent.onnx",
        "--input",
        &format!("logits={dir}/logits.npy"),
        "--input",
        &format!("boxes={dir}/boxes.npy"),
        "--profile",
        "/tmp/dyn_never_written.json",
        "--quiet",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("data-dependent shapes"), "{err}");
}

/// `inspect` on a model whose shapes depend on data, with or without its inputs' values:
/// says where the plan is cut (every node needing run-time values, the first cut named) and
/// shows the static part before the first cut.
#[test]
fn inspect_shows_where_data_dependent_plans_are_cut() {
    let dir = "testdata/dynamic/data_dependent/a";
    let logits = format!("logits={dir}/logits.npy");
    let boxes = format!("boxes={dir}/boxes.npy");
    let model = "testdata/dynamic/data_dependent.onnx";
    for args in [
        vec!["inspect", model],
        vec!["inspect", model, "--input", &logits, "--input", &boxes],
    ] {
        let o = backplane(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(
            out.contains("the plan is cut at the first, node 'nonzero' (NonZero)"),
            "{out}"
        );
        assert!(out.contains("  cut: node 'nonzero' (NonZero): "), "{out}");
        assert!(
            out.contains("the static part before the first cut:"),
            "{out}"
        );
        // The static part: the Sigmoid before the NonZero, placed on a backend.
        assert!(out.contains("Sigmoid"), "{out}");
        assert!(out.contains("\nbackends: "), "{out}");
        // Data is never a constant: nothing was specialized.
        assert!(!out.contains("specialized on the values"), "{out}");
    }
}

/// `inspect` prints the model's inputs and outputs with their symbolic shapes, and `bench
/// --input-shapes` the symbols each plan is keyed by.
#[test]
fn inspect_and_bench_show_symbolic_shapes() {
    let o = backplane(&["inspect", BERT]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("symbolic input  'input_ids' [batch, seq]"),
        "{out}"
    );
    assert!(
        out.contains("symbolic output 'hidden' [batch, seq, 96]"),
        "{out}"
    );
    let o = backplane(&[
        "bench",
        BERT,
        "--input-shapes",
        "input_ids=2x5",
        "--warmup",
        "0",
        "--warmup-time",
        "0",
        "--iterations",
        "1",
        "--quiet",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("  symbols: batch=2, seq=5"), "{out}");
    // A data-dependent model's outputs are unknown until it runs.
    let o = backplane(&["inspect", "testdata/dynamic/data_dependent.onnx"]);
    let (out, _) = text(&o);
    assert!(
        out.contains("symbolic output 'det_boxes' unknown until run"),
        "{out}"
    );
    assert!(out.contains("symbolic input  'logits' [1, 20]"), "{out}");
}

/// `run` on a model whose Loop has scan outputs and a condition that ends it before its trip
/// count (their length is known only once it has run): served through a DynamicNetwork cut
/// at the Loop; every output matches ONNX Runtime's for inputs ending after 3 of 7, 5 of 5
/// and 1 of 4 iterations.
#[test]
fn run_serves_a_loop_ending_early_through_a_dynamic_network() {
    let model = "testdata/dynamic/loop_early_exit.onnx";
    for (case, length) in [("a", 3), ("b", 5), ("c", 1)] {
        let dir = format!("testdata/dynamic/loop_early_exit/{case}");
        let o = backplane(&[
            "run",
            model,
            "--input",
            &format!("x={dir}/x.npy"),
            "--input",
            &format!("limit={dir}/limit.npy"),
            "--compare",
            &dir,
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{case}: {out}\n{err}");
        assert!(
            out.contains("compare: every output matches"),
            "{case}: {out}"
        );
        assert!(
            out.contains("served by a DynamicNetwork (split at node 'loop' (Loop))"),
            "{case}: {out}"
        );
        assert!(
            out.contains(&format!("output 'sums' f32[{length}]")),
            "{case}: {out}"
        );
        // Every node ran at the cut: the summary says so rather than printing nothing.
        assert!(out.contains("backends: no layers\n"), "{case}: {out}");
    }
}

/// Nothing is copied at a cut: the rest borrows the inputs and what the part before the cut
/// produced. With `--max-memory 800`, below the bytes crossing the NonZero cut (the inputs and
/// the prefix's outputs, which were copied there before), `run` succeeds; a budget below a
/// plan's working memory still fails with the typed error; with room, the caches report the
/// bytes they hold.
#[test]
fn nothing_is_copied_at_a_cut_and_the_budget_still_holds() {
    let dir = "testdata/dynamic/data_dependent/a";
    let args = |budget: &'static str| {
        vec![
            "run".to_string(),
            "testdata/dynamic/data_dependent.onnx".into(),
            "--input".into(),
            format!("logits={dir}/logits.npy"),
            "--input".into(),
            format!("boxes={dir}/boxes.npy"),
            "--max-memory".into(),
            budget.into(),
        ]
    };
    let below_copies = args("800");
    let o = backplane(&below_copies.iter().map(String::as_str).collect::<Vec<_>>());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let tight = args("400");
    let o = backplane(&tight.iter().map(String::as_str).collect::<Vec<_>>());
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("bytes of working memory per execution, more than the memory budget of 400"),
        "{err}"
    );
    let roomy = args("1600");
    let o = backplane(&roomy.iter().map(String::as_str).collect::<Vec<_>>());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains(" KiB held, 3 optimizer runs, 0 plans reshaped; split nodes:"),
        "{out}"
    );
}

//! The plan caches of every `DynamicNetwork` on a runtime, together: the runtime's totals
//! (`Runtime::plan_cache_stats`) and the one memory budget the caches of a network share.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::{DynamicNetwork, ImportOptions, Runtime, Tensor};
use support::{repo, token_ids};

const BERT: &str = "testdata/dynamic/bert_tiny.onnx";
const DATA_DEPENDENT: &str = "testdata/dynamic/data_dependent.onnx";

fn serve<'r>(rt: &'r Runtime, model: &str) -> DynamicNetwork<'r> {
    DynamicNetwork::from_file(
        rt,
        &repo().join(model),
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    )
    .unwrap()
}

/// One input set of testdata/dynamic/data_dependent (a or b) and ONNX Runtime's outputs.
fn case(name: &str) -> (Tensor, Tensor, Vec<Tensor>) {
    let dir = repo().join("testdata/dynamic/data_dependent").join(name);
    let read = |n: &str| backplane::npy::read_file(&dir.join(format!("{n}.npy"))).unwrap();
    let want = ["det_boxes", "det_scores", "det_rank"]
        .iter()
        .map(|n| read(n))
        .collect();
    (read("logits"), read("boxes"), want)
}

/// Run a data-dependent case and check its outputs against ONNX Runtime's.
fn run_case(net: &DynamicNetwork<'_>, name: &str) {
    let (logits, boxes, want) = case(name);
    let got = net
        .execute(&[("logits", &logits), ("boxes", &boxes)])
        .unwrap();
    assert_eq!(got.len(), want.len());
    for ((n, g), w) in got.iter().zip(&want) {
        support::compare(g, w, 1e-5, 1e-5).unwrap_or_else(|e| panic!("{name} {n}: {e}"));
    }
}

/// Two models on one runtime (BERT with two sequence lengths, one of them twice, and the
/// data-dependent detector cut at two nodes): the runtime's totals are the sums of every
/// network's own counts, nested networks and cut nodes included; a dropped network's entries
/// leave the totals, its history (hits, misses, optimizer runs) stays.
#[test]
fn the_runtime_totals_every_network_it_serves() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    assert_eq!(rt.plan_cache_stats(), backplane::PlanCacheTotals::default());
    let bert = serve(&rt, BERT);
    let detector = serve(&rt, DATA_DEPENDENT);
    for seq in [7, 9, 7] {
        bert.execute(&[("input_ids", &token_ids(seq, 5))]).unwrap();
    }
    run_case(&detector, "a");
    run_case(&detector, "a");

    let (b, d) = (bert.total_stats(), detector.total_stats());
    let nodes = detector.total_node_stats();
    let t = rt.plan_cache_stats();
    assert_eq!(t.networks, b.networks + d.networks, "{t}");
    assert_eq!(
        t.networks, 4,
        "BERT, the detector and its two nested networks: {t}"
    );
    assert_eq!(t.plans.entries, b.size + d.size, "{t}");
    assert_eq!(t.plans.bytes, b.bytes + d.bytes, "{t}");
    assert_eq!(t.plans.hits, b.hits + d.hits, "{t}");
    assert_eq!(t.plans.misses, b.misses + d.misses, "{t}");
    assert_eq!((t.plans.misses, b.misses, d.misses), (5, 2, 3), "{t}");
    assert_eq!(t.plans.evictions, 0, "{t}");
    assert_eq!(t.optimizer_runs, b.optimizer_runs + d.optimizer_runs, "{t}");
    assert_eq!(t.plans_reshaped, b.plans_reshaped + d.plans_reshaped, "{t}");
    // BERT at 9 replayed the optimization of BERT at 7 (one structure); the detector's three
    // networks are three structures.
    assert_eq!(
        (
            b.optimizer_runs,
            b.plans_reshaped,
            d.optimizer_runs,
            d.plans_reshaped
        ),
        (1, 1, 3, 0),
        "{t}"
    );
    assert_eq!(t.nodes.entries, nodes.size, "{t}");
    assert_eq!(t.nodes.bytes, nodes.bytes, "{t}");
    assert_eq!(
        (t.nodes.hits, t.nodes.misses),
        (nodes.hits, nodes.misses),
        "{t}"
    );
    assert_eq!((t.nodes.misses, t.nodes.hits), (2, 2), "{t}");
    // What the caches hold counts against one budget per served model.
    assert_eq!(bert.held_bytes(), b.bytes);
    assert_eq!(detector.held_bytes(), d.bytes + nodes.bytes);

    drop(detector);
    let after = rt.plan_cache_stats();
    assert_eq!(after.networks, 1, "{after}");
    assert_eq!(
        (after.plans.entries, after.plans.bytes),
        (2, b.bytes),
        "{after}"
    );
    assert_eq!((after.nodes.entries, after.nodes.bytes), (0, 0), "{after}");
    assert_eq!(after.plans.misses, t.plans.misses, "{after}");
    assert_eq!(after.optimizer_runs, t.optimizer_runs, "{after}");
    assert_eq!(after.plans_reshaped, t.plans_reshaped, "{after}");
    assert_eq!(
        after.plans.evictions, 0,
        "dropped with their network: {after}"
    );
    drop(bert);
    let none = rt.plan_cache_stats();
    assert_eq!(
        (none.networks, none.plans.entries, none.plans.bytes),
        (0, 0, 0)
    );
    assert!(rt.loaded_networks().is_empty());
}

/// One budget across a network's caches: with a memory budget one byte short of what the
/// detector's caches hold after a run (three plans in three networks, two cut nodes' runs,
/// each cache holding one entry of its capacity of 8), the caches stay within it by evicting
/// the least recently used entries of *other* caches (each cache alone never exceeds its
/// capacity, so each eviction is across caches). Outputs stay those of ONNX Runtime.
#[test]
fn a_networks_caches_share_one_memory_budget() {
    let probe = backplane::RuntimeBuilder::new().build().unwrap();
    let held = {
        let net = serve(&probe, DATA_DEPENDENT);
        run_case(&net, "a");
        let (plans, nodes) = (net.total_stats(), net.total_node_stats());
        assert_eq!((plans.size, nodes.size), (3, 2));
        net.held_bytes()
    };
    assert!(held > 0);
    let budget = held - 1;
    let rt = backplane::RuntimeBuilder::new()
        .max_memory(budget)
        .build()
        .unwrap();
    let net = serve(&rt, DATA_DEPENDENT);
    for name in ["a", "a", "b", "a"] {
        run_case(&net, name);
        assert!(
            net.held_bytes() <= budget,
            "after {name}: {} held, budget {budget}",
            net.held_bytes()
        );
        let t = rt.plan_cache_stats();
        assert_eq!(
            t.plans.bytes + t.nodes.bytes,
            net.held_bytes(),
            "after {name}: {t}"
        );
    }
    let (plans, nodes) = (net.total_stats(), net.total_node_stats());
    assert!(
        plans.evictions + nodes.evictions > 0,
        "{plans}; {nodes}; held {}",
        net.held_bytes()
    );
    // The first network's cache holds at most one plan (one input shape): its evictions were
    // made by the other caches' entries.
    let own = net.stats();
    assert!(own.size <= 1, "{own}");
    let t = rt.plan_cache_stats();
    assert_eq!(
        t.plans.evictions + t.nodes.evictions,
        plans.evictions + nodes.evictions,
        "{t}"
    );
    drop(net);
    assert!(rt.loaded_networks().is_empty());
}

/// A plan that alone needs more than the budget is refused with a typed error naming the
/// budget; the runtime and the network keep working for shapes that fit.
#[test]
fn a_plan_over_the_whole_budget_is_refused() {
    let probe = backplane::RuntimeBuilder::new().build().unwrap();
    let small = {
        let net = serve(&probe, BERT);
        net.execute(&[("input_ids", &token_ids(4, 5))]).unwrap();
        net.stats().bytes
    };
    let rt = backplane::RuntimeBuilder::new()
        .max_memory(small)
        .build()
        .unwrap();
    let net = serve(&rt, BERT);
    let err = net
        .execute(&[("input_ids", &token_ids(64, 5))])
        .unwrap_err();
    assert!(
        matches!(
            err,
            backplane::Error::Runtime(backplane::RuntimeError::MemoryBudget { .. })
                | backplane::Error::CacheBudget { .. }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains(&small.to_string()), "{err}");
    net.execute(&[("input_ids", &token_ids(4, 5))]).unwrap();
    let t = rt.plan_cache_stats();
    assert_eq!((t.plans.entries, t.plans.misses), (1, 1), "{t}");
}

//! A Loop with scan outputs that its condition ends before its trip count: the scan outputs'
//! length is known only once it has run, so the plan is cut at the Loop (the data-dependent
//! path), the Loop runs on its inputs' values and the rest is planned for the length it
//! produced. Outputs match ONNX Runtime's (testdata/dynamic/loop_early_exit, written by
//! scripts/gen_dynamic_models.py).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::{DynamicNetwork, ImportOptions, Tensor};
use std::sync::Arc;
use support::{compare, repo};

const MODEL: &str = "testdata/dynamic/loop_early_exit.onnx";

fn read(case: &str, name: &str) -> Tensor {
    let path = repo()
        .join("testdata/dynamic/loop_early_exit")
        .join(case)
        .join(format!("{name}.npy"));
    backplane::npy::read_file(&path).unwrap()
}

fn network(rt: &backplane::Runtime) -> DynamicNetwork<'_> {
    DynamicNetwork::from_file(
        rt,
        &repo().join(MODEL),
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    )
    .unwrap()
}

/// Three input sets ending after 3 of 7, all 5 of 5 and 1 of 4 iterations: every output
/// (the carried total, the scan output, and the product planned after the loop) matches
/// ONNX Runtime's, and the plan is cut at the Loop.
#[test]
fn a_loop_ending_on_its_condition_runs_through_the_data_dependent_path() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = network(&rt);
    for (case, length) in [("a", 3), ("b", 5), ("c", 1), ("a", 3)] {
        let (x, limit) = (read(case, "x"), read(case, "limit"));
        let got = net.execute(&[("x", &x), ("limit", &limit)]).unwrap();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["total", "sums", "doubled"], "{case}");
        for (name, value) in &got {
            let want = read(case, name);
            compare(value, &want, 1e-6, 1e-6).unwrap_or_else(|m| panic!("{case} {name}: {m}"));
        }
        assert_eq!(got[1].1.shape().dims(), &[length], "{case}");
    }
    let cuts = net.cuts();
    assert_eq!(cuts[0].op_type, "Loop", "{cuts:?}");
    // Case a twice: its second run planned nothing new.
    let rest = cuts[0].rest.expect("the rest after the loop was planned");
    assert_eq!(
        rest.misses, 3,
        "one plan of the rest per scan length: {rest}"
    );
    assert!(rest.hits >= 1, "{rest}");
}

/// A static import of the model cannot fix the scan outputs' length: it reports the Loop as
/// needing the values of the inputs its body reads.
#[test]
fn a_static_import_reports_the_loop_as_needing_values() {
    let options = ImportOptions::default().with_input_shape("x", vec![7]);
    let err = backplane::load_onnx(&repo().join(MODEL), &options).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("loop"), "{text}");
    assert!(text.contains("scan outputs"), "{text}");
    match err {
        backplane::Error::Onnx(backplane::onnx::OnnxError::NeedsInputValues { nodes, .. }) => {
            assert_eq!(nodes[0].op_type, "Loop");
        }
        other => panic!("expected NeedsInputValues, got {other}"),
    }
}

/// The same values with every input bound at import (as the data-dependent path binds them
/// for the Loop alone): the Loop is unrolled until its condition turns false and folds.
#[test]
fn with_its_inputs_known_the_loop_folds_to_the_length_it_ran() {
    let (x, limit) = (read("a", "x"), read("a", "limit"));
    let options = ImportOptions::default()
        .with_input_value("x", Arc::new(x))
        .with_input_value("limit", Arc::new(limit));
    let network = backplane::load_onnx(&repo().join(MODEL), &options).unwrap();
    let sums = network.find_tensor("sums").expect("the scan output");
    assert_eq!(network.tensor(sums).info.shape.dims(), &[3]);
}

/// The split node's cache counts its entries' bytes (bound inputs and folded outputs) and,
/// with every other cache of the network, stays within the runtime's memory budget: with a
/// budget that holds what one input set needs, each new limit (same shapes, so the same
/// plan) evicts older entries though the node's capacity (8) is far from full, and the
/// caches together never hold more than the budget (a longer scan output makes a larger plan
/// of the rest, so that the set for limit 100 evicts entries of other caches as well).
#[test]
fn the_split_nodes_cache_is_bounded_by_the_memory_budget() {
    let x = read("a", "x");
    let limit = |v: f32| Tensor::from_vec(Vec::<usize>::new(), vec![v]).unwrap();
    let held = |net: &DynamicNetwork<'_>| net.total_stats().bytes + net.total_node_stats().bytes;
    let one = {
        let rt = backplane::RuntimeBuilder::new().build().unwrap();
        let net = network(&rt);
        net.execute(&[("x", &x), ("limit", &limit(3.0))]).unwrap();
        let nodes = net.total_node_stats();
        assert_eq!(nodes.size, 1, "{nodes}");
        assert!(
            nodes.bytes >= x.bytes().len(),
            "the key holds x's bytes: {nodes:?}"
        );
        held(&net)
    };
    let rt = backplane::RuntimeBuilder::new()
        .max_memory(one + 8)
        .build()
        .unwrap();
    let net = network(&rt);
    for (v, length) in [(3.0, 3), (1.0, 2), (100.0, 7)] {
        let got = net.execute(&[("x", &x), ("limit", &limit(v))]).unwrap();
        assert_eq!(got[1].1.shape().dims(), &[length], "limit {v}");
        assert!(held(&net) <= one + 8, "limit {v}: {}", held(&net));
        assert_eq!(held(&net), net.held_bytes(), "limit {v}");
    }
    let nodes = net.total_node_stats();
    assert_eq!(nodes.misses, 3, "{nodes}");
    assert!(nodes.evictions >= 2, "{nodes}");
    assert!(nodes.size <= 1, "{nodes}");
}

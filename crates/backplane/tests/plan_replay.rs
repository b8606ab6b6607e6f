//! Replaying one optimization for a network of the same structure at other shapes
//! (`Runtime::replay_optimization`, what a `DynamicNetwork` does for a plan of an earlier
//! plan's structure): where the recorded decisions hold, the result equals a full
//! optimization's; a record that does not fit is refused, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::{
    BackendId, ImportOptions, Network, OptimizationRecord, OptimizerOptions, ReplayOutcome, Runtime,
};
use support::{repo, token_ids};

const BERT: &str = "testdata/dynamic/bert_tiny.onnx";

/// BERT-tiny imported for one sequence length.
fn import_at(seq: usize) -> Network {
    let options = ImportOptions::default().with_input_shape("input_ids", vec![1, seq]);
    backplane::load_onnx(&repo().join(BERT), &options).unwrap()
}

fn options(backends: &[&str]) -> OptimizerOptions {
    OptimizerOptions::new(
        backends
            .iter()
            .map(|b| BackendId::new(*b).unwrap())
            .collect(),
    )
}

/// The record of BERT-tiny optimized at seq 7 on CpuAcc then CpuRef.
fn record_at_7(rt: &Runtime) -> OptimizationRecord {
    let record = rt
        .optimize(&import_at(7), &options(&["CpuAcc", "CpuRef"]))
        .unwrap()
        .record();
    assert!(
        record.replayable && !record.substitutions.is_empty(),
        "CpuAcc fuses BERT's chains, and nothing was rejected: {record:?}"
    );
    record
}

/// Run an optimized network once on `input` and unload it.
fn run(rt: &Runtime, optimized: backplane::OptimizedNetwork, seq: usize) -> backplane::Tensor {
    let id = rt.load_network(optimized).unwrap();
    let mut out = rt
        .execute(id, &[("input_ids", &token_ids(seq, 5))])
        .unwrap();
    rt.unload_network(id).unwrap();
    out.remove(0).1
}

/// Seq 7's optimization replayed at other lengths (2, a prime, past CpuAcc's 12-row panels, a
/// long one): the same network (layers, replacements with their re-shaped parameters,
/// order), backends, memory plan and outputs as a full optimization at that length.
#[test]
fn a_replayed_optimization_equals_a_full_one() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let record = record_at_7(&rt);
    let opts = options(&["CpuAcc", "CpuRef"]);
    for seq in [2, 13, 33, 128] {
        let network = import_at(seq);
        let full = rt.optimize(&network, &opts).unwrap();
        let replayed = match rt.replay_optimization(&network, &opts, &[&record]).unwrap() {
            ReplayOutcome::Replayed(o) => *o,
            ReplayOutcome::Refused(why) => panic!("seq {seq}: refused: {why}"),
        };
        assert_eq!(replayed.record(), full.record(), "seq {seq}");
        assert_eq!(replayed.record(), record, "seq {seq}");
        assert!(
            replayed.network() == full.network(),
            "seq {seq}: the replayed network differs from the full optimization's"
        );
        assert_eq!(replayed.assignment(), full.assignment(), "seq {seq}");
        assert_eq!(replayed.memory_plan(), full.memory_plan(), "seq {seq}");
        let (got, want) = (run(&rt, replayed, seq), run(&rt, full, seq));
        assert_eq!(got.shape().dims(), &[1, seq, 96]);
        assert_eq!(got.bytes(), want.bytes(), "seq {seq}");
    }
}

/// A record that does not fit the network or the options is refused with the reason (the
/// caller then optimizes in full): another backend for a layer, a layer the network lacks,
/// a replacement the backend no longer makes, a record of an optimization whose
/// `optimize_subgraph` rejected layers.
#[test]
fn a_record_that_does_not_fit_is_refused() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let record = record_at_7(&rt);
    let network = import_at(33);
    let refusal = |opts: &OptimizerOptions, record: &OptimizationRecord| match rt
        .replay_optimization(&network, opts, &[record])
        .unwrap()
    {
        ReplayOutcome::Refused(why) => why,
        ReplayOutcome::Replayed(_) => panic!("replayed {record:?}"),
    };
    let why = refusal(&options(&["CpuRef"]), &record);
    assert!(
        why.contains("goes to CpuRef at these shapes, to CpuAcc when recorded"),
        "{why}"
    );
    let opts = options(&["CpuAcc", "CpuRef"]);
    let mut missing = record.clone();
    missing.substitutions[0].replaced[0] = "no_such_layer".into();
    let why = refusal(&opts, &missing);
    assert!(
        why.contains("the recorded substitution's layer 'no_such_layer' is missing"),
        "{why}"
    );
    let mut renamed = record.clone();
    renamed.substitutions[0].replacement[0].push_str("_elsewhere");
    let why = refusal(&opts, &renamed);
    assert!(why.contains("otherwise than recorded"), "{why}");
    let mut rejected = record.clone();
    rejected.replayable = false;
    let why = refusal(&opts, &rejected);
    assert!(why.contains("optimize_subgraph"), "{why}");
    // The record as it is fits.
    assert!(matches!(
        rt.replay_optimization(&network, &opts, &[&record]).unwrap(),
        ReplayOutcome::Replayed(_)
    ));
}

/// Of several records of one structure, the first whose backends are the ones chosen at these
/// shapes is replayed: a CpuRef-only record is passed over on CpuAcc-then-CpuRef, and the
/// reverse.
#[test]
fn the_first_record_whose_backends_hold_is_replayed() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let on_acc = record_at_7(&rt);
    let ref_only = options(&["CpuRef"]);
    let on_ref = rt.optimize(&import_at(7), &ref_only).unwrap().record();
    assert_ne!(on_acc, on_ref);
    let network = import_at(33);
    for (opts, records, want) in [
        (options(&["CpuAcc", "CpuRef"]), [&on_ref, &on_acc], &on_acc),
        (ref_only.clone(), [&on_acc, &on_ref], &on_ref),
    ] {
        match rt.replay_optimization(&network, &opts, &records).unwrap() {
            ReplayOutcome::Replayed(o) => {
                assert_eq!(o.record(), *want);
                assert_eq!(o.record(), rt.optimize(&network, &opts).unwrap().record());
            }
            ReplayOutcome::Refused(why) => panic!("refused: {why}"),
        }
    }
}

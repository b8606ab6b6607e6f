//! One model served for several input shapes by a `DynamicNetwork`: plans per concrete shape
//! from a bounded cache, outputs equal to separate static imports, weights packed once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::cpu_acc::CpuAccBackend;
use backplane::{
    DataType, DynamicNetwork, ImportOptions, PlanCacheStats, Runtime, Tensor, TensorInfo,
};
use std::sync::Arc;
use support::{onnx_f32_input, repo, runtime_with, token_ids};

const BERT: &str = "testdata/dynamic/bert_tiny.onnx";

/// The model imported for one shape, optimized and loaded alone, run on `input`.
fn static_run(input: &Tensor) -> Vec<(String, Tensor)> {
    let rt = runtime_with(&CpuAccBackend::new());
    let options =
        ImportOptions::default().with_input_shape("input_ids", input.shape().dims().to_vec());
    let network = backplane::load_onnx(&repo().join(BERT), &options).unwrap();
    let optimized = rt
        .optimize(&network, &backplane::default_optimizer_options())
        .unwrap();
    let id = rt.load_network(optimized).unwrap();
    rt.execute(id, &[("input_ids", input)]).unwrap()
}

/// BERT-tiny imported for one sequence length (no optimization).
fn import_at(model: backplane::onnx::proto::ModelProto, seq: usize) -> backplane::Network {
    let mut options = ImportOptions::default().with_input_shape("input_ids", vec![1, seq]);
    options.evaluator = Some(Arc::new(backplane::cpu_ref::CpuRefEvaluator));
    backplane::onnx::import_model(model, Some(&repo().join("testdata/dynamic")), &options).unwrap()
}

fn bert_model() -> backplane::onnx::proto::ModelProto {
    backplane::onnx::decode_model_file(&repo().join(BERT)).unwrap()
}

/// Imports of one model at two lengths differ in shapes and in the attributes folded from
/// them, not in structure: equal keys. A model with a layer renamed has another structure.
#[test]
fn imports_at_two_lengths_share_their_structure() {
    use backplane::core::StructuralKey;
    let at_7 = import_at(bert_model(), 7);
    let at_33 = import_at(bert_model(), 33);
    assert_ne!(
        at_7, at_33,
        "the imports differ (shapes, folded shape attributes)"
    );
    let reshapes_differ = at_7
        .layers()
        .iter()
        .zip(at_33.layers())
        .any(|(a, b)| matches!(a.op, backplane::core::Op::Reshape { .. }) && a.op != b.op);
    assert!(reshapes_differ, "some Reshape targets follow the length");
    assert_eq!(StructuralKey::of(&at_7), StructuralKey::of(&at_33));

    let mut renamed = bert_model();
    let graph = renamed.graph.as_mut().unwrap();
    let node = graph
        .node
        .iter_mut()
        .find(|n| n.op_type.as_deref() == Some("Softmax"))
        .unwrap();
    node.name = Some(format!(
        "{}_renamed",
        node.name.as_deref().unwrap_or("softmax")
    ));
    assert_ne!(
        StructuralKey::of(&import_at(renamed, 7)),
        StructuralKey::of(&at_7)
    );
}

fn dynamic(rt: &Runtime) -> DynamicNetwork<'_> {
    DynamicNetwork::from_file(
        rt,
        &repo().join(BERT),
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    )
    .unwrap()
}

/// Sequence lengths 7, 16, 33, 128 and 7 again on one dynamic network: each output equals a
/// separate static import's bit for bit, the cache misses four times (one optimizer run, then
/// three plans re-shaped from its record) and hits once per repeated shape, and the
/// weights are packed once (per packed layout: with AVX2 a product of at most 12 rows reads
/// interleaved panels and a longer one split halves, so seq 7 and seq 16 may each pack).
#[test]
fn bert_shaped_encoder_serves_every_sequence_length() {
    let acc = CpuAccBackend::new();
    let rt = runtime_with(&acc);
    let net = dynamic(&rt);
    let weights = net.kept_weight_bytes();
    assert!(
        weights > 100_000,
        "the kept model holds its weights before the first import: {weights}"
    );
    let mut packed_after = Vec::new();
    for seq in [7, 16, 33, 128, 7] {
        let input = token_ids(seq, 7);
        let got = net.execute(&[("input_ids", &input)]).unwrap();
        let want = static_run(&input);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, want[0].0);
        assert_eq!(got[0].1.shape().dims(), &[1, seq, 96]);
        assert_eq!(
            got[0].1.bytes(),
            want[0].1.bytes(),
            "seq {seq}: the dynamic network's output differs from a static import's"
        );
        packed_after.push(acc.packing_stats());
        let (plan, hit) = net.plan(&[("input_ids", &input)]).unwrap();
        assert!(hit);
        assert_eq!(
            plan.reshaped,
            seq != 7,
            "seq {seq}: every plan after the first replays its optimization"
        );
        let record = plan.optimized.as_ref().unwrap().record();
        assert!(
            record.replayable && !record.substitutions.is_empty(),
            "CpuAcc fused chains, and the record can be replayed: {:?}",
            record.substitutions
        );
        assert_eq!(
            net.kept_weight_bytes(),
            0,
            "seq {seq}: the first import shared every weight; later imports must not copy them"
        );
    }
    let stats = net.stats();
    assert!(
        stats.bytes > 0,
        "the plans' working memory is counted: {stats:?}"
    );
    assert_eq!(
        stats,
        PlanCacheStats {
            size: 4,
            capacity: backplane::dynamic_network::DEFAULT_PLAN_CAPACITY,
            networks: 1,
            // The second 7, and the look-up after each execution.
            hits: 6,
            misses: 4,
            evictions: 0,
            bytes: stats.bytes,
            optimizer_runs: 1,
            plans_reshaped: 3,
            same_structure: 0,
            same_decisions: 0,
        }
    );
    // The imports at 16, 33 and 128 had seq 7's structure, and every decision of its
    // optimization held at their shapes (CpuAcc and CpuRef accept the same layers at every
    // length, CpuAcc fuses the same chains): each replayed it, re-shaped, with no optimizer
    // search; the outputs above equal full optimizations'. CpuAcc's and CpuRef's answers that
    // hold at every shape were asked for the first plan only: the later plans replayed them.
    let answers = net.support_answers().unwrap();
    assert!(
        !answers.is_empty() && answers.replayed() >= 3 * answers.len() as u64,
        "{} answers kept, {} replayed",
        answers.len(),
        answers.replayed()
    );
    eprintln!("packing counts after each run: {packed_after:?}");
    // Twelve products with constant weights (q, k, v, output, two feed-forward, per layer).
    let first = packed_after[0].packed;
    assert!(first > 0 && first <= 12, "first plan packed {first}");
    assert!(packed_after[1].packed <= 2 * first);
    assert_eq!(
        packed_after[4].packed, packed_after[1].packed,
        "plans for seq 33, 128 and 7 again packed weights again: {packed_after:?}"
    );
    assert!(packed_after[4].reused >= 2 * first, "{packed_after:?}");
    drop(net);
    assert!(
        rt.loaded_networks().is_empty(),
        "plans outlive their network"
    );
}

/// A full cache unloads its least recently used plan; a shape seen again after its plan was
/// evicted is a miss.
#[test]
fn the_least_recently_used_plan_is_evicted() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = dynamic(&rt).with_capacity(2);
    for seq in [3, 5, 3, 8, 5, 3] {
        let out = net.execute(&[("input_ids", &token_ids(seq, 7))]).unwrap();
        assert_eq!(out[0].1.shape().dims(), &[1, seq, 96]);
    }
    // 3 miss, 5 miss, 3 hit, 8 miss (evicts 5), 5 miss (evicts 3), 3 miss (evicts 8).
    let stats = net.stats();
    assert_eq!((stats.hits, stats.misses, stats.evictions), (1, 5, 3));
    assert_eq!(stats.size, 2);
    assert_eq!(rt.loaded_networks().len(), 2);
}

/// A structure's recorded optimization lives as long as a plan of that structure does: with
/// room for one plan, each new length evicts the previous plan, but the new plan has the same
/// structure, so the record stays and every later plan replays it; the network keeps one
/// record, not one per plan. (A structure whose last plan goes loses its records:
/// `dynamic_network/cache.rs`'s unit test, as one model's plans here share one structure.)
#[test]
fn a_record_lives_while_a_plan_of_its_structure_does() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = dynamic(&rt).with_capacity(1);
    assert_eq!(net.kept_records(), 0);
    for seq in [3, 5, 8, 3] {
        let input = token_ids(seq, 7);
        let out = net.execute(&[("input_ids", &input)]).unwrap();
        assert_eq!(out[0].1.shape().dims(), &[1, seq, 96]);
        let (plan, hit) = net.plan(&[("input_ids", &input)]).unwrap();
        assert!(hit);
        assert_eq!(plan.reshaped, seq != 3 || net.stats().misses > 1);
        assert_eq!(net.kept_records(), 1, "seq {seq}");
    }
    let stats = net.stats();
    assert_eq!(
        (
            stats.misses,
            stats.evictions,
            stats.optimizer_runs,
            stats.plans_reshaped
        ),
        (4, 3, 1, 3),
        "{stats:?}"
    );
}

/// A shape the declaration does not allow (a wrong rank) is an error naming the input, and
/// the network keeps serving.
#[test]
fn a_shape_that_does_not_fit_is_refused() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = dynamic(&rt);
    let bad = Tensor::from_f64_values(TensorInfo::new(DataType::I64, vec![4]), &[1.0; 4]).unwrap();
    let err = net.execute(&[("input_ids", &bad)]).unwrap_err().to_string();
    assert!(err.contains("input_ids"), "{err}");
    assert!(net.execute(&[("input_ids", &token_ids(4, 7))]).is_ok());
    assert_eq!(net.stats().misses, 1);
}

/// An input the model needs at import (a Reshape's shape) is part of a plan's key: the same
/// data shape with another value is a new plan, the same value again a hit; the plan binds
/// that input and is fed only the others.
#[test]
fn inputs_needed_at_import_key_plans_by_value() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = DynamicNetwork::from_file(
        &rt,
        &repo().join("testdata/dynamic/reshape_by_input.onnx"),
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    )
    .unwrap();
    let x = |a: usize, b: usize| {
        let v: Vec<f64> = (0..a * b).map(|i| i as f64).collect();
        Tensor::from_f64_values(TensorInfo::new(DataType::F32, vec![a, b]), &v).unwrap()
    };
    let shape = |d: [i64; 2]| Tensor::from_vec(vec![2], d.to_vec()).unwrap();
    let cases: [((usize, usize), [i64; 2]); 4] = [
        ((2, 6), [3, 4]),
        ((2, 6), [4, 3]),
        ((2, 6), [3, 4]),
        ((3, 4), [6, 2]),
    ];
    for ((a, b), dims) in cases {
        let (xt, st) = (x(a, b), shape(dims));
        let inputs = [("x", &xt), ("shape", &st)];
        let (plan, _) = net.plan(&inputs).unwrap();
        assert_eq!(plan.bound, vec!["shape".to_string()]);
        let out = net.execute(&inputs).unwrap();
        let want: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        assert_eq!(out[0].1.shape().dims(), want.as_slice());
        let y = out[0].1.as_slice::<f32>().unwrap();
        assert_eq!(y[5], 6.0);
    }
    // Each case looks its plan up twice (plan, then execute).
    let stats = net.stats();
    assert_eq!((stats.misses, stats.hits, stats.size), (3, 5, 3));
}

/// One input set of testdata/dynamic/data_dependent (a or b): (logits, boxes), and the
/// outputs ONNX Runtime computed for it, by name.
fn data_dependent_case(case: &str) -> (Tensor, Tensor, Vec<(String, Tensor)>) {
    let dir = repo().join("testdata/dynamic/data_dependent").join(case);
    let read = |name: &str| backplane::npy::read_file(&dir.join(format!("{name}.npy"))).unwrap();
    let want = ["det_boxes", "det_scores", "det_rank"]
        .iter()
        .map(|n| (n.to_string(), read(n)))
        .collect();
    (read("logits"), read("boxes"), want)
}

/// Data-dependent shapes (NonZero, a TopK whose k is computed from the kept count,
/// NonMaxSuppression): the plan is split at the first such node, the node runs on its values
/// and the rest is planned for the shapes it produced. Outputs match ONNX Runtime's; a second
/// run of the same inputs builds nothing, another input set keeping another count plans the
/// rest after the NonZero again.
#[test]
fn data_dependent_shapes_run_then_the_rest_is_planned() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = DynamicNetwork::from_file(
        &rt,
        &repo().join("testdata/dynamic/data_dependent.onnx"),
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    )
    .unwrap();
    let check = |case: &str| {
        let (logits, boxes, want) = data_dependent_case(case);
        let inputs = [("logits", &logits), ("boxes", &boxes)];
        let got = net.execute(&inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for ((gn, g), (wn, w)) in got.iter().zip(&want) {
            assert_eq!(gn, wn);
            assert_eq!(g.dtype(), w.dtype(), "{case} {gn}");
            assert_eq!(g.shape().dims(), w.shape().dims(), "{case} {gn}");
            for (a, b) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
                assert!(
                    (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                    "{case} {gn}: {a} vs {b}"
                );
            }
        }
        got
    };
    let first = check("a");
    let (logits, boxes, _) = data_dependent_case("a");
    let (plan, hit) = net.plan(&[("logits", &logits), ("boxes", &boxes)]).unwrap();
    assert!(hit);
    let split = plan.split.as_ref().expect("a split plan");
    assert_eq!(split.op_type, "NonZero");
    assert!(
        plan.id.is_some(),
        "the Sigmoid and Reshapes before the NonZero are planned"
    );
    let rest = split.rest().expect("the rest was planned by the first run");
    // The rest splits again at the NonMaxSuppression (its TopK's k is known once the
    // NonZero's count is).
    let (rest_stats, total) = (rest.total_stats(), net.total_stats());
    assert_eq!(rest_stats.misses, 2, "{rest_stats}");
    assert_eq!(total.misses, 3, "{total}");
    // Three networks (the first part, and the rests after each cut), 8 plans each at most:
    // 24 in all.
    assert_eq!((total.networks, total.capacity), (3, 24), "{total}");
    // The NonZero and the NonMaxSuppression were each imported once.
    assert_eq!(net.node_stats().misses, 1, "{}", net.node_stats());
    assert_eq!(
        net.total_node_stats().misses,
        2,
        "{}",
        net.total_node_stats()
    );

    // The same inputs again: the same outputs, no plan built.
    let again = check("a");
    for ((_, x), (_, y)) in first.iter().zip(&again) {
        assert_eq!(x.bytes(), y.bytes());
    }
    assert_eq!(net.total_stats().misses, 3, "{}", net.total_stats());
    assert!(net.total_stats().hits > total.hits);
    // ... and neither split node imported again: both bound all their inputs, whose values
    // are the same.
    let nodes = net.total_node_stats();
    assert_eq!((nodes.misses, nodes.hits, nodes.size), (2, 2, 2), "{nodes}");

    // Another input set keeps 10 candidates instead of 8: the rest after the NonZero is
    // planned for that count; the detections (4 again) reuse the plan after the NMS.
    check("b");
    let after = net.total_stats();
    assert_eq!(after.misses, 4, "{after}");
    drop(rest);
    drop(plan);
    drop(net);
    assert!(
        rt.loaded_networks().is_empty(),
        "plans outlive their network"
    );
}

/// y, idx = TopK(x, k) with k = ReduceSum(Cast(x > 0)): the count of positive values, known
/// only from x's values; x is `[n]`, n symbolic.
fn topk_by_count() -> backplane::onnx::proto::ModelProto {
    use backplane::onnx::proto::{
        attribute_proto::AttributeType, AttributeProto, GraphProto, ModelProto, NodeProto,
        OperatorSetIdProto, TensorProto, ValueInfoProto,
    };
    let node =
        |op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>| NodeProto {
            op_type: Some(op.into()),
            name: outputs.first().map(|o| o.to_string()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute,
            ..Default::default()
        };
    let int_attr = |name: &str, v: i64| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    };
    let output = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    };
    let x = onnx_f32_input("x", &["n"]);
    let zero = TensorProto {
        name: Some("zero".into()),
        data_type: Some(1),
        float_data: vec![0.0],
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(GraphProto {
            name: Some("topk_by_count".into()),
            node: vec![
                node("Greater", &["x", "zero"], &["positive"], vec![]),
                node("Cast", &["positive"], &["as_int"], vec![int_attr("to", 7)]),
                node(
                    "ReduceSum",
                    &["as_int"],
                    &["k"],
                    vec![int_attr("keepdims", 1)],
                ),
                node("TopK", &["x", "k"], &["y", "idx"], vec![]),
            ],
            initializer: vec![zero],
            input: vec![x],
            output: vec![output("y"), output("idx")],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The split node's one-node import is cached by what it was specialised on: a TopK whose k
/// is computed binds only k, so other values of x with the same count and length reuse the
/// loaded one-node network (a hit); another count imports it again (a miss). The outputs
/// are right in every case.
#[test]
fn a_split_node_is_imported_once_per_specialisation() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = DynamicNetwork::from_model(
        &rt,
        topk_by_count(),
        None,
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    );
    let run = |values: &[f32]| {
        let x = Tensor::from_f64_values(
            TensorInfo::new(DataType::F32, vec![values.len()]),
            &values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        )
        .unwrap();
        let out = net.execute(&[("x", &x)]).unwrap();
        assert_eq!(out[0].0, "y");
        (out[0].1.to_f64_vec(), out[1].1.to_f64_vec())
    };
    assert_eq!(
        run(&[1.0, -1.0, 2.0, 3.0, -2.0]),
        (vec![3.0, 2.0, 1.0], vec![3.0, 2.0, 0.0])
    );
    let first = net.node_stats();
    assert_eq!((first.misses, first.hits, first.size), (1, 0, 1), "{first}");
    // Other values, the same count (3) and length: the loaded TopK serves them.
    assert_eq!(
        run(&[5.0, -1.0, -1.0, 4.0, 6.0]),
        (vec![6.0, 5.0, 4.0], vec![4.0, 0.0, 3.0])
    );
    let second = net.node_stats();
    assert_eq!((second.misses, second.hits), (1, 1), "{second}");
    // A count of 2: imported again.
    assert_eq!(
        run(&[-5.0, 7.0, -1.0, 8.0, -6.0]),
        (vec![8.0, 7.0], vec![3.0, 1.0])
    );
    let third = net.node_stats();
    assert_eq!((third.misses, third.hits, third.size), (2, 1, 2), "{third}");
    let (plan, _) = net
        .plan(&[(
            "x",
            &Tensor::from_f64_values(TensorInfo::new(DataType::F32, vec![5]), &[0.0; 5]).unwrap(),
        )])
        .unwrap();
    assert_eq!(
        plan.split.as_ref().map(|s| s.op_type.as_str()),
        Some("TopK")
    );
    // Every loaded network (plan and one-node networks) goes with the network.
    drop(plan);
    drop(net);
    assert!(rt.loaded_networks().is_empty());
}

/// The symbolic signature: the encoder's input is `[batch, seq]` and its output, found by
/// shape inference through the embeddings, attention and feed-forward blocks, `[batch, seq,
/// 96]`. Plans are keyed by the bound symbols, and an input of the wrong rank is refused
/// naming it before anything is planned.
#[test]
fn plans_are_keyed_by_bound_symbols_and_misfits_are_refused() {
    use backplane::core::symbolic::display_shape;
    let rt = runtime_with(&CpuAccBackend::new());
    let net = dynamic(&rt);
    let sig = net.signature();
    assert_eq!(sig.inputs[0].0, "input_ids");
    assert_eq!(
        display_shape(sig.inputs[0].1.as_ref().unwrap()),
        "[batch, seq]"
    );
    assert_eq!(
        display_shape(sig.outputs[0].1.as_ref().unwrap()),
        "[batch, seq, 96]"
    );
    let (plan, hit) = net.plan(&[("input_ids", &token_ids(7, 7))]).unwrap();
    assert!(!hit);
    assert_eq!(plan.symbols.to_string(), "batch=1, seq=7");
    let (again, hit) = net.plan(&[("input_ids", &token_ids(7, 7))]).unwrap();
    assert!(hit);
    assert!(Arc::ptr_eq(&plan, &again));
    let three =
        Tensor::from_f64_values(TensorInfo::new(DataType::I64, vec![1, 7, 1]), &[0.0; 7]).unwrap();
    let err = net
        .execute(&[("input_ids", &three)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 'input_ids' has 3 dimensions"), "{err}");
    assert!(err.contains("[batch, seq]"), "{err}");
    assert_eq!(net.stats().misses, 1);
}

/// Two inputs sharing the symbol `n`: given two sizes for it, the execution is refused
/// naming the input, the dimension and where `n` was bound.
#[test]
fn a_symbol_given_two_values_is_refused_naming_it() {
    use backplane::onnx::proto::{
        GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto,
    };
    let input = |name: &str| onnx_f32_input(name, &["n"]);
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: Some("Add".into()),
                input: vec!["a".into(), "b".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![input("a"), input("b")],
            output: vec![ValueInfoProto {
                name: Some("y".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let net = DynamicNetwork::from_model(
        &rt,
        model,
        None,
        &ImportOptions::default(),
        backplane::default_optimizer_options(),
    );
    let vec = |n: usize| {
        Tensor::from_f64_values(TensorInfo::new(DataType::F32, vec![n]), &vec![1.0; n]).unwrap()
    };
    let err = net
        .execute(&[("a", &vec(3)), ("b", &vec(4))])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("input 'b' dimension 0 ('n') is 4, but 'n' is 3 from input 'a' dimension 0"),
        "{err}"
    );
    assert_eq!(net.stats().misses, 0);
    let out = net.execute(&[("a", &vec(4)), ("b", &vec(4))]).unwrap();
    assert_eq!(out[0].1.to_f64_vec(), vec![2.0; 4]);
    let (plan, _) = net.plan(&[("a", &vec(4)), ("b", &vec(4))]).unwrap();
    assert_eq!(plan.symbols.to_string(), "n=4");
}

/// A network sharing its runtime (`Arc<Runtime>`) is a `DynamicNetwork<'static>`: it keeps
/// the runtime alive after every other handle is gone and unloads its plans when dropped.
#[test]
fn a_network_can_own_its_share_of_the_runtime() {
    fn make() -> (DynamicNetwork<'static>, std::sync::Weak<Runtime>) {
        let rt = Arc::new(backplane::RuntimeBuilder::new().build().unwrap());
        let weak = Arc::downgrade(&rt);
        let net = DynamicNetwork::from_file(
            rt,
            &repo().join(BERT),
            &ImportOptions::default(),
            backplane::default_optimizer_options(),
        )
        .unwrap();
        (net, weak)
    }
    let (net, weak) = make();
    for seq in [3, 5] {
        let got = net.execute(&[("input_ids", &token_ids(seq, 7))]).unwrap();
        assert_eq!(got[0].1.shape().dims(), &[1, seq, 96]);
    }
    assert_eq!(net.stats().misses, 2);
    let rt = weak.upgrade().expect("the network keeps its runtime");
    assert_eq!(rt.loaded_networks().len(), 2);
    drop(net);
    assert!(
        rt.loaded_networks().is_empty(),
        "plans outlive their network"
    );
}

/// Plans are evicted to stay within the runtime's memory budget, not only by count: with a
/// budget that holds one BERT plan's working memory but not two, a second shape evicts the
/// first though the capacity (8) is far from full.
#[test]
fn plans_are_bounded_by_the_memory_budget() {
    let probe = backplane::RuntimeBuilder::new().build().unwrap();
    let one = {
        let net = dynamic(&probe);
        net.execute(&[("input_ids", &token_ids(16, 7))]).unwrap();
        net.stats().bytes
    };
    assert!(one > 0);
    // Room for the seq-16 plan and a little more, not for a second plan of similar size.
    let rt = backplane::RuntimeBuilder::new()
        .max_memory(one + one / 4)
        .build()
        .unwrap();
    let net = dynamic(&rt);
    for seq in [16, 15, 16] {
        let got = net.execute(&[("input_ids", &token_ids(seq, 7))]).unwrap();
        assert_eq!(got[0].1.shape().dims(), &[1, seq, 96]);
        let stats = net.stats();
        assert_eq!(stats.size, 1, "seq {seq}: {stats:?}");
        assert!(stats.bytes <= one + one / 4, "seq {seq}: {stats:?}");
    }
    let stats = net.stats();
    assert_eq!(
        (stats.misses, stats.evictions, stats.hits),
        (3, 2, 0),
        "{stats:?}"
    );
    assert_eq!(rt.loaded_networks().len(), 1);
}

//! The shipped CPU backends say which support answers hold at every shape: a
//! `DynamicNetwork` serving BERT-tiny at several sequence lengths on CpuAcc then CpuRef asks
//! them once per layer and replays them for every later shape, while the answers CpuAcc keeps
//! per shape (its fused layers, whose ops encode concrete shapes) are asked again per plan.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::backend_api::{LayerDesc, LayerSupport, Support};
use backplane::cpu_acc::CpuAccBackend;
use backplane::cpu_ref::CpuRefBackend;
use backplane::{Backend, BackendId, DataType, TensorInfo};
use std::sync::{Arc, Mutex};
use support::{token_ids, WithSupport};

/// One support query: the backend, the layer, its operator, and whether the backend said the
/// answer holds at every shape.
type Query = (String, String, String, bool);

/// A shipped backend's support answers, each query recorded in `log`.
struct RecordedSupport {
    name: &'static str,
    inner: Arc<dyn LayerSupport>,
    log: Arc<Mutex<Vec<Query>>>,
}

impl LayerSupport for RecordedSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        let holds = self.inner.answer_holds_for_every_shape(layer);
        self.log.lock().unwrap().push((
            self.name.to_string(),
            layer.name.clone(),
            layer.op.name().to_string(),
            holds,
        ));
        self.inner.is_layer_supported(layer)
    }

    fn answer_holds_for_every_shape(&self, layer: &LayerDesc) -> bool {
        self.inner.answer_holds_for_every_shape(layer)
    }
}

/// `inner` under `name`, its support queries recorded in `log`.
fn recorded(
    name: &'static str,
    inner: Arc<dyn Backend>,
    log: &Arc<Mutex<Vec<Query>>>,
) -> WithSupport {
    let log = log.clone();
    WithSupport {
        name,
        inner,
        support: Arc::new(move |inner| {
            Arc::new(RecordedSupport {
                name,
                inner,
                log: log.clone(),
            })
        }),
    }
}

#[test]
fn cpu_backends_replay_shape_independent_answers_and_ask_the_others_per_shape() {
    let log: Arc<Mutex<Vec<Query>>> = Arc::new(Mutex::new(Vec::new()));
    let acc_factory = recorded("CpuAcc", Arc::new(CpuAccBackend::new()), &log).factory();
    let ref_factory = recorded("CpuRef", Arc::new(CpuRefBackend), &log).factory();
    let rt = backplane::RuntimeBuilder::empty()
        .backend(BackendId::new("CpuAcc").unwrap(), acc_factory)
        .unwrap()
        .backend(BackendId::new("CpuRef").unwrap(), ref_factory)
        .unwrap()
        .build()
        .unwrap();
    let net = support::bert_tiny_on(&rt, &["CpuAcc", "CpuRef"]);

    // The queries of each plan, one plan per sequence length.
    let mut per_plan: Vec<Vec<Query>> = Vec::new();
    for seq in [5, 8, 13, 21] {
        net.execute(&[("input_ids", &token_ids(seq, 5))]).unwrap();
        per_plan.push(std::mem::take(&mut *log.lock().unwrap()));
    }
    assert_eq!(net.stats().misses, 4);
    let first = &per_plan[0];
    let holding = first.iter().filter(|q| q.3).count();
    assert!(
        holding > 10,
        "the first plan asks the layers whose answers hold at every shape: {first:?}"
    );
    assert!(
        first.iter().any(|q| q.3 && q.0 == "CpuAcc"),
        "CpuAcc says no answer holds at every shape: {first:?}"
    );
    let answers = net.support_answers().unwrap();
    assert!(
        answers.replayed() as usize >= 3 * holding,
        "{} replayed, {holding} shape-independent answers per plan",
        answers.replayed()
    );
    // A shape-dependent answer: the queries CpuAcc keeps per shape, in the first plan.
    let per_shape: Vec<(String, String)> = first
        .iter()
        .filter(|q| !q.3)
        .map(|q| (q.0.clone(), q.1.clone()))
        .collect();
    assert!(
        per_shape.iter().any(|(b, _)| b == "CpuAcc"),
        "BERT-tiny has no layer whose CpuAcc answer depends on its shape: {first:?}"
    );
    for (k, plan) in per_plan.iter().enumerate().skip(1) {
        // No shape-independent answer is asked again ...
        let again: Vec<&Query> = plan.iter().filter(|q| q.3).collect();
        assert!(again.is_empty(), "plan {k} asked again: {again:?}");
        // ... and every shape-dependent one is, at each shape.
        let asked: Vec<(String, String)> =
            plan.iter().map(|q| (q.0.clone(), q.1.clone())).collect();
        for query in &per_shape {
            assert!(
                asked.contains(query),
                "plan {k} did not ask {query:?} again: {asked:?}"
            );
        }
    }
}

/// A shape-dependent answer and a shape-independent one on the same layer, through the
/// backends' layer supports: CpuAcc checks a convolution's window against its input's
/// dimensions (kept per shape), CpuRef only its types (held at every shape).
#[test]
fn a_convolution_is_per_shape_on_cpu_acc_and_for_every_shape_on_cpu_ref() {
    use backplane::core::ops::{ConvDesc, Window};
    use backplane::core::Op;
    let layer = |op: Op, inputs: Vec<TensorInfo>, output: Vec<usize>| LayerDesc {
        name: "layer".to_string(),
        op,
        constants: vec![None; inputs.len()],
        inputs,
        outputs: vec![TensorInfo::new(DataType::F32, output)],
    };
    let conv = Op::Conv(ConvDesc {
        window: Window {
            kernel: vec![3, 3],
            ..Window::default()
        },
        group: 1,
    });
    let x = TensorInfo::new(DataType::F32, vec![1, 1, 5, 5]);
    let w = TensorInfo::new(DataType::F32, vec![1, 1, 3, 3]);
    let conv = layer(conv, vec![x, w], vec![1, 1, 3, 3]);
    let acc = CpuAccBackend::new().layer_support();
    let cpu_ref = CpuRefBackend.layer_support();
    assert!(acc.is_layer_supported(&conv).is_supported());
    assert!(cpu_ref.is_layer_supported(&conv).is_supported());
    assert!(!acc.answer_holds_for_every_shape(&conv));
    assert!(cpu_ref.answer_holds_for_every_shape(&conv));
    let a = TensorInfo::new(DataType::F32, vec![2, 3]);
    let b = TensorInfo::new(DataType::F32, vec![3, 4]);
    let matmul = layer(Op::MatMul, vec![a, b], vec![2, 4]);
    assert!(acc.answer_holds_for_every_shape(&matmul));
    assert!(cpu_ref.answer_holds_for_every_shape(&matmul));
}

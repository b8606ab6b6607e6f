//! Backend assignment across shapes: a backend that says its support answers hold at every
//! shape is asked once per layer by a `DynamicNetwork`, whatever the number of shapes; one
//! that does not (the default) is asked again for every plan.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::backend_api::{LayerDesc, LayerSupport, Support};
use backplane::cpu_ref::CpuRefBackend;
use backplane::{Backend, BackendFactory, BackendId, ImportOptions, OptimizerOptions, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use support::{repo, token_ids, WithSupport};

/// CpuRef's support answers, counting the queries, optionally saying they hold at every
/// shape.
struct CountingSupport {
    inner: Arc<dyn LayerSupport>,
    asked: Arc<AtomicU64>,
    every_shape: bool,
}

impl LayerSupport for CountingSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        self.asked.fetch_add(1, Ordering::Relaxed);
        self.inner.is_layer_supported(layer)
    }

    fn answer_holds_for_every_shape(&self, _layer: &LayerDesc) -> bool {
        self.every_shape
    }
}

/// Run BERT-tiny at four sequence lengths on the counting backend alone; returns the queries
/// after the first plan, after all four, the outputs and the network's kept-answer counts.
fn serve(every_shape: bool) -> (u64, u64, Vec<Tensor>, u64) {
    let asked = Arc::new(AtomicU64::new(0));
    let counter = asked.clone();
    let factory = WithSupport {
        name: "CountingRef",
        inner: Arc::new(CpuRefBackend),
        support: Arc::new(move |inner| {
            Arc::new(CountingSupport {
                inner,
                asked: counter.clone(),
                every_shape,
            })
        }),
    }
    .factory();
    let rt = backplane::RuntimeBuilder::empty()
        .backend(BackendId::new("CountingRef").unwrap(), factory)
        .unwrap()
        .build()
        .unwrap();
    let net = support::bert_tiny_on(&rt, &["CountingRef"]);
    let mut outputs = Vec::new();
    let mut first = 0;
    for (k, seq) in [5, 8, 13, 21].into_iter().enumerate() {
        outputs.push(
            net.execute(&[("input_ids", &token_ids(seq, 3))])
                .unwrap()
                .remove(0)
                .1,
        );
        if k == 0 {
            first = asked.load(Ordering::Relaxed);
        }
    }
    assert_eq!(net.stats().misses, 4);
    let replayed = net.support_answers().map_or(0, |a| a.replayed());
    (first, asked.load(Ordering::Relaxed), outputs, replayed)
}

#[test]
fn shape_independent_support_answers_are_asked_once_across_shapes() {
    let (first, all, replayed_outputs, replayed) = serve(true);
    assert!(first > 0);
    // Every layer of the later plans (the same layers at other shapes) was answered from the
    // first plan's answers.
    assert_eq!(all, first, "asked {first} for the first plan, {all} in all");
    assert!(
        replayed >= 3 * first,
        "{replayed} replayed, {first} asked per plan"
    );

    // The default: answers per shape, asked for every plan.
    let (first_default, all_default, asked_outputs, replayed_default) = serve(false);
    assert_eq!(first_default, first);
    assert_eq!(
        all_default,
        4 * first,
        "asked again for each of the 4 plans"
    );
    assert_eq!(replayed_default, 0);
    // The same assignment, so the same outputs bit for bit.
    for (a, b) in replayed_outputs.iter().zip(&asked_outputs) {
        assert_eq!(a.bytes(), b.bytes());
    }
}

/// CpuRef's support answers, refusing a MatMul whose first input has more than `max_rows`
/// rows (a per-shape answer, as a backend with size limits gives).
struct PickySupport {
    inner: Arc<dyn LayerSupport>,
    max_rows: usize,
}

impl LayerSupport for PickySupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        let rows = layer.inputs.first().map_or(0, |i| {
            let dims = i.shape.dims();
            dims.len().checked_sub(2).map_or(0, |at| dims[at])
        });
        if matches!(layer.op, backplane::core::Op::MatMul) && rows > self.max_rows {
            return Support::Unsupported(format!("{rows} rows"));
        }
        self.inner.is_layer_supported(layer)
    }
}

/// Plans of one structure replay an earlier plan's optimization only while its decisions
/// hold: at 16 rows PickyRef still takes the MatMuls (re-shaped from 7's record), past 16 they
/// move to CpuRef, so the replay at 33 is refused and the plan optimized in full (counted as
/// an optimizer run of a kept structure with other decisions); 40 then replays 33's record
/// and 8 replays 7's (the structure's two records, each tried). Every output equals a
/// separate static import's.
#[test]
fn a_replay_is_refused_when_a_support_answer_changes_with_the_shape() {
    let picky = WithSupport {
        name: "PickyRef",
        inner: Arc::new(CpuRefBackend),
        support: Arc::new(|inner| {
            Arc::new(PickySupport {
                inner,
                max_rows: 16,
            })
        }),
    }
    .factory();
    let cpu_ref: BackendFactory = Arc::new(|| Box::new(CpuRefBackend) as Box<dyn Backend>);
    let rt = backplane::RuntimeBuilder::empty()
        .backend(BackendId::new("PickyRef").unwrap(), picky)
        .unwrap()
        .backend(BackendId::new("CpuRef").unwrap(), cpu_ref)
        .unwrap()
        .build()
        .unwrap();
    let net = support::bert_tiny_on(&rt, &["PickyRef", "CpuRef"]);
    let options = OptimizerOptions::new(vec![
        BackendId::new("PickyRef").unwrap(),
        BackendId::new("CpuRef").unwrap(),
    ]);
    let mut keys = Vec::new();
    for seq in [7, 16, 33, 40, 8] {
        let input = token_ids(seq, 3);
        let got = net.execute(&[("input_ids", &input)]).unwrap();
        // The same model imported alone at this length, optimized in full, on the same
        // backends.
        let import = ImportOptions::default().with_input_shape("input_ids", vec![1, seq]);
        let network =
            backplane::load_onnx(&repo().join("testdata/dynamic/bert_tiny.onnx"), &import).unwrap();
        let id = rt
            .load_network(rt.optimize(&network, &options).unwrap())
            .unwrap();
        let want = rt.execute(id, &[("input_ids", &input)]).unwrap();
        rt.unload_network(id).unwrap();
        assert_eq!(got[0].1.bytes(), want[0].1.bytes(), "seq {seq}");
        let (plan, hit) = net.plan(&[("input_ids", &input)]).unwrap();
        assert!(hit);
        assert_eq!(plan.reshaped, seq != 7 && seq != 33, "seq {seq}");
        let optimized = plan.optimized.as_ref().unwrap();
        let on_ref = optimized
            .assignment()
            .iter()
            .filter(|b| b.as_str() == "CpuRef")
            .count();
        assert_eq!(on_ref > 0, seq > 16, "seq {seq}: {on_ref} layers on CpuRef");
        keys.push(plan.structure.unwrap());
    }
    assert!(keys.iter().all(|k| *k == keys[0]));
    let stats = net.stats();
    assert_eq!(stats.optimizer_runs, 2, "{stats:?}");
    assert_eq!(stats.plans_reshaped, 3, "{stats:?}");
    assert_eq!(stats.same_structure, 1, "{stats:?}");
    assert_eq!(stats.same_decisions, 0, "{stats:?}");
}

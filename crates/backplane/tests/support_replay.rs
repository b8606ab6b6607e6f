//! Backend assignment across shapes: a backend that says its support answers hold at every
//! shape is asked once per layer by a `DynamicNetwork`, whatever the number of shapes; one
//! that does not (the default) is asked again for every plan.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::backend_api::{LayerDesc, LayerSupport, MemoryManager, Support, WorkloadFactory};
use backplane::cpu_ref::CpuRefBackend;
use backplane::{
    Backend, BackendFactory, BackendId, DynamicNetwork, ImportOptions, OptimizerOptions, Tensor,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use support::{repo, token_ids};

/// CpuRef, counting its support queries, optionally saying its answers hold at every shape.
#[derive(Clone)]
struct Counting {
    asked: Arc<AtomicU64>,
    every_shape: bool,
}

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

impl Backend for Counting {
    fn id(&self) -> BackendId {
        BackendId::new("CountingRef").unwrap()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(CountingSupport {
            inner: CpuRefBackend.layer_support(),
            asked: self.asked.clone(),
            every_shape: self.every_shape,
        })
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        CpuRefBackend.create_memory_manager()
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> backplane::backend_api::Result<Box<dyn WorkloadFactory>> {
        CpuRefBackend.create_workload_factory(memory_manager)
    }
}

/// Run BERT-tiny at four sequence lengths on the counting backend alone; returns the queries
/// after the first plan, after all four, the outputs and the network's kept-answer counts.
fn serve(every_shape: bool) -> (u64, u64, Vec<Tensor>, u64) {
    let backend = Counting {
        asked: Arc::new(AtomicU64::new(0)),
        every_shape,
    };
    let asked = backend.asked.clone();
    let factory: BackendFactory = Arc::new(move || Box::new(backend.clone()) as Box<dyn Backend>);
    let rt = backplane::RuntimeBuilder::empty()
        .backend(BackendId::new("CountingRef").unwrap(), factory)
        .unwrap()
        .build()
        .unwrap();
    let net = DynamicNetwork::from_file(
        &rt,
        &repo().join("testdata/dynamic/bert_tiny.onnx"),
        &ImportOptions::default(),
        OptimizerOptions::new(vec![BackendId::new("CountingRef").unwrap()]),
    )
    .unwrap();
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

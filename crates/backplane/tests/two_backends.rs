//! Two backends in one network: CpuRef plus a test backend that runs only some ops (its
//! workloads are CpuRef's). Shows assignment, fallback, per-layer override, the
//! unsupported-layer error and context notifications.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::backend_api::*;
use backplane::{npy, ImportOptions, OptimizerOptions, RuntimeBuilder};
use std::sync::{Arc, Mutex};
use support::repo;

type Log = Arc<Mutex<Vec<String>>>;

/// Runs Relu, Conv and Add only, through CpuRef's kernels, and logs its context calls.
#[derive(Clone)]
struct Partial {
    log: Log,
}

struct PartialSupport;

impl LayerSupport for PartialSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match layer.op.name() {
            "Relu" | "Conv" | "Add" => backplane::cpu_ref::CpuRefBackend
                .layer_support()
                .is_layer_supported(layer),
            other => Support::no(format!("Partial runs only Relu, Conv and Add, not {other}")),
        }
    }
}

struct PartialContext(Log);

impl BackendContext for PartialContext {
    fn before_load_network(&self, id: NetworkId) -> Result<()> {
        self.0.lock().unwrap().push(format!("before load {id}"));
        Ok(())
    }
    fn after_load_network(&self, id: NetworkId) -> Result<()> {
        self.0.lock().unwrap().push(format!("after load {id}"));
        Ok(())
    }
    fn before_unload_network(&self, id: NetworkId) -> Result<()> {
        self.0.lock().unwrap().push(format!("before unload {id}"));
        Ok(())
    }
    fn after_unload_network(&self, id: NetworkId) {
        self.0.lock().unwrap().push(format!("after unload {id}"));
    }
}

impl Backend for Partial {
    fn id(&self) -> BackendId {
        BackendId::new("Partial").unwrap()
    }
    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(PartialSupport)
    }
    fn create_workload_factory(
        &self,
        mm: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        backplane::cpu_ref::CpuRefBackend.create_workload_factory(mm)
    }
    fn create_backend_context(
        &self,
        _o: &BackendOptions,
    ) -> Result<Option<Box<dyn BackendContext>>> {
        Ok(Some(Box::new(PartialContext(self.log.clone()))))
    }
}

fn setup() -> (backplane::Runtime, backplane::Network, Log) {
    let log = Log::default();
    let partial = Partial { log: log.clone() };
    let rt = RuntimeBuilder::new()
        .backend(
            BackendId::new("Partial").unwrap(),
            Arc::new(move || Box::new(partial.clone()) as Box<dyn Backend>),
        )
        .unwrap()
        .build()
        .unwrap();
    let mut options = ImportOptions::default();
    options.dim_values.insert("batch".into(), 1);
    let net = backplane::load_onnx(&repo().join("models/digits/model.onnx"), &options).unwrap();
    (rt, net, log)
}

fn ids(names: &[&str]) -> Vec<BackendId> {
    names.iter().map(|n| BackendId::new(*n).unwrap()).collect()
}

#[test]
fn two_backends_split_the_digits_model_and_match_cpuref_alone() {
    let (rt, net, log) = setup();
    let x = npy::read_file(&repo().join("models/digits/samples/digit_7.npy"))
        .or_else(|_| npy::read_file(&repo().join("models/digits/samples/digit_3.npy")))
        .unwrap();

    let alone = rt
        .optimize(&net, &OptimizerOptions::new(ids(&["CpuRef"])))
        .unwrap();
    let alone_id = rt.load_network(alone).unwrap();
    let reference = rt.execute(alone_id, &[("input", &x)]).unwrap();

    let split = rt
        .optimize(&net, &OptimizerOptions::new(ids(&["Partial", "CpuRef"])))
        .unwrap();
    for (layer, backend) in split.network().layers().iter().zip(split.assignment()) {
        let expected = if matches!(layer.op.name(), "Relu" | "Conv" | "Add") {
            "Partial"
        } else {
            "CpuRef"
        };
        assert_eq!(
            backend.as_str(),
            expected,
            "layer {} ({})",
            layer.name,
            layer.op.name()
        );
    }
    let counts = split.layer_counts();
    assert!(
        counts
            .iter()
            .any(|(b, n)| b.as_str() == "Partial" && *n >= 3),
        "{counts:?}"
    );
    assert!(
        counts
            .iter()
            .any(|(b, n)| b.as_str() == "CpuRef" && *n >= 3),
        "{counts:?}"
    );
    // CpuRef's share went there because Partial refused it, with a reason.
    assert!(
        split
            .report()
            .refusals
            .iter()
            .any(|(_, b, why)| b.as_str() == "Partial"
                && why.contains("runs only Relu, Conv and Add"))
    );

    let split_id = rt.load_network(split).unwrap();
    let out = rt.execute(split_id, &[("input", &x)]).unwrap();
    assert_eq!(
        out[0].1, reference[0].1,
        "split execution must equal CpuRef alone bit for bit"
    );

    rt.unload_network(split_id).unwrap();
    rt.unload_network(alone_id).unwrap();
    let s = split_id.0;
    // Partial's context heard only about the network that used it, in order.
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            format!("before load {s}"),
            format!("after load {s}"),
            format!("before unload {s}"),
            format!("after unload {s}"),
        ]
    );
}

#[test]
fn per_layer_override_moves_one_layer() {
    let (rt, net, _) = setup();
    let relu = net
        .layers()
        .iter()
        .find(|l| l.op.name() == "Relu")
        .unwrap()
        .name
        .clone();
    let mut opts = OptimizerOptions::new(ids(&["CpuRef"]));
    opts.layer_backends
        .push((relu.clone(), BackendId::new("Partial").unwrap()));
    let opt = rt.optimize(&net, &opts).unwrap();
    for (layer, backend) in opt.network().layers().iter().zip(opt.assignment()) {
        let expected = if layer.name == relu {
            "Partial"
        } else {
            "CpuRef"
        };
        assert_eq!(backend.as_str(), expected, "layer {}", layer.name);
    }
}

#[test]
fn a_network_no_preferred_backend_can_run_lists_every_unsupported_layer() {
    let (rt, net, _) = setup();
    let err = rt
        .optimize(&net, &OptimizerOptions::new(ids(&["Partial"])))
        .unwrap_err();
    let backplane::RuntimeError::UnsupportedLayers { layers, .. } = &err else {
        panic!("unexpected {err}")
    };
    let expected: Vec<&str> = net
        .layers()
        .iter()
        .filter(|l| !matches!(l.op.name(), "Relu" | "Conv" | "Add"))
        .map(|l| l.name.as_str())
        .collect();
    let got: Vec<&str> = layers.iter().map(|l| l.layer.as_str()).collect();
    assert_eq!(got, expected);
    assert!(
        err.to_string()
            .contains("Partial runs only Relu, Conv and Add, not Softmax"),
        "{err}"
    );
}

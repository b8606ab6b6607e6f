//! The tensor-handle strategy and memory planning: exact copy counts for one backend, two
//! backends sharing host memory, a host backend beside a simulated discrete device, imported
//! vs copied inputs; results identical to one backend; no allocation after the first run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_backend_api::{BackendId, FactoryId};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo};
use backplane_runtime::strategy::EdgeStrategy;
use backplane_runtime::*;
use common::device::{self, Device};
use common::{Log, Mock};
use std::sync::Arc;

fn id(s: &str) -> BackendId {
    BackendId::new(s).unwrap()
}

/// a, b -> add -> mul(·, a) -> relu -> y ; shapes [2, 3] f32 (24 bytes each).
fn network() -> Network {
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![2, 3]);
    let a = n.add_input("a", info.clone()).unwrap();
    let b = n.add_input("b", info).unwrap();
    let s = n
        .add_layer_named("add", Op::Binary(BinaryOp::Add), &[a, b], &["s".into()])
        .unwrap()[0];
    let m = n
        .add_layer_named("mul", Op::Binary(BinaryOp::Mul), &[s, a], &["m".into()])
        .unwrap()[0];
    let y = n
        .add_layer_named("relu", Op::Unary(UnaryOp::Relu), &[m], &["y".into()])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    n
}

fn inputs() -> (Tensor, Tensor) {
    (
        Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, 6.0]).unwrap(),
        Tensor::from_vec(vec![2, 3], vec![0.5f32, 1.0, -5.0, 1.0, 1.0, -7.0]).unwrap(),
    )
}

// relu((a + b) * a)
const EXPECTED: [f32; 6] = [1.5, 2.0, 0.0, 12.0, 30.0, 0.0];

fn runtime() -> Runtime {
    let log = Log::default();
    let mut reg = BackendRegistry::new();
    reg.register(
        id("Host"),
        Mock::new("Host", &["Add", "Mul", "Relu"], &log).factory(),
    )
    .unwrap();
    reg.register(
        id("Arith"),
        Mock::new("Arith", &["Add", "Mul"], &log).factory(),
    )
    .unwrap();
    reg.register(id("Act"), Mock::new("Act", &["Relu"], &log).factory())
        .unwrap();
    let dev = Device::default();
    reg.register(
        id("Device"),
        Arc::new(move || Box::new(dev.clone()) as Box<dyn backplane_backend_api::Backend>),
    )
    .unwrap();
    let imp = Device {
        import_host: true,
        ..Default::default()
    };
    // Same backend code under another id, with a factory that imports host memory.
    reg.register(
        id("Importer"),
        Arc::new(move || Box::new(Renamed(imp.clone())) as Box<dyn backplane_backend_api::Backend>),
    )
    .unwrap();
    Runtime::new(reg, RuntimeOptions::default()).unwrap()
}

/// Device under the id "Importer".
struct Renamed(Device);

impl backplane_backend_api::Backend for Renamed {
    fn id(&self) -> BackendId {
        id("Importer")
    }
    fn layer_support(&self) -> Arc<dyn backplane_backend_api::LayerSupport> {
        self.0.layer_support()
    }
    fn create_workload_factory(
        &self,
        mm: Option<Arc<dyn backplane_backend_api::MemoryManager>>,
    ) -> backplane_backend_api::Result<Box<dyn backplane_backend_api::WorkloadFactory>> {
        self.0.create_workload_factory(mm)
    }
    fn register_tensor_handle_factories(
        &self,
        r: &mut backplane_backend_api::TensorHandleFactoryRegistry,
    ) {
        self.0.register_tensor_handle_factories(r)
    }
    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        self.0.handle_factory_preferences()
    }
}

fn run(rt: &Runtime, opts: OptimizerOptions) -> (OptimizedNetwork, Vec<f32>) {
    let opt = rt.optimize(&network(), &opts).unwrap();
    let nid = rt.load_network(opt.clone()).unwrap();
    let (a, b) = inputs();
    let out = rt.execute(nid, &[("a", &a), ("b", &b)]).unwrap();
    (opt, out[0].1.as_slice::<f32>().unwrap().to_vec())
}

fn copies(opt: &OptimizedNetwork) -> (usize, usize) {
    let r = opt.tensor_strategy();
    (r.copies, r.bytes_copied)
}

#[test]
fn one_backend_makes_no_copies() {
    let rt = runtime();
    let (opt, y) = run(&rt, OptimizerOptions::new(vec![id("Host")]));
    assert_eq!(y, EXPECTED);
    assert_eq!(copies(&opt), (0, 0));
    assert!(opt
        .tensor_strategy()
        .edges
        .iter()
        .all(|e| e.strategy == EdgeStrategy::Direct));
    assert_eq!(opt.network().layers().len(), 3, "no layer inserted");
}

#[test]
fn two_backends_sharing_host_memory_make_no_copies() {
    let rt = runtime();
    let (opt, y) = run(&rt, OptimizerOptions::new(vec![id("Arith"), id("Act")]));
    assert_eq!(y, EXPECTED);
    let backends: Vec<&str> = opt.assignment().iter().map(|b| b.as_str()).collect();
    assert_eq!(backends, vec!["Arith", "Arith", "Act"]);
    assert_eq!(copies(&opt), (0, 0));
}

#[test]
fn a_discrete_device_copies_only_at_its_borders_through_staging() {
    let rt = runtime();
    // add and mul on the device, relu on the host backend.
    let mut opts = OptimizerOptions::new(vec![id("Device"), id("Host")]);
    opts.layer_backends.push(("relu".into(), id("Host")));
    let (opt, y) = run(&rt, opts);
    assert_eq!(y, EXPECTED, "identical to the one-backend run");
    // a and b are copied into staging once each (a's copy is shared by add and mul); m leaves
    // the device through staging. s stays in device memory between add and mul.
    assert_eq!(copies(&opt), (3, 3 * 24));
    let net = opt.network();
    let factory = |name: &str| opt.tensor_factories()[net.find_tensor(name).unwrap().0].clone();
    assert_eq!(
        factory("s"),
        device::local(),
        "device-internal tensor stays in device memory"
    );
    assert_eq!(
        factory("m"),
        device::staging(),
        "border tensor uses the mappable staging memory"
    );
    let copy_layers: Vec<&str> = net
        .layers()
        .iter()
        .filter(|l| l.op == Op::MemCopy)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(copy_layers.len(), 3, "{copy_layers:?}");
    let edges = &opt.tensor_strategy().edges;
    let s_edge = edges.iter().find(|e| e.tensor == "s").unwrap();
    assert_eq!(s_edge.strategy, EdgeStrategy::Direct);
    let m_edge = edges
        .iter()
        .find(|e| e.tensor == "m" && e.consumer.as_deref() == Some("relu"))
        .unwrap();
    assert_eq!(
        (m_edge.strategy, m_edge.from.clone(), m_edge.to.clone()),
        (EdgeStrategy::Copy, device::staging(), FactoryId::host())
    );
}

#[test]
fn device_outputs_go_to_mappable_staging_memory_so_no_extra_copy() {
    let rt = runtime();
    let (opt, y) = run(&rt, OptimizerOptions::new(vec![id("Device")]));
    assert_eq!(y, EXPECTED);
    // a and b in (2 copies), y out: the output may live in staging (mappable), so no copy.
    assert_eq!(copies(&opt), (2, 48));
    assert_eq!(opt.network().tensor(opt.network().outputs()[0]).name, "y");
}

#[test]
fn inputs_are_imported_in_place_when_the_memory_allows_it_and_copied_otherwise() {
    let rt = runtime();
    let (opt, y) = run(&rt, OptimizerOptions::new(vec![id("Importer")]));
    assert_eq!(y, EXPECTED);
    let r = opt.tensor_strategy();
    assert_eq!(
        (r.imports, r.copies),
        (2, 0),
        "a and b imported, nothing copied"
    );
    let input_edges: Vec<EdgeStrategy> = r
        .edges
        .iter()
        .filter(|e| e.producer.is_none() && e.consumer.as_deref() == Some("add"))
        .map(|e| e.strategy)
        .collect();
    assert_eq!(
        input_edges,
        vec![EdgeStrategy::ExportImport, EdgeStrategy::ExportImport]
    );

    let (opt, _) = run(&rt, OptimizerOptions::new(vec![id("Device")]));
    let r = opt.tensor_strategy();
    assert_eq!(
        (r.imports, r.copies),
        (0, 2),
        "without import, each input is copied once"
    );
}

#[test]
fn memory_is_planned_and_allocated_once() {
    let rt = runtime();
    let opt = rt
        .optimize(&network(), &OptimizerOptions::new(vec![id("Host")]))
        .unwrap();
    let plan = opt.memory_plan().clone();
    // s, m, y: s and y may share bytes (s is dead when y is written).
    assert_eq!(plan.tensor_bytes, 3 * 64);
    assert_eq!(plan.lower_bound, 2 * 64);
    assert_eq!(plan.arena_bytes, 2 * 64);
    let nid = rt.load_network(opt).unwrap();
    let (a, b) = inputs();
    for _ in 0..100 {
        let out = rt.execute(nid, &[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(out[0].1.as_slice::<f32>().unwrap(), EXPECTED);
    }
    assert_eq!(rt.network(nid).unwrap().working_memory_allocations(), 1);
}

#[test]
fn the_builtin_backend_is_always_there_and_reserved() {
    let rt = runtime();
    assert!(rt.registry().is_registered(&id("Builtin")));
    let mut reg = BackendRegistry::new();
    let log = Log::default();
    reg.register(id("Builtin"), Mock::new("Builtin", &[], &log).factory())
        .unwrap();
    assert!(matches!(
        Runtime::new(reg, RuntimeOptions::default()),
        Err(RuntimeError::DuplicateBackend(_))
    ));
}

/// Counts what it hands out.
#[derive(Default)]
struct CountingAllocator(std::sync::atomic::AtomicUsize);

impl backplane_backend_api::CustomAllocator for CountingAllocator {
    fn allocate(&self, bytes: usize, _alignment: usize) -> Result<Vec<u8>, String> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(vec![0; bytes])
    }
    fn free(&self, _buffer: Vec<u8>) {}
}

#[test]
fn custom_allocators_are_used_by_backends_that_accept_them_and_refused_clearly_otherwise() {
    let allocator = Arc::new(CountingAllocator::default());
    let mut reg = BackendRegistry::new();
    reg.register(
        id("Device"),
        Arc::new(|| Box::new(Device::default()) as Box<dyn backplane_backend_api::Backend>),
    )
    .unwrap();
    let mut options = RuntimeOptions::default();
    options
        .custom_allocators
        .insert(id("Device"), allocator.clone());
    let rt = Runtime::new(reg, options).unwrap();
    let caps = rt.backend(&id("Device")).unwrap().capabilities();
    assert_eq!(
        caps.get("ProtectedContentAllocation"),
        Some(&backplane_backend_api::CapabilityValue::Bool(true))
    );
    let (opt, y) = run(&rt, OptimizerOptions::new(vec![id("Device")]));
    assert_eq!(y, EXPECTED);
    let local_tensors = opt
        .tensor_factories()
        .iter()
        .filter(|f| **f == device::local())
        .count();
    assert!(local_tensors >= 1);
    assert_eq!(
        allocator.0.load(std::sync::atomic::Ordering::Relaxed),
        local_tensors,
        "device memory came from the allocator"
    );

    let log = Log::default();
    let mut reg = BackendRegistry::new();
    reg.register(id("Host"), Mock::new("Host", &["Add"], &log).factory())
        .unwrap();
    let mut options = RuntimeOptions::default();
    options.custom_allocators.insert(id("Host"), allocator);
    let err = Runtime::new(reg, options).unwrap_err();
    assert_eq!(
        err.to_string(),
        "backend 'Host' refused its custom allocator: backend 'Host' does not support custom allocators"
    );
}

#[test]
fn caller_output_buffers_are_written_in_place_when_nothing_else_reads_them() {
    let mut n = network();
    // m is also an output, but relu reads it: it must be copied once.
    let m = n.find_tensor("m").unwrap();
    n.mark_output(m).unwrap();
    let rt = runtime();
    let id = rt
        .load_network(
            rt.optimize(&n, &OptimizerOptions::new(vec![id("Host")]))
                .unwrap(),
        )
        .unwrap();
    let (a, b) = inputs();
    let mut y = Tensor::zeros(TensorInfo::new(DataType::F32, vec![2, 3])).unwrap();
    let mut mm = Tensor::zeros(TensorInfo::new(DataType::F32, vec![2, 3])).unwrap();
    let writes = rt
        .execute_into(
            id,
            &[("a", &a), ("b", &b)],
            &mut [("m", &mut mm), ("y", &mut y)],
        )
        .unwrap();
    let how: Vec<(&str, bool)> = writes
        .iter()
        .map(|w| (w.name.as_str(), w.in_place))
        .collect();
    assert_eq!(how, vec![("y", true), ("m", false)]);
    assert_eq!(y.as_slice::<f32>().unwrap(), EXPECTED);
    assert_eq!(
        mm.as_slice::<f32>().unwrap(),
        &[1.5, 2.0, -6.0, 12.0, 30.0, -6.0]
    );
    // The same results as execute, and the pooled memory is reused.
    let out = rt.execute(id, &[("a", &a), ("b", &b)]).unwrap();
    assert_eq!(out[0].1, y);
    assert_eq!(rt.network(id).unwrap().working_memory_allocations(), 1);

    // A missing or mis-shaped buffer is an error naming it.
    let err = rt
        .execute_into(id, &[("a", &a), ("b", &b)], &mut [("y", &mut y)])
        .unwrap_err();
    assert!(err.to_string().contains("'m'"), "{err}");
    let mut wrong = Tensor::zeros(TensorInfo::new(DataType::F32, vec![3, 2])).unwrap();
    let err = rt
        .execute_into(
            id,
            &[("a", &a), ("b", &b)],
            &mut [("m", &mut mm), ("y", &mut wrong)],
        )
        .unwrap_err();
    assert!(matches!(err, RuntimeError::InputMismatch { .. }), "{err}");
}

//! Dynamic backends, ABI 1.2: a plugin's own tensor-handle factories and its
//! `optimize_subgraph` reach the runtime through the C ABI exactly as a static backend's do,
//! and plugins built against 1.0 and 1.1 keep working.
//!
//! The plugin is the Rust example `CpuRefDyn` with its options: `memory=device` keeps the
//! tensors it computes in its own mappable "device" memory (factory
//! `Backplane/CpuRefDyn/Device`), `fuse=true` fuses Add+Relu into `CpuRefDyn:AddRelu`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod plugins;

use backplane_backend_api::{BackendId, CapabilityValue, FactoryId};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo};
use backplane_plugin::host;
use backplane_runtime::strategy::EdgeStrategy;
use backplane_runtime::{OptimizedNetwork, OptimizerOptions, Runtime};
use plugins::*;
use std::path::Path;

const DEVICE: &str = "Backplane/CpuRefDyn/Device";

fn id(s: &str) -> BackendId {
    BackendId::new(s).unwrap()
}

/// x [2, 3] + c [3] (a constant) → Add → Relu → Mul by x → y
fn net() -> Network {
    let mut n = Network::new();
    let x = n
        .add_input("x", TensorInfo::new(DataType::F32, vec![2, 3]))
        .unwrap();
    let c = n
        .add_constant(
            "c",
            Tensor::from_vec(vec![3], vec![0.5f32, -1.0, 2.0]).unwrap(),
        )
        .unwrap();
    let s = n
        .add_layer_named("add", Op::Binary(BinaryOp::Add), &[x, c], &["s".into()])
        .unwrap()[0];
    let r = n
        .add_layer_named("relu", Op::Unary(UnaryOp::Relu), &[s], &["r".into()])
        .unwrap()[0];
    let y = n
        .add_layer_named("mul", Op::Binary(BinaryOp::Mul), &[r, x], &["y".into()])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    n
}

fn x() -> Tensor {
    Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -0.25]).unwrap()
}

fn runtime_with(dir: &Path, pairs: &[(&str, &str)]) -> Runtime {
    Runtime::new(cpu_ref_registry(), options_with(dir, "CpuRefDyn", pairs)).unwrap()
}

fn optimize(rt: &Runtime, prefs: &[&str], overrides: &[(&str, &str)]) -> OptimizedNetwork {
    let mut o = OptimizerOptions::new(prefs.iter().map(|p| id(p)).collect());
    o.layer_backends = overrides
        .iter()
        .map(|(l, b)| (l.to_string(), id(b)))
        .collect();
    rt.optimize(&net(), &o).unwrap()
}

fn execute(rt: &Runtime, opt: OptimizedNetwork) -> Vec<f32> {
    let nid = rt.load_network(opt).unwrap();
    let x = x();
    // Twice: the second run reuses the working memory (and the plugin's handles).
    let first = rt.execute(nid, &[("x", &x)]).unwrap();
    let out = rt.execute(nid, &[("x", &x)]).unwrap();
    assert_eq!(first[0].1.bytes(), out[0].1.bytes());
    rt.unload_network(nid).unwrap();
    out[0].1.as_slice::<f32>().unwrap().to_vec()
}

/// The same network on the static CpuRef alone.
fn cpu_ref_alone(rt: &Runtime) -> Vec<f32> {
    execute(rt, optimize(rt, &["CpuRef"], &[]))
}

/// (layer name, op name, backend) of every layer but the runtime's copies.
fn placed(opt: &OptimizedNetwork) -> Vec<(String, String, String)> {
    opt.network()
        .layers()
        .iter()
        .zip(opt.assignment())
        .filter(|(l, _)| !matches!(l.op, Op::MemCopy | Op::MemImport))
        .map(|(l, b)| (l.name.clone(), l.op.name().to_string(), b.to_string()))
        .collect()
}

/// (tensor, from, to, strategy) of every edge into a layer.
fn edges(opt: &OptimizedNetwork) -> Vec<(String, String, String, EdgeStrategy)> {
    opt.tensor_strategy()
        .edges
        .iter()
        .filter(|e| e.consumer.is_some())
        .map(|e| {
            (
                e.tensor.clone(),
                e.from.to_string(),
                e.to.to_string(),
                e.strategy,
            )
        })
        .collect()
}

fn counter(rt: &Runtime, name: &str) -> i64 {
    match rt
        .backend(&id("CpuRefDyn"))
        .unwrap()
        .capabilities()
        .get(name)
    {
        Some(CapabilityValue::Int(n)) => *n,
        other => panic!("{name}: {other:?}"),
    }
}

fn handles_created(rt: &Runtime) -> i64 {
    counter(rt, "DeviceHandlesCreated")
}

/// Device tensors the plugin's workloads were handed as its own handles.
fn device_tensors_seen(rt: &Runtime) -> i64 {
    counter(rt, "DeviceTensorsSeen")
}

#[test]
fn the_plugin_declares_its_factory_and_preferences_through_the_abi() {
    let dir = scratch("abi12-factory");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[("memory", "device")]);
    let b = rt.backend(&id("CpuRefDyn")).unwrap();
    assert_eq!(
        b.handle_factory_preferences(),
        [FactoryId::new(DEVICE).unwrap()]
    );
    let mut reg = backplane_backend_api::TensorHandleFactoryRegistry::new();
    b.register_tensor_handle_factories(&mut reg);
    assert_eq!(reg.ids(), [FactoryId::new(DEVICE).unwrap()]);
    let f = reg.get(&FactoryId::new(DEVICE).unwrap()).unwrap();
    let p = f.properties();
    assert!(p.mappable && !p.sub_tensors && !p.in_place);
    assert_eq!(p.import_sources, backplane_backend_api::MemorySources::NONE);
    // A handle made through the ABI maps, keeps what is written, and is destroyed.
    let info = TensorInfo::new(DataType::F32, vec![4]);
    let mut h = f.create_tensor_handle(&info).unwrap();
    assert_eq!(h.info(), &info);
    h.map_mut()
        .unwrap()
        .as_mut_slice::<f32>()
        .unwrap()
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        h.map().unwrap().as_slice::<f32>().unwrap(),
        [1.0, 2.0, 3.0, 4.0]
    );
    assert_eq!(handles_created(&rt), 1);
    // Without the option: host memory only, no factory.
    let dir2 = scratch("abi12-factory-host");
    install(&rust_example(), &dir2, "Backplane_CpuRefDyn_backend.so");
    let rt2 = runtime_with(&dir2, &[]);
    let b2 = rt2.backend(&id("CpuRefDyn")).unwrap();
    assert_eq!(b2.handle_factory_preferences(), [FactoryId::host()]);
    let mut reg2 = backplane_backend_api::TensorHandleFactoryRegistry::new();
    b2.register_tensor_handle_factories(&mut reg2);
    assert!(reg2.ids().is_empty());
}

#[test]
fn the_runtime_keeps_the_plugins_tensors_in_its_device_memory() {
    let dir = scratch("abi12-device");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[("memory", "device")]);
    let expected = cpu_ref_alone(&rt);
    let opt = optimize(&rt, &["CpuRefDyn", "CpuRef"], &[]);
    assert!(placed(&opt).iter().all(|(_, _, b)| b == "CpuRefDyn"));
    let host = FactoryId::host().to_string();
    // Host tensors (x, the constant c) are copied into device memory once each; every
    // tensor the plugin computes stays there, read directly by its next layer.
    let e = edges(&opt);
    let dev = DEVICE.to_string();
    assert!(e.contains(&("x".into(), host.clone(), dev.clone(), EdgeStrategy::Copy)));
    assert!(e.contains(&("c".into(), host.clone(), dev.clone(), EdgeStrategy::Copy)));
    assert!(e.contains(&("s".into(), dev.clone(), dev.clone(), EdgeStrategy::Direct)));
    assert!(e.contains(&("r".into(), dev.clone(), dev.clone(), EdgeStrategy::Direct)));
    let report = opt.tensor_strategy();
    assert_eq!(report.copies, 2, "{report:?}");
    assert_eq!(report.bytes_copied, 2 * 3 * 4 + 3 * 4);
    // The output is in device memory too: mappable, so read without a copy.
    let y = opt.network().find_tensor("y").unwrap();
    assert_eq!(opt.tensor_factories()[y.0].as_str(), DEVICE);
    let before = handles_created(&rt);
    assert_eq!(execute(&rt, opt), expected);
    // One working memory: the copies of x and c plus s, r and y.
    assert_eq!(handles_created(&rt) - before, 5);
    // Every tensor of every layer reached the plugin's workloads as its own handle, not as
    // mapped host memory: add (x, c, s), relu (s, r), mul (r, x, y), in each of two runs.
    assert_eq!(device_tensors_seen(&rt), 2 * 8);
}

#[test]
fn tensors_cross_between_device_memory_and_cpu_ref_by_copies() {
    let dir = scratch("abi12-split");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[("memory", "device")]);
    let expected = cpu_ref_alone(&rt);
    let opt = optimize(&rt, &["CpuRefDyn", "CpuRef"], &[("relu", "CpuRef")]);
    let p = placed(&opt);
    assert_eq!(
        p.iter()
            .map(|(l, _, b)| format!("{l}={b}"))
            .collect::<Vec<_>>(),
        ["add=CpuRefDyn", "relu=CpuRef", "mul=CpuRefDyn"]
    );
    let host = FactoryId::host().to_string();
    let dev = DEVICE.to_string();
    let e = edges(&opt);
    // Device → host for CpuRef, host → device back for the plugin's Mul.
    assert!(e.contains(&("s".into(), dev.clone(), host.clone(), EdgeStrategy::Copy)));
    assert!(e.contains(&("r".into(), host.clone(), dev.clone(), EdgeStrategy::Copy)));
    // x, c, s, r: four copies (x is copied once although two layers read it).
    assert_eq!(opt.tensor_strategy().copies, 4, "{e:?}");
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn the_plugins_optimize_subgraph_fuses_through_the_abi() {
    let dir = scratch("abi12-fuse");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[("fuse", "true")]);
    let expected = cpu_ref_alone(&rt);
    let opt = optimize(&rt, &["CpuRefDyn", "CpuRef"], &[]);
    assert_eq!(
        placed(&opt),
        [
            ("add+relu".into(), "AddRelu".into(), "CpuRefDyn".into()),
            ("mul".into(), "Mul".into(), "CpuRefDyn".into()),
        ]
    );
    let fused = &opt.network().layers()[opt.network().find_layer("add+relu").unwrap().0];
    match &fused.op {
        Op::Custom(c) => assert_eq!(
            (c.domain.as_str(), c.op_type.as_str()),
            ("CpuRefDyn", "AddRelu")
        ),
        other => panic!("{other:?}"),
    }
    let subs = &opt.report().substitutions;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0].backend, id("CpuRefDyn"));
    assert_eq!(subs[0].replaced, ["add", "relu"]);
    assert_eq!(subs[0].replacement, ["add+relu"]);
    assert_eq!(opt.tensor_strategy().copies, 0);
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn fusion_and_device_memory_together() {
    let dir = scratch("abi12-both");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[("fuse", "true"), ("memory", "device")]);
    let expected = cpu_ref_alone(&rt);
    let opt = optimize(&rt, &["CpuRefDyn", "CpuRef"], &[]);
    assert_eq!(placed(&opt).len(), 2);
    assert_eq!(opt.tensor_strategy().copies, 2);
    let r = opt.network().find_tensor("r").unwrap();
    assert_eq!(opt.tensor_factories()[r.0].as_str(), DEVICE);
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn without_options_the_plugin_is_cpu_ref_untouched_on_host_memory() {
    let dir = scratch("abi12-plain");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[]);
    let expected = cpu_ref_alone(&rt);
    // optimize_subgraph crosses the ABI and answers "untouched"; no factory, no copy, even
    // with a layer on the static CpuRef in between.
    let opt = optimize(&rt, &["CpuRefDyn", "CpuRef"], &[("relu", "CpuRef")]);
    assert_eq!(placed(&opt).len(), 3);
    assert!(opt.report().substitutions.is_empty());
    assert_eq!(opt.tensor_strategy().copies, 0);
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn a_panic_in_optimize_subgraph_sends_the_layers_to_the_next_backend() {
    let dir = scratch("abi12-panic");
    install(&rust_zoo(), &dir, "Backplane_RustZoo_backend.so");
    let rt = Runtime::new(
        cpu_ref_registry(),
        options_with(&dir, "RustZoo", &[("panic", "optimize")]),
    )
    .unwrap();
    let opt = rt
        .optimize(
            &net(),
            &OptimizerOptions::new(vec![id("RustZoo"), id("CpuRef")]),
        )
        .unwrap();
    assert!(placed(&opt).iter().all(|(_, _, b)| b == "CpuRef"));
    assert!(
        opt.report()
            .refusals
            .iter()
            .any(|(_, b, why)| b == &id("RustZoo") && why.contains("optimize_subgraph")),
        "{:?}",
        opt.report().refusals
    );
    let expected = cpu_ref_alone(&rt);
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn bad_options_make_the_plugin_refuse_to_start() {
    let dir = scratch("abi12-bad-option");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime_with(&dir, &[("memory", "gpu")]);
    assert!(loaded(&rt).is_empty());
    let why = reason(&rt, "Backplane_CpuRefDyn_backend.so").unwrap();
    assert!(why.contains("memory must be host or device"), "{why}");
}

// --- ABI compatibility ----------------------------------------------------------------------

#[test]
fn abi_compatibility_a_plugin_built_against_abi_1_1_loads_and_runs() {
    let dir = scratch("abi-1-1");
    let so = c_example(
        &dir,
        "Acme_ElementwiseC_backend.so",
        &["-DBACKPLANE_ABI_TARGET_MINOR=1"],
    );
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["ElementwiseC"]);
    assert_eq!(
        rt.dynamic_backends().loaded[0].abi_version.to_string(),
        "1.1"
    );
    let backend = rt.backend(&id("ElementwiseC")).unwrap();
    // The 1.1 parts are there, the 1.2 parts absent: host memory, no optimization.
    assert!(!backend.capabilities().0.is_empty());
    assert_eq!(backend.handle_factory_preferences(), [FactoryId::host()]);
    let mut reg = backplane_backend_api::TensorHandleFactoryRegistry::new();
    backend.register_tensor_handle_factories(&mut reg);
    assert!(reg.ids().is_empty());
    let expected = cpu_ref_alone(&rt);
    let opt = optimize(&rt, &["ElementwiseC", "CpuRef"], &[]);
    assert_eq!(
        placed(&opt)
            .iter()
            .map(|(l, _, b)| format!("{l}={b}"))
            .collect::<Vec<_>>(),
        ["add=ElementwiseC", "relu=ElementwiseC", "mul=ElementwiseC"]
    );
    assert_eq!(opt.tensor_strategy().copies, 0);
    assert_eq!(execute(&rt, opt), expected);
    drop(backend);
    drop(rt);
    assert_eq!(host::live_instances(&so), 0);
}

#[test]
fn abi_compatibility_the_current_c_example_speaks_1_3_without_the_1_2_entries() {
    let dir = scratch("abi-1-2-c");
    c_example(&dir, "Acme_ElementwiseC_backend.so", &[]);
    let rt = runtime(&dir);
    assert_eq!(
        rt.dynamic_backends().loaded[0].abi_version.to_string(),
        "1.3"
    );
    let expected = cpu_ref_alone(&rt);
    let opt = optimize(&rt, &["ElementwiseC", "CpuRef"], &[]);
    assert_eq!(placed(&opt).len(), 3);
    assert_eq!(execute(&rt, opt), expected);
}

// --- optimize_subgraph from C ---------------------------------------------------------------

/// The zoo (f32 Relu in C) built with `-DZOO_OPTIMIZE=mode`, preferred over CpuRef.
fn zoo_optimized(mode: u32) -> (Runtime, OptimizedNetwork) {
    let dir = scratch(&format!("abi12-zoo-{mode}"));
    zoo(
        &dir,
        "Zoo_Opt_backend.so",
        &[&format!("-DZOO_OPTIMIZE={mode}")],
    );
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["Zoo"]);
    let opt = optimize(&rt, &["Zoo", "CpuRef"], &[]);
    (rt, opt)
}

#[test]
fn a_c_plugin_substitutes_layers_through_the_sink() {
    let (rt, opt) = zoo_optimized(3);
    assert_eq!(
        placed(&opt)
            .iter()
            .map(|(l, _, b)| format!("{l}={b}"))
            .collect::<Vec<_>>(),
        ["add=CpuRef", "relu_zoo=Zoo", "mul=CpuRef"]
    );
    assert_eq!(opt.report().substitutions[0].replaced, ["relu"]);
    let expected = cpu_ref_alone(&rt);
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn a_c_plugin_rejecting_its_layers_sends_them_to_the_next_backend() {
    let (rt, opt) = zoo_optimized(1);
    assert!(placed(&opt).iter().all(|(_, _, b)| b == "CpuRef"));
    let expected = cpu_ref_alone(&rt);
    assert_eq!(execute(&rt, opt), expected);
}

#[test]
fn a_malformed_or_failed_answer_leaves_the_subgraph_untouched() {
    for mode in [2, 4] {
        let (rt, opt) = zoo_optimized(mode);
        let p = placed(&opt);
        assert!(
            p.contains(&("relu".into(), "Relu".into(), "Zoo".into())),
            "{p:?}"
        );
        assert!(opt.report().substitutions.is_empty());
        let expected = cpu_ref_alone(&rt);
        assert_eq!(execute(&rt, opt), expected);
    }
}

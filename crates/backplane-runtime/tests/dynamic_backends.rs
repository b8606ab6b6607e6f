//! Dynamic backends, end to end: the design note's Test Strategy (tests `t01`..`t12`), the
//! cases of Arm NN's DynamicBackendTests that apply, the zoo of broken backends, ABI
//! compatibility, and the digits model through the Rust and C example backends.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod plugins;

use backplane_backend_api::{BackendError, BackendId, CapabilityValue, LayerDesc, Support};
use backplane_core::ops::{BinaryOp, ConvDesc, UnaryOp, Window};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo};
use backplane_plugin::host;
use backplane_runtime::dynamic::{self, RejectReason};
use backplane_runtime::{
    DynamicBackendsOption, OptimizerOptions, Runtime, RuntimeError, RuntimeOptions,
};
use plugins::*;
use std::path::Path;
use std::sync::Arc;

fn id(s: &str) -> BackendId {
    BackendId::new(s).unwrap()
}

/// x [2, 3] → Relu → y
fn relu_network() -> Network {
    let mut n = Network::new();
    let x = n
        .add_input("x", TensorInfo::new(DataType::F32, vec![2, 3]))
        .unwrap();
    let y = n
        .add_layer_named("relu", Op::Unary(UnaryOp::Relu), &[x], &["y".into()])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    n
}

/// a [2, 3] + b [3] → Add → Mul by a → y (broadcasting)
fn add_mul_network() -> Network {
    let mut n = Network::new();
    let a = n
        .add_input("a", TensorInfo::new(DataType::F32, vec![2, 3]))
        .unwrap();
    let b = n
        .add_input("b", TensorInfo::new(DataType::F32, vec![3]))
        .unwrap();
    let s = n
        .add_layer("add", Op::Binary(BinaryOp::Add), &[a, b])
        .unwrap()[0];
    let y = n
        .add_layer_named("mul", Op::Binary(BinaryOp::Mul), &[s, a], &["y".into()])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    n
}

fn x() -> Tensor {
    Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0]).unwrap()
}

/// Optimize for `prefs`, load, run on the named inputs; returns (backend per layer, outputs).
fn run(
    rt: &Runtime,
    net: &Network,
    prefs: &[&str],
    inputs: &[(&str, &Tensor)],
) -> (Vec<String>, Vec<f32>) {
    let opt = rt
        .optimize(
            net,
            &OptimizerOptions::new(prefs.iter().map(|p| id(p)).collect()),
        )
        .unwrap();
    let placed = opt
        .network()
        .layers()
        .iter()
        .zip(opt.assignment())
        .filter(|(l, _)| !matches!(l.op, Op::MemCopy | Op::MemImport))
        .map(|(l, b)| format!("{}={b}", l.name))
        .collect();
    let nid = rt.load_network(opt).unwrap();
    let out = rt.execute(nid, inputs).unwrap();
    rt.unload_network(nid).unwrap();
    (placed, out[0].1.as_slice::<f32>().unwrap().to_vec())
}

fn int_capability(rt: &Runtime, backend: &str, name: &str) -> i64 {
    match rt.backend(&id(backend)).unwrap().capabilities().get(name) {
        Some(CapabilityValue::Int(v)) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

// --- Test Strategy 1: a valid backend loads -----------------------------------------------

#[test]
fn t01_a_valid_backend_loads_and_is_registered() {
    let dir = scratch("t01");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime(&dir);
    let report = rt.dynamic_backends();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(loaded(&rt), ["CpuRefDyn"]);
    let b = &report.loaded[0];
    assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(b.abi_version, dynamic::abi_version());
    assert_eq!(
        b.file,
        dir.join("Backplane_CpuRefDyn_backend.so")
            .canonicalize()
            .unwrap()
    );
    assert!(rt.registry().is_registered(&id("CpuRefDyn")));
    assert_eq!(rt.backend(&id("CpuRefDyn")).unwrap().id(), id("CpuRefDyn"));
    let (placed, y) = run(&rt, &relu_network(), &["CpuRefDyn"], &[("x", &x())]);
    assert_eq!(placed, ["relu=CpuRefDyn"]);
    assert_eq!(y, [1.0, 0.0, 3.0, 0.0, 5.0, 0.0]);
}

// --- Test Strategy 2: invalid shared objects are not loaded --------------------------------

#[test]
fn t02_invalid_shared_objects_and_names_are_skipped_with_reasons() {
    let dir = scratch("t02");
    std::fs::write(dir.join("Acme_Text_backend.so"), "not a shared object").unwrap();
    let so = zoo(&dir, "Acme_Zoo_backend.so", &[]);
    // Wrong names, even for a valid shared object.
    for name in [
        "libzoo.so",
        "Acme_Zoo_backendXso",
        "Acme_Zoo.so",
        "Acme_Zoo_backend_v1.2.so",
        "Acme_Zoo_backend.so.1,1",
    ] {
        std::fs::copy(&so, dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(dir.join("nowhere.so"), dir.join("Acme_Dangling_backend.so"))
        .unwrap();
    std::fs::create_dir(dir.join("Acme_Dir_backend.so")).unwrap();
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["Zoo"]);
    assert!(reason(&rt, "Acme_Text_backend.so")
        .unwrap()
        .contains("cannot open it as a shared object"));
    for name in [
        "libzoo.so",
        "Acme_Zoo_backendXso",
        "Acme_Zoo.so",
        "Acme_Zoo_backend_v1.2.so",
        "Acme_Zoo_backend.so.1,1",
    ] {
        assert_eq!(
            reason(&rt, name).unwrap(),
            RejectReason::BadName.to_string(),
            "{name}"
        );
    }
    assert_eq!(
        reason(&rt, "Acme_Dangling_backend.so").unwrap(),
        RejectReason::DanglingLink.to_string()
    );
    // A directory named like a backend is skipped with a word; other directories silently.
    assert_eq!(
        reason(&rt, "Acme_Dir_backend.so").unwrap(),
        RejectReason::NotAFile("a directory").to_string()
    );
}

// --- Test Strategy 3: invalid backends are not loaded --------------------------------------

#[test]
fn t03_the_zoo_of_broken_backends_is_rejected_with_reasons() {
    let dir = scratch("t03");
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "Zoo_NoId_backend.so",
            &["-DZOO_NO_GET_BACKEND_ID"],
            "does not export 'GetBackendId'",
        ),
        (
            "Zoo_NoVersion_backend.so",
            &["-DZOO_NO_GET_VERSION"],
            "does not export 'GetVersion'",
        ),
        (
            "Zoo_NoFactory_backend.so",
            &["-DZOO_NO_BACKEND_FACTORY"],
            "does not export 'BackendFactory'",
        ),
        (
            "Zoo_Mangled_backend.so",
            &["-DZOO_MANGLED"],
            "does not export 'GetBackendId'",
        ),
        (
            "Zoo_NullId_backend.so",
            &["-DZOO_NULL_ID"],
            "GetBackendId returned null",
        ),
        (
            "Zoo_BadChars_backend.so",
            &["-DZOO_ID=\"Bad-Id\""],
            "invalid id",
        ),
        ("Zoo_EmptyId_backend.so", &["-DZOO_ID=\"\""], "invalid id"),
        (
            "Zoo_LongId_backend.so",
            &[concat!(
                "-DZOO_ID=\"",
                "LongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongX",
                "\""
            )],
            "the id has 65 bytes; backend ids have at most 64",
        ),
        (
            "Zoo_UnknownId_backend.so",
            &["-DZOO_ID=\"Unknown\""],
            "'Unknown' is reserved",
        ),
        (
            "Zoo_NullFactory_backend.so",
            &["-DZOO_NULL_FACTORY"],
            "BackendFactory returned null",
        ),
        (
            "Zoo_NullEntry_backend.so",
            &["-DZOO_NULL_ENTRY"],
            "'execute_workload' is null",
        ),
        (
            "Zoo_SmallTable_backend.so",
            &["-DZOO_SMALL_TABLE"],
            "struct_size 8 is too small",
        ),
        (
            "Zoo_FailCreate_backend.so",
            &["-DZOO_FAIL_CREATE"],
            "the zoo backend refuses to be created",
        ),
        (
            "Zoo_BadMinor_backend.so",
            &["-DZOO_BAD_NEGOTIATION"],
            "answered ABI minor 99",
        ),
    ];
    for (name, flags, _) in cases {
        zoo(&dir, name, flags);
    }
    let rt = runtime(&dir);
    assert!(loaded(&rt).is_empty(), "{:?}", loaded(&rt));
    for (name, _, needle) in cases {
        let why = reason(&rt, name).unwrap_or_else(|| panic!("{name} was not reported"));
        assert!(why.contains(needle), "{name}: {why}");
    }
    // Nothing was left behind: refused instances were destroyed.
    for (name, _, _) in cases {
        assert_eq!(host::live_instances(&dir.join(name)), 0, "{name}");
    }
}

#[test]
fn t03_a_rust_factory_that_panics_is_rejected_and_nothing_crashes() {
    let dir = scratch("t03-panic");
    install(&rust_zoo(), &dir, "Acme_RustZoo_backend.so");
    let rt = Runtime::new(
        cpu_ref_registry(),
        options_with(&dir, "RustZoo", &[("panic", "create")]),
    )
    .unwrap();
    assert!(loaded(&rt).is_empty());
    let why = reason(&rt, "Acme_RustZoo_backend.so").unwrap();
    assert!(why.contains("panicked"), "{why}");
    assert!(why.contains("told to panic in its factory"), "{why}");
    // The same file loads in another runtime whose options do not make it panic.
    let rt2 = runtime(&dir);
    assert_eq!(loaded(&rt2), ["RustZoo"]);
    // A factory that fails (without panicking) is reported with its message.
    let rt3 = Runtime::new(
        cpu_ref_registry(),
        options_with(&dir, "RustZoo", &[("panic", "fail")]),
    )
    .unwrap();
    assert!(reason(&rt3, "Acme_RustZoo_backend.so")
        .unwrap()
        .contains("told to fail in its factory"));
}

// --- Test Strategy 4: unsupported versions are not loaded ---------------------------------

#[test]
fn t04_incompatible_versions_are_rejected() {
    let dir = scratch("t04");
    let too_new = format!("-DZOO_MINOR={}", dynamic::abi_version().minor + 1);
    zoo(&dir, "Zoo_Major2_backend.so", &["-DZOO_MAJOR=2"]);
    zoo(
        &dir,
        "Zoo_Major0_backend.so",
        &["-DZOO_MAJOR=0", "-DZOO_MINOR=7"],
    );
    zoo(&dir, "Zoo_TooNew_backend.so", &[&too_new]);
    let rt = runtime(&dir);
    assert!(loaded(&rt).is_empty());
    let minor = dynamic::abi_version().minor;
    for (name, version) in [
        ("Zoo_Major2_backend.so", format!("2.{minor}")),
        ("Zoo_Major0_backend.so", "0.7".to_string()),
        ("Zoo_TooNew_backend.so", format!("1.{}", minor + 1)),
    ] {
        let why = reason(&rt, name).unwrap();
        assert!(
            why.contains(&format!("built against ABI {version}")),
            "{why}"
        );
    }
}

// --- Test Strategy 5: several different backends load --------------------------------------

#[test]
fn t05_several_different_backends_load_in_file_name_order() {
    let dir = scratch("t05");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    c_example(&dir, "Acme_ElementwiseC_backend.so", &[]);
    zoo(&dir, "Zoo_Zoo_backend.so", &[]);
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["ElementwiseC", "CpuRefDyn", "Zoo"]);
    let ids: Vec<String> = rt.registry().ids().iter().map(|i| i.to_string()).collect();
    for want in ["CpuRef", "ElementwiseC", "CpuRefDyn", "Zoo"] {
        assert!(ids.iter().any(|i| i == want), "{want} in {ids:?}");
    }
}

// --- Test Strategy 6: an id already registered is not loaded -------------------------------

#[test]
fn t06_ids_already_registered_static_or_dynamic_are_skipped() {
    let dir = scratch("t06");
    zoo(&dir, "Acme_First_backend.so", &[]);
    zoo(&dir, "Acme_Second_backend.so", &[]);
    zoo(&dir, "Acme_Static_backend.so", &["-DZOO_ID=\"CpuRef\""]);
    zoo(&dir, "Acme_Builtin_backend.so", &["-DZOO_ID=\"Builtin\""]);
    // The id is checked before BackendFactory runs: a taken id is reported as such, not
    // as what the factory would have done.
    zoo(&dir, "Acme_Third_backend.so", &["-DZOO_NULL_FACTORY"]);
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["Zoo"]);
    assert_eq!(
        rt.dynamic_backends().loaded[0].file,
        dir.join("Acme_First_backend.so").canonicalize().unwrap()
    );
    let second = reason(&rt, "Acme_Second_backend.so").unwrap();
    assert!(
        second.contains("'Zoo' is already registered by"),
        "{second}"
    );
    assert!(second.contains("Acme_First_backend.so"), "{second}");
    let stat = reason(&rt, "Acme_Static_backend.so").unwrap();
    assert!(
        stat.contains("'CpuRef' is already registered by a static backend"),
        "{stat}"
    );
    assert!(reason(&rt, "Acme_Builtin_backend.so").is_some());
    let third = reason(&rt, "Acme_Third_backend.so").unwrap();
    assert!(third.contains("'Zoo' is already registered by"), "{third}");
    // The static CpuRef is untouched.
    let (placed, _) = run(&rt, &relu_network(), &["CpuRef"], &[("x", &x())]);
    assert_eq!(placed, ["relu=CpuRef"]);
}

// --- Test Strategy 7: the same file loads once per runtime ---------------------------------

#[test]
fn t07_the_same_shared_object_loads_once_per_runtime() {
    let dir = scratch("t07");
    let real = zoo(&dir, "Acme_Zoo_backend.so.1.2.3", &[]);
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(dir.join(target), dir.join(name)).unwrap()
    };
    link("Acme_Zoo_backend.so.1.2.3", "Acme_Zoo_backend.so.1.2");
    link("Acme_Zoo_backend.so.1.2", "Acme_Zoo_backend.so.1");
    link("Acme_Zoo_backend.so.1", "Acme_Zoo_backend.so");
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["Zoo"]);
    assert_eq!(
        rt.dynamic_backends().loaded[0].file,
        real.canonicalize().unwrap()
    );
    // Sorted order: `Acme_Zoo_backend.so` comes first and wins; the others are the same file.
    for name in [
        "Acme_Zoo_backend.so.1",
        "Acme_Zoo_backend.so.1.2",
        "Acme_Zoo_backend.so.1.2.3",
    ] {
        let why = reason(&rt, name).unwrap();
        assert!(why.contains("same file as"), "{name}: {why}");
        assert!(
            why.contains("Acme_Zoo_backend.so, which was found first"),
            "{why}"
        );
    }
    assert_eq!(host::live_instances(&real), 1);
}

// --- Test Strategy 8: backends are unloaded when the runtime is dropped --------------------

#[test]
fn t08_instances_are_destroyed_when_the_runtime_is_dropped() {
    let dir = scratch("t08");
    let rust = install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let c = c_example(&dir, "Acme_ElementwiseC_backend.so", &[]);
    let rt = runtime(&dir);
    assert_eq!(host::live_instances(&rust), 1);
    assert_eq!(host::live_instances(&c), 1);
    // A network left loaded (workloads, factories, memory managers alive) at the drop.
    let opt = rt
        .optimize(
            &add_mul_network(),
            &OptimizerOptions::new(vec![id("ElementwiseC")]),
        )
        .unwrap();
    rt.load_network(opt).unwrap();
    let opt = rt
        .optimize(
            &relu_network(),
            &OptimizerOptions::new(vec![id("CpuRefDyn")]),
        )
        .unwrap();
    rt.load_network(opt).unwrap();
    let backend = rt.backend(&id("CpuRefDyn")).unwrap();
    drop(rt);
    assert_eq!(host::live_instances(&c), 0);
    assert_eq!(
        host::live_instances(&rust),
        1,
        "a backend object still held by the application keeps its instance"
    );
    drop(backend);
    assert_eq!(host::live_instances(&rust), 0);
}

// --- Test Strategy 9: every method of a loaded backend runs --------------------------------

#[test]
fn t09_every_method_of_the_c_backend_runs_through_the_abi() {
    let dir = scratch("t09-c");
    c_example(&dir, "Acme_ElementwiseC_backend.so", &[]);
    let rt = runtime(&dir);
    let b = rt.backend(&id("ElementwiseC")).unwrap();
    assert_eq!(b.version(), "1.0.0");
    assert_eq!(b.api_version(), dynamic::abi_version());
    assert_eq!(
        b.capabilities().get("AsyncExecution"),
        Some(&CapabilityValue::Bool(true))
    );
    // Layer support: Add yes, Conv no, with the backend's reason.
    let support = b.layer_support();
    let f32x = |d: Vec<usize>| TensorInfo::new(DataType::F32, d);
    let add = LayerDesc {
        name: "add".into(),
        op: Op::Binary(BinaryOp::Add),
        inputs: vec![f32x(vec![2, 3]), f32x(vec![3])],
        outputs: vec![f32x(vec![2, 3])],
        constants: vec![None, None],
    };
    assert_eq!(support.is_layer_supported(&add), Support::Supported);
    let conv = LayerDesc {
        name: "conv".into(),
        op: Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![1, 1],
                ..Default::default()
            },
            group: 1,
        }),
        inputs: vec![f32x(vec![1, 1, 2, 2]), f32x(vec![1, 1, 1, 1])],
        outputs: vec![f32x(vec![1, 1, 2, 2])],
        constants: vec![None, None],
    };
    assert_eq!(
        support.is_layer_supported(&conv),
        Support::Unsupported("ElementwiseC runs Add, Mul and Relu, not Conv".into())
    );
    // Workload creation refuses what support refused, as a typed error.
    let factory = b.create_workload_factory(None).unwrap();
    match factory.create_workload(&conv) {
        Err(BackendError::Unsupported { layer, op, reason }) => {
            assert_eq!((layer.as_str(), op.as_str()), ("conv", "Conv"));
            assert!(reason.contains("not Conv"));
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("conv should be refused"),
    }
    // Memory manager and context hooks, seen through the backend's own counters.
    assert_eq!(int_capability(&rt, "ElementwiseC", "LoadedNetworks"), 0);
    let opt = rt
        .optimize(
            &add_mul_network(),
            &OptimizerOptions::new(vec![id("ElementwiseC")]),
        )
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    assert_eq!(int_capability(&rt, "ElementwiseC", "LoadedNetworks"), 1);
    assert_eq!(
        int_capability(&rt, "ElementwiseC", "AcquiredMemoryManagers"),
        1
    );
    let a = x();
    let bb = Tensor::from_vec(vec![3], vec![10.0f32, 20.0, 30.0]).unwrap();
    let out = rt.execute(nid, &[("a", &a), ("b", &bb)]).unwrap();
    let want: Vec<f32> = [1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0]
        .iter()
        .zip([10.0f32, 20.0, 30.0].iter().cycle())
        .map(|(a, b)| (a + b) * a)
        .collect();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), want.as_slice());
    rt.unload_network(nid).unwrap();
    assert_eq!(int_capability(&rt, "ElementwiseC", "LoadedNetworks"), 0);
    assert_eq!(
        int_capability(&rt, "ElementwiseC", "AcquiredMemoryManagers"),
        0
    );
}

#[test]
fn t09_the_reference_backend_loaded_dynamically_supports_conv_and_creates_its_workload() {
    let dir = scratch("t09-rust");
    install(&rust_example(), &dir, "Arm_CpuRefDyn_backend.so");
    let rt = runtime(&dir);
    let b = rt.backend(&id("CpuRefDyn")).unwrap();
    let w = Tensor::from_vec(vec![1, 1, 3, 3], vec![1.0f32; 9]).unwrap();
    let conv = LayerDesc {
        name: "conv".into(),
        op: Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![3, 3],
                pads: vec![1, 1, 1, 1],
                ..Default::default()
            },
            group: 1,
        }),
        inputs: vec![
            TensorInfo::new(DataType::F32, vec![1, 1, 4, 4]),
            w.info().clone(),
        ],
        outputs: vec![TensorInfo::new(DataType::F32, vec![1, 1, 4, 4])],
        constants: vec![None, Some(Arc::new(w))],
    };
    assert!(b.layer_support().is_layer_supported(&conv).is_supported());
    let mm = b.create_memory_manager();
    assert!(
        mm.is_some(),
        "CpuRef manages memory, and so does its dynamic wrapper"
    );
    let factory = b.create_workload_factory(mm).unwrap();
    let workload = factory.create_workload(&conv).unwrap();
    let input = Tensor::from_vec(vec![1, 1, 4, 4], vec![1.0f32; 16]).unwrap();
    let mut output = Tensor::zeros(conv.outputs[0].clone()).unwrap();
    let weights = conv.constants[1].as_ref().unwrap().clone();
    workload
        .execute(&[input.view(), weights.view()], &mut [output.view_mut()])
        .unwrap();
    // A 3x3 box sum over a 4x4 field of ones with zero padding.
    assert_eq!(
        output.as_slice::<f32>().unwrap(),
        [4.0, 6.0, 6.0, 4.0, 6.0, 9.0, 9.0, 6.0, 6.0, 9.0, 9.0, 6.0, 4.0, 6.0, 6.0, 4.0]
    );
    assert_eq!(
        b.capabilities(),
        backplane_backend_api::Backend::capabilities(&backplane_cpu_ref::CpuRefBackend)
    );
}

// --- Test Strategy 10: a runtime starts with no dynamic backends ---------------------------

#[test]
fn t10_a_runtime_starts_without_dynamic_backends() {
    let empty = scratch("t10");
    for options in [
        RuntimeOptions::default(),
        RuntimeOptions {
            dynamic_backends: DynamicBackendsOption::Disabled,
            ..RuntimeOptions::default()
        },
        options(&empty),
        options(Path::new("/backplane/no/such/dir")),
        options(Path::new("relative/dir")),
    ] {
        let rt = Runtime::new(cpu_ref_registry(), options.clone()).unwrap();
        assert!(rt.dynamic_backends().loaded.is_empty(), "{options:?}");
        let (placed, _) = run(&rt, &relu_network(), &["CpuRef"], &[("x", &x())]);
        assert_eq!(placed, ["relu=CpuRef"]);
    }
    let rt = Runtime::new(
        cpu_ref_registry(),
        options(Path::new("/backplane/no/such/dir")),
    )
    .unwrap();
    let w = &rt.dynamic_backends().warnings;
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("no dynamic backends are loaded"), "{w:?}");
    // A runtime with no static backends and only invalid dynamic ones is empty but starts.
    let dir = scratch("t10-invalid");
    zoo(&dir, "Zoo_Bad_backend.so", &["-DZOO_NULL_FACTORY"]);
    let rt = Runtime::new(backplane_runtime::BackendRegistry::new(), options(&dir)).unwrap();
    assert!(loaded(&rt).is_empty());
    assert_eq!(rt.dynamic_backends().rejected.len(), 1);
}

// --- Test Strategy 11: several runtimes, one backend file, separate instances --------------

#[test]
fn t11_several_runtimes_load_the_same_backend_each_with_its_own_instance() {
    let dir = scratch("t11");
    let so = install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    assert_eq!(host::library_handles(&so), 0);
    let rt1 = runtime(&dir);
    let rt2 = runtime(&dir);
    assert_eq!(host::live_instances(&so), 2);
    // Counted for this file only: other tests open libraries at the same time.
    assert_eq!(
        host::library_handles(&so),
        1,
        "both runtimes share one library handle"
    );
    drop(rt1);
    assert_eq!(host::live_instances(&so), 1);
    // Dropping one runtime never unregisters the other's backends.
    assert!(rt2.registry().is_registered(&id("CpuRefDyn")));
    let (_, y) = run(&rt2, &relu_network(), &["CpuRefDyn"], &[("x", &x())]);
    assert_eq!(y, [1.0, 0.0, 3.0, 0.0, 5.0, 0.0]);
    drop(rt2);
    assert_eq!(host::live_instances(&so), 0);
    // And the file loads again, through the cached handle.
    let rt3 = runtime(&dir);
    assert_eq!(loaded(&rt3), ["CpuRefDyn"]);
}

// --- Test Strategy 12: the utility functions -----------------------------------------------

#[test]
fn t12_scanning_four_paths_finds_exactly_the_valid_names_in_order() {
    let root = scratch("t12");
    let (a, b, c) = (root.join("pathA"), root.join("pathB"), root.join("pathC"));
    for d in [&a, &b, &c] {
        std::fs::create_dir(d).unwrap();
    }
    let so = zoo(&root, "zoo.so", &[]);
    for (dir, name) in [
        (&a, "Arm_GpuAcc_backend.so"),
        (&a, "Arm_GpuAcc_backend.so.1.2.3"),
        (&a, "Arm_no_backend.txt"),
        (&a, "Arm__backend.so"),
        (&b, "Arm_GpuAcc_backend.so"),
        (&c, "Arm_CpuAcc_backend.so"),
    ] {
        std::fs::copy(&so, dir.join(name)).unwrap();
    }
    let link = |dir: &Path, target: &str, name: &str| {
        std::os::unix::fs::symlink(dir.join(target), dir.join(name)).unwrap()
    };
    link(&c, "Arm_CpuAcc_backend.so", "Arm_CpuAcc_backend.so.1");
    link(&c, "Arm_CpuAcc_backend.so.1", "Arm_CpuAcc_backend.so.1.2");
    link(&c, "nothing", "Arm_no_backend.so");
    let paths = [
        a.display().to_string(),
        root.join("missing").display().to_string(),
        b.display().to_string(),
        c.display().to_string(),
        a.display().to_string(),
    ];
    let list = paths.join(":");
    let parsed = dynamic::parse_path_list(&format!("::{list}:"));
    assert_eq!(
        parsed.len(),
        4,
        "the duplicate pathA is dropped: {parsed:?}"
    );
    let mut warnings = Vec::new();
    let valid = dynamic::valid_paths(&parsed, &mut warnings);
    assert_eq!(valid, [a.clone(), b.clone(), c.clone()]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let mut rejected = Vec::new();
    let found = dynamic::shared_objects(&valid, &mut rejected, &mut warnings);
    let names: Vec<String> = found
        .iter()
        .map(|(f, _)| f.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "pathA/Arm_GpuAcc_backend.so",
            "pathA/Arm_GpuAcc_backend.so.1.2.3",
            "pathB/Arm_GpuAcc_backend.so",
            "pathC/Arm_CpuAcc_backend.so",
        ]
    );
    let why = |name: &str| {
        rejected
            .iter()
            .find(|r| r.file.strip_prefix(&root).unwrap() == Path::new(name))
            .map(|r| r.reason.clone())
    };
    assert_eq!(why("pathA/Arm_no_backend.txt"), Some(RejectReason::BadName));
    assert_eq!(why("pathA/Arm__backend.so"), Some(RejectReason::BadName));
    assert_eq!(
        why("pathC/Arm_no_backend.so"),
        Some(RejectReason::DanglingLink)
    );
    assert!(matches!(
        why("pathC/Arm_CpuAcc_backend.so.1"),
        Some(RejectReason::DuplicateFile(_))
    ));
    assert!(matches!(
        why("pathC/Arm_CpuAcc_backend.so.1.2"),
        Some(RejectReason::DuplicateFile(_))
    ));
    // Same name in two directories, different files: both are candidates; the loader then
    // keeps the first and skips the second as a duplicate id (t06).
}

// --- The zoo at run time -------------------------------------------------------------------

#[test]
fn a_workload_error_at_run_time_surfaces_as_a_typed_runtime_error() {
    let dir = scratch("run-error");
    zoo(&dir, "Zoo_Failing_backend.so", &["-DZOO_FAIL_EXECUTE"]);
    let rt = runtime(&dir);
    let opt = rt
        .optimize(&relu_network(), &OptimizerOptions::new(vec![id("Zoo")]))
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    let x = x();
    match rt.execute(nid, &[("x", &x)]) {
        Err(RuntimeError::Backend {
            backend,
            layer,
            source,
        }) => {
            assert_eq!(backend, id("Zoo"));
            assert_eq!(layer.as_deref(), Some("relu"));
            assert!(
                matches!(*source, BackendError::Execution(ref m) if m == "the zoo workload failed on purpose")
            );
        }
        other => panic!("{other:?}"),
    }
    // The runtime keeps working: the same network fails again cleanly, CpuRef still runs.
    assert!(rt.execute(nid, &[("x", &x)]).is_err());
    let (_, y) = run(&rt, &relu_network(), &["CpuRef"], &[("x", &x)]);
    assert_eq!(y, [1.0, 0.0, 3.0, 0.0, 5.0, 0.0]);
}

#[test]
fn a_panicking_workload_poisons_its_backend_and_the_runtime_keeps_working() {
    let dir = scratch("run-panic");
    install(&rust_zoo(), &dir, "Acme_RustZoo_backend.so");
    let rt = Runtime::new(
        cpu_ref_registry(),
        options_with(&dir, "RustZoo", &[("panic", "execute")]),
    )
    .unwrap();
    let opt = rt
        .optimize(&relu_network(), &OptimizerOptions::new(vec![id("RustZoo")]))
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    let x = x();
    let err = rt.execute(nid, &[("x", &x)]).unwrap_err().to_string();
    assert!(
        err.contains("panicked") && err.contains("panic in execute"),
        "{err}"
    );
    let err = rt.execute(nid, &[("x", &x)]).unwrap_err().to_string();
    assert!(
        err.contains("disabled because it panicked earlier"),
        "{err}"
    );
    let (_, y) = run(&rt, &relu_network(), &["CpuRef"], &[("x", &x)]);
    assert_eq!(y, [1.0, 0.0, 3.0, 0.0, 5.0, 0.0]);
}

#[test]
fn a_panic_in_layer_support_is_a_refusal_and_the_next_backend_takes_the_layer() {
    let dir = scratch("support-panic");
    install(&rust_zoo(), &dir, "Acme_RustZoo_backend.so");
    let rt = Runtime::new(
        cpu_ref_registry(),
        options_with(&dir, "RustZoo", &[("panic", "support")]),
    )
    .unwrap();
    let (placed, _) = run(&rt, &relu_network(), &["RustZoo", "CpuRef"], &[("x", &x())]);
    assert_eq!(placed, ["relu=CpuRef"]);
}

#[test]
fn the_plugin_receives_its_path_its_options_and_the_host_version() {
    let dir = scratch("host-info");
    let so = install(&rust_zoo(), &dir, "Acme_RustZoo_backend.so");
    let rt = Runtime::new(
        cpu_ref_registry(),
        options_with(&dir, "RustZoo", &[("threads", "4"), ("mode", "fast")]),
    )
    .unwrap();
    let caps = rt.backend(&id("RustZoo")).unwrap().capabilities();
    let text = |k: &str| match caps.get(k) {
        Some(CapabilityValue::Text(t)) => t.clone(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(
        text("PluginPath"),
        so.canonicalize().unwrap().display().to_string()
    );
    assert_eq!(text("HostAbi"), dynamic::abi_version().to_string());
    assert_eq!(text("Abi"), dynamic::abi_version().to_string());
    assert_eq!(text("option.threads"), "4");
    assert_eq!(text("option.mode"), "fast");
}

// --- ABI compatibility ----------------------------------------------------------------------

#[test]
fn abi_compatibility_a_plugin_built_against_abi_1_0_loads_and_runs() {
    let dir = scratch("abi-1-0");
    let so = c_example(
        &dir,
        "Acme_ElementwiseC_backend.so",
        &["-DBACKPLANE_ABI_TARGET_MINOR=0"],
    );
    let rt = runtime(&dir);
    assert_eq!(loaded(&rt), ["ElementwiseC"]);
    let b = &rt.dynamic_backends().loaded[0];
    assert_eq!(b.abi_version.to_string(), "1.0");
    let backend = rt.backend(&id("ElementwiseC")).unwrap();
    // The 1.1 parts are absent: no memory manager, context or capabilities, and no harm.
    assert!(backend.capabilities().0.is_empty());
    assert!(backend.create_memory_manager().is_none());
    let a = x();
    let bb = Tensor::from_vec(vec![3], vec![1.0f32, 1.0, 1.0]).unwrap();
    let (placed, y) = run(
        &rt,
        &add_mul_network(),
        &["ElementwiseC"],
        &[("a", &a), ("b", &bb)],
    );
    assert_eq!(placed, ["add=ElementwiseC", "mul=ElementwiseC"]);
    assert_eq!(y, [2.0, 2.0, 12.0, 12.0, 30.0, 30.0]);
    drop(backend);
    drop(rt);
    assert_eq!(host::live_instances(&so), 0);
}

// --- End to end: the digits model -----------------------------------------------------------

fn digits() -> (Network, Tensor) {
    let repo = repo();
    let mut options = backplane_onnx::ImportOptions::default().with_dim("batch", 1);
    options.evaluator = Some(Arc::new(backplane_cpu_ref::CpuRefEvaluator));
    let net =
        backplane_onnx::import_file(&repo.join("models/digits/model.onnx"), &options).unwrap();
    let bytes = std::fs::read(repo.join("models/digits/samples/digit_3.npy")).unwrap();
    // A .npy of f32 [1, 1, 8, 8]: the data is the last 256 bytes.
    let data = &bytes[bytes.len() - 256..];
    let image = Tensor::from_bytes(TensorInfo::new(DataType::F32, vec![1, 1, 8, 8]), data).unwrap();
    (net, image)
}

#[test]
fn end_to_end_digits_through_the_rust_dynamic_backend_equals_static_cpuref() {
    let dir = scratch("e2e-rust");
    install(&rust_example(), &dir, "Backplane_CpuRefDyn_backend.so");
    let rt = runtime(&dir);
    let (net, image) = digits();
    let (placed, dynamic) = run(&rt, &net, &["CpuRefDyn"], &[("input", &image)]);
    assert!(
        placed.iter().all(|p| p.ends_with("=CpuRefDyn")),
        "{placed:?}"
    );
    let (_, reference) = run(&rt, &net, &["CpuRef"], &[("input", &image)]);
    assert_eq!(dynamic.len(), 10);
    assert_eq!(
        dynamic.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        reference.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "bit-identical"
    );
    let best = dynamic
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert_eq!(best, 3);
}

#[test]
fn end_to_end_digits_split_between_the_c_backend_and_cpuref_matches_cpuref_alone() {
    let dir = scratch("e2e-c");
    c_example(&dir, "Acme_ElementwiseC_backend.so", &[]);
    let rt = runtime(&dir);
    let (net, image) = digits();
    let (placed, split) = run(&rt, &net, &["ElementwiseC", "CpuRef"], &[("input", &image)]);
    let on_c: Vec<&String> = placed
        .iter()
        .filter(|p| p.ends_with("=ElementwiseC"))
        .collect();
    assert_eq!(on_c.len(), 2, "the two Relu layers run in C: {placed:?}");
    assert!(placed.iter().any(|p| p.ends_with("=CpuRef")));
    let (_, reference) = run(&rt, &net, &["CpuRef"], &[("input", &image)]);
    assert_eq!(split, reference);
}

//! How GpuAcc executes a network, through the public API: a run of consecutive GPU layers is
//! recorded into one command buffer and submitted once per execution (no CPU round trip
//! inside it), a host layer between two GPU runs makes exactly one more submit, and bind
//! groups are made on first use, not per execution. Results match CpuRef's.
//!
//! Needs a Vulkan adapter (a software one is accepted); without one the tests print why and
//! pass, unless `BACKPLANE_REQUIRE_GPU_ADAPTER=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::backend_api::CapabilityValue;
use backplane::core::ops::{BinaryOp, UnaryOp};
use backplane::core::{DataType, Op};
use backplane::{BackendId, Network, OptimizerOptions, Runtime, RuntimeOptions, Tensor};
use backplane_backend_tests::sweeps::Rng;

fn gpu() -> BackendId {
    BackendId::new("GpuAcc").unwrap()
}

fn cpu_ref() -> BackendId {
    BackendId::new("CpuRef").unwrap()
}

/// A runtime with GpuAcc allowed on a software adapter, or `None` (said) without an adapter.
fn runtime() -> Option<Runtime> {
    runtime_with(&[])
}

/// The same with more GpuAcc options.
fn runtime_with(extra: &[(&str, &str)]) -> Option<Runtime> {
    let mut options = RuntimeOptions::default();
    let mut gpu_options = backplane::BackendOptions::default();
    gpu_options
        .values
        .insert("allow_software".into(), "true".into());
    for (k, v) in extra {
        gpu_options.values.insert((*k).into(), (*v).into());
    }
    options.backend_options.insert(gpu(), gpu_options);
    let rt = Runtime::new(backplane::builtin_registry(), options).unwrap();
    let adapter = counter_text(&rt, "Adapter");
    if adapter.starts_with("no GPU adapter") {
        if std::env::var("BACKPLANE_REQUIRE_GPU_ADAPTER").as_deref() == Ok("1") {
            panic!("BACKPLANE_REQUIRE_GPU_ADAPTER=1 but GpuAcc has none: {adapter}");
        }
        println!("SKIPPED: GpuAcc has no adapter on this machine ({adapter})");
        return None;
    }
    Some(rt)
}

fn counter_text(rt: &Runtime, name: &str) -> String {
    let caps = rt.backend(&gpu()).unwrap().capabilities();
    caps.get(name).map(|v| v.to_string()).unwrap_or_default()
}

/// A GpuAcc counter from its capabilities (the public API's view of the backend).
fn counter(rt: &Runtime, name: &str) -> i64 {
    let caps = rt.backend(&gpu()).unwrap().capabilities();
    match caps.get(name) {
        Some(CapabilityValue::Int(n)) => *n,
        other => panic!("GpuAcc has no counter {name}: {other:?}"),
    }
}

/// x[3,7] -> Relu -> Mul(const) -> Sigmoid -> MatMul(const [7,5]) -> Tanh, with a host-only
/// layer (Hardmax) after the Sigmoid when `split`.
fn chain(split: bool) -> (Network, Tensor) {
    let mut r = Rng::new(29);
    let x = r.tensor(DataType::F32, &[3, 7], -2.0, 2.0).unwrap();
    let scale = r.tensor(DataType::F32, &[7], -2.0, 2.0).unwrap();
    let w = r.tensor(DataType::F32, &[7, 5], -1.0, 1.0).unwrap();
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let si = net.add_constant("scale", scale).unwrap();
    let wi = net.add_constant("w", w).unwrap();
    let a = net
        .add_layer("relu", Op::Unary(UnaryOp::Relu), &[xi])
        .unwrap()[0];
    let b = net
        .add_layer("mul", Op::Binary(BinaryOp::Mul), &[a, si])
        .unwrap()[0];
    let mut c = net
        .add_layer("sigmoid", Op::Unary(UnaryOp::Sigmoid), &[b])
        .unwrap()[0];
    if split {
        c = net
            .add_layer("hardmax", Op::Hardmax { axis: 1 }, &[c])
            .unwrap()[0];
    }
    let d = net.add_layer("matmul", Op::MatMul, &[c, wi]).unwrap()[0];
    let e = net
        .add_layer("tanh", Op::Unary(UnaryOp::Tanh), &[d])
        .unwrap()[0];
    net.mark_output(e).unwrap();
    (net, x)
}

/// Load `net` with this backend preference and execute it `runs` times; answers the outputs
/// of the last execution and the GpuAcc submits each execution made.
fn execute(
    rt: &Runtime,
    net: &Network,
    x: &Tensor,
    preference: Vec<BackendId>,
    runs: usize,
) -> (Vec<Tensor>, Vec<i64>) {
    let optimized = rt
        .optimize(net, &OptimizerOptions::new(preference))
        .unwrap();
    let id = rt.load_network(optimized).unwrap();
    let mut submits = Vec::new();
    let mut last = Vec::new();
    for _ in 0..runs {
        let before = counter(rt, "Submits");
        let out = rt.execute(id, &[("x", x)]).unwrap();
        submits.push(counter(rt, "Submits") - before);
        last = out.into_iter().map(|(_, t)| t).collect();
    }
    rt.unload_network(id).unwrap();
    (last, submits)
}

fn assert_close(got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        backplane::compare::compare(g, w, 1e-4, 1e-5).unwrap_or_else(|m| panic!("{}", m.message));
    }
}

#[test]
fn a_run_of_gpu_layers_is_one_submit_per_execution() {
    let Some(rt) = runtime() else { return };
    let (net, x) = chain(false);
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    let layers_before = counter(&rt, "GpuLayerRuns");
    let (got, submits) = execute(&rt, &net, &x, vec![gpu()], 3);
    assert_close(&got, &want);
    assert_eq!(submits, vec![1, 1, 1], "submits per execution");
    // Three GPU layers per execution (the Sigmoid fuses into the Mul, the Tanh into the
    // MatMul), one command buffer.
    assert_eq!(counter(&rt, "GpuLayerRuns") - layers_before, 9);
}

/// `submit_every=N` cuts a long run of GPU layers into submits of N layers (the GPU starts
/// while the host records the rest), with the same results; 0 keeps one submit per run.
#[test]
fn submit_every_splits_a_long_run_into_submits_of_that_many_layers() {
    let (net, x) = chain(false);
    let Some(rt) = runtime() else { return };
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    // Three GPU layers (relu, mul+sigmoid, matmul+tanh): every 2 -> two submits (the second
    // at the output's read-back); every 3 -> one, at the third layer, which reads back
    // anyway; 1 -> one per layer.
    for (every, expected) in [("0", 1), ("1", 3), ("2", 2), ("3", 1), ("4", 1), ("9", 1)] {
        let Some(rt) = runtime_with(&[("submit_every", every)]) else {
            return;
        };
        let (got, submits) = execute(&rt, &net, &x, vec![gpu()], 2);
        assert_close(&got, &want);
        assert_eq!(submits, vec![expected, expected], "submit_every={every}");
        assert_eq!(counter(&rt, "PendingLayers"), 0);
    }
}

#[test]
fn a_host_layer_between_gpu_runs_adds_one_submit() {
    let Some(rt) = runtime() else { return };
    let (net, x) = chain(true);
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    let (got, submits) = execute(&rt, &net, &x, vec![gpu(), cpu_ref()], 2);
    assert_close(&got, &want);
    // relu, mul+sigmoid | Hardmax on CpuRef | matmul+tanh: two runs, two submits.
    assert_eq!(submits, vec![2, 2], "submits per execution");
}

#[test]
fn bind_groups_are_made_on_first_use_not_per_execution() {
    let Some(rt) = runtime() else { return };
    let (net, x) = chain(false);
    let optimized = rt
        .optimize(&net, &OptimizerOptions::new(vec![gpu()]))
        .unwrap();
    let id = rt.load_network(optimized).unwrap();
    rt.execute(id, &[("x", &x)]).unwrap();
    let after_first = counter(&rt, "BindGroups");
    for _ in 0..3 {
        rt.execute(id, &[("x", &x)]).unwrap();
    }
    let after_more = counter(&rt, "BindGroups");
    rt.unload_network(id).unwrap();
    assert!(after_first > 0);
    assert_eq!(
        after_more, after_first,
        "bind groups made again per execution"
    );
}

/// A GPU layer whose output nobody reads (no border, no network output) is still submitted
/// in the execution that ran it: the runtime's end-of-execution hook flushes it.
#[test]
fn an_execution_end_submits_work_no_border_submitted() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(31);
    let x = r.tensor(DataType::F32, &[5, 3], -2.0, 2.0).unwrap();
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let y = net
        .add_layer("relu", Op::Unary(UnaryOp::Relu), &[xi])
        .unwrap()[0];
    // Read by nobody, and after the output's layer: no border submits it.
    net.add_layer("unread", Op::Unary(UnaryOp::Neg), &[xi])
        .unwrap();
    net.mark_output(y).unwrap();
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    let before = counter(&rt, "GpuLayerRuns");
    let (got, submits) = execute(&rt, &net, &x, vec![gpu()], 2);
    assert_close(&got, &want);
    assert_eq!(
        counter(&rt, "GpuLayerRuns") - before,
        4,
        "both layers ran twice"
    );
    // The output's read-back, then the end of the execution: two submits each, nothing left.
    assert_eq!(submits, vec![2, 2], "submits per execution");
    assert_eq!(counter(&rt, "PendingLayers"), 0);
}

/// Profiling on an adapter with timestamp queries times each GPU layer on the device without
/// a submit per layer; with `timestamps=false` (or without them) each layer is submitted and
/// waited for, and the profiling note says which was used.
#[test]
fn profiling_uses_timestamp_queries_where_the_adapter_has_them() {
    let Some(rt) = runtime_with(&[("profile", "true")]) else {
        return;
    };
    let (net, x) = chain(false);
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    let (got, submits) = execute(&rt, &net, &x, vec![gpu()], 2);
    assert_close(&got, &want);
    let note = counter_text(&rt, "Profiling");
    let stamps = counter_text(&rt, "TimestampQuery") == "true";
    println!("TimestampQuery={stamps}: {note}");
    if stamps {
        assert_eq!(submits, vec![1, 1], "timestamps need no submit per layer");
        assert!(note.contains("timestamp queries"), "{note}");
        let times = note
            .split("GPU ms per layer of the last execution: ")
            .nth(1)
            .unwrap_or_else(|| panic!("no layer times: {note}"));
        // relu, the fused mul+sigmoid and matmul+tanh, each with a time.
        let entries: Vec<&str> = times.split(", ").collect();
        assert_eq!(entries.len(), 3, "{note}");
        for (entry, layer) in entries.iter().zip(["relu", "mul+sigmoid", "matmul+tanh"]) {
            let (name, ms) = entry.split_once('=').unwrap();
            assert_eq!(name, layer);
            assert!(ms.parse::<f64>().unwrap() >= 0.0, "{entry}");
        }
    } else {
        assert_eq!(submits, vec![3, 3], "one submit per layer");
    }
    let Some(rt) = runtime_with(&[("profile", "true"), ("timestamps", "false")]) else {
        return;
    };
    let (_, submits) = execute(&rt, &net, &x, vec![gpu()], 1);
    assert_eq!(submits, vec![3], "host timing submits each layer");
    let note = counter_text(&rt, "Profiling");
    assert!(note.contains("host-side timing of the submit"), "{note}");
}

/// Weights reach the device once, when the network is loaded: an execution uploads only the
/// input that crosses the border (the runtime hands constants to GpuAcc through `MemImport`
/// layers, and the workload sees through them to the constant).
#[test]
fn weights_are_uploaded_at_load_not_per_execution() {
    let Some(rt) = runtime() else { return };
    let mut r = Rng::new(37);
    let x = r.tensor(DataType::F32, &[2, 64], -1.0, 1.0).unwrap();
    let w = r.tensor(DataType::F32, &[64, 96], -1.0, 1.0).unwrap();
    let mut net = Network::new();
    let xi = net.add_input("x", x.info().clone()).unwrap();
    let wi = net.add_constant("w", w).unwrap();
    let m = net.add_layer("matmul", Op::MatMul, &[xi, wi]).unwrap()[0];
    net.mark_output(m).unwrap();
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    let optimized = rt
        .optimize(&net, &OptimizerOptions::new(vec![gpu()]))
        .unwrap();
    let before_load = counter(&rt, "UploadedBytes");
    let id = rt.load_network(optimized).unwrap();
    let at_load = counter(&rt, "UploadedBytes") - before_load;
    let mut per_run = Vec::new();
    let mut got = Vec::new();
    for _ in 0..3 {
        let before = counter(&rt, "UploadedBytes");
        got = rt.execute(id, &[("x", &x)]).unwrap();
        per_run.push(counter(&rt, "UploadedBytes") - before);
    }
    rt.unload_network(id).unwrap();
    let got: Vec<Tensor> = got.into_iter().map(|(_, t)| t).collect();
    assert_close(&got, &want);
    let weight_bytes = 64 * 96 * 4;
    assert!(
        at_load >= weight_bytes,
        "weights uploaded at load: {at_load} bytes"
    );
    // The input (2 x 64 floats) and nothing of the weights.
    assert_eq!(per_run, vec![2 * 64 * 4; 3], "bytes uploaded per execution");
}

/// Eight threads each make a GpuAcc runtime, run a network on it and drop it, three times
/// over, all at once: every thread finishes with CpuRef's outputs. (NVIDIA's driver
/// deadlocked when devices were destroyed in parallel; GpuAcc now creates and destroys its
/// devices one at a time.)
#[test]
fn runtimes_made_and_dropped_in_parallel_threads_all_finish() {
    let Some(rt) = runtime() else { return };
    let (net, x) = chain(false);
    let (want, _) = execute(&rt, &net, &x, vec![cpu_ref()], 1);
    drop(rt);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (net, x, want) = (net.clone(), x.clone(), want.clone());
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let rt = runtime().unwrap();
                    let (got, _) = execute(&rt, &net, &x, vec![gpu(), cpu_ref()], 2);
                    assert_close(&got, &want);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

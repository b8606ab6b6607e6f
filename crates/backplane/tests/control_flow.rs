//! Control flow: If, Loop and Scan run by the builtin backend, their bodies optimized once at
//! load and partitioned across the application's backends like the main network.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane::core::ops::{BinaryOp, IfDesc, LoopDesc, ScanDesc, UnaryOp};
use backplane::core::Op;
use backplane::{
    npy, BackendId, DataType, ImportOptions, Network, OptimizerOptions, Runtime, Tensor, TensorInfo,
};
use std::sync::Arc;
use support::repo;

fn ids(names: &[&str]) -> Vec<BackendId> {
    names.iter().map(|n| BackendId::new(*n).unwrap()).collect()
}

fn loop_model() -> Network {
    backplane::load_onnx(
        &repo().join("testdata/control_flow/loop_mixed.onnx"),
        &ImportOptions::default(),
    )
    .unwrap()
}

fn run_loop(rt: &Runtime, backends: &[&str]) -> (Vec<(String, Tensor)>, backplane::NetworkId) {
    let opt = rt
        .optimize(&loop_model(), &OptimizerOptions::new(ids(backends)))
        .unwrap();
    let id = rt.load_network(opt).unwrap();
    let x = npy::read_file(&repo().join("testdata/control_flow/loop_mixed_x.npy")).unwrap();
    (rt.execute(id, &[("x", &x)]).unwrap(), id)
}

#[test]
fn loop_body_is_partitioned_across_backends_and_matches_cpu_ref() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let opt = rt
        .optimize(
            &loop_model(),
            &OptimizerOptions::new(ids(&["CpuAcc", "CpuRef"])),
        )
        .unwrap();
    // The Loop itself runs on the builtin backend; its body on both CPU backends.
    assert_eq!(
        opt.layer_counts(),
        vec![(BackendId::new("Builtin").unwrap(), 1)]
    );
    let [(0, bodies)] = opt.subgraphs() else {
        panic!(
            "one control-flow layer expected: {:?}",
            opt.subgraphs().len()
        )
    };
    let body = &bodies[0];
    let counts = body.layer_counts();
    let on = |b: &str| {
        counts
            .iter()
            .find(|(id, _)| id.as_str() == b)
            .map_or(0, |(_, n)| *n)
    };
    assert!(on("CpuAcc") >= 2, "MatMul/Add/Tanh on CpuAcc: {counts:?}");
    assert!(on("CpuRef") >= 1, "CumSum on CpuRef: {counts:?}");
    let cumsum = body
        .network()
        .layers()
        .iter()
        .position(|l| l.op.name() == "CumSum")
        .unwrap();
    assert_eq!(body.assignment()[cumsum].as_str(), "CpuRef");

    let (mixed, _) = run_loop(&rt, &["CpuAcc", "CpuRef"]);
    let (reference, _) = run_loop(&rt, &["CpuRef"]);
    assert_eq!(mixed.len(), 2);
    for ((name, got), (_, want)) in mixed.iter().zip(&reference) {
        support::compare(got, want, 1e-5, 1e-6).unwrap_or_else(|e| panic!("{name}: {e}"));
        // And against ONNX Runtime, which computed the expected files.
        let ort =
            npy::read_file(&repo().join(format!("testdata/control_flow/loop_mixed_{name}.npy")))
                .unwrap();
        support::compare(got, &ort, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{name} vs ORT: {e}"));
    }
    assert_eq!(mixed[1].1.shape().dims(), &[100, 2, 3]);
}

#[test]
fn loop_iterations_reuse_the_body_plan_and_memory() {
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let before = rt.networks_built();
    let (_, id) = run_loop(&rt, &["CpuAcc", "CpuRef"]);
    let loaded = rt.network(id).unwrap();
    // The main network and the body were planned once, at load.
    assert_eq!(rt.networks_built() - before, 2);
    let body = loaded.subgraphs()[0].1[0].clone();
    // 100 iterations: the body's working memory was allocated once.
    assert_eq!(body.working_memory_allocations(), 1);
    let x = npy::read_file(&repo().join("testdata/control_flow/loop_mixed_x.npy")).unwrap();
    for _ in 0..3 {
        rt.execute(id, &[("x", &x)]).unwrap();
    }
    assert_eq!(
        body.working_memory_allocations(),
        1,
        "no allocation after the first"
    );
    assert_eq!(
        rt.networks_built() - before,
        2,
        "no re-planning at execution"
    );
}

#[test]
fn a_loop_stops_at_the_iteration_limit() {
    let rt = backplane::RuntimeBuilder::new()
        .max_loop_iterations(10)
        .build()
        .unwrap();
    let opt = rt
        .optimize(&loop_model(), &OptimizerOptions::new(ids(&["CpuRef"])))
        .unwrap();
    let id = rt.load_network(opt).unwrap();
    let x = npy::read_file(&repo().join("testdata/control_flow/loop_mixed_x.npy")).unwrap();
    let err = rt.execute(id, &[("x", &x)]).unwrap_err().to_string();
    assert!(err.contains("iteration limit (10)"), "{err}");
    assert!(
        err.contains("Builtin") && err.contains("loop"),
        "names backend and layer: {err}"
    );
}

fn f32_info(dims: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::F32, dims.to_vec())
}

/// A body `x -> op(x)` over a captured input of `dims`.
fn unary_body(op: Op, dims: &[usize]) -> Arc<Network> {
    let mut n = Network::new();
    let x = n.add_input("x", f32_info(dims)).unwrap();
    let y = n.add_layer("f", op, &[x]).unwrap();
    n.mark_output(y[0]).unwrap();
    Arc::new(n)
}

/// A Loop body's first inputs (iteration number, condition) and first output (the
/// condition, passed through).
fn loop_counters(body: &mut Network) {
    body.add_input("i", TensorInfo::new(DataType::I64, vec![]))
        .unwrap();
    let c = body
        .add_input("c", TensorInfo::new(DataType::Bool, vec![]))
        .unwrap();
    let keep = body.add_layer("keep", Op::Identity, &[c]).unwrap();
    body.mark_output(keep[0]).unwrap();
}

/// A true bool scalar.
fn yes() -> Tensor {
    Tensor::from_bools(Vec::<usize>::new(), &[true]).unwrap()
}

#[test]
fn if_runs_the_branch_its_condition_picks_at_run_time() {
    let mut n = Network::new();
    let cond = n
        .add_input("cond", TensorInfo::new(DataType::Bool, vec![]))
        .unwrap();
    let x = n.add_input("x", f32_info(&[4])).unwrap();
    let op = Op::If(IfDesc {
        then_branch: unary_body(Op::Unary(UnaryOp::Neg), &[4]),
        else_branch: unary_body(Op::Unary(UnaryOp::Relu), &[4]),
    });
    let y = n.add_layer("if", op, &[cond, x]).unwrap();
    n.mark_output(y[0]).unwrap();
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let id = rt
        .load_network(
            rt.optimize(&n, &OptimizerOptions::new(ids(&["CpuAcc", "CpuRef"])))
                .unwrap(),
        )
        .unwrap();
    let xv = Tensor::from_vec(vec![4], vec![-1.0f32, 2.0, -3.0, 4.0]).unwrap();
    for (c, want) in [
        (true, [1.0f32, -2.0, 3.0, -4.0]),
        (false, [0.0, 2.0, 0.0, 4.0]),
    ] {
        let cv = Tensor::from_bools(Vec::<usize>::new(), &[c]).unwrap();
        let out = rt.execute(id, &[("cond", &cv), ("x", &xv)]).unwrap();
        assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &want, "cond {c}");
    }
}

#[test]
fn scan_runs_reversed_along_an_inner_axis_and_nests_a_loop() {
    // Scan over axis 1 of x [2, 3], reversed: state s [2] += column; outputs the running
    // sums stacked along axis 0. The body's addition runs inside a one-iteration Loop, to
    // show nesting.
    let mut inner = Network::new();
    loop_counters(&mut inner);
    let acc = inner.add_input("acc", f32_info(&[2])).unwrap();
    let col = inner.add_input("col", f32_info(&[2])).unwrap();
    let sum = inner
        .add_layer("add", Op::Binary(BinaryOp::Add), &[acc, col])
        .unwrap();
    inner.mark_output(sum[0]).unwrap();

    let mut body = Network::new();
    let s = body.add_input("s", f32_info(&[2])).unwrap();
    let col = body.add_input("col", f32_info(&[2])).unwrap();
    let one = body.add_constant("one", Tensor::scalar(1i64)).unwrap();
    let yes = body.add_constant("yes", yes()).unwrap();
    let looped = body
        .add_layer(
            "once",
            Op::Loop(LoopDesc {
                body: Arc::new(inner),
                num_carried: 1,
                scan_length: 0,
            }),
            &[one, yes, s, col],
        )
        .unwrap();
    let copy = body.add_layer("out", Op::Identity, &[looped[0]]).unwrap();
    body.mark_output(looped[0]).unwrap();
    body.mark_output(copy[0]).unwrap();

    let mut n = Network::new();
    let s0 = n.add_input("s0", f32_info(&[2])).unwrap();
    let x = n.add_input("x", f32_info(&[2, 3])).unwrap();
    let outs = n
        .add_layer(
            "scan",
            Op::Scan(ScanDesc {
                body: Arc::new(body),
                num_state: 1,
                num_scan_inputs: 1,
                input_axes: vec![1],
                input_reverse: vec![true],
                output_axes: vec![0],
                output_reverse: vec![false],
                batched: false,
            }),
            &[s0, x],
        )
        .unwrap();
    n.mark_output(outs[0]).unwrap();
    n.mark_output(outs[1]).unwrap();
    assert_eq!(n.tensor(outs[1]).info.shape.dims(), &[3, 2]);

    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let id = rt
        .load_network(
            rt.optimize(&n, &OptimizerOptions::new(ids(&["CpuRef"])))
                .unwrap(),
        )
        .unwrap();
    let s0 = Tensor::from_vec(vec![2], vec![0.0f32, 100.0]).unwrap();
    let x = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0]).unwrap();
    let out = rt.execute(id, &[("s0", &s0), ("x", &x)]).unwrap();
    // Columns read from the end: [3, 30], then [2, 20], then [1, 10].
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &[6.0, 160.0]);
    assert_eq!(
        out[1].1.as_slice::<f32>().unwrap(),
        &[3.0, 130.0, 5.0, 150.0, 6.0, 160.0]
    );
}

#[test]
fn bodies_are_checked_when_the_layer_is_added() {
    let mut n = Network::new();
    let cond = n
        .add_input("cond", TensorInfo::new(DataType::Bool, vec![]))
        .unwrap();
    let x = n.add_input("x", f32_info(&[4])).unwrap();
    // Branches that disagree on shape.
    let op = Op::If(IfDesc {
        then_branch: unary_body(Op::Unary(UnaryOp::Neg), &[4]),
        else_branch: unary_body(Op::Reshape { shape: vec![2, 2] }, &[4]),
    });
    let err = n.add_layer("if", op, &[cond, x]).unwrap_err().to_string();
    assert!(err.contains("different outputs"), "{err}");
    // A body that takes other inputs than the layer passes.
    let op = Op::If(IfDesc {
        then_branch: unary_body(Op::Unary(UnaryOp::Neg), &[3]),
        else_branch: unary_body(Op::Unary(UnaryOp::Neg), &[3]),
    });
    let err = n.add_layer("if2", op, &[cond, x]).unwrap_err().to_string();
    assert!(err.contains("then branch"), "{err}");
}

#[test]
fn onnx_if_with_captured_value_and_reversed_scan_match_onnx_runtime() {
    let network = backplane::load_onnx(
        &repo().join("testdata/control_flow/if_scan.onnx"),
        &ImportOptions::default(),
    )
    .unwrap();
    // The If reads x from the outer graph: x is captured as an extra input of the layer.
    let if_layer = network
        .layers()
        .iter()
        .find(|l| l.op.name() == "If")
        .unwrap();
    assert_eq!(if_layer.inputs.len(), 2, "cond and the captured x");
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let id = rt
        .load_network(
            rt.optimize(&network, &OptimizerOptions::new(ids(&["CpuAcc", "CpuRef"])))
                .unwrap(),
        )
        .unwrap();
    let x = npy::read_file(&repo().join("testdata/control_flow/if_scan_x.npy")).unwrap();
    for (c, tag) in [(true, "then"), (false, "else")] {
        let cond = Tensor::from_bools(Vec::<usize>::new(), &[c]).unwrap();
        let out = rt.execute(id, &[("cond", &cond), ("x", &x)]).unwrap();
        for (name, got) in &out {
            let want = npy::read_file(
                &repo().join(format!("testdata/control_flow/if_scan_{tag}_{name}.npy")),
            )
            .unwrap();
            support::compare(got, &want, 1e-5, 1e-6)
                .unwrap_or_else(|e| panic!("{tag} {name}: {e}"));
        }
    }
}

/// Sequences are import-time structure: SplitToSequence, SequenceMap, a Loop carrying a
/// sequence and ConcatFromSequence leave plain layers (no Loop), the sequence output is
/// flattened into `parts[0]`..`parts[2]`, and every output matches ONNX Runtime.
#[test]
fn onnx_sequence_model_matches_onnx_runtime() {
    let network = backplane::load_onnx(
        &repo().join("testdata/control_flow/sequences.onnx"),
        &ImportOptions::default(),
    )
    .unwrap();
    assert!(
        network.layers().iter().all(|l| l.op.name() != "Loop"),
        "the Loop is unrolled"
    );
    let rt = backplane::RuntimeBuilder::new().build().unwrap();
    let x = npy::read_file(&repo().join("testdata/control_flow/sequences_x.npy")).unwrap();
    for backends in [&["CpuRef"][..], &["CpuAcc", "CpuRef"]] {
        let opt = rt
            .optimize(&network, &OptimizerOptions::new(ids(backends)))
            .unwrap();
        let id = rt.load_network(opt).unwrap();
        let out = rt.execute(id, &[("x", &x)]).unwrap();
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["y", "parts[0]", "parts[1]", "parts[2]", "n"]);
        for (name, got) in &out {
            let file = name.replace('[', "_").replace(']', "");
            let want =
                npy::read_file(&repo().join(format!("testdata/control_flow/sequences_{file}.npy")))
                    .unwrap();
            support::compare(got, &want, 1e-5, 1e-6)
                .unwrap_or_else(|e| panic!("{backends:?} {name}: {e}"));
        }
        rt.unload_network(id).unwrap();
    }
}

#[test]
fn an_execution_past_its_time_limit_stops_and_the_runtime_keeps_working() {
    // A while-loop that never ends on its own: no trip count, the condition passed through.
    let mut body = Network::new();
    loop_counters(&mut body);
    let x = body.add_input("x", f32_info(&[1])).unwrap();
    let x_out = body
        .add_layer("next", Op::Unary(UnaryOp::Neg), &[x])
        .unwrap();
    body.mark_output(x_out[0]).unwrap();
    let mut n = Network::new();
    let x = n.add_input("x", f32_info(&[1])).unwrap();
    let trips = n.add_constant("m", Tensor::scalar(i64::MAX)).unwrap();
    let yes = n.add_constant("yes", yes()).unwrap();
    let y = n
        .add_layer(
            "forever",
            Op::Loop(LoopDesc {
                body: Arc::new(body),
                num_carried: 1,
                scan_length: 0,
            }),
            &[trips, yes, x],
        )
        .unwrap();
    n.mark_output(y[0]).unwrap();

    let rt = backplane::RuntimeBuilder::new()
        .max_execution_time(std::time::Duration::from_millis(50))
        .build()
        .unwrap();
    let cpu = OptimizerOptions::new(ids(&["CpuRef"]));
    let id = rt.load_network(rt.optimize(&n, &cpu).unwrap()).unwrap();
    let xv = Tensor::from_vec(vec![1], vec![1.0f32]).unwrap();
    let err = rt.execute(id, &[("x", &xv)]).unwrap_err().to_string();
    assert!(err.contains("time limit of 50ms"), "{err}");
    assert!(err.contains("forever"), "names the loop: {err}");
    // The runtime and the same network keep working: a short network runs.
    let mut short = Network::new();
    let a = short.add_input("a", f32_info(&[2])).unwrap();
    let b = short
        .add_layer("neg", Op::Unary(UnaryOp::Neg), &[a])
        .unwrap();
    short.mark_output(b[0]).unwrap();
    let sid = rt.load_network(rt.optimize(&short, &cpu).unwrap()).unwrap();
    let av = Tensor::from_vec(vec![2], vec![1.0f32, -2.0]).unwrap();
    let out = rt.execute(sid, &[("a", &av)]).unwrap();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &[-1.0, 2.0]);
}

/// A Loop of `outer` iterations whose body runs a Loop of `inner` iterations, each negating
/// a carried x [1].
fn nested_loops(outer: i64, inner: i64) -> Network {
    let mut inner_body = Network::new();
    loop_counters(&mut inner_body);
    let x = inner_body.add_input("x", f32_info(&[1])).unwrap();
    let y = inner_body
        .add_layer("neg", Op::Unary(UnaryOp::Neg), &[x])
        .unwrap();
    inner_body.mark_output(y[0]).unwrap();

    let mut outer_body = Network::new();
    loop_counters(&mut outer_body);
    let x = outer_body.add_input("x", f32_info(&[1])).unwrap();
    let m = outer_body.add_constant("m", Tensor::scalar(inner)).unwrap();
    let go = outer_body.add_constant("go", yes()).unwrap();
    let y = outer_body
        .add_layer(
            "inner",
            Op::Loop(LoopDesc {
                body: Arc::new(inner_body),
                num_carried: 1,
                scan_length: 0,
            }),
            &[m, go, x],
        )
        .unwrap();
    outer_body.mark_output(y[0]).unwrap();

    let mut n = Network::new();
    let x = n.add_input("x", f32_info(&[1])).unwrap();
    let m = n.add_constant("m", Tensor::scalar(outer)).unwrap();
    let go = n.add_constant("go", yes()).unwrap();
    let y = n
        .add_layer(
            "outer",
            Op::Loop(LoopDesc {
                body: Arc::new(outer_body),
                num_carried: 1,
                scan_length: 0,
            }),
            &[m, go, x],
        )
        .unwrap();
    n.mark_output(y[0]).unwrap();
    n
}

#[test]
fn nested_loops_share_one_iteration_budget() {
    let rt = backplane::RuntimeBuilder::new()
        .max_loop_iterations(50)
        .build()
        .unwrap();
    let cpu = OptimizerOptions::new(ids(&["CpuRef"]));
    let xv = Tensor::from_vec(vec![1], vec![1.0f32]).unwrap();
    // 4 x 10 = 40 iterations in all (with the outer ones, 44): within the budget.
    let id = rt
        .load_network(rt.optimize(&nested_loops(4, 10), &cpu).unwrap())
        .unwrap();
    let out = rt.execute(id, &[("x", &xv)]).unwrap();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &[1.0]);
    // Twice over, the budget starts afresh.
    assert!(rt.execute(id, &[("x", &xv)]).is_ok());
    // 10 x 10: each level under 50, 110 in all: stopped.
    let id = rt
        .load_network(rt.optimize(&nested_loops(10, 10), &cpu).unwrap())
        .unwrap();
    let err = rt.execute(id, &[("x", &xv)]).unwrap_err().to_string();
    assert!(err.contains("iteration limit (50)"), "{err}");
    assert!(err.contains("nested"), "{err}");
    // The runtime keeps working, and the budget is not left spent on this thread.
    let id = rt
        .load_network(rt.optimize(&nested_loops(4, 10), &cpu).unwrap())
        .unwrap();
    assert!(rt.execute(id, &[("x", &xv)]).is_ok());
}

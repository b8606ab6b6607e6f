//! Assignment, fallback, overrides, subgraph optimization, contexts and input checks, with
//! small mock backends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_backend_api::BackendId;
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo};
use backplane_runtime::*;
use common::{Log, Mock};

fn id(s: &str) -> BackendId {
    BackendId::new(s).unwrap()
}

/// y = relu(a + b) * a
fn network() -> Network {
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![2, 3]);
    let a = n.add_input("a", info.clone()).unwrap();
    let b = n.add_input("b", info).unwrap();
    let s = n
        .add_layer("add", Op::Binary(BinaryOp::Add), &[a, b])
        .unwrap()[0];
    let r = n.add_layer("relu", Op::Unary(UnaryOp::Relu), &[s]).unwrap()[0];
    let y = n
        .add_layer_named("mul", Op::Binary(BinaryOp::Mul), &[r, a], &["y".into()])
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

const EXPECTED: [f32; 6] = [1.5, 0.0, 0.0, 0.0, 30.0, 0.0];

fn runtime(mocks: Vec<Mock>) -> Runtime {
    let mut reg = BackendRegistry::new();
    for m in mocks {
        reg.register(id(m.id), m.factory()).unwrap();
    }
    Runtime::new(reg, RuntimeOptions::default()).unwrap()
}

fn run(rt: &Runtime, opts: &OptimizerOptions) -> (OptimizedNetwork, Vec<f32>) {
    let opt = rt.optimize(&network(), opts).unwrap();
    let nid = rt.load_network(opt.clone()).unwrap();
    let (a, b) = inputs();
    let out = rt.execute(nid, &[("a", &a), ("b", &b)]).unwrap();
    assert_eq!(out[0].0, "y");
    (opt, out[0].1.as_slice::<f32>().unwrap().to_vec())
}

fn backends_by_layer(opt: &OptimizedNetwork) -> Vec<(String, String)> {
    opt.network()
        .layers()
        .iter()
        .zip(opt.assignment())
        .map(|(l, b)| (l.name.clone(), b.to_string()))
        .collect()
}

#[test]
fn layers_go_to_the_first_preferred_backend_that_supports_them() {
    let log = Log::default();
    let rt = runtime(vec![
        Mock::new("Arith", &["Add", "Mul"], &log),
        Mock::new("Act", &["Relu", "Add"], &log),
    ]);
    let (opt, y) = run(&rt, &OptimizerOptions::new(vec![id("Arith"), id("Act")]));
    assert_eq!(y, EXPECTED);
    let mut got = backends_by_layer(&opt);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("add".into(), "Arith".into()),
            ("mul".into(), "Arith".into()),
            ("relu".into(), "Act".into())
        ]
    );
    // Act refused nothing; Arith refused relu, which is recorded.
    assert!(opt.report().refusals.iter().any(|(l, b, r)| l == "relu"
        && b.as_str() == "Arith"
        && r.contains("does not implement Relu")));
}

#[test]
fn per_layer_overrides_by_name_and_by_op_type_win() {
    let log = Log::default();
    let rt = runtime(vec![
        Mock::new("Arith", &["Add", "Mul"], &log),
        Mock::new("Act", &["Relu", "Add"], &log),
    ]);
    let mut opts = OptimizerOptions::new(vec![id("Arith"), id("Act")]);
    opts.layer_backends.push(("add".into(), id("Act")));
    let (opt, y) = run(&rt, &opts);
    assert_eq!(y, EXPECTED);
    assert!(backends_by_layer(&opt).contains(&("add".into(), "Act".into())));

    let mut opts = OptimizerOptions::new(vec![id("Arith"), id("Act")]);
    opts.layer_backends.push(("Add".into(), id("Act")));
    let (opt, _) = run(&rt, &opts);
    assert!(backends_by_layer(&opt).contains(&("add".into(), "Act".into())));

    // An override the backend cannot honour falls back to the preferences.
    let mut opts = OptimizerOptions::new(vec![id("Arith"), id("Act")]);
    opts.layer_backends.push(("mul".into(), id("Act")));
    let (opt, _) = run(&rt, &opts);
    assert!(backends_by_layer(&opt).contains(&("mul".into(), "Arith".into())));

    let mut opts = OptimizerOptions::new(vec![id("Arith")]);
    opts.layer_backends.push(("nosuchlayer".into(), id("Act")));
    let err = rt.optimize(&network(), &opts).unwrap_err();
    assert!(
        matches!(err, RuntimeError::UnknownOverride(ref k) if k == "nosuchlayer"),
        "{err}"
    );
}

#[test]
fn unsupported_layers_are_all_listed_with_every_backends_reason() {
    let log = Log::default();
    let rt = runtime(vec![
        Mock::new("OnlyAdd", &["Add"], &log),
        Mock::new("AlsoAdd", &["Add"], &log),
    ]);
    let err = rt
        .optimize(
            &network(),
            &OptimizerOptions::new(vec![id("OnlyAdd"), id("AlsoAdd")]),
        )
        .unwrap_err();
    let RuntimeError::UnsupportedLayers { layers, .. } = &err else {
        panic!("wrong error {err}")
    };
    let names: Vec<&str> = layers.iter().map(|l| l.layer.as_str()).collect();
    assert_eq!(names, vec!["relu", "mul"]);
    assert_eq!(layers[0].reasons.len(), 2);
    let msg = err.to_string();
    assert!(
        msg.contains("OnlyAdd does not implement Relu")
            && msg.contains("AlsoAdd does not implement Mul"),
        "{msg}"
    );
}

#[test]
fn unknown_backends_and_empty_preferences_are_errors() {
    let log = Log::default();
    let rt = runtime(vec![Mock::new("Arith", &["Add"], &log)]);
    let err = rt
        .optimize(&network(), &OptimizerOptions::new(vec![id("Nope")]))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("'Nope' is not registered (registered: Arith, Builtin)"),
        "{err}"
    );
    let err = rt
        .optimize(&network(), &OptimizerOptions::default())
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NoBackends));
}

#[test]
fn contexts_hear_load_and_unload_in_order_and_only_when_used() {
    let log = Log::default();
    let rt = runtime(vec![
        Mock::new("Arith", &["Add", "Mul"], &log),
        Mock::new("Act", &["Relu"], &log),
        Mock::new("Unused", &["Add", "Mul", "Relu"], &log),
    ]);
    let opt = rt
        .optimize(
            &network(),
            &OptimizerOptions::new(vec![id("Arith"), id("Act")]),
        )
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    rt.unload_network(nid).unwrap();
    let events: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| !e.contains("workload"))
        .cloned()
        .collect();
    let n = nid.0;
    assert_eq!(
        events,
        vec![
            format!("Arith: before load {n}"),
            format!("Act: before load {n}"),
            "Arith: acquire".to_string(),
            "Act: acquire".to_string(),
            format!("Arith: after load {n}"),
            format!("Act: after load {n}"),
            format!("Arith: before unload {n}"),
            format!("Act: before unload {n}"),
            "Arith: release".to_string(),
            "Act: release".to_string(),
            format!("Arith: after unload {n}"),
            format!("Act: after unload {n}"),
        ]
    );
    assert!(matches!(
        rt.execute(nid, &[]),
        Err(RuntimeError::UnknownNetwork(_))
    ));
}

/// Each execution's end reaches the contexts of the backends the network uses, once per
/// execution (plain, into the caller's tensors, profiled), a failed one included.
#[test]
fn contexts_hear_every_execution_end_once() {
    let log = Log::default();
    let rt = runtime(vec![
        Mock::new("Arith", &["Add", "Mul"], &log),
        Mock::new("Act", &["Relu"], &log),
        Mock::new("Unused", &["Add", "Mul", "Relu"], &log),
    ]);
    let opt = rt
        .optimize(
            &network(),
            &OptimizerOptions::new(vec![id("Arith"), id("Act")]),
        )
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    let (a, b) = inputs();
    let ended = |log: &Log| -> Vec<String> {
        log.lock()
            .unwrap()
            .iter()
            .filter(|e| e.contains("after execute"))
            .cloned()
            .collect()
    };
    rt.execute(nid, &[("a", &a), ("b", &b)]).unwrap();
    let n = nid.0;
    let once = vec![
        format!("Arith: after execute {n}"),
        format!("Act: after execute {n}"),
    ];
    assert_eq!(ended(&log), once);
    rt.execute_profiled(nid, &[("a", &a), ("b", &b)]).unwrap();
    let mut y = Tensor::zeros(TensorInfo::new(DataType::F32, vec![2, 3])).unwrap();
    rt.execute_into(nid, &[("a", &a), ("b", &b)], &mut [("y", &mut y)])
        .unwrap();
    // A missing input fails the execution; its end is still heard.
    assert!(rt.execute(nid, &[("a", &a)]).is_err());
    let four: Vec<String> = (0..4).flat_map(|_| once.iter().cloned()).collect();
    assert_eq!(ended(&log), four);
    rt.unload_network(nid).unwrap();
}

/// Every tensor the runtime keeps in its arena starts on a 64-byte boundary (the memory
/// plan's offsets are multiples of 64 from an arena start that is itself aligned: a large
/// allocation otherwise starts 16 bytes into a page, and kernels writing 64-byte strips then
/// share every cache line between two strips).
#[test]
fn arena_tensors_start_on_cache_lines() {
    let log = Log::default();
    let mut probe = Mock::new("Probe", &["Relu"], &log);
    probe.log_alignment = true;
    let rt = runtime(vec![probe]);
    // x → relu ×4 → y, with tensors large enough to come from mmap'd memory.
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![1, 70_001]);
    let mut t = n.add_input("x", info).unwrap();
    for i in 0..4 {
        t = n
            .add_layer(&format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[t])
            .unwrap()[0];
    }
    n.mark_output(t).unwrap();
    let nid = rt
        .load_network(
            rt.optimize(&n, &OptimizerOptions::new(vec![id("Probe")]))
                .unwrap(),
        )
        .unwrap();
    let x = Tensor::from_vec(vec![1, 70_001], vec![1.0f32; 70_001]).unwrap();
    rt.execute(nid, &[("x", &x)]).unwrap();
    let lines: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("align"))
        .cloned()
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    // relu0 reads the caller's input; relu0..relu2 write arena tensors that relu1..relu3
    // read (relu3's output may go straight to the caller).
    for (i, l) in lines.iter().enumerate() {
        if i < 3 {
            assert!(l.ends_with("output 0"), "{l}");
        }
        if i > 0 {
            assert!(l.contains("inputs [0]"), "{l}");
        }
    }
}

#[test]
fn substitutions_replace_layers_and_keep_results() {
    let log = Log::default();
    let mut fuser = Mock::new("Fuser", &["Add", "Relu", "Mul"], &log);
    fuser.fuse_add_relu = true;
    let rt = runtime(vec![fuser]);
    let (opt, y) = run(&rt, &OptimizerOptions::new(vec![id("Fuser")]));
    assert_eq!(y, EXPECTED);
    let names: Vec<&str> = opt
        .network()
        .layers()
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(names, vec!["add+relu", "mul"]);
    assert_eq!(opt.report().substitutions.len(), 1);
    assert_eq!(opt.report().substitutions[0].replaced, vec!["add", "relu"]);
    // Its record replays: the backend makes the same substitution again, on the replaced
    // layers alone.
    let record = opt.record();
    assert!(record.replayable);
    match rt
        .replay_optimization(
            &network(),
            &OptimizerOptions::new(vec![id("Fuser")]),
            &[&record],
        )
        .unwrap()
    {
        backplane_runtime::ReplayOutcome::Replayed(again) => {
            assert_eq!(again.record(), record);
            assert!(again.network() == opt.network());
        }
        backplane_runtime::ReplayOutcome::Refused(why) => panic!("refused: {why}"),
    }
}

#[test]
fn layers_a_backend_fails_in_optimize_go_to_the_next_backend() {
    let log = Log::default();
    let mut picky = Mock::new("Picky", &["Add", "Relu", "Mul"], &log);
    picky.fail_in_optimize = vec!["Relu"];
    let rt = runtime(vec![picky, Mock::new("Spare", &["Relu"], &log)]);
    let (opt, y) = run(&rt, &OptimizerOptions::new(vec![id("Picky"), id("Spare")]));
    assert_eq!(y, EXPECTED);
    assert!(backends_by_layer(&opt).contains(&("relu".into(), "Spare".into())));
    assert!(opt
        .report()
        .refusals
        .iter()
        .any(|(l, b, _)| l == "relu" && b.as_str() == "Picky"));
    // A layer re-assigned after optimize_subgraph rejected it: the decisions do not follow
    // from the support answers alone, so the record is not replayed.
    let record = opt.record();
    assert!(!record.replayable);
    let options = OptimizerOptions::new(vec![id("Picky"), id("Spare")]);
    assert!(matches!(
        rt.replay_optimization(&network(), &options, &[&record])
            .unwrap(),
        backplane_runtime::ReplayOutcome::Refused(_)
    ));

    // With nowhere else to go, the failed layer is reported unsupported.
    let mut picky = Mock::new("Picky", &["Add", "Relu", "Mul"], &log);
    picky.fail_in_optimize = vec!["Relu"];
    let rt = runtime(vec![picky]);
    let err = rt
        .optimize(&network(), &OptimizerOptions::new(vec![id("Picky")]))
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::UnsupportedLayers { .. }),
        "{err}"
    );
}

#[test]
fn bad_inputs_get_typed_errors() {
    let log = Log::default();
    let rt = runtime(vec![Mock::new("All", &["Add", "Relu", "Mul"], &log)]);
    let opt = rt
        .optimize(&network(), &OptimizerOptions::new(vec![id("All")]))
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    let (a, b) = inputs();
    let err = rt.execute(nid, &[("a", &a)]).unwrap_err();
    assert!(
        matches!(err, RuntimeError::MissingInput { ref name, .. } if name == "b"),
        "{err}"
    );
    let err = rt
        .execute(nid, &[("a", &a), ("b", &b), ("c", &b)])
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::UnknownInput { ref name, .. } if name == "c"),
        "{err}"
    );
    let err = rt.execute(nid, &[("a", &a), ("a", &b)]).unwrap_err();
    assert!(matches!(err, RuntimeError::DuplicateInput(_)), "{err}");
    let wrong_shape = Tensor::from_vec(vec![3, 2], vec![0.0f32; 6]).unwrap();
    let err = rt
        .execute(nid, &[("a", &a), ("b", &wrong_shape)])
        .unwrap_err();
    assert_eq!(err.to_string(), "input 'b' must be f32[2x3], got f32[3x2]");
    let wrong_type = Tensor::from_vec(vec![2, 3], vec![0i32; 6]).unwrap();
    let err = rt
        .execute(nid, &[("a", &wrong_type), ("b", &b)])
        .unwrap_err();
    assert!(matches!(err, RuntimeError::InputMismatch { .. }), "{err}");
    // The network still works afterwards.
    assert!(rt.execute(nid, &[("a", &a), ("b", &b)]).is_ok());
}

#[test]
fn failing_and_panicking_workloads_are_contained() {
    let log = Log::default();
    let mut bad = Mock::new("Bad", &["Add", "Relu", "Mul"], &log);
    bad.error_on = Some("Relu");
    let mut worse = Mock::new("Worse", &["Add", "Relu", "Mul"], &log);
    worse.panic_on = Some("Mul");
    let rt = runtime(vec![bad, worse]);
    let (a, b) = inputs();
    for (backend, layer) in [("Bad", "relu"), ("Worse", "mul")] {
        let opt = rt
            .optimize(&network(), &OptimizerOptions::new(vec![id(backend)]))
            .unwrap();
        let nid = rt.load_network(opt).unwrap();
        let err = rt.execute(nid, &[("a", &a), ("b", &b)]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(backend) && msg.contains(layer), "{msg}");
    }
}

#[test]
fn registry_rejects_duplicates() {
    let log = Log::default();
    let mut reg = BackendRegistry::new();
    reg.register(id("A"), Mock::new("A", &[], &log).factory())
        .unwrap();
    let err = reg
        .register(id("A"), Mock::new("A", &[], &log).factory())
        .unwrap_err();
    assert!(matches!(err, RuntimeError::DuplicateBackend(_)));
    reg.register(id("B"), Mock::new("NotB", &[], &log).factory())
        .unwrap();
    assert!(matches!(
        reg.create(&id("B")),
        Err(RuntimeError::BackendIdMismatch { .. })
    ));
    assert_eq!(reg.ids(), vec![id("A"), id("B")]);
    assert!(reg.unregister(&id("A")));
    assert!(!reg.is_registered(&id("A")));
}

#[test]
fn profiled_execution_times_every_workload_in_order() {
    let log = Log::default();
    let rt = runtime(vec![
        Mock::new("Arith", &["Add", "Mul"], &log),
        Mock::new("Act", &["Relu"], &log),
    ]);
    let opt = rt
        .optimize(
            &network(),
            &OptimizerOptions::new(vec![id("Arith"), id("Act")]),
        )
        .unwrap();
    let nid = rt.load_network(opt).unwrap();
    let (a, b) = inputs();
    let (out, timings) = rt.execute_profiled(nid, &[("a", &a), ("b", &b)]).unwrap();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), EXPECTED);
    let got: Vec<(&str, &str, &str)> = timings
        .iter()
        .map(|t| (t.layer.as_str(), t.op.as_str(), t.backend.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("add", "Add", "Arith"),
            ("relu", "Relu", "Act"),
            ("mul", "Mul", "Arith")
        ]
    );
    assert!(timings.windows(2).all(|w| w[0].start <= w[1].start));
}

//! A backend whose `optimize_subgraph` answers something invalid does not fail the network:
//! the optimizer leaves that run as it was (on the same backend, unfused), records why in
//! `OptimizationReport::rejected`, and still applies the other runs' valid answers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_backend_api::*;
use backplane_core::ops::{BinaryOp, CustomOp, UnaryOp};
use backplane_core::{DataType, Network, Op, Tensor, TensorInfo};
use backplane_runtime::{
    BackendRegistry, OptimizedNetwork, OptimizerOptions, Runtime, RuntimeOptions,
};
use common::{Log, Mock};
use std::sync::Arc;

/// What is wrong with the liar's answer. Each run it is asked about holds `add` + `relu`
/// (see [`network`]), which a correct answer replaces by one `AddRelu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lie {
    /// Two replacement layers with the same name.
    DuplicateNames,
    /// Every run's `AddRelu` has the same name: the first run's answer is valid alone, the
    /// second's clashes with it (as CpuAcc's channels-last regions once did).
    SameNameInEveryRun,
    /// The replacement computes the Relu's output with another shape.
    WrongShape,
    /// The replacement computes the Relu's output with another type.
    WrongType,
    /// A layer is both replaced and untouched.
    LayerTwice,
    /// The replacement is an op the backend's own layer support refuses.
    UnsupportedReplacement,
    /// The replacement reads the Add's output, which the replaced layers computed.
    ReadsReplacedTensor,
    /// Nothing computes the Relu's output, which a layer outside reads.
    DropsUsedTensor,
    /// Only the first run's answer is wrong (another shape); the second's is valid.
    FirstRunOnly,
}

/// A backend running Add and Relu (and `AddRelu`) like [`Mock`], whose `optimize_subgraph`
/// answers with its lie.
#[derive(Clone)]
struct Liar {
    inner: Mock,
    lie: Lie,
}

impl Liar {
    fn answer(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        let net = subgraph.network();
        let layers = subgraph.layers();
        let find = |op: Op| {
            layers
                .iter()
                .copied()
                .find(|&l| net.layer(l).op == op)
                .unwrap()
        };
        let add = find(Op::Binary(BinaryOp::Add));
        let relu = find(Op::Unary(UnaryOp::Relu));
        let (add_l, relu_l) = (net.layer(add), net.layer(relu));
        let relu_out = relu_l.outputs[0];
        let first_run = add_l.name == "add1";
        let mut info = net.tensor(relu_out).info.clone();
        match self.lie {
            Lie::WrongShape => info = TensorInfo::new(DataType::F32, vec![3, 2]),
            Lie::FirstRunOnly if first_run => info = TensorInfo::new(DataType::F32, vec![6]),
            Lie::WrongType => info = TensorInfo::new(DataType::I32, vec![2, 3]),
            _ => {}
        }
        let custom = |op_type: &str, info: TensorInfo| {
            Op::Custom(CustomOp {
                domain: "Liar".into(),
                op_type: op_type.into(),
                attributes: vec![],
                outputs: vec![info],
                payload: None,
            })
        };
        let op_type = if self.lie == Lie::UnsupportedReplacement {
            "Mystery"
        } else {
            "AddRelu"
        };
        let name = match self.lie {
            Lie::SameNameInEveryRun => "fused".to_string(),
            _ => format!("{}+{}", add_l.name, relu_l.name),
        };
        let mut inputs: Vec<ValueRef> = add_l
            .inputs
            .iter()
            .map(|t| ValueRef::Existing(*t))
            .collect();
        if self.lie == Lie::ReadsReplacedTensor {
            inputs[1] = ValueRef::Existing(add_l.outputs[0]);
        }
        let output = if self.lie == Lie::DropsUsedTensor {
            None
        } else {
            Some(relu_out)
        };
        let mut replacement = vec![ReplacementLayer {
            name: name.clone(),
            op: custom(op_type, info.clone()),
            inputs,
            outputs: vec![output],
        }];
        if self.lie == Lie::DuplicateNames {
            // relu(add_relu(a, b)): the right values, under one name twice.
            replacement[0].outputs = vec![None];
            replacement.push(ReplacementLayer {
                name,
                op: Op::Unary(UnaryOp::Relu),
                inputs: vec![ValueRef::Produced { layer: 0, slot: 0 }],
                outputs: vec![Some(relu_out)],
            });
        }
        OptimizationViews {
            substitutions: vec![Substitution {
                replaced: vec![add, relu],
                replacement,
            }],
            failed: Vec::new(),
            untouched: if self.lie == Lie::LayerTwice {
                vec![vec![relu]]
            } else {
                Vec::new()
            },
        }
    }
}

impl Backend for Liar {
    fn id(&self) -> BackendId {
        self.inner.id()
    }
    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        self.inner.layer_support()
    }
    fn create_workload_factory(
        &self,
        mm: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        self.inner.create_workload_factory(mm)
    }
    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        self.answer(subgraph)
    }
}

fn id(s: &str) -> BackendId {
    BackendId::new(s).unwrap()
}

/// y = relu2(relu1(a + b) · a + b), with the Mul on another backend than the rest, so the
/// liar is asked about two runs: [add1, relu1] and [add2, relu2].
fn network() -> Network {
    let mut n = Network::new();
    let info = TensorInfo::new(DataType::F32, vec![2, 3]);
    let a = n.add_input("a", info.clone()).unwrap();
    let b = n.add_input("b", info).unwrap();
    let s = n
        .add_layer("add1", Op::Binary(BinaryOp::Add), &[a, b])
        .unwrap()[0];
    let r = n
        .add_layer("relu1", Op::Unary(UnaryOp::Relu), &[s])
        .unwrap()[0];
    let m = n
        .add_layer("mul", Op::Binary(BinaryOp::Mul), &[r, a])
        .unwrap()[0];
    let s = n
        .add_layer("add2", Op::Binary(BinaryOp::Add), &[m, b])
        .unwrap()[0];
    let y = n
        .add_layer_named("relu2", Op::Unary(UnaryOp::Relu), &[s], &["y".into()])
        .unwrap()[0];
    n.mark_output(y).unwrap();
    n
}

fn runtime(lie: Lie) -> Runtime {
    let log = Log::default();
    let liar = Liar {
        inner: Mock::new("Liar", &["Add", "Relu"], &log),
        lie,
    };
    let mut reg = BackendRegistry::new();
    reg.register(
        id("Liar"),
        Arc::new(move || Box::new(liar.clone()) as Box<dyn Backend>),
    )
    .unwrap();
    let other = Mock::new("Other", &["Mul"], &log);
    reg.register(id("Other"), other.factory()).unwrap();
    Runtime::new(reg, RuntimeOptions::default()).unwrap()
}

/// Optimize, load and run the network; the output and the optimized network.
fn run(rt: &Runtime) -> (OptimizedNetwork, Vec<f32>) {
    let options = OptimizerOptions::new(vec![id("Liar"), id("Other")]);
    let opt = rt.optimize(&network(), &options).unwrap();
    let nid = rt.load_network(opt.clone()).unwrap();
    let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 3.0, -4.0, 5.0, 6.0]).unwrap();
    let b = Tensor::from_vec(vec![2, 3], vec![0.5f32, 1.0, -5.0, 1.0, 1.0, -7.0]).unwrap();
    let out = rt.execute(nid, &[("a", &a), ("b", &b)]).unwrap();
    let (av, bv) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
    let want: Vec<f32> = av
        .iter()
        .zip(bv)
        .map(|(&a, &b)| ((a + b).max(0.0) * a + b).max(0.0))
        .collect();
    let got = out[0].1.as_slice::<f32>().unwrap().to_vec();
    assert_eq!(got, want, "outputs");
    (opt, got)
}

/// (layer, op, backend) of every layer of the optimized network.
fn placed(opt: &OptimizedNetwork) -> Vec<(String, String, String)> {
    opt.network()
        .layers()
        .iter()
        .zip(opt.assignment())
        .map(|(l, b)| (l.name.clone(), l.op.name().to_string(), b.to_string()))
        .collect()
}

fn has(p: &[(String, String, String)], layer: &str, op: &str, backend: &str) -> bool {
    p.iter()
        .any(|(l, o, b)| l == layer && o == op && b == backend)
}

/// Each kind of invalid answer, in both runs: the network optimizes, loads and runs with
/// the liar's layers as they were (on the liar), and the report names the backend, the
/// run's layers and the reason.
#[test]
fn an_invalid_answer_leaves_its_run_untouched() {
    for (lie, why) in [
        (Lie::DuplicateNames, "used twice"),
        (Lie::WrongShape, "as f32[3x2] but it was f32[2x3]"),
        (Lie::WrongType, "but it was f32[2x3]"),
        (Lie::LayerTwice, "more than once"),
        (Lie::UnsupportedReplacement, "not supported by itself"),
        (
            Lie::ReadsReplacedTensor,
            "which the replaced layers computed",
        ),
        (Lie::DropsUsedTensor, "no replacement computes it"),
    ] {
        let rt = runtime(lie);
        let (opt, _) = run(&rt);
        let p = placed(&opt);
        for (layer, op) in [
            ("add1", "Add"),
            ("relu1", "Relu"),
            ("add2", "Add"),
            ("relu2", "Relu"),
        ] {
            assert!(has(&p, layer, op, "Liar"), "{lie:?}: {layer} in {p:?}");
        }
        assert!(has(&p, "mul", "Mul", "Other"), "{lie:?}: {p:?}");
        let report = opt.report();
        assert!(report.substitutions.is_empty(), "{lie:?}");
        let rejected = &report.rejected;
        assert_eq!(rejected.len(), 2, "{lie:?}: {rejected:?}");
        for (r, layers) in rejected.iter().zip([["add1", "relu1"], ["add2", "relu2"]]) {
            assert_eq!(r.backend, id("Liar"), "{lie:?}");
            assert_eq!(r.layers, layers, "{lie:?}");
            assert!(r.reason.contains(why), "{lie:?}: {}", r.reason);
        }
    }
}

/// Answers valid alone but clashing together (the same replacement name in two runs): the
/// first run's substitution applies, the second run stays as it was.
#[test]
fn answers_clashing_with_an_applied_one_are_left_untouched() {
    let rt = runtime(Lie::SameNameInEveryRun);
    let (opt, _) = run(&rt);
    let p = placed(&opt);
    assert!(has(&p, "fused", "AddRelu", "Liar"), "{p:?}");
    assert!(has(&p, "add2", "Add", "Liar"), "{p:?}");
    assert!(has(&p, "relu2", "Relu", "Liar"), "{p:?}");
    assert!(
        !p.iter().any(|(l, _, _)| l == "add1" || l == "relu1"),
        "{p:?}"
    );
    let report = opt.report();
    assert_eq!(report.substitutions.len(), 1);
    assert_eq!(report.substitutions[0].replaced, ["add1", "relu1"]);
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert_eq!(report.rejected[0].layers, ["add2", "relu2"]);
    assert!(
        report.rejected[0].reason.contains("'fused' is used twice"),
        "{}",
        report.rejected[0].reason
    );
}

/// One run's answer is invalid, the other's valid: the valid one still applies.
#[test]
fn valid_answers_apply_beside_an_invalid_one() {
    let rt = runtime(Lie::FirstRunOnly);
    let (opt, _) = run(&rt);
    let p = placed(&opt);
    assert!(has(&p, "add1", "Add", "Liar"), "{p:?}");
    assert!(has(&p, "relu1", "Relu", "Liar"), "{p:?}");
    assert!(has(&p, "add2+relu2", "AddRelu", "Liar"), "{p:?}");
    let report = opt.report();
    assert_eq!(report.substitutions.len(), 1);
    assert_eq!(report.substitutions[0].replaced, ["add2", "relu2"]);
    assert_eq!(report.rejected.len(), 1);
    assert_eq!(report.rejected[0].layers, ["add1", "relu1"]);
}

/// An optimization in which an answer was refused as invalid is not replayable: its record
/// says so, and replaying it is refused (the caller optimizes in full), whichever run lied.
#[test]
fn an_optimization_with_a_refused_answer_is_not_replayed() {
    for lie in [Lie::FirstRunOnly, Lie::SameNameInEveryRun, Lie::WrongShape] {
        let rt = runtime(lie);
        let (opt, _) = run(&rt);
        let record = opt.record();
        assert!(!record.replayable, "{lie:?}");
        let options = OptimizerOptions::new(vec![id("Liar"), id("Other")]);
        match rt
            .replay_optimization(&network(), &options, &[&record])
            .unwrap()
        {
            backplane_runtime::ReplayOutcome::Refused(why) => {
                assert!(why.contains("optimize_subgraph"), "{lie:?}: {why}")
            }
            backplane_runtime::ReplayOutcome::Replayed(_) => panic!("{lie:?}: replayed"),
        }
    }
}

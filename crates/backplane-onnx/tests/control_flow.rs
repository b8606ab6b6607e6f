//! Control-flow nodes: graph attributes become nested networks with captured outer values;
//! known conditions inline their branch; what fixes a shape must be known at import.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::{DataType, Op};
use backplane_onnx::proto::attribute_proto::AttributeType;
use backplane_onnx::proto::{AttributeProto, GraphProto, NodeProto, ValueInfoProto};
use backplane_onnx::OnnxError;
use common::*;

fn a_graph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

fn graph(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: &[&str]) -> GraphProto {
    GraphProto {
        name: Some("body".into()),
        node: nodes,
        input: inputs,
        output: outputs.iter().map(|o| output(o)).collect(),
        ..Default::default()
    }
}

fn bool_input(name: &str) -> ValueInfoProto {
    value_info(name, 9, Some(&[]))
}

fn if_model(cond_known: bool) -> Model {
    let then_g = graph(vec![node("Relu", &["x"], &["t"], vec![])], vec![], &["t"]);
    let else_g = graph(vec![node("Neg", &["x"], &["e"], vec![])], vec![], &["e"]);
    let m = Model::new(13).input(input("x", &[2, 3]));
    let m = if cond_known {
        m.init(backplane_onnx::proto::TensorProto {
            name: Some("c".into()),
            data_type: Some(9),
            int32_data: vec![0],
            dims: vec![],
            ..Default::default()
        })
    } else {
        m.input(bool_input("c"))
    };
    m.node(named(
        node(
            "If",
            &["c"],
            &["y"],
            vec![
                a_graph("then_branch", then_g),
                a_graph("else_branch", else_g),
            ],
        ),
        "if",
    ))
    .output("y")
}

#[test]
fn if_captures_outer_values_as_inputs() {
    let net = if_model(false).ok();
    let layer = only_layer(&net);
    let Op::If(d) = &layer.op else {
        panic!("{:?}", layer.op)
    };
    // cond, then the captured x; each branch takes x.
    assert_eq!(input_names(&net, layer), vec!["c", "x"]);
    assert_eq!(d.then_branch.inputs().len(), 1);
    assert_eq!(d.else_branch.layers()[0].op.name(), "Neg");
    assert_eq!(dims(&net, "y"), vec![2, 3]);
}

#[test]
fn if_with_a_known_condition_becomes_its_branch() {
    let net = if_model(true).ok();
    let names = ops(&net);
    assert!(names.contains(&"Neg".to_string()), "{names:?}");
    assert!(!names.iter().any(|o| o == "If" || o == "Relu"), "{names:?}");
    assert!(
        net.find_tensor("y").is_some(),
        "the node's output name is kept"
    );
}

fn loop_body(with_scan: bool) -> GraphProto {
    let mut outs = vec!["c_out", "acc_out"];
    if with_scan {
        outs.push("acc_scan");
    }
    let mut nodes = vec![
        node("Identity", &["c_in"], &["c_out"], vec![]),
        node("Add", &["acc_in", "x"], &["acc_out"], vec![]),
    ];
    if with_scan {
        nodes.push(node("Identity", &["acc_out"], &["acc_scan"], vec![]));
    }
    graph(
        nodes,
        vec![
            value_info("i", INT64, Some(&[])),
            bool_input("c_in"),
            value_info("acc_in", FLOAT, None),
        ],
        &outs,
    )
}

#[test]
fn loop_scan_outputs_need_the_trip_count_at_import() {
    let m = Model::new(13)
        .input(input("x", &[3]))
        .input(value_info("n", INT64, Some(&[])))
        .init(zeros("acc0", &[3]))
        .node(named(
            node(
                "Loop",
                &["n", "", "acc0"],
                &["acc", "accs"],
                vec![a_graph("body", loop_body(true))],
            ),
            "loop",
        ))
        .output("acc")
        .output("accs");
    match m.import().unwrap_err() {
        OnnxError::NeedsInputValues { inputs, .. } => assert_eq!(inputs, vec!["n"]),
        e => panic!("{e}"),
    }
    // With a known trip count the scan output has that length.
    let m = Model::new(13)
        .input(input("x", &[3]))
        .init(ints("n", &[4]))
        .init(zeros("acc0", &[3]))
        .node(named(
            node(
                "Loop",
                &["n", "", "acc0"],
                &["acc", "accs"],
                vec![a_graph("body", loop_body(true))],
            ),
            "loop",
        ))
        .output("acc")
        .output("accs");
    let net = m.ok();
    assert_eq!(dims(&net, "accs"), vec![4, 3]);
    let Op::Loop(d) = only_op(&net) else { panic!() };
    assert_eq!((d.num_carried, d.scan_length), (1, 4));
}

#[test]
fn a_while_loop_without_scan_outputs_needs_nothing_at_import() {
    let m = Model::new(13)
        .input(input("x", &[3]))
        .input(bool_input("go"))
        .init(zeros("acc0", &[3]))
        .node(named(
            node(
                "Loop",
                &["", "go", "acc0"],
                &["acc"],
                vec![a_graph("body", loop_body(false))],
            ),
            "loop",
        ))
        .output("acc");
    let net = m.ok();
    let layer = only_layer(&net);
    // trip count (i64::MAX when absent), condition, carried, captured x.
    assert_eq!(layer.inputs.len(), 4);
    assert_eq!(net.tensor(layer.inputs[0]).info.dtype, DataType::I64);
}

#[test]
fn malformed_control_flow_is_an_error_not_a_panic() {
    // Missing body.
    let m = Model::new(13)
        .input(input("x", &[3]))
        .node(node("Loop", &["", "", "x"], &["y"], vec![]))
        .output("y");
    assert!(m.import().unwrap_err().to_string().contains("body"));
    // Scan without inputs.
    let m = Model::new(13)
        .node(node(
            "Scan",
            &[],
            &["y"],
            vec![
                a_int("num_scan_inputs", 1),
                a_graph("body", loop_body(false)),
            ],
        ))
        .output("y");
    assert!(m.import().is_err());
    // A branch that reads a name nobody defines.
    let then_g = graph(
        vec![node("Relu", &["ghost"], &["t"], vec![])],
        vec![],
        &["t"],
    );
    let m = Model::new(13)
        .input(bool_input("c"))
        .node(node(
            "If",
            &["c"],
            &["y"],
            vec![
                a_graph("then_branch", then_g.clone()),
                a_graph("else_branch", then_g),
            ],
        ))
        .output("y");
    let err = m.import().unwrap_err().to_string();
    assert!(err.contains("ghost"), "{err}");
    // A body that declares the wrong number of inputs.
    let bad_body = graph(vec![], vec![bool_input("only")], &["only"]);
    let m = Model::new(13)
        .input(input("x", &[3]))
        .node(node(
            "Loop",
            &["", "", "x"],
            &["y"],
            vec![a_graph("body", bad_body)],
        ))
        .output("y");
    assert!(m.import().is_err());
}

/// Where an If's condition comes from.
#[derive(Clone, Copy)]
enum Cond {
    /// An initializer with this value.
    Known(bool),
    /// The graph input `c`.
    Input,
    /// `Not` of a constant `false`, left to run time (no evaluator folds it).
    FromConstants,
}

fn bool_init(name: &str, v: bool) -> backplane_onnx::proto::TensorProto {
    backplane_onnx::proto::TensorProto {
        name: Some(name.into()),
        data_type: Some(9),
        int32_data: vec![i32::from(v)],
        dims: vec![],
        ..Default::default()
    }
}

/// An If whose then branch is `y = Relu(x)` and whose else branch does not fit the input (a
/// MatMul of x [2, 3] by w [4, 5], as a path meant for another input kind).
fn if_with_a_broken_else(cond: Cond) -> Model {
    let then_g = graph(vec![node("Relu", &["x"], &["t"], vec![])], vec![], &["t"]);
    let else_g = graph(
        vec![named(node("MatMul", &["x", "w"], &["e"], vec![]), "mm")],
        vec![],
        &["e"],
    );
    let m = Model::new(13)
        .input(input("x", &[2, 3]))
        .init(zeros("w", &[4, 5]));
    let m = match cond {
        Cond::Known(v) => m.init(bool_init("c", v)),
        Cond::Input => m.input(bool_input("c")),
        Cond::FromConstants => {
            m.init(bool_init("f", false))
                .node(node("Not", &["f"], &["c"], vec![]))
        }
    };
    m.node(named(
        node(
            "If",
            &["c"],
            &["y"],
            vec![
                a_graph("then_branch", then_g),
                a_graph("else_branch", else_g),
            ],
        ),
        "if",
    ))
    .output("y")
}

const X: [f32; 6] = [-1.0, 2.0, -3.0, 4.0, 0.5, -0.5];

/// Import with `x` bound to [`X`] (and `extra` values), everything folded by CpuRef's
/// evaluator: the network's output is the model's result.
fn run_folded(m: Model, extra: &[(&str, backplane_core::Tensor)]) -> Vec<f32> {
    let x = backplane_core::Tensor::from_vec(vec![2, 3], X.to_vec()).unwrap();
    let mut options = backplane_onnx::ImportOptions::default()
        .with_evaluator(std::sync::Arc::new(backplane_cpu_ref::CpuRefEvaluator))
        .with_input_value("x", std::sync::Arc::new(x));
    for (n, t) in extra {
        options = options.with_input_value(*n, std::sync::Arc::new(t.clone()));
    }
    let net = m.import_with(&options).unwrap();
    let y = net.tensor(net.outputs()[0]);
    y.constant().unwrap().as_slice::<f32>().unwrap().to_vec()
}

fn relu_of_x() -> Vec<f32> {
    X.iter().map(|v| v.max(0.0)).collect()
}

#[test]
fn an_untaken_branch_that_does_not_fit_is_never_imported() {
    let net = if_with_a_broken_else(Cond::Known(true)).ok();
    // The branch's Relu, and an Identity that gives its output the node's output name.
    assert_eq!(ops(&net), vec!["Relu", "Identity"]);
    assert_eq!(dims(&net, "y"), vec![2, 3]);
    assert_eq!(
        run_folded(if_with_a_broken_else(Cond::Known(true)), &[]),
        relu_of_x()
    );
}

#[test]
fn a_taken_branch_that_does_not_fit_names_the_if_and_the_node() {
    let err = if_with_a_broken_else(Cond::Known(false))
        .import()
        .unwrap_err();
    match &err {
        OnnxError::Core { node, .. } => assert_eq!(node, "if/else branch/mm"),
        e => panic!("{e}"),
    }
}

#[test]
fn a_branch_that_does_not_fit_needs_the_condition_at_import() {
    let err = if_with_a_broken_else(Cond::Input).import().unwrap_err();
    match &err {
        OnnxError::NeedsInputValues { inputs, nodes } => {
            assert_eq!(inputs, &["c"]);
            assert_eq!(nodes[0].node, "if");
            assert!(nodes[0].reason.contains("else branch"), "{err}");
            assert!(nodes[0].reason.contains("mm"), "{err}");
        }
        e => panic!("{e}"),
    }
    // Specialized on a condition that takes the then branch, the model imports and runs.
    let bytes = if_with_a_broken_else(Cond::Input).bytes();
    let yes = backplane_core::Tensor::from_bools(Vec::<usize>::new(), &[true]).unwrap();
    let (net, bound) = backplane_onnx::import_specialized(
        &bytes,
        None,
        &backplane_onnx::ImportOptions::default(),
        &[("c".to_string(), yes.clone())],
    )
    .unwrap();
    assert_eq!(bound, ["c"]);
    assert_eq!(ops(&net), vec!["Relu", "Identity"]);
    assert_eq!(input_names(&net, &net.layers()[0]), vec!["x"]);
    assert_eq!(
        run_folded(if_with_a_broken_else(Cond::Input), &[("c", yes)]),
        relu_of_x()
    );
    // On a condition that takes the broken branch, the error names the If and the node.
    let no = backplane_core::Tensor::from_bools(Vec::<usize>::new(), &[false]).unwrap();
    let err = backplane_onnx::import_specialized(
        &bytes,
        None,
        &backplane_onnx::ImportOptions::default(),
        &[("c".to_string(), no)],
    )
    .unwrap_err();
    assert!(
        matches!(&err, OnnxError::Core { node, .. } if node == "if/else branch/mm"),
        "{err}"
    );
}

#[test]
fn a_branch_that_does_not_fit_under_a_condition_of_no_input_is_its_own_error() {
    // The condition cannot be specialized: the branch's error stands, naming both nodes.
    let err = if_with_a_broken_else(Cond::FromConstants)
        .import()
        .unwrap_err();
    assert!(
        matches!(&err, OnnxError::Core { node, .. } if node == "if/else branch/mm"),
        "{err}"
    );
}

//! Sequences and optionals: import-time structure flattened into tensors at the graph's edges.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::Network;
use backplane_onnx::proto::attribute_proto::AttributeType;
use backplane_onnx::proto::{type_proto, AttributeProto, GraphProto, TypeProto, ValueInfoProto};
use backplane_onnx::{ImportOptions, InputStructure, OnnxError};
use common::*;

fn tensor_type(elem: i32) -> TypeProto {
    TypeProto {
        denotation: None,
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: None,
        })),
    }
}

fn sequence_of(elem: TypeProto) -> TypeProto {
    TypeProto {
        denotation: None,
        value: Some(type_proto::Value::SequenceType(Box::new(
            type_proto::Sequence {
                elem_type: Some(Box::new(elem)),
            },
        ))),
    }
}

fn optional_of(elem: TypeProto) -> TypeProto {
    TypeProto {
        denotation: None,
        value: Some(type_proto::Value::OptionalType(Box::new(
            type_proto::Optional {
                elem_type: Some(Box::new(elem)),
            },
        ))),
    }
}

fn typed(name: &str, ty: TypeProto) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(ty),
        ..Default::default()
    }
}

fn f32_sequence(name: &str) -> ValueInfoProto {
    typed(name, sequence_of(tensor_type(FLOAT)))
}

fn input_names_of(net: &Network) -> Vec<String> {
    net.inputs()
        .iter()
        .map(|t| net.tensor(*t).name.clone())
        .collect()
}

fn output_names_of(net: &Network) -> Vec<String> {
    net.outputs()
        .iter()
        .map(|t| net.tensor(*t).name.clone())
        .collect()
}

fn two_element_structure() -> InputStructure {
    InputStructure::Sequence(vec![
        InputStructure::Tensor(vec![2, 3]),
        InputStructure::Tensor(vec![4, 3]),
    ])
}

#[test]
fn a_sequence_input_becomes_one_input_per_element() {
    let options = ImportOptions::default().with_input_structure("xs", two_element_structure());
    let net = Model::new(17)
        .input(f32_sequence("xs"))
        .node(node(
            "ConcatFromSequence",
            &["xs"],
            &["y"],
            vec![a_int("axis", 0)],
        ))
        .output("y")
        .import_with(&options)
        .unwrap();
    assert_eq!(input_names_of(&net), vec!["xs[0]", "xs[1]"]);
    assert_eq!(ops(&net), vec!["Concat"]);
    assert_eq!(dims(&net, "y"), vec![6, 3]);
}

#[test]
fn a_sequence_input_needs_its_structure() {
    let err = Model::new(17)
        .input(f32_sequence("xs"))
        .node(node("SequenceLength", &["xs"], &["n"], vec![]))
        .output("n")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("input_structures"), "{err}");
}

#[test]
fn a_structure_that_contradicts_the_type_is_an_error() {
    let options =
        ImportOptions::default().with_input_structure("xs", InputStructure::Optional(None));
    let err = Model::new(17)
        .input(f32_sequence("xs"))
        .node(node("SequenceLength", &["xs"], &["n"], vec![]))
        .output("n")
        .import_with(&options)
        .unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
}

#[test]
fn split_insert_and_at_are_list_edits() {
    // Split 5 rows into 2+3, insert x itself at the front, take element -1 and the length.
    let net = Model::new(17)
        .input(input("x", &[5, 2]))
        .init(ints("split", &[2, 3]))
        .init(tensor_i64("front", &[], &[0]))
        .init(tensor_i64("last", &[], &[-1]))
        .node(node(
            "SplitToSequence",
            &["x", "split"],
            &["s"],
            vec![a_int("axis", 0)],
        ))
        .node(node(
            "SequenceInsert",
            &["s", "x", "front"],
            &["s2"],
            vec![],
        ))
        .node(node("SequenceAt", &["s2", "last"], &["y"], vec![]))
        .node(node("SequenceLength", &["s2"], &["n"], vec![]))
        .output("y")
        .output("n")
        .ok();
    assert_eq!(dims(&net, "y"), vec![3, 2]);
    assert_eq!(output_names_of(&net), vec!["y", "n"]);
    assert!(ops(&net).contains(&"Split".to_string()), "{:?}", ops(&net));
    let n = net.find_tensor("n").unwrap();
    assert_eq!(net.tensor(n).constant().unwrap().to_f64_vec(), vec![3.0]);
}

#[test]
fn split_to_sequence_without_split_can_drop_the_axis() {
    let net = Model::new(17)
        .input(input("x", &[3, 4]))
        .node(node(
            "SplitToSequence",
            &["x"],
            &["s"],
            vec![a_int("axis", 1), a_int("keepdims", 0)],
        ))
        .output("s")
        .ok();
    assert_eq!(output_names_of(&net), vec!["s[0]", "s[1]", "s[2]", "s[3]"]);
    assert_eq!(dims(&net, "s[2]"), vec![3]);
}

#[test]
fn a_position_out_of_range_is_an_error() {
    let err = Model::new(17)
        .input(input("x", &[2]))
        .init(tensor_i64("p", &[], &[3]))
        .node(node("SequenceConstruct", &["x", "x"], &["s"], vec![]))
        .node(node("SequenceAt", &["s", "p"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
}

#[test]
fn a_position_from_an_input_needs_its_value() {
    let err = Model::new(17)
        .input(input("x", &[2]))
        .input(value_info("p", 7, Some(&[])))
        .node(node("SequenceConstruct", &["x", "x"], &["s"], vec![]))
        .node(node("SequenceAt", &["s", "p"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    match err {
        OnnxError::NeedsInputValues { inputs, .. } => assert_eq!(inputs, vec!["p"]),
        e => panic!("{e}"),
    }
}

#[test]
fn optionals_are_known_at_import() {
    let empty = AttributeProto {
        name: Some("type".into()),
        r#type: Some(AttributeType::TypeProto as i32),
        tp: Some(tensor_type(FLOAT)),
        ..Default::default()
    };
    let net = Model::new(18)
        .input(input("x", &[2]))
        .node(node("Optional", &[], &["none"], vec![empty]))
        .node(node("Optional", &["x"], &["some"], vec![]))
        .node(node("OptionalHasElement", &["none"], &["has_none"], vec![]))
        .node(node("OptionalGetElement", &["some"], &["y"], vec![]))
        .output("has_none")
        .output("y")
        .output("none")
        .ok();
    // The empty optional output has no tensor.
    assert_eq!(output_names_of(&net), vec!["has_none", "y"]);
    let h = net.find_tensor("has_none").unwrap();
    assert_eq!(net.tensor(h).constant().unwrap().to_f64_vec(), vec![0.0]);
    assert_eq!(ops(&net), vec!["Identity"]);
}

#[test]
fn an_optional_input_holding_a_sequence() {
    let options = ImportOptions::default().with_input_structure(
        "o",
        InputStructure::Optional(Some(Box::new(two_element_structure()))),
    );
    let net = Model::new(18)
        .input(typed("o", optional_of(sequence_of(tensor_type(FLOAT)))))
        .node(node("OptionalGetElement", &["o"], &["s"], vec![]))
        .output("s")
        .import_with(&options)
        .unwrap();
    assert_eq!(input_names_of(&net), vec!["o[0]", "o[1]"]);
    assert_eq!(output_names_of(&net), vec!["s[0]", "s[1]"]);
}

fn a_graph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

#[test]
fn sequence_map_runs_its_body_per_element() {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![node("Relu", &["e"], &["r"], vec![])],
        input: vec![typed("e", tensor_type(FLOAT))],
        output: vec![output("r")],
        ..Default::default()
    };
    let options = ImportOptions::default().with_input_structure("xs", two_element_structure());
    let net = Model::new(17)
        .input(f32_sequence("xs"))
        .node(node(
            "SequenceMap",
            &["xs"],
            &["ys"],
            vec![a_graph("body", body)],
        ))
        .output("ys")
        .import_with(&options)
        .unwrap();
    assert_eq!(ops(&net), vec!["Relu", "Relu", "Identity", "Identity"]);
    assert_eq!(output_names_of(&net), vec!["ys[0]", "ys[1]"]);
    assert_eq!(dims(&net, "ys[1]"), vec![4, 3]);
}

fn loop_appending(trip: &str) -> Model {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("Identity", &["c"], &["c_out"], vec![]),
            node("Unsqueeze", &["i", "zero"], &["i1"], vec![]),
            node("SequenceInsert", &["s_in", "i1"], &["s_out"], vec![]),
        ],
        input: vec![
            value_info("i", 7, Some(&[])),
            value_info("c", 9, Some(&[])),
            f32_sequence("s_in"),
        ],
        output: vec![output("c_out"), output("s_out")],
        ..Default::default()
    };
    let empty = AttributeProto {
        name: Some("dtype".into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(7),
        ..Default::default()
    };
    Model::new(17)
        .init(ints("zero", &[0]))
        .node(node("SequenceEmpty", &[], &["s0"], vec![empty]))
        .node(node(
            "Loop",
            &[trip, "", "s0"],
            &["s"],
            vec![a_graph("body", body)],
        ))
        .node(node(
            "ConcatFromSequence",
            &["s"],
            &["y"],
            vec![a_int("axis", 0)],
        ))
        .output("y")
}

#[test]
fn a_loop_that_carries_a_sequence_is_unrolled() {
    let net = loop_appending("three")
        .init(tensor_i64("three", &[], &[3]))
        .ok();
    // No Loop layer remains: three iterations appended one element each.
    assert!(!ops(&net).contains(&"Loop".to_string()), "{:?}", ops(&net));
    assert_eq!(dims(&net, "y"), vec![3]);
}

#[test]
fn a_loop_that_carries_a_sequence_needs_its_trip_count() {
    let err = loop_appending("m")
        .input(value_info("m", 7, Some(&[])))
        .import()
        .unwrap_err();
    match err {
        OnnxError::NeedsInputValues { inputs, .. } => assert_eq!(inputs, vec!["m"]),
        e => panic!("{e}"),
    }
}

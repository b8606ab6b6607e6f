//! Translation of the recurrent ops: RNN, GRU and LSTM.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_core::ops::*;
use backplane_core::{DataType, Op};
use common::*;

fn rnn_desc(op: &Op) -> &RnnDesc {
    match op {
        Op::Rnn(d) => d,
        other => panic!("expected a recurrent op, got {other:?}"),
    }
}

#[test]
fn lstm_fills_omitted_inputs_and_produces_only_named_outputs() {
    // Bidirectional, S = 3, B = 2, I = 4, H = 5; B, sequence_lens and initial_h omitted.
    let net = Model::new(14)
        .input(input("x", &[3, 2, 4]))
        .input(input("w", &[2, 20, 4]))
        .input(input("r", &[2, 20, 5]))
        .input(input("c0", &[2, 2, 5]))
        .node(named(
            node(
                "LSTM",
                &["x", "w", "r", "", "", "", "c0"],
                &["", "y_h"],
                vec![a_int("hidden_size", 5), a_str("direction", "bidirectional")],
            ),
            "lstm",
        ))
        .output("y_h")
        .ok();
    let layer = only_layer(&net);
    let d = rnn_desc(&layer.op);
    assert_eq!(d.kind, RnnKind::Lstm);
    assert_eq!(d.direction, RnnDirection::Bidirectional);
    assert_eq!(d.outputs, [false, true, false]);
    assert_eq!(layer.outputs.len(), 1);
    let kinds: Vec<RnnActivationKind> = d.activations.iter().map(|a| a.kind).collect();
    use RnnActivationKind::{Sigmoid, Tanh};
    assert_eq!(kinds, [Sigmoid, Tanh, Tanh, Sigmoid, Tanh, Tanh]);
    // Every optional input is there: zeros, and the full sequence length.
    assert_eq!(layer.inputs.len(), 8);
    let info = |i: usize| net.tensor(layer.inputs[i]).info.clone();
    assert_eq!(info(3).shape.dims(), &[2, 40]);
    assert_eq!(info(4).dtype, DataType::I32);
    assert_eq!(info(4).shape.dims(), &[2]);
    assert_eq!(info(5).shape.dims(), &[2, 2, 5]);
    assert_eq!(info(7).shape.dims(), &[2, 15]);
    assert_eq!(dims(&net, "y_h"), [2, 2, 5]);
}

#[test]
fn gru_reads_layout_activations_and_linear_before_reset() {
    let net = Model::new(14)
        .input(input("x", &[2, 3, 4]))
        .input(input("w", &[1, 9, 4]))
        .input(input("r", &[1, 9, 3]))
        .node(node(
            "GRU",
            &["x", "w", "r"],
            &["y", "y_h"],
            vec![
                a_int("layout", 1),
                a_int("linear_before_reset", 1),
                a_str("direction", "reverse"),
                a_strs("activations", &["HardSigmoid", "Relu"]),
                a_floats("activation_alpha", &[0.3]),
                a_float("clip", 4.0),
            ],
        ))
        .output("y")
        .output("y_h")
        .ok();
    let d = rnn_desc(only_op(&net));
    assert_eq!(
        d.hidden_size, 3,
        "taken from R when the attribute is absent"
    );
    assert!(d.batch_first && d.linear_before_reset);
    assert_eq!(d.clip, Some(4.0));
    assert_eq!(
        d.activations,
        [
            RnnActivation {
                kind: RnnActivationKind::HardSigmoid,
                alpha: 0.3,
                beta: 0.5,
            },
            RnnActivation::new(RnnActivationKind::Relu),
        ]
    );
    // Batch first: Y [B, S, D, H], Y_h [B, D, H].
    assert_eq!(dims(&net, "y"), [2, 3, 1, 3]);
    assert_eq!(dims(&net, "y_h"), [2, 1, 3]);
}

#[test]
fn unknown_activations_and_directions_are_rejected_and_y_may_be_omitted() {
    let model = |attrs, outputs: &[&str]| {
        let mut m = Model::new(14)
            .input(input("x", &[1, 1, 2]))
            .input(input("w", &[1, 2, 2]))
            .input(input("r", &[1, 2, 2]))
            .node(node("RNN", &["x", "w", "r"], outputs, attrs));
        for o in outputs.iter().filter(|o| !o.is_empty()) {
            m = m.output(o);
        }
        m
    };
    let err = model(vec![a_strs("activations", &["Gelu"])], &["y"])
        .import()
        .unwrap_err()
        .to_string();
    assert!(err.contains("Gelu"), "{err}");
    let net = model(vec![], &["", "y_h"]).ok();
    assert_eq!(rnn_desc(only_op(&net)).outputs, [false, true, false]);
    assert!(model(vec![a_str("direction", "sideways")], &["y"])
        .import()
        .is_err());
}

//! CpuAcc's RNN, GRU and LSTM against CpuRef: hidden and input sizes around the SIMD widths,
//! every direction, layouts, sequence lengths, initial states, peepholes, clip, other
//! activations, constant and run-time weights; and the layers CpuAcc refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use backplane_backend_api::{Backend, LayerDesc, Support};
use backplane_core::ops::{RnnActivation, RnnActivationKind, RnnDesc, RnnDirection, RnnKind};
use backplane_core::{Op, Tensor, TensorInfo};
use backplane_cpu_acc::CpuAccBackend;
use std::sync::Arc;
use support::{check, Rng};

use RnnActivationKind::{Elu, HardSigmoid, LeakyRelu, Relu, Sigmoid, Softplus, Tanh};

/// One layer to test.
#[derive(Clone)]
struct Case {
    kind: RnnKind,
    direction: RnnDirection,
    hidden: usize,
    input: usize,
    seq: usize,
    batch: usize,
    /// Nonzero biases.
    bias: bool,
    /// Nonzero initial states.
    initial: bool,
    /// Some sequences shorter than `seq` (one of them empty when `batch` > 2).
    short: bool,
    /// Nonzero peepholes (LSTM).
    peep: bool,
    clip: Option<f32>,
    batch_first: bool,
    linear_before_reset: bool,
    input_forget: bool,
    /// Activations per direction (default when empty).
    acts: Vec<RnnActivationKind>,
    outputs: [bool; 3],
    /// sequence_lens as i64 (else i32).
    lens_i64: bool,
}

impl Case {
    fn new(kind: RnnKind, direction: RnnDirection, hidden: usize, input: usize) -> Self {
        Case {
            kind,
            direction,
            hidden,
            input,
            seq: 5,
            batch: 3,
            bias: true,
            initial: true,
            short: false,
            peep: true,
            clip: None,
            batch_first: false,
            linear_before_reset: false,
            input_forget: false,
            acts: Vec::new(),
            outputs: [true, true, kind == RnnKind::Lstm],
            lens_i64: false,
        }
    }

    fn desc(&self) -> RnnDesc {
        let acts = if self.acts.is_empty() {
            match self.kind {
                RnnKind::Rnn => vec![Tanh],
                RnnKind::Gru => vec![Sigmoid, Tanh],
                RnnKind::Lstm => vec![Sigmoid, Tanh, Tanh],
            }
        } else {
            self.acts.clone()
        };
        RnnDesc {
            kind: self.kind,
            direction: self.direction,
            hidden_size: self.hidden,
            activations: acts
                .iter()
                .cycle()
                .take(acts.len() * self.direction.count())
                .map(|&k| RnnActivation::new(k))
                .collect(),
            clip: self.clip,
            linear_before_reset: self.linear_before_reset,
            input_forget: self.input_forget,
            batch_first: self.batch_first,
            outputs: self.outputs,
        }
    }

    fn inputs(&self, rng: &mut Rng) -> Vec<Tensor> {
        let (h, d, b, s) = (self.hidden, self.direction.count(), self.batch, self.seq);
        let gh = self.kind.gates() * h;
        let scale = 1.5 / (h as f32).sqrt();
        let x = if self.batch_first {
            rng.tensor(&[b, s, self.input], 1.0)
        } else {
            rng.tensor(&[s, b, self.input], 1.0)
        };
        let w = rng.tensor(&[d, gh, self.input], 1.0 / (self.input as f32).sqrt());
        let r = rng.tensor(&[d, gh, h], scale);
        let bias = rng.tensor(&[d, 2 * gh], if self.bias { 0.5 } else { 0.0 });
        let lens: Vec<i64> = (0..b)
            .map(|i| match (self.short, i % 3) {
                (true, 1) => (s / 2) as i64,
                (true, 2) => 0,
                _ => s as i64,
            })
            .collect();
        let lens = if self.lens_i64 {
            Tensor::from_vec(vec![b], lens).unwrap()
        } else {
            Tensor::from_vec(vec![b], lens.iter().map(|&l| l as i32).collect::<Vec<_>>()).unwrap()
        };
        let state = if self.batch_first {
            [b, d, h]
        } else {
            [d, b, h]
        };
        let init = if self.initial { 0.8 } else { 0.0 };
        let mut v = vec![x, w, r, bias, lens, rng.tensor(&state, init)];
        if self.kind == RnnKind::Lstm {
            v.push(rng.tensor(&state, init));
            v.push(rng.tensor(&[d, 3 * h], if self.peep { 0.5 } else { 0.0 }));
        }
        v
    }

    fn run(&self, what: &str, rng: &mut Rng) {
        let inputs = self.inputs(rng);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let op = Op::Rnn(self.desc());
        let n = refs.len();
        let all = vec![true; n];
        let mut weights = vec![false; n];
        weights[1..4].fill(true);
        let none = vec![false; n];
        check(
            &format!("{what} {}", self.label()),
            &op,
            &refs,
            &[&all, &weights, &none],
            1e-4,
            1e-5,
        );
    }

    fn label(&self) -> String {
        format!(
            "{} {} h={} i={} s={} b={} bias={} init={} short={} peep={} clip={:?} bf={} lbr={} if={} acts={:?}",
            self.kind.name(),
            self.direction.name(),
            self.hidden,
            self.input,
            self.seq,
            self.batch,
            self.bias,
            self.initial,
            self.short,
            self.peep,
            self.clip,
            self.batch_first,
            self.linear_before_reset,
            self.input_forget,
            self.acts
        )
    }
}

const DIRECTIONS: [RnnDirection; 3] = [
    RnnDirection::Forward,
    RnnDirection::Reverse,
    RnnDirection::Bidirectional,
];

/// Every cell (GRU both ways) over the size grid, directions and options drawn at random.
fn sweep(kind: RnnKind, lbr: bool, seed: u64) {
    let mut rng = Rng(seed);
    for hidden in [1, 3, 17, 63] {
        for input in [1, 7, 33] {
            for (seq, batch) in [(1, 1), (5, 3), (5, 1), (1, 3)] {
                let mut c = Case::new(kind, rng.pick(&DIRECTIONS), hidden, input);
                c.seq = seq;
                c.batch = batch;
                c.linear_before_reset = lbr;
                c.bias = rng.pick(&[true, true, true, false]);
                c.initial = rng.pick(&[true, true, false]);
                c.short = rng.pick(&[true, false]);
                c.peep = rng.pick(&[true, false]);
                c.batch_first = rng.pick(&[false, false, true]);
                c.lens_i64 = rng.pick(&[true, false]);
                c.run("sweep", &mut rng);
            }
        }
    }
}

#[test]
fn rnn_sweep() {
    sweep(RnnKind::Rnn, false, 1);
}

#[test]
fn gru_sweep() {
    sweep(RnnKind::Gru, false, 2);
}

#[test]
fn gru_linear_before_reset_sweep() {
    sweep(RnnKind::Gru, true, 3);
}

#[test]
fn lstm_sweep() {
    sweep(RnnKind::Lstm, false, 4);
}

/// Every direction with short sequences, layout 1 and no initial state, for each cell.
#[test]
fn directions_lengths_and_layouts() {
    let mut rng = Rng(5);
    let cells = [
        (RnnKind::Rnn, false),
        (RnnKind::Gru, false),
        (RnnKind::Gru, true),
        (RnnKind::Lstm, false),
    ];
    for (kind, lbr) in cells {
        for direction in DIRECTIONS {
            for (short, batch_first, initial) in [
                (true, false, true),
                (true, true, false),
                (false, true, true),
            ] {
                let mut c = Case::new(kind, direction, 17, 7);
                c.linear_before_reset = lbr;
                c.short = short;
                c.batch_first = batch_first;
                c.initial = initial;
                c.batch = 4;
                c.run("directions", &mut rng);
            }
        }
    }
}

/// Clip, LSTM input_forget and no peepholes, and every non-default activation CpuAcc runs.
#[test]
fn clip_input_forget_and_activations() {
    let mut rng = Rng(6);
    for kind in [RnnKind::Rnn, RnnKind::Gru, RnnKind::Lstm] {
        for clip in [0.5, 3.0] {
            let mut c = Case::new(kind, RnnDirection::Bidirectional, 17, 7);
            c.clip = Some(clip);
            c.short = true;
            c.run("clip", &mut rng);
        }
    }
    for input_forget in [false, true] {
        for peep in [false, true] {
            let mut c = Case::new(RnnKind::Lstm, RnnDirection::Reverse, 63, 33);
            c.input_forget = input_forget;
            c.peep = peep;
            c.short = true;
            c.run("input_forget", &mut rng);
        }
    }
    let sets: [(RnnKind, Vec<RnnActivationKind>); 6] = [
        (RnnKind::Rnn, vec![Relu]),
        (RnnKind::Rnn, vec![LeakyRelu]),
        (RnnKind::Rnn, vec![Softplus]),
        (RnnKind::Gru, vec![HardSigmoid, Elu]),
        (RnnKind::Lstm, vec![HardSigmoid, Relu, Softplus]),
        (RnnKind::Lstm, vec![Sigmoid, LeakyRelu, Elu]),
    ];
    for (kind, acts) in sets {
        for lbr in [false, true] {
            let mut c = Case::new(kind, RnnDirection::Bidirectional, 17, 7);
            c.acts = acts.clone();
            c.linear_before_reset = lbr;
            c.clip = Some(4.0);
            c.run("acts", &mut rng);
        }
    }
}

/// Only some of the outputs, and a batch large enough for the threaded step products.
#[test]
fn partial_outputs_and_large_batch() {
    let mut rng = Rng(7);
    for outputs in [
        [true, false, false],
        [false, true, false],
        [false, false, true],
        [true, false, true],
    ] {
        let mut c = Case::new(RnnKind::Lstm, RnnDirection::Bidirectional, 17, 7);
        c.outputs = outputs;
        c.short = true;
        c.run("outputs", &mut rng);
    }
    for (kind, lbr) in [
        (RnnKind::Lstm, false),
        (RnnKind::Gru, false),
        (RnnKind::Gru, true),
    ] {
        let mut c = Case::new(kind, RnnDirection::Bidirectional, 63, 33);
        c.linear_before_reset = lbr;
        c.batch = 24;
        c.seq = 3;
        c.short = true;
        c.run("large batch", &mut rng);
    }
    // Deep enough for the split half-panel layout of packed weights (W and R).
    for kind in [RnnKind::Rnn, RnnKind::Gru, RnnKind::Lstm] {
        let mut c = Case::new(kind, RnnDirection::Bidirectional, 100, 128);
        c.batch = 16;
        c.seq = 3;
        c.short = true;
        c.batch_first = kind == RnnKind::Gru;
        c.run("deep", &mut rng);
    }
}

fn support_of(op: &Op, inputs: &[&Tensor]) -> Support {
    let infos: Vec<TensorInfo> = inputs.iter().map(|t| t.info().clone()).collect();
    let refs: Vec<&TensorInfo> = infos.iter().collect();
    let outputs = op.infer(&refs).unwrap();
    let desc = LayerDesc {
        name: "refused".into(),
        op: op.clone(),
        inputs: infos,
        outputs,
        constants: inputs
            .iter()
            .map(|t| Some(Arc::new((*t).clone())))
            .collect(),
    };
    CpuAccBackend::with_threads(1)
        .layer_support()
        .is_layer_supported(&desc)
}

fn refused_because(support: Support, why: &str) {
    match support {
        Support::Unsupported(reason) => assert!(reason.contains(why), "{reason}"),
        Support::Supported => panic!("claimed; expected a refusal mentioning {why}"),
    }
}

#[test]
fn refusals_name_their_reason() {
    let mut rng = Rng(8);
    for (kind, act) in [
        (RnnKind::Rnn, RnnActivationKind::Affine),
        (RnnKind::Gru, RnnActivationKind::ScaledTanh),
        (RnnKind::Lstm, RnnActivationKind::Softsign),
        (RnnKind::Rnn, RnnActivationKind::ThresholdedRelu),
    ] {
        let mut c = Case::new(kind, RnnDirection::Forward, 3, 2);
        c.acts = vec![act; kind.activations_per_direction()];
        let inputs = c.inputs(&mut rng);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        refused_because(support_of(&Op::Rnn(c.desc()), &refs), act.name());
    }
    // f64 data.
    let c = Case::new(RnnKind::Rnn, RnnDirection::Forward, 3, 2);
    let inputs: Vec<Tensor> = c
        .inputs(&mut rng)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            if i == 4 {
                t
            } else {
                let v = t.to_f64_vec();
                Tensor::from_vec(t.shape().clone(), v).unwrap()
            }
        })
        .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    refused_because(support_of(&Op::Rnn(c.desc()), &refs), "f32 only");
    // An empty batch.
    let mut c = Case::new(RnnKind::Gru, RnnDirection::Forward, 3, 2);
    c.batch = 0;
    let inputs = c.inputs(&mut rng);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    refused_because(support_of(&Op::Rnn(c.desc()), &refs), "empty");
    // (A negative or NaN clip never reaches a backend: the op's shape inference refuses it.)
}

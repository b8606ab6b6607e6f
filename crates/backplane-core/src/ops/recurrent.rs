//! Recurrent layers: RNN, GRU and LSTM.
//!
//! The importer fills every optional ONNX input with its default, so a layer always has the
//! inputs X, W, R, B, sequence_lens, initial_h (and initial_c, P for LSTM), and lists its
//! activations in full (one group per direction).

use crate::{CoreError, DataType, Result, TensorInfo};

/// Which recurrent cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RnnKind {
    /// Simple RNN: one gate.
    Rnn,
    /// Gated recurrent unit: gates z, r, h.
    Gru,
    /// Long short-term memory: gates i, o, f, c.
    Lstm,
}

impl RnnKind {
    /// The ONNX operator name.
    pub fn name(self) -> &'static str {
        match self {
            RnnKind::Rnn => "RNN",
            RnnKind::Gru => "GRU",
            RnnKind::Lstm => "LSTM",
        }
    }

    /// The kind of an ONNX operator name.
    pub fn from_name(name: &str) -> Option<Self> {
        [RnnKind::Rnn, RnnKind::Gru, RnnKind::Lstm]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// The number of gates (blocks of `hidden_size` rows in W and R).
    pub fn gates(self) -> usize {
        match self {
            RnnKind::Rnn => 1,
            RnnKind::Gru => 3,
            RnnKind::Lstm => 4,
        }
    }

    /// The number of activation functions per direction.
    pub fn activations_per_direction(self) -> usize {
        match self {
            RnnKind::Rnn => 1,
            RnnKind::Gru => 2,
            RnnKind::Lstm => 3,
        }
    }

    /// The number of inputs of the layer (all optional ONNX inputs filled in).
    pub fn num_inputs(self) -> usize {
        match self {
            RnnKind::Rnn | RnnKind::Gru => 6,
            RnnKind::Lstm => 8,
        }
    }
}

/// The direction(s) a recurrent layer runs over the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnDirection {
    /// First to last step.
    #[default]
    Forward,
    /// Last to first step.
    Reverse,
    /// Both, forward first.
    Bidirectional,
}

impl RnnDirection {
    /// The ONNX attribute value.
    pub fn name(self) -> &'static str {
        match self {
            RnnDirection::Forward => "forward",
            RnnDirection::Reverse => "reverse",
            RnnDirection::Bidirectional => "bidirectional",
        }
    }

    /// The direction of an ONNX attribute value.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            RnnDirection::Forward,
            RnnDirection::Reverse,
            RnnDirection::Bidirectional,
        ]
        .into_iter()
        .find(|d| d.name() == name)
    }

    /// 1, or 2 when bidirectional.
    pub fn count(self) -> usize {
        match self {
            RnnDirection::Bidirectional => 2,
            _ => 1,
        }
    }
}

/// An activation function of a recurrent cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RnnActivationKind {
    /// max(0, x).
    Relu,
    /// tanh(x).
    Tanh,
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// alpha * x + beta.
    Affine,
    /// x if x >= 0, else alpha * x.
    LeakyRelu,
    /// x if x > alpha, else 0.
    ThresholdedRelu,
    /// alpha * tanh(beta * x).
    ScaledTanh,
    /// clamp(alpha * x + beta, 0, 1).
    HardSigmoid,
    /// x if x >= 0, else alpha * (e^x - 1).
    Elu,
    /// x / (1 + |x|).
    Softsign,
    /// ln(1 + e^x).
    Softplus,
}

const ACTIVATIONS: [RnnActivationKind; 11] = [
    RnnActivationKind::Relu,
    RnnActivationKind::Tanh,
    RnnActivationKind::Sigmoid,
    RnnActivationKind::Affine,
    RnnActivationKind::LeakyRelu,
    RnnActivationKind::ThresholdedRelu,
    RnnActivationKind::ScaledTanh,
    RnnActivationKind::HardSigmoid,
    RnnActivationKind::Elu,
    RnnActivationKind::Softsign,
    RnnActivationKind::Softplus,
];

impl RnnActivationKind {
    /// The ONNX name.
    pub fn name(self) -> &'static str {
        match self {
            RnnActivationKind::Relu => "Relu",
            RnnActivationKind::Tanh => "Tanh",
            RnnActivationKind::Sigmoid => "Sigmoid",
            RnnActivationKind::Affine => "Affine",
            RnnActivationKind::LeakyRelu => "LeakyRelu",
            RnnActivationKind::ThresholdedRelu => "ThresholdedRelu",
            RnnActivationKind::ScaledTanh => "ScaledTanh",
            RnnActivationKind::HardSigmoid => "HardSigmoid",
            RnnActivationKind::Elu => "Elu",
            RnnActivationKind::Softsign => "Softsign",
            RnnActivationKind::Softplus => "Softplus",
        }
    }

    /// The activation of an ONNX name (case-insensitive, as runtimes accept it).
    pub fn from_name(name: &str) -> Option<Self> {
        ACTIVATIONS
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// The default (alpha, beta); `None` for a parameter the function does not take.
    pub fn defaults(self) -> (Option<f32>, Option<f32>) {
        match self {
            RnnActivationKind::Affine | RnnActivationKind::ScaledTanh => (Some(1.0), Some(0.0)),
            RnnActivationKind::LeakyRelu => (Some(0.01), None),
            RnnActivationKind::ThresholdedRelu | RnnActivationKind::Elu => (Some(1.0), None),
            RnnActivationKind::HardSigmoid => (Some(0.2), Some(0.5)),
            _ => (None, None),
        }
    }
}

/// An activation with its parameters (unused ones are 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RnnActivation {
    /// The function.
    pub kind: RnnActivationKind,
    /// Its alpha.
    pub alpha: f32,
    /// Its beta.
    pub beta: f32,
}

impl RnnActivation {
    /// The function with its default parameters.
    pub fn new(kind: RnnActivationKind) -> Self {
        let (a, b) = kind.defaults();
        RnnActivation {
            kind,
            alpha: a.unwrap_or(0.0),
            beta: b.unwrap_or(0.0),
        }
    }

    /// Apply the function.
    pub fn apply(&self, x: f64) -> f64 {
        let (a, b) = (f64::from(self.alpha), f64::from(self.beta));
        match self.kind {
            RnnActivationKind::Relu => x.max(0.0),
            RnnActivationKind::Tanh => x.tanh(),
            RnnActivationKind::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            RnnActivationKind::Affine => a * x + b,
            RnnActivationKind::LeakyRelu => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            RnnActivationKind::ThresholdedRelu => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            RnnActivationKind::ScaledTanh => a * (b * x).tanh(),
            RnnActivationKind::HardSigmoid => (a * x + b).clamp(0.0, 1.0),
            RnnActivationKind::Elu => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            RnnActivationKind::Softsign => x / (1.0 + x.abs()),
            RnnActivationKind::Softplus => x.exp().ln_1p(),
        }
    }
}

/// RNN, GRU or LSTM. Inputs (layout 0; layout 1 swaps the first two axes of X, Y, initial
/// and final states): X [S, B, I], W [D, G·H, I], R [D, G·H, H], B [D, 2·G·H],
/// sequence_lens `[B]` (i32 or i64), initial_h [D, B, H], and for LSTM initial_c [D, B, H],
/// P [D, 3·H]. Outputs, those flagged in `outputs`: Y [S, D, B, H], Y_h [D, B, H],
/// Y_c [D, B, H] (LSTM only).
#[derive(Debug, Clone, PartialEq)]
pub struct RnnDesc {
    /// The cell.
    pub kind: RnnKind,
    /// The direction(s).
    pub direction: RnnDirection,
    /// H, the size of the hidden state.
    pub hidden_size: usize,
    /// The activations, `kind.activations_per_direction()` per direction.
    pub activations: Vec<RnnActivation>,
    /// Gate inputs are clamped to `[-clip, clip]` before activation.
    pub clip: Option<f32>,
    /// GRU: apply the reset gate after the recurrent linear transform.
    pub linear_before_reset: bool,
    /// LSTM: couple the input and forget gates (f = 1 - i).
    pub input_forget: bool,
    /// Batch first (ONNX layout 1).
    pub batch_first: bool,
    /// Which of Y, Y_h, Y_c the layer produces, in that order.
    pub outputs: [bool; 3],
}

impl RnnDesc {
    /// The op name.
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let op = self.kind.name();
        let err = |m: String| CoreError::op(op, m);
        if inputs.len() != self.kind.num_inputs() {
            return Err(err(format!(
                "takes {} inputs, got {}",
                self.kind.num_inputs(),
                inputs.len()
            )));
        }
        if self.clip.is_some_and(|c| c.is_nan() || c < 0.0) {
            // The gates are clamped to [-clip, clip]: a negative or NaN bound has no range.
            return Err(err(format!(
                "clip must be non-negative, got {:?}",
                self.clip
            )));
        }
        let dirs = self.direction.count();
        let want_acts = dirs * self.kind.activations_per_direction();
        if self.activations.len() != want_acts {
            return Err(err(format!(
                "{want_acts} activations expected, got {}",
                self.activations.len()
            )));
        }
        if self.kind != RnnKind::Lstm && self.outputs[2] {
            return Err(err("only LSTM has the Y_c output".into()));
        }
        if !self.outputs.iter().any(|&o| o) {
            return Err(err("no output is produced".into()));
        }
        let x = inputs[0];
        if !x.dtype.is_float() {
            return Err(err(format!("X must be a float tensor, got {}", x.dtype)));
        }
        let xd = x.shape.dims();
        if xd.len() != 3 {
            return Err(err(format!("X must have rank 3, got {}", x.shape)));
        }
        let (seq, batch, input) = if self.batch_first {
            (xd[1], xd[0], xd[2])
        } else {
            (xd[0], xd[1], xd[2])
        };
        let h = self.hidden_size;
        let g = self.kind.gates();
        let state = if self.batch_first {
            vec![batch, dirs, h]
        } else {
            vec![dirs, batch, h]
        };
        let mut expected: Vec<(&str, Vec<usize>)> = vec![
            ("W", vec![dirs, g * h, input]),
            ("R", vec![dirs, g * h, h]),
            ("B", vec![dirs, 2 * g * h]),
            ("sequence_lens", vec![batch]),
            ("initial_h", state.clone()),
        ];
        if self.kind == RnnKind::Lstm {
            expected.push(("initial_c", state.clone()));
            expected.push(("P", vec![dirs, 3 * h]));
        }
        for (i, (name, dims)) in expected.iter().enumerate() {
            let t = inputs[i + 1];
            if t.shape.dims() != dims.as_slice() {
                return Err(err(format!(
                    "{name} must have shape {dims:?}, got {}",
                    t.shape
                )));
            }
            let type_ok = if *name == "sequence_lens" {
                matches!(t.dtype, DataType::I32 | DataType::I64)
            } else {
                t.dtype == x.dtype
            };
            if !type_ok {
                return Err(err(format!("{name} has the wrong type {}", t.dtype)));
            }
        }
        let y = if self.batch_first {
            vec![batch, seq, dirs, h]
        } else {
            vec![seq, dirs, batch, h]
        };
        let mut out = Vec::new();
        if self.outputs[0] {
            out.push(TensorInfo::new(x.dtype, y));
        }
        if self.outputs[1] {
            out.push(TensorInfo::new(x.dtype, state.clone()));
        }
        if self.outputs[2] {
            out.push(TensorInfo::new(x.dtype, state));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Op;

    fn lstm(batch_first: bool, outputs: [bool; 3]) -> Op {
        Op::Rnn(RnnDesc {
            kind: RnnKind::Lstm,
            direction: RnnDirection::Bidirectional,
            hidden_size: 4,
            activations: [
                RnnActivationKind::Sigmoid,
                RnnActivationKind::Tanh,
                RnnActivationKind::Tanh,
            ]
            .into_iter()
            .cycle()
            .take(6)
            .map(RnnActivation::new)
            .collect(),
            clip: None,
            linear_before_reset: false,
            input_forget: false,
            batch_first,
            outputs,
        })
    }

    #[test]
    fn lstm_shapes_follow_layout_and_outputs() {
        let f = |d: &[usize]| TensorInfo::new(DataType::F32, d.to_vec());
        let (x, w, r, b) = (f(&[5, 2, 3]), f(&[2, 16, 3]), f(&[2, 16, 4]), f(&[2, 32]));
        let lens = TensorInfo::new(DataType::I32, vec![2]);
        let (hc, p) = (f(&[2, 2, 4]), f(&[2, 12]));
        let ins = [&x, &w, &r, &b, &lens, &hc, &hc, &p];
        let out = lstm(false, [true, true, true]).infer(&ins).unwrap();
        let dims: Vec<&[usize]> = out.iter().map(|o| o.shape.dims()).collect();
        assert_eq!(dims, [&[5, 2, 2, 4][..], &[2, 2, 4], &[2, 2, 4]]);
        let out = lstm(false, [false, true, false]).infer(&ins).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].shape.dims(), &[2, 2, 4]);
        // Batch first: X [B, S, I].
        let xb = f(&[2, 5, 3]);
        let ins = [&xb, &w, &r, &b, &lens, &hc, &hc, &p];
        let out = lstm(true, [true, false, false]).infer(&ins).unwrap();
        assert_eq!(out[0].shape.dims(), &[2, 5, 2, 4]);
        // A wrong weight shape, a missing input and no output are errors.
        let bad_w = f(&[2, 12, 3]);
        let ins = [&x, &bad_w, &r, &b, &lens, &hc, &hc, &p];
        assert!(lstm(false, [true, true, true]).infer(&ins).is_err());
        assert!(lstm(false, [true, true, true])
            .infer(&[&x, &w, &r, &b, &lens, &hc])
            .is_err());
        let ins = [&x, &w, &r, &b, &lens, &hc, &hc, &p];
        assert!(lstm(false, [false, false, false]).infer(&ins).is_err());
        // A clip with no range (negative, NaN) is refused here, before any backend clamps.
        for clip in [-1.0, f32::NAN] {
            let Op::Rnn(mut desc) = lstm(false, [true, true, true]) else {
                unreachable!()
            };
            desc.clip = Some(clip);
            let e = Op::Rnn(desc).infer(&ins).unwrap_err().to_string();
            assert!(e.contains("clip must be non-negative"), "{e}");
        }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(RnnKind::from_name("GRU"), Some(RnnKind::Gru));
        assert_eq!(
            RnnDirection::from_name("reverse"),
            Some(RnnDirection::Reverse)
        );
        assert_eq!(
            RnnActivationKind::from_name("sigmoid"),
            Some(RnnActivationKind::Sigmoid)
        );
        assert_eq!(RnnActivationKind::from_name("Gelu"), None);
    }
}

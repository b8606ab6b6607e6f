//! Recurrent layers: RNN, GRU and LSTM (f32, f16 and f64, computed in f64).

use super::cast::{read_scalars, write_scalars, Scalar};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{RnnDesc, RnnDirection, RnnKind};
use backplane_core::{TensorView, TensorViewMut};

/// Sizes and layout of one recurrent layer.
struct Dims {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
    batch_first: bool,
}

impl Dims {
    fn x(&self, t: usize, b: usize) -> usize {
        if self.batch_first {
            (b * self.seq + t) * self.input
        } else {
            (t * self.batch + b) * self.input
        }
    }

    fn state(&self, d: usize, b: usize) -> usize {
        if self.batch_first {
            (b * self.dirs + d) * self.hidden
        } else {
            (d * self.batch + b) * self.hidden
        }
    }

    fn y(&self, t: usize, d: usize, b: usize) -> usize {
        if self.batch_first {
            ((b * self.seq + t) * self.dirs + d) * self.hidden
        } else {
            ((t * self.dirs + d) * self.batch + b) * self.hidden
        }
    }
}

/// `rows` rows of `m` (each `cols` long, starting at row `first`) times `v`.
fn matvec(m: &[f64], first: usize, rows: usize, cols: usize, v: &[f64]) -> Vec<f64> {
    (first..first + rows)
        .map(|r| {
            m[r * cols..(r + 1) * cols]
                .iter()
                .zip(v)
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect()
}

/// Run an RNN, GRU or LSTM layer. Inputs: X, W, R, B, sequence_lens, initial_h (and
/// initial_c, P for LSTM); outputs: those of Y, Y_h, Y_c the descriptor asks for.
/// A sequence length outside `0..=seq_length` is an error.
pub(crate) fn recurrent(
    desc: &RnnDesc,
    inputs: &[TensorView<'_>],
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let missing = || BackendError::Other(format!("{}: an input is missing", desc.name()));
    let get = |i: usize| inputs.get(i).ok_or_else(missing);
    let xd = get(0)?.dims();
    let dims = Dims {
        seq: if desc.batch_first { xd[1] } else { xd[0] },
        batch: if desc.batch_first { xd[0] } else { xd[1] },
        input: xd[2],
        hidden: desc.hidden_size,
        dirs: desc.direction.count(),
        batch_first: desc.batch_first,
    };
    let (h, g) = (dims.hidden, desc.kind.gates());
    let gh = g * h;
    let x = get(0)?.to_f64_vec();
    let w = get(1)?.to_f64_vec();
    let r = get(2)?.to_f64_vec();
    let bias = get(3)?.to_f64_vec();
    let lens = read_scalars(get(4)?)?
        .into_iter()
        .map(|s| {
            let v = s.to_i64();
            usize::try_from(v)
                .ok()
                .filter(|&l| l <= dims.seq)
                .ok_or_else(|| {
                    BackendError::Execution(format!(
                        "{}: sequence length {v} is not in 0..={}",
                        desc.name(),
                        dims.seq
                    ))
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    let h0 = get(5)?.to_f64_vec();
    let (c0, peep) = if desc.kind == RnnKind::Lstm {
        (get(6)?.to_f64_vec(), get(7)?.to_f64_vec())
    } else {
        (Vec::new(), Vec::new())
    };
    let per_dir = desc.kind.activations_per_direction();
    let clip = |v: f64| match desc.clip {
        Some(c) => v.clamp(-f64::from(c), f64::from(c)),
        None => v,
    };
    let mut y = vec![0f64; dims.seq * dims.dirs * dims.batch * h];
    let mut y_h = vec![0f64; dims.dirs * dims.batch * h];
    let mut y_c = vec![0f64; dims.dirs * dims.batch * h];
    for d in 0..dims.dirs {
        let reverse = desc.direction == RnnDirection::Reverse || d == 1;
        let acts = desc
            .activations
            .get(d * per_dir..(d + 1) * per_dir)
            .ok_or_else(missing)?;
        let (wd, rd) = (&w[d * gh * dims.input..], &r[d * gh * h..]);
        let (wb, rb) = (&bias[d * 2 * gh..d * 2 * gh + gh], &bias[d * 2 * gh + gh..]);
        for (b, &len) in lens.iter().enumerate() {
            let s = dims.state(d, b);
            let mut hs = h0[s..s + h].to_vec();
            let mut cs = if c0.is_empty() {
                Vec::new()
            } else {
                c0[s..s + h].to_vec()
            };
            for step in 0..len {
                let t = if reverse { len - 1 - step } else { step };
                let xt = &x[dims.x(t, b)..dims.x(t, b) + dims.input];
                let xw: Vec<f64> = matvec(wd, 0, gh, dims.input, xt)
                    .into_iter()
                    .zip(wb)
                    .map(|(a, b)| a + b)
                    .collect();
                let hr: Vec<f64> = matvec(rd, 0, gh, h, &hs)
                    .into_iter()
                    .zip(rb)
                    .map(|(a, b)| a + b)
                    .collect();
                match desc.kind {
                    RnnKind::Rnn => {
                        for j in 0..h {
                            hs[j] = acts[0].apply(clip(xw[j] + hr[j]));
                        }
                    }
                    RnnKind::Gru => {
                        let z: Vec<f64> =
                            (0..h).map(|j| acts[0].apply(clip(xw[j] + hr[j]))).collect();
                        let rg: Vec<f64> = (0..h)
                            .map(|j| acts[0].apply(clip(xw[h + j] + hr[h + j])))
                            .collect();
                        let hidden_pre: Vec<f64> = if desc.linear_before_reset {
                            (0..h)
                                .map(|j| xw[2 * h + j] + rg[j] * hr[2 * h + j])
                                .collect()
                        } else {
                            let reset: Vec<f64> = rg.iter().zip(&hs).map(|(a, b)| a * b).collect();
                            matvec(rd, 2 * h, h, h, &reset)
                                .into_iter()
                                .enumerate()
                                .map(|(j, v)| xw[2 * h + j] + v + rb[2 * h + j])
                                .collect()
                        };
                        for j in 0..h {
                            let cand = acts[1].apply(clip(hidden_pre[j]));
                            hs[j] = (1.0 - z[j]) * cand + z[j] * hs[j];
                        }
                    }
                    RnnKind::Lstm => {
                        let p = &peep[d * 3 * h..(d + 1) * 3 * h];
                        for j in 0..h {
                            let i = acts[0].apply(clip(xw[j] + hr[j] + p[j] * cs[j]));
                            let f = if desc.input_forget {
                                1.0 - i
                            } else {
                                acts[0].apply(clip(
                                    xw[2 * h + j] + hr[2 * h + j] + p[2 * h + j] * cs[j],
                                ))
                            };
                            let cand = acts[1].apply(clip(xw[3 * h + j] + hr[3 * h + j]));
                            cs[j] = f * cs[j] + i * cand;
                            let o = acts[0].apply(clip(xw[h + j] + hr[h + j] + p[h + j] * cs[j]));
                            hs[j] = o * acts[2].apply(cs[j]);
                        }
                    }
                }
                let yo = dims.y(t, d, b);
                y[yo..yo + h].copy_from_slice(&hs);
            }
            y_h[s..s + h].copy_from_slice(&hs);
            if !cs.is_empty() {
                y_c[s..s + h].copy_from_slice(&cs);
            }
        }
    }
    let mut slots = outputs.iter_mut();
    for (produced, values) in desc.outputs.iter().zip([y, y_h, y_c]) {
        if *produced {
            let out = slots.next().ok_or_else(|| {
                BackendError::Other(format!("{}: an output buffer is missing", desc.name()))
            })?;
            let scalars: Vec<Scalar> = values.into_iter().map(Scalar::Float).collect();
            write_scalars(out, &scalars)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{assert_near, f32s, tensor};
    use backplane_core::ops::{RnnActivation, RnnActivationKind, RnnDesc, RnnDirection, RnnKind};
    use backplane_core::{DataType, Op, Tensor};

    fn desc(kind: RnnKind, direction: RnnDirection, acts: &[RnnActivationKind]) -> RnnDesc {
        RnnDesc {
            kind,
            direction,
            hidden_size: 2,
            activations: acts.iter().map(|&k| RnnActivation::new(k)).collect(),
            clip: None,
            linear_before_reset: false,
            input_forget: false,
            batch_first: false,
            outputs: [true, true, kind == RnnKind::Lstm],
        }
    }

    fn values(outputs: &[Tensor]) -> Vec<Vec<f32>> {
        outputs
            .iter()
            .map(|t| t.as_slice::<f32>().unwrap().to_vec())
            .collect()
    }

    /// Identity matrices stacked for `dirs` directions and `gates` gates: [D, G·2, 2].
    fn eye(dirs: usize, gates: usize) -> Tensor {
        let block = [1.0, 0.0, 0.0, 1.0];
        let v: Vec<f32> = block
            .iter()
            .copied()
            .cycle()
            .take(4 * gates * dirs)
            .collect();
        f32s(&[dirs, gates * 2, 2], &v)
    }

    #[test]
    fn one_step_relu_rnn_is_relu_of_x_plus_bias() {
        let d = desc(
            RnnKind::Rnn,
            RnnDirection::Forward,
            &[RnnActivationKind::Relu],
        );
        let x = f32s(&[1, 1, 2], &[1.0, -3.0]);
        let w = eye(1, 1);
        let r = f32s(&[1, 2, 2], &[0.0; 4]);
        let b = f32s(&[1, 4], &[0.5, 0.5, 0.25, 0.0]);
        let lens = tensor(DataType::I32, &[1], &[1.0]);
        let h0 = f32s(&[1, 1, 2], &[0.0, 0.0]);
        let out = evaluate(&Op::Rnn(d.clone()), &[&x, &w, &r, &b, &lens, &h0]).unwrap();
        let v = values(&out);
        assert_near(&v[0], &[1.75, 0.0], 1e-6);
        assert_near(&v[1], &[1.75, 0.0], 1e-6);
        // Clip bounds the gate input before the activation.
        let clipped = RnnDesc {
            clip: Some(1.0),
            ..d
        };
        let out = evaluate(&Op::Rnn(clipped), &[&x, &w, &r, &b, &lens, &h0]).unwrap();
        assert_near(&values(&out)[1], &[1.0, 0.0], 1e-6);
    }

    #[test]
    fn bidirectional_rnn_with_sequence_lengths() {
        // Identity W and R, zero bias: the forward state is the running sum of the inputs,
        // the reverse one the running sum from the end of each sequence.
        let acts = [RnnActivationKind::Relu, RnnActivationKind::Relu];
        let d = desc(RnnKind::Rnn, RnnDirection::Bidirectional, &acts);
        // S = 2, B = 2: batch 0 has both steps, batch 1 only the first.
        let x = f32s(&[2, 2, 2], &[1.0, 2.0, 10.0, 20.0, 3.0, 4.0, 30.0, 40.0]);
        let (w, r) = (eye(2, 1), eye(2, 1));
        let b = f32s(&[2, 4], &[0.0; 8]);
        let lens = tensor(DataType::I64, &[2], &[2.0, 1.0]);
        let h0 = f32s(&[2, 2, 2], &[0.0; 8]);
        let out = evaluate(&Op::Rnn(d), &[&x, &w, &r, &b, &lens, &h0]).unwrap();
        let v = values(&out);
        // Y [S, D, B, H].
        #[rustfmt::skip]
        let y = [
            1.0, 2.0, 10.0, 20.0, // t 0, forward
            4.0, 6.0, 10.0, 20.0, // t 0, reverse
            4.0, 6.0, 0.0, 0.0,   // t 1, forward (batch 1 has ended)
            3.0, 4.0, 0.0, 0.0,   // t 1, reverse
        ];
        assert_near(&v[0], &y, 1e-6);
        assert_near(&v[1], &[4.0, 6.0, 10.0, 20.0, 4.0, 6.0, 10.0, 20.0], 1e-6);
        // A length beyond the sequence is an error.
        let bad = tensor(DataType::I64, &[2], &[3.0, 1.0]);
        let d = desc(RnnKind::Rnn, RnnDirection::Bidirectional, &acts);
        assert!(evaluate(&Op::Rnn(d), &[&x, &w, &r, &b, &bad, &h0]).is_err());
    }

    #[test]
    fn gru_and_lstm_with_zero_weights_halve_their_state() {
        use RnnActivationKind::{Sigmoid, Tanh};
        // Zero weights: every sigmoid gate is 1/2 and every candidate tanh(0) = 0.
        let x = f32s(&[1, 1, 2], &[5.0, -7.0]);
        let lens = tensor(DataType::I32, &[1], &[1.0]);
        let h0 = f32s(&[1, 1, 2], &[2.0, -4.0]);
        let gru = desc(RnnKind::Gru, RnnDirection::Forward, &[Sigmoid, Tanh]);
        let (w, r, b) = (
            f32s(&[1, 6, 2], &[0.0; 12]),
            f32s(&[1, 6, 2], &[0.0; 12]),
            f32s(&[1, 12], &[0.0; 12]),
        );
        for lbr in [false, true] {
            let d = RnnDesc {
                linear_before_reset: lbr,
                ..gru.clone()
            };
            let out = evaluate(&Op::Rnn(d), &[&x, &w, &r, &b, &lens, &h0]).unwrap();
            // H = (1 - z) * 0 + z * H0.
            assert_near(&values(&out)[1], &[1.0, -2.0], 1e-6);
        }
        let lstm = desc(RnnKind::Lstm, RnnDirection::Reverse, &[Sigmoid, Tanh, Tanh]);
        let (w, r, b) = (
            f32s(&[1, 8, 2], &[0.0; 16]),
            f32s(&[1, 8, 2], &[0.0; 16]),
            f32s(&[1, 16], &[0.0; 16]),
        );
        let c0 = f32s(&[1, 1, 2], &[2.0, 1.0]);
        let p = f32s(&[1, 6], &[0.0; 6]);
        for input_forget in [false, true] {
            let d = RnnDesc {
                input_forget,
                ..lstm.clone()
            };
            let out = evaluate(&Op::Rnn(d), &[&x, &w, &r, &b, &lens, &h0, &c0, &p]).unwrap();
            let v = values(&out);
            // C = f * C0 + i * 0 = C0 / 2; H = o * tanh(C) = tanh(C) / 2.
            let h = [0.5 * 1f32.tanh(), 0.5 * 0.5f32.tanh()];
            assert_near(&v[0], &h, 1e-6);
            assert_near(&v[1], &h, 1e-6);
            assert_near(&v[2], &[1.0, 0.5], 1e-6);
        }
    }
}

//! Optimizer steps of the training domain: Adagrad, Adam and Momentum (f32 and f64,
//! computed in f64).

use super::cast::{read_scalars, write_scalars, Scalar};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{OptimizerDesc, OptimizerKind};
use backplane_core::{TensorView, TensorViewMut};

fn floats(view: &TensorView<'_>) -> Result<Vec<f64>> {
    Ok(read_scalars(view)?
        .into_iter()
        .map(Scalar::to_f64)
        .collect())
}

fn store(out: &mut TensorViewMut<'_>, values: &[f64]) -> Result<()> {
    let values: Vec<Scalar> = values.iter().map(|&v| Scalar::Float(v)).collect();
    write_scalars(out, &values)
}

/// One optimizer step over every tensor of the group (see [`OptimizerDesc`] for the inputs
/// and outputs). The formulas are those of the operator specification.
pub(crate) fn optimizer(
    desc: &OptimizerDesc,
    inputs: &[TensorView<'_>],
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let n = desc.tensors;
    let states = desc.kind.states();
    if inputs.len() != desc.num_inputs() || outputs.len() != desc.num_outputs() {
        return Err(BackendError::Other(format!(
            "{}: {} inputs and {} outputs, expected {} and {}",
            desc.kind.name(),
            inputs.len(),
            outputs.len(),
            desc.num_inputs(),
            desc.num_outputs()
        )));
    }
    let scalar = |i: usize| -> Result<Scalar> {
        read_scalars(&inputs[i])?
            .first()
            .copied()
            .ok_or_else(|| BackendError::Other("an empty scalar input".into()))
    };
    let r = scalar(0)?.to_f64();
    let t = scalar(1)?.to_i64();
    for k in 0..n {
        let x = floats(&inputs[2 + k])?;
        let g = floats(&inputs[2 + n + k])?;
        let s1 = floats(&inputs[2 + 2 * n + k])?;
        let s2 = if states == 2 {
            floats(&inputs[2 + 3 * n + k])?
        } else {
            Vec::new()
        };
        let mut x_new = Vec::with_capacity(x.len());
        let mut s1_new = Vec::with_capacity(x.len());
        let mut s2_new = Vec::with_capacity(s2.len());
        match desc.kind {
            OptimizerKind::Adagrad {
                decay_factor,
                epsilon,
                norm_coefficient,
            } => {
                let rate = r / (1.0 + t as f64 * f64::from(decay_factor));
                for ((&x, &g), &h) in x.iter().zip(&g).zip(&s1) {
                    let g = f64::from(norm_coefficient) * x + g;
                    let h = h + g * g;
                    s1_new.push(h);
                    x_new.push(x - rate * g / (h.sqrt() + f64::from(epsilon)));
                }
            }
            OptimizerKind::Adam {
                alpha,
                beta,
                epsilon,
                norm_coefficient,
                norm_coefficient_post,
            } => {
                let (a, b) = (f64::from(alpha), f64::from(beta));
                let rate = if t > 0 {
                    // T is an integer exponent; clamp it into i32 (the powers are 0 by then).
                    let e = i32::try_from(t).unwrap_or(i32::MAX);
                    r * (1.0 - b.powi(e)).sqrt() / (1.0 - a.powi(e))
                } else {
                    r
                };
                for (((&x, &g), &v), &h) in x.iter().zip(&g).zip(&s1).zip(&s2) {
                    let g = f64::from(norm_coefficient) * x + g;
                    let v = a * v + (1.0 - a) * g;
                    let h = b * h + (1.0 - b) * g * g;
                    let x = x - rate * v / (h.sqrt() + f64::from(epsilon));
                    x_new.push((1.0 - f64::from(norm_coefficient_post)) * x);
                    s1_new.push(v);
                    s2_new.push(h);
                }
            }
            OptimizerKind::Momentum {
                alpha,
                beta,
                norm_coefficient,
                nesterov,
            } => {
                let a = f64::from(alpha);
                let b = if t > 0 { f64::from(beta) } else { 1.0 };
                for ((&x, &g), &v) in x.iter().zip(&g).zip(&s1) {
                    let g = f64::from(norm_coefficient) * x + g;
                    let v = a * v + b * g;
                    s1_new.push(v);
                    x_new.push(if nesterov {
                        x - r * (g + a * v)
                    } else {
                        x - r * v
                    });
                }
            }
        }
        store(&mut outputs[k], &x_new)?;
        store(&mut outputs[n + k], &s1_new)?;
        if states == 2 {
            store(&mut outputs[2 * n + k], &s2_new)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{assert_close, f32s};
    use backplane_core::ops::{OptimizerDesc, OptimizerKind};
    use backplane_core::{Op, Tensor};

    fn scalars(r: f32, t: i64) -> (Tensor, Tensor) {
        (
            Tensor::from_vec(vec![], vec![r]).unwrap(),
            Tensor::from_vec(vec![], vec![t]).unwrap(),
        )
    }

    fn f(t: &Tensor) -> Vec<f32> {
        t.as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn adagrad_step() {
        // r = 0.1 / (1 + 1 * 1) = 0.05; g = 0.5 * 1 + 1 = 1.5; h = 0.75 + 2.25 = 3;
        // x = 1 - 0.05 * 1.5 / (sqrt(3) + 0) = 0.956699.
        let op = Op::Optimizer(OptimizerDesc {
            kind: OptimizerKind::Adagrad {
                decay_factor: 1.0,
                epsilon: 0.0,
                norm_coefficient: 0.5,
            },
            tensors: 1,
        });
        let (r, t) = scalars(0.1, 1);
        let (x, g, h) = (f32s(&[1], &[1.0]), f32s(&[1], &[1.0]), f32s(&[1], &[0.75]));
        let out = evaluate(&op, &[&r, &t, &x, &g, &h]).unwrap();
        assert_close(&f(&out[0]), &[0.956_699], 1e-6);
        assert_close(&f(&out[1]), &[3.0], 1e-7);
    }

    #[test]
    fn momentum_standard_and_nesterov() {
        // T = 0: beta counts as 1. v = 0.5 * 2 + 1 * 4 = 5; standard x = 10 - 0.1 * 5 = 9.5;
        // nesterov x = 10 - 0.1 * (4 + 0.5 * 5) = 9.35. With T = 1, beta = 0.25:
        // v = 1 + 1 = 2, x = 10 - 0.2 = 9.8.
        let (x, g, v) = (f32s(&[1], &[10.0]), f32s(&[1], &[4.0]), f32s(&[1], &[2.0]));
        for (nesterov, t, want_x, want_v) in [
            (false, 0, 9.5, 5.0),
            (true, 0, 9.35, 5.0),
            (false, 1, 9.8, 2.0),
        ] {
            let op = Op::Optimizer(OptimizerDesc {
                kind: OptimizerKind::Momentum {
                    alpha: 0.5,
                    beta: 0.25,
                    norm_coefficient: 0.0,
                    nesterov,
                },
                tensors: 1,
            });
            let (r, t) = scalars(0.1, t);
            let out = evaluate(&op, &[&r, &t, &x, &g, &v]).unwrap();
            assert_close(&f(&out[0]), &[want_x], 1e-6);
            assert_close(&f(&out[1]), &[want_v], 1e-7);
        }
    }

    #[test]
    fn adam_two_tensors() {
        // alpha 0.5, beta 0.75, T = 1: v = 0.5 * 0 + 0.5 * 2 = 1; h = 0.75 * 0 + 0.25 * 4 = 1;
        // rate = 0.1 * sqrt(0.25) / 0.5 = 0.1; x = 3 - 0.1 * 1 / 1 = 2.9; post 0.5 → 1.45.
        // Second tensor: g = 1, v = 0.5, h = 0.25, x = 4 - 0.1 * 0.5 / 0.5 = 3.9 → 1.95.
        let op = Op::Optimizer(OptimizerDesc {
            kind: OptimizerKind::Adam {
                alpha: 0.5,
                beta: 0.75,
                epsilon: 0.0,
                norm_coefficient: 0.0,
                norm_coefficient_post: 0.5,
            },
            tensors: 2,
        });
        let (r, t) = scalars(0.1, 1);
        let (x1, x2) = (f32s(&[1], &[3.0]), f32s(&[1], &[4.0]));
        let (g1, g2) = (f32s(&[1], &[2.0]), f32s(&[1], &[1.0]));
        let zero = f32s(&[1], &[0.0]);
        let h1 = f32s(&[1], &[0.0]);
        let out = evaluate(&op, &[&r, &t, &x1, &x2, &g1, &g2, &zero, &zero, &h1, &zero]).unwrap();
        assert_eq!(out.len(), 6);
        assert_close(&f(&out[0]), &[1.45], 1e-6);
        assert_close(&f(&out[1]), &[1.95], 1e-6);
        assert_close(&f(&out[2]), &[1.0], 1e-7);
        assert_close(&f(&out[3]), &[0.5], 1e-7);
        assert_close(&f(&out[4]), &[1.0], 1e-7);
        assert_close(&f(&out[5]), &[0.25], 1e-7);
    }
}

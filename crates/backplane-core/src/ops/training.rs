//! Optimizers of the `ai.onnx.preview.training` domain: Adagrad, Adam and Momentum.
//!
//! Inputs: R (learning rate, a float scalar), T (update count, an i64 scalar), then `n`
//! tensors of each role in turn: X_1..X_n, G_1..G_n, then the optimizer's state (Adagrad:
//! H; Momentum: V; Adam: V then H). Outputs: the new X_1..X_n, then the new state tensors in
//! the same role order. Every tensor of a group has the shape and type of its X.

use super::{flat, AttrValue};
use crate::{CoreError, DataType, Result, TensorInfo};

/// Which optimizer, with its attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptimizerKind {
    /// ADAGRAD.
    Adagrad {
        /// Learning-rate decay: r = R / (1 + T * decay_factor).
        decay_factor: f32,
        /// Added to the square root of the accumulated squared gradient.
        epsilon: f32,
        /// L2 regularization coefficient.
        norm_coefficient: f32,
    },
    /// Adam.
    Adam {
        /// Decay of the averaged gradient.
        alpha: f32,
        /// Decay of the averaged squared gradient.
        beta: f32,
        /// Added to the square root of the averaged squared gradient.
        epsilon: f32,
        /// L2 regularization coefficient (added to the gradient).
        norm_coefficient: f32,
        /// Post-update shrinkage: X_final = (1 - norm_coefficient_post) * X_new.
        norm_coefficient_post: f32,
    },
    /// Stochastic gradient descent with momentum.
    Momentum {
        /// Decay of the momentum.
        alpha: f32,
        /// Scale of the gradient (1 at T = 0).
        beta: f32,
        /// L2 regularization coefficient.
        norm_coefficient: f32,
        /// Nesterov's momentum instead of the standard one.
        nesterov: bool,
    },
}

impl OptimizerKind {
    /// The ONNX operator name.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerKind::Adagrad { .. } => "Adagrad",
            OptimizerKind::Adam { .. } => "Adam",
            OptimizerKind::Momentum { .. } => "Momentum",
        }
    }

    /// The number of state tensors per optimized tensor (H; V; V and H).
    pub fn states(&self) -> usize {
        match self {
            OptimizerKind::Adam { .. } => 2,
            _ => 1,
        }
    }
}

/// An optimizer step over `tensors` tensors (see the module documentation for the inputs
/// and outputs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerDesc {
    /// The optimizer.
    pub kind: OptimizerKind,
    /// n, the number of optimized tensors.
    pub tensors: usize,
}

impl OptimizerDesc {
    /// The number of inputs: R, T and n tensors of each role.
    pub fn num_inputs(&self) -> usize {
        2 + self.tensors * (2 + self.kind.states())
    }

    /// The number of outputs: n new values and n of each state.
    pub fn num_outputs(&self) -> usize {
        self.tensors * (1 + self.kind.states())
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let op = self.kind.name();
        let err = |m: String| CoreError::op(op, m);
        if self.tensors == 0 {
            return Err(err("no tensor to optimize".into()));
        }
        if inputs.len() != self.num_inputs() {
            return Err(err(format!(
                "takes {} inputs, got {}",
                self.num_inputs(),
                inputs.len()
            )));
        }
        let (r, t) = (inputs[0], inputs[1]);
        if !matches!(r.dtype, DataType::F32 | DataType::F64) || r.shape.elements() != 1 {
            return Err(err(format!("R must be a float scalar, got {r}")));
        }
        if t.dtype != DataType::I64 || t.shape.elements() != 1 {
            return Err(err(format!("T must be an i64 scalar, got {t}")));
        }
        let n = self.tensors;
        let groups = 2 + self.kind.states();
        for i in 0..n {
            let x = inputs[2 + i];
            if !matches!(x.dtype, DataType::F32 | DataType::F64) {
                return Err(err(format!(
                    "X_{} must be f32 or f64, got {}",
                    i + 1,
                    x.dtype
                )));
            }
            for g in 1..groups {
                let other = inputs[2 + g * n + i];
                if other.dtype != x.dtype || other.shape != x.shape {
                    return Err(err(format!(
                        "input {} is {other}, X_{} is {x}",
                        2 + g * n + i,
                        i + 1
                    )));
                }
            }
        }
        let xs = &inputs[2..2 + n];
        let mut out = Vec::with_capacity(self.num_outputs());
        for _ in 0..1 + self.kind.states() {
            out.extend(xs.iter().map(|x| (*x).clone()));
        }
        Ok(out)
    }

    /// The attribute form (ONNX names, plus `tensors`).
    pub(crate) fn to_attrs(self) -> Vec<(String, AttrValue)> {
        let f = |n: &str, v: f32| (n.to_string(), AttrValue::Float(v));
        let mut a = vec![("tensors".to_string(), AttrValue::Int(self.tensors as i64))];
        match self.kind {
            OptimizerKind::Adagrad {
                decay_factor,
                epsilon,
                norm_coefficient,
            } => a.extend([
                f("decay_factor", decay_factor),
                f("epsilon", epsilon),
                f("norm_coefficient", norm_coefficient),
            ]),
            OptimizerKind::Adam {
                alpha,
                beta,
                epsilon,
                norm_coefficient,
                norm_coefficient_post,
            } => a.extend([
                f("alpha", alpha),
                f("beta", beta),
                f("epsilon", epsilon),
                f("norm_coefficient", norm_coefficient),
                f("norm_coefficient_post", norm_coefficient_post),
            ]),
            OptimizerKind::Momentum {
                alpha,
                beta,
                norm_coefficient,
                nesterov,
            } => {
                a.extend([
                    f("alpha", alpha),
                    f("beta", beta),
                    f("norm_coefficient", norm_coefficient),
                ]);
                let mode = if nesterov { "nesterov" } else { "standard" };
                a.push(("mode".into(), AttrValue::String(mode.into())));
            }
        }
        a
    }

    /// The inverse of [`Self::to_attrs`].
    pub(crate) fn from_attrs(r: &flat::Reader<'_>) -> Result<Self> {
        let kind = match r.op_type {
            "Adagrad" => OptimizerKind::Adagrad {
                decay_factor: r.float("decay_factor")?,
                epsilon: r.float("epsilon")?,
                norm_coefficient: r.float("norm_coefficient")?,
            },
            "Adam" => OptimizerKind::Adam {
                alpha: r.float("alpha")?,
                beta: r.float("beta")?,
                epsilon: r.float("epsilon")?,
                norm_coefficient: r.float("norm_coefficient")?,
                norm_coefficient_post: r.float("norm_coefficient_post")?,
            },
            "Momentum" => OptimizerKind::Momentum {
                alpha: r.float("alpha")?,
                beta: r.float("beta")?,
                norm_coefficient: r.float("norm_coefficient")?,
                nesterov: match r.string("mode")? {
                    "standard" => false,
                    "nesterov" => true,
                    other => return Err(r.bad("mode", other)),
                },
            },
            other => return Err(r.err(format!("'{other}' is not an optimizer"))),
        };
        let tensors = r.int("tensors")?;
        Ok(OptimizerDesc {
            kind,
            tensors: usize::try_from(tensors).map_err(|_| r.bad("tensors", tensors))?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Op;

    #[test]
    fn adam_outputs_follow_the_groups() {
        let op = Op::Optimizer(OptimizerDesc {
            kind: OptimizerKind::Adam {
                alpha: 0.9,
                beta: 0.999,
                epsilon: 1e-6,
                norm_coefficient: 0.0,
                norm_coefficient_post: 0.0,
            },
            tensors: 2,
        });
        let r = TensorInfo::new(DataType::F32, vec![]);
        let t = TensorInfo::new(DataType::I64, vec![]);
        let a = TensorInfo::new(DataType::F32, vec![3]);
        let b = TensorInfo::new(DataType::F32, vec![2, 2]);
        let ins = [&r, &t, &a, &b, &a, &b, &a, &b, &a, &b];
        let out = op.infer(&ins).unwrap();
        assert_eq!(out.len(), 6);
        assert_eq!(out[2].shape.dims(), &[3]);
        assert_eq!(out[5].shape.dims(), &[2, 2]);
        // A gradient of the wrong shape, a missing input, an f32 T are errors.
        let bad = [&r, &t, &a, &b, &b, &b, &a, &b, &a, &b];
        assert!(op.infer(&bad).is_err());
        assert!(op.infer(&ins[..9]).is_err());
        let bad = [&r, &r, &a, &b, &a, &b, &a, &b, &a, &b];
        assert!(op.infer(&bad).is_err());
    }
}

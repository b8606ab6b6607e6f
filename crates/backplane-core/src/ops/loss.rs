//! Loss functions: NegativeLogLikelihoodLoss (SoftmaxCrossEntropyLoss is LogSoftmax followed
//! by it).

use crate::{CoreError, DataType, Result, TensorInfo};

/// How per-element losses are combined into the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LossReduction {
    /// No reduction: one loss per target element.
    None,
    /// The sum of the losses.
    Sum,
    /// The sum of the losses divided by the sum of the weights applied (the number of
    /// targets not ignored, without weights).
    #[default]
    Mean,
}

impl LossReduction {
    /// The ONNX attribute value.
    pub fn name(self) -> &'static str {
        match self {
            LossReduction::None => "none",
            LossReduction::Sum => "sum",
            LossReduction::Mean => "mean",
        }
    }

    /// The reduction of an ONNX attribute value.
    pub fn from_name(name: &str) -> Option<Self> {
        [LossReduction::None, LossReduction::Sum, LossReduction::Mean]
            .into_iter()
            .find(|r| r.name() == name)
    }
}

/// NegativeLogLikelihoodLoss: input [N, C, d1..dk] (log-probabilities), target [N, d1..dk]
/// (class indices, i32 or i64), optional weight `[C]`. The loss of one target element is
/// `-input[n, target, d] * weight[target]`, and 0 where the target equals `ignore_index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NllLossDesc {
    /// How the losses are combined.
    pub reduction: LossReduction,
    /// A target value that contributes nothing (not even to the mean's divisor).
    pub ignore_index: Option<i64>,
}

impl NllLossDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "NegativeLogLikelihoodLoss";
        let (x, target) = (inputs[0], inputs[1]);
        if !x.dtype.is_float() {
            return Err(CoreError::op(
                OP,
                format!("input must be a float tensor, got {}", x.dtype),
            ));
        }
        if !matches!(target.dtype, DataType::I32 | DataType::I64) {
            return Err(CoreError::op(
                OP,
                format!("target must be i32 or i64, got {}", target.dtype),
            ));
        }
        let xd = x.shape.dims();
        let td = target.shape.dims();
        if xd.len() < 2 {
            return Err(CoreError::op(
                OP,
                format!("input must be [N, C, ...], got {}", x.shape),
            ));
        }
        let expected: Vec<usize> = xd[..1].iter().chain(&xd[2..]).copied().collect();
        if td != expected.as_slice() {
            return Err(CoreError::op(
                OP,
                format!(
                    "target shape {} does not match input {} (expected {expected:?})",
                    target.shape, x.shape
                ),
            ));
        }
        if let Some(w) = inputs.get(2) {
            if w.dtype != x.dtype || w.shape.dims() != [xd[1]] {
                return Err(CoreError::op(
                    OP,
                    format!(
                        "weight must be {}[{}], got {}{}",
                        x.dtype, xd[1], w.dtype, w.shape
                    ),
                ));
            }
        }
        let out = match self.reduction {
            LossReduction::None => expected,
            LossReduction::Sum | LossReduction::Mean => Vec::new(),
        };
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Op;

    #[test]
    fn shapes_follow_the_reduction() {
        let x = TensorInfo::new(DataType::F32, vec![2, 3, 4]);
        let t = TensorInfo::new(DataType::I64, vec![2, 4]);
        let w = TensorInfo::new(DataType::F32, vec![3]);
        let none = Op::NegativeLogLikelihoodLoss(NllLossDesc {
            reduction: LossReduction::None,
            ignore_index: None,
        });
        assert_eq!(none.infer(&[&x, &t]).unwrap()[0].shape.dims(), &[2, 4]);
        let mean = Op::NegativeLogLikelihoodLoss(NllLossDesc::default());
        assert_eq!(mean.infer(&[&x, &t, &w]).unwrap()[0].shape.rank(), 0);
        // Target shape, target type and weight size are checked.
        let bad_t = TensorInfo::new(DataType::I64, vec![2, 3]);
        assert!(mean.infer(&[&x, &bad_t]).is_err());
        let float_t = TensorInfo::new(DataType::F32, vec![2, 4]);
        assert!(mean.infer(&[&x, &float_t]).is_err());
        let bad_w = TensorInfo::new(DataType::F32, vec![4]);
        assert!(mean.infer(&[&x, &t, &bad_w]).is_err());
        assert_eq!(LossReduction::from_name("sum"), Some(LossReduction::Sum));
        assert_eq!(LossReduction::from_name("avg"), None);
    }
}

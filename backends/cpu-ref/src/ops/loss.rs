//! Loss functions: NegativeLogLikelihoodLoss (f32 and f16, accumulated in f64).
//! SoftmaxCrossEntropyLoss reaches CpuRef as LogSoftmax followed by this op.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::product;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{LossReduction, NllLossDesc};
use backplane_core::{TensorView, TensorViewMut};

/// NegativeLogLikelihoodLoss: input [N, C, d...], target [N, d...], optional weight [C].
/// A target outside `0..C` that is not `ignore_index` is an error.
pub(crate) fn nll_loss(
    desc: &NllLossDesc,
    x: &TensorView<'_>,
    target: &TensorView<'_>,
    weight: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let (batch, classes, inner) = (dims[0], dims[1], product(&dims[2..]));
    let xs = x.to_f64_vec();
    let targets = read_scalars(target)?;
    let weights = weight.map(TensorView::to_f64_vec);
    let mut losses = Vec::with_capacity(batch * inner);
    let mut weight_sum = 0f64;
    for n in 0..batch {
        for d in 0..inner {
            let t = targets[n * inner + d].to_i64();
            if desc.ignore_index == Some(t) {
                losses.push(0.0);
                continue;
            }
            let class = usize::try_from(t)
                .ok()
                .filter(|&k| k < classes)
                .ok_or_else(|| {
                    BackendError::Execution(format!(
                        "NegativeLogLikelihoodLoss: target {t} is not a class index in \
                         0..{classes} (nor the ignore_index)"
                    ))
                })?;
            let w = weights.as_ref().map_or(1.0, |w| w[class]);
            losses.push(-xs[(n * classes + class) * inner + d] * w);
            weight_sum += w;
        }
    }
    let out: Vec<Scalar> = match desc.reduction {
        LossReduction::None => losses.into_iter().map(Scalar::Float).collect(),
        LossReduction::Sum => vec![Scalar::Float(losses.iter().sum())],
        // 0 / 0 (every target ignored) is NaN, as the definition gives.
        LossReduction::Mean => vec![Scalar::Float(losses.iter().sum::<f64>() / weight_sum)],
    };
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{assert_close, eval_f32, f32s, tensor};
    use backplane_core::ops::{LossReduction, NllLossDesc};
    use backplane_core::{DataType, Op};

    fn op(reduction: LossReduction, ignore_index: Option<i64>) -> Op {
        Op::NegativeLogLikelihoodLoss(NllLossDesc {
            reduction,
            ignore_index,
        })
    }

    #[test]
    fn picks_the_target_class_weights_and_reduces() {
        // N = 2, C = 3, d = 2: input[n, c, d] = 10n + c + d/10.
        let x: Vec<f32> = (0..2)
            .flat_map(|n| {
                (0..3).flat_map(move |c| (0..2).map(move |d| (10 * n + c) as f32 + d as f32 / 10.0))
            })
            .collect();
        let x = f32s(&[2, 3, 2], &x);
        let t = tensor(DataType::I64, &[2, 2], &[2.0, 0.0, 1.0, 2.0]);
        let none = eval_f32(&op(LossReduction::None, None), &[&x, &t]);
        assert_close(&none, &[-2.0, -0.1, -11.0, -12.1], 1e-6);
        let w = f32s(&[3], &[1.0, 2.0, 0.5]);
        let weighted = eval_f32(&op(LossReduction::None, None), &[&x, &t, &w]);
        assert_close(&weighted, &[-1.0, -0.1, -22.0, -6.05], 1e-6);
        let sum = eval_f32(&op(LossReduction::Sum, None), &[&x, &t, &w]);
        assert_close(&sum, &[-29.15], 1e-6);
        // Mean divides by the weights applied: 0.5 + 1 + 2 + 0.5.
        let mean = eval_f32(&op(LossReduction::Mean, None), &[&x, &t, &w]);
        assert_close(&mean, &[-29.15 / 4.0], 1e-6);
        // An ignored target adds neither loss nor weight.
        let mean = eval_f32(&op(LossReduction::Mean, Some(2)), &[&x, &t, &w]);
        assert_close(&mean, &[(-0.1 - 22.0) / 3.0], 1e-6);
        let none = eval_f32(&op(LossReduction::None, Some(2)), &[&x, &t]);
        assert_close(&none, &[0.0, -0.1, -11.0, 0.0], 1e-6);
    }

    #[test]
    fn a_target_out_of_range_is_an_error() {
        let x = f32s(&[1, 2], &[0.5, 0.25]);
        let t = tensor(DataType::I32, &[1], &[2.0]);
        assert!(evaluate(&op(LossReduction::Mean, None), &[&x, &t]).is_err());
        // Unless it is the ignore_index (negative ones included).
        let t = tensor(DataType::I32, &[1], &[-1.0]);
        let y = eval_f32(&op(LossReduction::Sum, Some(-1)), &[&x, &t]);
        assert_eq!(y, vec![0.0]);
    }
}

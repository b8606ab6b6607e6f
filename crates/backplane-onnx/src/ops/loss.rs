//! Loss functions: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss lowered onto
//! LogSoftmax (axis 1) and NegativeLogLikelihoodLoss.

use super::{Dst, Lowering, NodeCx, Src, Step, Tx};
use backplane_core::ops::{LossReduction, NllLossDesc};
use backplane_core::Op;

fn desc(cx: &NodeCx<'_>) -> Tx<NllLossDesc> {
    let name = cx.attr(cx.attrs.string_or("reduction", "mean"))?;
    let reduction = LossReduction::from_name(&name)
        .ok_or_else(|| cx.invalid(format!("reduction must be none, sum or mean, got '{name}'")))?;
    Ok(NllLossDesc {
        reduction,
        ignore_index: cx.attr(cx.attrs.int("ignore_index"))?,
    })
}

/// NegativeLogLikelihoodLoss: input, target, optional weight.
pub(super) fn nll_loss(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(12)?;
    Ok(Lowering::single(
        Op::NegativeLogLikelihoodLoss(desc(cx)?),
        cx.data_inputs(2, 1)?,
    ))
}

/// SoftmaxCrossEntropyLoss: scores, labels, optional weights → loss, optional log_prob.
pub(super) fn softmax_cross_entropy_loss(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(12)?;
    let mut inputs = cx.data_inputs(2, 1)?;
    inputs[0] = Src::Temp(0);
    let mut steps = vec![
        Step {
            op: Op::LogSoftmax { axis: 1 },
            inputs: vec![Src::Input(0)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("log_softmax".into()),
        },
        Step {
            op: Op::NegativeLogLikelihoodLoss(desc(cx)?),
            inputs,
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ];
    if cx.output_used(1) {
        steps.push(Step {
            op: Op::Identity,
            inputs: vec![Src::Temp(0)],
            outputs: vec![Dst::Output(1)],
            suffix: Some("log_prob".into()),
        });
    }
    Ok(Lowering::Steps(steps))
}

//! Training: the optimizers of the `ai.onnx.preview.training` domain (Adagrad, Adam,
//! Momentum) and BatchNormalization in training mode (lowered to reductions and
//! elementwise ops).

use super::{Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use backplane_core::ops::{
    BinaryOp, OptimizerDesc, OptimizerKind, ReduceDesc, ReduceKind, UnaryOp,
};
use backplane_core::{DataType, Op, Tensor};
use std::sync::Arc;

/// Translate a node of the training domain (its opset is the domain's).
pub(super) fn translate(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let f = |name: &str, default: f32| cx.attr(cx.attrs.float_or(name, default));
    let required = |name: &str| -> Tx<f32> {
        cx.attr(cx.attrs.float(name))?
            .ok_or_else(|| cx.invalid(format!("the {name} attribute is required")))
    };
    let kind = match cx.op_type() {
        "Adagrad" => OptimizerKind::Adagrad {
            decay_factor: f("decay_factor", 0.0)?,
            epsilon: f("epsilon", 1e-6)?,
            norm_coefficient: f("norm_coefficient", 0.0)?,
        },
        "Adam" => OptimizerKind::Adam {
            alpha: f("alpha", 0.9)?,
            beta: f("beta", 0.999)?,
            epsilon: f("epsilon", 1e-6)?,
            norm_coefficient: f("norm_coefficient", 0.0)?,
            norm_coefficient_post: f("norm_coefficient_post", 0.0)?,
        },
        "Momentum" => {
            let mode = cx
                .attr(cx.attrs.string("mode"))?
                .ok_or_else(|| cx.invalid("the mode attribute is required"))?;
            OptimizerKind::Momentum {
                alpha: required("alpha")?,
                beta: required("beta")?,
                norm_coefficient: required("norm_coefficient")?,
                nesterov: match mode.as_str() {
                    "standard" => false,
                    "nesterov" => true,
                    other => return Err(cx.invalid(format!("unknown mode '{other}'"))),
                },
            }
        }
        other => {
            return Err(TxError::Unsupported(format!(
                "{other} of the training domain is not supported"
            )))
        }
    };
    let groups = 2 + kind.states();
    let n_in = cx.num_inputs();
    if n_in < 2 + groups || !(n_in - 2).is_multiple_of(groups) {
        return Err(cx.invalid(format!(
            "{n_in} inputs: expected R, T and {groups} inputs per optimized tensor"
        )));
    }
    let desc = OptimizerDesc {
        kind,
        tensors: (n_in - 2) / groups,
    };
    if cx.node.output.len() != desc.num_outputs() {
        return Err(cx.invalid(format!(
            "{} outputs, expected {}",
            cx.node.output.len(),
            desc.num_outputs()
        )));
    }
    Ok(Lowering::Steps(vec![Step {
        op: Op::Optimizer(desc),
        inputs: cx.data_inputs(n_in, 0)?,
        outputs: (0..desc.num_outputs()).map(Dst::Output).collect(),
        suffix: None,
    }]))
}

/// A scalar constant of a float type.
fn float_const(dtype: DataType, v: f64) -> Option<Src> {
    let t = match dtype {
        DataType::F32 => Tensor::scalar(v as f32),
        DataType::F64 => Tensor::scalar(v),
        DataType::F16 => super::elementwise::float_scalar(DataType::F16, v as f32)?,
        _ => return None,
    };
    Some(Src::Const(Arc::new(t)))
}

/// BatchNormalization with training_mode=1 (opset 14 on): the batch statistics normalize X,
/// and the running statistics are updated with `momentum`. Outputs Y, running_mean and
/// running_var (those named):
///
/// ```text
/// mean = ReduceMean(X, all axes but 1)      var = ReduceMean((X - mean)^2, same axes)
/// Y = (X - mean) / sqrt(var + epsilon) * scale + B
/// running_mean = input_mean * momentum + mean * (1 - momentum)   (running_var likewise)
/// ```
pub(super) fn batch_norm_training(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let epsilon = cx.attr(cx.attrs.float_or("epsilon", 1e-5))?;
    let momentum = cx.attr(cx.attrs.float_or("momentum", 0.9))?;
    let x = cx.info(0)?;
    let rank = x.shape.rank();
    if rank < 2 {
        return Err(cx.invalid(format!("X must have rank 2 or more, got {}", x.shape)));
    }
    let c = x.shape.dims()[1];
    let constant = |v: f64| {
        float_const(x.dtype, v).ok_or_else(|| {
            TxError::Unsupported(format!(
                "BatchNormalization training mode on {} is not supported",
                x.dtype
            ))
        })
    };
    let (eps, m, one_minus_m) = (
        constant(f64::from(epsilon))?,
        constant(f64::from(momentum))?,
        constant(1.0 - f64::from(momentum))?,
    );
    let mean = Op::Reduce(ReduceDesc {
        kind: ReduceKind::Mean,
        axes: std::iter::once(0).chain(2..rank as i64).collect(),
        keepdims: true,
        noop_with_empty_axes: false,
    });
    let mut column = vec![1usize; rank];
    column[1] = c;
    let step = |op: Op, inputs: Vec<Src>, out: Dst, suffix: &str| Step {
        op,
        inputs,
        outputs: vec![out],
        suffix: Some(suffix.to_string()),
    };
    let bin = |b: BinaryOp| Op::Binary(b);
    let mut steps = vec![
        step(mean.clone(), vec![Src::Input(0)], Dst::Temp(0), "mean"),
        step(
            bin(BinaryOp::Sub),
            vec![Src::Input(0), Src::Temp(0)],
            Dst::Temp(1),
            "centered",
        ),
        step(
            bin(BinaryOp::Mul),
            vec![Src::Temp(1), Src::Temp(1)],
            Dst::Temp(2),
            "square",
        ),
        step(mean, vec![Src::Temp(2)], Dst::Temp(3), "variance"),
        step(
            bin(BinaryOp::Add),
            vec![Src::Temp(3), eps],
            Dst::Temp(4),
            "variance_eps",
        ),
        step(
            Op::Unary(UnaryOp::Sqrt),
            vec![Src::Temp(4)],
            Dst::Temp(5),
            "std",
        ),
        step(
            bin(BinaryOp::Div),
            vec![Src::Temp(1), Src::Temp(5)],
            Dst::Temp(6),
            "normalized",
        ),
        step(
            Op::Reshape {
                shape: column.clone(),
            },
            vec![Src::Input(1)],
            Dst::Temp(7),
            "scale_column",
        ),
        step(
            Op::Reshape { shape: column },
            vec![Src::Input(2)],
            Dst::Temp(8),
            "bias_column",
        ),
        step(
            bin(BinaryOp::Mul),
            vec![Src::Temp(6), Src::Temp(7)],
            Dst::Temp(9),
            "scaled",
        ),
        Step {
            op: bin(BinaryOp::Add),
            inputs: vec![Src::Temp(9), Src::Temp(8)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ];
    // Running statistics: stat [1, C, 1, ...] → [C], then the momentum blend.
    for (k, (stat, input)) in [(0usize, 3usize), (3, 4)].into_iter().enumerate() {
        let out = k + 1;
        if !cx.output_named(out) {
            continue;
        }
        let t = 10 + 4 * k;
        let name = if k == 0 {
            "running_mean"
        } else {
            "running_var"
        };
        steps.push(step(
            Op::Reshape { shape: vec![c] },
            vec![Src::Temp(stat)],
            Dst::Temp(t),
            &format!("{name}_batch"),
        ));
        steps.push(step(
            bin(BinaryOp::Mul),
            vec![Src::Input(input), m.clone()],
            Dst::Temp(t + 1),
            &format!("{name}_kept"),
        ));
        steps.push(step(
            bin(BinaryOp::Mul),
            vec![Src::Temp(t), one_minus_m.clone()],
            Dst::Temp(t + 2),
            &format!("{name}_new"),
        ));
        steps.push(step(
            bin(BinaryOp::Add),
            vec![Src::Temp(t + 1), Src::Temp(t + 2)],
            Dst::Output(out),
            name,
        ));
    }
    if (0..5).any(|i| cx.input_name(i).is_none()) {
        return Err(cx.invalid("BatchNormalization takes 5 inputs"));
    }
    Ok(Lowering::Steps(steps))
}

//! QLinearConv, lowered onto existing layers:
//!
//! ```text
//! acc = Conv(x - x_zero_point, w - w_zero_point, B)      exact integers, computed in f32
//!       (each centered operand a DequantizeLinear with scale 1)
//! y   = QuantizeLinear(acc * (x_scale * w_scale / y_scale), scale 1, y_zero_point)
//! ```
//!
//! The weight scale and zero point may be per output channel; the others are per tensor.
//! The operands are 8-bit, so the centered products and their sums stay exact in f32 for
//! real layers (as for ConvInteger); the output is rounded half to even and saturated, as
//! QuantizeLinear specifies.

use super::{Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use backplane_core::ops::BinaryOp;
use backplane_core::{DataType, Op, Tensor};
use std::sync::Arc;

/// QLinearConv (opset 10 on). Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point,
/// y_scale, y_zero_point, optional B (i32).
pub(super) fn qlinear_conv(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(10)?;
    let conv = super::nn::conv_desc_with_weights(cx, 3)?;
    let x = cx.info(0)?;
    let w = cx.info(3)?;
    let m = w.shape.dims().first().copied().unwrap_or(0);
    for (i, what) in [(1usize, "x_scale"), (6, "y_scale")] {
        if cx.info(i)?.shape.elements() != 1 {
            return Err(TxError::Unsupported(format!(
                "QLinearConv with a per-channel {what} is not supported"
            )));
        }
    }
    for i in [2usize, 7] {
        if cx.input_name(i).is_some() && cx.info(i)?.shape.elements() != 1 {
            return Err(TxError::Unsupported(
                "QLinearConv with per-channel input or output zero points is not supported".into(),
            ));
        }
    }
    let per_channel = |i: usize| -> Tx<bool> {
        let n = cx.info(i)?.shape.elements();
        if n == 1 {
            Ok(false)
        } else if n == m {
            Ok(true)
        } else {
            Err(cx.invalid(format!("input #{i} has {n} values for {m} output channels")))
        }
    };
    let mut steps = Vec::new();
    let mut next = 0;
    let mut temp = || {
        next += 1;
        next - 1
    };
    let mut push = |op: Op, inputs: Vec<Src>, out: usize, suffix: &str| {
        steps.push(Step {
            op,
            inputs,
            outputs: vec![Dst::Temp(out)],
            suffix: Some(suffix.to_string()),
        });
        Src::Temp(out)
    };
    let widen = Op::Cast {
        to: DataType::F32,
        saturate: true,
    };
    // Centered operands: DequantizeLinear with scale 1 gives `q - zero_point` exactly, and
    // keeps the 8-bit weights visible to a backend's quantized kernels (CpuAcc folds this
    // chain into one int8 convolution).
    let mut centered = Vec::new();
    for (v, zp, axis, name) in [(0usize, 2usize, 1i64, "x"), (3, 5, 0, "w")] {
        let ones = if cx.input_name(zp).is_some() && cx.info(zp)?.shape.elements() != 1 {
            if v == 3 {
                per_channel(zp)?;
            }
            let z = cx.info(zp)?;
            Tensor::from_vec(z.shape.clone(), vec![1.0f32; z.shape.elements()])
                .map_err(|e| cx.invalid(e.to_string()))?
        } else {
            Tensor::scalar(1.0f32)
        };
        let mut inputs = vec![Src::Input(v), Src::Const(Arc::new(ones))];
        if cx.input_name(zp).is_some() {
            inputs.push(Src::Input(zp));
        }
        centered.push(push(
            Op::DequantizeLinear {
                axis,
                to: DataType::F32,
                block_size: 0,
            },
            inputs,
            temp(),
            &format!("{name}_centered"),
        ));
    }
    if cx.input_name(8).is_some() {
        let b = cx.info(8)?;
        if b.dtype != DataType::I32 {
            return Err(cx.invalid(format!("B must be an i32 tensor, got {}", b.dtype)));
        }
        centered.push(push(widen.clone(), vec![Src::Input(8)], temp(), "bias_f32"));
    }
    let acc = push(Op::Conv(conv), centered, temp(), "conv");
    // The requantization multiplier, [1, M, 1, ...] when the weight scale is per channel.
    let xw = push(
        Op::Binary(BinaryOp::Mul),
        vec![Src::Input(1), Src::Input(4)],
        temp(),
        "scale_product",
    );
    let mut mult = push(
        Op::Binary(BinaryOp::Div),
        vec![xw, Src::Input(6)],
        temp(),
        "multiplier",
    );
    if per_channel(4)? {
        let mut shape = vec![1; x.shape.rank()];
        if shape.len() < 2 {
            return Err(cx.invalid(format!("x must have rank 3 or more, got {}", x.shape)));
        }
        shape[1] = m;
        mult = push(
            Op::Reshape { shape },
            vec![mult],
            temp(),
            "multiplier_column",
        );
    } else if cx.info(4)?.shape.rank() > 0 {
        mult = push(
            Op::Reshape { shape: vec![] },
            vec![mult],
            temp(),
            "multiplier_scalar",
        );
    }
    let scaled = push(Op::Binary(BinaryOp::Mul), vec![acc, mult], temp(), "scaled");
    let to = if cx.input_name(7).is_some() {
        cx.info(7)?.dtype
    } else {
        x.dtype
    };
    let mut inputs = vec![scaled, Src::Const(Arc::new(Tensor::scalar(1.0f32)))];
    if cx.input_name(7).is_some() {
        inputs.push(Src::Input(7));
    }
    steps.push(Step {
        op: Op::QuantizeLinear {
            axis: 1,
            to,
            block_size: 0,
            saturate: true,
            requant: backplane_core::quant::Requantization::F32,
        },
        inputs,
        outputs: vec![Dst::Output(0)],
        suffix: None,
    });
    Ok(Lowering::Steps(steps))
}

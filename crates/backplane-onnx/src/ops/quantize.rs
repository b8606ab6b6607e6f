//! Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the
//! integer matrix products lowered onto them (QLinearMatMul, MatMulInteger).

use super::{Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use backplane_core::ops::BinaryOp;
use backplane_core::{DataType, Op};

/// Opset 21's `block_size` (0: per tensor or per axis).
fn block_size(cx: &NodeCx<'_>) -> Tx<usize> {
    let b = cx.attr(cx.attrs.int_or("block_size", 0))?;
    usize::try_from(b).map_err(|_| cx.invalid(format!("block_size {b} is negative")))
}

/// The types QuantizeLinear can produce.
const QUANTIZED: [DataType; 10] = [
    DataType::U8,
    DataType::I8,
    DataType::U16,
    DataType::I16,
    DataType::U4,
    DataType::I4,
    DataType::F8E4M3Fn,
    DataType::F8E4M3Fnuz,
    DataType::F8E5M2,
    DataType::F8E5M2Fnuz,
];

pub(super) fn quantize_linear(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let block_size = block_size(cx)?;
    let axis = cx.attr(cx.attrs.int_or("axis", 1))?;
    // Opset 19's `saturate` (float8 results only; default 1).
    let saturate = cx.attr(cx.attrs.flag("saturate", true))?;
    let to = if cx.input_name(2).is_some() {
        cx.info(2)?.dtype
    } else {
        match cx.attr(cx.attrs.int_or("output_dtype", 0))? {
            0 => DataType::U8,
            code => DataType::from_onnx_code(code)
                .filter(|d| QUANTIZED.contains(d))
                .ok_or_else(|| {
                    TxError::Unsupported(format!("output_dtype {code} is not supported"))
                })?,
        }
    };
    Ok(Lowering::single(
        Op::QuantizeLinear {
            axis,
            to,
            block_size,
            saturate,
            requant: backplane_core::quant::Requantization::F32,
        },
        cx.data_inputs(2, 1)?,
    ))
}

pub(super) fn dequantize_linear(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let block_size = block_size(cx)?;
    let axis = cx.attr(cx.attrs.int_or("axis", 1))?;
    let to = cx.info(1)?.dtype;
    Ok(Lowering::single(
        Op::DequantizeLinear {
            axis,
            to,
            block_size,
        },
        cx.data_inputs(2, 1)?,
    ))
}

pub(super) fn dynamic_quantize_linear(_cx: &NodeCx<'_>) -> Tx<Lowering> {
    Ok(Lowering::Steps(vec![Step {
        op: Op::DynamicQuantizeLinear,
        inputs: vec![Src::Input(0)],
        outputs: vec![Dst::Output(0), Dst::Output(1), Dst::Output(2)],
        suffix: None,
    }]))
}

/// QLinearMatMul: dequantize both operands to f32, multiply, quantize the product.
pub(super) fn qlinear_matmul(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let a_axis = if cx.info(0)?.shape.rank() >= 2 { -2 } else { 0 };
    let to = cx.info(7)?.dtype;
    let deq = |axis| Op::DequantizeLinear {
        axis,
        to: DataType::F32,
        block_size: 0,
    };
    Ok(Lowering::Steps(vec![
        Step {
            op: deq(a_axis),
            inputs: vec![Src::Input(0), Src::Input(1), Src::Input(2)],
            outputs: vec![Dst::Temp(0)],
            suffix: Some("a".into()),
        },
        Step {
            op: deq(-1),
            inputs: vec![Src::Input(3), Src::Input(4), Src::Input(5)],
            outputs: vec![Dst::Temp(1)],
            suffix: Some("b".into()),
        },
        Step {
            op: Op::MatMul,
            inputs: vec![Src::Temp(0), Src::Temp(1)],
            outputs: vec![Dst::Temp(2)],
            suffix: Some("matmul".into()),
        },
        Step {
            op: Op::QuantizeLinear {
                axis: -1,
                to,
                block_size: 0,
                saturate: true,
                requant: backplane_core::quant::Requantization::F32,
            },
            inputs: vec![Src::Temp(2), Src::Input(6), Src::Input(7)],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        },
    ]))
}

/// MatMulInteger: widen to i32, subtract the (per-tensor) zero points, multiply.
pub(super) fn matmul_integer(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let mut steps = Vec::new();
    for (k, (x, zp)) in [(0usize, 2usize), (1, 3)].into_iter().enumerate() {
        steps.push(Step {
            op: Op::Cast {
                to: DataType::I32,
                saturate: true,
            },
            inputs: vec![Src::Input(x)],
            outputs: vec![Dst::Temp(2 * k)],
            suffix: Some(format!("widen{k}")),
        });
        if cx.input_name(zp).is_some() {
            if cx.info(zp)?.shape.elements() != 1 {
                return Err(TxError::Unsupported(
                    "per-row or per-column zero points are not supported".into(),
                ));
            }
            steps.push(Step {
                op: Op::Cast {
                    to: DataType::I32,
                    saturate: true,
                },
                inputs: vec![Src::Input(zp)],
                outputs: vec![Dst::Temp(2 * k + 4)],
                suffix: Some(format!("zero_point{k}")),
            });
            steps.push(Step {
                op: Op::Binary(BinaryOp::Sub),
                inputs: vec![Src::Temp(2 * k), Src::Temp(2 * k + 4)],
                outputs: vec![Dst::Temp(2 * k + 1)],
                suffix: Some(format!("centered{k}")),
            });
        } else {
            steps.push(Step {
                op: Op::Identity,
                inputs: vec![Src::Temp(2 * k)],
                outputs: vec![Dst::Temp(2 * k + 1)],
                suffix: Some(format!("centered{k}")),
            });
        }
    }
    steps.push(Step {
        op: Op::MatMul,
        inputs: vec![Src::Temp(1), Src::Temp(3)],
        outputs: vec![Dst::Output(0)],
        suffix: None,
    });
    Ok(Lowering::Steps(steps))
}

/// ConvInteger: both operands less their zero points (a per-output-channel weight zero point
/// included), convolved exactly in f32 (integer products and sums stay below 2^24 for the
/// 8-bit operands of real layers; CpuRef accumulates in f64) and cast back to i32.
pub(super) fn conv_integer(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let conv = match super::nn::conv(cx)? {
        Lowering::Steps(mut steps) if steps.len() == 1 => steps.remove(0).op,
        _ => return Err(cx.invalid("unexpected Conv lowering")),
    };
    let w = cx.info(1)?;
    let mut steps = Vec::new();
    let mut next = 0;
    let mut temp = || {
        next += 1;
        next - 1
    };
    let mut centered = Vec::new();
    for (k, (x, zp)) in [(0usize, 2usize), (1, 3)].into_iter().enumerate() {
        let widened = temp();
        steps.push(Step {
            op: Op::Cast {
                to: DataType::F32,
                saturate: true,
            },
            inputs: vec![Src::Input(x)],
            outputs: vec![Dst::Temp(widened)],
            suffix: Some(format!("widen{k}")),
        });
        if cx.input_name(zp).is_none() {
            centered.push(Src::Temp(widened));
            continue;
        }
        let z = cx.info(zp)?;
        let zf = temp();
        steps.push(Step {
            op: Op::Cast {
                to: DataType::F32,
                saturate: true,
            },
            inputs: vec![Src::Input(zp)],
            outputs: vec![Dst::Temp(zf)],
            suffix: Some(format!("zero_point{k}")),
        });
        let mut zsrc = Src::Temp(zf);
        if z.shape.elements() != 1 {
            // Per output channel: [M] → [M, 1, ...] against W [M, C/group, k...].
            let m = w.shape.dims().first().copied().unwrap_or(0);
            if k == 0 || z.shape.dims() != [m] {
                return Err(TxError::Unsupported(format!(
                    "zero point of shape {} is not supported",
                    z.shape
                )));
            }
            let mut shape = vec![1; w.shape.rank()];
            shape[0] = m;
            let r = temp();
            steps.push(Step {
                op: Op::Reshape { shape },
                inputs: vec![zsrc],
                outputs: vec![Dst::Temp(r)],
                suffix: Some("zero_point_column".into()),
            });
            zsrc = Src::Temp(r);
        }
        let c = temp();
        steps.push(Step {
            op: Op::Binary(BinaryOp::Sub),
            inputs: vec![Src::Temp(widened), zsrc],
            outputs: vec![Dst::Temp(c)],
            suffix: Some(format!("centered{k}")),
        });
        centered.push(Src::Temp(c));
    }
    let product = temp();
    steps.push(Step {
        op: conv,
        inputs: centered,
        outputs: vec![Dst::Temp(product)],
        suffix: Some("conv".into()),
    });
    steps.push(Step {
        op: Op::Cast {
            to: DataType::I32,
            saturate: true,
        },
        inputs: vec![Src::Temp(product)],
        outputs: vec![Dst::Output(0)],
        suffix: None,
    });
    Ok(Lowering::Steps(steps))
}

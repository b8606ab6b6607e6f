//! Elementwise operators: activations, math, binary and variadic arithmetic.

use super::{Dst, Lowering, NodeCx, Src, Step, Tx, TxError};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{DataType, Op, Tensor, TensorInfo};
use std::sync::Arc;

pub(super) fn unary(_cx: &NodeCx<'_>, op: UnaryOp) -> Tx<Lowering> {
    Ok(Lowering::single(Op::Unary(op), vec![Src::Input(0)]))
}

pub(super) fn gelu(cx: &NodeCx<'_>) -> Tx<Lowering> {
    cx.require_opset(20)?;
    let tanh_approximation = match cx.attr(cx.attrs.string_or("approximate", "none"))?.as_str() {
        "none" => false,
        "tanh" => true,
        other => {
            return Err(cx.invalid(format!(
                "approximate must be 'none' or 'tanh', got '{other}'"
            )))
        }
    };
    unary(cx, UnaryOp::Gelu { tanh_approximation })
}

pub(super) fn clip(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let (min, max) = if cx.opset < 11 {
        // Clip 6: absent bounds default to the lowest and highest f32.
        (
            cx.attr(cx.attrs.float_or("min", f32::MIN))?,
            cx.attr(cx.attrs.float_or("max", f32::MAX))?,
        )
    } else {
        // Clip 11+: absent bounds mean no clipping on that side.
        (
            cx.const_scalar(1, "min")?
                .map_or(f32::NEG_INFINITY, |v| v as f32),
            cx.const_scalar(2, "max")?
                .map_or(f32::INFINITY, |v| v as f32),
        )
    };
    unary(cx, UnaryOp::Clip { min, max })
}

pub(super) fn binary(_cx: &NodeCx<'_>, op: BinaryOp) -> Tx<Lowering> {
    Ok(Lowering::single(
        Op::Binary(op),
        vec![Src::Input(0), Src::Input(1)],
    ))
}

/// Round an f32 to the nearest f16 (ties to even); the bits of the result.
pub(crate) fn f32_to_f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        // Inf or NaN.
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal or zero in f16.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = u32::from(rem > mid || (rem == mid && half & 1 == 1));
        return sign | (half + round) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let round = u32::from(rem > 0x1000 || (rem == 0x1000 && half & 1 == 1));
    sign | (half + round) as u16
}

/// A scalar constant of a float type.
pub(crate) fn float_scalar(dtype: DataType, v: f32) -> Option<Tensor> {
    match dtype {
        DataType::F32 => Some(Tensor::scalar(v)),
        DataType::F16 => Tensor::from_bytes(
            TensorInfo::new(DataType::F16, Vec::<usize>::new()),
            &f32_to_f16_bits(v).to_le_bytes(),
        )
        .ok(),
        _ => None,
    }
}

/// Max, Min, Sum (as Add) and Mean: a chain of binary layers; one input is an Identity.
pub(super) fn variadic(cx: &NodeCx<'_>, op: BinaryOp, mean: bool) -> Tx<Lowering> {
    let n = cx.num_inputs();
    if n == 0 || (0..n).any(|i| cx.input_name(i).is_none()) {
        return Err(cx.invalid("needs at least one input and no empty input names"));
    }
    if n == 1 {
        return Ok(Lowering::single(Op::Identity, vec![Src::Input(0)]));
    }
    let mut steps = Vec::with_capacity(n);
    let mut acc = Src::Input(0);
    for i in 1..n {
        let last = i == n - 1 && !mean;
        let out = if last {
            Dst::Output(0)
        } else {
            Dst::Temp(i - 1)
        };
        steps.push(Step {
            op: Op::Binary(op),
            inputs: vec![acc, Src::Input(i)],
            outputs: vec![out],
            suffix: (!last).then(|| format!("{}{i}", op.name().to_lowercase())),
        });
        acc = Src::Temp(i - 1);
    }
    if mean {
        let dtype = cx.info(0)?.dtype;
        let divisor = float_scalar(dtype, n as f32).ok_or_else(|| {
            TxError::Unsupported(format!("Mean of {dtype} inputs is not supported"))
        })?;
        steps.push(Step {
            op: Op::Binary(BinaryOp::Div),
            inputs: vec![acc, Src::Const(Arc::new(divisor))],
            outputs: vec![Dst::Output(0)],
            suffix: None,
        });
    }
    Ok(Lowering::Steps(steps))
}

#[cfg(test)]
mod tests {
    use super::f32_to_f16_bits;

    #[test]
    fn f16_conversion() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(3.0), 0x4200);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(1.0e6), 0x7c00);
        assert_eq!(f32_to_f16_bits(0.0), 0);
        assert_eq!(f32_to_f16_bits(5.960_464_5e-8), 0x0001);
        assert_eq!(f32_to_f16_bits(f32::NEG_INFINITY), 0xfc00);
        // 1 + 2^-11 is a tie between 1.0 and the next f16: round to even (1.0).
        assert_eq!(f32_to_f16_bits(1.0 + 1.0 / 2048.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 / 2048.0), 0x3c02);
    }
}

//! Which requantization rule a model's int8 convolutions and fully connected layers follow.
//!
//! LiteRT runs an int8 model through its XNNPACK delegate, whose requantization is f32
//! ([`Requantization::F32`]), unless the delegate refuses the model; then its builtin kernels
//! run, and they requantize with gemmlowp's fixed point ([`Requantization::FixedPoint`]).
//! `scripts/probe_tflite_q8_builtin.py` found one refusal a model shows: a convolution
//! (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) whose requantization scale
//! `x_scale · w_scale / y_scale` (formed in f32) reaches 256 for some output channel, which
//! XNNPACK's int8 convolution and fully connected operators do not take. Other refusals
//! (e.g. of other operators' scale ranges) are not checked; `--int8-requant` overrides.

use crate::model::{Model, TensorDef};
use crate::ops::code_name;
use backplane_core::quant::{requant_scale, Requantization};
use backplane_core::{DataType, Quantization};

/// The smallest requantization scale XNNPACK's int8 convolutions refuse.
pub(crate) const XNNPACK_MAX_SCALE: f32 = 256.0;

/// Why LiteRT would run `model` on its builtin kernels: the first convolution whose
/// requantization scale XNNPACK refuses, described; None when there is none.
pub(crate) fn xnnpack_refusal(model: &Model<'_>) -> Option<String> {
    model.operators.iter().enumerate().find_map(|(index, op)| {
        let name = code_name(&op.code);
        if !matches!(
            name.as_str(),
            "CONV_2D" | "DEPTHWISE_CONV_2D" | "FULLY_CONNECTED"
        ) {
            return None;
        }
        let tensor =
            |k: Option<&Option<usize>>| k.copied().flatten().and_then(|t| model.tensors.get(t));
        let x = tensor(op.inputs.first())?;
        let w = tensor(op.inputs.get(1))?;
        let y = op.outputs.first().and_then(|&t| model.tensors.get(t))?;
        let scale = largest_scale(x, w, y)?;
        (scale >= XNNPACK_MAX_SCALE).then(|| {
            format!(
                "operator #{index} ({name}, output '{}') has requantization scale \
                     {scale} (≥ {XNNPACK_MAX_SCALE}), which LiteRT's XNNPACK delegate refuses",
                y.name
            )
        })
    })
}

/// The rule LiteRT's results for `model` follow: fixed point when XNNPACK refuses it.
pub(crate) fn litert_rule(model: &Model<'_>) -> (Requantization, Option<String>) {
    match xnnpack_refusal(model) {
        Some(why) => (Requantization::FixedPoint, Some(why)),
        None => (Requantization::F32, None),
    }
}

/// The largest `x_scale · w_scale / y_scale` over output channels of an 8-bit layer with
/// per-tensor x and y; None when the layer is not one.
fn largest_scale(x: &TensorDef<'_>, w: &TensorDef<'_>, y: &TensorDef<'_>) -> Option<f32> {
    let eight = |d: &TensorDef<'_>| matches!(d.dtype, Some(DataType::I8 | DataType::U8));
    if !(eight(x) && eight(w) && eight(y)) {
        return None;
    }
    let per_tensor = |d: &TensorDef<'_>| match d.quant {
        Quantization::PerTensor { scale, .. } => Some(scale),
        _ => None,
    };
    let (sx, sy) = (per_tensor(x)?, per_tensor(y)?);
    let sw: &[f32] = match &w.quant {
        Quantization::PerTensor { scale, .. } => std::slice::from_ref(scale),
        Quantization::PerAxis { scales, .. } => scales,
        Quantization::None => return None,
    };
    sw.iter()
        .map(|&s| requant_scale(sx, s, sy))
        .filter(|s| s.is_finite())
        .reduce(f32::max)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::borrow::Cow;

    fn def(dtype: DataType, quant: Quantization) -> TensorDef<'static> {
        TensorDef {
            name: "t".into(),
            dtype: Some(dtype),
            type_name: String::new(),
            shape: vec![1],
            data: None::<Cow<'static, [u8]>>,
            quant,
        }
    }

    fn pt(scale: f32) -> Quantization {
        Quantization::PerTensor {
            scale,
            zero_point: 0,
        }
    }

    #[test]
    fn the_largest_channel_scale_decides() {
        let x = def(DataType::I8, pt(0.5));
        let y = def(DataType::I8, pt(1e-3));
        let w = |scales: Vec<f32>| {
            def(
                DataType::I8,
                Quantization::PerAxis {
                    axis: 0,
                    zero_points: vec![0; scales.len()],
                    scales,
                },
            )
        };
        // 0.5 · 0.2 / 0.001 = 100, 0.5 · 0.6 / 0.001 = 300.
        let s = largest_scale(&x, &w(vec![0.2, 0.6]), &y).unwrap();
        assert!((s - 300.0).abs() < 1e-3, "{s}");
        assert!(largest_scale(&x, &w(vec![0.2]), &y).unwrap() < XNNPACK_MAX_SCALE);
        // f32 layers and unquantized weights are not int8 convolutions.
        let f = def(DataType::F32, Quantization::None);
        assert_eq!(largest_scale(&f, &w(vec![0.2]), &y), None);
        assert_eq!(
            largest_scale(&x, &def(DataType::I8, Quantization::None), &y),
            None
        );
    }
}

//! Layer support: CpuAcc claims only what it runs fast (f32 compute ops, data movement);
//! everything else is refused with a reason so the optimizer hands it to the next backend.

use crate::act::FromOp as _;
use crate::fusion;
use backplane_backend_api::{LayerDesc, LayerSupport, Support};
use backplane_core::ops::PoolKind;
use backplane_core::{DataType, Op, Quantization, TensorInfo};

/// CpuAcc's layer-support oracle.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuAccLayerSupport;

impl LayerSupport for CpuAccLayerSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match check(layer) {
            Ok(()) => Support::Supported,
            Err(reason) => Support::no(reason),
        }
    }
}

fn all_f32(op: &Op, inputs: &[TensorInfo]) -> Result<(), String> {
    for (slot, i) in inputs.iter().enumerate() {
        if i.dtype != DataType::F32 {
            return Err(format!(
                "{} input {slot} is {}; CpuAcc computes {} on f32 only",
                op.name(),
                i.dtype,
                op.name()
            ));
        }
    }
    Ok(())
}

/// Why CpuAcc cannot run `layer`, if it cannot.
pub fn check(layer: &LayerDesc) -> Result<(), String> {
    let op = &layer.op;
    if let Some(slot) = layer
        .inputs
        .iter()
        .position(|i| i.quant != Quantization::None)
    {
        return Err(format!(
            "{} input {slot} is quantized; CpuAcc runs plain tensors only",
            op.name()
        ));
    }
    if let Op::Custom(custom) = op {
        return fusion::check_custom(custom, layer);
    }
    let refs: Vec<&TensorInfo> = layer.inputs.iter().collect();
    let inferred = op.infer(&refs).map_err(|e| e.to_string())?;
    if inferred.len() != layer.outputs.len()
        || inferred
            .iter()
            .zip(&layer.outputs)
            .any(|(a, b)| !a.same_layout(b))
    {
        return Err(format!(
            "{} outputs are declared differently from what CpuAcc computes",
            op.name()
        ));
    }
    let dims = |slot: usize| {
        layer
            .inputs
            .get(slot)
            .map(|i| i.shape.dims().to_vec())
            .unwrap_or_default()
    };
    match op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Transpose { .. } => Ok(()),
        Op::Slice(_)
        | Op::Gather { .. }
        | Op::Where
        | Op::Expand { .. }
        | Op::Tile { .. }
        | Op::Pad(_)
        | Op::Split { .. } => crate::movement::check(layer),
        Op::Cast { .. } => crate::cast::check(layer),
        Op::Concat { .. } => {
            if layer
                .inputs
                .iter()
                .all(|i| i.dtype == layer.inputs[0].dtype)
            {
                Ok(())
            } else {
                Err("Concat inputs of different types".into())
            }
        }
        Op::Unary(_)
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNormalization { .. }
        | Op::Binary(_) => all_f32(op, &layer.inputs),
        Op::BinaryExt(b) => match crate::elementwise::Bin::from_ext(*b) {
            Some(_) => all_f32(op, &layer.inputs),
            None => Err(format!("CpuAcc does not implement {}", b.name())),
        },
        Op::Math(m) => match crate::act::Activation::from_math(*m) {
            Some(_) => all_f32(op, &layer.inputs),
            None => Err(format!("CpuAcc does not implement {}", m.name())),
        },
        Op::ArgReduce(desc) => {
            all_f32(op, &layer.inputs)?;
            let d = dims(0);
            let a = backplane_core::shape::normalize_axis(desc.axis, d.len())
                .map_err(|e| e.to_string())?;
            if d[a] == 0 {
                return Err("ArgMax/ArgMin over an empty axis".into());
            }
            Ok(())
        }
        Op::InstanceNormalization { .. } => {
            all_f32(op, &layer.inputs)?;
            if dims(0).len() < 2 {
                return Err("InstanceNormalization needs rank >= 2".into());
            }
            Ok(())
        }
        Op::BatchNormalization { .. } => {
            all_f32(op, &layer.inputs)?;
            if dims(0).len() < 2 {
                return Err("BatchNormalization needs rank >= 2".into());
            }
            Ok(())
        }
        Op::Conv(desc) => {
            all_f32(op, &layer.inputs)?;
            crate::conv::check(desc, &dims(0), &dims(1))
        }
        Op::ConvTranspose(desc) => {
            all_f32(op, &layer.inputs)?;
            let bias = (layer.inputs.len() > 2).then(|| dims(2));
            crate::conv_transpose::check(desc, &dims(0), &dims(1), bias.as_deref())
        }
        Op::Resize(desc) => {
            all_f32(op, &layer.inputs)?;
            crate::resize::check(desc, &dims(0))
        }
        Op::MatMul | Op::Gemm(_) => all_f32(op, &layer.inputs),
        Op::Pool(desc) => {
            all_f32(op, &layer.inputs)?;
            crate::ops::check_pool(desc, &dims(0)).map(|_| ())
        }
        Op::GlobalPool(PoolKind::Average | PoolKind::Max) => all_f32(op, &layer.inputs),
        Op::Rnn(desc) => crate::recurrent::check(desc, layer),
        Op::Reduce(desc) => {
            all_f32(op, &layer.inputs)?;
            crate::reduce::ReducePlan::new(desc, &dims(0)).map(|_| ())
        }
        other => Err(format!("CpuAcc does not implement {}", other.name())),
    }
}

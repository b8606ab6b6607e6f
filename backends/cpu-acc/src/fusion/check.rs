//! Whether CpuAcc runs a fused layer: its payload decoded and checked against the layer's
//! inputs and output.

use super::payload::{ConvLayout, ConvSpec, Fused};
use crate::matmul::{MatMulViews, StridedView};
use crate::CPU_ACC_ID;
use backplane_backend_api::LayerDesc;
use backplane_core::ops::{CustomOp, PoolKind};
use backplane_core::{DataType, Op, TensorInfo};

/// The payload of this custom layer, when CpuAcc runs it; why not otherwise.
pub fn check_custom(c: &CustomOp, layer: &LayerDesc) -> Result<Fused, String> {
    if c.domain != CPU_ACC_ID {
        return Err(format!(
            "custom operator '{}' of domain '{}' is not CpuAcc's",
            c.op_type, c.domain
        ));
    }
    if layer.outputs.len() != 1 || c.outputs.len() != 1 {
        return Err(format!("{} has one output", c.op_type));
    }
    let fused = Fused::decode(c)?;
    check(&fused, &layer.inputs, &layer.outputs[0])?;
    Ok(fused)
}

/// Check `fused` against its inputs and output.
fn check(fused: &Fused, inputs: &[TensorInfo], output: &TensorInfo) -> Result<(), String> {
    let refs: Vec<&TensorInfo> = inputs.iter().collect();
    let inferred = match fused {
        Fused::ConvPair { first, second, mid } => {
            return check_pair(first, second, mid, inputs, output)
        }
        Fused::Conv(spec) => conv_output(spec, &refs, output)?,
        Fused::ConvMaxPool { conv, pool } => {
            let plain = !conv.residual && conv.pre.is_none() && conv.layout == ConvLayout::Nchw;
            if !plain || pool.kind != PoolKind::Max {
                return Err("FusedConvMaxPool is an NCHW convolution and a max pooling".into());
            }
            if !(2..=3).contains(&refs.len()) {
                return Err("FusedConvMaxPool takes X, W and B".into());
            }
            let dims = |s: usize| refs[s].shape.dims().to_vec();
            crate::conv::check(&conv.desc, &dims(0), &dims(1))?;
            let conv_out = Op::Conv(conv.desc.clone())
                .infer(&refs[..refs.len().min(3)])
                .map_err(|e| e.to_string())?;
            let [conv_out] = conv_out.as_slice() else {
                return Err("FusedConvMaxPool's convolution has one output".into());
            };
            Op::Pool(pool.clone())
                .infer(&[conv_out])
                .map_err(|e| e.to_string())?
        }
        Fused::MatMul { views, .. } => check_fused_matmul(views, &refs, output)?,
        Fused::Gemm { desc, .. } => Op::Gemm(*desc).infer(&refs).map_err(|e| e.to_string())?,
        Fused::AddLayerNorm { axis, epsilon } => match refs.as_slice() {
            [a, b, params @ ..] if a.same_layout(b) && !params.is_empty() => {
                let mut norm_in = vec![*a];
                norm_in.extend(params);
                // Only the normalized output (not the optional mean and deviation).
                let norm = Op::LayerNormalization {
                    axis: *axis,
                    epsilon: *epsilon,
                };
                let mut o = norm.infer(&norm_in).map_err(|e| e.to_string())?;
                o.truncate(1);
                o
            }
            _ => return Err("FusedAddLayerNorm takes A, B of one shape, scale, bias?".into()),
        },
        Fused::BatchNorm { epsilon, .. } => Op::BatchNormalization { epsilon: *epsilon }
            .infer(&refs)
            .map_err(|e| e.to_string())?,
    };
    let op_type = fused.op_type();
    if inputs.iter().any(|i| i.dtype != DataType::F32) {
        return Err(format!("{op_type} runs on f32 only"));
    }
    if inferred.len() != 1 || !inferred[0].same_layout(output) {
        return Err(format!("{op_type} output description differs"));
    }
    Ok(())
}

/// A `FusedConvPair`: each half a valid channels-last convolution, the pair one of the two
/// shapes the pair workload runs.
fn check_pair(
    first: &ConvSpec,
    second: &ConvSpec,
    mid: &TensorInfo,
    inputs: &[TensorInfo],
    output: &TensorInfo,
) -> Result<(), String> {
    let (x, w1, b1, w2, b2, r) = match inputs {
        [x, w1, b1, w2, b2] => (x, w1, b1, w2, b2, None),
        [x, w1, b1, w2, b2, r] => (x, w1, b1, w2, b2, Some(r)),
        _ => return Err("FusedConvPair takes X, W1, B1, W2, B2 and, with a residual, R".into()),
    };
    if second.residual != r.is_some() {
        return Err("FusedConvPair takes R when its second convolution has a residual".into());
    }
    check(
        &Fused::Conv(first.clone()),
        &[x.clone(), w1.clone(), b1.clone()],
        mid,
    )?;
    let second_inputs: Vec<TensorInfo> = [mid.clone(), w2.clone(), b2.clone()]
        .into_iter()
        .chain(r.cloned())
        .collect();
    check(&Fused::Conv(second.clone()), &second_inputs, output)?;
    let order = crate::conv::nhwc::pair_order(&first.desc, &second.desc, mid);
    let fits = match order {
        Some(crate::conv::nhwc::PairOrder::Expansion) => !second.residual,
        Some(crate::conv::nhwc::PairOrder::Projection) => true,
        None => false,
    };
    if first.residual || !fits {
        return Err(
            "FusedConvPair is a pointwise and a depthwise convolution, either \
                    on the other's output, only the projection with a residual"
                .into(),
        );
    }
    Ok(())
}

/// The output description a `FusedConv` infers from its inputs, after checking them.
fn conv_output(
    spec: &ConvSpec,
    refs: &[&TensorInfo],
    output: &TensorInfo,
) -> Result<Vec<TensorInfo>, String> {
    let desc = &spec.desc;
    let dims = |s: usize| {
        refs.get(s)
            .map(|i| i.shape.dims().to_vec())
            .unwrap_or_default()
    };
    let x_nchw = match spec.layout {
        ConvLayout::Nhwc => crate::conv::nhwc::to_nchw(&dims(0)),
        ConvLayout::Nchw | ConvLayout::NchwToNhwc => dims(0),
    };
    crate::conv::check(desc, &x_nchw, &dims(1))?;
    if let Some(pre) = &spec.pre {
        let channels = x_nchw.get(1).copied();
        let sized = |v: &[f32]| Some(v.len()) == channels;
        if spec.layout != ConvLayout::Nchw || !sized(&pre.scale) || !sized(&pre.shift) {
            return Err("a FusedConv's input normalization is NCHW, one value a channel".into());
        }
    }
    if spec.residual {
        if refs.len() != 4 || refs[3].dtype != DataType::F32 {
            return Err("FusedConv with a residual takes X, W, B and R".into());
        }
        if !refs[3].same_layout(output) {
            return Err("FusedConv residual must have the output's shape".into());
        }
    } else if refs.len() > 3 {
        return Err("FusedConv takes X, W and B".into());
    }
    let conv = Op::Conv(desc.clone());
    let inferred = if spec.layout == ConvLayout::Nchw {
        conv.infer(&refs[..refs.len().min(3)])
    } else {
        let channels_out = dims(1).first().copied().unwrap_or(0);
        if x_nchw.len() != 4 || !crate::conv::nhwc::applies(desc, x_nchw[1], channels_out) {
            return Err("FusedConv runs channels-last in 2-D, one group or depthwise".into());
        }
        let x = TensorInfo::new(refs[0].dtype, x_nchw);
        let mut with_x = vec![&x];
        with_x.extend(&refs[1..refs.len().min(3)]);
        conv.infer(&with_x).map(|mut o| {
            for i in &mut o {
                i.shape = crate::conv::nhwc::to_nhwc(i.shape.dims()).into();
            }
            o
        })
    };
    inferred.map_err(|e| e.to_string())
}

/// The output description of a `FusedMatMul` with these inputs, checked against `output`.
fn check_fused_matmul(
    views: &MatMulViews,
    inputs: &[&TensorInfo],
    output: &TensorInfo,
) -> Result<Vec<TensorInfo>, String> {
    let seen = |v: &Option<StridedView>, slot: usize| -> Result<TensorInfo, String> {
        let i = inputs.get(slot).ok_or("FusedMatMul takes A and B")?;
        match v {
            None => Ok((*i).clone()),
            Some(v) if v.extent() <= i.shape.elements() => {
                Ok(TensorInfo::new(i.dtype, v.dims.clone()))
            }
            Some(_) => Err("a FusedMatMul operand view reaches past its input".into()),
        }
    };
    let (a, b) = (seen(&views.a, 0)?, seen(&views.b, 1)?);
    if let Some(bias) = inputs.get(2) {
        let n = b.shape.dims().last().copied();
        if bias.shape.dims().len() != 1 || Some(bias.shape.dims()[0]) != n {
            return Err("FusedMatMul bias must be 1-D of N values".into());
        }
    }
    let product = Op::MatMul.infer(&[&a, &b]).map_err(|e| e.to_string())?;
    let Some(y) = &views.y else {
        return Ok(product);
    };
    let dims = product.first().map(|p| p.shape.dims()).unwrap_or_default();
    let unit_last = dims.last().is_none_or(|&n| n <= 1) || y.strides.last() == Some(&1);
    if y.dims != dims || !unit_last || !y.fills(output.shape.elements()) {
        return Err("the FusedMatMul result view does not fill its output".into());
    }
    Ok(vec![output.clone()])
}

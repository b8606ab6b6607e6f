//! Normalizations with what surrounds them: the residual sum before a transformer's
//! LayerNormalization, the activation after a BatchNormalization.

use super::conv::{fuse_conv_with, Pre};
use super::payload::{Fused, PreNorm};
use super::{follow_act, names, single_output, Graph};
use crate::act::Activation;
use backplane_backend_api::patterns::batch_norm_affine;
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::{AutoPad, BinaryOp, ConvDesc};
use backplane_core::{DataType, LayerId, Op, TensorId};

/// `Add(a, b) → LayerNormalization` with `a` and `b` of one shape and the sum used by the
/// normalization alone.
pub(super) fn fuse_add_layer_norm(g: &Graph<'_>, id: LayerId) -> Option<Substitution> {
    let net = g.view().network();
    let add = net.layer(id);
    let [a, b] = add.inputs.as_slice() else {
        return None;
    };
    let sum = single_output(g, id)?;
    let info = |t: TensorId| &net.tensor(t).info;
    if !info(*a).same_layout(info(*b)) || !info(*a).same_layout(info(sum)) {
        return None;
    }
    let norm = g.sole_reader(sum)?;
    let layer = net.layer(norm);
    let Op::LayerNormalization { axis, epsilon } = layer.op else {
        return None;
    };
    let (out, params) = match (layer.outputs.as_slice(), layer.inputs.split_first()) {
        ([out], Some((&x, params))) if x == sum && !params.contains(&sum) => (*out, params),
        _ => return None,
    };
    if !g.supported(norm) {
        return None;
    }
    let mut inputs = vec![ValueRef::Existing(*a), ValueRef::Existing(*b)];
    inputs.extend(params.iter().map(|&t| ValueRef::Existing(t)));
    let replaced = vec![id, norm];
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Fused::AddLayerNorm { axis, epsilon }.encode(info(out).clone()),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

/// `BatchNormalization → activation` with the normalized tensor used by the activation alone
/// (a convolution's BatchNormalization is folded into it by `conv` first). When the
/// activation's sole reader is a 1×1 convolution it folds into ([`pointwise_reader`]), the
/// three become one `FusedConv` with the normalization as its [`PreNorm`] (with whatever
/// `conv::fuse_conv` fuses after the convolution).
pub(super) fn fuse_batch_norm_act(
    g: &Graph<'_>,
    id: LayerId,
    epsilon: f32,
) -> Option<Substitution> {
    let net = g.view().network();
    let norm = net.layer(id);
    let normed = single_output(g, id)?;
    let (act_layers, act, out) = follow_act(g, normed)?;
    let mut replaced = vec![id];
    replaced.extend(act_layers);
    let channels = net.tensor(*norm.inputs.get(1)?).info.shape.elements();
    if let Some((conv, desc)) = pointwise_reader(g, channels, out) {
        if let Some(affine) = constant_affine(g, id, epsilon) {
            let (scale, shift) = affine;
            let pre = Pre {
                x: *norm.inputs.first()?,
                layers: replaced.clone(),
                norm: PreNorm { scale, shift, act },
            };
            if let Some(sub) = fuse_conv_with(g, conv, &desc, Some(pre)) {
                return Some(sub);
            }
        }
    }
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Fused::BatchNorm { epsilon, act }.encode(net.tensor(out).info.clone()),
            inputs: norm.inputs.iter().map(|&t| ValueRef::Existing(t)).collect(),
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

/// `Mul(x, scale) → Add(shift) [→ activation]` with `scale` and `shift` constants of one
/// value per channel of the NCHW f32 `x` (a BatchNormalization as TFLite writes it: DenseNet's
/// pre-activation blocks), read by a 1×1 convolution alone: one `FusedConv` with the map as
/// its [`PreNorm`], as [`fuse_batch_norm_act`] makes of a BatchNormalization. The map runs
/// as `x·scale + shift` rounded after the product and after the sum, as the two layers
/// round. Left alone when no such convolution reads it.
pub(super) fn fuse_affine_act(g: &Graph<'_>, id: LayerId) -> Option<Substitution> {
    let net = g.view().network();
    let x_info = |t: TensorId| &net.tensor(t).info;
    let mul = net.layer(id);
    let (x, scale) = per_channel_operand(g, &mul.inputs)?;
    let xi = x_info(x);
    let channels = *xi.shape.dims().get(1)?;
    let scaled = single_output(g, id)?;
    if xi.dtype != DataType::F32 || xi.shape.rank() != 4 || x_info(scaled).shape != xi.shape {
        return None;
    }
    let add = g.sole_reader(scaled)?;
    let add_layer = net.layer(add);
    if add_layer.op != Op::Binary(BinaryOp::Add) || !g.supported(id) || !g.supported(add) {
        return None;
    }
    let (from, shift) = per_channel_operand(g, &add_layer.inputs)?;
    let shifted = single_output(g, add)?;
    if from != scaled
        || x_info(shifted).shape != xi.shape
        || [&scale, &shift].iter().any(|v| v.len() != channels)
    {
        return None;
    }
    let mut layers = vec![id, add];
    let (act, out) = match follow_act(g, shifted) {
        Some((act_layers, act, out)) => {
            layers.extend(act_layers);
            (act, out)
        }
        None => (Activation::None, shifted),
    };
    let (conv, desc) = pointwise_reader(g, channels, out)?;
    let pre = Pre {
        x,
        layers,
        norm: PreNorm { scale, shift, act },
    };
    fuse_conv_with(g, conv, &desc, Some(pre))
}

/// Of a binary layer's two inputs, the tensor and the constant f32 operand of one value per
/// channel of it (shape `[C, 1, 1]` or `[1, C, 1, 1]`, broadcasting along axis 1 of an NCHW
/// tensor): the tensor and the values.
fn per_channel_operand(g: &Graph<'_>, inputs: &[TensorId]) -> Option<(TensorId, Vec<f32>)> {
    let [a, b] = inputs else {
        return None;
    };
    let (t, c) = match (g.constant(*a), g.constant(*b)) {
        (None, Some(c)) => (*a, c),
        (Some(c), None) => (*b, c),
        _ => return None,
    };
    let dims = c.shape().dims();
    let lead = dims.len().checked_sub(3)?;
    let per_channel =
        dims.len() <= 4 && dims[..lead].iter().all(|&d| d == 1) && dims[lead + 1..] == [1, 1];
    if !per_channel || c.dtype() != DataType::F32 {
        return None;
    }
    Some((t, c.as_slice::<f32>().ok()?.to_vec()))
}

/// The affine map of BatchNormalization `id` (its parameters all constants of one value per
/// channel), computed as `crate::ops::BatchNormWorkload` computes it.
fn constant_affine(g: &Graph<'_>, id: LayerId, epsilon: f32) -> Option<(Vec<f32>, Vec<f32>)> {
    let net = g.view().network();
    let params: Vec<&[f32]> = net
        .layer(id)
        .inputs
        .iter()
        .skip(1)
        .map(|&t| g.constant(t).and_then(|c| c.as_slice::<f32>().ok()))
        .collect::<Option<_>>()?;
    let [s, b, m, v] = params.as_slice() else {
        return None;
    };
    let channels = s.len();
    if [b, m, v].iter().any(|p| p.len() != channels) {
        return None;
    }
    Some(batch_norm_affine(s, b, m, v, epsilon))
}

/// The convolution reading `t` (the activation after a normalization of `channels`
/// parameters) alone, when the normalization folds into it: 1×1, stride 1, no padding, one
/// group, constant weights, an f32 NCHW input of that many channels. Returns it and its
/// description.
fn pointwise_reader(g: &Graph<'_>, channels: usize, t: TensorId) -> Option<(LayerId, ConvDesc)> {
    let net = g.view().network();
    let conv = g.sole_reader(t)?;
    let layer = net.layer(conv);
    let Op::Conv(desc) = &layer.op else {
        return None;
    };
    let (&x, w) = (layer.inputs.first()?, *layer.inputs.get(1)?);
    let wd = g.constant(w)?.shape().dims();
    let xi = &net.tensor(x).info;
    let ones = |v: &[usize]| v.iter().all(|&d| d == 1);
    let unpadded = match desc.window.auto_pad {
        AutoPad::NotSet => desc.window.pads.iter().all(|&p| p == 0),
        AutoPad::Valid => true,
        _ => ones(&desc.window.kernel),
    };
    let fits = x == t
        && g.supported(conv)
        && xi.dtype == DataType::F32
        && xi.shape.rank() == 4
        && xi.shape.dims().get(1) == Some(&channels)
        && desc.group <= 1
        && desc.window.kernel.len() == 2
        && ones(&desc.window.kernel)
        && ones(&desc.window.strides)
        && ones(&desc.window.dilations)
        && unpadded
        && wd.len() == 4
        && wd.get(1) == Some(&channels)
        && ones(wd.get(2..).unwrap_or_default());
    fits.then(|| (conv, desc.clone()))
}

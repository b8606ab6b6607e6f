//! Convolution patterns: `Conv [→ BatchNormalization] [→ Add(residual)] [→ activation]`.

use super::payload::{ConvLayout, ConvSpec, Fused, PreNorm};
use super::{follow_act, names, single_output, Graph};
use crate::act::Activation;
use backplane_backend_api::patterns::fold_batch_norm_after;
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::{AutoPad, ConvDesc, PadDesc, PadMode, PoolDesc};
use backplane_core::{LayerId, Op, Tensor, TensorId, TensorKind};
use std::sync::Arc;

/// Follow a residual addition after `t`: `Add(t, r)` or `Add(r, t)` with `r` of `t`'s type
/// and shape (no broadcasting). Returns the Add, `r` and the sum.
fn follow_residual(g: &Graph<'_>, t: TensorId) -> Option<(LayerId, TensorId, TensorId)> {
    let net = g.view().network();
    let next = g.sole_reader(t)?;
    let layer = net.layer(next);
    if layer.op != Op::Binary(backplane_core::ops::BinaryOp::Add) || !g.supported(next) {
        return None;
    }
    let r = match layer.inputs.as_slice() {
        [a, r] if *a == t && *r != t => *r,
        [r, a] if *a == t && *r != t => *r,
        _ => return None,
    };
    let (ti, ri) = (&net.tensor(t).info, &net.tensor(r).info);
    if !ri.same_layout(ti) || ri.dtype != backplane_core::DataType::F32 {
        return None;
    }
    Some((next, r, single_output(g, next)?))
}

/// A max pooling reading `t` (the output of the convolution `desc` of `x` by the constant
/// weights `w`, activation `act` applied) alone, where the two run as one layer
/// (`crate::conv::stem_pool::applies`): the pooling layer, its description and its output.
fn follow_max_pool(
    g: &Graph<'_>,
    x: TensorId,
    w: TensorId,
    desc: &ConvDesc,
    act: Activation,
    t: TensorId,
) -> Option<(LayerId, PoolDesc, TensorId)> {
    let net = g.view().network();
    let next = g.sole_reader(t)?;
    let Op::Pool(pool) = &net.layer(next).op else {
        return None;
    };
    g.constant(w)?;
    let (xd, wd) = (
        net.tensor(x).info.shape.dims(),
        net.tensor(w).info.shape.dims(),
    );
    let fits = g.supported(next)
        && net.tensor(x).info.dtype == backplane_core::DataType::F32
        && crate::conv::stem_pool::applies(desc, xd, wd, act, pool);
    fits.then(|| Some((next, pool.clone(), single_output(g, next)?)))?
}

/// A zero `Pad` of the two spatial axes before the 2-D convolution `id` (how TensorFlow
/// exports a strided convolution's padding), read by the convolution alone: the Pad, its
/// input, and the convolution's description with the padding added to its own pads.
fn fold_pad_before(
    g: &Graph<'_>,
    id: LayerId,
    desc: &ConvDesc,
) -> Option<(LayerId, TensorId, ConvDesc)> {
    let net = g.view().network();
    let x = *net.layer(id).inputs.first()?;
    let TensorKind::Produced { layer: pad, .. } = net.tensor(x).kind else {
        return None;
    };
    if g.sole_reader(x) != Some(id) || !g.available(pad) || !g.supported(pad) {
        return None;
    }
    let Op::Pad(PadDesc {
        mode: PadMode::Constant,
        pads,
        value,
    }) = &net.layer(pad).op
    else {
        return None;
    };
    // [N, C, H, W]: nothing added to the batch or the channels, nothing cut anywhere.
    let [0, 0, ph, pw, 0, 0, eh, ew] = pads.as_slice() else {
        return None;
    };
    let added = [*ph, *pw, *eh, *ew].map(|v| usize::try_from(v).ok());
    let [Some(ph), Some(pw), Some(eh), Some(ew)] = added else {
        return None;
    };
    let src = *net.layer(pad).inputs.first()?;
    if *value != 0.0 || desc.window.kernel.len() != 2 {
        return None;
    }
    let own = match desc.window.auto_pad {
        AutoPad::NotSet if desc.window.pads.len() == 4 => desc.window.pads.clone(),
        AutoPad::NotSet if desc.window.pads.is_empty() => vec![0; 4],
        AutoPad::Valid => vec![0; 4],
        _ => return None,
    };
    let mut folded = desc.clone();
    folded.window.auto_pad = AutoPad::NotSet;
    folded.window.pads = vec![own[0] + ph, own[1] + pw, own[2] + eh, own[3] + ew];
    Some((pad, src, folded))
}

/// The constants of BatchNormalization `bn` after its input (scale, bias, mean, variance),
/// each `None` where it is not a constant.
fn norm_constants<'g>(
    g: &'g Graph<'_>,
    bn: LayerId,
) -> impl Iterator<Item = Option<&'g Arc<Tensor>>> + 'g {
    let net = g.view().network();
    net.layer(bn).inputs.iter().skip(1).map(|&t| g.constant(t))
}

/// Note that `folded` is convolution `conv`'s weights with BatchNormalization `bn` folded in
/// (`crate::weights::derived`): folded anew in every plan, its packing is keyed by the
/// original weights and the normalization's constants and epsilon, and so shared.
fn note_folded(g: &Graph<'_>, conv: LayerId, bn: LayerId, folded: &Arc<Tensor>) {
    let net = g.view().network();
    let Op::BatchNormalization { epsilon } = net.layer(bn).op else {
        return;
    };
    let Some(w) = net.layer(conv).inputs.get(1).and_then(|&t| g.constant(t)) else {
        return;
    };
    if let Some(params) = norm_constants(g, bn).collect::<Option<Vec<_>>>() {
        let eps = epsilon.to_bits() as usize;
        crate::weights::derived(folded, w, &params, "batch_norm", &[eps]);
    }
}

/// The weights `w` and bias `b` of convolution `conv` with BatchNormalization `bn` folded
/// in, as the tensors the first plan that folded the same constants made
/// (`crate::weights::shared_from`, keyed by the weights, the normalization's constants, the
/// convolution's bias and the epsilon; held by the plans' networks, weakly by the cache):
/// every plan's network then holds one copy, not its own (each plan still computes the fold
/// to match the layers). Where an operand is not a constant, `w` and `b` themselves. `None`
/// only where the cache fails, which it does not for a form made without error.
fn shared_fold(
    g: &Graph<'_>,
    conv: LayerId,
    bn: LayerId,
    w: Tensor,
    b: Tensor,
) -> Option<(Arc<Tensor>, Arc<Tensor>)> {
    let net = g.view().network();
    let Op::BatchNormalization { epsilon } = net.layer(bn).op else {
        return Some((Arc::new(w), Arc::new(b)));
    };
    let inputs = &net.layer(conv).inputs;
    let source = inputs.get(1).and_then(|&t| g.constant(t));
    let bias = inputs.get(2).map(|&t| g.constant(t));
    let params: Option<Vec<&Arc<Tensor>>> = norm_constants(g, bn).chain(bias).collect();
    let (Some(source), Some(others)) = (source, params) else {
        return Some((Arc::new(w), Arc::new(b)));
    };
    let key = [epsilon.to_bits() as usize, others.len()];
    let shared =
        |kind, t: Tensor| crate::weights::shared_from(source, &others, kind, &key, || Ok(t)).ok();
    Some((
        shared("batch_norm_weights", w)?,
        shared("batch_norm_bias", b)?,
    ))
}

/// A normalization before a convolution, folded into it ([`PreNorm`]): the tensor it
/// normalizes, the layers it replaces (a BatchNormalization and its activation) and the map.
pub(super) struct Pre {
    /// The normalization's input: the fused convolution's X.
    pub x: TensorId,
    /// The layers the map stands for.
    pub layers: Vec<LayerId>,
    /// The map.
    pub norm: PreNorm,
}

/// The fused convolution starting at Conv layer `id`, when something follows it to fuse
/// (or a zero Pad precedes it).
pub(super) fn fuse_conv(g: &Graph<'_>, id: LayerId, desc: &ConvDesc) -> Option<Substitution> {
    fuse_conv_with(g, id, desc, None)
}

/// [`fuse_conv`], with a normalization of its input folded in when `pre` is given (then the
/// convolution is fused even with nothing after it, and no Pad or max pooling joins).
pub(super) fn fuse_conv_with(
    g: &Graph<'_>,
    id: LayerId,
    desc: &ConvDesc,
    pre: Option<Pre>,
) -> Option<Substitution> {
    let net = g.view().network();
    let layer = net.layer(id);
    let mut out = single_output(g, id)?;
    let mut replaced = vec![id];
    let mut x = *layer.inputs.first()?;
    let mut desc = desc.clone();
    let pre = match pre {
        Some(p) => {
            replaced = p.layers;
            replaced.push(id);
            x = p.x;
            Some(p.norm)
        }
        None => {
            if let Some((pad, src, folded)) = fold_pad_before(g, id, &desc) {
                replaced.push(pad);
                x = src;
                desc = folded;
            }
            None
        }
    };
    let mut weights: Option<(Arc<Tensor>, Arc<Tensor>)> = None;
    // BatchNormalization with constant parameters, folded into the weights.
    if let Some((bn, bn_out, w, b)) = fold_batch_norm_after(g, id) {
        let (w, b) = shared_fold(g, id, bn, w, b)?;
        note_folded(g, id, bn, &w);
        weights = Some((w, b));
        replaced.push(bn);
        out = bn_out;
    }
    let mut act = Activation::None;
    let mut residual = None;
    if let Some((layers, a, t)) = follow_act(g, out) {
        act = a;
        replaced.extend(layers);
        out = t;
    } else if let Some((add, r, t)) = follow_residual(g, out) {
        residual = Some(r);
        replaced.push(add);
        out = t;
        if let Some((layers, a, t)) = follow_act(g, out) {
            act = a;
            replaced.extend(layers);
            out = t;
        }
    }
    // A first layer's max pooling joins it (`crate::conv::stem_pool`).
    let pool = match residual {
        None if pre.is_none() => {
            follow_max_pool(g, x, layer.inputs.get(1).copied()?, &desc, act, out)
        }
        _ => None,
    };
    if let Some((pool_layer, _, t)) = &pool {
        replaced.push(*pool_layer);
        out = *t;
    }
    if replaced.len() == 1 {
        return None;
    }
    let mut inputs = match weights {
        Some((w, b)) => vec![
            ValueRef::Existing(x),
            ValueRef::NewConstant(w),
            ValueRef::NewConstant(b),
        ],
        None => std::iter::once(x)
            .chain(layer.inputs.iter().skip(1).copied())
            .map(ValueRef::Existing)
            .collect(),
    };
    if let Some(r) = residual {
        // The residual is input 3, so a convolution without a bias gets a zero one.
        if inputs.len() == 2 {
            let m = *net.tensor(layer.inputs[1]).info.shape.dims().first()?;
            let zeros = Tensor::from_vec(vec![m], vec![0f32; m]).ok()?;
            inputs.push(ValueRef::NewConstant(Arc::new(zeros)));
        }
        inputs.push(ValueRef::Existing(r));
    }
    let info = net.tensor(out).info.clone();
    let spec = ConvSpec {
        desc,
        act,
        residual: residual.is_some(),
        layout: ConvLayout::Nchw,
        pre,
    };
    let op = match pool {
        Some((_, pool, _)) => Fused::ConvMaxPool { conv: spec, pool },
        None => Fused::Conv(spec),
    };
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: op.encode(info),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

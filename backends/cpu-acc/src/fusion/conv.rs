//! Convolution patterns: `Conv [→ BatchNormalization] [→ Add(residual)] [→ activation]`.

use super::payload::{ConvLayout, ConvSpec, Fused};
use super::{follow_act, names, single_output, Graph};
use crate::act::Activation;
use backplane_backend_api::patterns::fold_batch_norm_after;
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::ConvDesc;
use backplane_core::{LayerId, Op, Tensor, TensorId};
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

/// The fused convolution starting at Conv layer `id`, when something follows it to fuse.
pub(super) fn fuse_conv(g: &Graph<'_>, id: LayerId, desc: &ConvDesc) -> Option<Substitution> {
    let net = g.view().network();
    let layer = net.layer(id);
    let mut out = single_output(g, id)?;
    let mut replaced = vec![id];
    let mut weights: Option<(Tensor, Tensor)> = None;
    // BatchNormalization with constant parameters, folded into the weights.
    if let Some((bn, bn_out, w, b)) = fold_batch_norm_after(g, id) {
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
    if replaced.len() == 1 {
        return None;
    }
    let mut inputs = match weights {
        Some((w, b)) => vec![
            ValueRef::Existing(layer.inputs[0]),
            ValueRef::NewConstant(Arc::new(w)),
            ValueRef::NewConstant(Arc::new(b)),
        ],
        None => layer
            .inputs
            .iter()
            .map(|&t| ValueRef::Existing(t))
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
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Fused::Conv(ConvSpec {
                desc: desc.clone(),
                act,
                residual: residual.is_some(),
                layout: ConvLayout::Nchw,
            })
            .encode(info),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

//! Convolution patterns: `Conv [→ BatchNormalization] [→ Add(residual)] [→ activation]`.

use super::payload::{ConvLayout, ConvSpec, Fused};
use super::{follow_act, names, single_output, Graph};
use crate::act::Activation;
use crate::ops::bn_affine;
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::ConvDesc;
use backplane_core::{LayerId, Op, Tensor, TensorId};
use std::sync::Arc;

/// Follow a residual addition after `t`: `Add(t, r)` or `Add(r, t)` with `r` of `t`'s type
/// and shape (no broadcasting). Returns the Add, `r` and the sum.
fn follow_residual(g: &Graph<'_>, t: TensorId) -> Option<(LayerId, TensorId, TensorId)> {
    let net = g.view.network();
    let next = g.sole_consumer(t)?;
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
    let net = g.view.network();
    let layer = net.layer(id);
    let mut out = single_output(g, id)?;
    let mut replaced = vec![id];
    let mut weights: Option<(Tensor, Tensor)> = None;
    // BatchNormalization with constant parameters, folded into the weights.
    if let Some(next) = g.sole_consumer(out) {
        let bn = net.layer(next);
        if let Op::BatchNormalization { epsilon } = bn.op {
            let params: Option<Vec<&Arc<Tensor>>> =
                bn.inputs[1..].iter().map(|&t| g.constant(t)).collect();
            let w = layer.inputs.get(1).and_then(|&t| g.constant(t));
            if let (Some(p), Some(w), true) = (params, w, g.supported(next)) {
                let b = layer.inputs.get(2).and_then(|&t| g.constant(t));
                if let Some(folded) = fold_bn(w, b.map(|a| &**a), &p, epsilon) {
                    weights = Some(folded);
                    replaced.push(next);
                    out = single_output(g, next)?;
                }
            }
        }
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

/// Fold `y = bn(conv(x, w) + b)` into new weights and bias.
fn fold_bn(
    w: &Tensor,
    b: Option<&Tensor>,
    params: &[&Arc<Tensor>],
    eps: f32,
) -> Option<(Tensor, Tensor)> {
    let [scale, bias, mean, var] = params else {
        return None;
    };
    let (mul, add) = bn_affine(
        scale.as_slice().ok()?,
        bias.as_slice().ok()?,
        mean.as_slice().ok()?,
        var.as_slice().ok()?,
        eps,
    );
    let wv = w.as_slice::<f32>().ok()?;
    let m = *w.shape().dims().first()?;
    if mul.len() != m || m == 0 {
        return None;
    }
    let per = wv.len() / m;
    let new_w: Vec<f32> = wv
        .iter()
        .enumerate()
        .map(|(i, &v)| v * mul[i / per])
        .collect();
    let old_b: Vec<f32> = match b {
        Some(t) => t.as_slice::<f32>().ok()?.to_vec(),
        None => vec![0.0; m],
    };
    let new_b: Vec<f32> = (0..m).map(|i| old_b[i].mul_add(mul[i], add[i])).collect();
    Some((
        Tensor::from_vec(w.shape().clone(), new_w).ok()?,
        Tensor::from_vec(vec![m], new_b).ok()?,
    ))
}

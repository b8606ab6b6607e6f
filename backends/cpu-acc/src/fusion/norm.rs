//! Normalizations with what surrounds them: the residual sum before a transformer's
//! LayerNormalization, the activation after a BatchNormalization.

use super::payload::Fused;
use super::{follow_act, names, single_output, Graph};
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::{LayerId, Op, TensorId};

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
/// (a convolution's BatchNormalization is folded into it by `conv` first).
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

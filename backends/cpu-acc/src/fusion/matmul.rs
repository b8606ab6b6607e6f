//! MatMul and Gemm patterns: the product with its scale, bias and activation, its operands
//! read and its result written through the Transposes and Reshapes around it.

use super::payload::Fused;
use super::{follow_act, names, single_output, Graph};
use crate::act::Activation;
use crate::matmul::{MatMulViews, StridedView};
use backplane_backend_api::patterns::{binary_with_scalar, match_erf_gelu};
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::GemmDesc;
use backplane_core::{LayerId, Op, Tensor, TensorId, TensorKind};
use std::sync::Arc;

/// A layer that keeps its input's bytes and changes only the dims.
fn is_reshape(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
    )
}

/// The layer computing `t`, when `t` is used by `user` alone, is not a network output, and
/// the layer is inside, unused and supported.
fn sole_producer(g: &Graph<'_>, t: TensorId, user: LayerId) -> Option<LayerId> {
    let net = g.view().network();
    let TensorKind::Produced { layer, .. } = net.tensor(t).kind else {
        return None;
    };
    let only_user = matches!(g.readers(t), [(l, _)] if *l == user);
    (only_user && !net.outputs().contains(&t) && g.available(layer) && g.supported(layer))
        .then_some(layer)
}

/// Operand `t` of MatMul `matmul` read through the `[Reshape →] Transpose…` chain that
/// computes it: the tensor to read instead, how, and the chain's layers. `None` when no
/// Transpose computes `t`.
fn fold_operand(
    g: &Graph<'_>,
    t: TensorId,
    matmul: LayerId,
) -> Option<(TensorId, StridedView, Vec<LayerId>)> {
    let net = g.view().network();
    let (mut cur, mut user) = (t, matmul);
    let (mut perms, mut layers) = (Vec::new(), Vec::new());
    while let Some(p) = sole_producer(g, cur, user) {
        let l = net.layer(p);
        match (&l.op, l.inputs.as_slice()) {
            (Op::Transpose { perm }, [x]) => {
                perms.push(perm.clone());
                layers.push(p);
                (cur, user) = (*x, p);
            }
            _ => break,
        }
    }
    if perms.is_empty() {
        return None;
    }
    // Strides over the bytes of the first Transpose's input, which a Reshape before it
    // shares with its own input.
    let mut view = StridedView::row_major(net.tensor(cur).info.shape.dims());
    if let Some(p) = sole_producer(g, cur, user) {
        let l = net.layer(p);
        if let (true, Some(&x)) = (is_reshape(&l.op), l.inputs.first()) {
            layers.push(p);
            cur = x;
        }
    }
    for perm in perms.iter().rev() {
        view = view.transposed(perm)?;
    }
    Some((cur, view, layers))
}

/// The result `t` of a MatMul written through the `Transpose [→ Reshape]` after it, when the
/// Transpose keeps the last axis last: the view of the final tensor the result is written
/// through, the layers, and the final tensor.
fn fold_result(g: &Graph<'_>, t: TensorId) -> Option<(StridedView, Vec<LayerId>, TensorId)> {
    let net = g.view().network();
    let next = g.sole_reader(t)?;
    let Op::Transpose { perm } = &net.layer(next).op else {
        return None;
    };
    let dims = net.tensor(t).info.shape.dims();
    let r = dims.len();
    if !g.supported(next) || perm.len() != r || perm.last().copied() != r.checked_sub(1) {
        return None;
    }
    // Axis perm[j] of the result is axis j of the transposed tensor.
    let permuted = StridedView::row_major(
        &perm
            .iter()
            .map(|&p| dims.get(p).copied())
            .collect::<Option<Vec<_>>>()?,
    );
    let mut strides = vec![0; r];
    for (j, &p) in perm.iter().enumerate() {
        *strides.get_mut(p)? = permuted.strides[j];
    }
    let view = StridedView {
        dims: dims.to_vec(),
        strides,
    };
    let mut out = single_output(g, next)?;
    let mut layers = vec![next];
    if let Some(after) = g.sole_reader(out) {
        if is_reshape(&net.layer(after).op) && g.supported(after) {
            layers.push(after);
            out = single_output(g, after)?;
        }
    }
    view.fills(net.tensor(out).info.shape.elements())
        .then_some((view, layers, out))
}

/// The fused MatMul around MatMul layer `id`, when something around it folds in.
pub(super) fn fuse_matmul(g: &Graph<'_>, id: LayerId) -> Option<Substitution> {
    use backplane_core::ops::BinaryOp::{Add, Div, Mul};
    let net = g.view().network();
    let layer = net.layer(id);
    let mut out = single_output(g, id)?;
    let out_info = net.tensor(out).info.clone();
    let n = *out_info.shape.dims().last()?;
    let (mut a, mut b) = (*layer.inputs.first()?, *layer.inputs.get(1)?);
    if net.tensor(b).info.shape.rank() < 2 || out_info.shape.rank() < 2 {
        return None;
    }
    let mut views = MatMulViews::default();
    // The operands' chains come first in the fused name, in network order.
    let mut replaced = Vec::new();
    if let Some((src, view, layers)) = fold_operand(g, a, id) {
        (a, views.a) = (src, Some(view));
        replaced.extend(layers.iter().rev());
    }
    if let Some((src, view, layers)) = fold_operand(g, b, id) {
        (b, views.b) = (src, Some(view));
        replaced.extend(layers.iter().rev());
    }
    replaced.push(id);
    // A scale straight after the product (attention's 1/√d).
    if let Some(next) = g.sole_reader(out) {
        let scale = binary_with_scalar(g, next, Mul, out).or_else(|| {
            binary_with_scalar(g, next, Div, out)
                .filter(|&v| v != 0.0)
                .map(|v| 1.0 / v)
        });
        let next_out = single_output(g, next);
        if let (Some(s), Some(t)) = (scale, next_out) {
            if net.tensor(t).info.same_layout(&out_info) {
                views.alpha = s;
                replaced.push(next);
                out = t;
            }
        }
    }
    let mut bias: Option<Tensor> = None;
    if let Some(next) = g.sole_reader(out) {
        let add = net.layer(next);
        if add.op == Op::Binary(Add) && g.supported(next) {
            let other = add.inputs.iter().copied().find(|&t| t != out);
            let c = other.and_then(|t| g.constant(t));
            let add_out = single_output(g, next)?;
            if let Some(c) = c {
                let cd = c.shape().dims();
                let row = cd.last() == Some(&n) && cd.iter().rev().skip(1).all(|&d| d == 1);
                if row && net.tensor(add_out).info.same_layout(&out_info) {
                    bias = Tensor::from_vec(vec![n], c.as_slice::<f32>().ok()?.to_vec()).ok();
                    replaced.push(next);
                    out = add_out;
                }
            }
        }
    }
    let mut act = Activation::None;
    if let Some((layers, t)) = match_erf_gelu(g, out) {
        act = Activation::Gelu {
            tanh_approximation: false,
        };
        replaced.extend(layers);
        out = t;
    } else if let Some((layers, a, t)) = follow_act(g, out) {
        act = a;
        replaced.extend(layers);
        out = t;
    }
    if let Some((view, layers, t)) = fold_result(g, out) {
        views.y = Some(view);
        replaced.extend(layers);
        out = t;
    }
    if replaced.len() == 1 {
        return None;
    }
    let mut inputs = vec![ValueRef::Existing(a), ValueRef::Existing(b)];
    if let Some(b) = bias {
        inputs.push(ValueRef::NewConstant(Arc::new(b)));
    }
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Fused::MatMul { views, act }.encode(net.tensor(out).info.clone()),
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

/// Gemm layer `id` and the activation after it.
pub(super) fn fuse_gemm(g: &Graph<'_>, id: LayerId, desc: GemmDesc) -> Option<Substitution> {
    let net = g.view().network();
    let layer = net.layer(id);
    let out = single_output(g, id)?;
    let (layers, act, t) = follow_act(g, out)?;
    let replaced: Vec<LayerId> = std::iter::once(id).chain(layers).collect();
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: Fused::Gemm { desc, act }.encode(net.tensor(t).info.clone()),
            inputs: layer
                .inputs
                .iter()
                .map(|&x| ValueRef::Existing(x))
                .collect(),
            outputs: vec![Some(t)],
        }],
        replaced,
    })
}

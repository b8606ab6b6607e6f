//! The exporters' erf GELU subgraph after a MatMul, and the scalar-operand matching it needs.

use super::{single_output, Graph};
use backplane_core::{LayerId, Op, TensorId};

/// The scalar value of a constant tensor with one element.
fn scalar(g: &Graph<'_>, t: TensorId) -> Option<f32> {
    match g.constant(t)?.as_slice::<f32>().ok()? {
        [v] => Some(*v),
        _ => None,
    }
}

/// Layer `id` is `op(t, c)` or `op(c, t)` (for commutative `op`) with a scalar constant `c`.
pub(super) fn binary_with_scalar(
    g: &Graph<'_>,
    id: LayerId,
    op: backplane_core::ops::BinaryOp,
    t: TensorId,
) -> Option<f32> {
    let layer = g.view.network().layer(id);
    if layer.op != Op::Binary(op) || !g.supported(id) {
        return None;
    }
    match layer.inputs.as_slice() {
        [a, c] if *a == t => scalar(g, *c),
        [c, a] if *a == t && op != backplane_core::ops::BinaryOp::Div => scalar(g, *c),
        _ => None,
    }
}

fn near(v: f32, want: f32) -> bool {
    (v - want).abs() <= 1e-6 * want.abs().max(1.0)
}

/// The exporters' GELU subgraph on `h`: `0.5·h·(1 + erf(h/√2))` in either multiplication
/// order. Returns its layers and output.
pub(super) fn match_gelu(g: &Graph<'_>, h: TensorId) -> Option<(Vec<LayerId>, TensorId)> {
    use backplane_core::ops::BinaryOp::{Add, Div, Mul};
    let net = g.view.network();
    if net.outputs().contains(&h) {
        return None;
    }
    let users: Vec<LayerId> = g.consumers.get(h.0)?.iter().map(|(l, _)| *l).collect();
    if users.len() != 2
        || users
            .iter()
            .any(|l| !g.inside.contains(l) || g.used.contains(l))
    {
        return None;
    }
    let is_scale = |id: LayerId| {
        binary_with_scalar(g, id, Div, h).is_some_and(|v| near(v, std::f32::consts::SQRT_2))
            || binary_with_scalar(g, id, Mul, h)
                .is_some_and(|v| near(v, std::f32::consts::FRAC_1_SQRT_2))
    };
    let (scale, other) = if is_scale(users[0]) {
        (users[0], users[1])
    } else if is_scale(users[1]) {
        (users[1], users[0])
    } else {
        return None;
    };
    let erf = g.sole_consumer(single_output(g, scale)?)?;
    if net.layer(erf).op != Op::Unary(backplane_core::ops::UnaryOp::Erf) || !g.supported(erf) {
        return None;
    }
    let erf_out = single_output(g, erf)?;
    let plus = g.sole_consumer(erf_out)?;
    if !binary_with_scalar(g, plus, Add, erf_out).is_some_and(|v| near(v, 1.0)) {
        return None;
    }
    let plus_out = single_output(g, plus)?;
    let other_out = single_output(g, other)?;
    let is_mul_of = |id: LayerId, a: TensorId, b: TensorId| {
        let l = net.layer(id);
        l.op == Op::Binary(Mul)
            && g.supported(id)
            && (l.inputs.as_slice() == [a, b] || l.inputs.as_slice() == [b, a])
    };
    let last = if binary_with_scalar(g, other, Mul, h).is_some_and(|v| near(v, 0.5)) {
        // (0.5·h)·(1 + erf)
        let last = g.sole_consumer(other_out)?;
        (g.sole_consumer(plus_out) == Some(last) && is_mul_of(last, other_out, plus_out))
            .then_some(last)?
    } else if is_mul_of(other, h, plus_out) && g.sole_consumer(plus_out) == Some(other) {
        // (h·(1 + erf))·0.5
        let last = g.sole_consumer(other_out)?;
        binary_with_scalar(g, last, Mul, other_out)
            .is_some_and(|v| near(v, 0.5))
            .then_some(last)?
    } else {
        return None;
    };
    Some((vec![scale, erf, plus, other, last], single_output(g, last)?))
}

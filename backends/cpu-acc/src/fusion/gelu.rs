//! The exporters' GELU subgraphs: the erf one after a MatMul, the tanh one (GPT-2's
//! `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`) anywhere, and the scalar-operand matching
//! they need.

use super::{names, single_output, Graph};
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::UnaryOp;
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

/// √(2/π), the tanh GELU's inner scale.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// The tanh GELU subgraph around Pow layer `pow` (its `x³`), replaced by one
/// `Gelu(approximate = tanh)` layer: eight passes over the tensor become one. Matches
/// `m = 0.5·x`, `p = Pow(x, 3)`, `x + 0.044715·p`, `·√(2/π)`, `Tanh`, `1 + ·`, `m · ·`, each
/// scalar on either side of a commutative operation, every intermediate read only inside
/// the subgraph.
pub(super) fn fuse_tanh_gelu(g: &Graph<'_>, pow: LayerId) -> Option<Substitution> {
    use backplane_core::ops::BinaryOp::{Add, Mul, Pow};
    let net = g.view.network();
    let x = *net.layer(pow).inputs.first()?;
    if net.outputs().contains(&x) || net.tensor(x).info.dtype != backplane_core::DataType::F32 {
        return None;
    }
    // Pow is not commutative: x must be the base.
    let is3 = match net.layer(pow).inputs.as_slice() {
        [base, e] if *base == x => scalar(g, *e) == Some(3.0),
        _ => false,
    };
    if !is3 || binary_with_scalar(g, pow, Pow, x).is_none() {
        return None;
    }
    let users: Vec<LayerId> = g.consumers.get(x.0)?.iter().map(|(l, _)| *l).collect();
    if users.len() != 3
        || users
            .iter()
            .any(|l| !g.inside.contains(l) || g.used.contains(l))
    {
        return None;
    }
    let half = *users
        .iter()
        .find(|&&l| binary_with_scalar(g, l, Mul, x).is_some_and(|v| near(v, 0.5)))?;
    let sum = *users.iter().find(|&&l| l != half && l != pow)?;
    let pow_out = single_output(g, pow)?;
    let cubic = g.sole_consumer(pow_out)?;
    if !binary_with_scalar(g, cubic, Mul, pow_out).is_some_and(|v| near(v, 0.044715)) {
        return None;
    }
    let cubic_out = single_output(g, cubic)?;
    let reads_both = |id: LayerId, a: TensorId, b: TensorId, op| {
        let l = net.layer(id);
        l.op == Op::Binary(op)
            && g.supported(id)
            && (l.inputs.as_slice() == [a, b] || l.inputs.as_slice() == [b, a])
    };
    if g.sole_consumer(cubic_out) != Some(sum) || !reads_both(sum, x, cubic_out, Add) {
        return None;
    }
    let sum_out = single_output(g, sum)?;
    let scale = g.sole_consumer(sum_out)?;
    if !binary_with_scalar(g, scale, Mul, sum_out).is_some_and(|v| near(v, SQRT_2_OVER_PI)) {
        return None;
    }
    let scale_out = single_output(g, scale)?;
    let tanh = g.sole_consumer(scale_out)?;
    if net.layer(tanh).op != Op::Unary(UnaryOp::Tanh) || !g.supported(tanh) {
        return None;
    }
    let tanh_out = single_output(g, tanh)?;
    let plus = g.sole_consumer(tanh_out)?;
    if !binary_with_scalar(g, plus, Add, tanh_out).is_some_and(|v| near(v, 1.0)) {
        return None;
    }
    let (half_out, plus_out) = (single_output(g, half)?, single_output(g, plus)?);
    let last = g.sole_consumer(plus_out)?;
    if g.sole_consumer(half_out) != Some(last) || !reads_both(last, half_out, plus_out, Mul) {
        return None;
    }
    let out = single_output(g, last)?;
    if !net.tensor(out).info.same_layout(&net.tensor(x).info) {
        return None;
    }
    let gelu = Op::Unary(UnaryOp::Gelu {
        tanh_approximation: true,
    });
    let mut replaced = vec![half, pow, cubic, sum, scale, tanh, plus, last];
    replaced.sort();
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: names(g, &replaced),
            op: gelu,
            inputs: vec![ValueRef::Existing(x)],
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

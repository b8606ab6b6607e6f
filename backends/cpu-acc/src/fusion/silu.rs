//! The exporters' SiLU subgraph `Mul(t, Sigmoid(t))`: `t` read by the Sigmoid and the Mul
//! alone, the Sigmoid's output by the Mul alone.

use super::{single_output, Graph};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{LayerId, Op, TensorId};

/// The Sigmoid and Mul computing `t · sigmoid(t)`, and the product.
pub(super) fn match_silu(g: &Graph<'_>, t: TensorId) -> Option<(Vec<LayerId>, TensorId)> {
    let net = g.view.network();
    if net.outputs().contains(&t) {
        return None;
    }
    let users: Vec<LayerId> = g.consumers.get(t.0)?.iter().map(|(l, _)| *l).collect();
    let [u0, u1] = users.as_slice() else {
        return None;
    };
    if u0 == u1
        || [u0, u1]
            .iter()
            .any(|l| !g.inside.contains(l) || g.used.contains(l))
    {
        return None;
    }
    let is_sigmoid = |l: LayerId| {
        let layer = net.layer(l);
        layer.op == Op::Unary(UnaryOp::Sigmoid) && layer.inputs.as_slice() == [t]
    };
    let (sigmoid, mul) = if is_sigmoid(*u0) {
        (*u0, *u1)
    } else if is_sigmoid(*u1) {
        (*u1, *u0)
    } else {
        return None;
    };
    let s = single_output(g, sigmoid)?;
    let layer = net.layer(mul);
    let reads = layer.inputs.as_slice() == [t, s] || layer.inputs.as_slice() == [s, t];
    let ok = layer.op == Op::Binary(BinaryOp::Mul)
        && reads
        && g.sole_consumer(s) == Some(mul)
        && g.supported(sigmoid)
        && g.supported(mul);
    let out = single_output(g, mul)?;
    (ok && net.tensor(out).info.same_layout(&net.tensor(t).info))
        .then_some((vec![sigmoid, mul], out))
}

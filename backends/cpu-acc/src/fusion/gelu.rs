//! The exporters' tanh GELU subgraph (GPT-2's, eight elementwise layers) replaced by one
//! `Gelu(approximate = tanh)` layer; the matching is `backplane_backend_api::patterns`'.

use super::{names, Graph};
use backplane_backend_api::patterns::match_tanh_gelu;
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::UnaryOp;
use backplane_core::{LayerId, Op};

/// The tanh GELU subgraph around Pow layer `pow` (its `x³`) as one layer: eight passes over
/// the tensor become one.
pub(super) fn fuse_tanh_gelu(g: &Graph<'_>, pow: LayerId) -> Option<Substitution> {
    let (replaced, x, out) = match_tanh_gelu(g, pow)?;
    let gelu = Op::Unary(UnaryOp::Gelu {
        tanh_approximation: true,
    });
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

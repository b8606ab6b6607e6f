//! Subgraph optimization: fuse chains into CpuAcc custom layers.
//!
//! * `Conv [→ BatchNormalization] [→ activation]` → `FusedConv` (BatchNormalization folded
//!   into new constant weights and bias), or `Conv [→ BatchNormalization] → Add(residual)
//!   [→ activation]` → `FusedConv` with the residual as a fourth input (the shortcut of a
//!   residual block: the addition and the activation run as one pass over the output, with
//!   no intermediate tensor and no separate layers). A network's first convolution (and its
//!   activation) followed by a `MaxPool` → `FusedConvMaxPool` where `crate::conv::stem_pool`
//!   runs it: the convolution's output is never stored.
//! * `MatMul [→ Mul/Div(scalar)] [→ Add(constant row bias)] [→ activation]
//!   [→ Transpose [→ Reshape]]` → `FusedMatMul`, where the activation may also be the
//!   exporters' GELU subgraph `0.5·x·(1 + erf(x/√2))`. Each operand may come through
//!   `[Reshape →] Transpose…` layers, and the result may leave through a Transpose (keeping
//!   the last axis) and a Reshape: those are folded into strided reads and writes
//!   (`matmul::StridedView`), which is what the head split and merge of attention are.
//! * `Gemm → activation` → `FusedGemm`.
//! * `Add → LayerNormalization` (the residual connection before a transformer's norm) →
//!   `FusedAddLayerNorm`: each row is summed and normalized in one pass, the sum never
//!   stored.
//! * `BatchNormalization → activation` (a pre-activation block's, not after a convolution)
//!   → `FusedBatchNorm`: the activation applied as each block of the output is written.
//!   When the activation's sole reader is a 1×1, stride-1, one-group convolution of
//!   constant weights (DenseNet's layers), the three become one `FusedConv` with the
//!   normalization as its `PreNorm`, applied as the convolution's GEMM packs its input.
//!   TFLite's form of the normalization, `Mul` and `Add` by per-channel constants, folds
//!   the same way (`norm::fuse_affine_act`).
//! * The exporters' tanh GELU subgraph (GPT-2's, eight elementwise layers) → one
//!   `Gelu(approximate = tanh)` layer.
//!
//! An activation may also be the exporters' SiLU subgraph `Mul(t, Sigmoid(t))`
//! (EfficientNet's), fused as `Activation::Silu`, or TFLite's hard sigmoid `Clip(0, 6)` →
//! `Mul(1/6)`, fused as `Activation::HardSigmoid`.
//!
//! A chain only grows through a tensor that has exactly one consumer and is not a network
//! output, so no intermediate value anyone else needs disappears.
//!
//! The patterns live in `conv`, `matmul` (with `gelu`), `norm` and, shared with other
//! backends, `backplane_backend_api::patterns` (SiLU, BatchNormalization folding); what a fused layer
//! means is the typed [`Fused`] value the custom op carries as its payload (`payload`),
//! checked by [`check_custom`].

mod check;
mod conv;
mod gelu;
mod matmul;
mod norm;
mod payload;

pub use check::check_custom;
pub use payload::{
    ConvLayout, ConvSpec, Fused, PreNorm, FUSED_ADD_LAYER_NORM, FUSED_BATCH_NORM, FUSED_CONV,
    FUSED_CONV_MAX_POOL, FUSED_CONV_PAIR, FUSED_GEMM, FUSED_MATMUL,
};

use crate::act::{Activation, FromOp};
use backplane_backend_api::patterns::{binary_with_scalar, match_silu, Fusion};
use backplane_backend_api::{OptimizationViews, SubgraphView};
use backplane_core::ops::BinaryOp;
use backplane_core::{LayerId, Op, TensorId};

/// An activation layer CpuAcc can fuse.
fn fusable_act(op: &Op) -> Option<Activation> {
    match op {
        Op::Unary(u) => Some(Activation::from_unary(*u)),
        Op::Math(m) => Activation::from_math(*m),
        _ => None,
    }
}

/// The subgraph being fused (the shared pass state of `backplane_backend_api::patterns`).
pub(super) type Graph<'a> = Fusion<'a>;

/// Optimize a subgraph assigned to CpuAcc.
pub fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
    let net = view.network();
    let mut g = Fusion::new(view, |desc| crate::support::check(desc).is_ok());
    let mut subs = Vec::new();
    for &id in view.layers() {
        if g.is_taken(id) || !g.supported(id) {
            continue;
        }
        let sub = match &net.layer(id).op {
            Op::Conv(desc) => conv::fuse_conv(&g, id, desc),
            Op::MatMul => matmul::fuse_matmul(&g, id),
            Op::Gemm(desc) => matmul::fuse_gemm(&g, id, *desc),
            Op::Binary(backplane_core::ops::BinaryOp::Add) => norm::fuse_add_layer_norm(&g, id),
            Op::Binary(backplane_core::ops::BinaryOp::Mul) => norm::fuse_affine_act(&g, id),
            Op::BatchNormalization { epsilon } => norm::fuse_batch_norm_act(&g, id, *epsilon),
            Op::Binary(backplane_core::ops::BinaryOp::Pow) => gelu::fuse_tanh_gelu(&g, id),
            _ => None,
        };
        if let Some(s) = sub {
            g.take(&s.replaced);
            subs.push(s);
        }
    }
    // Regions may take in layers fusion left alone (a pooling after the last convolution).
    let subs = crate::layout::channels_last(view, subs);
    OptimizationViews::with_substitutions(view, subs)
}

/// The only output of layer `id`.
pub(super) fn single_output(g: &Graph<'_>, id: LayerId) -> Option<TensorId> {
    g.single_output(id)
}

/// Follow an activation after `t`, if there is one: one layer, or the layers of a SiLU
/// subgraph. Returns them, the activation and its output.
pub(super) fn follow_act(
    g: &Graph<'_>,
    t: TensorId,
) -> Option<(Vec<LayerId>, Activation, TensorId)> {
    if let Some((layers, out)) = match_silu(g, t) {
        return Some((layers, Activation::Silu, out));
    }
    let next = g.sole_reader(t)?;
    let act = fusable_act(&g.view().network().layer(next).op)?;
    if !g.supported(next) {
        return None;
    }
    let out = single_output(g, next)?;
    if let Some((mul, alpha, y)) = clip_then_scale(g, act, out) {
        return Some((
            vec![next, mul],
            Activation::HardSigmoid { alpha, beta: 0.0 },
            y,
        ));
    }
    Some((vec![next], act, out))
}

/// `Clip(0, hi)` then `Mul` by a positive scalar `c` with `hi · c` rounding to 1 (TFLite's
/// hard sigmoid, `relu6(x) · (1/6)`, which keeps a MobileNetV3 squeeze-excite gate one fused
/// convolution): equal, bit for bit, to `HardSigmoid(alpha = c, beta = 0)`, since rounding
/// `x · c` is monotonic in `x` and clamps the same way (`0 · c = 0`, `hi · c = 1`). Returns
/// the Mul, `c` and the Mul's output.
fn clip_then_scale(
    g: &Graph<'_>,
    act: Activation,
    clipped: TensorId,
) -> Option<(LayerId, f32, TensorId)> {
    let Activation::Clip { min, max } = act else {
        return None;
    };
    let mul = g.sole_reader(clipped)?;
    let c = binary_with_scalar(g, mul, BinaryOp::Mul, clipped)?;
    let exact = min == 0.0 && c.is_finite() && c > 0.0 && max * c == 1.0;
    exact.then_some(())?;
    let y = single_output(g, mul)?;
    // A one-element scale of higher rank would broadcast the product to more axes.
    let net = g.view().network();
    (net.tensor(y).info.shape == net.tensor(clipped).info.shape).then_some((mul, c, y))
}

/// The names of layers `ids` joined with `+`: the fused layer's name.
pub(super) fn names(g: &Graph<'_>, ids: &[LayerId]) -> String {
    g.names(ids)
}

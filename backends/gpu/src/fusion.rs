//! `optimize_subgraph`: a Conv, Gemm or MatMul followed by an activation GpuAcc runs becomes
//! one fused layer (the activation runs in the product's epilogue, so the intermediate
//! tensor is never written); so does a MatMul followed by the Add of a constant bias along
//! its last axis (a transformer's linear layer), with or without an activation after it.
//! A BatchNormalization after a Conv is folded into new constant weights and bias; the
//! exporters' SiLU subgraph `Mul(t, Sigmoid(t))` is an activation (`Silu`) and their erf GELU
//! subgraph one too (`Gelu`); GPT-2's tanh GELU subgraph becomes one `Gelu(tanh)` layer. The
//! patterns are `backplane_backend_api::patterns`', shared with CpuAcc. An elementwise binary
//! op followed by an activation (a residual Add and its Relu) is one layer too.
//! The fused layer is a custom op of domain `GpuAcc` whose attributes are the product's own
//! flat attributes plus the activation's, prefixed `act.`, and `bias` when its third input
//! is a bias added in the epilogue.

use crate::kernels::elementwise::Act;
use backplane_backend_api::patterns::{
    fold_batch_norm_after, match_erf_gelu, match_silu, match_tanh_gelu, Fusion,
};
use backplane_backend_api::{
    LayerDesc, OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef,
};
use backplane_core::ops::{AttrValue, BinaryOp, CustomOp, UnaryOp};
use backplane_core::{LayerId, Op, TensorId};
use std::sync::Arc;

/// The custom-op domain of GpuAcc's fused layers.
pub const DOMAIN: &str = "GpuAcc";
/// The fused layer's op type.
pub const FUSED: &str = "FusedActivation";
/// Attribute naming the product's op type.
const INNER: &str = "inner";
/// Attribute naming the activation's op type.
const ACT: &str = "act";
/// The `act` attribute of the SiLU subgraph, which is no single op.
const SILU: &str = "Silu";
/// Prefix of the activation's attributes.
const ACT_PREFIX: &str = "act.";
/// Attribute marking a bias (the fused layer's third input) added before the activation.
const BIAS: &str = "bias";

/// The activation an op computes, when GpuAcc can fuse it.
pub fn activation(op: &Op) -> Option<Act> {
    match op {
        Op::Unary(u) => Some(Act::Unary(*u)),
        Op::Math(m) => Act::from_math(*m),
        _ => None,
    }
}

/// Encode `product` (plus a bias when `bias`) followed by `act_op` (if any) as one custom
/// op writing `outputs`.
fn encode(
    product: &Op,
    bias: bool,
    act: &FusedAct,
    outputs: Vec<backplane_core::TensorInfo>,
) -> CustomOp {
    let (inner, mut attributes) = product.to_attributes();
    attributes.push((INNER.into(), AttrValue::String(inner)));
    if bias {
        attributes.push((BIAS.into(), AttrValue::Int(1)));
    }
    if let FusedAct::Silu = act {
        attributes.push((ACT.into(), AttrValue::String(SILU.into())));
    }
    if let FusedAct::Op(act_op) = act {
        let (act, act_attrs) = act_op.to_attributes();
        attributes.push((ACT.into(), AttrValue::String(act)));
        attributes.extend(
            act_attrs
                .into_iter()
                .map(|(k, v)| (format!("{ACT_PREFIX}{k}"), v)),
        );
    }
    CustomOp {
        domain: DOMAIN.into(),
        op_type: FUSED.into(),
        attributes,
        outputs,
        payload: None,
    }
}

/// The activation a fusion found: none, one layer's op, or the SiLU subgraph.
enum FusedAct {
    None,
    Op(Op),
    Silu,
}

/// A decoded fused layer.
#[derive(Debug, Clone)]
pub struct Fused {
    /// The product.
    pub product: Op,
    /// Whether input 2 is a bias along the last axis, added before the activation.
    pub bias: bool,
    /// The activation of the epilogue.
    pub act: Act,
}

/// The product, bias and activation of a fused layer, or why it is not one of GpuAcc's.
pub fn decode(c: &CustomOp) -> Result<Fused, String> {
    if c.domain != DOMAIN || c.op_type != FUSED {
        return Err(format!(
            "GpuAcc has no custom op {}:{}",
            c.domain, c.op_type
        ));
    }
    let text = |key: &str| {
        c.attributes.iter().find_map(|(k, v)| match v {
            AttrValue::String(s) if k == key => Some(s.clone()),
            _ => None,
        })
    };
    let inner = text(INNER).ok_or("a fused layer without its product")?;
    let bias = c
        .attributes
        .iter()
        .any(|(k, v)| k == BIAS && matches!(v, AttrValue::Int(1)));
    let own: Vec<(String, AttrValue)> = c
        .attributes
        .iter()
        .filter(|(k, _)| k != INNER && k != ACT && k != BIAS && !k.starts_with(ACT_PREFIX))
        .cloned()
        .collect();
    let act_attrs: Vec<(String, AttrValue)> = c
        .attributes
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(ACT_PREFIX)
                .map(|k| (k.to_string(), v.clone()))
        })
        .collect();
    let product = Op::from_attributes(&inner, &own).map_err(|e| e.to_string())?;
    let act = match text(ACT) {
        None => Act::None,
        Some(act) if act == SILU => Act::Silu,
        Some(act) => {
            let act_op = Op::from_attributes(&act, &act_attrs).map_err(|e| e.to_string())?;
            activation(&act_op).ok_or_else(|| format!("{act} is not an activation GpuAcc fuses"))?
        }
    };
    match product {
        Op::MatMul => Ok(Fused { product, bias, act }),
        Op::Conv(_) | Op::Gemm(_) | Op::Binary(_) if !bias => Ok(Fused { product, bias, act }),
        other => Err(format!("GpuAcc does not fuse after {}", other.name())),
    }
}

/// The constant bias `Add` adds to MatMul result `mid` (`[.., N]`): the other operand, when
/// it holds one value per column (all dims 1 but the last, N) and the sum keeps `mid`'s shape.
fn bias_of(net: &backplane_core::Network, add: LayerId, mid: TensorId) -> Option<TensorId> {
    let layer = net.layer(add);
    if layer.op != Op::Binary(BinaryOp::Add) || layer.outputs.len() != 1 {
        return None;
    }
    let other = match layer.inputs.as_slice() {
        [a, b] if *a == mid && *b != mid => *b,
        [a, b] if *b == mid && *a != mid => *a,
        _ => return None,
    };
    let entry = net.tensor(other);
    entry.constant()?;
    let out = net.tensor(mid).info.shape.dims().to_vec();
    let bias = entry.info.shape.dims();
    let n = *out.last()?;
    let fits = out.len() >= 2
        && bias.len() <= out.len()
        && bias.last() == Some(&n)
        && bias[..bias.len() - 1].iter().all(|&d| d == 1)
        && entry.info.dtype == net.tensor(mid).info.dtype
        && net.tensor(layer.outputs[0]).info.shape.dims() == out.as_slice();
    fits.then_some(other)
}

/// Fuse every product with what follows it: a folded BatchNormalization (after a Conv), a
/// constant bias (after a MatMul), an activation.
pub fn optimize(
    view: &SubgraphView<'_>,
    supported: impl Fn(&LayerDesc) -> bool,
) -> OptimizationViews {
    let mut g = Fusion::new(view, supported);
    let mut subs = Vec::new();
    for &id in view.layers() {
        if g.is_taken(id) {
            continue;
        }
        if let Some(sub) = fuse(&g, id).or_else(|| tanh_gelu(&g, id)) {
            g.take(&sub.replaced);
            subs.push(sub);
        }
    }
    OptimizationViews::with_substitutions(view, subs)
}

/// The exporters' tanh GELU subgraph around Pow layer `id` as one `Gelu(approximate = tanh)`
/// layer (GPT-2's eight elementwise layers).
fn tanh_gelu(g: &Fusion<'_>, id: LayerId) -> Option<Substitution> {
    let net = g.view().network();
    if net.layer(id).op != Op::Binary(BinaryOp::Pow) {
        return None;
    }
    let (replaced, x, out) = match_tanh_gelu(g, id)?;
    let op = Op::Unary(UnaryOp::Gelu {
        tanh_approximation: true,
    });
    substitution(g, id, replaced, op, vec![ValueRef::Existing(x)], out)
}

/// The fusion starting at product `id`, when something follows it to fuse and GpuAcc runs
/// the result.
fn fuse(g: &Fusion<'_>, id: LayerId) -> Option<Substitution> {
    let net = g.view().network();
    let layer = net.layer(id);
    if !matches!(
        layer.op,
        Op::Conv(_) | Op::Gemm(_) | Op::MatMul | Op::Binary(_)
    ) || layer.outputs.len() != 1
    {
        return None;
    }
    let mut out = layer.outputs[0];
    let mut replaced = vec![id];
    let mut inputs: Vec<ValueRef> = layer
        .inputs
        .iter()
        .map(|t| ValueRef::Existing(*t))
        .collect();
    let mut bias = false;
    if matches!(layer.op, Op::Conv(_)) {
        if let Some((bn, bn_out, w, b)) = fold_batch_norm_after(g, id) {
            inputs = vec![
                ValueRef::Existing(*layer.inputs.first()?),
                ValueRef::NewConstant(Arc::new(w)),
                ValueRef::NewConstant(Arc::new(b)),
            ];
            replaced.push(bn);
            out = bn_out;
        }
    }
    // MatMul + Add(constant bias along the last axis).
    if layer.op == Op::MatMul && net.tensor(*layer.inputs.get(1)?).info.shape.rank() >= 2 {
        if let Some((add, b)) = g
            .sole_reader(out)
            .and_then(|next| Some((next, bias_of(net, next, out)?)))
        {
            inputs.push(ValueRef::Existing(b));
            bias = true;
            replaced.push(add);
            out = g.single_output(add)?;
        }
    }
    let act = if let Some((layers, o)) = match_silu(g, out) {
        replaced.extend(layers);
        out = o;
        FusedAct::Silu
    } else if let Some((layers, o)) = match_erf_gelu(g, out) {
        replaced.extend(layers);
        out = o;
        FusedAct::Op(Op::Unary(UnaryOp::Gelu {
            tanh_approximation: false,
        }))
    } else {
        match g.sole_reader(out) {
            Some(next) if activation(&net.layer(next).op).is_some() => {
                out = g.single_output(next)?;
                replaced.push(next);
                FusedAct::Op(net.layer(next).op.clone())
            }
            _ => FusedAct::None,
        }
    };
    if replaced.len() < 2 {
        return None;
    }
    // A Conv with only a BatchNormalization folded in stays a Conv (with the new weights).
    let op = if matches!(act, FusedAct::None) && !bias {
        layer.op.clone()
    } else {
        Op::Custom(encode(
            &layer.op,
            bias,
            &act,
            vec![net.tensor(out).info.clone()],
        ))
    };
    substitution(g, id, replaced, op, inputs, out)
}

/// The substitution of `replaced` (starting at layer `first`) by one layer `op` reading
/// `inputs` and writing `out`, when GpuAcc runs that layer.
fn substitution(
    g: &Fusion<'_>,
    first: LayerId,
    replaced: Vec<LayerId>,
    op: Op,
    inputs: Vec<ValueRef>,
    out: TensorId,
) -> Option<Substitution> {
    let net = g.view().network();
    let mut desc = g.view().layer_desc(first);
    desc.op = op.clone();
    desc.outputs = vec![net.tensor(out).info.clone()];
    desc.inputs.clear();
    desc.constants.clear();
    for v in &inputs {
        let (info, constant) = match v {
            ValueRef::Existing(t) => (net.tensor(*t).info.clone(), net.constant_value(*t).cloned()),
            ValueRef::NewConstant(c) => (c.info().clone(), Some(c.clone())),
            ValueRef::Produced { .. } => return None,
        };
        desc.inputs.push(info);
        desc.constants.push(constant);
    }
    if !g.supports(&desc) {
        return None;
    }
    Some(Substitution {
        replacement: vec![ReplacementLayer {
            name: g.names(&replaced),
            op,
            inputs,
            outputs: vec![Some(out)],
        }],
        replaced,
    })
}

//! `optimize_subgraph`: a Conv, Gemm or MatMul followed by an activation GpuAcc runs becomes
//! one fused layer (the activation runs in the product's epilogue, so the intermediate
//! tensor is never written); so does a MatMul followed by the Add of a constant bias along
//! its last axis (a transformer's linear layer), with or without an activation after it.
//! The fused layer is a custom op of domain `GpuAcc` whose attributes are the product's own
//! flat attributes plus the activation's, prefixed `act.`, and `bias` when its third input
//! is a bias added in the epilogue.

use crate::kernels::elementwise::Act;
use backplane_backend_api::{
    OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef,
};
use backplane_core::ops::{AttrValue, BinaryOp, CustomOp};
use backplane_core::{LayerId, Op, TensorId};
use std::collections::BTreeSet;

/// The custom-op domain of GpuAcc's fused layers.
pub const DOMAIN: &str = "GpuAcc";
/// The fused layer's op type.
pub const FUSED: &str = "FusedActivation";
/// Attribute naming the product's op type.
const INNER: &str = "inner";
/// Attribute naming the activation's op type.
const ACT: &str = "act";
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
    act_op: Option<&Op>,
    outputs: Vec<backplane_core::TensorInfo>,
) -> CustomOp {
    let (inner, mut attributes) = product.to_attributes();
    attributes.push((INNER.into(), AttrValue::String(inner)));
    if bias {
        attributes.push((BIAS.into(), AttrValue::Int(1)));
    }
    if let Some(act_op) = act_op {
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
        Some(act) => {
            let act_op = Op::from_attributes(&act, &act_attrs).map_err(|e| e.to_string())?;
            activation(&act_op).ok_or_else(|| format!("{act} is not an activation GpuAcc fuses"))?
        }
    };
    match product {
        Op::MatMul => Ok(Fused { product, bias, act }),
        Op::Conv(_) | Op::Gemm(_) if !bias => Ok(Fused { product, bias, act }),
        other => Err(format!("GpuAcc does not fuse after {}", other.name())),
    }
}

/// The only consumer of `t`, when it is a layer of the subgraph not yet fused and `t` is no
/// network output.
fn sole_consumer(
    net: &backplane_core::Network,
    consumers: &[Vec<(LayerId, usize)>],
    inside: &BTreeSet<LayerId>,
    used: &BTreeSet<LayerId>,
    t: TensorId,
) -> Option<LayerId> {
    if net.outputs().contains(&t) {
        return None;
    }
    match consumers.get(t.0).map(Vec::as_slice) {
        Some([(next, _)]) if inside.contains(next) && !used.contains(next) => Some(*next),
        _ => None,
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

/// Fuse every product whose only consumer is an activation in the same subgraph.
pub fn optimize(
    view: &SubgraphView<'_>,
    supported: impl Fn(&backplane_backend_api::LayerDesc) -> bool,
) -> OptimizationViews {
    let net = view.network();
    let inside: BTreeSet<LayerId> = view.layers().iter().copied().collect();
    let consumers = net.consumers();
    let mut used = BTreeSet::new();
    let mut subs = Vec::new();
    for &id in view.layers() {
        let layer = net.layer(id);
        if !matches!(layer.op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul) || layer.outputs.len() != 1 {
            continue;
        }
        let mid = layer.outputs[0];
        let Some(mut next) = sole_consumer(net, &consumers, &inside, &used, mid) else {
            continue;
        };
        let mut replaced = vec![id];
        let mut inputs: Vec<TensorId> = layer.inputs.clone();
        let mut out = mid;
        // MatMul + Add(constant bias along the last axis).
        if layer.op == Op::MatMul && net.tensor(layer.inputs[1]).info.shape.rank() >= 2 {
            if let Some(bias) = bias_of(net, next, mid) {
                inputs.push(bias);
                replaced.push(next);
                out = net.layer(next).outputs[0];
                match sole_consumer(net, &consumers, &inside, &used, out) {
                    Some(n) => next = n,
                    None => next = id,
                }
            }
        }
        let act_layer = net.layer(next);
        let act_op = (next != id && act_layer.outputs.len() == 1)
            .then(|| activation(&act_layer.op).map(|_| &act_layer.op))
            .flatten();
        if act_op.is_some() {
            replaced.push(next);
            out = act_layer.outputs[0];
        }
        if replaced.len() < 2 {
            continue;
        }
        let bias = inputs.len() > layer.inputs.len();
        let custom = encode(&layer.op, bias, act_op, vec![net.tensor(out).info.clone()]);
        let names: Vec<&str> = replaced
            .iter()
            .map(|l| net.layer(*l).name.as_str())
            .collect();
        let replacement = ReplacementLayer {
            name: names.join("+"),
            op: Op::Custom(custom),
            inputs: inputs.iter().map(|t| ValueRef::Existing(*t)).collect(),
            outputs: vec![Some(out)],
        };
        let mut desc = view.layer_desc(id);
        desc.op = replacement.op.clone();
        desc.outputs = vec![net.tensor(out).info.clone()];
        if bias {
            let b = net.tensor(inputs[2]);
            desc.inputs.push(b.info.clone());
            desc.constants.push(b.constant().cloned());
        }
        if !supported(&desc) {
            continue;
        }
        used.extend(replaced.iter().copied());
        subs.push(Substitution {
            replaced,
            replacement: vec![replacement],
        });
    }
    OptimizationViews::with_substitutions(view, subs)
}

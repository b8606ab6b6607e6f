//! `optimize_subgraph`: a Conv, Gemm or MatMul followed by an activation GpuAcc runs becomes
//! one fused layer (the activation runs in the product's epilogue, so the intermediate
//! tensor is never written). The fused layer is a custom op of domain `GpuAcc` whose
//! attributes are the product's own flat attributes plus the activation's, prefixed `act.`.

use crate::kernels::elementwise::Act;
use backplane_backend_api::{
    OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef,
};
use backplane_core::ops::{AttrValue, CustomOp};
use backplane_core::{LayerId, Op};
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

/// The activation an op computes, when GpuAcc can fuse it.
pub fn activation(op: &Op) -> Option<Act> {
    match op {
        Op::Unary(u) => Some(Act::Unary(*u)),
        Op::Math(m) => Act::from_math(*m),
        _ => None,
    }
}

/// Encode `product` followed by `act_op` as one custom op writing `outputs`.
fn encode(product: &Op, act_op: &Op, outputs: Vec<backplane_core::TensorInfo>) -> CustomOp {
    let (inner, mut attributes) = product.to_attributes();
    let (act, act_attrs) = act_op.to_attributes();
    attributes.push((INNER.into(), AttrValue::String(inner)));
    attributes.push((ACT.into(), AttrValue::String(act)));
    attributes.extend(
        act_attrs
            .into_iter()
            .map(|(k, v)| (format!("{ACT_PREFIX}{k}"), v)),
    );
    CustomOp {
        domain: DOMAIN.into(),
        op_type: FUSED.into(),
        attributes,
        outputs,
        payload: None,
    }
}

/// The product and the activation of a fused layer, or why it is not one of GpuAcc's.
pub fn decode(c: &CustomOp) -> Result<(Op, Act), String> {
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
    let act = text(ACT).ok_or("a fused layer without its activation")?;
    let own: Vec<(String, AttrValue)> = c
        .attributes
        .iter()
        .filter(|(k, _)| k != INNER && k != ACT && !k.starts_with(ACT_PREFIX))
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
    let act_op = Op::from_attributes(&act, &act_attrs).map_err(|e| e.to_string())?;
    let act =
        activation(&act_op).ok_or_else(|| format!("{act} is not an activation GpuAcc fuses"))?;
    match product {
        Op::Conv(_) | Op::Gemm(_) | Op::MatMul => Ok((product, act)),
        other => Err(format!("GpuAcc does not fuse after {}", other.name())),
    }
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
        if net.outputs().contains(&mid) {
            continue;
        }
        let [(next, _)] = consumers[mid.0].as_slice() else {
            continue;
        };
        if !inside.contains(next) || used.contains(next) {
            continue;
        }
        let act_layer = net.layer(*next);
        if activation(&act_layer.op).is_none() || act_layer.outputs.len() != 1 {
            continue;
        }
        let out = act_layer.outputs[0];
        let custom = encode(&layer.op, &act_layer.op, vec![net.tensor(out).info.clone()]);
        let replacement = ReplacementLayer {
            name: format!("{}+{}", layer.name, act_layer.name),
            op: Op::Custom(custom),
            inputs: layer
                .inputs
                .iter()
                .map(|t| ValueRef::Existing(*t))
                .collect(),
            outputs: vec![Some(out)],
        };
        let mut desc = view.layer_desc(id);
        desc.op = replacement.op.clone();
        desc.outputs = vec![net.tensor(out).info.clone()];
        if !supported(&desc) {
            continue;
        }
        used.insert(id);
        used.insert(*next);
        subs.push(Substitution {
            replaced: vec![id, *next],
            replacement: vec![replacement],
        });
    }
    OptimizationViews::with_substitutions(view, subs)
}

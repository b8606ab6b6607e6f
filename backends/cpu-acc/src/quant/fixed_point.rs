//! Quantized chains CpuAcc leaves to CpuRef: those whose QuantizeLinear asks for the
//! fixed-point requantization ([`Requantization::FixedPoint`], LiteRT's builtin kernels,
//! which the TFLite importer chooses for models LiteRT's XNNPACK delegate refuses) around a
//! convolution, fully connected product, multiplication of two quantized tensors or mean.
//! CpuAcc's integer kernels requantize in f32 (XNNPACK's rule); until they have the
//! fixed-point rule, it rejects these chains in `optimize_subgraph` and the optimizer
//! re-assigns them to CpuRef, whose integer layers follow the rule exactly. Other chains
//! ending in such a QuantizeLinear (additions, tables, pools) give the same results under
//! both rules (`scripts/probe_tflite_q8_builtin.py`) and stay on CpuAcc.

use backplane_backend_api::SubgraphView;
use backplane_core::ops::{BinaryOp, ReduceKind, UnaryOp};
use backplane_core::quant::Requantization;
use backplane_core::{LayerId, Network, Op, TensorId, TensorKind};
use std::collections::BTreeSet;

/// The layers of `view` in fixed-point chains: each such QuantizeLinear, the activation and
/// Reshape between it and its product, the product, and the DequantizeLinears feeding the
/// product.
pub(crate) fn chains(view: &SubgraphView<'_>) -> BTreeSet<LayerId> {
    let net = view.network();
    let inside: BTreeSet<LayerId> = view.layers().iter().copied().collect();
    let mut out = BTreeSet::new();
    for &id in view.layers() {
        let layer = net.layer(id);
        let Op::QuantizeLinear {
            requant: Requantization::FixedPoint,
            ..
        } = layer.op
        else {
            continue;
        };
        let mut chain = vec![id];
        let Some(mut p) = layer.inputs.first().and_then(|&t| producer(net, t)) else {
            continue;
        };
        // Up to an activation and a Reshape / Flatten between the product and the quantize.
        for _ in 0..2 {
            let between = matches!(
                net.layer(p).op,
                Op::Unary(UnaryOp::Relu | UnaryOp::Clip { .. })
                    | Op::Reshape { .. }
                    | Op::Flatten { .. }
            );
            if !between {
                break;
            }
            chain.push(p);
            match net.layer(p).inputs.first().and_then(|&t| producer(net, t)) {
                Some(q) => p = q,
                None => break,
            }
        }
        let product = net.layer(p);
        let dequantized = |t: &TensorId| {
            producer(net, *t).filter(|&l| matches!(net.layer(l).op, Op::DequantizeLinear { .. }))
        };
        let dqs: Vec<LayerId> = product.inputs.iter().filter_map(dequantized).collect();
        let takes = match &product.op {
            Op::Conv(_) | Op::Gemm(_) | Op::MatMul => !dqs.is_empty(),
            Op::Binary(BinaryOp::Mul) => dqs.len() == 2,
            Op::Reduce(r) => r.kind == ReduceKind::Mean && dqs.len() == 1,
            _ => false,
        };
        if !takes {
            continue;
        }
        chain.push(p);
        chain.extend(dqs);
        out.extend(chain.into_iter().filter(|l| inside.contains(l)));
    }
    out
}

fn producer(net: &Network, t: TensorId) -> Option<LayerId> {
    match net.tensor(t).kind {
        TensorKind::Produced { layer, .. } => Some(layer),
        _ => None,
    }
}

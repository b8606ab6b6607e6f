//! Quantized chains whose QuantizeLinear asks for the fixed-point requantization
//! ([`Requantization::FixedPoint`], LiteRT's builtin kernels, which the TFLite importer
//! chooses for models LiteRT's XNNPACK delegate refuses) around a convolution, fully
//! connected product, multiplication of two quantized tensors or mean: the float chain
//! computes them by the f32 rule, so CpuAcc runs them only where a folded integer layer
//! has the fixed-point rule, and rejects the rest in `optimize_subgraph` (the optimizer
//! re-assigns them to CpuRef, whose integer layers follow the rule exactly).
//!
//! CpuAcc's folded int8 convolutions and fully connected layers (`super::conv`,
//! `super::nhwc_conv`, `super::gemm`) and its binary layer's multiplication of two 8-bit
//! inputs (`super::binary`, CpuRef's `QMulFixedPoint`) have the rule; such a chain is kept
//! when the fold takes it ([`missed`] checks, and `optimize_subgraph` rejects the chains a
//! fold left as float layers). So has its mean (`super::mean`, CpuRef's `QMeanFixedPoint`)
//! on the form CpuRef folds. Other chains ending in such a QuantizeLinear (additions, tables, pools)
//! give the same results under both rules (`scripts/probe_tflite_q8_builtin.py`) and stay
//! on CpuAcc.

use backplane_backend_api::{OptimizationViews, SubgraphView};
use backplane_core::ops::{BinaryOp, ReduceKind, UnaryOp};
use backplane_core::quant::Requantization;
use backplane_core::{LayerId, Network, Op, TensorId, TensorKind};
use std::collections::BTreeSet;

/// One fixed-point chain of a subgraph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chain {
    /// Its layers in the subgraph: the QuantizeLinear, the activation and Reshape between
    /// it and its product, the product, and the DequantizeLinears feeding the product.
    pub layers: Vec<LayerId>,
    /// The product (convolution, Gemm, MatMul, Mul or mean).
    pub product: LayerId,
    /// The QuantizeLinear.
    pub quantize: LayerId,
    /// Whether CpuAcc's folded layer computes it by the rule (convolutions, products and
    /// multiplications), so the chain stays when the fold takes it.
    pub computed: bool,
}

/// The fixed-point chains of `view`.
pub(crate) fn chains(view: &SubgraphView<'_>) -> Vec<Chain> {
    let net = view.network();
    let inside: BTreeSet<LayerId> = view.layers().iter().copied().collect();
    let mut out = Vec::new();
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
        // A mean with an activation before its QuantizeLinear is not folded by CpuAcc nor
        // CpuRef (`missed` sends it to CpuRef).
        let computed = matches!(
            product.op,
            Op::Conv(_) | Op::Gemm(_) | Op::MatMul | Op::Binary(BinaryOp::Mul) | Op::Reduce(_)
        );
        let takes = match &product.op {
            Op::Conv(_) | Op::Gemm(_) | Op::MatMul => !dqs.is_empty(),
            Op::Binary(BinaryOp::Mul) => dqs.len() == 2,
            // CpuRef folds the 4-D means over two axes it keeps (`crate::fold` there).
            Op::Reduce(r) => {
                let rank = product
                    .inputs
                    .first()
                    .map_or(0, |&t| net.tensor(t).info.shape.rank());
                let two = r
                    .reduced_mask(rank)
                    .is_ok_and(|m| rank == 4 && !m[0] && m.iter().filter(|&&x| x).count() == 2);
                r.kind == ReduceKind::Mean && r.keepdims && two && dqs.len() == 1
            }
            _ => false,
        };
        if !takes {
            continue;
        }
        chain.push(p);
        chain.extend(dqs);
        out.push(Chain {
            layers: chain.into_iter().filter(|l| inside.contains(l)).collect(),
            product: p,
            quantize: id,
            computed,
        });
    }
    out
}

/// The chains of `chains` CpuAcc would compute ([`Chain::computed`]) that `views` did not
/// fold into one of its layers that follow the rule (one substitution replacing both the
/// product and the QuantizeLinear by layers that include such a folded layer,
/// `super::follows_requant_rule`): left as float layers they would follow the f32 rule, so
/// they must go to CpuRef.
pub(crate) fn missed<'a>(chains: &'a [Chain], views: &OptimizationViews) -> Vec<&'a Chain> {
    let folded = |c: &Chain| {
        views.substitutions.iter().any(|s| {
            s.replaced.contains(&c.product)
                && s.replaced.contains(&c.quantize)
                && s.replacement
                    .iter()
                    .any(|r| super::follows_requant_rule(&r.op))
        })
    };
    chains.iter().filter(|c| c.computed && !folded(c)).collect()
}

fn producer(net: &Network, t: TensorId) -> Option<LayerId> {
    match net.tensor(t).kind {
        TensorKind::Produced { layer, .. } => Some(layer),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use backplane_core::{DataType, Tensor, TensorInfo};

    /// A name not used yet.
    fn fresh(net: &Network, what: &str) -> String {
        format!("{what}{}", net.tensors().len())
    }

    fn dq(net: &mut Network, t: TensorId) -> TensorId {
        let s = net
            .add_constant(&fresh(net, "s"), Tensor::scalar(0.05f32))
            .unwrap();
        let z = net
            .add_constant(&fresh(net, "z"), Tensor::scalar(1i8))
            .unwrap();
        let op = Op::DequantizeLinear {
            axis: 1,
            to: DataType::F32,
            block_size: 0,
        };
        net.add_layer(&fresh(net, "dq"), op, &[t, s, z]).unwrap()[0]
    }

    fn q(net: &mut Network, t: TensorId, requant: Requantization) -> TensorId {
        let s = net
            .add_constant(&fresh(net, "s"), Tensor::scalar(0.1f32))
            .unwrap();
        let z = net
            .add_constant(&fresh(net, "z"), Tensor::scalar(0i8))
            .unwrap();
        let op = Op::QuantizeLinear {
            axis: 1,
            to: DataType::I8,
            block_size: 0,
            saturate: true,
            requant,
        };
        net.add_layer(&fresh(net, "q"), op, &[t, s, z]).unwrap()[0]
    }

    /// a · b → Relu → quantize, and a + b → quantize: with the fixed-point rule the Mul's
    /// chain (dequantizations, Mul, Relu, quantize) is found (for CpuAcc's binary layer to
    /// compute by the rule) and the Add's is not; with the f32 rule nothing is.
    #[test]
    fn fixed_point_products_are_found_and_additions_not() {
        for requant in [Requantization::F32, Requantization::FixedPoint] {
            let mut net = Network::new();
            let info = TensorInfo::new(DataType::I8, vec![1, 4, 2, 2]);
            let a = net.add_input("a", info.clone()).unwrap();
            let b = net.add_input("b", info).unwrap();
            let (da, db) = (dq(&mut net, a), dq(&mut net, b));
            let m = net
                .add_layer("mul", Op::Binary(BinaryOp::Mul), &[da, db])
                .unwrap()[0];
            let r = net
                .add_layer("relu", Op::Unary(UnaryOp::Relu), &[m])
                .unwrap()[0];
            let y = q(&mut net, r, requant);
            net.mark_output(y).unwrap();
            let (da2, db2) = (dq(&mut net, a), dq(&mut net, b));
            let s = net
                .add_layer("add", Op::Binary(BinaryOp::Add), &[da2, db2])
                .unwrap()[0];
            let y2 = q(&mut net, s, requant);
            net.mark_output(y2).unwrap();
            let ids: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
            let found = chains(&SubgraphView::new(&net, ids));
            // CpuAcc's binary layer has the rule: the chain is one it computes.
            assert!(found.iter().all(|c| c.computed), "{found:?}");
            let got: BTreeSet<LayerId> = found.into_iter().flat_map(|c| c.layers).collect();
            let names: BTreeSet<&str> = got.iter().map(|&l| net.layer(l).name.as_str()).collect();
            match requant {
                Requantization::F32 => assert!(got.is_empty(), "{names:?}"),
                Requantization::FixedPoint => {
                    assert_eq!(got.len(), 5, "{names:?}");
                    for l in &got {
                        let name = &net.layer(*l).name;
                        assert!(!name.contains("add"), "{names:?}");
                    }
                }
            }
        }
    }
}

//! CpuRef's `optimize_subgraph`: quantized chains with constant 8-bit weights become its
//! integer layers ([`crate::ops::qlinear`]), so CpuRef computes them as LiteRT (XNNPACK) and
//! ONNX Runtime do, with exact integer sums, rather than in f32:
//!
//! * `DequantizeLinear(x) → Conv(·, DequantizeLinear(w const), bias?) → (Relu | Clip)? →
//!   QuantizeLinear`, 2-D images, any groups (depthwise included): `QLinearConv`;
//! * the same around a Gemm (`alpha = beta = 1`, A not transposed) or a MatMul of 2-D
//!   weights, with one Reshape or Flatten allowed on either side of the product (TFLite's
//!   FULLY_CONNECTED on a 4-D tensor): `QLinearGemm`;
//! * when the QuantizeLinear asks for the fixed-point rule (LiteRT's builtin kernels), a Mul
//!   of two dequantized 8-bit tensors and a ReduceMean of one: `QMulFixedPoint` and
//!   `QMeanFixedPoint` ([`crate::ops::qbuiltin`]).
//!
//! x and y are per-tensor 8-bit, the weights 8-bit per tensor or per output channel; the bias
//! is a DequantizeLinear of int32 values on the scales `x_scale · w_scale` (as quantizers
//! write it) or f32 values, put on those scales. Every other chain, and every layer of these
//! chains when the pattern does not hold, runs as it is, in f32 (ONNX's definition of each
//! operator). Elementwise layers between quantized tensors already equal LiteRT's results
//! in f32 (CpuAcc's folded binary layer computes them the same way), so they are not folded.

use crate::ops::qbuiltin::{self, QMeanDesc, QMulDesc};
use crate::ops::qlinear::{self, QConvDesc, QGemmDesc, QParams};
use backplane_backend_api::{
    OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef,
};
use backplane_core::ops::{BinaryOp, ReduceKind, UnaryOp};
use backplane_core::quant::{activation_range, Requantization};
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorId, TensorKind};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Fold the quantized chains of `view` into CpuRef's integer layers; every other layer is
/// left as it is.
pub(crate) fn optimize(view: &SubgraphView<'_>) -> OptimizationViews {
    let net = view.network();
    let g = Chains {
        net,
        inside: view.layers().iter().copied().collect(),
        consumers: net.consumers(),
    };
    let mut used = BTreeSet::new();
    let mut subs = Vec::new();
    for &id in view.layers() {
        if used.contains(&id) {
            continue;
        }
        let folded = g
            .fold_conv(id, &used)
            .or_else(|| g.fold_product(id, &used))
            .or_else(|| g.fold_mul(id, &used))
            .or_else(|| g.fold_mean(id, &used));
        if let Some(s) = folded {
            used.extend(s.replaced.iter().copied());
            subs.push(s);
        }
    }
    if subs.is_empty() {
        return OptimizationViews::untouched(view);
    }
    OptimizationViews::with_substitutions(view, subs)
}

/// A per-tensor or per-axis DequantizeLinear: the layer, its input, scales and zero points.
struct Dq {
    layer: LayerId,
    input: TensorId,
    scales: Vec<f32>,
    zeros: Vec<i32>,
}

/// The layers from a product to its QuantizeLinear.
struct OutChain {
    /// The product, its activation and Reshape (if any), the QuantizeLinear.
    replaced: Vec<LayerId>,
    /// The QuantizeLinear's output.
    y: TensorId,
    /// Its scale and zero point.
    q: (f32, i32),
    /// The output integers' range, narrowed by the activation.
    clamp: (i32, i32),
    /// The QuantizeLinear's requantization rule.
    requant: Requantization,
}

/// The integer layer's quantization: the activations' (per tensor), the weights' per
/// channel, the output's and its clamp.
fn params(x: &Dq, w: &Dq, out: &OutChain) -> QParams {
    QParams {
        x: (x.scales[0], x.zeros[0]),
        w_scales: w.scales.clone(),
        w_zeros: w.zeros.clone(),
        y: out.q,
        clamp: out.clamp,
        requant: out.requant,
    }
}

struct Chains<'a> {
    net: &'a Network,
    inside: BTreeSet<LayerId>,
    consumers: Vec<Vec<(LayerId, usize)>>,
}

impl Chains<'_> {
    fn producer(&self, t: TensorId) -> Option<LayerId> {
        match self.net.tensor(t).kind {
            TensorKind::Produced { layer, .. } => Some(layer),
            _ => None,
        }
    }

    fn constant(&self, t: TensorId) -> Option<&Arc<Tensor>> {
        self.net.tensor(t).constant()
    }

    fn single_output(&self, id: LayerId) -> Option<TensorId> {
        match self.net.layer(id).outputs.as_slice() {
            [t] => Some(*t),
            _ => None,
        }
    }

    /// The only reader of `t`, a layer of the subgraph (and `t` no network output).
    fn sole_consumer(&self, t: TensorId) -> Option<LayerId> {
        if self.net.outputs().contains(&t) {
            return None;
        }
        match self.consumers.get(t.0).map(Vec::as_slice) {
            Some([(l, _)]) if self.inside.contains(l) => Some(*l),
            _ => None,
        }
    }

    /// The DequantizeLinear to f32 producing `t`, with constant parameters: per tensor, or
    /// per slice of `axis`.
    fn dequantize(&self, t: TensorId, axis: usize) -> Option<Dq> {
        let id = self.producer(t)?;
        let layer = self.net.layer(id);
        let Op::DequantizeLinear {
            axis: a,
            to: DataType::F32,
            block_size: 0,
        } = layer.op
        else {
            return None;
        };
        let input = *layer.inputs.first()?;
        let scales = self
            .constant(*layer.inputs.get(1)?)?
            .as_slice::<f32>()
            .ok()?
            .to_vec();
        let zeros: Vec<i32> = match layer.inputs.get(2) {
            None => vec![0; scales.len()],
            Some(&z) => {
                let z = self.constant(z)?;
                match z.dtype() {
                    DataType::I8 => z.bytes().iter().map(|&b| i32::from(b as i8)).collect(),
                    DataType::U8 => z.bytes().iter().map(|&b| i32::from(b)).collect(),
                    DataType::I32 => z.as_slice::<i32>().ok()?.to_vec(),
                    _ => return None,
                }
            }
        };
        let positive = scales.iter().all(|s| *s > 0.0 && s.is_finite());
        if scales.len() != zeros.len() || scales.is_empty() || !positive {
            return None;
        }
        if scales.len() > 1 {
            let rank = self.net.tensor(input).info.shape.rank() as i64;
            let a = if a < 0 { a + rank } else { a };
            if a != axis as i64 {
                return None;
            }
        }
        Some(Dq {
            layer: id,
            input,
            scales,
            zeros,
        })
    }

    /// A per-tensor DequantizeLinear of an 8-bit tensor producing `t`.
    fn activations(&self, t: TensorId) -> Option<Dq> {
        let x = self.dequantize(t, 0)?;
        let eight = qlinear::range(self.net.tensor(x.input).info.dtype).is_some();
        (x.scales.len() == 1 && eight).then_some(x)
    }

    /// A DequantizeLinear of constant 8-bit weights producing `t`, per tensor or per slice
    /// of `axis` (the output channels).
    fn weights(&self, t: TensorId, axis: usize) -> Option<Dq> {
        let w = self.dequantize(t, axis)?;
        let eight = qlinear::range(self.net.tensor(w.input).info.dtype).is_some();
        (eight && self.constant(w.input).is_some()).then_some(w)
    }

    /// The optional Relu/Clip, the optional Reshape/Flatten (when `reshape`) and the
    /// per-tensor 8-bit QuantizeLinear after layer `id`, each the only reader of the tensor
    /// before it.
    fn output_chain(&self, id: LayerId, reshape: bool) -> Option<OutChain> {
        let mut replaced = vec![id];
        let mut t = self.single_output(id)?;
        let mut act = (f32::NEG_INFINITY, f32::INFINITY);
        let mut next = self.sole_consumer(t)?;
        let range = match self.net.layer(next).op {
            Op::Unary(UnaryOp::Relu) => Some((0.0, f32::INFINITY)),
            Op::Unary(UnaryOp::Clip { min, max }) if !(min.is_nan() || max.is_nan()) => {
                Some((min, max))
            }
            _ => None,
        };
        if let Some(r) = range {
            replaced.push(next);
            act = r;
            t = self.single_output(next)?;
            next = self.sole_consumer(t)?;
        }
        if reshape
            && matches!(
                self.net.layer(next).op,
                Op::Reshape { .. } | Op::Flatten { .. }
            )
        {
            replaced.push(next);
            next = self.sole_consumer(self.single_output(next)?)?;
        }
        let ql = self.net.layer(next);
        let Op::QuantizeLinear {
            to,
            block_size: 0,
            requant,
            ..
        } = ql.op
        else {
            return None;
        };
        let bounds = qlinear::range(to)?;
        let &[sy] = self.constant(*ql.inputs.get(1)?)?.as_slice::<f32>().ok()? else {
            return None;
        };
        let zy = match ql.inputs.get(2) {
            None => 0,
            Some(&z) => match self.constant(z).map(|z| (z.dtype(), z.bytes())) {
                Some((DataType::I8, [b])) => i32::from(*b as i8),
                Some((DataType::U8, [b])) => i32::from(*b),
                _ => return None,
            },
        };
        if !(sy > 0.0 && sy.is_finite()) {
            return None;
        }
        replaced.push(next);
        Some(OutChain {
            replaced,
            y: self.single_output(next)?,
            q: (sy, zy),
            clamp: activation_range((sy, zy), act, bounds),
            requant,
        })
    }

    /// The int32 bias of `m` channels from tensor `bt`: a DequantizeLinear (zero points 0) of
    /// int32 constants on the scales `sx · sw[c]` (within 1e-6, relative), whose layer joins
    /// `replaced` when the chain alone reads it; or f32 constants divided by those scales and
    /// rounded half to even.
    fn bias(
        &self,
        bt: TensorId,
        sx: f32,
        sw: &[f32],
        m: usize,
        replaced: &mut Vec<LayerId>,
    ) -> Option<Vec<i32>> {
        let scale = |c: usize| f64::from(sx) * f64::from(if sw.len() == 1 { sw[0] } else { sw[c] });
        if let Some(b) = self.constant(bt) {
            let v = b.as_slice::<f32>().ok()?;
            if v.len() != m {
                return None;
            }
            return v
                .iter()
                .enumerate()
                .map(|(c, &b)| {
                    let q = (f64::from(b) / scale(c)).round_ties_even();
                    (q.abs() < 2e9).then_some(q as i32)
                })
                .collect();
        }
        let dq = self.dequantize(bt, 0)?;
        let v = self.constant(dq.input)?.as_slice::<i32>().ok()?;
        if v.len() != m || dq.zeros.iter().any(|&z| z != 0) {
            return None;
        }
        for c in 0..m {
            let s = f64::from(if dq.scales.len() == 1 {
                dq.scales[0]
            } else {
                dq.scales[c]
            });
            if (s - scale(c)).abs() > 1e-6 * scale(c) {
                return None;
            }
        }
        if self.inside.contains(&dq.layer) && self.sole_consumer(bt).is_some() {
            replaced.push(dq.layer);
        }
        Some(v.to_vec())
    }

    /// Adds to `replaced` the layers `dqs` (dequantizations feeding `reader`) that only
    /// `reader` reads; `None` when a layer of `replaced` is already folded elsewhere.
    fn absorb(
        &self,
        reader: LayerId,
        dqs: &[LayerId],
        used: &BTreeSet<LayerId>,
        replaced: &mut Vec<LayerId>,
    ) -> Option<()> {
        for &dq in dqs {
            let only_here = self.sole_consumer(self.single_output(dq)?) == Some(reader);
            if only_here && self.inside.contains(&dq) && !used.contains(&dq) {
                replaced.push(dq);
            }
        }
        (!replaced.iter().any(|l| used.contains(l))).then_some(())
    }

    /// Fold the chain whose Conv is `id`, if it is one.
    fn fold_conv(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Conv(desc) = &layer.op else {
            return None;
        };
        let x = self.activations(*layer.inputs.first()?)?;
        let w = self.weights(*layer.inputs.get(1)?, 0)?;
        let x_dims = self.net.tensor(x.input).info.shape.dims().to_vec();
        let w_dims = self.net.tensor(w.input).info.shape.dims();
        if x_dims.len() != 4 || w_dims.len() != 4 {
            return None;
        }
        let m = w_dims[0];
        let mut out = self.output_chain(id, false)?;
        let mut replaced = std::mem::take(&mut out.replaced);
        let bias = match layer.inputs.get(2) {
            None => vec![0; m],
            Some(&bt) => self.bias(bt, x.scales[0], &w.scales, m, &mut replaced)?,
        };
        let geo = desc.window.geometry(&x_dims[2..], false).ok()?;
        let two = |v: &[usize]| <[usize; 2]>::try_from(v).ok();
        let qdesc = QConvDesc {
            kernel: two(&desc.window.kernel)?,
            strides: two(&geo.strides)?,
            dilations: two(&geo.dilations)?,
            pads: two(&geo.pads_begin)?,
            group: desc.group,
            q: params(&x, &w, &out),
        };
        self.absorb(id, &[x.layer, w.layer], used, &mut replaced)?;
        let y_info = self.net.tensor(out.y).info.clone();
        let op = Op::Custom(qlinear::custom_op(qlinear::QCONV, qdesc, y_info));
        self.integer_layer(replaced, op, [x.input, w.input], bias, out.y)
    }

    /// Fold the chain whose Gemm or MatMul is `id`, if it is one.
    fn fold_product(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let trans_b = match &layer.op {
            Op::Gemm(d) if d.alpha == 1.0 && d.beta == 1.0 && !d.trans_a => d.trans_b,
            Op::MatMul if layer.inputs.len() == 2 => false,
            _ => return None,
        };
        let xt = *layer.inputs.first()?;
        // x, directly or through one Reshape/Flatten that only this product reads.
        let (x, reshape) = match self.activations(xt) {
            Some(x) => (x, None),
            None => {
                let r = self.producer(xt)?;
                let rl = self.net.layer(r);
                let moves = matches!(rl.op, Op::Reshape { .. } | Op::Flatten { .. });
                if !moves || !self.inside.contains(&r) || self.sole_consumer(xt) != Some(id) {
                    return None;
                }
                (self.activations(*rl.inputs.first()?)?, Some(r))
            }
        };
        if self.net.tensor(xt).info.shape.rank() < 2 {
            return None;
        }
        let w = self.weights(*layer.inputs.get(1)?, if trans_b { 0 } else { 1 })?;
        let &[w0, w1] = self.net.tensor(w.input).info.shape.dims() else {
            return None;
        };
        let n = if trans_b { w0 } else { w1 };
        let mut out = self.output_chain(id, true)?;
        let mut replaced = std::mem::take(&mut out.replaced);
        let bias = match layer.inputs.get(2) {
            None => vec![0; n],
            Some(&bt) => {
                let dims = self.net.tensor(bt).info.shape.dims();
                if !(dims == [n] || dims == [1, n]) {
                    return None;
                }
                self.bias(bt, x.scales[0], &w.scales, n, &mut replaced)?
            }
        };
        let qdesc = QGemmDesc {
            trans_b,
            q: params(&x, &w, &out),
        };
        match reshape {
            None => self.absorb(id, &[x.layer, w.layer], used, &mut replaced)?,
            Some(r) => {
                replaced.push(r);
                self.absorb(r, &[x.layer], used, &mut replaced)?;
                self.absorb(id, &[w.layer], used, &mut replaced)?;
            }
        }
        let y_info = self.net.tensor(out.y).info.clone();
        let op = Op::Custom(qlinear::custom_op(qlinear::QGEMM, qdesc, y_info));
        self.integer_layer(replaced, op, [x.input, w.input], bias, out.y)
    }

    /// Fold the chain whose Mul is `id` when its QuantizeLinear asks for the fixed-point
    /// rule (LiteRT's builtin MUL); the f32 chain already equals the f32 rule.
    fn fold_mul(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        if !matches!(layer.op, Op::Binary(BinaryOp::Mul)) {
            return None;
        }
        let a = self.activations(*layer.inputs.first()?)?;
        let b = self.activations(*layer.inputs.get(1)?)?;
        let mut out = self.output_chain(id, false)?;
        if out.requant != Requantization::FixedPoint {
            return None;
        }
        let mut replaced = std::mem::take(&mut out.replaced);
        let desc = QMulDesc {
            a: (a.scales[0], a.zeros[0]),
            b: (b.scales[0], b.zeros[0]),
            y: out.q,
            clamp: out.clamp,
        };
        self.absorb(id, &[a.layer, b.layer], used, &mut replaced)?;
        let y_info = self.net.tensor(out.y).info.clone();
        let op = Op::Custom(qlinear::custom_op(qbuiltin::QMUL, desc, y_info));
        self.replacement(replaced, op, vec![a.input, b.input], out.y)
    }

    /// Fold the chain whose ReduceMean is `id` when its QuantizeLinear asks for the
    /// fixed-point rule (LiteRT's builtin MEAN) and no activation narrows the output: a
    /// 4-D mean over two axes other than the batch, keeping them, the form whose rule LiteRT
    /// was probed for (its other means run other kernels, not followed yet).
    fn fold_mean(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Reduce(desc) = &layer.op else {
            return None;
        };
        if desc.kind != ReduceKind::Mean || layer.inputs.len() != 1 {
            return None;
        }
        let x = self.activations(*layer.inputs.first()?)?;
        let rank = self.net.tensor(x.input).info.shape.rank();
        let reduced = desc.reduced_mask(rank).ok()?;
        let two_spatial = rank == 4 && !reduced[0] && reduced.iter().filter(|&&r| r).count() == 2;
        if !(two_spatial && desc.keepdims) {
            return None;
        }
        let mut out = self.output_chain(id, false)?;
        let y_type = self.net.tensor(out.y).info.dtype;
        if out.requant != Requantization::FixedPoint || Some(out.clamp) != qlinear::range(y_type) {
            return None;
        }
        let mut replaced = std::mem::take(&mut out.replaced);
        let qdesc = QMeanDesc {
            x: (x.scales[0], x.zeros[0]),
            y: out.q,
            reduced,
        };
        self.absorb(id, &[x.layer], used, &mut replaced)?;
        let y_info = self.net.tensor(out.y).info.clone();
        let op = Op::Custom(qlinear::custom_op(qbuiltin::QMEAN, qdesc, y_info));
        self.replacement(replaced, op, vec![x.input], out.y)
    }

    /// One layer `op` reading `operands`, writing `y`, named after the layers it replaces.
    fn replacement(
        &self,
        replaced: Vec<LayerId>,
        op: Op,
        operands: Vec<TensorId>,
        y: TensorId,
    ) -> Option<Substitution> {
        let names: Vec<&str> = replaced
            .iter()
            .map(|&l| self.net.layer(l).name.as_str())
            .collect();
        Some(Substitution {
            replacement: vec![ReplacementLayer {
                name: names.join("+"),
                op,
                inputs: operands.into_iter().map(ValueRef::Existing).collect(),
                outputs: vec![Some(y)],
            }],
            replaced,
        })
    }

    /// One integer layer `op` reading the 8-bit input and weights (`operands`) and the bias
    /// as a new constant, writing `y`, named after the layers it replaces.
    fn integer_layer(
        &self,
        replaced: Vec<LayerId>,
        op: Op,
        operands: [TensorId; 2],
        bias: Vec<i32>,
        y: TensorId,
    ) -> Option<Substitution> {
        let names: Vec<&str> = replaced
            .iter()
            .map(|&l| self.net.layer(l).name.as_str())
            .collect();
        let bias = Tensor::from_vec(vec![bias.len()], bias).ok()?;
        Some(Substitution {
            replacement: vec![ReplacementLayer {
                name: names.join("+"),
                op,
                inputs: vec![
                    ValueRef::Existing(operands[0]),
                    ValueRef::Existing(operands[1]),
                    ValueRef::NewConstant(Arc::new(bias)),
                ],
                outputs: vec![Some(y)],
            }],
            replaced,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::evaluate;
    use crate::test_util::tensor;
    use backplane_core::ops::{ConvDesc, GemmDesc, Window};
    use backplane_core::TensorInfo;

    fn dq(net: &mut Network, name: &str, t: TensorId, scales: &[f32], zero: i8) -> TensorId {
        let n = scales.len();
        let s = if n == 1 {
            Tensor::scalar(scales[0])
        } else {
            Tensor::from_vec(vec![n], scales.to_vec()).unwrap()
        };
        let z = if n == 1 {
            Tensor::scalar(zero)
        } else {
            Tensor::from_vec(vec![n], vec![zero; n]).unwrap()
        };
        let s = net.add_constant(&format!("{name}_s"), s).unwrap();
        let z = net.add_constant(&format!("{name}_z"), z).unwrap();
        let op = Op::DequantizeLinear {
            axis: 0,
            to: DataType::F32,
            block_size: 0,
        };
        net.add_layer(name, op, &[t, s, z]).unwrap()[0]
    }

    fn quantize(net: &mut Network, t: TensorId, sy: f32, zy: i8) -> TensorId {
        quantize_by(net, t, sy, zy, Requantization::F32)
    }

    fn quantize_by(
        net: &mut Network,
        t: TensorId,
        sy: f32,
        zy: i8,
        requant: Requantization,
    ) -> TensorId {
        let s = net.add_constant("y_s", Tensor::scalar(sy)).unwrap();
        let z = net.add_constant("y_z", Tensor::scalar(zy)).unwrap();
        let op = Op::QuantizeLinear {
            axis: 1,
            to: DataType::I8,
            block_size: 0,
            saturate: true,
            requant,
        };
        let y = net.add_layer("q", op, &[t, s, z]).unwrap()[0];
        net.mark_output(y).unwrap();
        y
    }

    /// Deterministic 8-bit values spread over the range.
    fn bytes(n: usize, seed: u64) -> Vec<f64> {
        (0..n as u64)
            .map(|i| ((i * 7919 + seed * 104_729) % 251) as f64 - 125.0)
            .collect()
    }

    /// Every layer runs through CpuRef's kernels in network order; the outputs' values.
    fn run_layers(net: &Network, x: &Tensor) -> Vec<f64> {
        let mut values: Vec<Option<Tensor>> = vec![None; net.tensors().len()];
        values[net.inputs()[0].0] = Some(x.clone());
        for layer in net.layers() {
            let ins: Vec<Tensor> = layer
                .inputs
                .iter()
                .map(|&t| match net.tensor(t).constant() {
                    Some(c) => (**c).clone(),
                    None => values[t.0].clone().unwrap(),
                })
                .collect();
            let refs: Vec<&Tensor> = ins.iter().collect();
            for (t, v) in layer
                .outputs
                .iter()
                .zip(evaluate(&layer.op, &refs).unwrap())
            {
                values[t.0] = Some(v);
            }
        }
        values[net.outputs()[0].0].clone().unwrap().to_f64_vec()
    }

    /// The one substitution of `net` run on `x`: its replaced layers' count and its values.
    fn folded(net: &Network, x: &Tensor) -> (usize, Vec<f64>) {
        let ids: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
        let views = optimize(&SubgraphView::new(net, ids));
        assert_eq!(views.substitutions.len(), 1);
        let s = &views.substitutions[0];
        let r = &s.replacement[0];
        let ins: Vec<Tensor> = r
            .inputs
            .iter()
            .map(|v| match v {
                ValueRef::Existing(t) if *t == net.inputs()[0] => x.clone(),
                ValueRef::Existing(t) => (**net.tensor(*t).constant().unwrap()).clone(),
                ValueRef::NewConstant(c) => (**c).clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        let y = evaluate(&r.op, &refs).unwrap();
        (s.replaced.len(), y[0].to_f64_vec())
    }

    /// A Mul of two dequantized tensors and a ReduceMean of one fold into CpuRef's
    /// fixed-point layers when their QuantizeLinear asks for that rule, and stay f32
    /// chains (XNNPACK's rule, which the f32 chain already gives) otherwise.
    #[test]
    fn fixed_point_mul_and_mean_chains_fold_and_f32_ones_do_not() {
        use backplane_core::ops::{ReduceDesc, ReduceKind};
        for requant in [Requantization::F32, Requantization::FixedPoint] {
            for mean in [false, true] {
                let mut net = Network::new();
                let a = TensorInfo::new(DataType::I8, vec![1, 4, 3, 3]);
                let a = net.add_input("a", a).unwrap();
                let da = dq(&mut net, "a", a, &[0.05], 3);
                let y = if mean {
                    let op = Op::Reduce(ReduceDesc {
                        kind: ReduceKind::Mean,
                        axes: vec![2, 3],
                        keepdims: true,
                        noop_with_empty_axes: false,
                    });
                    net.add_layer("mean", op, &[da]).unwrap()[0]
                } else {
                    let b = TensorInfo::new(DataType::I8, vec![1, 4, 1, 1]);
                    let b = net.add_input("b", b).unwrap();
                    let db = dq(&mut net, "b", b, &[0.02], -1);
                    let op = Op::Binary(BinaryOp::Mul);
                    net.add_layer("mul", op, &[da, db]).unwrap()[0]
                };
                quantize_by(&mut net, y, 0.01, 2, requant);
                let ids: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
                let views = optimize(&SubgraphView::new(&net, ids));
                if requant == Requantization::F32 {
                    assert!(views.substitutions.is_empty(), "mean {mean}");
                    continue;
                }
                assert_eq!(views.substitutions.len(), 1, "mean {mean}");
                let s = &views.substitutions[0];
                // The product, the quantize and the dequantizations.
                assert_eq!(s.replaced.len(), if mean { 3 } else { 4 });
                let Op::Custom(c) = &s.replacement[0].op else {
                    panic!("{:?}", s.replacement[0].op);
                };
                let want = if mean {
                    qbuiltin::QMEAN
                } else {
                    qbuiltin::QMUL
                };
                assert_eq!(c.op_type, want);
                let infos: Vec<TensorInfo> = s.replacement[0]
                    .inputs
                    .iter()
                    .map(|v| match v {
                        ValueRef::Existing(t) => net.tensor(*t).info.clone(),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                let refs: Vec<&TensorInfo> = infos.iter().collect();
                assert!(qbuiltin::kernel(c, &refs).is_ok());
            }
        }
    }

    #[test]
    fn depthwise_and_grouped_convolutions_fold_and_stay_within_a_quantum_of_the_chain() {
        for (c, m, group) in [(3, 3, 3), (4, 6, 2), (5, 7, 1)] {
            let (h, w) = (7, 5);
            let mut net = Network::new();
            let xi = tensor(DataType::I8, &[1, c, h, w], &bytes(c * h * w, 1));
            let x = net.add_input("x", xi.info().clone()).unwrap();
            let xf = dq(&mut net, "dq_x", x, &[0.05], 3);
            let wv = tensor(
                DataType::I8,
                &[m, c / group, 3, 3],
                &bytes(m * c / group * 9, 2),
            );
            let wt = net.add_constant("w", wv).unwrap();
            let scales: Vec<f32> = (0..m).map(|i| 0.01 + 0.003 * i as f32).collect();
            let wf = dq(&mut net, "dq_w", wt, &scales, 0);
            let b: Vec<f32> = (0..m).map(|i| i as f32 * 0.01 - 0.02).collect();
            let bt = net
                .add_constant("b", Tensor::from_vec(vec![m], b).unwrap())
                .unwrap();
            let window = Window {
                kernel: vec![3, 3],
                strides: vec![2, 1],
                pads: vec![1, 1, 1, 1],
                ..Window::default()
            };
            let op = Op::Conv(ConvDesc { window, group });
            let y = net.add_layer("conv", op, &[xf, wf, bt]).unwrap()[0];
            let y = net
                .add_layer("relu", Op::Unary(UnaryOp::Relu), &[y])
                .unwrap()[0];
            quantize(&mut net, y, 0.02, -5);
            let chain = run_layers(&net, &xi);
            let (replaced, got) = folded(&net, &xi);
            // conv, relu, q and both dequantizations.
            assert_eq!(replaced, 5, "c {c} m {m} group {group}");
            assert_eq!(got.len(), chain.len());
            assert!(got.iter().all(|&v| v >= -5.0), "relu's floor: {got:?}");
            let worst = got
                .iter()
                .zip(&chain)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(worst <= 1.0, "c {c} m {m} group {group}: {worst}");
            assert!(got.iter().any(|&v| v > 0.0), "all clamped: {got:?}");
        }
    }

    #[test]
    fn fully_connected_folds_through_a_reshape() {
        let (k, n) = (12, 5);
        let mut net = Network::new();
        let xi = tensor(DataType::I8, &[1, 3, 2, 2], &bytes(k, 3));
        let x = net.add_input("x", xi.info().clone()).unwrap();
        let xf = dq(&mut net, "dq_x", x, &[0.1], -2);
        let xr = net
            .add_layer("reshape", Op::Reshape { shape: vec![1, k] }, &[xf])
            .unwrap()[0];
        let wt = net
            .add_constant("w", tensor(DataType::I8, &[n, k], &bytes(n * k, 4)))
            .unwrap();
        let wf = dq(&mut net, "dq_w", wt, &[0.02], 0);
        let op = Op::Gemm(GemmDesc {
            trans_b: true,
            ..GemmDesc::default()
        });
        let y = net.add_layer("gemm", op, &[xr, wf]).unwrap()[0];
        quantize(&mut net, y, 0.5, 1);
        let chain = run_layers(&net, &xi);
        let (replaced, got) = folded(&net, &xi);
        assert_eq!(replaced, 5);
        // Exact sums, by hand: one scale 0.1 · 0.02 / 0.5 for every output.
        let xs = bytes(k, 3);
        let ws = bytes(n * k, 4);
        for j in 0..n {
            let sum: i64 = (0..k)
                .map(|i| (xs[i] as i64 + 2) * ws[j * k + i] as i64)
                .sum();
            let scale = backplane_core::quant::requant_scale(0.1, 0.02, 0.5);
            let want = backplane_core::quant::requantize(sum, scale, 1, -128, 127);
            assert_eq!(got[j], f64::from(want), "output {j}");
            assert!((got[j] - chain[j]).abs() <= 1.0);
        }
    }

    #[test]
    fn chains_that_are_not_quantized_patterns_stay_as_they_are() {
        // A Conv of f32 weights between quantizations: nothing to fold.
        let mut net = Network::new();
        let xi = tensor(DataType::I8, &[1, 1, 3, 3], &bytes(9, 5));
        let x = net.add_input("x", xi.info().clone()).unwrap();
        let xf = dq(&mut net, "dq_x", x, &[0.1], 0);
        let w = net
            .add_constant(
                "w",
                Tensor::from_vec(vec![1, 1, 1, 1], vec![0.5f32]).unwrap(),
            )
            .unwrap();
        let window = Window {
            kernel: vec![1, 1],
            ..Window::default()
        };
        let op = Op::Conv(ConvDesc { window, group: 1 });
        let y = net.add_layer("conv", op, &[xf, w]).unwrap()[0];
        quantize(&mut net, y, 0.1, 0);
        let ids: Vec<LayerId> = (0..net.layers().len()).map(LayerId).collect();
        let views = optimize(&SubgraphView::new(&net, ids));
        assert!(views.substitutions.is_empty());
    }
}

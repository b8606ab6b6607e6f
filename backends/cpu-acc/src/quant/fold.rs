//! Folding of quantized chains in `optimize_subgraph`: `DequantizeLinear(x) →
//! Conv(·, DequantizeLinear(w const), bias) → (Relu | Clip) → QuantizeLinear` becomes one
//! int8 convolution ([`super::conv`]), as ONNX QDQ models and the TFLite importer write
//! quantized convolutions; `DequantizeLinear(a), DequantizeLinear(b) → Add | Sub | Mul | Max |
//! Min → (Relu | Clip) → QuantizeLinear` (broadcasting allowed) becomes one quantized binary layer
//! ([`super::binary`]); the same chain around a Gemm one int8 fully connected layer
//! ([`super::gemm`]), and around a MatMul of constant weights too ([`matmul`]); the chain
//! ONNX's QLinearConv is imported as becomes the int8 convolution ([`qoperator`]); data
//! movement between equal quantizations moves the 8-bit values ([`movement`]);
//! `DequantizeLinear → elementwise functions of one input → QuantizeLinear` becomes a byte
//! table ([`lookup`]); `DequantizeLinear → mean over the pixels → QuantizeLinear` the
//! quantized mean ([`mean`]); the integer forms of TFLite's HARD_SWISH and AVERAGE_POOL_2D
//! (`Lookup`, `IntegerAveragePool`) the byte table and the quantized pool ([`qint`]); a
//! DequantizeLinear left with no reader goes too. The rest of the
//! subgraph then goes through the float fusions.
//!
//! The folded layer computes exact int32 sums and requantizes them by TFLite's rule, where
//! the unfolded chain computes in f32 and rounds half to even: results may differ by one
//! quantum where the real result lies on or next to a rounding boundary.

use super::binary::QBinaryDesc;
use super::conv::{clamp_range, QConvDesc};
use super::gemm::QGemmDesc;
use super::is_8bit;
use crate::act::{Activation, FromOp};
use backplane_backend_api::{
    OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef,
};
use backplane_core::quant::Requantization;
use backplane_core::{DataType, LayerId, Network, Op, Tensor, TensorId, TensorKind};
use std::collections::BTreeSet;
use std::sync::Arc;

mod integer;
mod lookup;
mod matmul;
mod mean;
mod movement;
mod qint;
mod qoperator;
mod taps;

/// Fold the quantized chains of `view`, then hand the remaining layers to `rest` (the float
/// fusions) and merge both answers.
pub(crate) fn optimize(
    view: &SubgraphView<'_>,
    rest: impl Fn(&SubgraphView<'_>) -> OptimizationViews,
) -> OptimizationViews {
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
            .or_else(|| g.fold_qlinear_conv(id, &used))
            .or_else(|| g.fold_gemm(id, &used))
            .or_else(|| g.fold_matmul(id, &used))
            .or_else(|| g.fold_matmul_integer(id, &used))
            .or_else(|| g.fold_movement(id, &used))
            .or_else(|| g.fold_lookup(id, &used))
            .or_else(|| g.fold_mean(id, &used))
            .or_else(|| g.fold_pool(id, &used))
            .or_else(|| g.fold_integer_form(id))
            .or_else(|| g.fold_binary(id, &used));
        if let Some(s) = folded {
            used.extend(s.replaced.iter().copied());
            subs.push(s);
        }
    }
    if subs.is_empty() {
        return rest(view);
    }
    g.fuse_table_binaries(&mut subs);
    g.fuse_constant_binaries(&mut subs);
    g.drop_dead_dequantize(view, &mut used, &mut subs);
    let mut subs = super::region::channels_last(view, subs, &mut used);
    let left: Vec<LayerId> = view
        .layers()
        .iter()
        .copied()
        .filter(|l| !used.contains(l))
        .collect();
    let mut answer = rest(&SubgraphView::new(net, left));
    subs.append(&mut answer.substitutions);
    answer.substitutions = subs;
    answer
}

/// The layers after a folded layer up to its QuantizeLinear, and what they make.
struct OutChain {
    /// The folded layer, its activation (if any) and the QuantizeLinear.
    replaced: Vec<LayerId>,
    /// The QuantizeLinear's output.
    y: TensorId,
    /// Its 8-bit type.
    to: DataType,
    /// Its scale and zero point.
    q: (f32, i32),
    /// The activation's range (real values).
    act: (f32, f32),
    /// The QuantizeLinear's requantization rule.
    requant: Requantization,
}

struct Chains<'a> {
    net: &'a Network,
    inside: BTreeSet<LayerId>,
    consumers: Vec<Vec<(LayerId, usize)>>,
}

/// A per-tensor or per-axis DequantizeLinear's parts: its 8-bit input, scales, zero points.
struct Dq {
    layer: LayerId,
    input: TensorId,
    scales: Vec<f32>,
    zeros: Vec<i32>,
}

impl Chains<'_> {
    /// The layer computing `t`, inside the subgraph or not: a DequantizeLinear of constant
    /// weights may sit in another run (the optimizer orders constant-only layers first); the
    /// folded layer then reads the integers and leaves that layer alone.
    fn producer(&self, t: TensorId) -> Option<LayerId> {
        match self.net.tensor(t).kind {
            TensorKind::Produced { layer, .. } => Some(layer),
            _ => None,
        }
    }

    fn constant(&self, t: TensorId) -> Option<&Arc<Tensor>> {
        self.net.tensor(t).constant()
    }

    /// The only consumer of `t` (inside the subgraph, `t` no network output).
    fn sole_consumer(&self, t: TensorId) -> Option<LayerId> {
        if self.net.outputs().contains(&t) {
            return None;
        }
        match self.consumers.get(t.0).map(Vec::as_slice) {
            Some([(l, _)]) if self.inside.contains(l) => Some(*l),
            _ => None,
        }
    }

    fn supported(&self, id: LayerId) -> bool {
        let view = SubgraphView::new(self.net, vec![id]);
        crate::support::check(&view.layer_desc(id)).is_ok()
    }

    /// Adds to `replaced` the dequantizations `dqs` feeding layer `id` that only `id` reads
    /// (and no earlier substitution took); `None` when a layer in `replaced` is already
    /// taken, so the fold is dropped.
    fn absorb_dequantizations(
        &self,
        id: LayerId,
        dqs: &[LayerId],
        used: &BTreeSet<LayerId>,
        replaced: &mut Vec<LayerId>,
    ) -> Option<()> {
        for &dq in dqs {
            let only_here = self.sole_consumer(self.single_output(dq)?) == Some(id);
            if only_here && self.inside.contains(&dq) && !used.contains(&dq) {
                replaced.push(dq);
            }
        }
        if replaced.iter().any(|l| used.contains(l)) {
            return None;
        }
        Some(())
    }

    fn single_output(&self, id: LayerId) -> Option<TensorId> {
        match self.net.layer(id).outputs.as_slice() {
            [t] => Some(*t),
            _ => None,
        }
    }

    /// The weights of a product over 8-bit activations `x` with one scale for the whole
    /// tensor: the DequantizeLinear of an 8-bit constant producing `wt`, on axis `axis` when
    /// per-axis.
    fn int8_weights(&self, x: &Dq, wt: TensorId, axis: usize) -> Option<Dq> {
        let w = self.dequantize(wt, axis)?;
        let fits = x.scales.len() == 1
            && is_8bit(self.net.tensor(x.input).info.dtype)
            && is_8bit(self.net.tensor(w.input).info.dtype)
            && self.constant(w.input).is_some();
        fits.then_some(w)
    }

    /// The per-tensor DequantizeLinear producing `t` of an 8-bit tensor, its scale positive
    /// and finite: the input the folded quantized layers read (with its scale and zero point).
    fn per_tensor_8bit(&self, t: TensorId, axis: usize) -> Option<(Dq, f32, i32)> {
        let x = self.dequantize(t, axis)?;
        let (s, z) = self.per_tensor_params(&x)?;
        Some((x, s, z))
    }

    /// The scale and zero point of `dq` when it is per tensor, of an 8-bit tensor, its
    /// scale positive and finite.
    fn per_tensor_params(&self, dq: &Dq) -> Option<(f32, i32)> {
        let dt = self.net.tensor(dq.input).info.dtype;
        let (&[s], &[z]) = (dq.scales.as_slice(), dq.zeros.as_slice()) else {
            return None;
        };
        (is_8bit(dt) && s > 0.0 && s.is_finite()).then_some((s, z))
    }

    /// The DequantizeLinear producing `t`, with constant parameters, on axis `axis` when
    /// per-axis.
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
        let dt = self.net.tensor(input).info.dtype;
        if !is_8bit(dt) && dt != DataType::I32 {
            return None;
        }
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
        if scales.len() != zeros.len() || scales.is_empty() {
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

    /// Fold the chain whose Conv is `id`, if it is one.
    fn fold_conv(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Conv(desc) = &layer.op else {
            return None;
        };
        let (xt, wt) = (*layer.inputs.first()?, *layer.inputs.get(1)?);
        let x = self.dequantize(xt, 1)?;
        let w = self.int8_weights(&x, wt, 0)?;
        let x_info = &self.net.tensor(x.input).info;
        let w_info = &self.net.tensor(w.input).info;
        let (x_dims, w_dims) = (x_info.shape.dims(), w_info.shape.dims());
        if x_dims.len() != 4 || w_dims.len() != 4 {
            return None;
        }
        let m = w_dims[0];
        let (sx, zx) = (x.scales[0], x.zeros[0]);
        let OutChain {
            mut replaced,
            y,
            to,
            q: (sy, zy),
            act,
            requant,
        } = self.quantized_output(id)?;
        // Bias: a dequantized int32 constant on the product's scale, or f32 values put on it.
        let bias: Vec<i32> = match layer.inputs.get(2) {
            None => vec![0; m],
            Some(&bt) => self.bias(bt, sx, &w.scales, m, &mut replaced)?,
        };
        // Geometry: the pads the core's window resolves over this input.
        let spatial = &x_dims[2..];
        let geo = desc.window.geometry(spatial, false).ok()?;
        let two = |v: &[usize]| -> Option<[usize; 2]> { <[usize; 2]>::try_from(v).ok() };
        let (strides, dilations) = (two(&geo.strides)?, two(&geo.dilations)?);
        let (mut kernel, mut pads) = (two(&desc.window.kernel)?, two(&geo.pads_begin)?);
        // Kernel taps that read only padding for every output go (see `taps`).
        let y_dims = self.net.tensor(y).info.shape.dims();
        let trimmed = match (two(spatial), y_dims.get(2..4).and_then(two)) {
            (Some(spatial), Some(out)) => self
                .constant(w.input)
                .and_then(|wc| taps::trim(wc, spatial, out, strides, dilations, pads)),
            _ => None,
        };
        if let Some(t) = &trimmed {
            (kernel, pads) = (t.kernel, t.pads);
        }
        let qdesc = QConvDesc {
            kernel,
            strides,
            dilations,
            pads,
            group: desc.group,
            x: (sx, zx),
            y: (sy, zy),
            w_scales: w.scales.clone(),
            w_zeros: w.zeros.clone(),
            clamp: clamp_range(to, (sy, zy), act.0, act.1),
            nhwc: false,
            requant,
        };
        // The dequantizations go too where nothing else reads them.
        self.absorb_dequantizations(id, &[x.layer, w.layer], used, &mut replaced)?;
        let y_info = self.net.tensor(y).info.clone();
        let bias = Tensor::from_vec(vec![m], bias).ok()?;
        let op = Op::Custom(qdesc.to_op(y_info));
        if let Some(t) = trimmed {
            let inputs = vec![
                ValueRef::Existing(x.input),
                ValueRef::NewConstant(Arc::new(t.weights)),
                ValueRef::NewConstant(Arc::new(bias)),
            ];
            return Some(self.one_layer(replaced, op, inputs, y));
        }
        Some(self.int8_layer(replaced, op, [x.input, w.input], bias, y))
    }

    /// The substitution of a folded chain: one int8 layer `op` reading the chain's 8-bit input
    /// and weights (`operands`) and its bias as a new constant, writing `y`, named after the
    /// layers it replaces. The bias is folded anew in every plan; where the weights are a
    /// constant, every plan's layer gets the tensor the first plan made with those values
    /// (`crate::weights::shared`, keyed by the weights and the bias values), so the plans'
    /// networks hold one copy.
    fn int8_layer(
        &self,
        replaced: Vec<LayerId>,
        op: Op,
        operands: [TensorId; 2],
        bias: Tensor,
        y: TensorId,
    ) -> Substitution {
        let key: Option<Vec<usize>> = bias
            .as_slice::<i32>()
            .ok()
            .map(|v| v.iter().map(|&b| b as u32 as usize).collect());
        let bias = match (self.constant(operands[1]), key) {
            (Some(w), Some(key)) => {
                let fresh = Arc::new(bias);
                crate::weights::shared(w, "int8_bias", &key, || Ok(fresh.as_ref().clone()))
                    .unwrap_or(fresh)
            }
            _ => Arc::new(bias),
        };
        let inputs = vec![
            ValueRef::Existing(operands[0]),
            ValueRef::Existing(operands[1]),
            ValueRef::NewConstant(bias),
        ];
        self.one_layer(replaced, op, inputs, y)
    }

    /// The substitution of the chain's layers `replaced` by one layer computing `y`, named
    /// after them: every fold's answer.
    fn one_layer(
        &self,
        replaced: Vec<LayerId>,
        op: Op,
        inputs: Vec<ValueRef>,
        y: TensorId,
    ) -> Substitution {
        let names: Vec<&str> = replaced
            .iter()
            .map(|&l| self.net.layer(l).name.as_str())
            .collect();
        Substitution {
            replacement: vec![ReplacementLayer {
                name: names.join("+"),
                op,
                inputs,
                outputs: vec![Some(y)],
            }],
            replaced,
        }
    }

    /// Fold the chain whose Gemm is `id`, if it is one: `alpha = beta = 1`, A not
    /// transposed, a per-tensor 8-bit `[M, K]` input, constant 8-bit weights per tensor or
    /// per output channel, a bias of N values (or none).
    fn fold_gemm(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Gemm(desc) = &layer.op else {
            return None;
        };
        if desc.alpha != 1.0 || desc.beta != 1.0 || desc.trans_a {
            return None;
        }
        let (xt, wt) = (*layer.inputs.first()?, *layer.inputs.get(1)?);
        let (x, reshape) = self.product_input(xt, id)?;
        let w = self.int8_weights(&x, wt, if desc.trans_b { 0 } else { 1 })?;
        let w_info = &self.net.tensor(w.input).info;
        let &[w0, w1] = w_info.shape.dims() else {
            return None;
        };
        let n = if desc.trans_b { w0 } else { w1 };
        let (sx, zx) = (x.scales[0], x.zeros[0]);
        let OutChain {
            mut replaced,
            y,
            to,
            q: (sy, zy),
            act,
            requant,
        } = self.output_chain(id, true)?;
        let bias: Vec<i32> = match layer.inputs.get(2) {
            None => vec![0; n],
            Some(&bt) => {
                // A bias along the output channels only ([N] or [1, N]).
                let dims = self.net.tensor(bt).info.shape.dims();
                if !(dims == [n] || dims == [1, n]) {
                    return None;
                }
                self.bias(bt, sx, &w.scales, n, &mut replaced)?
            }
        };
        let qdesc = QGemmDesc {
            x: (sx, zx),
            y: (sy, zy),
            w_scales: w.scales.clone(),
            w_zeros: w.zeros.clone(),
            trans_b: desc.trans_b,
            clamp: clamp_range(to, (sy, zy), act.0, act.1),
            requant,
        };
        self.absorb_product_input(id, &x, reshape, w.layer, used, &mut replaced)?;
        let y_info = self.net.tensor(y).info.clone();
        let bias = Tensor::from_vec(vec![n], bias).ok()?;
        let op = Op::Custom(qdesc.to_op(y_info));
        Some(self.int8_layer(replaced, op, [x.input, w.input], bias, y))
    }

    /// The optional Relu/Clip and the per-tensor 8-bit QuantizeLinear after layer `id`, each
    /// the sole consumer of the tensor before it.
    fn quantized_output(&self, id: LayerId) -> Option<OutChain> {
        self.output_chain(id, false)
    }

    /// [`Self::quantized_output`], with one Reshape or Flatten allowed before the
    /// QuantizeLinear when `reshape` (a product's rows keep their order).
    fn output_chain(&self, id: LayerId, reshape: bool) -> Option<OutChain> {
        let mut replaced = vec![id];
        let mut t = self.single_output(id)?;
        let mut act = (f32::NEG_INFINITY, f32::INFINITY);
        let next = self.sole_consumer(t)?;
        let next = match &self.net.layer(next).op {
            Op::Unary(u) => match Activation::from_unary(*u) {
                Activation::Relu => Some((next, (0.0, f32::INFINITY))),
                Activation::Clip { min, max } => Some((next, (min, max))),
                _ => return None,
            },
            _ => None,
        };
        if let Some((a, range)) = next {
            if !self.supported(a) {
                return None;
            }
            replaced.push(a);
            act = range;
            t = self.single_output(a)?;
        }
        let mut q = self.sole_consumer(t)?;
        if reshape
            && matches!(
                self.net.layer(q).op,
                Op::Reshape { .. } | Op::Flatten { .. }
            )
        {
            replaced.push(q);
            q = self.sole_consumer(self.single_output(q)?)?;
        }
        let (to, sy, zy) = self.quantizer(q)?;
        let requant = match self.net.layer(q).op {
            Op::QuantizeLinear { requant, .. } => requant,
            _ => Requantization::F32,
        };
        replaced.push(q);
        let y = self.single_output(q)?;
        Some(OutChain {
            replaced,
            y,
            to,
            q: (sy, zy),
            act,
            requant,
        })
    }

    /// The 8-bit type, scale and zero point of `q` if it is a per-tensor QuantizeLinear to
    /// an 8-bit type with constant parameters (a positive finite scale).
    fn quantizer(&self, q: LayerId) -> Option<(DataType, f32, i32)> {
        let ql = self.net.layer(q);
        let Op::QuantizeLinear {
            to, block_size: 0, ..
        } = ql.op
        else {
            return None;
        };
        if !is_8bit(to) {
            return None;
        }
        let sy = self.constant(*ql.inputs.get(1)?)?.as_slice::<f32>().ok()?;
        let zy = match ql.inputs.get(2) {
            None => 0,
            Some(&z) => {
                let z = self.constant(z)?;
                match (z.dtype(), z.bytes()) {
                    (DataType::I8, [b]) => i32::from(*b as i8),
                    (DataType::U8, [b]) => i32::from(*b),
                    _ => return None,
                }
            }
        };
        let [sy] = sy else {
            return None;
        };
        (*sy > 0.0 && sy.is_finite()).then_some((to, *sy, zy))
    }

    /// Fold the chain whose elementwise binary layer is `id`: two per-tensor 8-bit inputs
    /// (or one and an f32 constant) of the output's shape or broadcast to it.
    fn fold_binary(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Binary(op) = layer.op else {
            return None;
        };
        if !super::binary::foldable(op) {
            return None;
        }
        let [at, bt] = layer.inputs.as_slice() else {
            return None;
        };
        // Two dequantized 8-bit operands, or one and an f32 constant (either side).
        let (a, b, k, const_first) = match (self.dequantize(*at, 0), self.dequantize(*bt, 0)) {
            (Some(a), Some(b)) => (a, Some(b), None, false),
            (Some(a), None) => (a, None, Some(self.f32_constant(*bt)?), false),
            (None, Some(b)) => (b, None, Some(self.f32_constant(*at)?), true),
            (None, None) => return None,
        };
        let shape = &self.net.tensor(self.single_output(id)?).info.shape;
        for dq in std::iter::once(&a).chain(b.as_ref()) {
            self.per_tensor_params(dq)?;
        }
        let dims = |t: TensorId| self.net.tensor(t).info.shape.dims();
        let b_dims = match (&b, &k) {
            (Some(b), _) => dims(b.input),
            (None, Some((_, d))) => d.as_slice(),
            (None, None) => return None,
        };
        if !super::binary::broadcasts(dims(a.input), b_dims, shape.dims()) {
            return None;
        }
        let OutChain {
            mut replaced,
            y,
            to,
            q,
            act,
            requant,
        } = self.quantized_output(id)?;
        let dqs: Vec<LayerId> = std::iter::once(&a).chain(&b).map(|d| d.layer).collect();
        self.absorb_dequantizations(id, &dqs, used, &mut replaced)?;
        let desc = QBinaryDesc {
            op,
            a: (a.scales[0], a.zeros[0]),
            b: b.as_ref().map_or((1.0, 0), |b| (b.scales[0], b.zeros[0])),
            y: q,
            clamp: clamp_range(to, q, act.0, act.1),
            b_const: k,
            const_first,
            stages: Vec::new(),
            requant,
        };
        let inputs: Vec<ValueRef> = std::iter::once(&a)
            .chain(&b)
            .map(|d| ValueRef::Existing(d.input))
            .collect();
        let op = Op::Custom(desc.to_op(self.net.tensor(y).info.clone()));
        Some(self.one_layer(replaced, op, inputs, y))
    }

    /// The values and dims of an f32 constant `t`.
    fn f32_constant(&self, t: TensorId) -> Option<(Vec<f32>, Vec<usize>)> {
        let c = self.constant(t)?;
        let v = c.as_slice::<f32>().ok()?.to_vec();
        Some((v, self.net.tensor(t).info.shape.dims().to_vec()))
    }

    /// A DequantizeLinear of the subgraph whose every consumer was folded into one
    /// substitution (its layers read the 8-bit input) goes with that substitution. One read
    /// by layers of several substitutions stays (and computes a tensor no one reads): the
    /// runtime validates substitutions one by one.
    fn drop_dead_dequantize(
        &self,
        view: &SubgraphView<'_>,
        used: &mut BTreeSet<LayerId>,
        subs: &mut [Substitution],
    ) {
        for &id in view.layers() {
            if used.contains(&id) || !matches!(self.net.layer(id).op, Op::DequantizeLinear { .. }) {
                continue;
            }
            let Some(t) = self.single_output(id) else {
                continue;
            };
            let readers = self.consumers.get(t.0).map(Vec::as_slice).unwrap_or(&[]);
            if self.net.outputs().contains(&t)
                || readers.is_empty()
                || readers.iter().any(|(l, _)| !used.contains(l))
            {
                continue;
            }
            // The runtime checks each substitution alone: the layer can only go with one
            // that replaces every reader.
            let first = readers[0].0;
            if let Some(s) = subs.iter_mut().find(|s| s.replaced.contains(&first)) {
                if readers.iter().all(|(l, _)| s.replaced.contains(l)) {
                    s.replaced.push(id);
                    used.insert(id);
                }
            }
        }
    }

    /// The int32 bias of `m` channels from tensor `bt`: a DequantizeLinear of an int32
    /// constant whose scales are the products `sx · sw` (as quantizers write them), or an
    /// f32 constant divided by those scales and rounded.
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
                    let q = (f64::from(b) / scale(c)).round();
                    (q.abs() < 2e9).then_some(q as i32)
                })
                .collect();
        }
        let dq = self.dequantize(bt, 0)?;
        let values = self.constant(dq.input)?;
        let v = values.as_slice::<i32>().ok()?;
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
        if self.inside.contains(&dq.layer)
            && self.sole_consumer(self.single_output(dq.layer)?).is_some()
        {
            replaced.push(dq.layer);
        }
        Some(v.to_vec())
    }
}

//! Graph patterns that several backends' `optimize_subgraph` fuse: the exporters' SiLU and
//! GELU subgraphs (erf and tanh forms) and a BatchNormalization folded into the convolution
//! before it.
//!
//! Helpers for writing [`crate::Backend::optimize_subgraph`], not part of the contract
//! between the runtime and a backend: a backend may use them or match its own patterns.

use crate::{LayerDesc, SubgraphView};
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{LayerId, Op, Tensor, TensorId};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A fusion pass over a subgraph: who reads each tensor, which layers are in the subgraph and
/// which a fusion already took, and the backend's support test. The patterns below read it; a
/// backend's own patterns may too.
pub struct Fusion<'a> {
    view: &'a SubgraphView<'a>,
    inside: BTreeSet<LayerId>,
    readers: Vec<Vec<(LayerId, usize)>>,
    taken: BTreeSet<LayerId>,
    supported: Box<dyn Fn(&LayerDesc) -> bool + 'a>,
}

impl<'a> Fusion<'a> {
    /// A pass over `view`, where `supported` says whether the backend runs a layer (also a
    /// replacement layer a fusion would make).
    pub fn new(view: &'a SubgraphView<'a>, supported: impl Fn(&LayerDesc) -> bool + 'a) -> Self {
        Fusion {
            view,
            inside: view.layers().iter().copied().collect(),
            readers: view.network().consumers(),
            taken: BTreeSet::new(),
            supported: Box::new(supported),
        }
    }

    /// The subgraph.
    pub fn view(&self) -> &'a SubgraphView<'a> {
        self.view
    }

    /// The layers reading tensor `t` (with the input slot), across the whole network.
    pub fn readers(&self, t: TensorId) -> &[(LayerId, usize)] {
        self.readers.get(t.0).map_or(&[], Vec::as_slice)
    }

    /// Whether layer `l` is in the subgraph and not yet taken by a fusion.
    pub fn available(&self, l: LayerId) -> bool {
        self.inside.contains(&l) && !self.taken.contains(&l)
    }

    /// Whether a fusion took layer `l`.
    pub fn is_taken(&self, l: LayerId) -> bool {
        self.taken.contains(&l)
    }

    /// Mark `layers` as taken by a fusion.
    pub fn take(&mut self, layers: &[LayerId]) {
        self.taken.extend(layers.iter().copied());
    }

    /// Whether the backend runs layer `l` of the network on its own.
    pub fn supported(&self, l: LayerId) -> bool {
        (self.supported)(&self.view.layer_desc(l))
    }

    /// Whether the backend runs the layer `desc` describes (a replacement).
    pub fn supports(&self, desc: &LayerDesc) -> bool {
        (self.supported)(desc)
    }

    /// The only reader of `t`, when it is available and `t` is not a network output.
    pub fn sole_reader(&self, t: TensorId) -> Option<LayerId> {
        if self.view.network().outputs().contains(&t) {
            return None;
        }
        match self.readers(t) {
            [(l, _)] if self.available(*l) => Some(*l),
            _ => None,
        }
    }

    /// The only output of layer `l`.
    pub fn single_output(&self, l: LayerId) -> Option<TensorId> {
        match self.view.network().layer(l).outputs.as_slice() {
            [t] => Some(*t),
            _ => None,
        }
    }

    /// The value of `t` when it is a constant.
    pub fn constant(&self, t: TensorId) -> Option<&'a Arc<Tensor>> {
        self.view.network().tensor(t).constant()
    }

    /// The names of layers `ids` joined with `+`: a fused layer's name.
    pub fn names(&self, ids: &[LayerId]) -> String {
        ids.iter()
            .map(|&l| self.view.network().layer(l).name.as_str())
            .collect::<Vec<_>>()
            .join("+")
    }
}

/// The exporters' SiLU subgraph on `t`, `Mul(t, Sigmoid(t))` (either operand order): `t` read
/// by the Sigmoid and the Mul alone, the Sigmoid's output by the Mul alone, both supported.
/// Returns the two layers and the product.
pub fn match_silu(g: &Fusion<'_>, t: TensorId) -> Option<(Vec<LayerId>, TensorId)> {
    let net = g.view().network();
    if net.outputs().contains(&t) {
        return None;
    }
    let [(u0, _), (u1, _)] = g.readers(t) else {
        return None;
    };
    let (u0, u1) = (*u0, *u1);
    if u0 == u1 || !g.available(u0) || !g.available(u1) {
        return None;
    }
    let is_sigmoid = |l: LayerId| {
        let layer = net.layer(l);
        layer.op == Op::Unary(UnaryOp::Sigmoid) && layer.inputs.as_slice() == [t]
    };
    let (sigmoid, mul) = if is_sigmoid(u0) {
        (u0, u1)
    } else if is_sigmoid(u1) {
        (u1, u0)
    } else {
        return None;
    };
    let s = g.single_output(sigmoid)?;
    let layer = net.layer(mul);
    let reads = layer.inputs.as_slice() == [t, s] || layer.inputs.as_slice() == [s, t];
    let ok = layer.op == Op::Binary(BinaryOp::Mul)
        && reads
        && g.sole_reader(s) == Some(mul)
        && g.supported(sigmoid)
        && g.supported(mul);
    let out = g.single_output(mul)?;
    (ok && net.tensor(out).info.same_layout(&net.tensor(t).info))
        .then_some((vec![sigmoid, mul], out))
}

/// A BatchNormalization after convolution `conv`, folded into its weights: the sole reader
/// of the convolution's output, with constant f32 parameters, supported; the convolution's
/// weights (and bias, if any) constant. Returns the BatchNormalization layer, its output and
/// the new weights and bias (`[M]`, present even when the convolution had none).
pub fn fold_batch_norm_after(
    g: &Fusion<'_>,
    conv: LayerId,
) -> Option<(LayerId, TensorId, Tensor, Tensor)> {
    let net = g.view().network();
    let layer = net.layer(conv);
    let bn_id = g.sole_reader(g.single_output(conv)?)?;
    let bn = net.layer(bn_id);
    let Op::BatchNormalization { epsilon } = bn.op else {
        return None;
    };
    if !g.supported(bn_id) {
        return None;
    }
    let params = bn
        .inputs
        .get(1..)?
        .iter()
        .map(|&t| g.constant(t))
        .collect::<Option<Vec<_>>>()?;
    let w = g.constant(*layer.inputs.get(1)?)?;
    let b = match layer.inputs.get(2) {
        Some(&t) => Some(g.constant(t)?),
        None => None,
    };
    let (w, b) = fold_batch_norm(w, b.map(|b| &**b), &params, epsilon)?;
    Some((bn_id, g.single_output(bn_id)?, w, b))
}

/// Per-channel multiplier and offset of a batch normalization: `y = x·mul + add`, with
/// `mul = scale / √(var + ε)` and `add = bias − mean·mul` (computed in f64).
pub fn batch_norm_affine(
    scale: &[f32],
    bias: &[f32],
    mean: &[f32],
    var: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let mul: Vec<f32> = scale
        .iter()
        .zip(var)
        .map(|(&s, &v)| (f64::from(s) / (f64::from(v) + f64::from(eps)).sqrt()) as f32)
        .collect();
    let add = bias
        .iter()
        .zip(mean)
        .zip(&mul)
        .map(|((&b, &m), &k)| (f64::from(b) - f64::from(m) * f64::from(k)) as f32)
        .collect();
    (mul, add)
}

/// Fold `y = bn(conv(x, w) + b)` into new weights and bias: `w` (`[M, ...]`) scaled per
/// output channel, the bias (`[M]`, zeros without `b`) mapped through the affine map.
/// `params` are the normalization's scale, bias, mean and variance; `None` when they or the
/// weights are not f32 or their lengths do not match `M`.
pub fn fold_batch_norm(
    w: &Tensor,
    b: Option<&Tensor>,
    params: &[&Arc<Tensor>],
    eps: f32,
) -> Option<(Tensor, Tensor)> {
    let [scale, bias, mean, var] = params else {
        return None;
    };
    let (mul, add) = batch_norm_affine(
        scale.as_slice().ok()?,
        bias.as_slice().ok()?,
        mean.as_slice().ok()?,
        var.as_slice().ok()?,
        eps,
    );
    let wv = w.as_slice::<f32>().ok()?;
    let m = *w.shape().dims().first()?;
    if mul.len() != m || add.len() != m || m == 0 {
        return None;
    }
    let per = wv.len() / m;
    let new_w: Vec<f32> = wv
        .iter()
        .enumerate()
        .map(|(i, &v)| v * mul[i / per])
        .collect();
    let old_b: Vec<f32> = match b {
        Some(t) => t.as_slice::<f32>().ok()?.to_vec(),
        None => vec![0.0; m],
    };
    if old_b.len() != m {
        return None;
    }
    let new_b: Vec<f32> = (0..m).map(|i| old_b[i].mul_add(mul[i], add[i])).collect();
    Some((
        Tensor::from_vec(w.shape().clone(), new_w).ok()?,
        Tensor::from_vec(vec![m], new_b).ok()?,
    ))
}

/// The scalar value of a constant f32 tensor with one element.
fn scalar(g: &Fusion<'_>, t: TensorId) -> Option<f32> {
    match g.constant(t)?.as_slice::<f32>().ok()? {
        [v] => Some(*v),
        _ => None,
    }
}

/// Layer `id` is `op(t, c)`, or `op(c, t)` for an op other than Div, with a scalar constant
/// `c`, and supported: answers `c`.
pub fn binary_with_scalar(g: &Fusion<'_>, id: LayerId, op: BinaryOp, t: TensorId) -> Option<f32> {
    let layer = g.view().network().layer(id);
    if layer.op != Op::Binary(op) || !g.supported(id) {
        return None;
    }
    match layer.inputs.as_slice() {
        [a, c] if *a == t => scalar(g, *c),
        [c, a] if *a == t && op != BinaryOp::Div => scalar(g, *c),
        _ => None,
    }
}

/// Whether `v` is `want` to about f32 precision.
fn near(v: f32, want: f32) -> bool {
    (v - want).abs() <= 1e-6 * want.abs().max(1.0)
}

/// Whether layer `id` is a supported `op(a, b)` in either operand order.
fn reads_both(g: &Fusion<'_>, id: LayerId, op: BinaryOp, a: TensorId, b: TensorId) -> bool {
    let l = g.view().network().layer(id);
    l.op == Op::Binary(op)
        && g.supported(id)
        && (l.inputs.as_slice() == [a, b] || l.inputs.as_slice() == [b, a])
}

/// The available readers of `t` when there are exactly `n` and `t` is no network output.
fn exactly_readers(g: &Fusion<'_>, t: TensorId, n: usize) -> Option<Vec<LayerId>> {
    if g.view().network().outputs().contains(&t) {
        return None;
    }
    let users: Vec<LayerId> = g.readers(t).iter().map(|(l, _)| *l).collect();
    (users.len() == n && users.iter().all(|l| g.available(*l))).then_some(users)
}

/// The exporters' erf GELU subgraph on `h`: `0.5·h·(1 + erf(h/√2))` in either
/// multiplication order (the scale as a division by √2 or a product with 1/√2). Returns its
/// five layers and its output.
pub fn match_erf_gelu(g: &Fusion<'_>, h: TensorId) -> Option<(Vec<LayerId>, TensorId)> {
    use BinaryOp::{Add, Div, Mul};
    let net = g.view().network();
    let users = exactly_readers(g, h, 2)?;
    let is_scale = |id: LayerId| {
        binary_with_scalar(g, id, Div, h).is_some_and(|v| near(v, std::f32::consts::SQRT_2))
            || binary_with_scalar(g, id, Mul, h)
                .is_some_and(|v| near(v, std::f32::consts::FRAC_1_SQRT_2))
    };
    let (scale, other) = if is_scale(users[0]) {
        (users[0], users[1])
    } else if is_scale(users[1]) {
        (users[1], users[0])
    } else {
        return None;
    };
    let erf = g.sole_reader(g.single_output(scale)?)?;
    if net.layer(erf).op != Op::Unary(UnaryOp::Erf) || !g.supported(erf) {
        return None;
    }
    let erf_out = g.single_output(erf)?;
    let plus = g.sole_reader(erf_out)?;
    if !binary_with_scalar(g, plus, Add, erf_out).is_some_and(|v| near(v, 1.0)) {
        return None;
    }
    let plus_out = g.single_output(plus)?;
    let other_out = g.single_output(other)?;
    let last = if binary_with_scalar(g, other, Mul, h).is_some_and(|v| near(v, 0.5)) {
        // (0.5·h)·(1 + erf)
        let last = g.sole_reader(other_out)?;
        (g.sole_reader(plus_out) == Some(last) && reads_both(g, last, Mul, other_out, plus_out))
            .then_some(last)?
    } else if reads_both(g, other, Mul, h, plus_out) && g.sole_reader(plus_out) == Some(other) {
        // (h·(1 + erf))·0.5
        let last = g.sole_reader(other_out)?;
        binary_with_scalar(g, last, Mul, other_out)
            .is_some_and(|v| near(v, 0.5))
            .then_some(last)?
    } else {
        return None;
    };
    Some((vec![scale, erf, plus, other, last], g.single_output(last)?))
}

/// √(2/π), the tanh GELU's inner scale.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// The exporters' tanh GELU subgraph (GPT-2's `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`)
/// around Pow layer `pow` (its `x³`): `m = 0.5·x`, `p = Pow(x, 3)`, `x + 0.044715·p`,
/// `·√(2/π)`, `Tanh`, `1 + ·`, `m · ·`, each scalar on either side of a commutative
/// operation, every intermediate read only inside the subgraph, f32. Returns its eight
/// layers (sorted), `x` and the output: one `Gelu(approximate = tanh)` layer computes it.
pub fn match_tanh_gelu(g: &Fusion<'_>, pow: LayerId) -> Option<(Vec<LayerId>, TensorId, TensorId)> {
    use BinaryOp::{Add, Mul, Pow};
    let net = g.view().network();
    let x = *net.layer(pow).inputs.first()?;
    if net.tensor(x).info.dtype != backplane_core::DataType::F32 {
        return None;
    }
    // Pow is not commutative: x must be the base.
    let is3 = match net.layer(pow).inputs.as_slice() {
        [base, e] if *base == x => scalar(g, *e) == Some(3.0),
        _ => false,
    };
    if !is3 || binary_with_scalar(g, pow, Pow, x).is_none() {
        return None;
    }
    let users = exactly_readers(g, x, 3)?;
    let half = *users
        .iter()
        .find(|&&l| binary_with_scalar(g, l, Mul, x).is_some_and(|v| near(v, 0.5)))?;
    let sum = *users.iter().find(|&&l| l != half && l != pow)?;
    let pow_out = g.single_output(pow)?;
    let cubic = g.sole_reader(pow_out)?;
    if !binary_with_scalar(g, cubic, Mul, pow_out).is_some_and(|v| near(v, 0.044715)) {
        return None;
    }
    let cubic_out = g.single_output(cubic)?;
    if g.sole_reader(cubic_out) != Some(sum) || !reads_both(g, sum, Add, x, cubic_out) {
        return None;
    }
    let sum_out = g.single_output(sum)?;
    let scale = g.sole_reader(sum_out)?;
    if !binary_with_scalar(g, scale, Mul, sum_out).is_some_and(|v| near(v, SQRT_2_OVER_PI)) {
        return None;
    }
    let scale_out = g.single_output(scale)?;
    let tanh = g.sole_reader(scale_out)?;
    if net.layer(tanh).op != Op::Unary(UnaryOp::Tanh) || !g.supported(tanh) {
        return None;
    }
    let tanh_out = g.single_output(tanh)?;
    let plus = g.sole_reader(tanh_out)?;
    if !binary_with_scalar(g, plus, Add, tanh_out).is_some_and(|v| near(v, 1.0)) {
        return None;
    }
    let (half_out, plus_out) = (g.single_output(half)?, g.single_output(plus)?);
    let last = g.sole_reader(plus_out)?;
    if g.sole_reader(half_out) != Some(last) || !reads_both(g, last, Mul, half_out, plus_out) {
        return None;
    }
    let out = g.single_output(last)?;
    if !net.tensor(out).info.same_layout(&net.tensor(x).info) {
        return None;
    }
    let mut layers = vec![half, pow, cubic, sum, scale, tanh, plus, last];
    layers.sort();
    Some((layers, x, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_matches_normalizing_the_convolution_output() {
        // Two output channels, three weights each; conv output c is mapped by the norm.
        let w = Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 0.5, 3.0, 0.0, -1.0]).unwrap();
        let b = Tensor::from_vec(vec![2], vec![0.25f32, -0.5]).unwrap();
        let p = |v: Vec<f32>| Arc::new(Tensor::from_vec(vec![2], v).unwrap());
        let (scale, bias, mean, var) = (
            p(vec![2.0, 0.5]),
            p(vec![0.1, -0.2]),
            p(vec![1.0, -3.0]),
            p(vec![4.0, 0.25]),
        );
        let eps = 1e-5;
        let (fw, fb) = fold_batch_norm(&w, Some(&b), &[&scale, &bias, &mean, &var], eps).unwrap();
        let x = [0.3f32, -1.2, 2.0];
        for ch in 0..2 {
            let row = &w.as_slice::<f32>().unwrap()[ch * 3..ch * 3 + 3];
            let conv: f32 = row.iter().zip(&x).map(|(a, b)| a * b).sum::<f32>()
                + b.as_slice::<f32>().unwrap()[ch];
            let s = scale.as_slice::<f32>().unwrap()[ch];
            let want = (conv - mean.as_slice::<f32>().unwrap()[ch]) * s
                / (var.as_slice::<f32>().unwrap()[ch] + eps).sqrt()
                + bias.as_slice::<f32>().unwrap()[ch];
            let frow = &fw.as_slice::<f32>().unwrap()[ch * 3..ch * 3 + 3];
            let got: f32 = frow.iter().zip(&x).map(|(a, b)| a * b).sum::<f32>()
                + fb.as_slice::<f32>().unwrap()[ch];
            assert!((got - want).abs() < 1e-5, "channel {ch}: {got} vs {want}");
        }
        // Without a bias the fold still makes one; lengths that do not match refuse.
        assert!(fold_batch_norm(&w, None, &[&scale, &bias, &mean, &var], eps).is_some());
        let short = Arc::new(Tensor::from_vec(vec![1], vec![1.0f32]).unwrap());
        assert!(fold_batch_norm(&w, None, &[&short, &bias, &mean, &var], eps).is_none());
    }
}

//! Folding of `DequantizeLinear → f(·) → g(·) … → QuantizeLinear`, per tensor on 8-bit types,
//! where each of f, g, … is an elementwise f32 function of one input (Sigmoid, Tanh,
//! HardSwish, HardSigmoid, Relu, Clip, ..., or Add / Sub / Mul / Div / Max / Min with a
//! constant of one value: [`Func`]): the chain maps each of the 256 input
//! bytes to one output byte, so it becomes a byte table ([`crate::quant::lookup`]) computed
//! here with CpuRef's arithmetic. A folded binary layer of a tensor and a table of the
//! same tensor (SiLU's `x · sigmoid(x)`) then becomes one table too. A Mul by a dequantized
//! 8-bit constant straight into a QuantizeLinear asking for the fixed-point rule is LiteRT's
//! builtin MUL, not a table of the f32 chain: the binary layer takes it.

use super::Chains;
use crate::quant::binary::{QBinaryDesc, QBinaryStage};
use crate::quant::lookup::{table, Func, QLookupDesc};
use crate::quant::{QLINEAR_BINARY, QLINEAR_LOOKUP};
use backplane_backend_api::{ReplacementLayer, Substitution, ValueRef};
use backplane_core::ops::{BinaryOp, CustomOp, UnaryOp};
use backplane_core::quant::Requantization;
use backplane_core::{DataType, LayerId, Op, TensorId};
use std::collections::BTreeSet;

impl Chains<'_> {
    /// The tabulated function of layer `id` applied to its input `x` (the other operand of a
    /// binary layer a constant of one value), with the DequantizeLinear of a constant it
    /// reads, if any.
    fn func(&self, id: LayerId, x: Option<TensorId>) -> Option<(Func, TensorId, Option<LayerId>)> {
        let layer = self.net.layer(id);
        match (&layer.op, layer.inputs.as_slice()) {
            (Op::Unary(u), &[t]) => Some((Func::of_unary(*u)?, t, None)),
            (Op::Math(m), &[t]) => Some((Func::of_math(*m)?, t, None)),
            (Op::Binary(op), &[a, b]) => {
                // The operand that is not `x` (when given) is the constant.
                let (t, c, c_first) = match x {
                    Some(x) if a == x && b != x => (a, b, false),
                    Some(x) if b == x && a != x => (b, a, true),
                    Some(_) => return None,
                    None if self.constant_value(b).is_some() => (a, b, false),
                    None => (b, a, true),
                };
                let (value, dq) = self.constant_value(c)?;
                Some((Func::of_binary(*op, value, c_first)?, t, dq))
            }
            _ => None,
        }
    }

    /// The value of a one-element constant `t` as the chain computes with it: an f32
    /// constant, or the DequantizeLinear (per tensor) of an 8-bit one (with that layer).
    fn constant_value(&self, t: TensorId) -> Option<(f32, Option<LayerId>)> {
        if self.net.tensor(t).info.shape.elements() != 1 {
            return None;
        }
        if let Some(c) = self.constant(t) {
            return Some((*c.as_slice::<f32>().ok()?.first()?, None));
        }
        let dq = self.dequantize(t, 0)?;
        let c = self.constant(dq.input)?;
        let q = match (c.dtype(), c.bytes()) {
            (DataType::I8, [b]) => i32::from(*b as i8),
            (DataType::U8, [b]) => i32::from(*b),
            _ => return None,
        };
        // CpuRef's DequantizeLinear: the difference in f64 (exact), the product in f32.
        let (s, z) = (*dq.scales.first()?, *dq.zeros.first()?);
        Some(((q - z) as f32 * s, Some(dq.layer)))
    }

    /// Fold the chain whose first function is `id`, if it is one.
    pub(super) fn fold_lookup(
        &self,
        id: LayerId,
        used: &BTreeSet<LayerId>,
    ) -> Option<Substitution> {
        let (first, xt, c) = self.func(id, None)?;
        let (x, sx, zx) = self.per_tensor_8bit(xt, 0)?;
        let x_dt = self.net.tensor(x.input).info.dtype;
        let mut funcs = vec![first];
        let mut replaced = vec![id];
        let mut constants: Vec<(LayerId, LayerId)> = c.map(|c| (id, c)).into_iter().collect();
        let mut at = id;
        let (to, sy, zy) = loop {
            let t = self.single_output(at)?;
            let next = self.sole_consumer(t)?;
            replaced.push(next);
            at = next;
            match self.func(next, Some(t)) {
                Some((f, _, c)) => {
                    funcs.push(f);
                    constants.extend(c.map(|c| (next, c)));
                }
                None => break self.quantizer(next)?,
            }
        };
        if self.builtin_mul(id, &replaced[1..replaced.len() - 1], at) {
            return None;
        }
        let y = self.single_output(at)?;
        if self.net.tensor(y).info.shape != self.net.tensor(x.input).info.shape {
            return None;
        }
        for (reader, dq) in constants {
            self.absorb_dequantizations(reader, &[dq], used, &mut replaced)?;
        }
        self.absorb_dequantizations(id, &[x.layer], used, &mut replaced)?;
        let desc = QLookupDesc {
            table: table(x_dt, (sx, zx), &funcs, to, (sy, zy)),
        };
        let op = Op::Custom(desc.to_op(self.net.tensor(y).info.clone()));
        Some(self.one_layer(replaced, op, vec![ValueRef::Existing(x.input)], y))
    }
}

impl Chains<'_> {
    /// Whether layer `id`, then the layers `between` and the QuantizeLinear `q`, is a Mul of
    /// two dequantized 8-bit tensors (one of them a constant) that LiteRT's builtin MUL
    /// computes: an optional Relu or Clip, then a QuantizeLinear asking for the fixed-point
    /// rule. CpuRef folds it into its `QMulFixedPoint`; a table of the f32 chain would follow
    /// the f32 rule, so the binary layer (`fold_binary`, which has the rule) takes it.
    fn builtin_mul(&self, id: LayerId, between: &[LayerId], q: LayerId) -> bool {
        let layer = self.net.layer(id);
        let mul = matches!(layer.op, Op::Binary(BinaryOp::Mul))
            && layer
                .inputs
                .iter()
                .all(|&t| self.dequantize(t, 0).is_some());
        let activation = |l: &LayerId| {
            matches!(
                self.net.layer(*l).op,
                Op::Unary(UnaryOp::Relu | UnaryOp::Clip { .. })
            )
        };
        let fixed = matches!(
            self.net.layer(q).op,
            Op::QuantizeLinear {
                requant: Requantization::FixedPoint,
                ..
            }
        );
        mul && fixed && between.len() <= 1 && between.iter().all(activation)
    }
}

/// The single quantized custom layer of substitution `s` of type `op_type`: its input
/// tensors and output.
fn single<'s>(
    s: &'s Substitution,
    op_type: &str,
) -> Option<(&'s CustomOp, Vec<TensorId>, TensorId)> {
    let [r] = s.replacement.as_slice() else {
        return None;
    };
    let Op::Custom(c) = &r.op else {
        return None;
    };
    let inputs: Option<Vec<TensorId>> = r
        .inputs
        .iter()
        .map(|v| match v {
            ValueRef::Existing(t) => Some(*t),
            _ => None,
        })
        .collect();
    (c.op_type == op_type).then_some((c, inputs?, (*r.outputs.first()?)?))
}

impl Chains<'_> {
    /// A folded binary layer of `x` and a byte table of `x` (SiLU as TFLite writes it:
    /// `x · sigmoid(x)`, each its own quantized chain) is a function of `x` alone: the two
    /// become one table, composed from both layers' own arithmetic (so the bytes are the
    /// same), where the binary layer is the table's only reader.
    pub(super) fn fuse_table_binaries(&self, subs: &mut Vec<Substitution>) {
        merge_pairs(subs, |subs, k| self.fused(subs, k));
    }

    /// The table substitution that binary substitution `k` and the table it reads become,
    /// with the table's index.
    fn fused(&self, subs: &[Substitution], k: usize) -> Option<(usize, Substitution)> {
        let (bc, ins, y) = single(&subs[k], QLINEAR_BINARY)?;
        let &[a, b] = ins.as_slice() else {
            return None;
        };
        let d = QBinaryDesc::decode(bc).ok()?;
        let (i, t1, table_first) = subs.iter().enumerate().find_map(|(i, s)| {
            let (c, ins, s_out) = single(s, QLINEAR_LOOKUP)?;
            let &[x] = ins.as_slice() else {
                return None;
            };
            // The binary reads (x, table(x)) or (table(x), x).
            let first = if a == s_out && b == x {
                true
            } else if b == s_out && a == x {
                false
            } else {
                return None;
            };
            Some((i, QLookupDesc::decode(c).ok()?.table, first))
        })?;
        let (x, s_out) = if table_first { (b, a) } else { (a, b) };
        // Only the binary layer's chain reads the table's output.
        let readers = self.consumers.get(s_out.0)?;
        let only_binary = readers.iter().all(|(l, _)| subs[k].replaced.contains(l));
        let info = |t: TensorId| &self.net.tensor(t).info;
        if !only_binary || self.net.outputs().contains(&s_out) || info(x).shape != info(y).shape {
            return None;
        }
        let signed = |t: TensorId| info(t).dtype == DataType::I8;
        let signs = [signed(a), signed(b), signed(y)];
        let table: Vec<u8> = (0..=255u8)
            .map(|q| {
                let t = *t1.get(usize::from(q))?;
                Some(if table_first {
                    d.byte(signs, t, q)
                } else {
                    d.byte(signs, q, t)
                })
            })
            .collect::<Option<_>>()?;
        let op = Op::Custom(QLookupDesc { table }.to_op(info(y).clone()));
        Some((i, merged(subs, i, k, op, x, y)))
    }
}

impl Chains<'_> {
    /// Two folded binary layers with constants of one shape, the second reading only the
    /// first's output (a batch norm's scale, then its shift and ReLU, as DenseNet's int8
    /// blocks import): one layer that computes both on each row in turn (the same bytes,
    /// one pass, no 8-bit tensor between).
    pub(super) fn fuse_constant_binaries(&self, subs: &mut Vec<Substitution>) {
        merge_pairs(subs, |subs, k| self.composed(subs, k));
    }

    /// The substitution that constant binary `k` and the constant binary it reads become,
    /// with the latter's index.
    fn composed(&self, subs: &[Substitution], k: usize) -> Option<(usize, Substitution)> {
        let (c2, ins, y) = single(&subs[k], QLINEAR_BINARY)?;
        let &[s] = ins.as_slice() else {
            return None;
        };
        let d2 = QBinaryDesc::decode(c2).ok()?;
        let (i, d1, x) = subs.iter().enumerate().find_map(|(i, sub)| {
            let (c1, ins, out) = single(sub, QLINEAR_BINARY)?;
            let &[x] = ins.as_slice() else {
                return None;
            };
            (out == s).then_some((i, QBinaryDesc::decode(c1).ok()?, x))
        })?;
        let ((v1, dims1), (v2, dims2)) = (d1.b_const.as_ref()?, d2.b_const.as_ref()?);
        let info = |t: TensorId| &self.net.tensor(t).info;
        let readers = self.consumers.get(s.0)?;
        let only_second = readers.iter().all(|(l, _)| subs[k].replaced.contains(l));
        let same = dims1 == dims2 && v1.len() == v2.len() && info(x).shape == info(y).shape;
        if !only_second || !same || self.net.outputs().contains(&s) {
            return None;
        }
        let signed = |t: TensorId| info(t).dtype == DataType::I8;
        // Each layer of the chain, in order (either may be composed already).
        let stages_of = |d: &QBinaryDesc, signed_in: bool, signed_out: bool| {
            if d.stages.is_empty() {
                vec![QBinaryStage {
                    desc: d.clone(),
                    signed_in,
                    signed_out,
                }]
            } else {
                d.stages.clone()
            }
        };
        let mut stages = stages_of(&d1, signed(x), signed(s));
        stages.extend(stages_of(&d2, signed(s), signed(y)));
        let desc = QBinaryDesc {
            a: d1.a,
            stages,
            ..d2
        };
        let op = Op::Custom(desc.to_op(info(y).clone()));
        Some((i, merged(subs, i, k, op, x, y)))
    }
}

/// Replace pairs of substitutions by what `merge(subs, k)` makes of substitution `k` and the
/// one it names, until no pair merges (a merged one may merge again).
fn merge_pairs(
    subs: &mut Vec<Substitution>,
    merge: impl Fn(&[Substitution], usize) -> Option<(usize, Substitution)>,
) {
    let mut k = 0;
    while k < subs.len() {
        if let Some((i, s)) = merge(subs, k) {
            let (hi, lo) = (i.max(k), i.min(k));
            subs.remove(hi);
            subs.remove(lo);
            subs.push(s);
            k = lo;
        } else {
            k += 1;
        }
    }
}

/// Substitutions `i` and `k` as one layer `op` of `x` computing `y`, named after both.
fn merged(
    subs: &[Substitution],
    i: usize,
    k: usize,
    op: Op,
    x: TensorId,
    y: TensorId,
) -> Substitution {
    let mut replaced = subs[i].replaced.clone();
    replaced.extend(subs[k].replaced.iter().copied());
    let name = [&subs[i], &subs[k]]
        .iter()
        .filter_map(|s| s.replacement.first().map(|r| r.name.as_str()))
        .collect::<Vec<_>>()
        .join("+");
    Substitution {
        replacement: vec![ReplacementLayer {
            name,
            op,
            inputs: vec![ValueRef::Existing(x)],
            outputs: vec![Some(y)],
        }],
        replaced,
    }
}

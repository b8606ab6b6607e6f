//! Folding of ONNX MatMulInteger as the importer lowers it: `MatMul(Sub(Cast(x8 → int32),
//! Cast(zero8 → int32)), w)` (or `Cast(x8)` alone, through an Identity, without a zero
//! point), int32 output, `w` a constant int32 `[K, N]` whose values are centered 8-bit ones
//! (the weights' Cast and zero point folded at import), becomes the integer product
//! (`MatMulInteger`, [`crate::quant::dynamic`]) reading the bytes and the zero point. The
//! dequantization ONNX Runtime's dynamic quantization writes after it, `Cast(→ f32) →
//! Mul(·, scalar scale) → (Add(·, constant bias [N]))`, joins it (the product then writes
//! f32).

use super::Chains;
use crate::quant::dynamic::MatMulIntegerDesc;
use crate::quant::is_8bit;
use backplane_backend_api::{Substitution, ValueRef};
use backplane_core::ops::BinaryOp;
use backplane_core::{DataType, LayerId, Op, TensorId};
use std::collections::BTreeSet;

impl Chains<'_> {
    /// Fold the integer product whose MatMul is `id`, if it is one.
    pub(super) fn fold_matmul_integer(
        &self,
        id: LayerId,
        used: &BTreeSet<LayerId>,
    ) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let (Op::MatMul, [xt, wt], [y]) =
            (&layer.op, layer.inputs.as_slice(), layer.outputs.as_slice())
        else {
            return None;
        };
        let i32s = |t: TensorId| self.net.tensor(t).info.dtype == DataType::I32;
        if !i32s(*xt) || !i32s(*y) || self.net.tensor(*xt).info.shape.rank() < 2 {
            return None;
        }
        let mut replaced = vec![id];
        let link = |t: TensorId, reader: LayerId| -> Option<LayerId> {
            let l = self.producer(t)?;
            (self.inside.contains(&l) && self.sole_consumer(t) == Some(reader)).then_some(l)
        };
        let (w, w_zero) = self.integer_weights(*wt, id, &link, &mut replaced)?;
        let &[k, n] = self.net.tensor(w).info.shape.dims() else {
            return None;
        };
        // x's chain back from the product: Sub(Cast(x8), Cast(zero8)), or Identity(Cast(x8)),
        // or Cast(x8); every link read by the next one only.
        let widened = |l: LayerId| -> Option<TensorId> {
            let layer = self.net.layer(l);
            match (&layer.op, layer.inputs.as_slice()) {
                (
                    Op::Cast {
                        to: DataType::I32, ..
                    },
                    [t],
                ) => is_8bit(self.net.tensor(*t).info.dtype).then_some(*t),
                _ => None,
            }
        };
        let first = link(*xt, id)?;
        let (x8, zero8) = match (
            &self.net.layer(first).op,
            self.net.layer(first).inputs.as_slice(),
        ) {
            (Op::Binary(BinaryOp::Sub), [a, z]) => {
                let ca = link(*a, first)?;
                let cz = link(*z, first)?;
                let (x8, z8) = (widened(ca)?, widened(cz)?);
                let zi = &self.net.tensor(z8).info;
                let same = zi.dtype == self.net.tensor(x8).info.dtype && zi.shape.elements() == 1;
                if !same || self.net.tensor(*a).info.shape != self.net.tensor(*xt).info.shape {
                    return None;
                }
                replaced.extend([first, ca, cz]);
                (x8, Some(z8))
            }
            (Op::Identity, [a]) => {
                let ca = link(*a, first)?;
                replaced.extend([first, ca]);
                (widened(ca)?, None)
            }
            (Op::Cast { .. }, _) => {
                replaced.push(first);
                (widened(first)?, None)
            }
            _ => return None,
        };
        let (scale, bias, out) = self.dequantized_sums(*y, n, &mut replaced);
        if replaced.iter().any(|l| used.contains(l)) {
            return None;
        }
        let desc = MatMulIntegerDesc {
            k,
            n,
            w_zero,
            zero_point: zero8.is_some(),
            scaled: scale.is_some(),
            bias: bias.is_some(),
        };
        let op = Op::Custom(desc.to_op(self.net.tensor(out).info.clone()));
        let mut inputs = vec![ValueRef::Existing(x8), ValueRef::Existing(w)];
        inputs.extend(
            [zero8, scale, bias]
                .into_iter()
                .flatten()
                .map(ValueRef::Existing),
        );
        Some(self.one_layer(replaced, op, inputs, out))
    }

    /// The weights operand `wt` of the product `id`: a constant int32 `[K, N]` of centered
    /// 8-bit values (the import folded their Cast), or the Cast of a constant 8-bit `[K, N]`
    /// to int32 (large weights, which the import keeps 8-bit), through an Identity or less a
    /// constant int32 scalar zero point (`Sub`). Returns the constant and, for 8-bit weights,
    /// their zero point; adds the layers to `replaced`.
    fn integer_weights(
        &self,
        wt: TensorId,
        id: LayerId,
        link: &dyn Fn(TensorId, LayerId) -> Option<LayerId>,
        replaced: &mut Vec<LayerId>,
    ) -> Option<(TensorId, Option<i32>)> {
        if let Some(w) = self.constant(wt) {
            let values = w.as_slice::<i32>().ok()?;
            let fits =
                w.info().shape.rank() == 2 && values.iter().all(|v| (-255..=255).contains(v));
            return fits.then_some((wt, None));
        }
        let l = link(wt, id)?;
        let layer = self.net.layer(l);
        let (cast, zero) = match (&layer.op, layer.inputs.as_slice()) {
            (Op::Identity, [c]) => (link(*c, l)?, 0),
            (Op::Binary(BinaryOp::Sub), [c, z]) => {
                let zv = self.constant(*z)?;
                let &[zero] = zv.as_slice::<i32>().ok()? else {
                    return None;
                };
                (link(*c, l)?, zero)
            }
            (Op::Cast { .. }, _) => (l, 0),
            _ => return None,
        };
        let cl = self.net.layer(cast);
        let (
            Op::Cast {
                to: DataType::I32, ..
            },
            [w8],
        ) = (&cl.op, cl.inputs.as_slice())
        else {
            return None;
        };
        let info = &self.net.tensor(*w8).info;
        let (lo, hi) = if info.dtype == DataType::I8 {
            (-128, 127)
        } else {
            (0, 255)
        };
        let fits = is_8bit(info.dtype)
            && info.shape.rank() == 2
            && self.constant(*w8).is_some()
            && (lo - zero..=hi - zero).all(|v| (-255..=255).contains(&v));
        if !fits {
            return None;
        }
        replaced.push(cast);
        if cast != l {
            replaced.push(l);
        }
        Some((*w8, Some(zero)))
    }

    /// The layers after the int32 sums `y` that dequantize them: `Cast(→ f32)` then `Mul` by
    /// an f32 scalar (either operand order), then optionally `Add` of a constant f32 `[N]`;
    /// each read by the next one only. Adds them to `replaced`; returns the scale's and the
    /// bias's tensors and the chain's output (`y` itself when there is no such chain).
    fn dequantized_sums(
        &self,
        y: TensorId,
        n: usize,
        replaced: &mut Vec<LayerId>,
    ) -> (Option<TensorId>, Option<TensorId>, TensorId) {
        let next = |t: TensorId| {
            let l = self.sole_consumer(t)?;
            let layer = self.net.layer(l);
            Some((l, layer, self.single_output(l)?))
        };
        let f32_scalar = |t: TensorId| {
            let i = &self.net.tensor(t).info;
            i.dtype == DataType::F32 && i.shape.elements() == 1
        };
        let Some((cast, cl, cast_out)) = next(y) else {
            return (None, None, y);
        };
        if !matches!(
            cl.op,
            Op::Cast {
                to: DataType::F32,
                ..
            }
        ) {
            return (None, None, y);
        }
        let Some((mul, ml, mul_out)) = next(cast_out) else {
            return (None, None, y);
        };
        let scale = match (&ml.op, ml.inputs.as_slice()) {
            (Op::Binary(BinaryOp::Mul), [a, b]) if *a == cast_out && f32_scalar(*b) => *b,
            (Op::Binary(BinaryOp::Mul), [a, b]) if *b == cast_out && f32_scalar(*a) => *a,
            _ => return (None, None, y),
        };
        if self.net.tensor(mul_out).info.shape != self.net.tensor(y).info.shape {
            return (None, None, y);
        }
        replaced.extend([cast, mul]);
        let bias_of = |t: TensorId| {
            let c = self.constant(t)?;
            let fits = c.info().dtype == DataType::F32 && c.info().shape.dims() == [n];
            fits.then_some(t)
        };
        let add = next(mul_out).and_then(|(l, al, out)| match (&al.op, al.inputs.as_slice()) {
            (Op::Binary(BinaryOp::Add), [a, b]) if *a == mul_out => Some((l, bias_of(*b)?, out)),
            (Op::Binary(BinaryOp::Add), [a, b]) if *b == mul_out => Some((l, bias_of(*a)?, out)),
            _ => None,
        });
        match add {
            Some((l, bias, out))
                if self.net.tensor(out).info.shape == self.net.tensor(y).info.shape =>
            {
                replaced.push(l);
                (Some(scale), Some(bias), out)
            }
            _ => (Some(scale), None, mul_out),
        }
    }
}

//! Folding of `DequantizeLinear → ReduceMean over H and W (keepdims or not) |
//! GlobalAveragePool → QuantizeLinear` on a 4-D per-tensor 8-bit tensor into the quantized
//! mean ([`crate::quant::mean`]), and of the same chain around a 2-D `AveragePool` or
//! `MaxPool` (padded or not) into the quantized pool ([`crate::quant::pool`]). Where the `[N, C]` result then only goes through Keras's
//! squeeze-excite reshape as the TFLite importer writes it (a `Reshape` to `[N, 1, 1, C]` of
//! the 8-bit tensor, or within a QDQ pair of the same parameters, then the importer's
//! `Transpose` to `[N, C, 1, 1]`), those layers go too: the mean writes `[N, C, 1, 1]`, the
//! same bytes.

use super::{Chains, OutChain};
use crate::quant::conv::clamp_range;
use crate::quant::mean::QMeanDesc;
use crate::quant::pool::QPoolDesc;
use backplane_backend_api::{Substitution, ValueRef};
use backplane_core::ops::{PoolKind, ReduceKind};
use backplane_core::quant::Requantization;
use backplane_core::{LayerId, Op, TensorId};
use std::collections::BTreeSet;

impl Chains<'_> {
    /// Fold the chain whose mean is `id`, if it is one.
    pub(super) fn fold_mean(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let [xt] = layer.inputs.as_slice() else {
            return None;
        };
        let rank = self.net.tensor(*xt).info.shape.rank();
        let pixels = match &layer.op {
            Op::Reduce(r) if r.kind == ReduceKind::Mean => {
                let mut axes: Vec<i64> = r
                    .axes
                    .iter()
                    .map(|&a| if a < 0 { a + rank as i64 } else { a })
                    .collect();
                axes.sort_unstable();
                axes == [2, 3]
            }
            Op::GlobalPool(PoolKind::Average) => true,
            _ => false,
        };
        if !pixels || rank != 4 {
            return None;
        }
        let (x, sx, zx) = self.per_tensor_8bit(*xt, 1)?;
        let q = self.sole_consumer(self.single_output(id)?)?;
        let (to, sy, zy) = self.quantizer(q)?;
        let mut replaced = vec![id, q];
        let mut y = self.single_output(q)?;
        if let Some((layers, t)) = self.se_reshape(y, (to, sy, zy)) {
            replaced.extend(layers);
            y = t;
        }
        self.absorb_dequantizations(id, &[x.layer], used, &mut replaced)?;
        if replaced.iter().any(|l| used.contains(l)) {
            return None;
        }
        // LiteRT's builtin MEAN rule where the QuantizeLinear asks for it, on the form CpuRef
        // folds (a ReduceMean keeping its axes; CpuRef leaves the others to the f32 chain).
        let fixed = matches!(&layer.op, Op::Reduce(r) if r.keepdims)
            && matches!(
                self.net.layer(q).op,
                Op::QuantizeLinear {
                    requant: Requantization::FixedPoint,
                    ..
                }
            );
        let desc = QMeanDesc {
            x: (sx, zx),
            y: (sy, zy),
            nhwc: false,
            requant: if fixed {
                Requantization::FixedPoint
            } else {
                Requantization::F32
            },
        };
        let op = Op::Custom(desc.to_op(self.net.tensor(y).info.clone()));
        Some(self.one_layer(replaced, op, vec![ValueRef::Existing(x.input)], y))
    }

    /// Fold `DequantizeLinear → AveragePool | MaxPool → (Relu | Clip) → QuantizeLinear`
    /// (2-D windows without dilation, padded or not, per-tensor 8-bit) into the quantized
    /// pool; the activation becomes a clamp of the quantized result (quantization is
    /// monotone, so clamping the bytes equals quantizing the clamped value).
    pub(super) fn fold_pool(&self, id: LayerId, used: &BTreeSet<LayerId>) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Pool(p) = &layer.op else {
            return None;
        };
        let [xt] = layer.inputs.as_slice() else {
            return None;
        };
        let windows = QPoolDesc::windows(p, self.net.tensor(*xt).info.shape.dims())?;
        let (x, sx, zx) = self.per_tensor_8bit(*xt, 1)?;
        let OutChain {
            mut replaced,
            y,
            to,
            q,
            act,
            ..
        } = self.quantized_output(id)?;
        let desc = QPoolDesc {
            x: (sx, zx),
            y: q,
            clamp: clamp_range(to, q, act.0, act.1),
            ..windows
        };
        if !desc.exact(self.net.tensor(x.input).info.dtype) {
            return None;
        }
        self.absorb_dequantizations(id, &[x.layer], used, &mut replaced)?;
        let op = Op::Custom(desc.to_op(self.net.tensor(y).info.clone()));
        Some(self.one_layer(replaced, op, vec![ValueRef::Existing(x.input)], y))
    }

    /// After a mean's `[N, C]` 8-bit output `t` quantized by `params`: a `Reshape` to
    /// `[N, 1, 1, C]` (of the 8-bit tensor, or `DequantizeLinear → Reshape → QuantizeLinear`
    /// with the same parameters both sides), then a `Transpose [0, 3, 1, 2]`, each the sole
    /// reader of the tensor before it; the layers and the `[N, C, 1, 1]` tensor at the end.
    fn se_reshape(
        &self,
        t: TensorId,
        params: (backplane_core::DataType, f32, i32),
    ) -> Option<(Vec<LayerId>, TensorId)> {
        let &[n, c] = self.net.tensor(t).info.shape.dims() else {
            return None;
        };
        let mut layers = Vec::new();
        let mut next = self.sole_consumer(t)?;
        let requantized = matches!(self.net.layer(next).op, Op::DequantizeLinear { .. });
        if requantized {
            let d = self.dequantize(t, 0)?;
            if d.layer != next || d.scales != [params.1] || d.zeros != [params.2] {
                return None;
            }
            layers.push(next);
            next = self.sole_consumer(self.single_output(next)?)?;
        }
        let rt = self.single_output(next)?;
        let reshape = matches!(self.net.layer(next).op, Op::Reshape { .. });
        if !reshape || self.net.tensor(rt).info.shape.dims() != [n, 1, 1, c] {
            return None;
        }
        layers.push(next);
        next = self.sole_consumer(rt)?;
        if requantized {
            if self.quantizer(next)? != params {
                return None;
            }
            layers.push(next);
            next = self.sole_consumer(self.single_output(next)?)?;
        }
        let Op::Transpose { perm } = &self.net.layer(next).op else {
            return None;
        };
        let y = self.single_output(next)?;
        let nc11 = self.net.tensor(y).info.shape.dims() == [n, c, 1, 1];
        layers.push(next);
        (perm.as_slice() == [0, 3, 1, 2] && nc11).then_some((layers, y))
    }
}

//! Folding of quantized matrix products with constant weights: `DequantizeLinear(x) →
//! MatMul(·, DequantizeLinear(w const [K, N])) → (Relu | Clip) → QuantizeLinear` (ONNX QDQ
//! MatMul, ONNX QLinearMatMul as the importer writes it, TFLite BATCH_MATMUL of a constant)
//! becomes the int8 fully connected layer (`QLinearGemm`, its rows all of x's leading
//! dimensions). The 8-bit input of a folded product may come through one Reshape or Flatten
//! (a FULLY_CONNECTED on a 4-D tensor): the layer reads the bytes in the same order.

use super::{Chains, Dq, OutChain};
use crate::quant::conv::clamp_range;
use crate::quant::gemm::QGemmDesc;
use backplane_backend_api::Substitution;
use backplane_core::{LayerId, Op, Tensor, TensorId};
use std::collections::BTreeSet;

impl Chains<'_> {
    /// Fold the chain whose MatMul is `id`, if it is one: a per-tensor 8-bit x of rank 2 or
    /// more, constant 8-bit weights `[K, N]` per tensor or per column.
    pub(super) fn fold_matmul(
        &self,
        id: LayerId,
        used: &BTreeSet<LayerId>,
    ) -> Option<Substitution> {
        let layer = self.net.layer(id);
        if !matches!(layer.op, Op::MatMul) {
            return None;
        }
        let [xt, wt] = layer.inputs.as_slice() else {
            return None;
        };
        if self.net.tensor(*xt).info.shape.rank() < 2 {
            return None;
        }
        let (x, reshape) = self.product_input(*xt, id)?;
        let w = self.int8_weights(&x, *wt, 1)?;
        let w_info = &self.net.tensor(w.input).info;
        let &[_, n] = w_info.shape.dims() else {
            return None;
        };
        let (sx, zx) = (x.scales[0], x.zeros[0]);
        let OutChain {
            mut replaced,
            y,
            to,
            q: (sy, zy),
            act,
            requant,
        } = self.output_chain(id, true)?;
        let qdesc = QGemmDesc {
            x: (sx, zx),
            y: (sy, zy),
            w_scales: w.scales.clone(),
            w_zeros: w.zeros.clone(),
            trans_b: false,
            clamp: clamp_range(to, (sy, zy), act.0, act.1),
            requant,
        };
        self.absorb_product_input(id, &x, reshape, w.layer, used, &mut replaced)?;
        let y_info = self.net.tensor(y).info.clone();
        let bias = Tensor::from_vec(vec![n], vec![0i32; n]).ok()?;
        let op = Op::Custom(qdesc.to_op(y_info));
        Some(self.int8_layer(replaced, op, [x.input, w.input], bias, y))
    }

    /// The per-tensor DequantizeLinear behind product input `t` of layer `id`: producing it,
    /// or feeding the Reshape or Flatten (of this subgraph, read by `id` only) that does,
    /// with that layer.
    pub(super) fn product_input(&self, t: TensorId, id: LayerId) -> Option<(Dq, Option<LayerId>)> {
        let direct = self.dequantize(t, 0);
        let (dq, reshape) = match direct {
            Some(dq) => (dq, None),
            None => {
                let r = self.producer(t)?;
                let rl = self.net.layer(r);
                let moves = matches!(rl.op, Op::Reshape { .. } | Op::Flatten { .. });
                if !moves || !self.inside.contains(&r) || self.sole_consumer(t) != Some(id) {
                    return None;
                }
                (self.dequantize(*rl.inputs.first()?, 0)?, Some(r))
            }
        };
        (dq.scales.len() == 1).then_some((dq, reshape))
    }

    /// Adds to `replaced` the Reshape or Flatten between x's DequantizeLinear and product `id`
    /// (if any), and the dequantizations of x and of the weights (`w`) that only the chain
    /// reads; `None` when the fold must be dropped.
    pub(super) fn absorb_product_input(
        &self,
        id: LayerId,
        x: &Dq,
        reshape: Option<LayerId>,
        w: LayerId,
        used: &BTreeSet<LayerId>,
        replaced: &mut Vec<LayerId>,
    ) -> Option<()> {
        match reshape {
            None => self.absorb_dequantizations(id, &[x.layer, w], used, replaced),
            Some(r) => {
                replaced.push(r);
                self.absorb_dequantizations(r, &[x.layer], used, replaced)?;
                self.absorb_dequantizations(id, &[w], used, replaced)
            }
        }
    }
}

//! Folding of int8 data movement that need not leave int8: `DequantizeLinear(s, z) inputs →
//! Concat | Reshape | Flatten | Squeeze | Unsqueeze | Transpose | Pad → QuantizeLinear(s, z)`,
//! every scale and zero point the same (per tensor), becomes the same layer on the 8-bit
//! tensors. Exact: quantizing a dequantized 8-bit value with the same parameters gives it
//! back (the f32 round trip stays within an ulp of the integer), and these layers only move
//! values. A Pad filling with a constant fills with the zero point, so only a fill of 0 (the
//! zero point's real value) folds; its other modes only copy values.

use super::{Chains, OutChain};
use crate::quant::is_8bit;
use backplane_backend_api::{Substitution, ValueRef};
use backplane_core::ops::{PadDesc, PadMode};
use backplane_core::{LayerId, Op};
use std::collections::BTreeSet;

impl Chains<'_> {
    /// Fold the chain whose movement layer is `id`, if it is one.
    pub(super) fn fold_movement(
        &self,
        id: LayerId,
        used: &BTreeSet<LayerId>,
    ) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let moves = matches!(
            layer.op,
            Op::Concat { .. }
                | Op::Reshape { .. }
                | Op::Flatten { .. }
                | Op::Squeeze { .. }
                | Op::Unsqueeze { .. }
                | Op::Transpose { .. }
                | Op::Pad(_)
        );
        if !moves || layer.inputs.is_empty() {
            return None;
        }
        let mut dqs = Vec::new();
        for &t in &layer.inputs {
            let dq = self.dequantize(t, 0)?;
            let dt = self.net.tensor(dq.input).info.dtype;
            if dq.scales.len() != 1 || !is_8bit(dt) {
                return None;
            }
            dqs.push((dq, dt));
        }
        let (first, dt) = (&dqs[0].0, dqs[0].1);
        let q = (first.scales[0], first.zeros[0]);
        let same = |d: &super::Dq| d.scales[0] == q.0 && d.zeros[0] == q.1;
        if dqs.iter().any(|(d, t)| !same(d) || *t != dt) {
            return None;
        }
        let OutChain {
            mut replaced,
            y,
            to,
            q: out_q,
            act,
            ..
        } = self.quantized_output(id)?;
        let no_act = act == (f32::NEG_INFINITY, f32::INFINITY);
        if !no_act || to != dt || out_q != q {
            return None;
        }
        let dq_layers: Vec<LayerId> = dqs.iter().map(|(d, _)| d.layer).collect();
        self.absorb_dequantizations(id, &dq_layers, used, &mut replaced)?;
        let op = match &layer.op {
            Op::Pad(d) => Op::Pad(pad_on_bytes(d, q.1)?),
            op => op.clone(),
        };
        Some(
            self.one_layer(
                replaced,
                op,
                dqs.iter()
                    .map(|(d, _)| ValueRef::Existing(d.input))
                    .collect(),
                y,
            ),
        )
    }
}

/// The Pad of the 8-bit tensor for the float Pad `d` between quantizations of zero point
/// `zero`: a constant fill of 0 becomes the zero point; `None` for another constant (it
/// would need quantizing, and no model seen pads with one).
fn pad_on_bytes(d: &PadDesc, zero: i32) -> Option<PadDesc> {
    match d.mode {
        PadMode::Constant if d.value == 0.0 => Some(PadDesc {
            value: f64::from(zero),
            ..d.clone()
        }),
        PadMode::Constant => None,
        _ => Some(d.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_fill_of_zero_pads_the_bytes() {
        let d = PadDesc {
            mode: PadMode::Constant,
            pads: vec![0, 0, 1, 1, 0, 0, 1, 1],
            value: 0.0,
        };
        assert_eq!(pad_on_bytes(&d, -128).map(|p| p.value), Some(-128.0));
        assert_eq!(pad_on_bytes(&d, 7).map(|p| p.pads), Some(d.pads.clone()));
        assert_eq!(
            pad_on_bytes(
                &PadDesc {
                    value: 0.5,
                    ..d.clone()
                },
                7
            ),
            None
        );
        let edge = PadDesc {
            mode: PadMode::Edge,
            value: 3.0,
            ..d
        };
        assert_eq!(pad_on_bytes(&edge, 7), Some(edge.clone()));
    }
}

//! Folding of the chain ONNX's QLinearConv is imported as (`backplane-onnx`'s
//! `qlinear_conv.rs`): `DequantizeLinear(x, 1, zx) → Conv(·, DequantizeLinear(w const, 1, zw),
//! f32 integer bias) → Mul(multiplier const) → (Relu | Clip) → QuantizeLinear` becomes the
//! same int8 convolution a QDQ chain becomes. The chain computes exact integer sums, one f32
//! multiplication by the multiplier `sx·sw/sy` and a rounding half to even (with a
//! QuantizeLinear of scale 1, as the importer writes it): the folded layer computes those
//! operations, so its bytes equal the chain's.

use super::{Chains, OutChain};
use crate::quant::conv::{clamp_range, QConvDesc};
use backplane_backend_api::Substitution;
use backplane_core::ops::BinaryOp;
use backplane_core::{LayerId, Op, Tensor, TensorId};
use std::collections::BTreeSet;

/// The largest magnitude of an f32 bias taken as an int32 one.
const MAX_BIAS: f32 = 2_147_483_520.0;

impl Chains<'_> {
    /// Fold the QLinearConv chain whose Conv is `id`, if it is one.
    pub(super) fn fold_qlinear_conv(
        &self,
        id: LayerId,
        used: &BTreeSet<LayerId>,
    ) -> Option<Substitution> {
        let layer = self.net.layer(id);
        let Op::Conv(desc) = &layer.op else {
            return None;
        };
        let (xt, wt) = (*layer.inputs.first()?, *layer.inputs.get(1)?);
        let x = self.dequantize(xt, 1)?;
        let w = self.int8_weights(&x, wt, 0)?;
        let x_info = &self.net.tensor(x.input).info;
        let w_info = &self.net.tensor(w.input).info;
        let unit = |s: &[f32]| s.iter().all(|&v| v == 1.0);
        if !unit(&x.scales) || !unit(&w.scales) {
            return None;
        }
        let (x_dims, w_dims) = (x_info.shape.dims(), w_info.shape.dims());
        if x_dims.len() != 4 || w_dims.len() != 4 {
            return None;
        }
        let m = w_dims[0];
        let conv_out = self.single_output(id)?;
        let mul = self.sole_consumer(conv_out)?;
        let mult = self.channel_multiplier(mul, conv_out, m)?;
        let OutChain {
            replaced: tail,
            y,
            to,
            q: (sy, zy),
            act,
            requant,
        } = self.quantized_output(mul)?;
        let mut replaced = vec![id];
        replaced.extend(tail);
        let bias: Vec<i32> = match layer.inputs.get(2) {
            None => vec![0; m],
            Some(&bt) => integer_bias(self.constant(bt)?, m)?,
        };
        // Per channel when either the multiplier or the weights' zero point is.
        let per_channel = mult.len() > 1 || w.zeros.len() > 1;
        let spread = |v: &[i32]| {
            if v.len() == 1 {
                vec![v[0]; m]
            } else {
                v.to_vec()
            }
        };
        let (w_scales, w_zeros) = if per_channel {
            let s = if mult.len() == 1 {
                vec![mult[0]; m]
            } else {
                mult
            };
            (s, spread(&w.zeros))
        } else {
            (mult, w.zeros.clone())
        };
        let spatial = &x_dims[2..];
        let geo = desc.window.geometry(spatial, false).ok()?;
        let two = |v: &[usize]| -> Option<[usize; 2]> { <[usize; 2]>::try_from(v).ok() };
        let qdesc = QConvDesc {
            kernel: two(&desc.window.kernel)?,
            strides: two(&geo.strides)?,
            dilations: two(&geo.dilations)?,
            pads: two(&geo.pads_begin)?,
            group: desc.group,
            // The input's scale is inside the multiplier.
            x: (1.0, x.zeros[0]),
            y: (sy, zy),
            w_scales,
            w_zeros,
            clamp: clamp_range(to, (sy, zy), act.0, act.1),
            nhwc: false,
            requant,
        };
        self.absorb_dequantizations(id, &[x.layer, w.layer], used, &mut replaced)?;
        let y_info = self.net.tensor(y).info.clone();
        let bias = Tensor::from_vec(vec![m], bias).ok()?;
        let op = Op::Custom(qdesc.to_op(y_info));
        Some(self.int8_layer(replaced, op, [x.input, w.input], bias, y))
    }

    /// The positive finite multipliers of layer `mul`, a Mul of `acc` (`[N, M, H, W]`) by a
    /// constant of one value or one per channel (`[M, 1, 1]` or `[1, M, 1, 1]`) that keeps
    /// the shape.
    fn channel_multiplier(&self, mul: LayerId, acc: TensorId, m: usize) -> Option<Vec<f32>> {
        let layer = self.net.layer(mul);
        if !matches!(layer.op, Op::Binary(BinaryOp::Mul)) {
            return None;
        }
        let other = match layer.inputs.as_slice() {
            [a, b] if *a == acc && *b != acc => *b,
            [a, b] if *b == acc && *a != acc => *a,
            _ => return None,
        };
        let out = self.single_output(mul)?;
        if self.net.tensor(out).info.shape != self.net.tensor(acc).info.shape {
            return None;
        }
        let c = self.constant(other)?;
        let values = c.as_slice::<f32>().ok()?.to_vec();
        let dims = c.info().shape.dims();
        let fits =
            values.len() == 1 || (values.len() == m && (dims == [m, 1, 1] || dims == [1, m, 1, 1]));
        let positive = values.iter().all(|v| v.is_finite() && *v > 0.0);
        (fits && positive).then_some(values)
    }
}

/// An f32 bias of `m` integer values (the importer's widened int32 bias) as int32.
fn integer_bias(b: &Tensor, m: usize) -> Option<Vec<i32>> {
    let v = b.as_slice::<f32>().ok()?;
    if v.len() != m {
        return None;
    }
    v.iter()
        .map(|&b| (b.fract() == 0.0 && b.abs() <= MAX_BIAS).then_some(b as i32))
        .collect()
}

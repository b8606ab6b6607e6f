//! Quantized sweep family "QBlock": random int8/uint8 inverted-residual blocks as a TFLite
//! model's importer writes them — an NHWC image through a `Transpose` to NCHW, then QDQ
//! chains of a 1×1 expansion, a 3×3 depthwise convolution (stride 1 or 2) and a 1×1
//! projection, with the residual `Add` where the shapes allow. A backend that runs such
//! chains channels-last (CpuAcc) runs a whole region here, its entry and exit included.

use crate::sweeps::Rng;
use backplane::core::ops::{AutoPad, BinaryOp, ConvDesc, UnaryOp, Window};
use backplane::core::quant::Requantization;
use backplane::core::{Op, TensorId};
use backplane::{DataType, Network, Tensor, TensorInfo};

use super::quant_sweeps::{bytes, QuantCase};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A scalar zero point of an 8-bit type.
fn zero_point(dt: DataType, z: i32) -> Result<Tensor, String> {
    Tensor::from_f64_values(TensorInfo::new(dt, vec![]), &[f64::from(z)]).map_err(err)
}

/// Builds the block's layers; each constant and layer named after its stage.
pub(crate) struct Block<'a> {
    pub(crate) net: Network,
    pub(crate) r: &'a mut Rng,
    pub(crate) dt: DataType,
    /// The rule of every QuantizeLinear the block writes.
    pub(crate) requant: Requantization,
}

/// An 8-bit activation tensor with its scale and zero point.
#[derive(Clone, Copy)]
pub(crate) struct Q {
    pub(crate) t: TensorId,
    pub(crate) scale: f32,
    pub(crate) zero: i32,
    pub(crate) channels: usize,
}

impl<'a> Block<'a> {
    /// A block whose input `x` is a channels-last image, transposed to NCHW as the TFLite
    /// importer hands it to channels-first layers: the block and the transposed tensor.
    pub(crate) fn nhwc_image(
        r: &'a mut Rng,
        dt: DataType,
        x: &Tensor,
    ) -> Result<(Block<'a>, TensorId), String> {
        let mut b = Block {
            net: Network::new(),
            r,
            dt,
            requant: Requantization::F32,
        };
        let xi = b.net.add_input("x", x.info().clone()).map_err(err)?;
        let to_nchw = Op::Transpose {
            perm: vec![0, 3, 1, 2],
        };
        let xt = b.one("to_nchw", to_nchw, &[xi])?;
        Ok((b, xt))
    }

    pub(crate) fn one(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[TensorId],
    ) -> Result<TensorId, String> {
        let out = self.net.add_layer(name, op, inputs).map_err(err)?;
        out.first().copied().ok_or_else(|| "no output".to_string())
    }

    pub(crate) fn constant(&mut self, name: &str, t: Tensor) -> Result<TensorId, String> {
        self.net.add_constant(name, t).map_err(err)
    }

    pub(crate) fn dequantize(&mut self, name: &str, q: Q) -> Result<TensorId, String> {
        let s = self.constant(&format!("{name}_scale"), Tensor::scalar(q.scale))?;
        let z = self.constant(&format!("{name}_zero"), zero_point(self.dt, q.zero)?)?;
        let op = Op::DequantizeLinear {
            axis: 1,
            to: DataType::F32,
            block_size: 0,
        };
        self.one(name, op, &[q.t, s, z])
    }

    /// `QuantizeLinear(t)` with a random scale near `scale` and a zero point near the middle.
    pub(crate) fn quantize(
        &mut self,
        name: &str,
        t: TensorId,
        scale: f32,
        c: usize,
    ) -> Result<Q, String> {
        let zero = if self.dt == DataType::I8 { 0 } else { 128 } + self.r.below(41) as i32 - 20;
        let scale = scale * (1.0 + 0.25 * self.r.unit() as f32);
        self.quantize_at(name, t, (scale, zero), c)
    }

    /// `QuantizeLinear(t)` with scale and zero point `(scale, zero)`, by the block's rule.
    pub(crate) fn quantize_at(
        &mut self,
        name: &str,
        t: TensorId,
        (scale, zero): (f32, i32),
        c: usize,
    ) -> Result<Q, String> {
        let s = self.constant(&format!("{name}_scale"), Tensor::scalar(scale))?;
        let z = self.constant(&format!("{name}_zero"), zero_point(self.dt, zero)?)?;
        let op = Op::QuantizeLinear {
            axis: 1,
            to: self.dt,
            block_size: 0,
            saturate: true,
            requant: self.requant,
        };
        let t = self.one(name, op, &[t, s, z])?;
        Ok(Q {
            t,
            scale,
            zero,
            channels: c,
        })
    }

    /// One QDQ convolution stage (per-channel int8 weights, int32 bias, optional ReLU6).
    pub(crate) fn conv(
        &mut self,
        name: &str,
        x: Q,
        m: usize,
        k: usize,
        stride: usize,
        depthwise: bool,
    ) -> Result<Q, String> {
        let c = x.channels;
        let group = if depthwise { c } else { 1 };
        let cg = c / group;
        let xf = self.dequantize(&format!("{name}_dq_x"), x)?;
        let sw: Vec<f32> = (0..m)
            .map(|_| 0.002 + 0.01 * (self.r.unit() as f32 + 1.0))
            .collect();
        let w = bytes(self.r, DataType::I8, &[m, cg, k, k])?;
        let wc = self.constant(&format!("{name}_w"), w)?;
        let ws = self.constant(
            &format!("{name}_w_scale"),
            Tensor::from_vec(vec![m], sw.clone()).map_err(err)?,
        )?;
        let wz = self.constant(
            &format!("{name}_w_zero"),
            Tensor::from_f64_values(TensorInfo::new(DataType::I8, vec![m]), &vec![0.0; m])
                .map_err(err)?,
        )?;
        let dq0 = Op::DequantizeLinear {
            axis: 0,
            to: DataType::F32,
            block_size: 0,
        };
        let wf = self.one(&format!("{name}_dq_w"), dq0.clone(), &[wc, ws, wz])?;
        let b = self.r.tensor(DataType::I32, &[m], -3000.0, 3000.0)?;
        let bc = self.constant(&format!("{name}_b"), b)?;
        let sb: Vec<f32> = sw.iter().map(|&s| x.scale * s).collect();
        let bs = self.constant(
            &format!("{name}_b_scale"),
            Tensor::from_vec(vec![m], sb).map_err(err)?,
        )?;
        let bz = self.constant(
            &format!("{name}_b_zero"),
            Tensor::from_vec(vec![m], vec![0i32; m]).map_err(err)?,
        )?;
        let bf = self.one(&format!("{name}_dq_b"), dq0, &[bc, bs, bz])?;
        let op = Op::Conv(ConvDesc {
            window: Window {
                kernel: vec![k, k],
                strides: vec![stride; 2],
                dilations: vec![1, 1],
                pads: vec![k / 2; 4],
                auto_pad: AutoPad::NotSet,
            },
            group,
        });
        let mut y = self.one(&format!("{name}_conv"), op, &[xf, wf, bf])?;
        let relu6 = self.r.below(3) != 0;
        if relu6 {
            let clip = Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 });
            y = self.one(&format!("{name}_relu6"), clip, &[y])?;
        }
        // An output scale that spreads typical sums over the 8-bit range.
        let depth = (cg * k * k) as f32;
        let sw_mean = sw.iter().sum::<f32>() / m as f32;
        let sy = x.scale * sw_mean * 40.0 * 40.0 * depth.sqrt() / 60.0;
        self.quantize(&format!("{name}_q"), y, sy, m)
    }
}

/// A random inverted-residual block (see the module's description).
pub(crate) fn block(r: &mut Rng) -> Result<QuantCase, String> {
    block_by(r, Requantization::F32)
}

/// Family "QBlockFixedPoint": the inverted-residual blocks with every QuantizeLinear under
/// the fixed-point rule (LiteRT's builtin kernels'), as the TFLite importer writes a model
/// XNNPACK refuses.
pub(crate) fn block_fixed_point(r: &mut Rng) -> Result<QuantCase, String> {
    block_by(r, Requantization::FixedPoint)
}

/// A random inverted-residual block whose QuantizeLinears follow `requant`.
fn block_by(r: &mut Rng, requant: Requantization) -> Result<QuantCase, String> {
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 3, 7, 12]),
        r.pick(&[1, 2, 5, 13]),
    );
    let c = r.pick(&[1, 3, 8, 17, 24]);
    let expand = r.pick(&[1, 2, 6]);
    let stride = r.pick(&[1, 1, 2]);
    let cout = r.pick(&[c, c, 5, 16]);
    let x = bytes(r, dt, &[n, h, w, c])?;
    let (mut b, xt) = Block::nhwc_image(r, dt, &x)?;
    b.requant = requant;
    let zx = if dt == DataType::I8 { 3 } else { 125 };
    let x0 = Q {
        t: xt,
        scale: 0.05,
        zero: zx,
        channels: c,
    };
    let e = b.conv("expand", x0, c * expand, 1, 1, false)?;
    let d = b.conv("depthwise", e, c * expand, 3, stride, true)?;
    let p = b.conv("project", d, cout, 1, 1, false)?;
    let residual = stride == 1 && cout == c;
    let out = if residual {
        let pf = b.dequantize("add_dq_a", p)?;
        let xf = b.dequantize("add_dq_b", x0)?;
        let sum = b.one("add", Op::Binary(BinaryOp::Add), &[pf, xf])?;
        let scale = p.scale.max(x0.scale) * 1.5;
        b.quantize("add_q", sum, scale, c)?
    } else {
        p
    };
    b.net.mark_output(out.t).map_err(err)?;
    Ok(QuantCase {
        family: fixed_name(requant, "QBlock", "QBlockFixedPoint"),
        about: format!(
            "{dt} NHWC [{n},{h},{w},{c}], expand ×{expand}, depthwise stride {stride}, \
             project to {cout}{}{}",
            if residual { ", residual add" } else { "" },
            rule_note(requant)
        ),
        network: b.net,
        feed: vec![("x".into(), x)],
    })
}

/// A random squeeze-excite block as the TFLite importer writes Keras's EfficientNet and
/// MobileNetV3 ones in int8: an NHWC image through a `Transpose`, a 1×1 expansion, its
/// activation as its own QDQ chain (SiLU: sigmoid then `Mul` by the input; or hard-swish),
/// the mean over the pixels (`ReduceMean` keeping the dims, or `GlobalAveragePool`), two 1×1
/// convolutions on `[N, C, 1, 1]`, a sigmoid or a `Mul` by a dequantized constant (the
/// hard-sigmoid's 1/6), the gate's broadcasting `Mul`, and a 1×1 projection. A backend that
/// runs quantized chains channels-last (CpuAcc) runs it as one region.
pub(crate) fn squeeze_excite(r: &mut Rng) -> Result<QuantCase, String> {
    squeeze_excite_by(r, Requantization::F32)
}

/// Family "QSqueezeExciteFixedPoint": the squeeze-excite blocks with every QuantizeLinear
/// under the fixed-point rule: LiteRT's builtin MUL (the SiLU's and the gate's products) and
/// MEAN (`ReduceMean` keeping its axes) besides its convolutions.
pub(crate) fn squeeze_excite_fixed_point(r: &mut Rng) -> Result<QuantCase, String> {
    squeeze_excite_by(r, Requantization::FixedPoint)
}

/// A random squeeze-excite block whose QuantizeLinears follow `requant`.
fn squeeze_excite_by(r: &mut Rng, requant: Requantization) -> Result<QuantCase, String> {
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 2, 5, 9]),
        r.pick(&[1, 3, 7]),
    );
    let c = r.pick(&[1, 3, 8, 17]);
    let e = c * r.pick(&[1, 2, 4]);
    let s = r.pick(&[1, 2, 5]);
    let silu = r.below(2) == 0;
    let global = r.below(2) == 0;
    let x = bytes(r, dt, &[n, h, w, c])?;
    let (mut b, xt) = Block::nhwc_image(r, dt, &x)?;
    b.requant = requant;
    let zx = if dt == DataType::I8 { -5 } else { 120 };
    let x0 = Q {
        t: xt,
        scale: 0.04,
        zero: zx,
        channels: c,
    };
    let ex = b.conv("expand", x0, e, 1, 1, false)?;
    // The activation, as its own chains.
    let act = if silu {
        let f = b.dequantize("act_dq", ex)?;
        let g = b.one("act_sigmoid", Op::Unary(UnaryOp::Sigmoid), &[f])?;
        let g = b.quantize("act_sigmoid_q", g, 1.0 / 256.0, e)?;
        let xf = b.dequantize("act_mul_dq_x", ex)?;
        let gf = b.dequantize("act_mul_dq_g", g)?;
        let m = b.one("act_mul", Op::Binary(BinaryOp::Mul), &[xf, gf])?;
        b.quantize("act_mul_q", m, ex.scale, e)?
    } else {
        let f = b.dequantize("act_dq", ex)?;
        let hs = Op::Math(backplane::core::ops::MathOp::HardSwish);
        let m = b.one("act_hard_swish", hs, &[f])?;
        b.quantize("act_q", m, ex.scale, e)?
    };
    let pf = b.dequantize("pool_dq", act)?;
    let pool = if global {
        Op::GlobalPool(backplane::core::ops::PoolKind::Average)
    } else {
        Op::Reduce(backplane::core::ops::ReduceDesc {
            kind: backplane::core::ops::ReduceKind::Mean,
            axes: vec![2, 3],
            keepdims: true,
            noop_with_empty_axes: false,
        })
    };
    let p = b.one("pool", pool, &[pf])?;
    let p = b.quantize("pool_q", p, act.scale, e)?;
    let f1 = b.conv("reduce", p, s, 1, 1, false)?;
    let f2 = b.conv("expand_se", f1, e, 1, 1, false)?;
    let gf = b.dequantize("gate_dq", f2)?;
    let gate = if silu {
        let g = b.one("gate_sigmoid", Op::Unary(UnaryOp::Sigmoid), &[gf])?;
        b.quantize("gate_q", g, 1.0 / 256.0, e)?
    } else {
        // The hard-sigmoid's division by 6 as a Mul by a dequantized 8-bit constant.
        let k = b.constant(
            "sixth",
            Tensor::from_f64_values(TensorInfo::new(b.dt, vec![]), &[85.0]).map_err(err)?,
        )?;
        let k = b.dequantize(
            "sixth_dq",
            Q {
                t: k,
                scale: 1.0 / 510.0,
                zero: 0,
                channels: 1,
            },
        )?;
        let g = b.one("gate_sixth", Op::Binary(BinaryOp::Mul), &[gf, k])?;
        b.quantize("gate_q", g, f2.scale / 6.0, e)?
    };
    let af = b.dequantize("scale_dq_x", act)?;
    let gf = b.dequantize("scale_dq_g", gate)?;
    let (l, rr) = if b.r.below(2) == 0 {
        (af, gf)
    } else {
        (gf, af)
    };
    let m = b.one("scale", Op::Binary(BinaryOp::Mul), &[l, rr])?;
    let m = b.quantize("scale_q", m, act.scale, e)?;
    let out = b.conv("project", m, c, 1, 1, false)?;
    b.net.mark_output(out.t).map_err(err)?;
    Ok(QuantCase {
        family: fixed_name(requant, "QSqueezeExcite", "QSqueezeExciteFixedPoint"),
        about: format!(
            "{dt} NHWC [{n},{h},{w},{c}], expand to {e}, {}, {} to {s}{}",
            if silu { "SiLU" } else { "hard-swish" },
            if global {
                "GlobalAveragePool"
            } else {
                "ReduceMean"
            },
            rule_note(requant)
        ),
        network: b.net,
        feed: vec![("x".into(), x)],
    })
}

/// The family name for `requant`: `f32` under the f32 rule, `fixed` under the fixed-point one.
fn fixed_name(requant: Requantization, f32: &'static str, fixed: &'static str) -> &'static str {
    match requant {
        Requantization::F32 => f32,
        Requantization::FixedPoint => fixed,
    }
}

/// What a block's description adds for `requant`: nothing under the f32 rule.
fn rule_note(requant: Requantization) -> &'static str {
    match requant {
        Requantization::F32 => "",
        Requantization::FixedPoint => ", fixed-point requantization",
    }
}

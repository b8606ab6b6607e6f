//! Quantized sweep families of the chains besides QDQ convolutions and Gemms:
//!
//! - "QLinearConv": ONNX's QLinearConv as `backplane-onnx` imports it —
//!   `DequantizeLinear(x, 1, zx) → Conv(·, DequantizeLinear(w const, 1, zw), f32 integer
//!   bias) → Mul(multiplier sx·sw/sy) → QuantizeLinear(1, zy)` — int8 / uint8, weights per
//!   tensor or per channel, depthwise or one group, odd sizes;
//! - "QMatMul": `DequantizeLinear(x) → MatMul(·, DequantizeLinear(w const [K, N])) →
//!   (Relu | Clip) → QuantizeLinear` (ONNX QDQ MatMul, QLinearMatMul, TFLite BATCH_MATMUL of
//!   a constant) with x of rank 2 to 4;
//! - "QMove": Concat / Transpose / Flatten between equal quantizations.

use crate::quant_fixed_point::Multiplier;
use crate::quant_sweeps::{
    about_rule, bytes, dequantize, err, pick_zero, quantize_out_by, rule, QuantCase,
};
use crate::sweeps::{window, Rng};
use backplane::core::ops::{BinaryOp, ConvDesc};
use backplane::core::Op;
use backplane::{DataType, Network, Tensor, TensorInfo};

/// One random QLinearConv chain.
pub(crate) fn qlinear_conv(r: &mut Rng) -> Result<QuantCase, String> {
    let xt = r.pick(&[DataType::I8, DataType::U8]);
    let wt = r.pick(&[DataType::I8, DataType::I8, DataType::U8]);
    let yt = r.pick(&[xt, xt, DataType::I8, DataType::U8]);
    let depthwise = r.below(3) == 0;
    let (cin, cout, group) = if depthwise {
        let c = r.pick(&[1, 3, 8, 17, 32]);
        (c, c, c)
    } else {
        (r.pick(&[1, 2, 5, 16, 19]), r.pick(&[1, 3, 4, 7, 17, 32]), 1)
    };
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 5, 8, 13, 24]),
        r.pick(&[1, 6, 9, 14, 31]),
    );
    let win = window(r, h, w, 5);
    let cg = cin / group;
    let depth = cg * win.kernel[0] * win.kernel[1];
    let mut net = Network::new();
    let x = bytes(r, xt, &[n, cin, h, w])?;
    let xi = net.add_input("x", x.info().clone()).map_err(err)?;
    let zx = pick_zero(r, xt);
    let xc = dequantize(&mut net, "x_centered", xi, xt, &[1.0], &[zx], 1)?;
    let per_channel = r.below(3) != 0;
    let nscales = if per_channel { cout } else { 1 };
    let zw: Vec<i32> = (0..nscales)
        .map(|_| {
            if wt == DataType::I8 {
                0
            } else {
                pick_zero(r, wt)
            }
        })
        .collect();
    let wq = bytes(r, wt, &[cout, cg, win.kernel[0], win.kernel[1]])?;
    let wc = net.add_constant("w", wq).map_err(err)?;
    let wcent = dequantize(&mut net, "w_centered", wc, wt, &vec![1.0; nscales], &zw, 0)?;
    let mut inputs = vec![xc, wcent];
    let with_bias = r.below(3) != 0;
    if with_bias {
        // The importer's widened int32 bias: integer values in f32.
        let b = r.tensor(DataType::I32, &[cout], -5000.0, 5000.0)?;
        let b: Vec<f32> = b.to_f64_vec().iter().map(|&v| v as f32).collect();
        let b = Tensor::from_vec(vec![cout], b).map_err(err)?;
        inputs.push(net.add_constant("b", b).map_err(err)?);
    }
    let op = Op::Conv(ConvDesc {
        window: win.clone(),
        group,
    });
    let acc = net.add_layer("conv", op, &inputs).map_err(err)?;
    let acc = *acc.first().ok_or("no output")?;
    let sx = 0.01 + 0.05 * (r.unit() as f32 + 1.0);
    let sw: Vec<f32> = (0..nscales)
        .map(|_| 0.002 + 0.01 * (r.unit() as f32 + 1.0))
        .collect();
    let sw_mean = sw.iter().sum::<f32>() / sw.len() as f32;
    let sy = sx * sw_mean * 40.0 * 40.0 * (depth as f32).sqrt() / 60.0;
    // The multiplier as the importer computes it: (sx · sw) / sy in f32.
    let mult: Vec<f32> = sw.iter().map(|&s| sx * s / sy).collect();
    let mult = if per_channel {
        Tensor::from_vec(vec![1, cout, 1, 1], mult).map_err(err)?
    } else {
        Tensor::scalar(mult[0])
    };
    let mi = net.add_constant("multiplier", mult).map_err(err)?;
    let scaled = net
        .add_layer("scaled", Op::Binary(BinaryOp::Mul), &[acc, mi])
        .map_err(err)?;
    let scaled = *scaled.first().ok_or("no output")?;
    let zy = pick_zero(r, yt);
    // The importer's QuantizeLinear has scale 1 and no activation before it.
    let one = net.add_constant("one", Tensor::scalar(1f32)).map_err(err)?;
    let z = Tensor::from_f64_values(TensorInfo::new(yt, vec![]), &[f64::from(zy)]).map_err(err)?;
    let z = net.add_constant("y_zero", z).map_err(err)?;
    let op = Op::QuantizeLinear {
        axis: 1,
        to: yt,
        block_size: 0,
        saturate: true,
        requant: backplane::core::quant::Requantization::F32,
    };
    let y = net
        .add_layer("quantize", op, &[scaled, one, z])
        .map_err(err)?;
    net.mark_output(*y.first().ok_or("no output")?)
        .map_err(err)?;
    Ok(QuantCase {
        family: "QLinearConv",
        about: format!(
            "x {xt} [{n},{cin},{h},{w}], w {wt} [{cout},{cg},{},{}] {}, group {group}, \
             strides {:?}, pads {:?}, dilations {:?}, bias {with_bias}, y {yt}",
            win.kernel[0],
            win.kernel[1],
            if per_channel {
                "per channel"
            } else {
                "per tensor"
            },
            win.strides,
            win.pads,
            win.dilations
        ),
        network: net,
        feed: vec![("x".into(), x)],
    })
}

/// One random QDQ MatMul chain with constant weights.
pub(crate) fn matmul(r: &mut Rng) -> Result<QuantCase, String> {
    matmul_by(r, None)
}

/// Family "QMatMulFixedPoint": the MatMul chains under the fixed-point rule, their scales
/// drawn for a [`Multiplier`] regime.
pub(crate) fn matmul_fixed_point(r: &mut Rng) -> Result<QuantCase, String> {
    let m = Multiplier::draw(r);
    matmul_by(r, Some(m))
}

/// A random MatMul chain: under the f32 rule with the family's scales (`None`), or under
/// the fixed-point rule with scales drawn for `fixed`.
fn matmul_by(r: &mut Rng, fixed: Option<Multiplier>) -> Result<QuantCase, String> {
    let scales = fixed.unwrap_or(Multiplier::Typical);
    let xt = r.pick(&[DataType::I8, DataType::U8]);
    let wt = r.pick(&[DataType::I8, DataType::I8, DataType::U8]);
    let yt = r.pick(&[xt, xt, DataType::I8, DataType::U8]);
    let rank = 2 + r.below(3);
    let mut x_dims: Vec<usize> = (0..rank - 2).map(|_| r.pick(&[1, 2, 3])).collect();
    let m = r.pick(&[1, 1, 2, 5, 33, 70]);
    let k = r.pick(&[1, 7, 16, 64, 101, 320]);
    let n = r.pick(&[1, 3, 10, 16, 17, 100]);
    x_dims.extend([m, k]);
    let per_channel = r.below(3) != 0;
    let mut net = Network::new();
    let x = bytes(r, xt, &x_dims)?;
    let xi = net.add_input("x", x.info().clone()).map_err(err)?;
    let sx = scales.x_scale(r);
    let zx = pick_zero(r, xt);
    let xf = dequantize(&mut net, "dq_x", xi, xt, &[sx], &[zx], 1)?;
    let nscales = if per_channel { n } else { 1 };
    let sw: Vec<f32> = (0..nscales).map(|_| scales.w_scale(r)).collect();
    let zw: Vec<i32> = (0..nscales)
        .map(|_| {
            if wt == DataType::I8 {
                0
            } else {
                pick_zero(r, wt)
            }
        })
        .collect();
    let wq = bytes(r, wt, &[k, n])?;
    let wc = net.add_constant("w", wq).map_err(err)?;
    let wf = dequantize(&mut net, "dq_w", wc, wt, &sw, &zw, 1)?;
    let y = net
        .add_layer("matmul", Op::MatMul, &[xf, wf])
        .map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    let sw_mean = sw.iter().sum::<f32>() / sw.len() as f32;
    let sy = sx * sw_mean * 40.0 * 40.0 * (k as f32).sqrt() / 60.0;
    let sy = scales.y_scale(r, sx, &sw, sy);
    let zy = pick_zero(r, yt);
    let act = quantize_out_by(r, &mut net, y, yt, (sy, zy), rule(fixed))?;
    Ok(QuantCase {
        family: if fixed.is_some() {
            "QMatMulFixedPoint"
        } else {
            "QMatMul"
        },
        about: format!(
            "x {xt} {x_dims:?}, w {wt} [{k},{n}] {}{act}, y {yt}{}",
            if per_channel {
                "per column"
            } else {
                "per tensor"
            },
            about_rule(fixed)
        ),
        network: net,
        feed: vec![("x".into(), x)],
    })
}

/// One random "QMove" chain: `DequantizeLinear(s, z)` of one or two 8-bit inputs → Concat |
/// Transpose | Flatten → `QuantizeLinear(s, z)` (equal parameters: data movement that need
/// not leave int8).
pub(crate) fn movement(r: &mut Rng) -> Result<QuantCase, String> {
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let rank = 2 + r.below(3);
    let dims: Vec<usize> = (0..rank).map(|_| r.pick(&[1, 2, 3, 7, 13, 31])).collect();
    let kind = r.below(3);
    let s = 0.01 + 0.05 * (r.unit() as f32 + 1.0);
    let z = pick_zero(r, dt);
    let mut net = Network::new();
    let mut feed = Vec::new();
    let mut deq = Vec::new();
    let count = if kind == 0 { 2 } else { 1 };
    let axis = r.below(rank);
    for i in 0..count {
        let mut d = dims.clone();
        if i == 1 {
            d[axis] = r.pick(&[1, 2, 5]);
        }
        let t = bytes(r, dt, &d)?;
        let name = format!("x{i}");
        let id = net.add_input(&name, t.info().clone()).map_err(err)?;
        deq.push(dequantize(
            &mut net,
            &format!("dq{i}"),
            id,
            dt,
            &[s],
            &[z],
            1,
        )?);
        feed.push((name, t));
    }
    let op = match kind {
        0 => Op::Concat { axis: axis as i64 },
        1 => {
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.rotate_left(1 + r.below(rank - 1));
            Op::Transpose { perm }
        }
        _ => Op::Flatten {
            axis: r.below(rank + 1) as i64,
        },
    };
    let about = format!("{} of {dt} {dims:?}", op.name());
    let y = net.add_layer("move", op, &deq).map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    let (si, zi) = (
        net.add_constant("y_scale", Tensor::scalar(s))
            .map_err(err)?,
        net.add_constant(
            "y_zero",
            Tensor::from_f64_values(TensorInfo::new(dt, vec![]), &[f64::from(z)]).map_err(err)?,
        )
        .map_err(err)?,
    );
    let op = Op::QuantizeLinear {
        axis: 1,
        to: dt,
        block_size: 0,
        saturate: true,
        requant: backplane::core::quant::Requantization::F32,
    };
    let q = net.add_layer("quantize", op, &[y, si, zi]).map_err(err)?;
    net.mark_output(*q.first().ok_or("no output")?)
        .map_err(err)?;
    Ok(QuantCase {
        family: "QMove",
        about,
        network: net,
        feed,
    })
}

//! Quantized sweep family "QGemm": `DequantizeLinear(x) → Gemm(·, DequantizeLinear(w const),
//! DequantizeLinear(bias)) → (Relu | Clip) → QuantizeLinear`, a fully connected layer as
//! TFLite's importer and ONNX QDQ models write it: int8 / uint8, weights `[N, K]` (`transB`)
//! or `[K, N]`, per channel or per tensor, one row (a classifier) or many, odd sizes.

use crate::quant_fixed_point::Multiplier;
use crate::quant_sweeps::{
    about_rule, bytes, dequantize, err, pick_zero, quantize_out_by, rule, QuantCase,
};
use crate::sweeps::Rng;
use backplane::core::ops::GemmDesc;
use backplane::core::Op;
use backplane::{DataType, Network, Tensor};

/// One random fully connected chain.
pub(crate) fn gemm(r: &mut Rng) -> Result<QuantCase, String> {
    gemm_by(r, None)
}

/// Family "QGemmFixedPoint": the fully connected chains under the fixed-point rule, their
/// scales drawn for a [`Multiplier`] regime.
pub(crate) fn gemm_fixed_point(r: &mut Rng) -> Result<QuantCase, String> {
    let m = Multiplier::draw(r);
    gemm_by(r, Some(m))
}

/// A random fully connected chain: under the f32 rule with the family's scales (`None`), or
/// under the fixed-point rule with scales drawn for `fixed`.
fn gemm_by(r: &mut Rng, fixed: Option<Multiplier>) -> Result<QuantCase, String> {
    let scales = fixed.unwrap_or(Multiplier::Typical);
    let xt = r.pick(&[DataType::I8, DataType::U8]);
    let wt = r.pick(&[DataType::I8, DataType::I8, DataType::U8]);
    let yt = r.pick(&[xt, xt, DataType::I8, DataType::U8]);
    let m = r.pick(&[1, 1, 2, 5, 33, 70]);
    let k = r.pick(&[1, 7, 16, 64, 101, 320]);
    let n = r.pick(&[1, 3, 10, 16, 17, 100]);
    let trans_b = r.below(3) != 0;
    let per_channel = r.below(3) != 0;
    let mut net = Network::new();
    let x = bytes(r, xt, &[m, k])?;
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
    let w_dims = if trans_b { [n, k] } else { [k, n] };
    let wq = bytes(r, wt, &w_dims)?;
    let wc = net.add_constant("w", wq).map_err(err)?;
    let axis = if trans_b { 0 } else { 1 };
    let wf = dequantize(&mut net, "dq_w", wc, wt, &sw, &zw, axis)?;
    let mut inputs = vec![xf, wf];
    let with_bias = r.below(3) != 0;
    if with_bias {
        let b = r.tensor(DataType::I32, &[n], -5000.0, 5000.0)?;
        let bc = net.add_constant("b", b).map_err(err)?;
        let sb: Vec<f32> = (0..n)
            .map(|c| sx * if per_channel { sw[c] } else { sw[0] })
            .collect();
        let s = Tensor::from_vec(vec![n], sb).map_err(err)?;
        let z = Tensor::from_vec(vec![n], vec![0i32; n]).map_err(err)?;
        let s = net.add_constant("b_scale", s).map_err(err)?;
        let z = net.add_constant("b_zero", z).map_err(err)?;
        let op = Op::DequantizeLinear {
            axis: 0,
            to: DataType::F32,
            block_size: 0,
        };
        let out = net.add_layer("dq_b", op, &[bc, s, z]).map_err(err)?;
        inputs.push(*out.first().ok_or("no output")?);
    }
    let op = Op::Gemm(GemmDesc {
        trans_b,
        ..GemmDesc::default()
    });
    let y = net.add_layer("gemm", op, &inputs).map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    // An output scale that spreads typical sums over the 8-bit range (some saturate).
    let sw_mean = sw.iter().sum::<f32>() / sw.len() as f32;
    let sy = sx * sw_mean * 40.0 * 40.0 * (k as f32).sqrt() / 60.0;
    let sy = scales.y_scale(r, sx, &sw, sy);
    let zy = pick_zero(r, yt);
    let act = quantize_out_by(r, &mut net, y, yt, (sy, zy), rule(fixed))?;
    Ok(QuantCase {
        family: if fixed.is_some() {
            "QGemmFixedPoint"
        } else {
            "QGemm"
        },
        about: format!(
            "x {xt} [{m},{k}], w {wt} {w_dims:?} {}, bias {with_bias}{act}, y {yt}{}",
            if per_channel {
                "per channel"
            } else {
                "per tensor"
            },
            about_rule(fixed)
        ),
        network: net,
        feed: vec![("x".into(), x)],
    })
}

//! Quantized sweeps: random QDQ chains as quantizers write them (TFLite's importer, ONNX QDQ
//! models) — `DequantizeLinear → Conv | Gemm | Add | Sub | Mul | Max | Min → (Relu | Clip) →
//! QuantizeLinear` on int8 and uint8 tensors, per-channel or per-tensor weights, odd shapes,
//! and whole blocks (inverted residuals, squeeze-excite with its int8 sigmoid, hard-swish,
//! mean and broadcasting gate), 2-D average and max pools (`quant_pool_sweeps.rs`), TFLite's
//! 8-bit integer forms (`Lookup`, `IntegerAveragePool`: `quant_int_forms.rs`) —
//! run with the backend under test first (CpuRef behind it), against the same network on
//! CpuRef alone. The families named `…FixedPoint` end their chains with LiteRT's builtin
//! kernels' rule (`Requantization::FixedPoint`) instead of XNNPACK's, with multipliers on
//! ties, tiny and large, and add the Mul and mean chains that rule folds
//! (`quant_fixed_point.rs`).
//!
//! CpuRef folds the quantized convolutions and products into integer layers with LiteRT's
//! (XNNPACK's) requantization (`backends/cpu-ref/src/fold.rs`), and runs the other chains in
//! f32. CpuAcc's integer layers compute the same rule: on CpuAcc the cases pass only when
//! every element equals CpuRef's. Another backend may take part of a chain (its activation,
//! its f32 convolution) and so run it in f32 where CpuRef alone folds it: its cases pass
//! when no element is more than one quantum off. A failure names the count of elements off
//! and the worst.

use crate::exec::{run_network, Run};
use crate::generated::{run_families, Generated};
use crate::quant_fixed_point::Multiplier;
use crate::report::{Outcome, Report};
use crate::sweeps::{window, Rng};
use backplane::core::ops::{BinaryOp, ConvDesc, UnaryOp};
use backplane::core::quant::Requantization;
use backplane::core::Op;
use backplane::{BackendId, DataType, Network, Runtime, Tensor, TensorInfo};

/// The suite's name in reports.
pub const SUITE: &str = "quantized sweeps";

/// A generated chain: the network and its feed.
pub struct QuantCase {
    /// The op family, as reports group it.
    pub family: &'static str,
    /// A line describing it.
    pub about: String,
    /// The network (one chain, one output).
    pub network: Network,
    /// Its inputs.
    pub feed: Vec<(String, Tensor)>,
}

/// A generator of one family's chains.
type Generator = crate::generated::Generator<QuantCase>;

/// The families.
pub const FAMILIES: &[(&str, Generator)] = &[
    ("QConv", conv),
    ("QBinary", binary),
    ("QBlock", crate::quant_blocks::block),
    ("QSqueezeExcite", crate::quant_blocks::squeeze_excite),
    ("QEntry", crate::quant_entry::entry),
    ("QGemm", crate::quant_gemm_sweeps::gemm),
    ("QLinearConv", crate::quant_qoperator_sweeps::qlinear_conv),
    ("QMatMul", crate::quant_qoperator_sweeps::matmul),
    ("QMove", crate::quant_qoperator_sweeps::movement),
    ("QPool", crate::quant_pool_sweeps::pool),
    ("QIntForm", crate::quant_int_forms::int_forms),
    ("QPadSlice", crate::quant_moves::pad_slice),
    // LiteRT's builtin kernels' rule (`Requantization::FixedPoint`).
    ("QConvFixedPoint", conv_fixed_point),
    (
        "QGemmFixedPoint",
        crate::quant_gemm_sweeps::gemm_fixed_point,
    ),
    (
        "QMatMulFixedPoint",
        crate::quant_qoperator_sweeps::matmul_fixed_point,
    ),
    ("QBlockFixedPoint", crate::quant_blocks::block_fixed_point),
    (
        "QSqueezeExciteFixedPoint",
        crate::quant_blocks::squeeze_excite_fixed_point,
    ),
    ("QMulFixedPoint", crate::quant_fixed_point::mul),
    ("QMeanFixedPoint", crate::quant_fixed_point::mean),
];

/// The requantization rule of a chain drawn for `fixed` (`None`: the f32 rule).
pub(crate) fn rule(fixed: Option<Multiplier>) -> Requantization {
    fixed.map_or(Requantization::F32, |_| Requantization::FixedPoint)
}

/// What a case's description adds for `fixed`: nothing under the f32 rule.
pub(crate) fn about_rule(fixed: Option<Multiplier>) -> String {
    fixed.map_or(String::new(), |m| {
        format!(", fixed-point requantization, {}", m.about())
    })
}

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A scalar zero point of an 8-bit type.
fn zero_point(dt: DataType, z: i32) -> Result<Tensor, String> {
    Tensor::from_f64_values(TensorInfo::new(dt, vec![]), &[f64::from(z)]).map_err(err)
}

/// A random zero point in the type's range, near its middle.
pub(crate) fn pick_zero(r: &mut Rng, dt: DataType) -> i32 {
    let centre = if dt == DataType::I8 { 0 } else { 128 };
    centre + r.below(41) as i32 - 20
}

/// An 8-bit tensor of random values over the whole range.
pub(crate) fn bytes(r: &mut Rng, dt: DataType, dims: &[usize]) -> Result<Tensor, String> {
    let (lo, hi) = if dt == DataType::I8 {
        (-128.0, 128.0)
    } else {
        (0.0, 256.0)
    };
    r.tensor(dt, dims, lo, hi)
}

/// A graph input `name` of random 8-bit values of `dt`, dequantized per tensor by the scale
/// `scale` draws and a drawn zero point (in that order, after the bytes): the dequantized
/// tensor and the scale; the input's value is pushed to `feed`.
pub(crate) fn dequantized_input(
    r: &mut Rng,
    net: &mut Network,
    (name, dt, shape): (&str, DataType, &[usize]),
    scale: impl FnOnce(&mut Rng) -> f32,
    feed: &mut Vec<(String, Tensor)>,
) -> Result<(backplane::core::TensorId, f32), String> {
    let t = bytes(r, dt, shape)?;
    let id = net.add_input(name, t.info().clone()).map_err(err)?;
    let s = scale(r);
    let z = pick_zero(r, dt);
    let x = dequantize(net, &format!("dq_{name}"), id, dt, &[s], &[z], 1)?;
    feed.push((name.to_string(), t));
    Ok((x, s))
}

/// `DequantizeLinear(t)` with constant `scales` (one, or per `axis`) and zero points.
pub(crate) fn dequantize(
    net: &mut Network,
    name: &str,
    t: backplane::core::TensorId,
    dt: DataType,
    scales: &[f32],
    zeros: &[i32],
    axis: i64,
) -> Result<backplane::core::TensorId, String> {
    let (s, z) = if scales.len() == 1 {
        (Tensor::scalar(scales[0]), zero_point(dt, zeros[0])?)
    } else {
        let z: Vec<f64> = zeros.iter().map(|&v| f64::from(v)).collect();
        (
            Tensor::from_vec(vec![scales.len()], scales.to_vec()).map_err(err)?,
            Tensor::from_f64_values(TensorInfo::new(dt, vec![zeros.len()]), &z).map_err(err)?,
        )
    };
    let s = net.add_constant(&format!("{name}_scale"), s).map_err(err)?;
    let z = net.add_constant(&format!("{name}_zero"), z).map_err(err)?;
    let op = Op::DequantizeLinear {
        axis,
        to: DataType::F32,
        block_size: 0,
    };
    let out = net.add_layer(name, op, &[t, s, z]).map_err(err)?;
    out.first().copied().ok_or_else(|| "no output".to_string())
}

/// An optional activation, then `QuantizeLinear` to `dt` with scale `sy`, zero point `zy`,
/// marked as the network's output.
pub(crate) fn quantize_out(
    r: &mut Rng,
    net: &mut Network,
    t: backplane::core::TensorId,
    dt: DataType,
    sy: f32,
    zy: i32,
) -> Result<String, String> {
    quantize_out_by(r, net, t, dt, (sy, zy), Requantization::F32)
}

/// [`quantize_out`] with the QuantizeLinear's requantization rule `requant`.
pub(crate) fn quantize_out_by(
    r: &mut Rng,
    net: &mut Network,
    mut t: backplane::core::TensorId,
    dt: DataType,
    (sy, zy): (f32, i32),
    requant: Requantization,
) -> Result<String, String> {
    let act = r.below(3);
    let mut about = String::new();
    if act > 0 {
        let u = if act == 1 {
            UnaryOp::Relu
        } else {
            UnaryOp::Clip {
                min: -20.0 * sy,
                max: 30.0 * sy,
            }
        };
        about = format!(" → {u:?}");
        let out = net.add_layer("act", Op::Unary(u), &[t]).map_err(err)?;
        t = *out.first().ok_or("no output")?;
    }
    let s = net
        .add_constant("y_scale", Tensor::scalar(sy))
        .map_err(err)?;
    let z = net
        .add_constant("y_zero", zero_point(dt, zy)?)
        .map_err(err)?;
    let op = Op::QuantizeLinear {
        axis: 1,
        to: dt,
        block_size: 0,
        saturate: true,
        requant,
    };
    let out = net.add_layer("quantize", op, &[t, s, z]).map_err(err)?;
    net.mark_output(*out.first().ok_or("no output")?)
        .map_err(err)?;
    Ok(about)
}

fn conv(r: &mut Rng) -> Result<QuantCase, String> {
    conv_by(r, None)
}

/// Family "QConvFixedPoint": the convolution chains under the fixed-point rule, their scales
/// drawn for a [`Multiplier`] regime.
pub(crate) fn conv_fixed_point(r: &mut Rng) -> Result<QuantCase, String> {
    let m = Multiplier::draw(r);
    conv_by(r, Some(m))
}

/// A random convolution chain: under the f32 rule with the family's scales (`None`), or
/// under the fixed-point rule with scales drawn for `fixed`.
fn conv_by(r: &mut Rng, fixed: Option<Multiplier>) -> Result<QuantCase, String> {
    let scales = fixed.unwrap_or(Multiplier::Typical);
    let xt = r.pick(&[DataType::I8, DataType::U8]);
    let wt = r.pick(&[DataType::I8, DataType::I8, DataType::U8]);
    let yt = r.pick(&[xt, xt, DataType::I8, DataType::U8]);
    let depthwise = r.below(3) == 0;
    let (cin, cout, group) = if depthwise {
        let c = r.pick(&[1, 3, 8, 17, 32]);
        (c, c * r.pick(&[1, 1, 2]), c)
    } else {
        let g = r.pick(&[1, 1, 1, 2]);
        (
            g * r.pick(&[1, 2, 5, 16, 19]),
            g * r.pick(&[1, 3, 4, 7, 17, 32]),
            g,
        )
    };
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 5, 8, 13, 24]),
        r.pick(&[1, 6, 9, 14, 31]),
    );
    let win = window(r, h, w, 5);
    let cg = cin / group;
    let k = cg * win.kernel[0] * win.kernel[1];
    let mut net = Network::new();
    let x = bytes(r, xt, &[n, cin, h, w])?;
    let xi = net.add_input("x", x.info().clone()).map_err(err)?;
    let sx = scales.x_scale(r);
    let zx = pick_zero(r, xt);
    let xf = dequantize(&mut net, "dq_x", xi, xt, &[sx], &[zx], 1)?;
    let per_channel = r.below(3) != 0;
    let nscales = if per_channel { cout } else { 1 };
    let sw: Vec<f32> = (0..nscales).map(|_| scales.w_scale(r)).collect();
    // Weights: signed ones symmetric (zero point 0, as quantizers make them), unsigned ones
    // around a zero point.
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
    let wf = dequantize(&mut net, "dq_w", wc, wt, &sw, &zw, 0)?;
    let mut inputs = vec![xf, wf];
    let with_bias = r.below(3) != 0;
    if with_bias {
        let b = r.tensor(DataType::I32, &[cout], -5000.0, 5000.0)?;
        let bc = net.add_constant("b", b).map_err(err)?;
        let sb: Vec<f32> = sw.iter().map(|&s| sx * s).collect();
        let zb = vec![0; sb.len()];
        let (s, z) = if sb.len() == 1 {
            (Tensor::scalar(sb[0]), Tensor::scalar(0i32))
        } else {
            (
                Tensor::from_vec(vec![sb.len()], sb).map_err(err)?,
                Tensor::from_vec(vec![zb.len()], zb).map_err(err)?,
            )
        };
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
    let op = Op::Conv(ConvDesc {
        window: win.clone(),
        group,
    });
    let y = net.add_layer("conv", op, &inputs).map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    // An output scale that spreads typical sums over the 8-bit range (some saturate).
    let sw_mean = sw.iter().sum::<f32>() / sw.len() as f32;
    let sy = sx * sw_mean * 40.0 * 40.0 * (k as f32).sqrt() / 60.0;
    let sy = scales.y_scale(r, sx, &sw, sy);
    let zy = pick_zero(r, yt);
    let requant = rule(fixed);
    let act = quantize_out_by(r, &mut net, y, yt, (sy, zy), requant)?;
    Ok(QuantCase {
        family: if fixed.is_some() {
            "QConvFixedPoint"
        } else {
            "QConv"
        },
        about: format!(
            "x {xt} [{n},{cin},{h},{w}], w {wt} [{cout},{cg},{},{}] {}, group {group}, \
             strides {:?}, pads {:?}, dilations {:?}, bias {with_bias}{act}, y {yt}{}",
            win.kernel[0],
            win.kernel[1],
            if per_channel {
                "per channel"
            } else {
                "per tensor"
            },
            win.strides,
            win.pads,
            win.dilations,
            about_rule(fixed)
        ),
        network: net,
        feed: vec![("x".into(), x)],
    })
}

fn binary(r: &mut Rng) -> Result<QuantCase, String> {
    let op = r.pick(&[
        BinaryOp::Add,
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Max,
        BinaryOp::Min,
    ]);
    let rank = 1 + r.below(4);
    let dims: Vec<usize> = (0..rank)
        .map(|_| r.pick(&[1, 2, 3, 7, 16, 17, 31, 64]))
        .collect();
    // One case in three broadcasts an operand (numpy's rule): some of its axes are 1,
    // leading ones may be dropped.
    let broadcast = r.below(3) == 0;
    let mut small: Vec<usize> = dims
        .iter()
        .map(|&d| if r.below(2) == 0 { 1 } else { d })
        .collect();
    if broadcast && r.below(2) == 0 {
        small.remove(0);
    }
    let small_first = r.below(2) == 0;
    let mut net = Network::new();
    let mut inputs = Vec::new();
    let mut feed = Vec::new();
    let mut types = Vec::new();
    for name in ["a", "b"] {
        let dt = r.pick(&[DataType::I8, DataType::U8]);
        let shape = if broadcast && (name == "a") == small_first {
            &small
        } else {
            &dims
        };
        let scale = |r: &mut Rng| 0.01 + 0.05 * (r.unit() as f32 + 1.0);
        let (x, _) = dequantized_input(r, &mut net, (name, dt, shape), scale, &mut feed)?;
        inputs.push(x);
        types.push(dt);
    }
    let y = net
        .add_layer("binary", Op::Binary(op), &inputs)
        .map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    let yt = r.pick(&[DataType::I8, DataType::U8]);
    let sy = if op == BinaryOp::Mul { 0.05 } else { 0.02 } * (1.0 + r.unit() as f32 * 0.5);
    let zy = pick_zero(r, yt);
    let act = quantize_out(r, &mut net, y, yt, sy, zy)?;
    Ok(QuantCase {
        family: "QBinary",
        about: format!(
            "{op:?} of {} and {} {dims:?}{}{act}, y {yt}",
            types[0],
            types[1],
            if broadcast {
                format!(
                    ", {} broadcast from {small:?}",
                    if small_first { "a" } else { "b" }
                )
            } else {
                String::new()
            }
        ),
        network: net,
        feed,
    })
}

/// The outputs of `case` with `preference`, or why not.
fn outputs(
    runtime: &Runtime,
    case: &QuantCase,
    preference: &[BackendId],
) -> Result<(usize, Vec<f64>), Outcome> {
    match run_network(runtime, &case.network, preference, &case.feed) {
        Run::Refused(why) => Err(Outcome::Refused(why)),
        Run::Ran { layers, outputs } => match outputs {
            Err(why) => Err(Outcome::Failed { why, worst: None }),
            Ok(out) => match out.as_slice() {
                [(_, t)] => Ok((layers, t.to_f64_vec())),
                _ => Err(Outcome::Failed {
                    why: format!("{} outputs, expected 1", out.len()),
                    worst: None,
                }),
            },
        },
    }
}

/// The backend whose integer layers must equal CpuRef's to the byte.
const EXACT_BACKEND: &str = "CpuAcc";

/// One case with `backend` first (CpuRef behind it) against CpuRef alone: passed when every
/// element is equal (CpuAcc) or at most one quantum off (any other backend). A chain of
/// several fixed-point stages is checked on CpuRef and CpuAcc only (skipped elsewhere: a
/// backend computing a stage by the f32 rule may be a quantum off there, and more after the
/// next stage).
pub fn run_case(runtime: &Runtime, backend: &BackendId, case: &QuantCase) -> Outcome {
    let cpu_ref = match BackendId::new("CpuRef") {
        Ok(id) => id,
        Err(e) => return Outcome::Skipped(e.to_string()),
    };
    let follows_rule = [EXACT_BACKEND, "CpuRef"].contains(&backend.as_str());
    if crate::quant_fixed_point::chained(case) && !follows_rule {
        return Outcome::Skipped(
            "fixed-point stages in a row are checked on backends that follow the rule".into(),
        );
    }
    let want = match outputs(runtime, case, std::slice::from_ref(&cpu_ref)) {
        Ok((_, w)) => w,
        Err(Outcome::Failed { why, .. }) => return Outcome::Skipped(format!("CpuRef: {why}")),
        Err(other) => return other,
    };
    let got = match outputs(runtime, case, &[backend.clone(), cpu_ref]) {
        Ok((_, g)) => g,
        Err(o) => return o,
    };
    if got.len() != want.len() {
        return Outcome::Failed {
            why: format!("{} elements, expected {}", got.len(), want.len()),
            worst: None,
        };
    }
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    let off = got.iter().zip(&want).filter(|(g, w)| g != w).count();
    let bound = if backend.as_str() == EXACT_BACKEND {
        0.0
    } else {
        1.0
    };
    if worst > bound {
        return Outcome::Failed {
            why: format!(
                "{off} of {} elements off, the worst by {worst} quanta",
                got.len()
            ),
            worst: Some(worst),
        };
    }
    Outcome::Passed
}

/// Run `cases` chains of every family on `backend`, from `seed`, into `report`.
pub fn run(runtime: &Runtime, backend: &BackendId, seed: u64, cases: usize, report: &mut Report) {
    run_families(SUITE, FAMILIES, 2_000_003, seed, cases, report, |case| {
        run_case(runtime, backend, case)
    });
}

impl Generated for QuantCase {
    fn about(&self) -> &str {
        &self.about
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_chains_run_on_cpu_ref() {
        let runtime = backplane::RuntimeBuilder::new().build();
        assert!(runtime.is_ok());
        let Ok(runtime) = runtime else { return };
        let Ok(cpu_ref) = BackendId::new("CpuRef") else {
            return;
        };
        for (family, generate) in FAMILIES {
            for seed in 0..20 {
                let case = generate(&mut Rng::new(seed));
                assert!(case.is_ok(), "{family} seed {seed}: {:?}", case.err());
                let Ok(case) = case else { continue };
                let out = outputs(&runtime, &case, std::slice::from_ref(&cpu_ref));
                assert!(out.is_ok(), "{family} seed {seed}: {}", case.about);
            }
        }
    }
}

//! Quantized sweep families under the fixed-point requantization
//! (`Requantization::FixedPoint`: the Q31 multiplier and shift of LiteRT's builtin kernels,
//! which the TFLite importer chooses for models XNNPACK refuses). The convolution, fully
//! connected and block families draw their chains again with that rule
//! (`quant_sweeps.rs`, `quant_gemm_sweeps.rs`, `quant_blocks.rs`); this module draws the
//! scales that put the multiplier where the rule has edges ([`Multiplier`]) and the two
//! chains the rule folds besides products:
//!
//! - "QMulFixedPoint": `DequantizeLinear(a) · DequantizeLinear(b) → (Relu | Clip) →
//!   QuantizeLinear` (LiteRT's builtin MUL), int8 and uint8 operands, same shapes or
//!   broadcast (a squeeze-excite gate, a scalar, a plane);
//! - "QMeanFixedPoint": `DequantizeLinear → ReduceMean → QuantizeLinear` (LiteRT's builtin
//!   MEAN) over H and W kept, as CpuRef folds it, on an NCHW input, on an NHWC image through
//!   the importer's `Transpose`, or after a 1×1 convolution (inside CpuAcc's channels-last
//!   region); channel counts on both sides of the rule's blocks of 16; and the forms the
//!   rule is not followed for (dims dropped, `GlobalAveragePool`, other axes, an
//!   activation), which must stay in f32 on every backend.

use crate::quant_blocks::{Block, Q};
use crate::quant_sweeps::{bytes, dequantized_input, err, pick_zero, quantize_out_by, QuantCase};
use crate::sweeps::Rng;
use backplane::core::ops::{BinaryOp, PoolKind, ReduceDesc, ReduceKind, UnaryOp};
use backplane::core::quant::Requantization;
use backplane::core::Op;
use backplane::{DataType, Network};

/// Where a fixed-point family's scales put the requantization multiplier `x_scale ·
/// w_scale / y_scale` (Q31 mantissa and shift).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Multiplier {
    /// The f32 families' scales: multipliers well inside `(2^-31, 1)`.
    Typical,
    /// Power-of-two scales: the multiplier is `2^-k` (or within an f32 rounding of it), so
    /// many sums land on half a quantum and the rule's rounding of ties (half up or half
    /// away from zero, never half to even) decides them.
    Ties,
    /// Multipliers from `2^-28` down past `2^-32`: shifts of -28 to -31, and below that the
    /// multiplier 0 (every output the zero point).
    Tiny,
    /// Multipliers in `[1, 16)` and above: a left shift (shift > 0).
    Large,
}

impl Multiplier {
    /// A random regime, ties twice as often as the others.
    pub(crate) fn draw(r: &mut Rng) -> Multiplier {
        r.pick(&[
            Multiplier::Typical,
            Multiplier::Ties,
            Multiplier::Ties,
            Multiplier::Tiny,
            Multiplier::Large,
        ])
    }

    /// The regime, as a case's description names it.
    pub(crate) fn about(self) -> &'static str {
        match self {
            Multiplier::Typical => "typical multipliers",
            Multiplier::Ties => "power-of-two multipliers (ties)",
            Multiplier::Tiny => "tiny multipliers (shift -28 and below)",
            Multiplier::Large => "multipliers of 1 and more (shift > 0)",
        }
    }

    /// An activation's scale: the f32 families' draw, or a power of two for ties.
    pub(crate) fn x_scale(self, r: &mut Rng) -> f32 {
        match self {
            Multiplier::Ties => 2f32.powi(-4 - r.below(4) as i32),
            _ => 0.01 + 0.05 * (r.unit() as f32 + 1.0),
        }
    }

    /// A weight's scale: the f32 families' draw, or a power of two for ties.
    pub(crate) fn w_scale(self, r: &mut Rng) -> f32 {
        match self {
            Multiplier::Ties => 2f32.powi(-6 - r.below(3) as i32),
            _ => 0.002 + 0.01 * (r.unit() as f32 + 1.0),
        }
    }

    /// The output scale for input scale `x` and weight scales `w`: `typical` (the f32
    /// families' choice, which spreads typical sums over the 8-bit range; nothing drawn),
    /// or one that puts every multiplier `x · w[i] / y` in the regime.
    pub(crate) fn y_scale(self, r: &mut Rng, x: f32, w: &[f32], typical: f32) -> f32 {
        let hi = w.iter().copied().fold(f32::MIN_POSITIVE, f32::max);
        let lo = w.iter().copied().fold(hi, f32::min);
        match self {
            Multiplier::Typical => typical,
            Multiplier::Ties => {
                // A power of two times x · w: near the typical scale, half to twice it.
                let base = x * hi;
                let k = (typical / base).log2().round() as i32 - 1 + r.below(3) as i32;
                base * 2f32.powi(k)
            }
            Multiplier::Tiny => x * hi * 2f32.powi(28 + r.below(9) as i32),
            Multiplier::Large => x * lo / (1.0 + 15.0 * fraction(r)),
        }
    }
}

/// A random multiplication chain (family "QMulFixedPoint").
pub(crate) fn mul(r: &mut Rng) -> Result<QuantCase, String> {
    let regime = Multiplier::draw(r);
    let dims = vec![
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 3, 8, 16, 17, 33]),
        r.pick(&[1, 2, 5, 9]),
        r.pick(&[1, 3, 7, 13]),
    ];
    let (n, c, h, w) = (dims[0], dims[1], dims[2], dims[3]);
    // The other operand: the same shape, a gate per channel, a scalar, a plane, or channels
    // broadcast over a rank-3 shape.
    let small = match r.below(6) {
        0 | 1 => dims.clone(),
        2 => vec![n, c, 1, 1],
        3 => vec![1],
        4 => vec![1, 1, h, w],
        _ => vec![c, 1, 1],
    };
    let small_first = r.below(3) == 0;
    let mut net = Network::new();
    let mut inputs = Vec::new();
    let mut feed = Vec::new();
    let mut about = Vec::new();
    let mut scales = Vec::new();
    for name in ["a", "b"] {
        let dt = r.pick(&[DataType::I8, DataType::U8]);
        let shape = if (name == "a") == small_first {
            &small
        } else {
            &dims
        };
        let scale = |r: &mut Rng| regime.x_scale(r);
        let (x, s) = dequantized_input(r, &mut net, (name, dt, shape), scale, &mut feed)?;
        inputs.push(x);
        about.push(format!("{name} {dt} {shape:?}"));
        scales.push(s);
    }
    let y = net
        .add_layer("mul", Op::Binary(BinaryOp::Mul), &inputs)
        .map_err(err)?;
    let y = *y.first().ok_or("no output")?;
    let yt = r.pick(&[DataType::I8, DataType::U8]);
    let typical = 0.05 * (1.0 + 0.5 * fraction(r));
    let sy = regime.y_scale(r, scales[0], &scales[1..], typical);
    let zy = pick_zero(r, yt);
    let act = quantize_out_by(r, &mut net, y, yt, (sy, zy), Requantization::FixedPoint)?;
    Ok(QuantCase {
        family: "QMulFixedPoint",
        about: format!(
            "{} · {}{act}, y {yt}, {}",
            about[0],
            about[1],
            regime.about()
        ),
        network: net,
        feed,
    })
}

/// What a mean chain's description says when a convolution's chain feeds it.
const AFTER_CONV: &str = " → 1×1 conv";

/// Whether `case` chains quantized stages under the fixed-point rule (a block, or a mean fed
/// by a convolution's chain): a backend that computes a stage by the f32 rule may be one
/// quantum off there, and the next stage may make that more, so only a backend that follows
/// the rule (CpuRef, CpuAcc) is judged on it.
pub(crate) fn chained(case: &QuantCase) -> bool {
    matches!(case.family, "QBlockFixedPoint" | "QSqueezeExciteFixedPoint")
        || (case.family == "QMeanFixedPoint" && case.about.contains(AFTER_CONV))
}

/// A random mean chain (family "QMeanFixedPoint").
pub(crate) fn mean(r: &mut Rng) -> Result<QuantCase, String> {
    let regime = Multiplier::draw(r);
    let dt = r.pick(&[DataType::I8, DataType::U8]);
    let (n, h, w) = (
        r.pick(&[1, 1, 2]),
        r.pick(&[1, 2, 4, 7, 8, 13, 16]),
        r.pick(&[1, 2, 3, 4, 8, 11, 16]),
    );
    let c = r.pick(&[1, 3, 8, 15, 16, 17, 33]);
    // 0: an NCHW input; 1: an NHWC image through the importer's Transpose; 2: that, then a
    // 1×1 convolution (CpuAcc runs the mean inside its channels-last region).
    let form = r.below(3);
    let x = if form == 0 {
        bytes(r, dt, &[n, c, h, w])?
    } else {
        bytes(r, dt, &[n, h, w, c])?
    };
    let (mut b, xt) = if form == 0 {
        let mut net = Network::new();
        let xi = net.add_input("x", x.info().clone()).map_err(err)?;
        let b = Block {
            net,
            r,
            dt,
            requant: Requantization::FixedPoint,
        };
        (b, xi)
    } else {
        let (mut b, xt) = Block::nhwc_image(r, dt, &x)?;
        b.requant = Requantization::FixedPoint;
        (b, xt)
    };
    let sx = regime.x_scale(b.r);
    let zx = pick_zero(b.r, dt);
    let mut q = Q {
        t: xt,
        scale: sx,
        zero: zx,
        channels: c,
    };
    if form == 2 {
        q = b.conv("conv", q, c, 1, 1, false)?;
    }
    let xf = b.dequantize("mean_dq", q)?;
    // Mostly the form LiteRT's rule is followed for (H and W, kept); the others stay f32.
    let (op, what) = match b.r.below(8) {
        0..=3 => (reduce(vec![2, 3], true), "ReduceMean over H, W kept"),
        4 => (
            reduce(vec![-1, -2], true),
            "ReduceMean over W, H (-1, -2) kept",
        ),
        5 => (reduce(vec![2, 3], false), "ReduceMean over H, W dropped"),
        6 => (Op::GlobalPool(PoolKind::Average), "GlobalAveragePool"),
        _ => (reduce(vec![1, 2], true), "ReduceMean over C, H kept"),
    };
    let mut m = b.one("mean", op, &[xf])?;
    let relu = b.r.below(6) == 0;
    if relu {
        m = b.one("relu", Op::Unary(UnaryOp::Relu), &[m])?;
    }
    // The multiplier is x_scale / (pixels · y_scale): the pixels' count stands for the
    // weights' scale. A typical scale spreads a mean of random bytes over the range.
    let pixels = (h * w) as f32;
    let typical = q.scale * (0.5 + fraction(b.r)) / pixels.sqrt();
    let sy = regime.y_scale(b.r, q.scale, &[1.0 / pixels], typical);
    let zy = pick_zero(b.r, dt);
    let out = b.quantize_at("mean_q", m, (sy, zy), c)?;
    b.net.mark_output(out.t).map_err(err)?;
    Ok(QuantCase {
        family: "QMeanFixedPoint",
        about: format!(
            "{dt} {} [{n},{},{},{}]{} → {what}{}, {}",
            if form == 0 { "NCHW" } else { "NHWC" },
            if form == 0 { c } else { h },
            if form == 0 { h } else { w },
            if form == 0 { w } else { c },
            if form == 2 { AFTER_CONV } else { "" },
            if relu { " → Relu" } else { "" },
            regime.about()
        ),
        network: b.net,
        feed: vec![("x".into(), x)],
    })
}

/// A random number in `[0, 1)`.
fn fraction(r: &mut Rng) -> f32 {
    (r.unit() as f32 + 1.0) / 2.0
}

/// A mean over `axes`, keeping them or not.
fn reduce(axes: Vec<i64>, keepdims: bool) -> Op {
    Op::Reduce(ReduceDesc {
        kind: ReduceKind::Mean,
        axes,
        keepdims,
        noop_with_empty_axes: false,
    })
}

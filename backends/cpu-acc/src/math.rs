//! Branch-free f32 approximations of the transcendental functions, written so that LLVM
//! vectorizes loops over them (the bodies are compiled with AVX-512 or AVX2 through
//! [`crate::simd`]'s multiversioned wrappers).
//!
//! Accuracy against the f64 reference (checked in the tests): exp ≤ 2 ulp, tanh ≤ 4e-7
//! relative, erf ≤ 5e-7 absolute, sigmoid ≤ 3e-7 relative, SiLU ≤ 4e-7 relative.

use crate::act::Activation;
use backplane_core::ops::MathOp;
use backplane_core::scalar::math_f64;

// Shared with the kernels' vector forms (`backplane_cpu_kernels::act_vec`), which follow
// these functions step by step.
use backplane_cpu_kernels::act_vec::{
    EXP_MAX, EXP_MIN, EXP_TAYLOR, LN2_HI, LN2_LO, LOG2E, ROUNDER, SILU_EXP,
};

/// e^x, within 2 ulp for x in [-87.3, 88.7]; 0 below, +inf above, NaN for NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let (t, r) = exp_reduce(x);
    exp_scale(x, t, exp_poly(r))
}

/// The first step of [`exp`]: `t` holds the integer n = round(x·log2 e) in its low mantissa
/// bits (t = 1.5·2^23 + n), and `r` = x − n·ln 2 (|r| <= ln2/2).
#[inline(always)]
fn exp_reduce(x: f32) -> (f32, f32) {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let t = xc * LOG2E + ROUNDER;
    let n = t - ROUNDER;
    let r = n.mul_add(-LN2_HI, xc);
    (t, n.mul_add(-LN2_LO, r))
}

/// The second step of [`exp`]: e^r by [`EXP_TAYLOR`] (Horner).
#[inline(always)]
fn exp_poly(r: f32) -> f32 {
    let mut p = EXP_TAYLOR[0];
    for c in &EXP_TAYLOR[1..] {
        p = p.mul_add(r, *c);
    }
    p
}

/// The last step of [`exp`]: `p` (e^r) times 2^n, saturated by `x`.
#[inline(always)]
fn exp_scale(x: f32, t: f32, p: f32) -> f32 {
    // 2^n from the integer n held in t's low mantissa bits (t = 1.5·2^23 + n exactly): plain
    // integer arithmetic, which vectorizes (a saturating `n as i32` does not).
    let scale = f32::from_bits(
        t.to_bits()
            .wrapping_sub(ROUNDER.to_bits())
            .wrapping_add(127)
            << 23,
    );
    let y = p * scale;
    let y = if x < EXP_MIN { 0.0 } else { y };
    if x > EXP_MAX {
        f32::INFINITY
    } else {
        y
    }
}

/// tanh(x): a [13/6] rational approximation on [-7.9, 7.9] (saturated outside).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let xc = x.clamp(-7.905_311, 7.905_311);
    let x2 = xc * xc;
    let mut p = -2.760_768_5e-16f32;
    p = p.mul_add(x2, 2.000_188e-13);
    p = p.mul_add(x2, -8.604_672e-11);
    p = p.mul_add(x2, 5.122_297e-8);
    p = p.mul_add(x2, 1.485_722_4e-5);
    p = p.mul_add(x2, 6.372_619e-4);
    p = p.mul_add(x2, 4.893_524_6e-3);
    let p = p * xc;
    let mut q = 1.198_258_4e-6f32;
    q = q.mul_add(x2, 1.185_347e-4);
    q = q.mul_add(x2, 2.268_434_7e-3);
    q = q.mul_add(x2, 4.893_525e-3);
    let r = p / q;
    // Saturate exactly, so that e.g. tanh-GELU at ±inf sees 1 + tanh = 0 like the reference.
    if x > 9.0 {
        1.0
    } else if x < -9.0 {
        -1.0
    } else {
        r
    }
}

/// erf(x): a [7/5]-style rational approximation on [-4, 4] (saturated outside).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let xc = x.clamp(-4.0, 4.0);
    let x2 = xc * xc;
    let mut p = -2.726_142_3e-10f32;
    p = p.mul_add(x2, 2.770_681_4e-8);
    p = p.mul_add(x2, -2.101_024e-6);
    p = p.mul_add(x2, -5.692_506_4e-5);
    p = p.mul_add(x2, -7.349_906_3e-4);
    p = p.mul_add(x2, -2.954_6e-3);
    p = p.mul_add(x2, -1.609_603_3e-2);
    let p = p * xc;
    let mut q = -1.456_607_2e-5f32;
    q = q.mul_add(x2, -2.133_740_6e-4);
    q = q.mul_add(x2, -1.682_827e-3);
    q = q.mul_add(x2, -7.373_329_3e-3);
    q = q.mul_add(x2, -1.426_474e-2);
    p / q
}

/// 1 / (1 + e^-x).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// x · sigmoid(x) as (x < 0 ? x·e : x) / (1 + e), e = e^-|x|: e lies in (0, 1], so it
/// needs no saturation, and [`SILU_EXP`]'s shorter polynomial suffices (≤ 4e-7 relative).
/// At -∞ it gives -∞ (the limit is 0; x · sigmoid(x) gives NaN there); NaN stays NaN.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    let m = -x.abs();
    // Below exp's range e is clamped at e^-87.33; a NaN passes.
    let m = if m < EXP_MIN { EXP_MIN } else { m };
    let t = m * LOG2E + ROUNDER;
    let n = t - ROUNDER;
    let r = n.mul_add(-LN2_HI, m);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = SILU_EXP[0];
    for c in &SILU_EXP[1..] {
        p = p.mul_add(r, *c);
    }
    let scale = f32::from_bits(
        t.to_bits()
            .wrapping_sub(ROUNDER.to_bits())
            .wrapping_add(127)
            << 23,
    );
    let e = p * scale;
    let num = if x < 0.0 { x * e } else { x };
    num / (1.0 + e)
}

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// erfc(z) for z >= 0 with a relative error below ~2e-6 in f32 (the Chebyshev-fitted form
/// `t·exp(-z² + P(t))`, t = 1/(1 + z/2), of Numerical Recipes' erfcc).
#[inline(always)]
fn erfc_pos(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    t * exp(erfc_exponent(z, t))
}

/// The coefficients of [`erfc_pos`]'s P(t), highest power first.
const ERFC_P: [f32; 10] = [
    0.170_872_77,
    -0.822_152_23,
    1.488_515_9,
    -1.135_204,
    0.278_868_07,
    -0.186_288_06,
    0.096_784_18,
    0.374_091_96,
    1.000_023_7,
    -1.265_512_2,
];

/// The exponent of [`erfc_pos`]: `P(t) − z²`.
#[inline(always)]
fn erfc_exponent(z: f32, t: f32) -> f32 {
    let mut p = ERFC_P[0];
    for c in &ERFC_P[1..] {
        p = p.mul_add(t, *c);
    }
    p - z * z
}

/// Where GELU's erf form stops: below it, x·Φ(x) is x times a small difference of 1 and
/// erf, whose absolute error erf's rounding would make a large relative one, so it comes
/// from erfc instead. At -3, Φ is 0.0013 and the erf form's relative error stays below 1e-4.
const GELU_ERF_FROM: f32 = -3.0;

/// Exact GELU: x·Φ(x). From x = -3 up, x/2·(1 + erf(x/√2)) with erf's rational form (no
/// exp, no table: about half the work); below, x·erfc(|x|/√2)/2, so the far negative tail,
/// where Φ is tiny, keeps its relative accuracy.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    if x >= GELU_ERF_FROM {
        gelu_erf_form(x)
    } else {
        gelu_from_erfc(x, erfc_pos((x * FRAC_1_SQRT_2).abs()))
    }
}

/// x/2·(1 + erf(x/√2)): [`gelu`] from -3 up.
#[inline(always)]
fn gelu_erf_form(x: f32) -> f32 {
    let h = 0.5 * x;
    h.mul_add(erf(x * FRAC_1_SQRT_2), h)
}

/// GELU of `x` given `e` = erfc(|x|/√2).
#[inline(always)]
fn gelu_from_erfc(x: f32, e: f32) -> f32 {
    if x < 0.0 {
        0.5 * x * e
    } else {
        x * (1.0 - 0.5 * e)
    }
}

/// Values per block of [`gelu_block`].
pub const GELU_BLOCK: usize = 32;

/// [`gelu`] of a block of values, bit for bit, one step at a time across the whole block:
/// each step's 32 values are several independent vectors, where one vector at a time runs
/// the chain of a division, a polynomial and exp latency-bound. A block with no value below -3 (nearly all
/// of them) takes the erf form alone; the others compute both forms and pick per value.
#[inline(always)]
pub fn gelu_block(x: &mut [f32; GELU_BLOCK]) {
    // `&` rather than `&&` so the test runs on whole vectors (NaN fails it: the erfc path
    // then carries it through).
    if x.iter().fold(true, |ok, &v| ok & (v >= GELU_ERF_FROM)) {
        for v in x.iter_mut() {
            *v = gelu_erf_form(*v);
        }
        return;
    }
    let mut z = [0f32; GELU_BLOCK];
    let mut t = [0f32; GELU_BLOCK];
    let mut p = [0f32; GELU_BLOCK];
    let mut n = [0f32; GELU_BLOCK];
    let mut r = [0f32; GELU_BLOCK];
    for i in 0..GELU_BLOCK {
        z[i] = (x[i] * FRAC_1_SQRT_2).abs();
        t[i] = 1.0 / (1.0 + 0.5 * z[i]);
    }
    // The polynomials one coefficient at a time across the block (the same operations as
    // `erfc_exponent` and `exp_poly`, so the same bits).
    p.fill(ERFC_P[0]);
    for c in &ERFC_P[1..] {
        for i in 0..GELU_BLOCK {
            p[i] = p[i].mul_add(t[i], *c);
        }
    }
    for i in 0..GELU_BLOCK {
        p[i] -= z[i] * z[i];
        (n[i], r[i]) = exp_reduce(p[i]);
    }
    let mut q = [EXP_TAYLOR[0]; GELU_BLOCK];
    for c in &EXP_TAYLOR[1..] {
        for i in 0..GELU_BLOCK {
            q[i] = q[i].mul_add(r[i], *c);
        }
    }
    for i in 0..GELU_BLOCK {
        let e = t[i] * exp_scale(p[i], n[i], q[i]);
        let from_erf = gelu_erf_form(x[i]);
        x[i] = if x[i] >= GELU_ERF_FROM {
            from_erf
        } else {
            gelu_from_erfc(x[i], e)
        };
    }
}

/// `y[i] = gelu(y[i])`, whole blocks by [`gelu_block`].
#[inline(always)]
fn gelu_in_place(y: &mut [f32]) {
    let mut blocks = y.chunks_exact_mut(GELU_BLOCK);
    for b in &mut blocks {
        if let Ok(b) = <&mut [f32; GELU_BLOCK]>::try_from(b) {
            gelu_block(b);
        }
    }
    for v in blocks.into_remainder() {
        *v = gelu(*v);
    }
}

/// Tanh-approximated GELU.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

/// `f` on one value for any activation.
#[inline(always)]
pub fn apply(act: Activation, x: f32) -> f32 {
    match act {
        Activation::None => x,
        Activation::Relu | Activation::Clip { .. } | Activation::LeakyRelu { .. } => {
            act.apply_simple(x)
        }
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => tanh(x),
        Activation::Erf => erf(x),
        Activation::Gelu {
            tanh_approximation: false,
        } => gelu(x),
        Activation::Gelu {
            tanh_approximation: true,
        } => gelu_tanh(x),
        Activation::Exp => exp(x),
        Activation::Log => x.ln(),
        Activation::Sqrt => x.sqrt(),
        Activation::Neg => -x,
        Activation::Abs => x.abs(),
        Activation::HardSigmoid { alpha, beta } => hard_sigmoid(alpha, beta, x),
        Activation::HardSwish => hard_swish(x),
        Activation::Silu => silu(x),
        Activation::Elu { alpha } => elu(alpha, x),
        Activation::Selu { alpha, gamma } => gamma * elu(alpha, x),
        Activation::Softplus => softplus(x),
        Activation::Mish => x * tanh(softplus(x)),
        _ => scalar_math(act, x),
    }
}

/// The math functions computed as CpuRef computes them: by the shared reference formula
/// ([`backplane_core::scalar::math_f64`], in f64, rounded once to f32), so results, ±0, NaN
/// and ±inf match it exactly. Floor, Ceil and Round are exact in f32 and stay there; the
/// activations not listed here are returned unchanged.
#[inline(always)]
pub fn scalar_math(act: Activation, x: f32) -> f32 {
    let op = match act {
        Activation::Floor => return x.floor(),
        Activation::Ceil => return x.ceil(),
        Activation::Round => return x.round_ties_even(),
        Activation::Sign => MathOp::Sign,
        Activation::Reciprocal => MathOp::Reciprocal,
        Activation::Softsign => MathOp::Softsign,
        Activation::Sin => MathOp::Sin,
        Activation::Cos => MathOp::Cos,
        Activation::Tan => MathOp::Tan,
        Activation::Asin => MathOp::Asin,
        Activation::Acos => MathOp::Acos,
        Activation::Atan => MathOp::Atan,
        Activation::Sinh => MathOp::Sinh,
        Activation::Cosh => MathOp::Cosh,
        Activation::Asinh => MathOp::Asinh,
        Activation::Acosh => MathOp::Acosh,
        Activation::Atanh => MathOp::Atanh,
        Activation::Celu { alpha } => MathOp::Celu { alpha },
        Activation::ThresholdedRelu { alpha } => MathOp::ThresholdedRelu { alpha },
        Activation::Shrink { bias, lambd } => MathOp::Shrink { bias, lambd },
        _ => return x,
    };
    math_f64(op, f64::from(x)) as f32
}

/// min(max(v, 0), 1), NaN staying NaN.
#[inline(always)]
fn unit_clamp(v: f32) -> f32 {
    let lower = if v < 0.0 { 0.0 } else { v };
    if lower > 1.0 {
        1.0
    } else {
        lower
    }
}

/// max(0, min(1, alpha·x + beta)).
#[inline(always)]
pub fn hard_sigmoid(alpha: f32, beta: f32, x: f32) -> f32 {
    unit_clamp(alpha.mul_add(x, beta))
}

/// x · max(0, min(1, x/6 + 1/2)).
#[inline(always)]
pub fn hard_swish(x: f32) -> f32 {
    x * unit_clamp(x / 6.0 + 0.5)
}

/// x if x >= 0 else alpha·(e^x - 1), the difference without cancellation near 0.
#[inline(always)]
pub fn elu(alpha: f32, x: f32) -> f32 {
    if x >= 0.0 {
        x
    } else {
        alpha * x.exp_m1()
    }
}

/// ln(1 + e^x), as max(x, 0) + ln(1 + e^-|x|): no overflow for large x, no rounding to 0
/// of small results for very negative x.
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    let big = if x > 0.0 { x } else { 0.0 };
    big + exp(-x.abs()).ln_1p()
}

macro_rules! per_activation {
    ($act:expr, |$v:ident| $apply:expr, $f:ident) => {
        match $act {
            Activation::None => $f!(|$v: f32| $v),
            Activation::Relu => $f!(|$v: f32| if $v < 0.0 { 0.0 } else { $v }),
            Activation::Clip { min, max } => $f!(|$v: f32| {
                let lower = if $v < min { min } else { $v };
                if lower > max {
                    max
                } else {
                    lower
                }
            }),
            Activation::LeakyRelu { alpha } => {
                $f!(|$v: f32| if $v < 0.0 { alpha * $v } else { $v })
            }
            Activation::Sigmoid => $f!(|$v: f32| sigmoid($v)),
            Activation::Tanh => $f!(|$v: f32| tanh($v)),
            Activation::Erf => $f!(|$v: f32| erf($v)),
            Activation::Gelu {
                tanh_approximation: false,
            } => $f!(|$v: f32| gelu($v)),
            Activation::Gelu {
                tanh_approximation: true,
            } => $f!(|$v: f32| gelu_tanh($v)),
            Activation::Exp => $f!(|$v: f32| exp($v)),
            Activation::Log => $f!(|$v: f32| $v.ln()),
            Activation::Sqrt => $f!(|$v: f32| $v.sqrt()),
            Activation::Neg => $f!(|$v: f32| -$v),
            Activation::Abs => $f!(|$v: f32| $v.abs()),
            Activation::HardSigmoid { alpha, beta } => $f!(|$v: f32| hard_sigmoid(alpha, beta, $v)),
            Activation::HardSwish => $f!(|$v: f32| hard_swish($v)),
            Activation::Silu => $f!(|$v: f32| silu($v)),
            Activation::Elu { alpha } => $f!(|$v: f32| elu(alpha, $v)),
            Activation::Selu { alpha, gamma } => $f!(|$v: f32| gamma * elu(alpha, $v)),
            Activation::Softplus => $f!(|$v: f32| softplus($v)),
            Activation::Mish => $f!(|$v: f32| $v * tanh(softplus($v))),
            Activation::Floor => $f!(|$v: f32| scalar_math(Activation::Floor, $v)),
            Activation::Ceil => $f!(|$v: f32| scalar_math(Activation::Ceil, $v)),
            Activation::Round => $f!(|$v: f32| scalar_math(Activation::Round, $v)),
            Activation::Sign => $f!(|$v: f32| scalar_math(Activation::Sign, $v)),
            Activation::Reciprocal => $f!(|$v: f32| scalar_math(Activation::Reciprocal, $v)),
            Activation::Softsign => $f!(|$v: f32| scalar_math(Activation::Softsign, $v)),
            Activation::Sin => $f!(|$v: f32| scalar_math(Activation::Sin, $v)),
            Activation::Cos => $f!(|$v: f32| scalar_math(Activation::Cos, $v)),
            Activation::Tan => $f!(|$v: f32| scalar_math(Activation::Tan, $v)),
            Activation::Asin => $f!(|$v: f32| scalar_math(Activation::Asin, $v)),
            Activation::Acos => $f!(|$v: f32| scalar_math(Activation::Acos, $v)),
            Activation::Atan => $f!(|$v: f32| scalar_math(Activation::Atan, $v)),
            Activation::Sinh => $f!(|$v: f32| scalar_math(Activation::Sinh, $v)),
            Activation::Cosh => $f!(|$v: f32| scalar_math(Activation::Cosh, $v)),
            Activation::Asinh => $f!(|$v: f32| scalar_math(Activation::Asinh, $v)),
            Activation::Acosh => $f!(|$v: f32| scalar_math(Activation::Acosh, $v)),
            Activation::Atanh => $f!(|$v: f32| scalar_math(Activation::Atanh, $v)),
            Activation::Celu { alpha } => {
                $f!(|$v: f32| scalar_math(Activation::Celu { alpha }, $v))
            }
            Activation::ThresholdedRelu { alpha } => {
                $f!(|$v: f32| scalar_math(Activation::ThresholdedRelu { alpha }, $v))
            }
            Activation::Shrink { bias, lambd } => {
                $f!(|$v: f32| scalar_math(Activation::Shrink { bias, lambd }, $v))
            }
        }
    };
}

/// `y[i] = act(x[i])` (the body [`crate::simd::unary`] compiles per ISA).
#[inline(always)]
pub fn unary_body(act: Activation, x: &[f32], y: &mut [f32]) {
    if let Activation::Gelu {
        tanh_approximation: false,
    } = act
    {
        let n = x.len().min(y.len());
        y[..n].copy_from_slice(&x[..n]);
        gelu_in_place(&mut y[..n]);
        return;
    }
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            for (o, &v) in y.iter_mut().zip(x) {
                *o = f(v);
            }
        }};
    }
    per_activation!(act, |v| v, run)
}

/// `y[i] = act(y[i])` (the body `crate::simd::unary_in_place` compiles per ISA for the
/// activations that are not plain selects).
#[inline(always)]
pub fn unary_in_place_body(act: Activation, y: &mut [f32]) {
    if let Activation::Gelu {
        tanh_approximation: false,
    } = act
    {
        gelu_in_place(y);
        return;
    }
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            for o in y.iter_mut() {
                *o = f(*o);
            }
        }};
    }
    per_activation!(act, |v| v, run)
}

/// `y[i] = act(y[i] + r[i])`: a residual connection's addition and the activation after it,
/// in one pass (the body [`crate::simd::add_act_in_place`] compiles per ISA).
#[inline(always)]
pub fn add_act_in_place_body(act: Activation, y: &mut [f32], r: &[f32]) {
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            for (o, &v) in y.iter_mut().zip(r) {
                *o = f(*o + v);
            }
        }};
    }
    per_activation!(act, |v| v, run)
}

/// Whether `x` holds a NaN (the body [`crate::simd::any_nan`] compiles per ISA): a branch-free fold
/// over blocks, so it vectorizes, with an early exit between blocks.
#[inline(always)]
pub fn any_nan_body(x: &[f32]) -> bool {
    x.chunks(256)
        .any(|c| c.iter().fold(false, |acc, v| acc | v.is_nan()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `len` test inputs: every `every`-th a special value in turn (NaN, ±∞, ±0, ±1e-30, ±7),
    /// the rest a ramp of `step` per index around 0.
    pub(crate) fn with_specials(len: usize, every: usize, step: f32) -> Vec<f32> {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            7.0,
            -7.0,
        ];
        (0..len)
            .map(|i| match i % every {
                0 => specials[(i / every) % specials.len()],
                _ => (i as f32 - len as f32 / 2.0) * step,
            })
            .collect()
    }

    fn grid() -> Vec<f32> {
        (-200_000..=200_000).map(|i| i as f32 * 5e-5).collect()
    }

    #[test]
    fn exp_is_within_two_ulp() {
        for x in grid().into_iter().map(|v| v * 8.0) {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            assert!(
                (got - want).abs() <= 2.5e-7 * want.abs(),
                "exp({x}) = {got}, want {want}"
            );
        }
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn gelu_blocks_match_the_scalar_gelu_bit_for_bit() {
        let x = with_specials(1000, 9, 0.023);
        for len in [0, 1, 31, 32, 33, 1000] {
            let mut y = x[..len].to_vec();
            crate::simd::unary_in_place(act_gelu(), &mut y);
            let mut z = vec![0f32; len];
            crate::simd::unary(act_gelu(), &x[..len], &mut z);
            for (i, &v) in x[..len].iter().enumerate() {
                let want = gelu(v);
                for got in [y[i], z[i]] {
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "gelu({v}) = {got}, scalar {want}"
                    );
                }
            }
        }
    }

    fn act_gelu() -> Activation {
        Activation::Gelu {
            tanh_approximation: false,
        }
    }

    #[test]
    fn tanh_erf_sigmoid_gelu_are_close() {
        for x in grid() {
            let xd = f64::from(x);
            assert!((f64::from(tanh(x)) - xd.tanh()).abs() <= 4e-7 * xd.tanh().abs() + 1e-9);
            let s = 1.0 / (1.0 + (-xd).exp());
            assert!(
                (f64::from(sigmoid(x)) - s).abs() <= 3e-7 * s + 1e-12,
                "sigmoid {x}"
            );
            let si = xd * s;
            assert!(
                (f64::from(silu(x)) - si).abs() <= 4e-7 * si.abs() + 1e-30,
                "silu {x}"
            );
        }
        // erf and gelu: compare with a high-accuracy series / continued fraction in f64.
        for x in grid() {
            let xd = f64::from(x);
            let e = erf64(xd);
            assert!((f64::from(erf(x)) - e).abs() <= 5e-7, "erf {x}");
            let g = 0.5 * xd * erfc64(-xd / std::f64::consts::SQRT_2);
            assert!(
                (f64::from(gelu(x)) - g).abs() <= 1e-6 + 1e-5 * g.abs(),
                "gelu {x}: {} vs {g}",
                gelu(x)
            );
            // Relative accuracy too, on both sides of where the erf form takes over.
            assert!(
                (f64::from(gelu(x)) - g).abs() <= 1e-4 * g.abs() + 1e-37,
                "gelu {x}: {} vs {g} (relative)",
                gelu(x)
            );
        }
    }

    fn erf64(x: f64) -> f64 {
        1.0 - erfc64(x)
    }

    /// erfc in f64 (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7 is not enough,
    /// so use the series for small |x| and a continued fraction for large).
    fn erfc64(x: f64) -> f64 {
        if x < 0.0 {
            return 2.0 - erfc64(-x);
        }
        if x < 2.5 {
            // erf series: 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1)).
            let mut sum = 0.0;
            let mut term = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -x * x / n;
            }
            1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum
        } else {
            // Continued fraction (Lentz) for erfc.
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (x + f);
            }
            (-x * x).exp() / std::f64::consts::PI.sqrt() / (x + f)
        }
    }
}

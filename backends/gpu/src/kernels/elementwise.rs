//! Elementwise kernels: activations (also the epilogue of products and convolutions) and
//! binary functions with numpy broadcasting.

use super::{linear_shader, linear_step, lit, p32s, product, Bind, Step};
use backplane_core::ops::{BinaryOp, MathOp, UnaryOp};

/// A function applied to each value: a layer of its own, or fused after a product.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    /// x.
    None,
    /// A unary op.
    Unary(UnaryOp),
    /// A math op GpuAcc implements (see [`Act::from_math`]).
    Math(MathOp),
    /// x·sigmoid(x): the exporters' SiLU subgraph fused after a product.
    Silu,
}

impl Act {
    /// The math ops GpuAcc runs (activations of real networks); `None` for the others.
    pub fn from_math(m: MathOp) -> Option<Act> {
        match m {
            MathOp::Softplus
            | MathOp::Softsign
            | MathOp::Mish
            | MathOp::HardSigmoid { .. }
            | MathOp::HardSwish
            | MathOp::Elu { .. }
            | MathOp::Selu { .. }
            | MathOp::Reciprocal
            | MathOp::Floor
            | MathOp::Ceil
            | MathOp::Sin
            | MathOp::Cos => Some(Act::Math(m)),
            _ => None,
        }
    }

    /// The WGSL function `act(x)` computing it.
    pub fn wgsl(&self) -> String {
        let expr = match self {
            Act::None => "x".to_string(),
            // x / (1 + e^-x) is x·sigmoid(x) with one division; for x far below 0 the
            // denominator is infinite and the result -0, as the CPU's product gives.
            Act::Silu => "x / (1.0 + exp(-x))".into(),
            Act::Unary(u) => match u {
                // Decided on the bits, so that NaN passes through as on the CPU: a
                // driver may compile `select(x, 0.0, x < 0.0)` to `max(x, 0.0)`, which
                // drops NaN (NVIDIA's does). Zero when the sign is set and the magnitude is
                // neither 0 (keeping -0.0) nor above infinity's (a NaN).
                UnaryOp::Relu => "select(x, 0.0, bitcast<i32>(x) < 0 && \
                     (bitcast<u32>(x) & 0x7fffffffu) - 1u < 0x7f800000u)"
                    .into(),
                UnaryOp::LeakyRelu { alpha } => format!("select({} * x, x, x >= 0.0)", lit(*alpha)),
                UnaryOp::Clip { min, max } => {
                    let (lo, hi) = (lit(*min), lit(*max));
                    format!("select(select(x, {lo}, x < {lo}), {hi}, x > {hi})")
                }
                UnaryOp::Sigmoid => "1.0 / (1.0 + exp(-x))".into(),
                // The library tanh loses relative precision near 0 (lavapipe computes it
                // from exponentials): the series there.
                UnaryOp::Tanh => {
                    "select(tanh(clamp(x, -20.0, 20.0)), x * (1.0 - x * x / 3.0), abs(x) < 0.01)"
                        .into()
                }
                UnaryOp::Erf => "erf(x)".into(),
                UnaryOp::Gelu {
                    tanh_approximation: false,
                } => "0.5 * x * (1.0 + erf(x * 0.70710678118654752))".into(),
                UnaryOp::Gelu {
                    tanh_approximation: true,
                } => "0.5 * x * (1.0 + tanh(clamp(0.79788456080286536 * (x + 0.044715 * x * x * x), -20.0, 20.0)))".into(),
                UnaryOp::Sqrt => "sqrt(x)".into(),
                UnaryOp::Exp => "exp(x)".into(),
                UnaryOp::Log => "log(x)".into(),
                UnaryOp::Neg => "-x".into(),
                UnaryOp::Abs => "abs(x)".into(),
            },
            Act::Math(m) => match m {
                MathOp::Softplus => softplus(),
                MathOp::Softsign => "x / (1.0 + abs(x))".into(),
                MathOp::Mish => {
                    // tanh of a small softplus by its series: the library tanh loses the
                    // relative precision there (lavapipe computes it from exponentials).
                    let s = softplus();
                    format!("x * select(tanh(min({s}, 20.0)), {s} * (1.0 - {s} * {s} / 3.0), {s} < 0.01)")
                }
                MathOp::HardSigmoid { alpha, beta } => {
                    format!("clamp({} * x + {}, 0.0, 1.0)", lit(*alpha), lit(*beta))
                }
                MathOp::HardSwish => "x * clamp(x / 6.0 + 0.5, 0.0, 1.0)".into(),
                MathOp::Elu { alpha } => format!("select({} * (exp(x) - 1.0), x, x > 0.0)", lit(*alpha)),
                MathOp::Selu { alpha, gamma } => format!(
                    "{} * select({} * (exp(x) - 1.0), x, x > 0.0)",
                    lit(*gamma),
                    lit(*alpha)
                ),
                MathOp::Reciprocal => "div_rn(1.0, x)".into(),
                MathOp::Floor => "floor(x)".into(),
                MathOp::Ceil => "ceil(x)".into(),
                MathOp::Sin => "sin(x)".into(),
                MathOp::Cos => "cos(x)".into(),
                _ => "x".into(),
            },
        };
        // Reciprocal divides exactly, as Div does (the hardware's `/` may be off by an ULP).
        let div = if matches!(self, Act::Math(MathOp::Reciprocal)) {
            DIV
        } else {
            ""
        };
        format!("{ERF}\n{div}\nfn act(x: f32) -> f32 {{ return {expr}; }}\n")
    }
}

/// erf(x) by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
const ERF: &str = "fn erf(v: f32) -> f32 {
    let s = sign(v);
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
    return s * y;
}";

/// The activation over every element of input 0.
pub fn unary(act: Act, n: usize) -> Result<Vec<Step>, String> {
    let source = linear_shader(1, &act.wgsl(), "    y[i] = act(x0[i]);");
    Ok(vec![linear_step(
        source,
        vec![],
        vec![Bind::Input(0), Bind::Output(0)],
        n,
    )?])
}

/// a ^ b as CpuRef computes it: negative bases with integral exponents included.
const POW: &str = "fn powf(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    if (a >= 0.0) { return pow(a, b); }
    if (b == floor(b)) {
        let m = pow(-a, b);
        if (fract(b * 0.5) != 0.0) { return -m; }
        return m;
    }
    return bitcast<f32>(0x7fc00000u);
}";

/// a / b rounded to nearest, ties to even, as the CPU rounds it, exact by construction. WGSL
/// lets `/` be off by 2.5 ULP (NVIDIA's is), which moves quotients across rounding
/// boundaries (Round(x / scale) in a quantizer: DynamicQuantizeLinear's scale 5/255 came out
/// one ULP low on an H200). A float correction step (Dekker's residual) is not exact either:
/// a driver may contract its products into fused multiply-adds, which breaks the splitting.
/// So for normal operands with a normal quotient the significand is divided in integers: 25
/// quotient bits by restoring long division (24 kept, one rounding bit, the remainder as
/// sticky bit), rounded half to even; zeros, infinities, NaN, subnormals and quotients outside
/// the normal range keep the hardware's `/`.
const DIV: &str = "fn div_rn(a: f32, b: f32) -> f32 {
    let q = a / b;
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let ea = (ua >> 23u) & 0xffu;
    let eb = (ub >> 23u) & 0xffu;
    if (ea == 0u || ea == 255u || eb == 0u || eb == 255u) { return q; }
    var ma = (ua & 0x7fffffu) | 0x800000u;
    let mb = (ub & 0x7fffffu) | 0x800000u;
    var e = i32(ea) - i32(eb) + 127;
    if (ma < mb) {
        ma = ma << 1u;
        e = e - 1;
    }
    var r = ma;
    var m = 0u;
    for (var k = 0u; k < 25u; k = k + 1u) {
        m = m << 1u;
        if (r >= mb) {
            r = r - mb;
            m = m | 1u;
        }
        r = r << 1u;
    }
    let half = m & 1u;
    m = m >> 1u;
    if (half == 1u && (r != 0u || (m & 1u) == 1u)) { m = m + 1u; }
    if (m == 0x1000000u) {
        m = m >> 1u;
        e = e + 1;
    }
    if (e <= 0 || e >= 255) { return q; }
    return bitcast<f32>(((ua ^ ub) & 0x80000000u) | (u32(e) << 23u) | (m & 0x7fffffu));
}";

/// A broadcasting binary op's WGSL expression of `a` and `b`.
fn binary_expr(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "a + b",
        BinaryOp::Sub => "a - b",
        BinaryOp::Mul => "a * b",
        BinaryOp::Div => "div_rn(a, b)",
        BinaryOp::Pow => "powf(a, b)",
        BinaryOp::Max => "max(a, b)",
        BinaryOp::Min => "min(a, b)",
    }
}

/// Strides of an input of `dims` read at the coordinates of an output of `out` (aligned to
/// the right; 0 along broadcast axes).
pub fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<usize> {
    let lead = out.len().saturating_sub(dims.len());
    let own = super::strides(dims);
    (0..out.len())
        .map(|k| {
            if k < lead {
                0
            } else {
                let d = k - lead;
                if dims[d] == 1 {
                    0
                } else {
                    own[d]
                }
            }
        })
        .collect()
}

/// `out = op(a, b)` with broadcasting, then `act`.
pub fn binary(
    op: BinaryOp,
    act: Act,
    a: &[usize],
    b: &[usize],
    out: &[usize],
) -> Result<Vec<Step>, String> {
    let body = format!(
        "    let r = p[1];
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 0u; d < r; d = d + 1u) {{
        let k = r - 1u - d;
        let dim = p[2u + k];
        let c = rem % dim;
        rem = rem / dim;
        ia = ia + c * p[2u + r + k];
        ib = ib + c * p[2u + 2u * r + k];
    }}
    let a = x0[ia];
    let b = x1[ib];
    y[i] = act({});",
        binary_expr(op)
    );
    let act_src = act.wgsl();
    // The activation brings `div_rn` itself when it divides (Reciprocal).
    let div = if act_src.contains("fn div_rn") {
        ""
    } else {
        DIV
    };
    let helpers = format!("{POW}\n{div}\n{act_src}");
    let source = linear_shader(2, &helpers, &body);
    let mut params = vec![super::p32(out.len(), "the rank")?];
    params.extend(p32s(out, "a dimension")?);
    params.extend(p32s(&broadcast_strides(a, out), "a stride")?);
    params.extend(p32s(&broadcast_strides(b, out), "a stride")?);
    Ok(vec![linear_step(
        source,
        params,
        vec![Bind::Input(0), Bind::Input(1), Bind::Output(0)],
        product(out),
    )?])
}

/// `log(1 + exp(x))` in WGSL without losing precision where `exp(x)` is tiny (it is then
/// `exp(x)` to the first terms of the series of `log(1 + y)`) or huge (`x` plus the rest).
fn softplus() -> String {
    let y = "exp(-abs(x))";
    format!(
        "(max(x, 0.0) + select(log(1.0 + {y}), {y} * (1.0 - {y} * (0.5 - {y} / 3.0)), {y} < 0.001))"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_strides_zero_the_broadcast_axes() {
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[2, 3, 4], &[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[], &[5]), vec![0]);
    }
}

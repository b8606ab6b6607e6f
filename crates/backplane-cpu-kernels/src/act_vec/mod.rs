//! The transcendental activations that kernels apply in registers (sigmoid, SiLU, and the
//! hard sigmoid and swish), as vector code per tier (`avx512`, `avx2`): a depthwise
//! row computed with its SiLU in registers is stored once, where a separate pass over the
//! stored output read and wrote it again (from L2 or memory on a large plane).
//!
//! The vector code follows CpuAcc's scalar approximations (`math::exp`, `math::sigmoid`,
//! `math::silu`, `math::hard_swish`) step by step, with the constants below that both share,
//! so a kernel's in-register value is bit-equal to the compiled pass's.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// log2 e.
pub const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2's high part (exact in f32 times any n of the reduction's range).
pub const LN2_HI: f32 = 0.693_145_75;
/// ln 2 − [`LN2_HI`].
pub const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5 · 2^23: adding and subtracting it rounds to the nearest integer.
pub const ROUNDER: f32 = 12_582_912.0;
/// exp's argument below which it is 0 (and at which it is clamped).
pub const EXP_MIN: f32 = -87.33;
/// exp's argument above which it is +∞ (and at which it is clamped).
pub const EXP_MAX: f32 = 88.72;
/// SiLU's e^r on |r| <= ln2/2, from r^5 down to r^0: a polynomial fitted to e^r's relative
/// error (at most 1.6e-7, about one ulp; the Taylor series needs two terms more for that),
/// cheaper than [`EXP_TAYLOR`] where the result is divided by 1 + e^r anyway.
pub const SILU_EXP: [f32; 6] = [
    0.008_312_506,
    0.041_890_096,
    0.166_671_14,
    0.499_992_3,
    1.0,
    1.0,
];
/// e^r's Taylor coefficients, from r^7 down to r^0 (|r| <= ln2/2: truncation error
/// < 1e-8).
pub const EXP_TAYLOR: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use crate::isa::Isa;
    use std::arch::x86_64::*;

    /// Inputs: a grid over [-100, 100) and the special values.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (-20_000..20_000).map(|i| i as f32 * 5e-3).collect();
        v.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            87.0,
            -87.0,
            88.8,
            -88.8,
            89.0,
            -89.0,
            1e6,
            -1e6,
        ]);
        while !v.len().is_multiple_of(16) {
            v.push(0.25);
        }
        v
    }

    /// `f` on 16 lanes at a time by each tier the CPU has: (tier, values) pairs.
    fn each_tier(
        x: &[f32],
        f512: fn(__m512) -> __m512,
        f256: fn(__m256) -> __m256,
    ) -> Vec<(Isa, Vec<f32>)> {
        let mut out = Vec::new();
        if Isa::Avx512.available() {
            let mut y = vec![0f32; x.len()];
            for (d, s) in y.chunks_exact_mut(16).zip(x.chunks_exact(16)) {
                // SAFETY: AVX-512F is present (checked); each chunk holds 16 floats.
                unsafe { _mm512_storeu_ps(d.as_mut_ptr(), f512(_mm512_loadu_ps(s.as_ptr()))) };
            }
            out.push((Isa::Avx512, y));
        }
        if Isa::Avx2.available() {
            let mut y = vec![0f32; x.len()];
            for (d, s) in y.chunks_exact_mut(8).zip(x.chunks_exact(8)) {
                // SAFETY: AVX2 and FMA are present (checked); each chunk holds 8 floats.
                unsafe { _mm256_storeu_ps(d.as_mut_ptr(), f256(_mm256_loadu_ps(s.as_ptr()))) };
            }
            out.push((Isa::Avx2, y));
        }
        out
    }

    /// Each tier's values within `4e-7` relative plus `abs` absolute of `want` (NaN for NaN).
    fn check(name: &str, x: &[f32], got: &[(Isa, Vec<f32>)], abs: f64, want: impl Fn(f64) -> f64) {
        for (isa, y) in got {
            for (&v, &g) in x.iter().zip(y) {
                let w = want(f64::from(v));
                let ok = match w.is_nan() {
                    true => g.is_nan(),
                    false => g == w as f32 || (f64::from(g) - w).abs() <= 4e-7 * w.abs() + abs,
                };
                assert!(ok, "{isa:?} {name}({v}) = {g}, want {w}");
            }
        }
    }

    /// The tiers' sigmoid, SiLU, hard swish and hard sigmoid against their f64 definitions,
    /// the special values (NaN kept, saturation at ±∞ and past exp's range) included, and
    /// the two tiers bit-equal to each other.
    #[test]
    fn vector_activations_match_their_definitions() {
        let x = inputs();
        let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
        let unit = |v: f64| v.clamp(0.0, 1.0);
        // SAFETY (each closure): called by `each_tier` only on a tier the CPU has.
        let sig = each_tier(
            &x,
            |v| unsafe { super::avx512::sigmoid(v) },
            |v| unsafe { super::avx2::sigmoid(v) },
        );
        check("sigmoid", &x, &sig, 1e-30, sigmoid);
        // SiLU at -∞ is -∞ (x·e over 1 + e, e clamped at e^-87.33), as in `math::silu`.
        let silu = each_tier(
            &x,
            |v| unsafe { super::avx512::silu(v) },
            |v| unsafe { super::avx2::silu(v) },
        );
        check("silu", &x, &silu, 1e-30, |v| match v == f64::NEG_INFINITY {
            true => v,
            false => v * sigmoid(v),
        });
        let swish = each_tier(
            &x,
            |v| unsafe { super::avx512::hard_swish(v) },
            |v| unsafe { super::avx2::hard_swish(v) },
        );
        // Near x = -3, x/6 + 1/2 cancels: an absolute bound there.
        check("hard_swish", &x, &swish, 1e-6, |v| {
            match v.is_infinite() && v < 0.0 {
                true => f64::NAN,
                false => v * unit(v / 6.0 + 0.5),
            }
        });
        let hard = each_tier(
            &x,
            |v| unsafe { super::avx512::hard_sigmoid(_mm512_set1_ps(0.2), _mm512_set1_ps(0.5), v) },
            |v| unsafe { super::avx2::hard_sigmoid(_mm256_set1_ps(0.2), _mm256_set1_ps(0.5), v) },
        );
        check("hard_sigmoid", &x, &hard, 1e-7, |v| unit(0.2 * v + 0.5));
        for tiers in [&sig, &silu, &swish, &hard] {
            if let [(_, a), (_, b)] = &tiers[..] {
                for (p, q) in a.iter().zip(b) {
                    assert!(p.to_bits() == q.to_bits() || p.is_nan() && q.is_nan());
                }
            }
        }
    }
}

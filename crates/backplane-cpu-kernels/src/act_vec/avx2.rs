//! AVX2 sigmoid, SiLU and hard swish on 8 lanes (see [`super`]).

use super::{EXP_MAX, EXP_MIN, EXP_TAYLOR, LN2_HI, LN2_LO, LOG2E, ROUNDER, SILU_EXP};
use std::arch::x86_64::*;

/// e^x lane by lane: `math::exp`'s steps (clamp, reduce by n·ln 2, Taylor polynomial,
/// scale by 2^n, saturate), NaN kept.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp(x: __m256) -> __m256 {
    // max(lo, x) and min(hi, ·) return x itself when it is NaN, as `f32::clamp` does.
    let xc = _mm256_min_ps(
        _mm256_set1_ps(EXP_MAX),
        _mm256_max_ps(_mm256_set1_ps(EXP_MIN), x),
    );
    let rounder = _mm256_set1_ps(ROUNDER);
    let t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(LOG2E)), rounder);
    let n = _mm256_sub_ps(t, rounder);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), xc);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_TAYLOR[0]);
    for &c in &EXP_TAYLOR[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let bits = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(ROUNDER.to_bits() as i32 - 127),
    );
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(bits));
    let y = _mm256_mul_ps(p, scale);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN));
    let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_MAX));
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), over)
}

/// 1 / (1 + e^-x) lane by lane.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn sigmoid(x: __m256) -> __m256 {
    let one = _mm256_set1_ps(1.0);
    let e = exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_div_ps(one, _mm256_add_ps(one, e))
}

/// x · sigmoid(x) lane by lane, as `math::silu`: (x < 0 ? x·e : x) / (1 + e) with
/// e = e^-|x| by [`SILU_EXP`], which needs no saturation (e lies in (0, 1]).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn silu(x: __m256) -> __m256 {
    let one = _mm256_set1_ps(1.0);
    let neg_abs = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_castps_si256(x),
        _mm256_set1_epi32(i32::MIN),
    ));
    // max(lo, m) returns m itself when it is NaN.
    let m = _mm256_max_ps(_mm256_set1_ps(EXP_MIN), neg_abs);
    let rounder = _mm256_set1_ps(ROUNDER);
    let t = _mm256_add_ps(_mm256_mul_ps(m, _mm256_set1_ps(LOG2E)), rounder);
    let n = _mm256_sub_ps(t, rounder);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), m);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    let mut p = _mm256_set1_ps(SILU_EXP[0]);
    for &c in &SILU_EXP[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let bits = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(ROUNDER.to_bits() as i32 - 127),
    );
    let e = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(bits)));
    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
    let num = _mm256_blendv_ps(x, _mm256_mul_ps(x, e), neg);
    _mm256_div_ps(num, _mm256_add_ps(one, e))
}

/// min(1, max(0, v)) lane by lane, NaN kept.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn unit_clamp(v: __m256) -> __m256 {
    _mm256_min_ps(_mm256_set1_ps(1.0), _mm256_max_ps(_mm256_setzero_ps(), v))
}

/// max(0, min(1, alpha·x + beta)) lane by lane.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hard_sigmoid(alpha: __m256, beta: __m256, x: __m256) -> __m256 {
    unit_clamp(_mm256_fmadd_ps(alpha, x, beta))
}

/// x · max(0, min(1, x/6 + 1/2)) lane by lane.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hard_swish(x: __m256) -> __m256 {
    let g = _mm256_add_ps(_mm256_div_ps(x, _mm256_set1_ps(6.0)), _mm256_set1_ps(0.5));
    _mm256_mul_ps(x, unit_clamp(g))
}

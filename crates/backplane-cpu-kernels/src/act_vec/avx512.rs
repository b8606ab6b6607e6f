//! AVX-512 sigmoid, SiLU and hard swish on 16 lanes (see [`super`]).

use super::{EXP_MAX, EXP_MIN, EXP_TAYLOR, LN2_HI, LN2_LO, LOG2E, ROUNDER, SILU_EXP};
use std::arch::x86_64::*;

/// e^x lane by lane: `math::exp`'s steps (clamp, reduce by n·ln 2, Taylor polynomial,
/// scale by 2^n, saturate), NaN kept.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn exp(x: __m512) -> __m512 {
    // max(lo, x) and min(hi, ·) return x itself when it is NaN, as `f32::clamp` does.
    let xc = _mm512_min_ps(
        _mm512_set1_ps(EXP_MAX),
        _mm512_max_ps(_mm512_set1_ps(EXP_MIN), x),
    );
    let rounder = _mm512_set1_ps(ROUNDER);
    let t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(LOG2E)), rounder);
    let n = _mm512_sub_ps(t, rounder);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), xc);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_TAYLOR[0]);
    for &c in &EXP_TAYLOR[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let bits = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(ROUNDER.to_bits() as i32 - 127),
    );
    let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(bits));
    let y = _mm512_mul_ps(p, scale);
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_MIN));
    let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(EXP_MAX));
    let y = _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
    _mm512_mask_mov_ps(y, over, _mm512_set1_ps(f32::INFINITY))
}

/// 1 / (1 + e^-x) lane by lane.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn sigmoid(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let e = exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_div_ps(one, _mm512_add_ps(one, e))
}

/// x · sigmoid(x) lane by lane, as `math::silu`: (x < 0 ? x·e : x) / (1 + e) with
/// e = e^-|x| by [`SILU_EXP`], which needs no saturation (e lies in (0, 1]).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn silu(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let neg_abs = _mm512_castsi512_ps(_mm512_or_epi32(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(i32::MIN),
    ));
    // max(lo, m) returns m itself when it is NaN.
    let m = _mm512_max_ps(_mm512_set1_ps(EXP_MIN), neg_abs);
    let rounder = _mm512_set1_ps(ROUNDER);
    let t = _mm512_add_ps(_mm512_mul_ps(m, _mm512_set1_ps(LOG2E)), rounder);
    let n = _mm512_sub_ps(t, rounder);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), m);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    let mut p = _mm512_set1_ps(SILU_EXP[0]);
    for &c in &SILU_EXP[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let bits = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(ROUNDER.to_bits() as i32 - 127),
    );
    let e = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(bits)));
    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    let num = _mm512_mask_mul_ps(x, neg, x, e);
    _mm512_div_ps(num, _mm512_add_ps(one, e))
}

/// min(1, max(0, v)) lane by lane, NaN kept.
#[inline]
#[target_feature(enable = "avx512f")]
fn unit_clamp(v: __m512) -> __m512 {
    _mm512_min_ps(_mm512_set1_ps(1.0), _mm512_max_ps(_mm512_setzero_ps(), v))
}

/// max(0, min(1, alpha·x + beta)) lane by lane.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn hard_sigmoid(alpha: __m512, beta: __m512, x: __m512) -> __m512 {
    unit_clamp(_mm512_fmadd_ps(alpha, x, beta))
}

/// x · max(0, min(1, x/6 + 1/2)) lane by lane.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn hard_swish(x: __m512) -> __m512 {
    let g = _mm512_add_ps(_mm512_div_ps(x, _mm512_set1_ps(6.0)), _mm512_set1_ps(0.5));
    _mm512_mul_ps(x, unit_clamp(g))
}

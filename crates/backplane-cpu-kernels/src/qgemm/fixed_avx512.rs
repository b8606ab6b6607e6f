//! The fixed-point rule's requantization (LiteRT's builtin kernels,
//! [`super::requant_fixed_one`]) on 512-bit registers, in 64-bit lanes: sixteen int32 sums
//! with their lanes' Q31 multipliers and shifts ([`super::requant::FixedLanes`]) to the
//! output values. The AVX-512 GEMM tiles and depthwise body apply it in their stores.

use super::channels::RequantRange;
use std::arch::x86_64::*;

/// The broadcast constants of [`fixed16`]: the output zero point, the range with the zero
/// point added, i32's bounds, 2³⁰ and 1, in 64-bit lanes.
pub(super) struct FixedConsts {
    zero64: __m512i,
    lo64: __m512i,
    hi64: __m512i,
    i32_min: __m512i,
    i32_max: __m512i,
    half31: __m512i,
    one64: __m512i,
}

impl FixedConsts {
    #[target_feature(enable = "avx512f")]
    pub(super) fn new(r: RequantRange) -> FixedConsts {
        let zero = r.zero as i32;
        FixedConsts {
            zero64: _mm512_set1_epi64(i64::from(zero)),
            lo64: _mm512_set1_epi64(i64::from(r.lo as i32 + zero)),
            hi64: _mm512_set1_epi64(i64::from(r.hi as i32 + zero)),
            i32_min: _mm512_set1_epi64(i64::from(i32::MIN)),
            i32_max: _mm512_set1_epi64(i64::from(i32::MAX)),
            half31: _mm512_set1_epi64(1 << 30),
            one64: _mm512_set1_epi64(1),
        }
    }
}

/// Eight sums (bias included) requantized by the fixed-point rule, in 64-bit lanes: the
/// operations of [`super::requant_fixed_one`] (shift left saturating to i32, the Q31
/// product rounded half up, the rounding right shift, the zero point, the range) on each
/// lane's multiplier `q` and shifts `left`, `right`; each lane's byte value as an i32.
#[target_feature(enable = "avx512f")]
#[inline]
fn fixed8(s: __m256i, q: __m256i, left: __m256i, right: __m256i, k: &FixedConsts) -> __m256i {
    let x = _mm512_sllv_epi64(_mm512_cvtepi32_epi64(s), _mm512_cvtepi32_epi64(left));
    let x = _mm512_max_epi64(_mm512_min_epi64(x, k.i32_max), k.i32_min);
    // `vpmuldq` multiplies each lane's low 32 bits as signed: `x` fits in them now.
    let p = _mm512_mul_epi32(x, _mm512_cvtepi32_epi64(q));
    let high = _mm512_srai_epi64::<31>(_mm512_add_epi64(p, k.half31));
    let r = _mm512_cvtepi32_epi64(right);
    let round = _mm512_srli_epi64::<1>(_mm512_sllv_epi64(k.one64, r));
    let v = _mm512_add_epi64(
        _mm512_srav_epi64(_mm512_add_epi64(high, round), r),
        k.zero64,
    );
    _mm512_cvtepi64_epi32(_mm512_max_epi64(_mm512_min_epi64(v, k.hi64), k.lo64))
}

/// Sixteen sums (bias included) requantized by the fixed-point rule ([`fixed8`] on each
/// half): each lane's byte value as an i32, as the f32 rule's
/// requantizations leave them.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn fixed16(
    s: __m512i,
    q: __m512i,
    left: __m512i,
    right: __m512i,
    k: &FixedConsts,
) -> __m512i {
    let lo = fixed8(
        _mm512_castsi512_si256(s),
        _mm512_castsi512_si256(q),
        _mm512_castsi512_si256(left),
        _mm512_castsi512_si256(right),
        k,
    );
    let hi = fixed8(
        _mm512_extracti64x4_epi64::<1>(s),
        _mm512_extracti64x4_epi64::<1>(q),
        _mm512_extracti64x4_epi64::<1>(left),
        _mm512_extracti64x4_epi64::<1>(right),
        k,
    );
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

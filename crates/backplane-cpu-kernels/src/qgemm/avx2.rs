//! The AVX2 micro-tile of the integer GEMM: up to four rows of A against one 16-column
//! panel, `vpmaddwd` on a broadcast pair of A values and 32-bit sums; stored as int32 sums
//! ([`tile`]) or requantized to bytes in registers ([`tile_requant`]).

use super::fused::ColumnRequant;
use super::{MR_MAX, QMR, QNR};
use std::arch::x86_64::*;

/// The sums of `R` rows of A against one panel, two vectors (16 columns) per row.
/// Safety: AVX2 present; `a` readable for `(R-1)·lda + kp` values, `kp` even; `panel`
/// readable for `kp · QNR`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn sums<const R: usize>(
    a: *const i16,
    lda: usize,
    kp: usize,
    panel: *const i16,
) -> [__m256i; 2 * QMR] {
    let mut acc = [_mm256_setzero_si256(); 2 * QMR];
    for pair in 0..kp / 2 {
        // SAFETY: pair < kp/2, so the two vectors at pair·2·QNR .. +32 lie in the panel.
        let (b0, b1) = unsafe {
            let p = panel.add(pair * 2 * QNR);
            (
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(QNR).cast()),
            )
        };
        for rr in 0..R {
            // SAFETY: row rr < R reads values 2·pair, 2·pair + 1 < kp of its row.
            let v = unsafe { a.add(rr * lda + 2 * pair).cast::<i32>().read_unaligned() };
            let x = _mm256_set1_epi32(v);
            acc[2 * rr] = _mm256_add_epi32(acc[2 * rr], _mm256_madd_epi16(x, b0));
            acc[2 * rr + 1] = _mm256_add_epi32(acc[2 * rr + 1], _mm256_madd_epi16(x, b1));
        }
    }
    acc
}

/// [`sums`] for a row count known at run time (1..=4; more are cut to 4).
/// Safety: as [`sums`] for `r` rows.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn sums_of(
    a: *const i16,
    lda: usize,
    r: usize,
    kp: usize,
    panel: *const i16,
) -> [__m256i; 2 * QMR] {
    // SAFETY: the caller's contract, for the row count each arm reads.
    unsafe {
        match r {
            0 => [_mm256_setzero_si256(); 2 * QMR],
            1 => sums::<1>(a, lda, kp, panel),
            2 => sums::<2>(a, lda, kp, panel),
            3 => sums::<3>(a, lda, kp, panel),
            _ => sums::<4>(a, lda, kp, panel),
        }
    }
}

/// Sums of `r` (1..=4) rows of A against one panel into `tile`. Safety: AVX2 present;
/// `a` readable for `(r-1)·lda + kp` values, `kp` even; `panel` readable for `kp · QNR`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn tile(
    a: *const i16,
    lda: usize,
    r: usize,
    kp: usize,
    panel: *const i16,
    tile: &mut [[i32; QNR]; MR_MAX],
) {
    let r = r.min(QMR);
    // SAFETY: forwarded contract.
    let acc = unsafe { sums_of(a, lda, r, kp, panel) };
    for rr in 0..r {
        let out = tile[rr].as_mut_ptr();
        // SAFETY: each row of `tile` holds QNR = 16 int32, two vectors.
        unsafe {
            _mm256_storeu_si256(out.cast(), acc[2 * rr]);
            _mm256_storeu_si256(out.add(8).cast(), acc[2 * rr + 1]);
        }
    }
}

/// The sums of `r` (1..=4) rows of A against panel `p`, requantized in registers with the
/// columns' bias and scale into `bytes` (16 per row): the same f32 operations, in the same
/// order, as [`super::requantize_channels`]. Safety: as [`tile`]; `p` a panel of `rq`.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_requant(
    a: *const i16,
    lda: usize,
    r: usize,
    kp: usize,
    panel: *const i16,
    rq: &ColumnRequant,
    p: usize,
    bytes: &mut [[u8; QNR]; MR_MAX],
) {
    // One instantiation per row count, each with its sums inlined (the accumulators stay in
    // registers instead of going through a returned array).
    // SAFETY: forwarded contract, for the row count each arm reads.
    unsafe {
        match r {
            0 => {}
            1 => tile_requant_rows::<1>(a, lda, kp, panel, rq, p, bytes),
            2 => tile_requant_rows::<2>(a, lda, kp, panel, rq, p, bytes),
            3 => tile_requant_rows::<3>(a, lda, kp, panel, rq, p, bytes),
            _ => tile_requant_rows::<4>(a, lda, kp, panel, rq, p, bytes),
        }
    }
}

/// [`tile_requant`] for `R` rows. Safety: as [`tile_requant`] for `R` rows.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_requant_rows<const R: usize>(
    a: *const i16,
    lda: usize,
    kp: usize,
    panel: *const i16,
    rq: &ColumnRequant,
    p: usize,
    bytes: &mut [[u8; QNR]; MR_MAX],
) {
    let r = R.min(QMR);
    // SAFETY: forwarded contract.
    let acc = unsafe { sums::<R>(a, lda, kp, panel) };
    let (bias, scale) = rq.panel(p);
    // SAFETY: `panel` returns QNR values of each, two vectors.
    let (bias0, bias1, scale0, scale1) = unsafe {
        (
            _mm256_loadu_si256(bias.as_ptr().cast()),
            _mm256_loadu_si256(bias.as_ptr().add(8).cast()),
            _mm256_loadu_ps(scale.as_ptr()),
            _mm256_loadu_ps(scale.as_ptr().add(8)),
        )
    };
    let range = rq.range();
    let lo = _mm256_set1_ps(range.lo);
    let hi = _mm256_set1_ps(range.hi);
    let magic = _mm256_set1_ps(super::requant::MAGIC);
    let magic_bits = _mm256_set1_epi32(super::requant::MAGIC.to_bits() as i32);
    let zero = _mm256_set1_epi32(range.zero as i32);
    let byte = _mm256_set1_epi32(0xff);
    let k = Consts {
        lo,
        hi,
        magic,
        magic_bits,
        zero,
        byte,
    };
    for rr in 0..r {
        let v0 = requant8(acc[2 * rr], bias0, scale0, &k);
        let v1 = requant8(acc[2 * rr + 1], bias1, scale1, &k);
        // [v0 0..3, v1 0..3 | v0 4..7, v1 4..7] as i16, then in column order.
        let w = _mm256_permute4x64_epi64(_mm256_packus_epi32(v0, v1), 0b11_01_10_00);
        // Bytes: [cols 0..7, cols 0..7 | cols 8..15, cols 8..15]; keep one of each.
        let b = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0b00_00_10_00);
        // SAFETY: each row of `bytes` holds 16 bytes, one 128-bit vector.
        unsafe { _mm_storeu_si128(bytes[rr].as_mut_ptr().cast(), _mm256_castsi256_si128(b)) };
    }
}

/// The broadcast constants of a requantization.
struct Consts {
    lo: __m256,
    hi: __m256,
    magic: __m256,
    magic_bits: __m256i,
    zero: __m256i,
    byte: __m256i,
}

/// Eight sums requantized: `(clamp(round_half_even((s + b) · sc), lo, hi) + zero) & 0xff`.
#[target_feature(enable = "avx2")]
#[inline]
fn requant8(s: __m256i, b: __m256i, sc: __m256, k: &Consts) -> __m256i {
    let v = _mm256_cvtepi32_ps(_mm256_add_epi32(s, b));
    let v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, sc), k.lo), k.hi);
    let i = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(v, k.magic)), k.magic_bits);
    _mm256_and_si256(_mm256_add_epi32(i, k.zero), k.byte)
}

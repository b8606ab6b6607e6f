//! The channels-last transposes with AVX-512: 16×16 blocks in registers.

use super::BLOCK_LANES;
use std::arch::x86_64::*;

/// Transpose a 16×16 block held as 16 row vectors: in 32-bit pairs, then 64-bit pairs
/// within each 128-bit lane, then 128-bit lanes across registers (two steps).
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let mut t = [_mm512_setzero_ps(); 16];
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    // u[4g + q] holds, in 128-bit lane j, column 4j + q of rows 4g..4g+4.
    let mut u = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let (a, b, c, d) = (
            _mm512_castps_pd(t[4 * g]),
            _mm512_castps_pd(t[4 * g + 1]),
            _mm512_castps_pd(t[4 * g + 2]),
            _mm512_castps_pd(t[4 * g + 3]),
        );
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for q in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[q], u[4 + q]);
        let w0 = _mm512_shuffle_f32x4::<0xdd>(u[q], u[4 + q]);
        let v1 = _mm512_shuffle_f32x4::<0x88>(u[8 + q], u[12 + q]);
        let w1 = _mm512_shuffle_f32x4::<0xdd>(u[8 + q], u[12 + q]);
        out[q] = _mm512_shuffle_f32x4::<0x88>(v0, v1);
        out[4 + q] = _mm512_shuffle_f32x4::<0x88>(w0, w1);
        out[8 + q] = _mm512_shuffle_f32x4::<0xdd>(v0, v1);
        out[12 + q] = _mm512_shuffle_f32x4::<0xdd>(w0, w1);
    }
    out
}

use crate::lanes::first16 as first;

/// See `gather_lanes_pitched`. Safety: AVX-512F present; `src` readable for
/// `(n-1)·stride + len` floats, `dst` writable for `len·pitch`; `1 <= n <= pitch <= 16`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn gather(
    src: *const f32,
    stride: usize,
    n: usize,
    len: usize,
    dst: *mut f32,
    pitch: usize,
) {
    let lanes = first(pitch);
    let mut i = 0;
    while i < len {
        let count = (len - i).min(BLOCK_LANES);
        let m = first(count);
        let mut r = [_mm512_setzero_ps(); 16];
        for (l, row) in r.iter_mut().enumerate() {
            if l < n {
                // SAFETY: lane l < n reads floats l·stride + i .. + count, inside
                // `src`; masked-off lanes are not accessed.
                *row = unsafe { _mm512_maskz_loadu_ps(m, src.add(l * stride + i)) };
            }
        }
        let t = transpose16(r);
        // Constant-trip loops with masked moves throughout, so the 16 vectors stay in
        // registers (plain moves in a loop of `count` were turned into a `memcpy` from a
        // stack copy of the block, which took longer than the transposes).
        for (j, px) in t.iter().enumerate() {
            if j < count {
                // SAFETY: pixel i + j < len, so its `pitch` floats (the only lanes
                // stored) lie inside `dst`.
                unsafe { _mm512_mask_storeu_ps(dst.add((i + j) * pitch), lanes, *px) };
            }
        }
        i += BLOCK_LANES;
    }
}

/// See `scatter_lanes`. Safety: AVX-512F present; `src` readable for `len·16` floats,
/// `dst` writable for `(n-1)·stride + len`; `1 <= n <= 16`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn scatter(src: *const f32, len: usize, n: usize, dst: *mut f32, stride: usize) {
    let mut i = 0;
    while i < len {
        let count = (len - i).min(BLOCK_LANES);
        let m = first(count);
        let mut r = [_mm512_setzero_ps(); 16];
        for (j, px) in r.iter_mut().enumerate() {
            if j < count {
                // SAFETY: pixel i + j < len, so its 16 floats lie inside `src`.
                *px = unsafe { _mm512_maskz_loadu_ps(0xffff, src.add((i + j) * BLOCK_LANES)) };
            }
        }
        let t = transpose16(r);
        for (l, row) in t.iter().enumerate() {
            if l < n {
                // SAFETY: lane l < n writes floats l·stride + i .. + count, inside
                // `dst`; masked-off lanes are not accessed.
                unsafe { _mm512_mask_storeu_ps(dst.add(l * stride + i), m, *row) };
            }
        }
        i += BLOCK_LANES;
    }
}

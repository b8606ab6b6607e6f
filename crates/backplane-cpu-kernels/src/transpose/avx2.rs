//! The channels-last transposes with AVX2: 8×8 blocks in registers (two per 16-lane pixel),
//! whole groups of eight pixels; the last pixels of a plane are left to the caller.

use super::BLOCK_LANES;
use std::arch::x86_64::*;

/// Transpose an 8×8 block held as 8 row vectors: 32-bit pairs, then 64-bit pairs within
/// each 128-bit lane, then the 128-bit lanes across registers.
#[inline]
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let mut t = [_mm256_setzero_ps(); 8];
    for k in 0..4 {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    // u[4g + q] holds, in 128-bit lane h, column 4h + q of rows 4g..4g+4.
    let mut u = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = _mm256_shuffle_ps::<0x44>(a, c);
        u[4 * g + 1] = _mm256_shuffle_ps::<0xee>(a, c);
        u[4 * g + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        u[4 * g + 3] = _mm256_shuffle_ps::<0xee>(b, d);
    }
    let mut out = [_mm256_setzero_ps(); 8];
    for q in 0..4 {
        out[q] = _mm256_permute2f128_ps::<0x20>(u[q], u[4 + q]);
        out[4 + q] = _mm256_permute2f128_ps::<0x31>(u[q], u[4 + q]);
    }
    out
}

/// `gather_lanes_pitched` for pixels `0 .. len / 8 · 8`; returns how many it did. Each
/// pixel's `pitch` lanes are stored in runs of eight, the last run (of `pitch` mod 8) as
/// a half vector when four wide (a GEMM A panel's twelve rows), else masked. Safety: AVX2
/// present; `src` readable for `(n-1)·stride + len` floats, `dst` writable for
/// `len·pitch`; `1 <= n <= pitch <= 16`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn gather(
    src: *const f32,
    stride: usize,
    n: usize,
    len: usize,
    dst: *mut f32,
    pitch: usize,
) -> usize {
    let whole = len / 8 * 8;
    let tail = pitch % 8;
    // SAFETY: AVX2 is present (the caller's contract).
    let tail_mask = unsafe { run_mask(tail) };
    for i in (0..whole).step_by(8) {
        for l0 in (0..pitch).step_by(8) {
            let mut r = [_mm256_setzero_ps(); 8];
            for (k, row) in r.iter_mut().enumerate() {
                if l0 + k < n {
                    // SAFETY: lane l0 + k < n reads floats (l0+k)·stride + i .. + 8,
                    // with i + 8 <= len: inside `src`.
                    *row = unsafe { _mm256_loadu_ps(src.add((l0 + k) * stride + i)) };
                }
            }
            let width = (pitch - l0).min(8);
            for (j, px) in transpose8(r).into_iter().enumerate() {
                // SAFETY: pixel i + j < len, and lanes l0 .. l0 + width <= pitch of it
                // are written: inside `dst`'s len·pitch floats.
                unsafe {
                    let at = dst.add((i + j) * pitch + l0);
                    match width {
                        8 => _mm256_storeu_ps(at, px),
                        4 => _mm_storeu_ps(at, _mm256_castps256_ps128(px)),
                        _ => _mm256_maskstore_ps(at, tail_mask, px),
                    }
                }
            }
        }
    }
    whole
}

/// [`super::transpose_tile`] for rows `0 .. rows / 8 · 8` and columns
/// `0 .. cols / 8 · 8`, eight by eight in registers. Safety: AVX2 present; `src` readable
/// at i·src_stride + j and `dst` writable at j·dst_stride + i for those i and j.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn blocks(
    src: *const f32,
    src_stride: usize,
    rows: usize,
    cols: usize,
    dst: *mut f32,
    dst_stride: usize,
) {
    for i in (0..rows / 8 * 8).step_by(8) {
        for j in (0..cols / 8 * 8).step_by(8) {
            // SAFETY: rows i..i+8 and columns j..j+8 are inside the whole blocks (the
            // caller's contract).
            let r: [__m256; 8] = std::array::from_fn(|k| unsafe {
                _mm256_loadu_ps(src.add((i + k) * src_stride + j))
            });
            for (q, v) in transpose8(r).into_iter().enumerate() {
                // SAFETY: as above, transposed.
                unsafe { _mm256_storeu_ps(dst.add((j + q) * dst_stride + i), v) };
            }
        }
    }
}

/// A store mask of the first `n` < 8 lanes. Safety: AVX2 present.
#[target_feature(enable = "avx2")]
unsafe fn run_mask(n: usize) -> __m256i {
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes)
}

/// `scatter_lanes` for pixels `0 .. len / 8 · 8`; returns how many it did. Safety: AVX2
/// present; `src` readable for `len·16` floats, `dst` writable for `(n-1)·stride + len`;
/// `1 <= n <= 16`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scatter(
    src: *const f32,
    len: usize,
    n: usize,
    dst: *mut f32,
    stride: usize,
) -> usize {
    let whole = len / 8 * 8;
    for i in (0..whole).step_by(8) {
        for l0 in [0, 8] {
            if l0 >= n {
                continue;
            }
            let mut r = [_mm256_setzero_ps(); 8];
            for (j, px) in r.iter_mut().enumerate() {
                // SAFETY: pixel i + j < len: its 16 floats lie inside `src`.
                *px = unsafe { _mm256_loadu_ps(src.add((i + j) * BLOCK_LANES + l0)) };
            }
            for (k, row) in transpose8(r).into_iter().enumerate() {
                if l0 + k < n {
                    // SAFETY: lane l0 + k < n writes floats (l0+k)·stride + i .. + 8,
                    // with i + 8 <= len: inside `dst`.
                    unsafe { _mm256_storeu_ps(dst.add((l0 + k) * stride + i), row) };
                }
            }
        }
    }
    whole
}

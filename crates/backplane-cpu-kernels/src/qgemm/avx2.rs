//! The AVX2 micro-tile of the integer GEMM: up to four rows of A against one 16-column
//! panel, `vpmaddwd` on a broadcast pair of A values and 32-bit sums.

use super::{QMR, QNR};
use std::arch::x86_64::*;

/// Sums of `r` (1..=4) rows of A against one panel into `tile`. Safety: AVX2 present;
/// `a` readable for `(r-1)·lda + kp` values, `kp` even; `panel` readable for `kp · QNR`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn tile(
    a: *const i16,
    lda: usize,
    r: usize,
    kp: usize,
    panel: *const i16,
    tile: &mut [[i32; QNR]; QMR],
) {
    let mut acc = [_mm256_setzero_si256(); 2 * QMR];
    let r = r.min(QMR);
    for pair in 0..kp / 2 {
        // SAFETY: pair < kp/2, so the two vectors at pair·2·QNR .. +32 lie in the panel.
        let (b0, b1) = unsafe {
            let p = panel.add(pair * 2 * QNR);
            (
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(QNR).cast()),
            )
        };
        for rr in 0..r {
            // SAFETY: row rr < r reads values 2·pair, 2·pair + 1 < kp of its row.
            let v = unsafe { a.add(rr * lda + 2 * pair).cast::<i32>().read_unaligned() };
            let x = _mm256_set1_epi32(v);
            acc[2 * rr] = _mm256_add_epi32(acc[2 * rr], _mm256_madd_epi16(x, b0));
            acc[2 * rr + 1] = _mm256_add_epi32(acc[2 * rr + 1], _mm256_madd_epi16(x, b1));
        }
    }
    for rr in 0..r {
        let out = tile[rr].as_mut_ptr();
        // SAFETY: each row of `tile` holds QNR = 16 int32, two vectors.
        unsafe {
            _mm256_storeu_si256(out.cast(), acc[2 * rr]);
            _mm256_storeu_si256(out.add(8).cast(), acc[2 * rr + 1]);
        }
    }
}

//! The AVX-512 channels-last window rows.

use super::BLOCK_LANES;
use std::arch::x86_64::*;

/// See `depthwise_row` (`MAX` false) and `max_row` (`MAX` true). Safety: AVX-512F
/// present; the bounds those functions check hold; unless `MAX`, `w` holds 16 floats
/// per tap and `bias` 16.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn row<const MAX: bool>(
    x: *const f32,
    step: usize,
    offs: &[usize],
    w: *const f32,
    bias: *const f32,
    ow: usize,
    out: *mut f32,
) {
    let mut j = 0;
    while j + 8 <= ow {
        // SAFETY: pixels j..j+8 are inside the row (forwarded bounds).
        unsafe { pixels::<8, MAX>(x, j, step, offs, w, bias, out) };
        j += 8;
    }
    while j + 4 <= ow {
        // SAFETY: as above, pixels j..j+4.
        unsafe { pixels::<4, MAX>(x, j, step, offs, w, bias, out) };
        j += 4;
    }
    while j < ow {
        // SAFETY: as above, pixel j.
        unsafe { pixels::<1, MAX>(x, j, step, offs, w, bias, out) };
        j += 1;
    }
}

/// Pixels `j..j+P` of the row, `P` independent accumulators (each tap's weights loaded
/// once for all of them). Safety: as `row`, with `j + P <= ow`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pixels<const P: usize, const MAX: bool>(
    x: *const f32,
    j: usize,
    step: usize,
    offs: &[usize],
    w: *const f32,
    bias: *const f32,
    out: *mut f32,
) {
    // SAFETY (all blocks below): unless MAX, `bias` holds 16 floats and `w` 16 per tap;
    // pixel j + p < ow reads x[(j+p)·step + off .. + 16] inside the checked reach and
    // writes out[(j+p)·16 .. + 16] inside `out`.
    let init = if MAX {
        _mm512_set1_ps(f32::NEG_INFINITY)
    } else {
        unsafe { _mm512_loadu_ps(bias) }
    };
    let mut acc = [init; P];
    let origin = unsafe { x.add(j * step) };
    for (t, &off) in offs.iter().enumerate() {
        let q = unsafe { origin.add(off) };
        if MAX {
            for (p, a) in acc.iter_mut().enumerate() {
                *a = _mm512_max_ps(*a, unsafe { _mm512_loadu_ps(q.add(p * step)) });
            }
        } else {
            let wv = unsafe { _mm512_loadu_ps(w.add(t * BLOCK_LANES)) };
            for (p, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(wv, unsafe { _mm512_loadu_ps(q.add(p * step)) }, *a);
            }
        }
    }
    for (p, a) in acc.iter().enumerate() {
        unsafe { _mm512_storeu_ps(out.add((j + p) * BLOCK_LANES), *a) };
    }
}

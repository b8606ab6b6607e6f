//! The AVX-512 tiles of [`super::tiles_strided_pairs`]: A read where it lies against two
//! packed B panels side by side, three or four 16-lane columns per tile, so that each value
//! of A broadcast feeds three or four FMAs (the 12×32 tile of [`super::avx512`] feeds two).
//! For the channels-last pointwise convolutions of few input channels (K of 16-40) and many
//! outputs, where the tile's loads per FMA and its A rows read once per 32 columns were
//! what bounded it.

use super::avx512::Act512;
use super::{TileEpilogue, HALF, NR};
use std::arch::x86_64::*;

/// Rows of `C = A·B` `0..rows` against the 33 to 64 columns of two adjacent packed panels
/// (interleaved halves, the first at `b`, the second `ps` floats on), A's row `r` at
/// `a + r·lda`; tiles of at most six rows by four columns (eight by three when `nr` <= 48),
/// as even as they can be. Safety: AVX-512F present; `a + r·lda + k` readable for
/// r < rows, k < kc; for each 16-column vector `v` below ceil(nr/16), the floats from
/// `b` plus (v/2)·ps plus (v%2)·16 plus k·NR readable for its columns (at most 16), k < kc;
/// rows r < rows of `c` readable and writable for nr floats at c + r·ldc; the column bias
/// holds nr values; kc >= 1, 33 <= nr <= 64.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn column_pairs(
    kc: usize,
    a: *const f32,
    lda: usize,
    rows: usize,
    b: *const f32,
    ps: usize,
    c: *mut f32,
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) {
    let all = !ep.act.in_kernel() && ep.act.in_registers();
    let four = nr > 3 * HALF;
    let most = if four { 6 } else { 8 };
    macro_rules! dispatch {
        ($mr:expr, $a:expr, $c:expr, $cols:literal; $($r:literal)*) => {
            match ($mr, all) {
                $(($r, false) => tile::<$r, $cols, false>(kc, $a, lda, b, ps, $c, ldc, nr, ep),
                  ($r, true) => tile::<$r, $cols, true>(kc, $a, lda, b, ps, $c, ldc, nr, ep),)*
                _ => {}
            }
        };
    }
    let tiles = rows.div_ceil(most);
    let (base, extra) = (rows / tiles.max(1), rows % tiles.max(1));
    let mut r0 = 0;
    for t in 0..tiles {
        // At most `most` rows: `base` + 1 <= most when there is an `extra`.
        let mr = base + usize::from(t < extra);
        let (ar, cr) = (a.add(r0 * lda), c.add(r0 * ldc));
        match four {
            true => dispatch!(mr, ar, cr, 4; 1 2 3 4 5 6),
            false => dispatch!(mr, ar, cr, 3; 1 2 3 4 5 6 7 8),
        }
        r0 += mr;
    }
}

/// The R×(16·C) tile of [`column_pairs`]: per K step, C vectors of B (the last masked to
/// `nr` columns) and R broadcasts from A's rows, each feeding C FMAs; stored with the
/// epilogue (earlier contents when `accumulate`, the column bias and activation when
/// `last`; `ALL` applies every activation of `Activation::in_registers`). Safety: as
/// [`column_pairs`], with R rows and 16·(C−1) < nr <= 16·C.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const R: usize, const C: usize, const ALL: bool>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ps: usize,
    c: *mut f32,
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) {
    let z = _mm512_setzero_ps();
    let mut acc = [[z; C]; R];
    let masks: [__mmask16; C] = crate::lanes::first16_each(nr);
    let mut starts = [0usize; C];
    for (v, s) in starts.iter_mut().enumerate() {
        *s = (v / 2) * ps + (v % 2) * HALF;
    }
    for k in 0..kc {
        let mut bv = [z; C];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = _mm512_maskz_loadu_ps(masks[v], b.add(starts[v] + k * NR));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*a.add(r * lda + k));
            for (o, &x) in row.iter_mut().zip(&bv) {
                *o = _mm512_fmadd_ps(av, x, *o);
            }
        }
    }
    let mut cb = [z; C];
    if let (true, Some(bias)) = (ep.last, ep.col_bias) {
        for (v, x) in cb.iter_mut().enumerate() {
            *x = _mm512_maskz_loadu_ps(masks[v], bias.as_ptr().add(16 * v));
        }
    }
    let act = Act512::new(ep.act);
    for (r, row) in acc.iter().enumerate() {
        let p = c.add(r * ldc);
        for (v, &x) in row.iter().enumerate() {
            let (pv, m) = (p.add(16 * v), masks[v]);
            let mut y = x;
            if ep.accumulate {
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, pv));
            }
            if ep.last {
                y = _mm512_add_ps(y, cb[v]);
                y = match ALL {
                    true => act.apply_all(y),
                    false => act.apply(y),
                };
            }
            _mm512_mask_storeu_ps(pv, m, y);
        }
    }
}

/// Keeps the panel width this file assumes in sight of the compiler.
const _: () = assert!(NR == 2 * HALF);

//! The AVX-512 VNNI tile of the byte GEMM ([`super::quads`]): `R` rows of A (unsigned
//! bytes) against `P` panels of 16 columns (signed bytes in quads), one 512-bit accumulator
//! per row and panel. Per quad of K steps: one 64-byte vector per panel, one broadcast of
//! four bytes per row, one `vpdpbusd` per row and panel (the broadcast serves `P` of them,
//! the panel vector `R`). Up to twelve rows by two panels (24 accumulators, two panel
//! vectors and a broadcast: 27 of the 32 registers); four panels when the tile has at most
//! four rows (a fully connected layer's one row), since each accumulator is a dependency
//! chain through an instruction of several cycles' latency.
//!
//! `vpdpbusd` is issued through its intrinsic: unlike `vpdpwssd` (`super::avx512`'s
//! `dpwssd`, written as assembly), it has no two-instruction equivalent that LLVM could split
//! it into (the disassembly of the release build shows one `vpdpbusd` per row and panel).
//!
//! The sums are requantized in registers with the pair tiles' f32 operations in their order
//! ([`super::fused`]); two integer steps are merged where that leaves every int32 value the
//! same: the accumulators start at the bias (rather than adding it to the sums), and the
//! rounding's bit offset and the output zero point are one add. `vpmovdb` keeps each lane's
//! low byte. So the bytes are the pair tiles'. Under the fixed-point rule the same
//! accumulators are requantized by [`super::fixed_avx512`] instead.

use super::channels::RequantRange;
use super::fixed_avx512::{fixed16, FixedConsts};
use super::fused::ColumnRequant;
use super::quads::{QUAD_PANELS, QUAD_ROWS};
use super::requant::MAGIC;
use super::QNR;
use std::arch::x86_64::*;

/// `R` rows against `P` panels, requantized into `dst[row·ldd + 16·(off + pp) ..]`.
/// Safety: AVX-512F, BW and VNNI present; `a` readable for `(R−1)·lda + kq` bytes, `kq` a
/// multiple of 4; `panels` readable for `P · kq · 16` bytes; `p .. p + P` panels of `rq`;
/// `dst` writable for `(R−1)·ldd + 16·(off + P)` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn rows_requant<const R: usize, const P: usize>(
    a: *const u8,
    lda: usize,
    kq: usize,
    panels: *const i8,
    rq: &ColumnRequant,
    p: usize,
    off: usize,
    dst: *mut u8,
    ldd: usize,
) {
    let mut init = [_mm512_setzero_si512(); P];
    for (pp, v) in init.iter_mut().enumerate() {
        let (bias, _) = rq.panel(p + pp);
        // SAFETY: `panel` returns QNR = 16 values, one vector.
        *v = unsafe { _mm512_loadu_si512(bias.as_ptr().cast()) };
    }
    // SAFETY: forwarded contract.
    let acc = unsafe { sums::<R, P>(a, lda, kq, panels, init) };
    if rq.is_fixed_point() {
        // SAFETY: forwarded contract.
        unsafe { fixed_store::<R, P>(&acc, rq, p, off, dst, ldd) };
        return;
    }
    let k = Consts::new(rq.range());
    let mut scales = [_mm512_setzero_ps(); P];
    for (pp, v) in scales.iter_mut().enumerate() {
        let (_, scale) = rq.panel(p + pp);
        // SAFETY: `panel` returns QNR = 16 values, one vector.
        *v = unsafe { _mm512_loadu_ps(scale.as_ptr()) };
    }
    for (rr, row) in acc.iter().enumerate() {
        for (pp, (&v, &sc)) in row.iter().zip(&scales).enumerate() {
            // `vpmovdb`: each lane's low byte.
            let b = _mm512_cvtepi32_epi8(requant16(v, sc, &k));
            // SAFETY: rr < R and pp < P: the 16 bytes lie in `dst` by the contract.
            unsafe { _mm_storeu_si128(dst.add(rr * ldd + (off + pp) * QNR).cast(), b) };
        }
    }
}

/// The sums of [`rows_requant`] (bias included) requantized by the fixed-point rule of
/// `rq`'s panels `p ..` ([`fixed16`]) and stored as there. Safety: as [`rows_requant`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn fixed_store<const R: usize, const P: usize>(
    acc: &[[__m512i; P]; R],
    rq: &ColumnRequant,
    p: usize,
    off: usize,
    dst: *mut u8,
    ldd: usize,
) {
    let k = FixedConsts::new(rq.range());
    let mut m = [[_mm512_setzero_si512(); 3]; P];
    for (pp, v) in m.iter_mut().enumerate() {
        if let Some(lanes) = rq.fixed_panel(p + pp) {
            for (x, l) in v.iter_mut().zip(lanes) {
                // SAFETY: `fixed_panel` returns QNR = 16 values of each, one vector.
                *x = unsafe { _mm512_loadu_si512(l.as_ptr().cast()) };
            }
        }
    }
    for (rr, row) in acc.iter().enumerate() {
        for (pp, (&v, [q, left, right])) in row.iter().zip(&m).enumerate() {
            // `vpmovdb`: each lane's low byte.
            let b = _mm512_cvtepi32_epi8(fixed16(v, *q, *left, *right, &k));
            // SAFETY: rr < R and pp < P: the 16 bytes lie in `dst` by the contract.
            unsafe { _mm_storeu_si128(dst.add(rr * ldd + (off + pp) * QNR).cast(), b) };
        }
    }
}

/// One instantiation of `$f` per row count (1 ..= 12) for `$p` panels.
macro_rules! by_rows {
    ($f:ident, $p:literal, $r:expr, $($arg:expr),*) => {
        // SAFETY: the caller's contract, for the row count each arm reads.
        unsafe {
            match $r {
                0 => {}
                1 => $f::<1, $p>($($arg),*),
                2 => $f::<2, $p>($($arg),*),
                3 => $f::<3, $p>($($arg),*),
                4 => $f::<4, $p>($($arg),*),
                5 => $f::<5, $p>($($arg),*),
                6 => $f::<6, $p>($($arg),*),
                7 => $f::<7, $p>($($arg),*),
                8 => $f::<8, $p>($($arg),*),
                9 => $f::<9, $p>($($arg),*),
                10 => $f::<10, $p>($($arg),*),
                11 => $f::<11, $p>($($arg),*),
                _ => $f::<12, $p>($($arg),*),
            }
        }
    };
}

/// The broadcast constants of the requantization.
struct Consts {
    lo: __m512,
    hi: __m512,
    magic: __m512,
    /// The output zero point less the bits of [`MAGIC`] (wrapping).
    offset: __m512i,
}

impl Consts {
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn new(range: RequantRange) -> Consts {
        let zero = range.zero as i32;
        Consts {
            lo: _mm512_set1_ps(range.lo),
            hi: _mm512_set1_ps(range.hi),
            magic: _mm512_set1_ps(MAGIC),
            offset: _mm512_set1_epi32(zero.wrapping_sub(MAGIC.to_bits() as i32)),
        }
    }
}

/// Sixteen sums (the bias included) requantized, each lane's byte in its low 8 bits:
/// `clamp(round_half_even(s · sc), lo, hi) + zero`, [`super::fused`]'s operations.
#[target_feature(enable = "avx512f")]
#[inline]
fn requant16(s: __m512i, sc: __m512, k: &Consts) -> __m512i {
    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc);
    let v = _mm512_min_ps(_mm512_max_ps(v, k.lo), k.hi);
    _mm512_add_epi32(_mm512_castps_si512(_mm512_add_ps(v, k.magic)), k.offset)
}

/// The sums of `R` rows against `P` panels, one vector per row and panel, each started at
/// its panel's `init`. Safety: AVX-512F, BW and VNNI present; `a` readable for
/// `(R−1)·lda + kq` bytes, `kq` a multiple of 4; `panels` readable for `P · kq · 16` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn sums<const R: usize, const P: usize>(
    a: *const u8,
    lda: usize,
    kq: usize,
    panels: *const i8,
    init: [__m512i; P],
) -> [[__m512i; P]; R] {
    let size = kq * QNR;
    let mut acc = [init; R];
    for q in 0..kq / 4 {
        let mut bv = [_mm512_setzero_si512(); P];
        for (pp, v) in bv.iter_mut().enumerate() {
            // SAFETY: pp < P and q < kq/4: the 64 bytes at pp·size + 64·q lie in the panels.
            *v = unsafe { _mm512_loadu_si512(panels.add(pp * size + q * 4 * QNR).cast()) };
        }
        for (rr, row) in acc.iter_mut().enumerate() {
            // SAFETY: row rr < R reads bytes 4q .. 4q + 4 ≤ kq of its row.
            let x = unsafe { a.add(rr * lda + 4 * q).cast::<i32>().read_unaligned() };
            let x = _mm512_set1_epi32(x);
            for (s, &v) in row.iter_mut().zip(&bv) {
                *s = _mm512_dpbusd_epi32(*s, x, v);
            }
        }
    }
    acc
}

/// The int32 sums of `R` rows against `P` panels into `out[row][16·pp ..]` (the raw sums of
/// [`super::quads::quad_gemm_sums`], and the tests' exact comparison). Safety: as [`sums`],
/// `R` at most [`QUAD_ROWS`], `P` at most [`QUAD_PANELS`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn rows_sums<const R: usize, const P: usize>(
    a: *const u8,
    lda: usize,
    kq: usize,
    panels: *const i8,
    out: &mut [[i32; QNR * QUAD_PANELS]; QUAD_ROWS],
) {
    // SAFETY: forwarded contract.
    let acc = unsafe { sums::<R, P>(a, lda, kq, panels, [_mm512_setzero_si512(); P]) };
    for (row, o) in acc.iter().zip(out.iter_mut()) {
        for (pp, &v) in row.iter().enumerate() {
            let dst = &mut o[pp * QNR..][..QNR];
            // SAFETY: `dst` holds 16 int32, one vector.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), v) };
        }
    }
}

/// The sums of `r` rows (1 ..= 12) against `np` panels (1, 2 or 4; others take 1) into
/// `out[row][16·pp ..]`, the instantiations the requantizing tile runs. Safety: as
/// [`tile_requant`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tile_sums(
    a: *const u8,
    lda: usize,
    r: usize,
    kq: usize,
    panels: *const i8,
    np: usize,
    out: &mut [[i32; QNR * QUAD_PANELS]; QUAD_ROWS],
) {
    match np {
        4 => by_rows!(rows_sums, 4, r.min(4), a, lda, kq, panels, out),
        2 => by_rows!(rows_sums, 2, r, a, lda, kq, panels, out),
        _ => by_rows!(rows_sums, 1, r, a, lda, kq, panels, out),
    }
}

/// The requantized bytes of `r` rows (1 ..= [`QUAD_ROWS`]; more are cut) against panels
/// `p .. p + np` (1 ..= [`QUAD_PANELS`]), panel `pp`'s into `dst[row·ldd + 16·pp ..]`.
/// Safety: AVX-512F, BW and VNNI present; `a` readable for `(r−1)·lda + kq` bytes, `kq` a
/// multiple of 4; `panels` readable for `np · kq · 16` bytes; `p .. p + np` panels of `rq`;
/// `dst` writable for `(r−1)·ldd + 16·np` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_requant(
    a: *const u8,
    lda: usize,
    r: usize,
    kq: usize,
    panels: *const i8,
    np: usize,
    rq: &ColumnRequant,
    p: usize,
    dst: *mut u8,
    ldd: usize,
) {
    let r = r.min(QUAD_ROWS);
    let np = np.min(QUAD_PANELS);
    if r == 0 {
        return;
    }
    let size = kq * QNR;
    match (np, r <= 4) {
        (3 | 4, true) => {
            // SAFETY: the caller's contract, for the rows and panels each arm reads.
            unsafe {
                match (np, r) {
                    (4, 1) => rows_requant::<1, 4>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    (4, 2) => rows_requant::<2, 4>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    (4, 3) => rows_requant::<3, 4>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    (4, _) => rows_requant::<4, 4>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    (_, 1) => rows_requant::<1, 3>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    (_, 2) => rows_requant::<2, 3>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    (_, 3) => rows_requant::<3, 3>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                    _ => rows_requant::<4, 3>(a, lda, kq, panels, rq, p, 0, dst, ldd),
                }
            }
        }
        (1, _) => by_rows!(rows_requant, 1, r, a, lda, kq, panels, rq, p, 0, dst, ldd),
        _ => {
            // Two panels at a time (and a last single one).
            let mut pp = 0;
            while pp < np {
                // SAFETY: pp < np, so the panel at pp·size lies in `panels`.
                let at = unsafe { panels.add(pp * size) };
                if np - pp >= 2 {
                    by_rows!(rows_requant, 2, r, a, lda, kq, at, rq, p + pp, pp, dst, ldd);
                    pp += 2;
                } else {
                    by_rows!(rows_requant, 1, r, a, lda, kq, at, rq, p + pp, pp, dst, ldd);
                    pp += 1;
                }
            }
        }
    }
}

/// [`tile_requant`] for any number of rows: whole tiles of [`QUAD_ROWS`] rows in a loop (the
/// tile inlined, so the requantization's constants are set up once rather than per tile),
/// then the remaining rows. Safety: as [`tile_requant`] with `rows` for `r`: `a` readable
/// for `(rows−1)·lda + kq` bytes, `dst` writable for `(rows−1)·ldd + 16·np` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn rows_block_requant(
    a: *const u8,
    lda: usize,
    rows: usize,
    kq: usize,
    panels: *const i8,
    np: usize,
    rq: &ColumnRequant,
    p: usize,
    dst: *mut u8,
    ldd: usize,
) {
    let whole = if np <= 2 { rows / QUAD_ROWS } else { 0 };
    for t in 0..whole {
        let at = t * QUAD_ROWS;
        // SAFETY: rows at..at + 12 lie within `rows` (the contract covers them), at their
        // offsets in `a` and `dst`.
        unsafe {
            let (a, dst) = (a.add(at * lda), dst.add(at * ldd));
            if np == 2 {
                rows_requant::<QUAD_ROWS, 2>(a, lda, kq, panels, rq, p, 0, dst, ldd);
            } else {
                rows_requant::<QUAD_ROWS, 1>(a, lda, kq, panels, rq, p, 0, dst, ldd);
            }
        }
    }
    let mut at = whole * QUAD_ROWS;
    while at < rows {
        let r = (rows - at).min(QUAD_ROWS);
        // SAFETY: rows at..at + r lie within `rows`, as above.
        unsafe {
            tile_requant(
                a.add(at * lda),
                lda,
                r,
                kq,
                panels,
                np,
                rq,
                p,
                dst.add(at * ldd),
                ldd,
            )
        };
        at += r;
    }
}

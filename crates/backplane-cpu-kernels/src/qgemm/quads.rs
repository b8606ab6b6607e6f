//! The byte GEMM of AVX-512 VNNI's `vpdpbusd`: A as unsigned bytes, B as signed bytes packed
//! in quads (four consecutive K steps of a column in one 32-bit lane), four products summed
//! into each int32 lane per instruction, with no intermediate saturation (each u8·i8 product
//! and the sum of four fit easily; the lane adds wrap as int32 adds do).
//!
//! The quantized layers' operands become bytes this way: activations `u8` as they are,
//! `i8` flipped to `x ^ 0x80 = x + 128`; weights centered on their zero point, when every
//! centered weight fits i8 (per-channel symmetric TFLite weights, ONNX `s8` weights, `u8`
//! weights of zero point 128), else a layer keeps the 16-bit pair GEMM ([`super::QPackedB`]).
//! The activations' zero point `za` (plus 128 for i8) is not subtracted from A; instead
//! `Σ (a − za)·w = Σ a·w − za·Σ w`, so the term `za·Σ w` of each column is folded into its
//! bias once ([`QuadPackedB::folded_bias`]). The int32 result is the pair GEMM's to the bit
//! (the same sum modulo 2³², and the requantization adds the bias wrapping), so the bytes
//! are those of [`super::qgemm_requantized`] on every tier.
//!
//! Tiles: up to [`QUAD_ROWS`] rows of A against up to four panels of [`QNR`] columns (one
//! 512-bit accumulator per row and panel). Only the AVX-512 VNNI tier has a vector tile
//! (`super::quads_avx512`); the others run a plain Rust tile, so callers choose this path
//! where [`quads_in_use`] says so and keep the pair GEMM elsewhere. Not written: the
//! 256-bit AVX-VNNI tile (CPUs with AVX-VNNI but no AVX-512).

use super::fused::{requant_one, ColumnRequant};
use super::{Int8Isa, QNR};
use std::ops::Range;

/// The most rows of A per quad tile.
pub const QUAD_ROWS: usize = 12;
/// The most panels per quad tile (taken when the tile has few rows, so that enough
/// independent accumulators hide the instruction's latency).
pub(super) const QUAD_PANELS: usize = 4;
/// About the bytes of A a block of rows may take so as to stay in the L1 cache while the
/// panels pass ([`quad_gemm_requantized_on`]).
const A_BLOCK_BYTES: usize = 16 * 1024;

/// True when the int8 tier in use has a `vpdpbusd` tile: the layers that can should then
/// pack their weights with [`QuadPackedB`] and call [`quad_gemm_requantized`].
pub fn quads_in_use() -> bool {
    has_quad_tile(crate::isa::int8_in_use())
}

/// True when tier `isa` runs a vector tile for the byte GEMM.
pub fn has_quad_tile(isa: Int8Isa) -> bool {
    matches!(isa, Int8Isa::Avx512Vnni)
}

/// B (`depth × cols`, signed bytes) packed for [`quad_gemm_requantized`]: panels of [`QNR`]
/// columns, each `depth_padded / 4` quads of 64 bytes (column `jj`'s four K steps at
/// `4·jj ..`), zero past the depth and the columns; and each column's sum.
#[derive(Debug, Clone)]
pub struct QuadPackedB {
    data: Vec<i8>,
    sums: Vec<i32>,
    depth: usize,
    cols: usize,
}

/// Where `B[k][p·QNR + jj]` lies inside panel `p` of a [`QuadPackedB`].
#[inline]
pub fn quad_at(k: usize, jj: usize) -> usize {
    (k / 4) * 4 * QNR + 4 * jj + k % 4
}

impl QuadPackedB {
    /// Pack `b(k, j)` for `k < depth`, `j < cols` (centered weights). `None` when a value
    /// does not fit i8 (the layer then keeps the pair GEMM), or the size overflows or
    /// cannot be allocated.
    pub fn pack(depth: usize, cols: usize, b: impl Fn(usize, usize) -> i16) -> Option<Self> {
        let kq = depth.checked_add(3)? / 4 * 4;
        let panels = cols.div_ceil(QNR);
        let len = panels.checked_mul(kq)?.checked_mul(QNR)?;
        let mut data = Vec::new();
        data.try_reserve_exact(len).ok()?;
        data.resize(len, 0i8);
        let mut sums = Vec::new();
        sums.try_reserve_exact(cols).ok()?;
        sums.resize(cols, 0i32);
        for (j, sum) in sums.iter_mut().enumerate() {
            let panel = &mut data[(j / QNR) * kq * QNR..][..kq * QNR];
            let mut s = 0i64;
            for k in 0..depth {
                let v = i8::try_from(b(k, j)).ok()?;
                panel[quad_at(k, j % QNR)] = v;
                s += i64::from(v);
            }
            // |s| ≤ 128·depth; a depth past 2²⁴ wraps, as the sums themselves do.
            *sum = s as i32;
        }
        Some(QuadPackedB {
            data,
            sums,
            depth,
            cols,
        })
    }

    /// The depth K.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The depth rounded up to a multiple of four: the bytes each row of A must hold (any
    /// values past K: their weights are zero).
    pub fn depth_padded(&self) -> usize {
        self.depth.div_ceil(4) * 4
    }

    /// The number of columns N.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Each column's sum of weights.
    pub fn column_sums(&self) -> &[i32] {
        &self.sums
    }

    /// `bias[j] − zero · Σ_k B[k][j]` (wrapping, as the requantization adds it): the bias
    /// that makes the sums of uncentered A rows (zero point `zero`) those of centered ones.
    /// `None` when `bias` is not one per column or the copy cannot be allocated.
    pub fn folded_bias(&self, bias: &[i32], zero: i32) -> Option<Vec<i32>> {
        if bias.len() != self.cols {
            return None;
        }
        let mut out = Vec::new();
        out.try_reserve_exact(bias.len()).ok()?;
        out.extend(
            bias.iter()
                .zip(&self.sums)
                .map(|(&b, &s)| b.wrapping_sub(zero.wrapping_mul(s))),
        );
        Some(out)
    }

    /// Panels `p .. p + n` (contiguous).
    pub(super) fn panels(&self, p: usize, n: usize) -> &[i8] {
        let size = self.depth_padded() * QNR;
        &self.data[p * size..(p + n) * size]
    }
}

/// Whether `rows` (at least one) rows of A, `kq` bytes each at pitch `lda`, lie in `a_len`
/// bytes, and as many output rows of `n` values at pitch `ldo` (at least `n`) in `out_len`
/// (the products checked for overflow): what the byte GEMM's entry points check before the
/// vector tile reads and writes through pointers.
fn extents_fit(
    a_len: usize,
    lda: usize,
    rows: usize,
    kq: usize,
    out_len: usize,
    ldo: usize,
    n: usize,
) -> bool {
    let last = rows.saturating_sub(1);
    let a_need = last.checked_mul(lda).and_then(|v| v.checked_add(kq));
    let o_need = last.checked_mul(ldo).and_then(|v| v.checked_add(n));
    let fits = matches!((a_need, o_need), (Some(an), Some(on)) if an <= a_len && on <= out_len);
    fits && ldo >= n
}

/// The byte GEMM with its requantization: `out[i·ldo + j − panels.start·QNR] =
/// requant_j(Σ_k A[i][k] · B[k][j])` for `i < rows` and the columns `j` of `panels`, A rows
/// of unsigned bytes at pitch `lda`, each readable for `b.depth_padded()` bytes (a row may
/// run into the next one: the bytes past the depth meet zero weights). Returns `false`,
/// computing nothing, when a slice is too short, `ldo` narrower than the columns, or the
/// panel range past B's or `rq`'s. With the fixed-point rule ([`ColumnRequant::fixed_point`])
/// the vector tile requantizes by it in registers; without the tile, the sums are stored
/// per block of rows and requantized after, in integers.
#[allow(clippy::too_many_arguments)]
pub fn quad_gemm_requantized(
    a: &[u8],
    lda: usize,
    rows: usize,
    b: &QuadPackedB,
    panels: Range<usize>,
    rq: &ColumnRequant,
    out: &mut [u8],
    ldo: usize,
) -> bool {
    let isa = crate::isa::int8_in_use();
    quad_gemm_requantized_on(isa, a, lda, rows, b, panels, rq, out, ldo)
}

/// [`quad_gemm_requantized`] on tier `isa` (tests, A/B timings); tiers without a vector
/// tile ([`has_quad_tile`]) run the plain Rust one. Returns `false`, computing nothing, also
/// when this CPU lacks `isa`.
#[allow(clippy::too_many_arguments)]
pub fn quad_gemm_requantized_on(
    isa: Int8Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    b: &QuadPackedB,
    panels: Range<usize>,
    rq: &ColumnRequant,
    out: &mut [u8],
    ldo: usize,
) -> bool {
    if !isa.available() {
        return false;
    }
    let all = b.cols.div_ceil(QNR);
    if panels.start > panels.end || panels.end > all || panels.end > rq.panels() {
        return false;
    }
    if rq.is_fixed_point() && !has_quad_tile(isa) {
        return fixed_point_rows(isa, a, lda, rows, b, panels, rq, out, ldo);
    }
    let first = panels.start * QNR;
    let n = (panels.end * QNR).min(b.cols).saturating_sub(first);
    if n == 0 || rows == 0 {
        return true;
    }
    let kq = b.depth_padded();
    if !extents_fit(a.len(), lda, rows, kq, out.len(), ldo, n) {
        return false;
    }
    let mut bytes = [0u8; QNR * QUAD_PANELS * QUAD_ROWS];
    // Rows in blocks of whole tiles whose A bytes stay in the L1 cache, each block against
    // every panel in turn: a panel's weights are read from memory once per block (not once
    // per tile) and then serve the block's tiles from the cache.
    let block = (A_BLOCK_BYTES / kq.max(1)).div_ceil(QUAD_ROWS).max(1) * QUAD_ROWS;
    let mut i0 = 0;
    while i0 < rows {
        let end = (i0 + block).min(rows);
        let mut p = panels.start;
        while p < panels.end {
            // Few rows: more panels per tile, for more independent accumulators.
            let np = (panels.end - p).min(if end - i0 <= 4 { QUAD_PANELS } else { 2 });
            let j0 = p * QNR - first;
            let width = (b.cols - p * QNR).min(np * QNR);
            if width == np * QNR && has_quad_tile(isa) {
                // Whole panels on the vector tile: the block's rows in one call, stored in
                // place (`out` holds (end − i0 − 1)·ldo + width bytes from `at`).
                let at = i0 * ldo + j0;
                block_bytes(
                    isa,
                    &a[i0 * lda..],
                    lda,
                    end - i0,
                    b,
                    p,
                    np,
                    rq,
                    &mut out[at..],
                    ldo,
                );
                p += np;
                continue;
            }
            let mut i = i0;
            while i < end {
                let r = (end - i).min(QUAD_ROWS);
                let a_rows = &a[i * lda..];
                let at = i * ldo + j0;
                if width == np * QNR {
                    // Whole panels: stored in place (`out` holds (r−1)·ldo + width from `at`).
                    tile_bytes(isa, a_rows, lda, r, b, p, np, rq, &mut out[at..], ldo);
                } else {
                    let ldb = QNR * QUAD_PANELS;
                    tile_bytes(isa, a_rows, lda, r, b, p, np, rq, &mut bytes, ldb);
                    for (rr, row) in bytes.chunks_exact(ldb).enumerate().take(r) {
                        out[at + rr * ldo..][..width].copy_from_slice(&row[..width]);
                    }
                }
                i += r;
            }
            p += np;
        }
        i0 = end;
    }
    true
}

/// Rows of A per block of [`fixed_point_rows`]'s sums.
const FIXED_ROWS: usize = 32;

/// [`quad_gemm_requantized_on`] by the fixed-point rule ([`ColumnRequant::fixed_point`]):
/// per block of rows the tier's sums ([`quad_gemm_sums_on`]), then each requantized in
/// integers with its column's folded bias and multiplier. The caller checked the panel
/// range against B and `rq`; `false` when an extent does not fit or the scratch sums cannot
/// be allocated.
#[allow(clippy::too_many_arguments)]
fn fixed_point_rows(
    isa: Int8Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    b: &QuadPackedB,
    panels: Range<usize>,
    rq: &ColumnRequant,
    out: &mut [u8],
    ldo: usize,
) -> bool {
    let first = panels.start * QNR;
    let n = (panels.end * QNR).min(b.cols).saturating_sub(first);
    if n == 0 || rows == 0 {
        return true;
    }
    if !extents_fit(a.len(), lda, rows, b.depth_padded(), out.len(), ldo, n) {
        return false;
    }
    let Some((bias, m)) = rq.fixed_columns(first..first + n) else {
        return false;
    };
    let mut sums = Vec::new();
    if sums.try_reserve_exact(FIXED_ROWS * n).is_err() {
        return false;
    }
    sums.resize(FIXED_ROWS * n, 0i32);
    let mut i = 0;
    while i < rows {
        let r = (rows - i).min(FIXED_ROWS);
        let s = &mut sums[..r * n];
        if !quad_gemm_sums_on(isa, &a[i * lda..], lda, r, b, panels.clone(), s, n) {
            return false;
        }
        for (rr, row) in s.chunks_exact(n).enumerate() {
            let o = &mut out[(i + rr) * ldo..][..n];
            super::fused::requant_fixed_row(row, bias, m, rq.range(), o);
        }
        i += r;
    }
    true
}

/// The requantized bytes of `rows` rows (any number) against panels `p .. p + np` on the
/// vector tile of `isa` ([`has_quad_tile`]), panel `pp`'s at `dst[row·ldd + 16·pp ..]`.
/// The caller checked A's and B's extents and that the CPU has `isa`; a `dst` too short
/// for the rows is left as it is (not overrun).
#[allow(clippy::too_many_arguments)]
fn block_bytes(
    isa: Int8Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    b: &QuadPackedB,
    p: usize,
    np: usize,
    rq: &ColumnRequant,
    dst: &mut [u8],
    ldd: usize,
) {
    let kq = b.depth_padded();
    let panels = b.panels(p, np);
    #[cfg(target_arch = "x86_64")]
    if isa == Int8Isa::Avx512Vnni && rows > 0 && (rows - 1) * ldd + np * QNR <= dst.len() {
        // SAFETY: the CPU has AVX-512F, BW and VNNI (the tier, checked by the entry point);
        // the entry point checked that `rows` rows of `kq` bytes at pitch `lda` lie in `a`;
        // `panels` holds `np` panels of `kq · QNR` bytes, `p .. p + np` are panels of `rq`;
        // `dst`'s extent was checked just above.
        unsafe {
            super::quads_avx512::rows_block_requant(
                a.as_ptr(),
                lda,
                rows,
                kq,
                panels.as_ptr(),
                np,
                rq,
                p,
                dst.as_mut_ptr(),
                ldd,
            )
        };
    }
    // Without the vector tile (other architectures) there is nothing to run.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (isa, a, lda, rows, kq, panels, rq, dst, ldd);
}

/// One tile's requantized bytes: `r` rows (at most [`QUAD_ROWS`]) against panels
/// `p .. p + np` (`np` at most [`QUAD_PANELS`]), panel `pp`'s bytes at
/// `dst[row·ldd + 16·pp ..]` (the caller sizes `dst`; were it short, the vector tile would
/// write nothing and the plain one panic). The caller checked A's and B's extents and that
/// the CPU has `isa`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn tile_bytes(
    isa: Int8Isa,
    a: &[u8],
    lda: usize,
    r: usize,
    b: &QuadPackedB,
    p: usize,
    np: usize,
    rq: &ColumnRequant,
    dst: &mut [u8],
    ldd: usize,
) {
    let kq = b.depth_padded();
    let panels = b.panels(p, np);
    #[cfg(target_arch = "x86_64")]
    if isa == Int8Isa::Avx512Vnni {
        // The callers size `dst` (the entry point checked the output's extent, the byte
        // buffer holds a whole tile); a short one would have its tile skipped, not
        // overrun.
        if (r.max(1) - 1) * ldd + np * QNR > dst.len() {
            return;
        }
        // SAFETY: the CPU has AVX-512F, BW and VNNI (the tier, checked by the entry point);
        // the entry point checked that `r` rows of `kq` bytes at pitch `lda` lie in `a`;
        // `panels` holds `np` panels of `kq · QNR` bytes and `p .. p + np` are panels of
        // `rq` (both checked against the range); `dst` was checked just above.
        unsafe {
            super::quads_avx512::tile_requant(
                a.as_ptr(),
                lda,
                r,
                kq,
                panels.as_ptr(),
                np,
                rq,
                p,
                dst.as_mut_ptr(),
                ldd,
            )
        };
        return;
    }
    let _ = isa;
    portable_tile(a, lda, r, kq, panels, np, rq, p, dst, ldd);
}

/// The plain Rust tile: the same sums (wrapping, as the vector lanes add), the same
/// requantization.
#[allow(clippy::too_many_arguments)]
fn portable_tile(
    a: &[u8],
    lda: usize,
    r: usize,
    kq: usize,
    panels: &[i8],
    np: usize,
    rq: &ColumnRequant,
    p: usize,
    dst: &mut [u8],
    ldd: usize,
) {
    for rr in 0..r {
        let row = &a[rr * lda..][..kq];
        let out = &mut dst[rr * ldd..];
        for pp in 0..np {
            let panel = &panels[pp * kq * QNR..][..kq * QNR];
            let mut sums = [0i32; QNR];
            for (quad, bs) in row.chunks_exact(4).zip(panel.chunks_exact(4 * QNR)) {
                for (j, s) in sums.iter_mut().enumerate() {
                    let dot: i32 = (0..4)
                        .map(|t| i32::from(quad[t]) * i32::from(bs[4 * j + t]))
                        .sum();
                    *s = s.wrapping_add(dot);
                }
            }
            let (bias, scale) = rq.panel(p + pp);
            for (j, &s) in sums.iter().enumerate() {
                out[pp * QNR + j] = requant_one(s, bias[j], scale[j], rq.range());
            }
        }
    }
}

/// The int32 sums `c[i·ldc + j − panels.start·QNR] = Σ_k A[i][k] · B[k][j]` for the columns
/// `j` of `panels` (wrapping; A rows of unsigned bytes at pitch `lda`, each readable for
/// `b.depth_padded()` bytes), without a requantization: for layers whose output is the sums
/// or a float of them (ONNX MatMulInteger). The tier in use; see [`quad_gemm_sums_on`].
pub fn quad_gemm_sums(
    a: &[u8],
    lda: usize,
    rows: usize,
    b: &QuadPackedB,
    panels: Range<usize>,
    c: &mut [i32],
    ldc: usize,
) -> bool {
    quad_gemm_sums_on(crate::isa::int8_in_use(), a, lda, rows, b, panels, c, ldc)
}

/// About the bytes of A one block of rows of [`quad_gemm_sums_on`] takes: they stay in L2
/// while each pair of panels (in L1) runs down them, so B is read from memory once per
/// block.
const SUMS_A_BLOCK_BYTES: usize = 256 * 1024;

/// [`quad_gemm_sums`] on tier `isa`, through the tiles' accumulation (1, 2 or 4 panels at a
/// time, as the requantizing GEMM takes them; a plain Rust sum on tiers without the vector
/// tile): per block of rows, each pair of panels down every row of the block. `false`,
/// computing nothing, when an extent does not fit, the panels are past B's, or the CPU lacks
/// `isa`.
#[allow(clippy::too_many_arguments)]
pub fn quad_gemm_sums_on(
    isa: Int8Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    b: &QuadPackedB,
    panels: Range<usize>,
    c: &mut [i32],
    ldc: usize,
) -> bool {
    let kq = b.depth_padded();
    let all = b.cols.div_ceil(QNR);
    if !isa.available() || panels.start > panels.end || panels.end > all {
        return false;
    }
    let first = panels.start * QNR;
    let n = (panels.end * QNR).min(b.cols).saturating_sub(first);
    if rows == 0 || n == 0 {
        return true;
    }
    if !extents_fit(a.len(), lda, rows, kq, c.len(), ldc, n) {
        return false;
    }
    let mut tile = [[0i32; QNR * QUAD_PANELS]; QUAD_ROWS];
    let block = (SUMS_A_BLOCK_BYTES / kq.max(1)).div_ceil(QUAD_ROWS).max(1) * QUAD_ROWS;
    let mut i0 = 0;
    while i0 < rows {
        let end = (i0 + block).min(rows);
        // Four panels per tile only when every tile of the block has at most four rows.
        let wide = end - i0 <= 4;
        let mut p = panels.start;
        while p < panels.end {
            let np = if wide && panels.end - p >= 4 {
                4
            } else {
                (panels.end - p).min(2)
            };
            let bp = b.panels(p, np);
            let width = (b.cols - p * QNR).min(np * QNR);
            let mut i = i0;
            while i < end {
                let r = (end - i).min(QUAD_ROWS);
                let a_rows = &a[i * lda..];
                #[cfg(target_arch = "x86_64")]
                if isa == Int8Isa::Avx512Vnni {
                    // SAFETY: the tier's features are present (checked above); the extents
                    // of `a` and of the `np` panels were checked above.
                    unsafe {
                        super::quads_avx512::tile_sums(
                            a_rows.as_ptr(),
                            lda,
                            r,
                            kq,
                            bp.as_ptr(),
                            np,
                            &mut tile,
                        )
                    };
                }
                if !has_quad_tile(isa) {
                    for (rr, out) in tile.iter_mut().enumerate().take(r) {
                        let row = &a_rows[rr * lda..][..kq];
                        for (j, s) in out.iter_mut().enumerate().take(np * QNR) {
                            let panel = &bp[(j / QNR) * kq * QNR..][..kq * QNR];
                            *s = (0..kq).fold(0i32, |acc, k| {
                                let w = i32::from(panel[quad_at(k, j % QNR)]);
                                acc.wrapping_add(i32::from(row[k]) * w)
                            });
                        }
                    }
                }
                for (rr, out) in tile.iter().enumerate().take(r) {
                    c[(i + rr) * ldc + p * QNR - first..][..width].copy_from_slice(&out[..width]);
                }
                i += r;
            }
            p += np;
        }
        i0 = end;
    }
    true
}

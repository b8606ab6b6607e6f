//! The integer GEMM with the requantization inside the tile's store: each tile of sums
//! (4×16 on AVX2, 12×16 on AVX-512) becomes bytes while in registers, so no int32 block is
//! written and read back. The channels-last int8 convolutions (output pixels as rows,
//! channels as columns) use it.
//!
//! The bytes are those of `super::requantize_channels` on the sums (same f32 operations
//! in the same order), on every tier.

use super::channels::RequantRange;
use super::requant::{requant_fixed_one, rounded_int, FixedLanes};
use super::{fits, tile_rows, Int8Isa, QPackedB, MR_MAX, QNR};
use std::ops::Range;

/// Columns' biases and fixed-point multipliers `(q, shift)` ([`ColumnRequant::fixed_point`]).
pub(super) type FixedColumns<'a> = (&'a [i32], &'a [(i32, i32)]);

/// Bias and multiplier per column of a GEMM, padded to whole panels of [`QNR`], and the
/// output range shared by the columns: what [`qgemm_requantized`] applies to the sums.
#[derive(Debug, Clone)]
pub struct ColumnRequant {
    bias: Vec<i32>,
    scale: Vec<f32>,
    range: RequantRange,
    /// The fixed-point rule's Q31 multipliers `(q, shift)` per column (padded as `bias`),
    /// which replace `scale` when present ([`ColumnRequant::fixed_point`]).
    fixed: Option<Vec<(i32, i32)>>,
    /// The same, one lane per column, for the AVX-512 tiles.
    fixed_lanes: Option<FixedLanes>,
}

impl ColumnRequant {
    /// The requantization of `bias.len()` columns (`scale` as long). `None` when the
    /// lengths differ or the padded copy cannot be allocated.
    pub fn new(bias: &[i32], scale: &[f32], range: RequantRange) -> Option<ColumnRequant> {
        if bias.len() != scale.len() {
            return None;
        }
        let len = bias.len().div_ceil(QNR).checked_mul(QNR)?;
        let mut b = Vec::new();
        b.try_reserve_exact(len).ok()?;
        b.extend_from_slice(bias);
        b.resize(len, 0);
        let mut s = Vec::new();
        s.try_reserve_exact(len).ok()?;
        s.extend_from_slice(scale);
        s.resize(len, 0.0);
        Some(ColumnRequant {
            bias: b,
            scale: s,
            range,
            fixed: None,
            fixed_lanes: None,
        })
    }

    /// The requantization of `bias.len()` columns by the fixed-point rule of LiteRT's
    /// builtin kernels ([`super::requant_fixed_one`]), one Q31 multiplier `(q, shift)` per
    /// column in `multipliers`: what a model whose QuantizeLinear asks for that rule needs
    /// to equal CpuRef and LiteRT. The pair GEMM ([`qgemm_requantized`]) and the byte GEMM
    /// ([`super::quad_gemm_requantized`], with its folded bias) compute it on every tier.
    /// `None` as for [`ColumnRequant::new`].
    pub fn fixed_point(
        bias: &[i32],
        multipliers: &[(i32, i32)],
        range: RequantRange,
    ) -> Option<ColumnRequant> {
        if bias.len() != multipliers.len() {
            return None;
        }
        let zeros = vec_try(bias.len(), 0f32)?;
        let mut rq = ColumnRequant::new(bias, &zeros, range)?;
        let mut m = Vec::new();
        m.try_reserve_exact(rq.bias.len()).ok()?;
        m.extend_from_slice(multipliers);
        m.resize(rq.bias.len(), (0, 0));
        rq.fixed_lanes = Some(FixedLanes::placed(m.len(), &m, |j| j)?);
        rq.fixed = Some(m);
        Some(rq)
    }

    /// The biases and fixed-point multipliers of columns `cols`, `None` under the f32 rule
    /// or past the columns.
    pub(super) fn fixed_columns(&self, cols: Range<usize>) -> Option<FixedColumns<'_>> {
        let m = self.fixed.as_ref()?.get(cols.clone())?;
        Some((self.bias.get(cols)?, m))
    }

    /// Panel `p`'s [`QNR`] Q31 multipliers and left and right shifts, `None` under the f32
    /// rule. Panics when `p` is past the columns, as [`ColumnRequant::panel`].
    #[cfg(target_arch = "x86_64")]
    pub(super) fn fixed_panel(&self, p: usize) -> Option<[&[i32]; 3]> {
        let f = self.fixed_lanes.as_ref()?;
        let at = p * QNR..(p + 1) * QNR;
        Some([&f.q[at.clone()], &f.left[at.clone()], &f.right[at]])
    }

    /// Whether the columns requantize by the fixed-point rule ([`ColumnRequant::fixed_point`]).
    pub fn is_fixed_point(&self) -> bool {
        self.fixed.is_some()
    }

    /// The output range.
    pub fn range(&self) -> RequantRange {
        self.range
    }

    /// Bias and scale of panel `p`'s [`QNR`] columns. Panics when `p` is past the columns
    /// (callers check with [`ColumnRequant::panels`]).
    pub(super) fn panel(&self, p: usize) -> (&[i32], &[f32]) {
        (
            &self.bias[p * QNR..(p + 1) * QNR],
            &self.scale[p * QNR..(p + 1) * QNR],
        )
    }

    /// The number of panels the columns fill.
    pub fn panels(&self) -> usize {
        self.bias.len() / QNR
    }
}

/// `n` copies of `v`, `None` when they cannot be allocated.
fn vec_try<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).ok()?;
    out.resize(n, v);
    Some(out)
}

/// One sum requantized, as [`super::requantize_channels`] does it.
#[inline(always)]
pub(super) fn requant_one(sum: i32, bias: i32, scale: f32, r: RequantRange) -> u8 {
    let v = (sum.wrapping_add(bias) as f32 * scale).max(r.lo).min(r.hi);
    (rounded_int(v) + r.zero as i32) as u8
}

#[inline(always)]
fn requant_fixed_tile_body(
    sums: &[[i32; QNR]],
    bias: &[i32],
    m: &[(i32, i32)],
    range: RequantRange,
    bytes: &mut [[u8; QNR]],
) {
    let (bias, m) = (&bias[..QNR], &m[..QNR]);
    for (row, s) in bytes.iter_mut().zip(sums) {
        for j in 0..QNR {
            row[j] = requant_fixed_one(s[j], bias[j], m[j], range);
        }
    }
}

#[inline(always)]
fn requant_fixed_row_body(
    sums: &[i32],
    bias: &[i32],
    m: &[(i32, i32)],
    range: RequantRange,
    out: &mut [u8],
) {
    let n = sums.len().min(bias.len()).min(m.len()).min(out.len());
    let (sums, bias, m, out) = (&sums[..n], &bias[..n], &m[..n], &mut out[..n]);
    for j in 0..n {
        out[j] = requant_fixed_one(sums[j], bias[j], m[j], range);
    }
}

crate::multiversion! {
    /// One row of sums requantized by the fixed-point rule, column `j` with `bias[j]` and
    /// multiplier `m[j]` (the shortest slice's length), compiled per tier.
    pub(super) fn requant_fixed_row(
        sums: &[i32],
        bias: &[i32],
        m: &[(i32, i32)],
        range: RequantRange,
        out: &mut [u8],
    ) => requant_fixed_row_body;
}

crate::multiversion! {
    /// A tile's sums (one row of [`QNR`] columns each) requantized by the fixed-point rule
    /// into bytes, compiled per tier so that the 64-bit products vectorize.
    fn requant_fixed_tile(
        sums: &[[i32; QNR]],
        bias: &[i32],
        m: &[(i32, i32)],
        range: RequantRange,
        bytes: &mut [[u8; QNR]],
    ) => requant_fixed_tile_body;
}

/// `out[i·ldo + j − panels.start·QNR] = requant_j(Σ_k A[i][k] · B[k][j])` for `i < rows` and
/// the columns `j` of `panels` (panels of [`QNR`] columns of B, the last one possibly
/// narrower): the int8 GEMM of a row block with its requantization, written from `out[0]`
/// so that threads can each take a range of panels. Each row of A holds
/// `b.depth_padded()` values (zeros past the depth). Returns `false`, computing nothing,
/// when a slice is too short, the panel range is past B's or `rq`'s columns, or `lda` is
/// shorter than the padded depth.
#[allow(clippy::too_many_arguments)]
pub fn qgemm_requantized(
    a: &[i16],
    lda: usize,
    rows: usize,
    b: &QPackedB,
    panels: Range<usize>,
    rq: &ColumnRequant,
    out: &mut [u8],
    ldo: usize,
) -> bool {
    let isa = crate::isa::int8_in_use();
    qgemm_requantized_on(isa, a, lda, rows, b, panels, rq, out, ldo)
}

/// [`qgemm_requantized`] on the tier `isa` rather than the process's: for tests and A/B
/// timings of the tiers in one process. Returns `false`, computing nothing, also when this
/// CPU lacks `isa`.
#[allow(clippy::too_many_arguments)]
pub fn qgemm_requantized_on(
    isa: Int8Isa,
    a: &[i16],
    lda: usize,
    rows: usize,
    b: &QPackedB,
    panels: Range<usize>,
    rq: &ColumnRequant,
    out: &mut [u8],
    ldo: usize,
) -> bool {
    if !isa.available() {
        return false;
    }
    let all = b.cols().div_ceil(QNR);
    if panels.start > panels.end || panels.end > all || panels.end > rq.panels() {
        return false;
    }
    let first = panels.start * QNR;
    let n = (panels.end * QNR).min(b.cols()).saturating_sub(first);
    if n == 0 || rows == 0 {
        return true;
    }
    if !fits(a, lda, rows, b, out.len(), ldo, n) {
        return false;
    }
    let kp = b.depth_padded();
    let step = tile_rows(isa);
    let mut bytes = [[0u8; QNR]; MR_MAX];
    let mut i = 0;
    while i < rows {
        let r = (rows - i).min(step);
        let a_rows = &a[i * lda..];
        for p in panels.clone() {
            let panel = b.panel(p);
            tile_bytes(isa, a_rows, lda, r, kp, panel, rq, p, &mut bytes);
            let j0 = p * QNR - first;
            let width = (b.cols() - p * QNR).min(QNR);
            for (rr, row) in bytes.iter().enumerate().take(r) {
                let at = (i + rr) * ldo + j0;
                if width == QNR {
                    // A fixed length: one 16-byte move, not a call to memcpy.
                    out[at..at + QNR].copy_from_slice(row);
                } else {
                    out[at..at + width].copy_from_slice(&row[..width]);
                }
            }
        }
        i += r;
    }
    true
}

/// One tile's requantized bytes (`r` rows, at most `tile_rows(isa)`), on tier `isa`, which
/// the callers have checked the CPU has.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn tile_bytes(
    isa: Int8Isa,
    a: &[i16],
    lda: usize,
    r: usize,
    kp: usize,
    panel: &[i16],
    rq: &ColumnRequant,
    p: usize,
    bytes: &mut [[u8; QNR]; MR_MAX],
) {
    let vector_fixed = matches!(isa, Int8Isa::Avx512Vnni | Int8Isa::Avx512Bw);
    if let Some(fixed) = rq.fixed.as_ref().filter(|_| !vector_fixed) {
        // The fixed-point rule without the AVX-512 tiles (which requantize by it in their
        // store): the tier's sums, then each requantized in integers.
        let mut sums = [[0i32; QNR]; MR_MAX];
        super::tile_sums(isa, a, lda, r, kp, panel, &mut sums);
        let (bias, m) = (
            &rq.bias[p * QNR..(p + 1) * QNR],
            &fixed[p * QNR..(p + 1) * QNR],
        );
        requant_fixed_tile(&sums[..r], bias, m, rq.range, &mut bytes[..r]);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let (a, panel) = (a.as_ptr(), panel.as_ptr());
        // In every arm: the CPU has the tier's features (callers pass a tier it has);
        // `qgemm_requantized_on` checked that the `r` rows of `kp` values at pitch `lda` lie
        // in `a` and that `p` is a panel of `rq`; the panel holds `kp · QNR` values by
        // construction.
        match isa {
            Int8Isa::Avx512Vnni if r >= super::avx512::VNNI_ROWS => {
                // SAFETY: as said above the match (AVX-512F, BW and VNNI present).
                unsafe { super::avx512::vnni::tile_requant(a, lda, r, kp, panel, rq, p, bytes) };
                return;
            }
            Int8Isa::Avx512Vnni | Int8Isa::Avx512Bw => {
                // SAFETY: as said above the match (AVX-512F and BW present; the VNNI tier has them).
                unsafe { super::avx512::bw::tile_requant(a, lda, r, kp, panel, rq, p, bytes) };
                return;
            }
            Int8Isa::Avx2 => {
                // SAFETY: as said above the match (AVX2 present).
                unsafe { super::avx2::tile_requant(a, lda, r, kp, panel, rq, p, bytes) };
                return;
            }
            Int8Isa::Portable => {}
        }
    }
    let _ = isa;
    let mut sums = [[0i32; QNR]; MR_MAX];
    super::portable_tile(a, lda, r, kp, panel, &mut sums);
    let (bias, scale) = rq.panel(p);
    for (row, s) in bytes.iter_mut().zip(&sums).take(r) {
        for j in 0..QNR {
            row[j] = requant_one(s[j], bias[j], scale[j], rq.range);
        }
    }
}

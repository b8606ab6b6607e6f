//! Integer GEMM for quantized layers: 16-bit operands (8-bit values less their zero
//! points), exact int32 sums.
//!
//! `C[i][j] = Σ_k A[i][k] · B[k][j]`, A row-major `i16` rows (each padded with zeros to an
//! even depth, [`QPackedB::depth_padded`]), B packed once into panels of [`QNR`] columns
//! whose K steps are interleaved in pairs, so that one 32-bit lane holds `B[k][j], B[k+1][j]`
//! and AVX2's `vpmaddwd` (i16·i16 pairs summed into i32) multiplies a broadcast pair of A
//! against eight columns at once. Operands are centered 8-bit values (at most 255 in
//! magnitude), so each pair sum is exact and no 16-bit intermediate can saturate.
//!
//! Why not `vpmaddubsw` (u8 × i8, pairs summed into i16 *with saturation*): with
//! activations over all 256 values (u8, or i8 shifted by 128) and int8 weights in
//! [−127, 127], one pair reaches 2·255·127 = 64770 > 32767, and quantized MobileNets can
//! reach it (ReLU6 outputs span the range; each channel's largest weight is ±127). Exact
//! sums then need weights split into two halves of at most ±64 (two `vpmaddubsw` and two
//! `vpmaddwd` per 4 K steps: more instructions than the two `vpmaddwd` here) or 7-bit
//! activations (a bit lost, results off LiteRT). XNNPACK's AVX2 int8 kernels widen to 16
//! bits and use `vpmaddwd` too.
//!
//! The tiers ([`Int8Isa`], chosen once with the f32 kernels' and capped by the same
//! `limit_isa`): AVX2 runs 4×16 tiles, two 256-bit accumulators per row, `vpmaddwd` then
//! `vpaddd`; AVX-512BW 12×16 tiles, one 512-bit accumulator per row (a pair of K steps of a
//! panel is one 512-bit vector), `vpmaddwd` then `vpaddd`; AVX-512 VNNI the same tiles with
//! `vpdpwssd`, which fuses the two (and adds without saturating), for tiles of at least five
//! rows (fewer run the BW tiles: see `avx512::VNNI_ROWS`); the portable tier plain
//! Rust. All read the same packed panels and give the same sums, so the requantized bytes
//! are the same on every tier. AVX-512 VNNI also has `vpdpbusd` (u8 × i8 quads summed
//! into i32, four K steps per instruction, no intermediate saturation): [`quads`] is the
//! byte GEMM on it, B packed as i8 quads ([`QuadPackedB`]) and A as unsigned bytes, the
//! activations' zero point folded into the bias; the layers whose centered weights fit i8
//! run it where the tier has its tile ([`quads_in_use`]) and this pair GEMM elsewhere,
//! with the same bytes. Not written: AVX-VNNI (`vpdpwssd`/`vpdpbusd` on 256-bit registers,
//! CPUs with AVX-VNNI but no AVX-512).
//!
//! [`requant`] holds TFLite's requantization rule applied to the sums; [`fused`] the GEMM
//! that applies it in the tile's store; [`depthwise`] the channels-last depthwise
//! convolution of runs of pixels, read in place, with its requantization.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod channels;
pub mod depthwise;
#[cfg(test)]
mod depthwise_tests;
#[cfg(target_arch = "x86_64")]
mod depthwise_vnni;
#[cfg(target_arch = "x86_64")]
mod depthwise_x86;
#[cfg(target_arch = "x86_64")]
mod fixed_avx512;
#[cfg(test)]
mod fixed_tests;
pub mod fused;
#[cfg(test)]
mod fused_tests;
#[cfg(test)]
mod quad_tests;
pub mod quads;
#[cfg(target_arch = "x86_64")]
mod quads_avx512;
pub mod requant;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tier_tests;

#[cfg(test)]
pub(crate) use channels::requantize_channels;
pub use channels::{center_i8, center_u8, RequantRange};
pub use depthwise::{
    depthwise_pixels, depthwise_pixels_on, depthwise_rows, depthwise_rows_on, DwGeometry, DwLayer,
    DwWeights,
};
pub use fused::{qgemm_requantized, qgemm_requantized_on, ColumnRequant};
pub use quads::{
    has_quad_tile, quad_at, quad_gemm_requantized, quad_gemm_requantized_on, quad_gemm_sums,
    quad_gemm_sums_on, quads_in_use, QuadPackedB, QUAD_ROWS,
};
pub use requant::{
    accumulate_taps, requant_fixed_one, requant_scale, requantize_f32, requantize_fixed,
    FloatRequant,
};

/// Columns per packed panel of B (two AVX2 vectors of eight int32 sums).
pub const QNR: usize = 16;
/// Rows of A per micro-tile of the AVX2 and portable tiers (the AVX-512 tiers take
/// [`MR_MAX`]); callers that hand the GEMM a few rows at a time use it as their row block.
pub const QMR: usize = 4;
/// The most rows of A any tier's micro-tile takes (the AVX-512 tiers'): the length of a
/// tile's row array.
pub const MR_MAX: usize = 12;

pub use crate::isa::Int8Isa;

/// Rows of A per micro-tile of [`qgemm_requantized`] on the tier in use (callers weigh how
/// to share a GEMM between threads by whole tiles).
pub fn pair_tile_rows() -> usize {
    tile_rows(crate::isa::int8_in_use())
}

/// Rows of A per micro-tile on tier `isa`.
#[inline]
fn tile_rows(isa: Int8Isa) -> usize {
    match isa {
        Int8Isa::Avx512Vnni | Int8Isa::Avx512Bw => MR_MAX,
        Int8Isa::Avx2 | Int8Isa::Portable => QMR,
    }
}

/// B (`depth × cols`, values fitting in i16) packed for [`qgemm`]: panels of [`QNR`]
/// columns, zero-padded, each `depth_padded / 2` pairs of K steps of `2·QNR` values.
#[derive(Debug, Clone)]
pub struct QPackedB {
    data: Vec<i16>,
    depth: usize,
    cols: usize,
}

impl QPackedB {
    /// Pack `b(k, j)` for `k < depth`, `j < cols`. `None` when the packed size overflows or
    /// cannot be allocated.
    pub fn pack(depth: usize, cols: usize, b: impl Fn(usize, usize) -> i16) -> Option<QPackedB> {
        let kp = depth.checked_add(1)? / 2 * 2;
        let panels = cols.div_ceil(QNR);
        let len = panels.checked_mul(kp)?.checked_mul(QNR)?;
        let mut data = Vec::new();
        data.try_reserve_exact(len).ok()?;
        data.resize(len, 0);
        for p in 0..panels {
            let panel = &mut data[p * kp * QNR..(p + 1) * kp * QNR];
            for k in 0..depth {
                for jj in 0..QNR {
                    let j = p * QNR + jj;
                    if j < cols {
                        panel[packed_at(k, jj)] = b(k, j);
                    }
                }
            }
        }
        Some(QPackedB { data, depth, cols })
    }

    /// An all-zero B of `depth × cols`, to be filled panel by panel ([`QPackedB::panels_mut`],
    /// [`packed_at`]): the per-execution operand (an input) of a GEMM whose A is constant.
    /// `None` when the size overflows or cannot be allocated.
    pub fn zeroed(depth: usize, cols: usize) -> Option<QPackedB> {
        let mut b = QPackedB {
            data: Vec::new(),
            depth: 0,
            cols: 0,
        };
        b.reshape(depth, cols).then_some(b)
    }

    /// Make this B `depth × cols`, keeping its allocation where it is large enough. The
    /// values are unspecified until filled (the K padding is zeroed). `false` when the size
    /// overflows or cannot be allocated.
    pub fn reshape(&mut self, depth: usize, cols: usize) -> bool {
        let Some(kp) = depth.checked_add(1).map(|d| d / 2 * 2) else {
            return false;
        };
        let Some(len) = cols
            .div_ceil(QNR)
            .checked_mul(kp)
            .and_then(|v| v.checked_mul(QNR))
        else {
            return false;
        };
        if len > self.data.len() && self.data.try_reserve_exact(len - self.data.len()).is_err() {
            return false;
        }
        self.data.resize(len, 0);
        self.depth = depth;
        self.cols = cols;
        if depth % 2 == 1 {
            // The odd K step's partner is a zero row.
            let size = kp * QNR;
            for panel in self.data.chunks_exact_mut(size) {
                for jj in 0..QNR {
                    panel[packed_at(depth, jj)] = 0;
                }
            }
        }
        true
    }

    /// The values of one panel ([`QPackedB::panel_len`] of them, [`packed_at`] indexes
    /// them), for filling panels in parallel.
    pub fn panels_mut(&mut self) -> &mut [i16] {
        &mut self.data
    }

    /// The length of one panel: `depth_padded · QNR`.
    pub fn panel_len(&self) -> usize {
        self.depth_padded() * QNR
    }

    /// The depth K.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The depth rounded up to even: the length every row of A must have (zeros past K).
    pub fn depth_padded(&self) -> usize {
        self.depth.div_ceil(2) * 2
    }

    /// The number of columns N.
    pub fn cols(&self) -> usize {
        self.cols
    }

    fn panel(&self, p: usize) -> &[i16] {
        let size = self.depth_padded() * QNR;
        &self.data[p * size..(p + 1) * size]
    }
}

/// Where `B[k][p·QNR + jj]` lies inside panel `p`.
#[inline]
pub fn packed_at(k: usize, jj: usize) -> usize {
    (k / 2) * 2 * QNR + 2 * jj + k % 2
}

/// `C[i·ldc + j] = Σ_k A[i·lda + k] · B[k][j]` for `i < rows`, `j < b.cols()`. Each row of A
/// holds `b.depth_padded()` values (zeros past the depth). Returns `false`, computing
/// nothing, when a slice is too short or `lda` shorter than the padded depth.
pub fn qgemm(a: &[i16], lda: usize, rows: usize, b: &QPackedB, c: &mut [i32], ldc: usize) -> bool {
    qgemm_on(crate::isa::int8_in_use(), a, lda, rows, b, c, ldc)
}

/// [`qgemm`] on the tier `isa` rather than the process's: for tests and A/B timings of the
/// tiers in one process. Returns `false`, computing nothing, also when this CPU lacks `isa`.
pub fn qgemm_on(
    isa: Int8Isa,
    a: &[i16],
    lda: usize,
    rows: usize,
    b: &QPackedB,
    c: &mut [i32],
    ldc: usize,
) -> bool {
    if !isa.available() || !fits(a, lda, rows, b, c.len(), ldc, b.cols) {
        return false;
    }
    for p in 0..b.cols.div_ceil(QNR) {
        let j0 = p * QNR;
        panel_sums(isa, a, lda, rows, b, p, &mut c[j0..], ldc);
    }
    true
}

/// [`qgemm`] for the columns of panel `p` only (`p·QNR ..`, at most [`QNR`]), written from
/// `c[0]`: `c[i·ldc + jj] = Σ_k A[i][k] · B[k][p·QNR + jj]`. Lets threads share the panels.
pub fn qgemm_panel(
    a: &[i16],
    lda: usize,
    rows: usize,
    b: &QPackedB,
    p: usize,
    c: &mut [i32],
    ldc: usize,
) -> bool {
    let width = b.cols.saturating_sub(p.saturating_mul(QNR)).min(QNR);
    if width == 0 || !fits(a, lda, rows, b, c.len(), ldc, width) {
        return false;
    }
    panel_sums(crate::isa::int8_in_use(), a, lda, rows, b, p, c, ldc);
    true
}

fn fits(
    a: &[i16],
    lda: usize,
    rows: usize,
    b: &QPackedB,
    c_len: usize,
    ldc: usize,
    n: usize,
) -> bool {
    if rows == 0 || n == 0 {
        return true;
    }
    let kp = b.depth_padded();
    let a_need = (rows - 1).checked_mul(lda).and_then(|v| v.checked_add(kp));
    let c_need = (rows - 1).checked_mul(ldc).and_then(|v| v.checked_add(n));
    matches!((a_need, c_need), (Some(an), Some(cn)) if an <= a.len() && cn <= c_len && lda >= kp && ldc >= n)
}

/// The checked body of [`qgemm_panel`], on tier `isa` (one the CPU has).
#[allow(clippy::too_many_arguments)]
fn panel_sums(
    isa: Int8Isa,
    a: &[i16],
    lda: usize,
    rows: usize,
    b: &QPackedB,
    p: usize,
    c: &mut [i32],
    ldc: usize,
) {
    let kp = b.depth_padded();
    let panel = b.panel(p);
    let width = (b.cols - p * QNR).min(QNR);
    let step = tile_rows(isa);
    let mut tile = [[0i32; QNR]; MR_MAX];
    let mut i = 0;
    while i < rows {
        let r = (rows - i).min(step);
        tile_sums(isa, &a[i * lda..], lda, r, kp, panel, &mut tile);
        for (rr, sums) in tile.iter().enumerate().take(r) {
            let at = (i + rr) * ldc;
            c[at..at + width].copy_from_slice(&sums[..width]);
        }
        i += r;
    }
}

/// The sums of `r` rows of A (from `a`, pitch `lda`, `kp` values each; `r` at most
/// `tile_rows(isa)`) against one panel, on tier `isa`, which the callers have checked the
/// CPU has ([`Int8Isa::available`], or the tier in use).
#[inline]
fn tile_sums(
    isa: Int8Isa,
    a: &[i16],
    lda: usize,
    r: usize,
    kp: usize,
    panel: &[i16],
    tile: &mut [[i32; QNR]; MR_MAX],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let (a, panel) = (a.as_ptr(), panel.as_ptr());
        // In every arm: the CPU has the tier's features (callers pass a tier it has); the
        // entry points checked that the `r` rows of `kp` values at pitch `lda` lie in `a`,
        // and the panel holds `kp · QNR` values by construction.
        match isa {
            Int8Isa::Avx512Vnni if r >= avx512::VNNI_ROWS => {
                // SAFETY: as said above the match (AVX-512F, BW and VNNI present).
                unsafe { avx512::vnni::tile(a, lda, r, kp, panel, tile) };
                return;
            }
            Int8Isa::Avx512Vnni | Int8Isa::Avx512Bw => {
                // SAFETY: as said above the match (AVX-512F and BW present; the VNNI tier has them).
                unsafe { avx512::bw::tile(a, lda, r, kp, panel, tile) };
                return;
            }
            Int8Isa::Avx2 => {
                // SAFETY: as said above the match (AVX2 present).
                unsafe { avx2::tile(a, lda, r, kp, panel, tile) };
                return;
            }
            Int8Isa::Portable => {}
        }
    }
    let _ = isa;
    portable_tile(a, lda, r, kp, panel, tile);
}

/// The portable micro-tile: the same sums, pair by pair.
fn portable_tile(
    a: &[i16],
    lda: usize,
    r: usize,
    kp: usize,
    panel: &[i16],
    tile: &mut [[i32; QNR]; MR_MAX],
) {
    for (rr, sums) in tile.iter_mut().enumerate().take(r) {
        sums.fill(0);
        let row = &a[rr * lda..rr * lda + kp];
        for (pair, bs) in row.chunks_exact(2).zip(panel.chunks_exact(2 * QNR)) {
            let (x0, x1) = (i32::from(pair[0]), i32::from(pair[1]));
            for (j, s) in sums.iter_mut().enumerate() {
                *s += x0 * i32::from(bs[2 * j]) + x1 * i32::from(bs[2 * j + 1]);
            }
        }
    }
}

//! Every `unsafe` block of CpuAcc lives here: the AVX-512 and AVX2+FMA SGEMM micro-kernels,
//! the in-register transposes and row kernels of the channels-last paths, the depthwise rows
//! kernels (`simd/depthwise_rows.rs`), the Winograd transforms (`simd/winograd.rs`), the
//! in-place Relu/Clip/LeakyRelu, and the target-feature wrappers that compile the crate's
//! safe, autovectorizable kernel bodies with AVX-512 or AVX2 enabled ("multiversioning").
//!
//! A pitfall of the compiled bodies: a select that keeps the value it read (`*o = if v < 0
//! { 0 } else { *o }`, in place) compiles to a masked store of the changed lanes
//! (`vmaskmovps`), which AMD's CPUs run at a fraction of a plain store's speed; such loops
//! are written as explicit vector code or through `f32::max`/`min` instead.
//!
//! The rules that make the `unsafe` sound:
//!
//! * An AVX2 function is only called after [`has_avx2_fma`] returned true on this machine.
//! * The micro-kernel's public entry point, [`microkernel`], checks every slice length it
//!   relies on before calling the raw-pointer kernel and returns `false` instead of running
//!   when a precondition does not hold.
//! * The multiversioned wrappers take and forward only safe references: the `unsafe` is the
//!   call into a `#[target_feature]` function, nothing else.
#![allow(unsafe_code)]

pub(crate) mod channel_lanes;
pub(crate) mod depthwise_rows;
#[cfg(target_arch = "x86_64")]
mod nhwc_depthwise;
mod winograd;

use crate::act::Activation;

/// Rows of the micro-kernel's output tile (and of a packed A panel): twelve, so the AVX-512
/// tile does 24 FMAs per two B loads and twelve broadcasts (the AVX2 kernel runs it as two
/// six-row halves).
pub const MR: usize = 12;
/// Rows of one AVX2 tile, and the step at which a tile may start inside a packed A panel
/// (see [`microkernel_rows`]).
pub const ROW_STEP: usize = 6;
const AVX2_ROWS: usize = ROW_STEP;
/// Columns of the micro-kernel's output tile (and of a packed B panel): two AVX-512
/// registers, or two AVX2 6×16 half-tiles.
pub const NR: usize = 32;
/// Columns of one AVX2 half-tile.
pub(crate) const HALF: usize = 16;

/// Which micro-kernel family runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 12×32 tiles in AVX-512F registers.
    Avx512,
    /// 6×16 tiles in AVX2+FMA registers.
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Isa {
    /// The name shown by benchmarks and `backplane inspect`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512f",
            Isa::Avx2 => "avx2+fma",
            Isa::Portable => "portable",
        }
    }

    /// True when this CPU can run the family.
    pub fn available(self) -> bool {
        match self {
            Isa::Avx512 => detect_avx512(),
            Isa::Avx2 => has_avx2_fma(),
            Isa::Portable => true,
        }
    }
}

/// The best family this CPU runs, unless `BACKPLANE_CPUACC_ISA` (`avx2` or `portable`) asks for
/// a lesser one, for A/B measurements. Read once.
pub fn isa_in_use() -> Isa {
    static CHOSEN: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let best = [Isa::Avx512, Isa::Avx2, Isa::Portable]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Portable);
        let asked = match std::env::var("BACKPLANE_CPUACC_ISA").as_deref() {
            Ok("avx2") => Some(Isa::Avx2),
            Ok("portable") => Some(Isa::Portable),
            _ => None,
        };
        match asked {
            Some(i) if i.available() && best != Isa::Portable => i,
            _ => best,
        }
    })
}

fn detect_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && has_avx2_fma()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// True when the AVX-512 micro-kernel runs (AVX-512F present and not switched off).
#[inline]
pub fn has_avx512() -> bool {
    isa_in_use() == Isa::Avx512
}

/// True when AVX2+FMA code may run: the CPU has it (AVX-512 implies it) and
/// `BACKPLANE_CPUACC_ISA` does not ask for the portable code.
#[inline]
pub fn avx2_in_use() -> bool {
    isa_in_use() != Isa::Portable && has_avx2_fma()
}

/// Which micro-kernel runs, for display.
pub fn isa() -> &'static str {
    isa_in_use().name()
}

/// True when this CPU has AVX2 and FMA (checked once; the standard library caches it).
#[inline]
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// What the micro-kernel does with its accumulated `A·B` tile before storing it.
#[derive(Debug, Clone, Copy)]
pub struct TileEpilogue<'a> {
    /// Add the tile's current contents (earlier K blocks, or a pre-filled C).
    pub accumulate: bool,
    /// Scale of the product.
    pub alpha: f32,
    /// Per-row bias (one value per tile row), added when `last`.
    pub row_bias: Option<&'a [f32]>,
    /// Per-column bias (at least `nr` values), added when `last`.
    pub col_bias: Option<&'a [f32]>,
    /// This is the last K block: add biases and apply the activation.
    pub last: bool,
    /// Activation applied when `last` (only the in-register ones: see
    /// [`Activation::in_kernel`]; others are applied by the caller afterwards).
    pub act: Activation,
}

/// C[0..mr, 0..nr] (row stride `ldc`) = epilogue(A_panel · B_panel) for packed panels of depth
/// `kc` (`a`: kc×MR, `b`: kc×NR). Returns false, computing nothing, when a slice is too short
/// or `mr`/`nr` exceed the tile.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn microkernel(
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) -> bool {
    microkernel_on(isa_in_use(), kc, a, 0, b, c, ldc, mr, nr, ep)
}

/// [`microkernel`] for rows `row0 .. row0 + mr` of the packed A panel `a`, so that a range of
/// C's rows split between threads need not start on a panel boundary. `row0` must be a
/// multiple of [`ROW_STEP`] and `row0 + mr` at most MR (else false, computing nothing).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn microkernel_rows(
    kc: usize,
    a: &[f32],
    row0: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) -> bool {
    microkernel_on(isa_in_use(), kc, a, row0, b, c, ldc, mr, nr, ep)
}

/// True when [`tiles_strided`] runs (AVX2 without AVX-512: with AVX-512 the SGEMM's packing
/// of A transposes in registers and its 12×32 tile is faster).
#[inline]
pub fn strided_tiles() -> bool {
    avx2_in_use() && !has_avx512()
}

/// Most columns [`tiles_strided`] takes at once (with more than 16, a 3×24 tile runs).
pub const WIDE: usize = 24;

/// How the two 16-column halves of a packed B panel lie (`gemm::Packed::with_halves`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halves {
    /// Side by side: K step `k` holds the panel's 32 values at `k·NR` (the packed layout
    /// every kernel reads).
    Interleaved,
    /// One after the other: the first half's K steps 16 floats apart, then the second's.
    /// A 16-column tile's weights are then one run of `kc·16` floats, all of L1's sets,
    /// where the interleaved half (every other 64-byte line) maps to half of them and
    /// loses its lines to A's rows: the tiles reading A in place, at large K.
    Split,
}

impl Halves {
    /// Floats between a half's K steps.
    pub fn k_step(self) -> usize {
        match self {
            Halves::Interleaved => NR,
            Halves::Split => HALF,
        }
    }

    /// Where the half from column `h` (0 or 16) starts in a panel `kc` deep.
    pub fn start(self, kc: usize, h: usize) -> usize {
        match self {
            Halves::Interleaved => h,
            Halves::Split => h * kc,
        }
    }

    /// The `prefetch` offset for [`tiles_strided`] over the half from column `h` (0 or 16)
    /// of a packed B panel, K blocks `kc` deep: the half that comes next in memory (the
    /// panels of a K block, and the blocks, lie one after another).
    pub fn next(self, kc: usize, h: usize) -> usize {
        match self {
            Halves::Interleaved => kc * NR + (h / HALF) * kc * HALF - h,
            Halves::Split => kc * HALF,
        }
    }
}

/// `rows` rows of `C = A·B`, six at a time, with A read where it lies: C's rows `r < rows`
/// (`ldc` apart) and columns `< nr` (1..=16, or up to [`WIDE`] from a panel's start) get the
/// epilogue of the product of A's rows (`a[r·lda..]`, `kc` values each) and the columns of a
/// packed B panel whose half `b` starts (laid out as `halves` says). The channels-last pointwise
/// convolution's tiles: its A is the input, pixels as rows. While the first tile runs, `kc`
/// cache lines from `prefetch` floats past `b`'s start on (64 bytes apart) are fetched into
/// L2: a hint only, never read, so it may lie past `b`'s end (0 when nothing is worth
/// fetching). Returns false, computing nothing, without AVX2 ([`strided_tiles`]) or when a
/// slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn tiles_strided(
    kc: usize,
    a: &[f32],
    lda: usize,
    rows: usize,
    (b, halves): (&[f32], Halves),
    c: &mut [f32],
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
    prefetch: usize,
) -> bool {
    if rows == 0 {
        return true;
    }
    let (bs, upper) = (halves.k_step(), halves.start(kc, HALF));
    // The furthest B value read: the first half's last K step, and with more than 16
    // columns the upper half's first eight there too.
    let b_need = match nr > HALF {
        true => upper + (kc - 1) * bs + 8,
        false => (kc - 1) * bs + HALF,
    };
    let ok = (1..=WIDE).contains(&nr)
        && kc >= 1
        && (nr <= ldc || rows == 1)
        && a.len() >= (rows - 1) * lda + kc
        && b.len() >= b_need
        && c.len() >= (rows - 1) * ldc + nr
        && ep.row_bias.is_none()
        && !matches!(ep.col_bias, Some(r) if r.len() < nr);
    if !ok || !strided_tiles() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: AVX2 and FMA are present (`strided_tiles`); rows r < rows of A hold kc
        // floats at r·lda (checked: (rows-1)·lda + kc <= a.len()), and a tile's rows past
        // its last re-read that row; the kernels read b[k·bs .. k·bs + 16] for k < kc, and
        // when nr > 16 b[upper + k·bs .. + 8] too, inside `b` (b_need, checked); they
        // touch c[r·ldc .. r·ldc + nr] for
        // r < rows only, inside `c`; there is no row bias and the column bias holds nr
        // values; 1 <= nr <= 24 was checked; `prefetch` is only prefetched (never faults).
        unsafe {
            avx2::column_strided(
                kc,
                a.as_ptr(),
                lda,
                rows,
                b.as_ptr(),
                (bs, upper),
                c.as_mut_ptr(),
                ldc,
                nr,
                ep,
                b.as_ptr().wrapping_add(prefetch),
            );
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`tiles_strided`] with A's K steps at offsets: A's row r holds, at step k, the value
/// `a[r·lda + offs[k]]` (a convolution's window read in place from a padded input: rows are
/// output pixels `lda` = stride apart, steps are taps and channels). Returns false,
/// computing nothing, without AVX2 ([`strided_tiles`]) or when a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn tiles_offsets(
    kc: usize,
    a: &[f32],
    lda: usize,
    offs: &[usize],
    rows: usize,
    (b, halves): (&[f32], Halves),
    c: &mut [f32],
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) -> bool {
    if rows == 0 {
        return true;
    }
    let bs = halves.k_step();
    let furthest = offs.get(..kc).and_then(|o| o.iter().max()).copied();
    let ok = (1..=HALF).contains(&nr)
        && kc >= 1
        && (nr <= ldc || rows == 1)
        && furthest.is_some_and(|f| (rows - 1) * lda + f < a.len())
        && b.len() >= (kc - 1) * bs + HALF
        && c.len() >= (rows - 1) * ldc + nr
        && ep.row_bias.is_none()
        && !matches!(ep.col_bias, Some(r) if r.len() < nr);
    if !ok || !strided_tiles() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: AVX2 and FMA are present (`strided_tiles`); `offs` holds kc values, and
        // for every row r < rows and step k < kc, r·lda + offs[k] <= (rows-1)·lda + the
        // largest offset < a.len() (checked), a tile's rows past its last re-reading that
        // row; the kernel reads b[k·bs .. k·bs + 16] for k < kc, inside `b`; it touches
        // c[r·ldc .. r·ldc + nr] for r < rows only, inside `c`; there is no row bias and
        // the column bias holds nr values; 1 <= nr <= 16 was checked.
        unsafe {
            avx2::column_offsets(
                kc,
                a.as_ptr(),
                lda,
                offs.as_ptr(),
                rows,
                b.as_ptr(),
                bs,
                c.as_mut_ptr(),
                ldc,
                nr,
                ep,
            );
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Where B's rows start for [`microkernel_in_place`], with the furthest start worked out once
/// (not per tile: with 147 rows the scan cost a tenth of a tile).
#[derive(Debug, Clone, Copy)]
pub struct InPlaceRows<'a> {
    offs: &'a [usize],
    last: Option<usize>,
}

impl<'a> InPlaceRows<'a> {
    /// B row `t` starts at offset `offs[t]`.
    pub fn new(offs: &'a [usize]) -> Self {
        InPlaceRows {
            offs,
            last: offs.iter().max().copied(),
        }
    }
}

/// One tile of a convolution computed with B read in place (see `crate::direct`):
/// `C[0..mr, 0..nr] (row stride ldc) = epilogue(A_panel · B)` where B's row `t` is
/// `x[offs[t]..offs[t] + nr]` (`rows`) and `a` is a packed A panel of depth `offs.len()`, its
/// rows `row0 .. row0 + mr` taken (so that threads can split a panel's rows). AVX-512, or
/// AVX2 with `row0` a multiple of [`ROW_STEP`]: returns false, computing nothing, otherwise
/// or when a slice is too short or `mr`/`nr`/`row0 + mr` exceed the tile.
#[allow(clippy::too_many_arguments)]
pub fn microkernel_in_place(
    a: &[f32],
    row0: usize,
    x: &[f32],
    rows: &InPlaceRows<'_>,
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) -> bool {
    let offs = rows.offs;
    let reach = rows.last.and_then(|m| m.checked_add(nr));
    let ok = (1..=MR).contains(&mr)
        && row0 + mr <= MR
        && (1..=NR).contains(&nr)
        && (nr <= ldc || mr == 1)
        && reach.is_some_and(|r| r <= x.len())
        && offs.len().checked_mul(MR).is_some_and(|n| n <= a.len())
        && c.len() >= (mr - 1) * ldc + nr
        && !matches!(ep.row_bias, Some(r) if r.len() < mr)
        && !matches!(ep.col_bias, Some(r) if r.len() < nr);
    if !ok {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: AVX-512F is present (checked). The kernel reads a[row0 + t*MR + r] for
        // t < offs.len() and r < mr, row0 + mr <= MR, inside `a` (offs.len()·MR floats); x[offs[t] + j] for j < nr only
        // (masked loads), inside `x` as offs[t] + nr <= x.len(); for each row r < mr it
        // touches c[r*ldc .. r*ldc + nr] only, inside `c`; the bias slices hold mr and nr
        // values; 1 <= mr <= MR and 1 <= nr <= NR (all checked above).
        unsafe {
            avx512::kernel_in_place(
                a.as_ptr().add(row0),
                x.as_ptr(),
                offs,
                c.as_mut_ptr(),
                ldc,
                mr,
                nr,
                ep,
            )
        };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() && row0.is_multiple_of(ROW_STEP) {
        let last = rows.last.unwrap_or(0);
        // Six-row halves (the second only when there are more than six rows) by 16-column
        // halves (the second only when there are more than 16 columns), as `microkernel`.
        for (r0, h) in [0, AVX2_ROWS]
            .map(|r| [(r, 0), (r, HALF)])
            .into_iter()
            .flatten()
        {
            let (rows, w) = (
                mr.saturating_sub(r0).min(AVX2_ROWS),
                nr.saturating_sub(h).min(HALF),
            );
            if rows == 0 || w == 0 {
                continue;
            }
            let half_ep = TileEpilogue {
                row_bias: ep.row_bias.map(|rb| &rb[r0..]),
                col_bias: ep.col_bias.map(|cb| &cb[h..]),
                ..*ep
            };
            // Whole vectors past the run's w columns are read only where x has them.
            let wide = last + h + HALF <= x.len();
            // SAFETY: AVX2 and FMA are present (checked). The kernel reads, per k step t,
            // a[row0 + r0 + t·MR .. + 6] (row0 and r0 are multiples of 6 and row0 + r0 <
            // row0 + mr <= MR, so row0 + r0 + 6 <= MR; `a` holds offs.len()·MR floats) and
            // x[offs[t] + h ..] for w floats (offs[t] + h + w <= last + nr <= x.len()), or
            // 16 when `wide` (checked just above); for each row r < rows it touches
            // c[(r0+r)·ldc + h .. + w] only, inside `c` as r0 + rows <= mr, h + w <= nr and
            // c.len() >= (mr-1)·ldc + nr; the row bias, offset by r0, holds `rows` values and
            // the column bias, offset by h, at least w (all checked above).
            unsafe {
                avx2::kernel_in_place_6x16(
                    a.as_ptr().add(row0 + r0),
                    x.as_ptr(),
                    offs,
                    h,
                    wide,
                    c.as_mut_ptr().add(r0 * ldc + h),
                    ldc,
                    rows,
                    w,
                    &half_ep,
                )
            };
        }
        return true;
    }
    false
}

/// [`microkernel`] on a given family (falling back to the portable one where the CPU lacks
/// it), so tests can check each family this CPU has against the portable kernel.
#[allow(clippy::too_many_arguments)]
#[inline]
fn microkernel_on(
    isa: Isa,
    kc: usize,
    a: &[f32],
    row0: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) -> bool {
    if mr == 0 || nr == 0 {
        return true;
    }
    let c_need = (mr - 1) * ldc + nr;
    let ok = row0.is_multiple_of(ROW_STEP)
        && row0 + mr <= MR
        && nr <= NR
        && (nr <= ldc || mr == 1)
        && a.len() >= kc * MR
        && b.len() >= kc * NR
        && c.len() >= c_need
        && !matches!(ep.row_bias, Some(r) if r.len() < mr)
        && !matches!(ep.col_bias, Some(r) if r.len() < nr);
    if !ok {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.available() {
        // SAFETY: AVX-512F is present (checked). `a` holds kc*MR and `b` kc*NR values, and
        // the kernel reads a[i*MR + row0 + r] for r < mr with row0 + mr <= MR, so every load
        // of the k loop is in bounds; for each row r < mr the kernel touches
        // c[r*ldc .. r*ldc + nr] only (masked loads/stores), within `c` because
        // c.len() >= (mr-1)*ldc + nr; the bias slices were checked to hold mr and nr values;
        // 1 <= mr and 1 <= nr <= NR were checked.
        unsafe {
            let a = a.as_ptr().add(row0);
            avx512::kernel(kc, a, b.as_ptr(), c.as_mut_ptr(), ldc, mr, nr, ep);
        }
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable && has_avx2_fma() {
        // Six-row halves (the second only when there are more than six rows) by 16-column
        // halves (the second only when there are more than 16 columns).
        for (r0, h) in [0, AVX2_ROWS]
            .map(|r| [(r, 0), (r, HALF)])
            .into_iter()
            .flatten()
        {
            let (rows, w) = (
                mr.saturating_sub(r0).min(AVX2_ROWS),
                nr.saturating_sub(h).min(HALF),
            );
            if rows == 0 || w == 0 {
                continue;
            }
            let half_ep = TileEpilogue {
                row_bias: ep.row_bias.map(|rb| &rb[r0..]),
                col_bias: ep.col_bias.map(|cb| &cb[h..]),
                ..*ep
            };
            // SAFETY: AVX2 and FMA are present (checked above). The kernel reads, per k step,
            // a[row0+r0 .. row0+r0+6] of a kc×MR panel (`a` holds kc*MR values; row0 and r0
            // are multiples of 6 and row0 + r0 < row0 + mr <= MR, so row0 + r0 + 6 <= MR) and
            // b[h .. h+16] of a kc×NR panel (`b` holds kc*NR values and h + 16 <= NR); for
            // each row r < rows it touches c[(r0+r)*ldc + h .. + w] only (masked for w < 16),
            // within `c` because r0 + rows <= mr, h + w <= nr and c.len() >= (mr-1)*ldc + nr;
            // the row bias, offset by r0, holds `rows` values and the column bias, offset by
            // h, at least w.
            unsafe {
                let (a, b, c) = (
                    a.as_ptr().add(row0 + r0),
                    b.as_ptr().add(h),
                    c.as_mut_ptr().add(r0 * ldc + h),
                );
                // A half of fewer than six rows (a product's last rows) computes just those:
                // row r's K steps at a + r + k·MR.
                if rows < AVX2_ROWS {
                    avx2::kernel_rows(rows, kc, a, (1, MR), b, NR, c, ldc, w, &half_ep);
                } else {
                    avx2::kernel_6x16(kc, a, b, c, ldc, rows, w, &half_ep);
                }
            }
        }
        return true;
    }
    let _ = isa;
    portable_kernel(kc, a, row0, b, c, ldc, mr, nr, ep);
    true
}

/// The portable micro-kernel: the same contract as the AVX2 one, in plain Rust.
#[allow(clippy::too_many_arguments)]
fn portable_kernel(
    kc: usize,
    a: &[f32],
    row0: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) {
    let mut acc = [[0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        for (row, &av) in acc.iter_mut().zip(&ap[row0..]) {
            for (o, &bv) in row.iter_mut().zip(bp) {
                *o = av.mul_add(bv, *o);
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(mr) {
        let out = &mut c[r * ldc..r * ldc + nr];
        let rb = ep.row_bias.map_or(0.0, |b| b[r]);
        for (j, (o, &v)) in out.iter_mut().zip(row.iter()).enumerate() {
            let mut x = v * ep.alpha;
            if ep.accumulate {
                x += *o;
            }
            if ep.last {
                x += rb + ep.col_bias.map_or(0.0, |b| b[j]);
                x = ep.act.apply_simple(x);
            }
            *o = x;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{TileEpilogue, HALF, MR, NR};
    use crate::act::Activation;
    use std::arch::x86_64::*;

    /// An in-kernel activation (see [`Activation::in_kernel`]) with its constants in
    /// registers: the AVX2 twin of the AVX-512 kernels' `Act512`, shared by the AVX2 kernels
    /// that store through it.
    #[derive(Clone, Copy)]
    pub(super) struct Act256 {
        act: Activation,
        lo: __m256,
        hi: __m256,
        slope: __m256,
    }

    impl Act256 {
        /// The constants of `act`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn new(act: Activation) -> Self {
            let (lo, hi, slope) = match act {
                Activation::Clip { min, max } => (min, max, 0.0),
                Activation::LeakyRelu { alpha } => (0.0, 0.0, alpha),
                _ => (0.0, 0.0, 0.0),
            };
            Act256 {
                act,
                lo: _mm256_set1_ps(lo),
                hi: _mm256_set1_ps(hi),
                slope: _mm256_set1_ps(slope),
            }
        }

        /// `act(v)` lane by lane; activations not computed in kernels pass `v` through.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn apply(&self, v: __m256) -> __m256 {
            let z = _mm256_setzero_ps();
            match self.act {
                // max(0, v) returns v when v is NaN, so NaN propagates like CpuRef's.
                Activation::Relu => _mm256_max_ps(z, v),
                Activation::Clip { .. } => _mm256_min_ps(self.hi, _mm256_max_ps(self.lo, v)),
                Activation::LeakyRelu { .. } => {
                    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, z);
                    _mm256_blendv_ps(v, _mm256_mul_ps(v, self.slope), neg)
                }
                _ => v,
            }
        }
    }

    /// `y[i] = act(y[i])` for an in-kernel activation, whole vectors stored. Safety: AVX2
    /// and FMA present.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn act_in_place(act: Activation, y: &mut [f32]) {
        let a = Act256::new(act);
        let mut blocks = y.chunks_exact_mut(8);
        match act {
            // LeakyRelu as max(v, 0) + α·min(v, 0) (the same values for a finite α, NaN
            // kept): its select form, stored back where `v` came from, is compiled into a
            // masked store of the negative lanes.
            Activation::LeakyRelu { alpha } if alpha.is_finite() => {
                let (z, slope) = (_mm256_setzero_ps(), _mm256_set1_ps(alpha));
                for b in &mut blocks {
                    // SAFETY: the chunk holds eight floats.
                    unsafe {
                        let v = _mm256_loadu_ps(b.as_ptr());
                        let neg = _mm256_mul_ps(slope, _mm256_min_ps(z, v));
                        _mm256_storeu_ps(b.as_mut_ptr(), _mm256_add_ps(_mm256_max_ps(z, v), neg));
                    }
                }
            }
            _ => {
                for b in &mut blocks {
                    // SAFETY: the chunk holds eight floats.
                    unsafe {
                        _mm256_storeu_ps(b.as_mut_ptr(), a.apply(_mm256_loadu_ps(b.as_ptr())))
                    };
                }
            }
        }
        for o in blocks.into_remainder() {
            *o = act.apply_simple(*o);
        }
    }

    /// The 6×16 AVX2 tile with B read in place (see `crate::direct`): k step `t`'s sixteen
    /// B values start at `x + offs[t] + h`; `a` steps by MR. Safety: AVX2+FMA present; `a`
    /// readable for 6 floats at each of offs.len() steps of MR; `x + offs[t] + h` readable for
    /// `nr` floats for every t, and for 16 when `wide` is set; C and the biases as for
    /// [`store_6x16`] (mr <= 6, nr <= 16).
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_in_place_6x16(
        mut a: *const f32,
        x: *const f32,
        offs: &[usize],
        h: usize,
        wide: bool,
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let z = _mm256_setzero_ps();
        let mut acc = [(z, z); 6];
        for &off in offs {
            let b = x.add(off + h);
            let (b0, b1) = if wide {
                (_mm256_loadu_ps(b), _mm256_loadu_ps(b.add(8)))
            } else {
                // The last columns of the input: only nr floats may be read.
                let mut run = [0f32; 16];
                std::ptr::copy_nonoverlapping(b, run.as_mut_ptr(), nr);
                (
                    _mm256_loadu_ps(run.as_ptr()),
                    _mm256_loadu_ps(run.as_ptr().add(8)),
                )
            };
            for (r, (v0, v1)) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r));
                *v0 = _mm256_fmadd_ps(av, b0, *v0);
                *v1 = _mm256_fmadd_ps(av, b1, *v1);
            }
            a = a.add(MR);
        }
        store_6x16(acc, c, ldc, mr, nr, ep);
    }

    /// Lane masks: `MASKS[8 - n..16 - n]` enables the first `n` lanes.
    static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

    #[inline(always)]
    unsafe fn mask(n: usize) -> __m256i {
        // SAFETY (caller): n <= 8, so 8 - n .. 16 - n lies within MASKS.
        _mm256_loadu_si256(MASKS.as_ptr().add(8 - n) as *const __m256i)
    }

    /// The 6×16 AVX2 tile (a quarter of a 12-row A panel by 32-column B panel, whose k steps
    /// are MR and NR apart). Safety: AVX2+FMA present; `a` readable for 6 floats at each of
    /// kc steps of MR, `b` for 16 floats at each of kc steps of NR; rows r < mr of `c`
    /// readable and writable for nr floats at c + r*ldc; biases readable for mr (row) and nr
    /// (column) floats; mr <= 6, nr <= 16.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_6x16(
        kc: usize,
        mut a: *const f32,
        mut b: *const f32,
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let mut c00 = _mm256_setzero_ps();
        let mut c01 = _mm256_setzero_ps();
        let mut c10 = _mm256_setzero_ps();
        let mut c11 = _mm256_setzero_ps();
        let mut c20 = _mm256_setzero_ps();
        let mut c21 = _mm256_setzero_ps();
        let mut c30 = _mm256_setzero_ps();
        let mut c31 = _mm256_setzero_ps();
        let mut c40 = _mm256_setzero_ps();
        let mut c41 = _mm256_setzero_ps();
        let mut c50 = _mm256_setzero_ps();
        let mut c51 = _mm256_setzero_ps();
        for _ in 0..kc {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            let a0 = _mm256_broadcast_ss(&*a);
            c00 = _mm256_fmadd_ps(a0, b0, c00);
            c01 = _mm256_fmadd_ps(a0, b1, c01);
            let a1 = _mm256_broadcast_ss(&*a.add(1));
            c10 = _mm256_fmadd_ps(a1, b0, c10);
            c11 = _mm256_fmadd_ps(a1, b1, c11);
            let a2 = _mm256_broadcast_ss(&*a.add(2));
            c20 = _mm256_fmadd_ps(a2, b0, c20);
            c21 = _mm256_fmadd_ps(a2, b1, c21);
            let a3 = _mm256_broadcast_ss(&*a.add(3));
            c30 = _mm256_fmadd_ps(a3, b0, c30);
            c31 = _mm256_fmadd_ps(a3, b1, c31);
            let a4 = _mm256_broadcast_ss(&*a.add(4));
            c40 = _mm256_fmadd_ps(a4, b0, c40);
            c41 = _mm256_fmadd_ps(a4, b1, c41);
            let a5 = _mm256_broadcast_ss(&*a.add(5));
            c50 = _mm256_fmadd_ps(a5, b0, c50);
            c51 = _mm256_fmadd_ps(a5, b1, c51);
            a = a.add(MR);
            b = b.add(NR);
        }
        let rows = [
            (c00, c01),
            (c10, c11),
            (c20, c21),
            (c30, c31),
            (c40, c41),
            (c50, c51),
        ];
        store_6x16(rows, c, ldc, mr, nr, ep);
    }

    /// [`kernel_6x16`] for `mr` < 6 rows, computing just those: `mr` broadcasts and 2·`mr`
    /// FMAs per K step instead of six and twelve. A's element (row r, step k) is at
    /// `a + r·steps.0 + k·steps.1`: `(1, MR)` for a packed panel, `(lda, 1)` for rows read in
    /// place; B's K steps are `bs` floats apart. Safety: AVX2 and FMA present; those elements
    /// readable for r < mr, k < kc; `b` readable for 16 floats at each of kc steps of `bs`;
    /// C and biases as for [`kernel_6x16`]; 1 <= mr < 6, nr <= 16.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_rows(
        mr: usize,
        kc: usize,
        a: *const f32,
        steps: (usize, usize),
        b: *const f32,
        bs: usize,
        c: *mut f32,
        ldc: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        match mr {
            1 => rows_tile::<1>(kc, a, steps, b, bs, c, ldc, nr, ep),
            2 => rows_tile::<2>(kc, a, steps, b, bs, c, ldc, nr, ep),
            3 => rows_tile::<3>(kc, a, steps, b, bs, c, ldc, nr, ep),
            4 => rows_tile::<4>(kc, a, steps, b, bs, c, ldc, nr, ep),
            _ => rows_tile::<5>(kc, a, steps, b, bs, c, ldc, nr, ep),
        }
    }

    /// [`kernel_rows`] for `R` rows, unrolled.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_tile<const R: usize>(
        kc: usize,
        a: *const f32,
        (row_step, k_step): (usize, usize),
        mut b: *const f32,
        bs: usize,
        c: *mut f32,
        ldc: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let z = _mm256_setzero_ps();
        let mut acc = [(z, z); 6];
        let rows: [*const f32; R] = std::array::from_fn(|r| a.add(r * row_step));
        let mut at = 0;
        for _ in 0..kc {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (row, v) in rows.iter().zip(acc.iter_mut()) {
                let x = _mm256_broadcast_ss(&*row.add(at));
                v.0 = _mm256_fmadd_ps(x, b0, v.0);
                v.1 = _mm256_fmadd_ps(x, b1, v.1);
            }
            at += k_step;
            b = b.add(bs);
        }
        store_6x16(acc, c, ldc, R, nr, ep);
    }

    /// [`kernel_6x16`] with A read in place: row r's K values start at `a + r·lda` (rows
    /// r ≥ mr read row mr-1 again, their results not stored). Safety: AVX2 and FMA present;
    /// rows r < mr of A readable for kc floats at a + r·lda; `b` readable for 16 floats at
    /// each of kc steps of `bs`; C and biases as for [`kernel_6x16`]; 1 <= mr <= 6,
    /// nr <= 16. Each K step also prefetches (into L2) the
    /// line `pf + 16·k`, any address (a prefetch never faults, and `pf` is not read).
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_strided_6x16(
        kc: usize,
        a: *const f32,
        lda: usize,
        mut b: *const f32,
        bs: usize,
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
        pf: *const f32,
    ) {
        let row = |r: usize| a.add(r.min(mr - 1) * lda);
        let (a0, a1, a2, a3, a4, a5) = (row(0), row(1), row(2), row(3), row(4), row(5));
        let mut c00 = _mm256_setzero_ps();
        let mut c01 = _mm256_setzero_ps();
        let mut c10 = _mm256_setzero_ps();
        let mut c11 = _mm256_setzero_ps();
        let mut c20 = _mm256_setzero_ps();
        let mut c21 = _mm256_setzero_ps();
        let mut c30 = _mm256_setzero_ps();
        let mut c31 = _mm256_setzero_ps();
        let mut c40 = _mm256_setzero_ps();
        let mut c41 = _mm256_setzero_ps();
        let mut c50 = _mm256_setzero_ps();
        let mut c51 = _mm256_setzero_ps();
        for k in 0..kc {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            let x0 = _mm256_broadcast_ss(&*a0.add(k));
            c00 = _mm256_fmadd_ps(x0, b0, c00);
            c01 = _mm256_fmadd_ps(x0, b1, c01);
            let x1 = _mm256_broadcast_ss(&*a1.add(k));
            c10 = _mm256_fmadd_ps(x1, b0, c10);
            c11 = _mm256_fmadd_ps(x1, b1, c11);
            let x2 = _mm256_broadcast_ss(&*a2.add(k));
            c20 = _mm256_fmadd_ps(x2, b0, c20);
            c21 = _mm256_fmadd_ps(x2, b1, c21);
            let x3 = _mm256_broadcast_ss(&*a3.add(k));
            c30 = _mm256_fmadd_ps(x3, b0, c30);
            c31 = _mm256_fmadd_ps(x3, b1, c31);
            let x4 = _mm256_broadcast_ss(&*a4.add(k));
            c40 = _mm256_fmadd_ps(x4, b0, c40);
            c41 = _mm256_fmadd_ps(x4, b1, c41);
            let x5 = _mm256_broadcast_ss(&*a5.add(k));
            c50 = _mm256_fmadd_ps(x5, b0, c50);
            c51 = _mm256_fmadd_ps(x5, b1, c51);
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(k * HALF) as *const i8);
            b = b.add(bs);
        }
        let rows = [
            (c00, c01),
            (c10, c11),
            (c20, c21),
            (c30, c31),
            (c40, c41),
            (c50, c51),
        ];
        store_6x16(rows, c, ldc, mr, nr, ep);
    }

    /// [`kernel_strided_6x16`] with A's K steps at given offsets: row r's value at step k is
    /// `a[r·lda + offs[k]]` (rows r ≥ mr read row mr-1). Safety: AVX2 and FMA present;
    /// `offs` readable for kc values; a + r·lda + offs[k] readable for r < mr, k < kc; `b`
    /// readable for 16 floats at each of kc steps of `bs`; C and biases as for
    /// [`kernel_6x16`]; 1 <= mr <= 6, nr <= 16.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_offsets_6x16(
        kc: usize,
        a: *const f32,
        lda: usize,
        offs: *const usize,
        mut b: *const f32,
        bs: usize,
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let row = |r: usize| a.add(r.min(mr - 1) * lda);
        let (a0, a1, a2, a3, a4, a5) = (row(0), row(1), row(2), row(3), row(4), row(5));
        let mut c00 = _mm256_setzero_ps();
        let mut c01 = _mm256_setzero_ps();
        let mut c10 = _mm256_setzero_ps();
        let mut c11 = _mm256_setzero_ps();
        let mut c20 = _mm256_setzero_ps();
        let mut c21 = _mm256_setzero_ps();
        let mut c30 = _mm256_setzero_ps();
        let mut c31 = _mm256_setzero_ps();
        let mut c40 = _mm256_setzero_ps();
        let mut c41 = _mm256_setzero_ps();
        let mut c50 = _mm256_setzero_ps();
        let mut c51 = _mm256_setzero_ps();
        for k in 0..kc {
            let o = *offs.add(k);
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            let x0 = _mm256_broadcast_ss(&*a0.add(o));
            c00 = _mm256_fmadd_ps(x0, b0, c00);
            c01 = _mm256_fmadd_ps(x0, b1, c01);
            let x1 = _mm256_broadcast_ss(&*a1.add(o));
            c10 = _mm256_fmadd_ps(x1, b0, c10);
            c11 = _mm256_fmadd_ps(x1, b1, c11);
            let x2 = _mm256_broadcast_ss(&*a2.add(o));
            c20 = _mm256_fmadd_ps(x2, b0, c20);
            c21 = _mm256_fmadd_ps(x2, b1, c21);
            let x3 = _mm256_broadcast_ss(&*a3.add(o));
            c30 = _mm256_fmadd_ps(x3, b0, c30);
            c31 = _mm256_fmadd_ps(x3, b1, c31);
            let x4 = _mm256_broadcast_ss(&*a4.add(o));
            c40 = _mm256_fmadd_ps(x4, b0, c40);
            c41 = _mm256_fmadd_ps(x4, b1, c41);
            let x5 = _mm256_broadcast_ss(&*a5.add(o));
            c50 = _mm256_fmadd_ps(x5, b0, c50);
            c51 = _mm256_fmadd_ps(x5, b1, c51);
            b = b.add(bs);
        }
        let rows = [
            (c00, c01),
            (c10, c11),
            (c20, c21),
            (c30, c31),
            (c40, c41),
            (c50, c51),
        ];
        store_6x16(rows, c, ldc, mr, nr, ep);
    }

    /// [`kernel_offsets_6x16`] down `rows` rows of A and C, six at a time. Safety: as
    /// [`kernel_offsets_6x16`] for every tile, rows r < `rows`; rows >= 1.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn column_offsets(
        kc: usize,
        a: *const f32,
        lda: usize,
        offs: *const usize,
        rows: usize,
        b: *const f32,
        bs: usize,
        c: *mut f32,
        ldc: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let mut r0 = 0;
        while r0 < rows {
            let mr = (rows - r0).min(super::AVX2_ROWS);
            let (ar, cr) = (a.add(r0 * lda), c.add(r0 * ldc));
            kernel_offsets_6x16(kc, ar, lda, offs, b, bs, cr, ldc, mr, nr, ep);
            r0 += super::AVX2_ROWS;
        }
    }

    /// Rows of the 3×24 tile (nine accumulators, three B vectors and a broadcast fit the
    /// sixteen registers; with four rows LLVM spills and shuffles, 1.5× slower).
    const WIDE_ROWS: usize = 3;

    /// A 3×24 tile with A read in place, for a panel of 17 to 24 columns (a layer with 24
    /// output channels): three vectors per row, nine accumulators, where the 6×16 tile
    /// would run a 6×16 and a half-empty 6×16. Safety: as [`kernel_strided_6x16`] with
    /// 1 <= mr <= 3, 16 < nr <= 24, `b` readable for 16 floats at each of kc steps of `bs`
    /// and for 8 more at `upper` past each step (the panel's third eight columns), the
    /// column bias (if any) for nr values.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kernel_strided_3x24(
        kc: usize,
        a: *const f32,
        lda: usize,
        mut b: *const f32,
        (bs, upper): (usize, usize),
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let last = mr - 1;
        let a0 = a;
        let a1 = a.add(1.min(last) * lda);
        let a2 = a.add(2.min(last) * lda);
        let z = _mm256_setzero_ps();
        let (mut c00, mut c01, mut c02) = (z, z, z);
        let (mut c10, mut c11, mut c12) = (z, z, z);
        let (mut c20, mut c21, mut c22) = (z, z, z);
        for k in 0..kc {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            let b2 = _mm256_loadu_ps(b.add(upper));
            let x0 = _mm256_broadcast_ss(&*a0.add(k));
            c00 = _mm256_fmadd_ps(x0, b0, c00);
            c01 = _mm256_fmadd_ps(x0, b1, c01);
            c02 = _mm256_fmadd_ps(x0, b2, c02);
            let x1 = _mm256_broadcast_ss(&*a1.add(k));
            c10 = _mm256_fmadd_ps(x1, b0, c10);
            c11 = _mm256_fmadd_ps(x1, b1, c11);
            c12 = _mm256_fmadd_ps(x1, b2, c12);
            let x2 = _mm256_broadcast_ss(&*a2.add(k));
            c20 = _mm256_fmadd_ps(x2, b0, c20);
            c21 = _mm256_fmadd_ps(x2, b1, c21);
            c22 = _mm256_fmadd_ps(x2, b2, c22);
            b = b.add(bs);
        }
        let left = [(c00, c01), (c10, c11), (c20, c21), (z, z), (z, z), (z, z)];
        store_6x16(left, c, ldc, mr, HALF, ep);
        let right = [(c02, z), (c12, z), (c22, z), (z, z), (z, z), (z, z)];
        let ep_right = TileEpilogue {
            col_bias: ep.col_bias.map(|cb| &cb[HALF..]),
            ..*ep
        };
        store_6x16(right, c.add(HALF), ldc, mr, nr - HALF, &ep_right);
    }

    /// [`kernel_strided_6x16`] down `rows` rows of A and C, in tiles of five or six rows
    /// where there are that many, the first prefetching `kc` lines from `pf` (see
    /// [`super::tiles_strided`]); more than 16 columns take 3×24 tiles, three rows at a time,
    /// without the prefetch. Safety: as [`kernel_strided_6x16`] for every tile: rows
    /// r < `rows` of A readable for kc floats at a + r·lda, of C writable for nr floats at
    /// c + r·ldc; rows >= 1.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn column_strided(
        kc: usize,
        a: *const f32,
        lda: usize,
        rows: usize,
        b: *const f32,
        (bs, upper): (usize, usize),
        c: *mut f32,
        ldc: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
        pf: *const f32,
    ) {
        if nr > HALF {
            let mut r0 = 0;
            while r0 < rows {
                let mr = (rows - r0).min(WIDE_ROWS);
                let (ar, cr) = (a.add(r0 * lda), c.add(r0 * ldc));
                kernel_strided_3x24(kc, ar, lda, b, (bs, upper), cr, ldc, mr, nr, ep);
                r0 += WIDE_ROWS;
            }
            return;
        }
        // Tiles as even as they can be: 49 rows as four tiles of six and five of five, not
        // eight of six and one of one (whose two FMA chains wait on their latency: it took
        // two thirds of a full tile's time for a sixth of its work).
        let tiles = rows.div_ceil(super::AVX2_ROWS);
        let (base, extra) = (rows / tiles, rows % tiles);
        let mut r0 = 0;
        for t in 0..tiles {
            let mr = base + usize::from(t < extra);
            let (ar, cr) = (a.add(r0 * lda), c.add(r0 * ldc));
            if mr < super::AVX2_ROWS {
                kernel_rows(mr, kc, ar, (lda, 1), b, bs, cr, ldc, nr, ep);
            } else {
                let pf = if r0 == 0 { pf } else { b };
                kernel_strided_6x16(kc, ar, lda, b, bs, cr, ldc, mr, nr, ep, pf);
            }
            r0 += mr;
        }
    }

    /// Store a 6×16 tile of accumulators (`rows`, six pairs of eight columns) into C with
    /// the epilogue: its first `mr` rows and `nr` columns. Safety: AVX2 and FMA present; C's
    /// rows r < mr writable (and readable) for nr floats at c + r·ldc; biases readable for
    /// mr (row) and nr (column) floats; mr <= 6, nr <= 16. Always inlined into the
    /// kernels (without a target feature of its own, which `inline(always)` does not allow):
    /// called, it took its twelve accumulators through the stack.
    #[inline(always)]
    unsafe fn store_6x16(
        rows: [(__m256, __m256); 6],
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        if nr == HALF && ep.alpha == 1.0 && ep.row_bias.is_none() {
            // (In a kernel of a fixed row count the match folds to one arm.)
            match mr {
                6 => return store_full::<6>(rows, c, ldc, ep),
                5 => return store_full::<5>(rows, c, ldc, ep),
                _ => {}
            }
        }
        let alpha = _mm256_set1_ps(ep.alpha);
        let scale = ep.alpha != 1.0;
        let (n0, n1) = (nr.min(8), nr.saturating_sub(8));
        let (m0, m1) = (mask(n0), mask(n1));
        let full = nr == HALF;
        let (cb0, cb1) = match (ep.last, ep.col_bias) {
            (true, Some(cb)) => (
                _mm256_maskload_ps(cb.as_ptr(), m0),
                _mm256_maskload_ps(cb.as_ptr().add(8), m1),
            ),
            _ => (_mm256_setzero_ps(), _mm256_setzero_ps()),
        };
        let act = Act256::new(ep.act);
        for (r, &(mut v0, mut v1)) in rows.iter().enumerate().take(mr) {
            let p = c.add(r * ldc);
            if scale {
                v0 = _mm256_mul_ps(v0, alpha);
                v1 = _mm256_mul_ps(v1, alpha);
            }
            if ep.accumulate {
                if full {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(p));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(p.add(8)));
                } else {
                    v0 = _mm256_add_ps(v0, load_part(p, n0, m0));
                    v1 = _mm256_add_ps(v1, load_part(p.add(8), n1, m1));
                }
            }
            if ep.last {
                if let Some(rb) = ep.row_bias {
                    let bias = _mm256_set1_ps(*rb.as_ptr().add(r));
                    v0 = _mm256_add_ps(v0, bias);
                    v1 = _mm256_add_ps(v1, bias);
                }
                v0 = act.apply(_mm256_add_ps(v0, cb0));
                v1 = act.apply(_mm256_add_ps(v1, cb1));
            }
            if full {
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p.add(8), v1);
            } else {
                store_part(p, n0, m0, v0);
                store_part(p.add(8), n1, m1, v1);
            }
        }
    }

    /// [`store_6x16`] for the common tiles: `R` (five or six) rows of sixteen columns, no
    /// scale, no row bias. A fixed row count unrolls the loop and keeps the accumulators in
    /// registers (the general loop, with its run-time row count, spilled them to the stack
    /// and read them back: a cost per tile that a K of 16 or 24 does not hide; MobileNetV2's
    /// K 16-32 layers 5-9% faster). Safety: as [`store_6x16`] with mr = R, nr = 16.
    #[inline(always)]
    unsafe fn store_full<const R: usize>(
        rows: [(__m256, __m256); 6],
        c: *mut f32,
        ldc: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let (cb0, cb1) = match (ep.last, ep.col_bias) {
            (true, Some(cb)) => (
                _mm256_loadu_ps(cb.as_ptr()),
                _mm256_loadu_ps(cb.as_ptr().add(8)),
            ),
            _ => (_mm256_setzero_ps(), _mm256_setzero_ps()),
        };
        let act = Act256::new(ep.act);
        for (r, &(mut v0, mut v1)) in rows[..R].iter().enumerate() {
            let p = c.add(r * ldc);
            if ep.accumulate {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(p));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(p.add(8)));
            }
            if ep.last {
                v0 = act.apply(_mm256_add_ps(v0, cb0));
                v1 = act.apply(_mm256_add_ps(v1, cb1));
            }
            _mm256_storeu_ps(p, v0);
            _mm256_storeu_ps(p.add(8), v1);
        }
    }

    /// The first `n` (≤ 8) floats at `p` (the rest zero): a plain load when all eight are
    /// wanted, none when none is (masked loads and stores are slow on AMD's CPUs). Safety:
    /// AVX2 present; `p` readable for `n` floats; `m` is `mask(n)`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_part(p: *const f32, n: usize, m: __m256i) -> __m256 {
        match n {
            8 => _mm256_loadu_ps(p),
            0 => _mm256_setzero_ps(),
            _ => _mm256_maskload_ps(p, m),
        }
    }

    /// Store the first `n` (≤ 8) lanes of `v` at `p`, like [`load_part`]. Safety: AVX2
    /// present; `p` writable for `n` floats; `m` is `mask(n)`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_part(p: *mut f32, n: usize, m: __m256i, v: __m256) {
        match n {
            8 => _mm256_storeu_ps(p, v),
            0 => {}
            _ => _mm256_maskstore_ps(p, m, v),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{TileEpilogue, MR, NR};
    use crate::act::Activation;
    use std::arch::x86_64::*;

    /// An in-kernel activation (see [`Activation::in_kernel`]) with its constants in
    /// registers, applied to accumulators before they are stored; the kernels that store
    /// through it share one definition of what Relu, Clip and LeakyRelu compute.
    #[derive(Clone, Copy)]
    pub(super) struct Act512 {
        act: Activation,
        lo: __m512,
        hi: __m512,
        slope: __m512,
    }

    impl Act512 {
        /// The constants of `act`.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn new(act: Activation) -> Self {
            let (lo, hi, slope) = match act {
                Activation::Clip { min, max } => (min, max, 0.0),
                Activation::LeakyRelu { alpha } => (0.0, 0.0, alpha),
                _ => (0.0, 0.0, 0.0),
            };
            Act512 {
                act,
                lo: _mm512_set1_ps(lo),
                hi: _mm512_set1_ps(hi),
                slope: _mm512_set1_ps(slope),
            }
        }

        /// `act(v)` lane by lane; activations not computed in kernels pass `v` through.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(super) fn apply(&self, v: __m512) -> __m512 {
            let z = _mm512_setzero_ps();
            match self.act {
                // max(0, v) returns v when v is NaN, so NaN propagates like CpuRef's.
                Activation::Relu => _mm512_max_ps(z, v),
                Activation::Clip { .. } => _mm512_min_ps(self.hi, _mm512_max_ps(self.lo, v)),
                Activation::LeakyRelu { .. } => {
                    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, z);
                    _mm512_mask_mul_ps(v, neg, v, self.slope)
                }
                _ => v,
            }
        }
    }

    /// How many k steps ahead the tile prefetches its panels.
    const PREFETCH: usize = 8;
    /// How many k steps ahead the tile prefetches its A panel: far enough (96 · 48 bytes,
    /// about two tiles' time) to cover a read from memory, since A is a layer's packed weights
    /// and a network's weights outgrow the caches, so each inference streams them from memory
    /// once. Measured (`conv_bench`, `CONV_COLD=4`, 512→512 3×3 on 7×7): 8 steps 1.56–1.65
    /// ms, 24 1.38–1.42, 48 1.27–1.31, 96 1.23–1.24 (as fast as with warm weights), 192 the
    /// same; ResNet-18 1 thread 14.9 → 11.9 ms, 2 threads 8.5 → 7.3 ms, MobileNetV2 −3–5%
    /// (best of 4 alternating runs).
    const PREFETCH_A: usize = 96;

    /// Store an R×(16·C) tile of accumulators (`acc`, `[[__m512; C]; R]`, R at most the
    /// row indices listed) into C with the epilogue (scale, earlier contents, biases,
    /// activation), masked to `nr` columns. A macro, not a function: a `#[target_feature]`
    /// function cannot be forced inline, and where the compiler declined (9–12-row tiles,
    /// the main one among them) the accumulators went through the stack, zeroed by a memset
    /// call per tile (4% of MobileNetV2's time). Safety: as [`kernel`].
    macro_rules! store_tile {
        ($acc:expr, $c:expr, $ldc:expr, $nr:expr, $ep:expr, $cols:expr; $($row:literal)*) => {{
            let z = _mm512_setzero_ps();
            let lanes = |n: usize| -> __mmask16 {
                if n >= 16 {
                    0xffff
                } else {
                    ((1u32 << n) - 1) as __mmask16
                }
            };
            let mut masks = [0xffff as __mmask16; $cols];
            for (j, m) in masks.iter_mut().enumerate() {
                *m = lanes($nr.saturating_sub(16 * j));
            }
            let alpha = _mm512_set1_ps($ep.alpha);
            let mut cb = [z; $cols];
            if let (true, Some(bias)) = ($ep.last, $ep.col_bias) {
                for (j, v) in cb.iter_mut().enumerate() {
                    *v = _mm512_maskz_loadu_ps(masks[j], bias.as_ptr().add(16 * j));
                }
            }
            let act = Act512::new($ep.act);
            // One block per row index, each reading its row at a constant index: a loop over
            // the rows was left rolled for 9–12 rows, which put the accumulators in memory.
            $(if let Some(row) = $acc.get($row) {
                let r: usize = $row;
                let p = $c.add(r * $ldc);
                let rb = match ($ep.last, $ep.row_bias) {
                    (true, Some(rb)) => Some(_mm512_set1_ps(*rb.as_ptr().add(r))),
                    _ => None,
                };
                for (j, &acc_v) in row.iter().enumerate() {
                    let (pj, m) = (p.add(16 * j), masks[j]);
                    let mut v = acc_v;
                    if $ep.alpha != 1.0 {
                        v = _mm512_mul_ps(v, alpha);
                    }
                    if $ep.accumulate {
                        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, pj));
                    }
                    if $ep.last {
                        if let Some(bias) = rb {
                            v = _mm512_add_ps(v, bias);
                        }
                        v = _mm512_add_ps(v, cb[j]);
                        v = act.apply(v);
                    }
                    _mm512_mask_storeu_ps(pj, m, v);
                }
            })*
        }};
    }

    /// Run the AVX-512 tile for `mr` rows and `nr` columns: one monomorphized kernel per row
    /// count, so a short edge tile costs only its own rows, and one or two 16-lane columns.
    /// Safety: AVX-512F present; `a` readable for kc*MR floats, `b` for kc*NR; rows r < mr of
    /// `c` readable and writable for nr floats at c + r*ldc; biases readable for mr (row) and
    /// nr (column) floats; 1 <= mr <= MR, 1 <= nr <= NR.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        macro_rules! dispatch {
            ($($r:literal)*) => {
                match (mr, nr > 16) {
                    $(($r, false) => tile::<$r, 1>(kc, a, b, c, ldc, nr, ep),
                      ($r, true) => tile::<$r, 2>(kc, a, b, c, ldc, nr, ep),)*
                    _ => {}
                }
            };
        }
        // store_tile! lists row indices 0..12.
        const _: () = assert!(MR == 12 && NR == 32);
        dispatch!(1 2 3 4 5 6 7 8 9 10 11 12);
    }

    /// The R×(16·C) tile: R rows of A broadcast against C vectors of a B row per k step, so
    /// the 12×32 tile keeps 24 accumulators, 2 B vectors and a broadcast in the 32 registers
    /// and issues 24 FMAs per 14 loads. Safety: as [`kernel`], with R == mr and
    /// nr <= 16·C.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize, const C: usize>(
        kc: usize,
        mut a: *const f32,
        mut b: *const f32,
        c: *mut f32,
        ldc: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let z = _mm512_setzero_ps();
        let mut acc = [[z; C]; R];
        for _ in 0..kc {
            // Ask for the panels' lines PREFETCH k steps ahead: the B panel streams from L2
            // in most products and the loads would otherwise stall the FMAs. Prefetches
            // never fault, so running past the panels' ends is harmless.
            for j in 0..C {
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(NR * PREFETCH + 16 * j) as *const i8);
            }
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(MR * PREFETCH_A) as *const i8);
            let mut bv = [z; C];
            for (j, v) in bv.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(b.add(16 * j));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(r));
                for (o, &v) in row.iter_mut().zip(&bv) {
                    *o = _mm512_fmadd_ps(av, v, *o);
                }
            }
            a = a.add(MR);
            b = b.add(NR);
        }
        store_tile!(acc, c, ldc, nr, ep, C; 0 1 2 3 4 5 6 7 8 9 10 11);
    }

    /// [`kernel`] with B read in place: k step `t`'s B row is `x + offs[t]`. Safety: as
    /// [`kernel`], with `a + t·MR + r` readable for t < offs.len(), r < mr, and `x + offs[t]`
    /// readable for nr floats for every t.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_in_place(
        a: *const f32,
        x: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        macro_rules! dispatch {
            ($($r:literal)*) => {
                match (mr, nr > 16) {
                    $(($r, false) => tile_in_place::<$r, 1>(a, x, offs, c, ldc, nr, ep),
                      ($r, true) => tile_in_place::<$r, 2>(a, x, offs, c, ldc, nr, ep),)*
                    _ => {}
                }
            };
        }
        dispatch!(1 2 3 4 5 6 7 8 9 10 11 12);
    }

    /// The R×(16·C) tile of [`tile`] with B rows read in place, masked to `nr` columns so
    /// nothing past them is read. Safety: as [`kernel_in_place`], R == mr, nr <= 16·C.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn tile_in_place<const R: usize, const C: usize>(
        mut a: *const f32,
        x: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let z = _mm512_setzero_ps();
        let mut acc = [[z; C]; R];
        let mut masks = [0xffff as __mmask16; C];
        for (j, m) in masks.iter_mut().enumerate() {
            let n = nr.saturating_sub(16 * j);
            *m = if n >= 16 {
                0xffff
            } else {
                ((1u32 << n) - 1) as __mmask16
            };
        }
        for &off in offs {
            let b = x.add(off);
            // Ask for the next tile's run of this row (the callers walk a row's tiles left
            // to right): each row is a different page, too many streams for the hardware
            // prefetcher, and without this the loads stall the FMAs. Measured: MobileNetV2
            // 1 thread, best of 10 alternating runs, 13.7 -> 13.0 ms; 3->64 7x7 stem 3-7%.
            // Prefetches never fault, so running past the input is harmless.
            for j in 0..C {
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(NR + 16 * j) as *const i8);
            }
            let mut bv = [z; C];
            for (j, v) in bv.iter_mut().enumerate() {
                *v = _mm512_maskz_loadu_ps(masks[j], b.add(16 * j));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(r));
                for (o, &v) in row.iter_mut().zip(&bv) {
                    *o = _mm512_fmadd_ps(av, v, *o);
                }
            }
            a = a.add(MR);
        }
        store_tile!(acc, c, ldc, nr, ep, C; 0 1 2 3 4 5 6 7 8 9 10 11);
    }
}

/// A tile of a matrix transpose: `dst[j·dst_stride + i] = src[i·src_stride + j]` for
/// `i < rows`, `j < cols` (NCHW ↔ NHWC at the borders of channels-last regions). With AVX2,
/// 8×8 blocks are transposed in registers, the edges one value at a time. Returns false,
/// doing nothing, when a slice is too short or a stride too small for its rows.
pub fn transpose_tile(
    src: &[f32],
    src_stride: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    dst_stride: usize,
) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let ok = (rows == 1 || src_stride >= cols)
        && (cols == 1 || dst_stride >= rows)
        && src.len() >= (rows - 1) * src_stride + cols
        && dst.len() >= (cols - 1) * dst_stride + rows;
    if !ok {
        return false;
    }
    let (mut i0, mut j0) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() {
        // SAFETY: AVX2 is present (checked); the block loop reads src[i·src_stride + j] and
        // writes dst[j·dst_stride + i] for i < rows / 8 · 8, j < cols / 8 · 8 only, inside
        // both slices (their lengths and strides were checked above).
        unsafe {
            transpose8::blocks(
                src.as_ptr(),
                src_stride,
                rows,
                cols,
                dst.as_mut_ptr(),
                dst_stride,
            );
        }
        (i0, j0) = (rows / 8 * 8, cols / 8 * 8);
    }
    // What the blocks left: the last rows (all columns), then the last columns.
    for i in i0..rows {
        for j in 0..cols {
            dst[j * dst_stride + i] = src[i * src_stride + j];
        }
    }
    for i in 0..i0 {
        for j in j0..cols {
            dst[j * dst_stride + i] = src[i * src_stride + j];
        }
    }
    true
}

/// Lanes of a channels-last block (one AVX-512 vector): see [`gather_lanes`].
pub const BLOCK_LANES: usize = 16;

/// Transpose `n` ≤ 16 planes into pixel-major order: `dst[i·16 + l] = src[l·stride + i]`
/// for pixels `i < len` and lanes `l < n`; lanes `n..16` of each pixel are set to zero.
/// When `src` or `dst` is too short for that, nothing is done (never an out-of-bounds
/// access). With AVX-512 the work is done sixteen pixels at
/// a time by an in-register 16×16 transpose.
pub fn gather_lanes(src: &[f32], stride: usize, n: usize, len: usize, dst: &mut [f32]) {
    gather_lanes_pitched(src, stride, n, len, dst, BLOCK_LANES);
}

/// [`gather_lanes`] with `pitch` ≤ 32 lanes per pixel in `dst` (`n` ≤ `pitch`):
/// `dst[i·pitch + l] = src[l·stride + i]`, lanes `n..pitch` zero: packing twelve rows of a
/// GEMM operand into an A panel is this with `pitch` 12, and 32 columns of a column-major B
/// into a B panel with `pitch` 32. Returns false, doing nothing, when a slice is too short
/// or `n` exceeds `pitch`.
pub fn gather_lanes_pitched(
    src: &[f32],
    stride: usize,
    n: usize,
    len: usize,
    dst: &mut [f32],
    pitch: usize,
) -> bool {
    if !(1..=2 * BLOCK_LANES).contains(&pitch) || n > pitch {
        return false;
    }
    let pixels = dst.len() / pitch * BLOCK_LANES;
    let (n, len) = lane_extent(src.len(), stride, n, len, pixels, pitch);
    if len == 0 {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && pitch <= BLOCK_LANES {
        // SAFETY: AVX-512F is present (`has_avx512`); `lane_extent` checked that `src` holds
        // `(n-1)·stride + len` floats and `dst` `len·pitch` (its length rounded down to
        // whole pixels of `pitch` floats); 1 <= n <= pitch <= 16.
        unsafe { transpose::gather(src.as_ptr(), stride, n, len, dst.as_mut_ptr(), pitch) };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() {
        // SAFETY: AVX2 is present (checked); `lane_extent` checked that `src` holds
        // `(n-1)·stride + len` floats and `dst` `len·pitch`; 1 <= n <= pitch <= 16.
        let done =
            unsafe { transpose8::gather(src.as_ptr(), stride, n, len, dst.as_mut_ptr(), pitch) };
        // The last pixels (fewer than eight) in plain Rust.
        let (src_rest, dst_rest) = (&src[done..], &mut dst[done * pitch..]);
        gather_lanes_portable(src_rest, stride, n, len - done, dst_rest, pitch);
        return true;
    }
    gather_lanes_portable(src, stride, n, len, dst, pitch);
    true
}

/// The inverse of [`gather_lanes`]: `dst[l·stride + i] = src[i·16 + l]` for pixels `i < len`
/// and lanes `l < n` (nothing when a slice is too short, like [`gather_lanes`]).
pub fn scatter_lanes(src: &[f32], len: usize, n: usize, dst: &mut [f32], stride: usize) {
    let (n, len) = lane_extent(dst.len(), stride, n, len, src.len(), BLOCK_LANES);
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && len > 0 {
        // SAFETY: AVX-512F is present; `lane_extent` clamped `n` and `len` so that `dst`
        // holds `(n-1)·stride + len` floats and `src` holds `len·16`.
        unsafe { transpose::scatter(src.as_ptr(), len, n, dst.as_mut_ptr(), stride) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() && len > 0 {
        // SAFETY: AVX2 is present (checked); `lane_extent` clamped `n` and `len` so that
        // `dst` holds `(n-1)·stride + len` floats and `src` holds `len·16`.
        let done = unsafe { transpose8::scatter(src.as_ptr(), len, n, dst.as_mut_ptr(), stride) };
        // The last pixels (fewer than eight) in plain Rust.
        let (src_rest, dst_rest) = (&src[done * BLOCK_LANES..], &mut dst[done..]);
        scatter_lanes_portable(src_rest, len - done, n, dst_rest, stride);
        return;
    }
    scatter_lanes_portable(src, len, n, dst, stride);
}

/// One output row of a channels-last depthwise convolution: for pixels `j < ow`,
/// `out[j·16..][l] = bias[l] + Σ_t w[t·16 + l] · x[j·step + offs[t] + l]` (no activation).
/// Returns false, computing nothing, when a slice is too short for that (or without
/// AVX-512, where the caller's own loop runs instead).
pub fn depthwise_row(
    x: &[f32],
    step: usize,
    offs: &[usize],
    w: &[f32],
    bias: &[f32],
    ow: usize,
    out: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if has_avx512()
        && row_fits(x, step, offs, ow, out)
        && w.len() >= offs.len() * BLOCK_LANES
        && bias.len() >= BLOCK_LANES
    {
        // SAFETY: AVX-512F is present; every read `x[j·step + offs[t] .. + 16]` for j < ow
        // and every write `out[j·16 .. + 16]` is in bounds (`row_fits`), `w` holds 16 floats
        // per tap and `bias` 16 (checked just above).
        unsafe {
            window_row::row::<false>(
                x.as_ptr(),
                step,
                offs,
                w.as_ptr(),
                bias.as_ptr(),
                ow,
                out.as_mut_ptr(),
            )
        };
        return true;
    }
    false
}

/// One output row of a channels-last max pooling: for pixels `j < ow`,
/// `out[j·16..][l] = max_t x[j·step + offs[t] + l]` (inputs without NaN). Returns false,
/// computing nothing, like [`depthwise_row`].
pub fn max_row(x: &[f32], step: usize, offs: &[usize], ow: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && row_fits(x, step, offs, ow, out) {
        // SAFETY: AVX-512F is present and the reads and writes are in bounds (`row_fits`);
        // the max kernel never reads its weight and bias pointers.
        unsafe {
            window_row::row::<true>(
                x.as_ptr(),
                step,
                offs,
                std::ptr::null(),
                std::ptr::null(),
                ow,
                out.as_mut_ptr(),
            )
        };
        return true;
    }
    false
}

/// Whether `x` holds every window of a channels-last row (`x[j·step + offs[t] .. + 16]` for
/// j < ow) and `out` its `ow` pixels.
fn row_fits(x: &[f32], step: usize, offs: &[usize], ow: usize, out: &[f32]) -> bool {
    let reach = offs
        .iter()
        .max()
        .and_then(|&m| ow.checked_sub(1)?.checked_mul(step)?.checked_add(m))
        .and_then(|r| r.checked_add(BLOCK_LANES));
    reach.is_some_and(|r| r <= x.len())
        && ow.checked_mul(BLOCK_LANES).is_some_and(|n| n <= out.len())
}

#[cfg(target_arch = "x86_64")]
mod window_row {
    use super::BLOCK_LANES;
    use std::arch::x86_64::*;

    /// See `depthwise_row` (`MAX` false) and `max_row` (`MAX` true). Safety: AVX-512F
    /// present; the bounds those functions check hold; unless `MAX`, `w` holds 16 floats
    /// per tap and `bias` 16.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row<const MAX: bool>(
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
}

/// `(n, len)` when both sides hold them (the planes side: `planes` floats, `n` (at most
/// `lanes`) runs of `len` at `stride`; the pixels side: `pixels` floats, `len` runs of 16),
/// else `(0, 0)`.
fn lane_extent(
    planes: usize,
    stride: usize,
    n: usize,
    len: usize,
    pixels: usize,
    lanes: usize,
) -> (usize, usize) {
    let n = n.min(lanes);
    let planes_need = (n.max(1) - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(len));
    let fits = planes_need.is_some_and(|need| need <= planes)
        && len
            .checked_mul(BLOCK_LANES)
            .is_some_and(|need| need <= pixels);
    if n == 0 || len == 0 || !fits {
        return (0, 0);
    }
    (n, len)
}

/// [`gather_lanes`] in plain Rust (`n`, `len` already checked).
fn gather_lanes_portable(
    src: &[f32],
    stride: usize,
    n: usize,
    len: usize,
    dst: &mut [f32],
    pitch: usize,
) {
    for (i, px) in dst.chunks_exact_mut(pitch).take(len).enumerate() {
        for (l, v) in px.iter_mut().enumerate() {
            *v = if l < n { src[l * stride + i] } else { 0.0 };
        }
    }
}

/// [`scatter_lanes`] in plain Rust (`n`, `len` already checked).
fn scatter_lanes_portable(src: &[f32], len: usize, n: usize, dst: &mut [f32], stride: usize) {
    for (i, px) in src.chunks_exact(BLOCK_LANES).take(len).enumerate() {
        for (l, &v) in px.iter().enumerate().take(n) {
            dst[l * stride + i] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod transpose {
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

    /// The mask of the first `count` ≤ 16 lanes.
    #[inline]
    fn first(count: usize) -> __mmask16 {
        if count >= 16 {
            0xffff
        } else {
            ((1u32 << count) - 1) as __mmask16
        }
    }

    /// See `gather_lanes_pitched`. Safety: AVX-512F present; `src` readable for
    /// `(n-1)·stride + len` floats, `dst` writable for `len·pitch`; `1 <= n <= pitch <= 16`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gather(
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
    pub(super) unsafe fn scatter(
        src: *const f32,
        len: usize,
        n: usize,
        dst: *mut f32,
        stride: usize,
    ) {
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
}

/// The channels-last transposes with AVX2: 8×8 blocks in registers (two per 16-lane pixel),
/// whole groups of eight pixels; the last pixels of a plane are left to the caller.
#[cfg(target_arch = "x86_64")]
mod transpose8 {
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
    pub(super) unsafe fn gather(
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
    pub(super) unsafe fn blocks(
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
    pub(super) unsafe fn scatter(
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
}

/// Define a safe function that runs an `#[inline(always)]` safe body compiled with AVX-512F
/// (16-lane vectors; GELU and sigmoid loops measured 1.2–1.4× faster than with AVX2) or
/// AVX2+FMA when the CPU has them, and the same body compiled for the baseline otherwise.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:path;) => {
        $(#[$meta])*
        #[inline]
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn wide($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if has_avx512() {
                    // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (checked by
                    // `has_avx512`); `wide` only forwards its safe arguments to a safe body.
                    return unsafe { wide($($arg),*) };
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn fast($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if has_avx2_fma() {
                    // SAFETY: the CPU supports AVX2 and FMA (just checked); `fast` only
                    // forwards its safe arguments to a safe body.
                    return unsafe { fast($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

multiversion! {
    /// Apply a unary function elementwise (`y[i] = f(x[i])`).
    pub fn unary(act: Activation, x: &[f32], y: &mut [f32]) => crate::math::unary_body;
}
multiversion! {
    /// Apply a unary function in place (compiled per ISA; see [`unary_in_place`]).
    fn unary_in_place_compiled(act: Activation, y: &mut [f32]) => crate::math::unary_in_place_body;
}

/// Apply a unary function in place. Relu, Clip and LeakyRelu take explicit vector code with
/// AVX2: compiled from plain loops, a select that keeps some values (`if v < 0 { 0 } else {
/// v }`) becomes a masked store of only the changed lanes (`vmaskmovps`), which AMD's CPUs
/// run at a fraction of a plain store's speed (Zen 3: Relu in place 1.4 cycles per value).
pub fn unary_in_place(act: Activation, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if act.in_kernel() && avx2_in_use() {
        // SAFETY: AVX2 and FMA are present (checked); the kernel loads and stores only whole
        // eight-float chunks of `y` and does the rest with plain Rust.
        unsafe { avx2::act_in_place(act, y) };
        return;
    }
    unary_in_place_compiled(act, y)
}
multiversion! {
    /// `y[i] = op(a[i], b[i])` over equal-length slices.
    pub fn binary_vv(op: crate::elementwise::Bin, a: &[f32], b: &[f32], y: &mut [f32])
        => crate::elementwise::binary_vv_body;
}
multiversion! {
    /// `y[i] = op(a[i], s)`.
    pub fn binary_vs(op: crate::elementwise::Bin, a: &[f32], s: f32, y: &mut [f32])
        => crate::elementwise::binary_vs_body;
}
multiversion! {
    /// `y[i] = op(s, b[i])`.
    pub fn binary_sv(op: crate::elementwise::Bin, s: f32, b: &[f32], y: &mut [f32])
        => crate::elementwise::binary_sv_body;
}
multiversion! {
    /// Depthwise / pooling window over a prepared plane (see `crate::window`).
    pub fn window_plane(job: &crate::window::PlaneJob<'_>, out: &mut [f32])
        => crate::window::plane_body;
}
multiversion! {
    /// One depthwise convolution plane (see `crate::depthwise`).
    pub fn depthwise_plane(plan: &crate::depthwise::Plan, x: &[f32], w: &[f32], bias: f32, act: Activation, out: &mut [f32], scratch: &mut [f32])
        => crate::depthwise::plane_body;
}
multiversion! {
    /// A block of depthwise-convolution or max-pooling planes, channels-last (see
    /// `crate::depthwise`).
    pub fn depthwise_block(plan: &crate::depthwise::Plan, x: &[f32], n: usize, op: crate::depthwise::BlockOp<'_>, out: &mut [f32], scratch: &mut [f32])
        => crate::depthwise::block_body;
}
multiversion! {
    /// [`nhwc_depthwise_row`] compiled from plain Rust.
    fn nhwc_depthwise_row_compiled(job: &crate::nhwc::DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) -> bool
        => crate::nhwc::dw_row_body;
}

/// Output row `oy` of a channels-last depthwise convolution into `out` (see
/// `crate::nhwc::dw_row_body`), by explicit AVX2 code where it runs (the compiled loops kept
/// their accumulators in memory). False, computing nothing, when a buffer is too short.
pub fn nhwc_depthwise_row(
    job: &crate::nhwc::DwRow<'_>,
    oy: usize,
    res: Option<&[f32]>,
    out: &mut [f32],
) -> bool {
    let g = job.geo;
    let row = g.ow * job.c;
    let ok = oy < g.oh
        && job.x.len() >= g.h * g.w * job.c
        && job.taps.len() >= g.kh * g.kw * job.c
        && job.bias.len() >= job.c
        && out.len() >= row
        && res.is_none_or(|r| r.len() >= row)
        && g.sh > 0
        && g.sw > 0;
    if !ok {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_in_use() {
        // SAFETY: AVX2 and FMA are present (checked); the buffer lengths the kernel relies
        // on were checked above, and `valid_taps` keeps every tap it visits inside the
        // image (rows pt ≤ iy·… < pt + h, columns likewise).
        unsafe { nhwc_depthwise::row(job, oy, res, out) };
        return true;
    }
    nhwc_depthwise_row_compiled(job, oy, res, out)
}
multiversion! {
    /// `acc[j] += Σ_l x[l]·panel[l·NR + j]`: one packed B panel times a vector (see
    /// `crate::gemm`).
    pub fn gemv_panel(x: &[f32], panel: &[f32], acc: &mut [f32; NR]) => gemv_panel_body;
}

/// [`gemv_panel`]'s body: two K steps at a time into two sets of accumulators, so the FMA
/// chains are half as long.
#[inline(always)]
fn gemv_panel_body(x: &[f32], panel: &[f32], acc: &mut [f32; NR]) {
    let mut odd = [0f32; NR];
    let mut pairs = x.chunks_exact(2).zip(panel.chunks_exact(2 * NR));
    for (xs, rows) in &mut pairs {
        let (r0, r1) = rows.split_at(NR);
        for j in 0..NR {
            acc[j] = r0[j].mul_add(xs[0], acc[j]);
            odd[j] = r1[j].mul_add(xs[1], odd[j]);
        }
    }
    if x.len() % 2 == 1 {
        let l = x.len() - 1;
        if let Some(r) = panel.get(l * NR..(l + 1) * NR) {
            for j in 0..NR {
                acc[j] = r[j].mul_add(x[l], acc[j]);
            }
        }
    }
    for j in 0..NR {
        acc[j] += odd[j];
    }
}

multiversion! {
    /// Pad and phase-split one input plane for a window op (see `crate::window`).
    pub fn window_prepare(geo: &crate::window::Geo2, x: &[f32], pad: f32, dst: &mut [f32])
        => crate::window::prepare_body;
}
multiversion! {
    /// Softmax of one contiguous row.
    pub fn softmax_row(x: &[f32], y: &mut [f32]) => crate::norm::softmax_row_body;
}
multiversion! {
    /// LogSoftmax of one contiguous row.
    pub fn log_softmax_row(x: &[f32], y: &mut [f32]) => crate::norm::log_softmax_row_body;
}
multiversion! {
    /// Instance normalization of one channel's plane.
    pub fn instance_norm_plane(x: &[f32], scale: f32, bias: f32, epsilon: f32, y: &mut [f32])
        => crate::norm::instance_norm_plane_body;
}
multiversion! {
    /// Layer normalization of one row.
    pub fn layer_norm_row(x: &[f32], scale: &[f32], bias: Option<&[f32]>, epsilon: f32, y: &mut [f32])
        => crate::norm::layer_norm_row_body;
}
multiversion! {
    /// `y[i] = act(y[i] + r[i])`.
    pub fn add_act_in_place(act: Activation, y: &mut [f32], r: &[f32])
        => crate::math::add_act_in_place_body;
}
multiversion! {
    /// Whether `x` holds a NaN.
    pub fn any_nan(x: &[f32]) -> bool => crate::math::any_nan_body;
}
multiversion! {
    /// Sum and sum of squares... reductions over one contiguous run.
    pub fn reduce_run(kind: crate::reduce::RunKind, x: &[f32]) -> f64
        => crate::reduce::reduce_run_body;
}
multiversion! {
    /// `acc[i] = combine(acc[i], x[i])` for strided reductions over an outer axis.
    pub fn reduce_accumulate(kind: crate::reduce::RunKind, acc: &mut [f32], x: &[f32])
        => crate::reduce::reduce_accumulate_body;
}

multiversion! {
    /// Winograd input transform of one block of tiles by the safe body (see
    /// `crate::winograd`): the fallback of [`winograd_input`].
    pub fn winograd_input_portable(tiles: &crate::winograd::Tiles, c: usize, blk: &crate::winograd::Block, x: &[f32], v: &mut [f32])
        => crate::winograd::input_body;
}
multiversion! {
    /// Winograd output transform of one block of tiles, with bias and activation, by the
    /// safe body (see `crate::winograd`): the fallback of [`winograd_output`].
    pub fn winograd_output_portable(geo: &crate::window::Geo2, tiles: &crate::winograd::Tiles, blk: &crate::winograd::Block, ep: &crate::winograd::OutEpilogue<'_>, mo: &[f32], dest: &mut crate::winograd::Dest<'_>)
        => crate::winograd::output_body;
}

/// Zeros the Winograd input transform may read after the padded input (see
/// [`winograd_input`]).
pub const WINOGRAD_SLACK: usize = winograd::WINDOW_SLACK;

/// Winograd input transform of one block of tiles (see `crate::winograd`): AVX2+FMA
/// intrinsics (`simd/winograd.rs`) where they apply, else the safe body.
pub fn winograd_input(
    tiles: &crate::winograd::Tiles,
    c: usize,
    blk: &crate::winograd::Block,
    x: &[f32],
    v: &mut [f32],
) {
    if !winograd::input(tiles, c, blk, x, v) {
        winograd_input_portable(tiles, c, blk, x, v);
    }
}

/// Winograd output transform of one block of tiles, with bias and activation (see
/// `crate::winograd`): AVX2+FMA intrinsics (`simd/winograd.rs`) where they apply, else the safe
/// body.
pub fn winograd_output(
    geo: &crate::window::Geo2,
    tiles: &crate::winograd::Tiles,
    blk: &crate::winograd::Block,
    ep: &crate::winograd::OutEpilogue<'_>,
    mo: &[f32],
    dest: &mut crate::winograd::Dest<'_>,
) {
    if !winograd::output(geo, tiles, blk, ep, mo, dest) {
        winograd_output_portable(geo, tiles, blk, ep, mo, dest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place activations (the vector code for Relu, Clip and LeakyRelu, every slope
    /// sign and an infinite one, and the compiled loops for the rest) give what
    /// `Activation::apply_simple` and `math::apply` give, value for value: NaN kept,
    /// infinities, signed zeros, and lengths around the vector width.
    #[test]
    fn activations_in_place_match_the_scalar_ones() {
        let acts = [
            Activation::Relu,
            Activation::Clip {
                min: -1.0,
                max: 6.0,
            },
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::LeakyRelu { alpha: 0.0 },
            Activation::LeakyRelu {
                alpha: f32::INFINITY,
            },
            Activation::Sigmoid,
            Activation::Gelu {
                tanh_approximation: false,
            },
        ];
        for act in acts {
            for len in [0, 1, 7, 8, 9, 16, 17, 33] {
                let x = crate::math::tests::with_specials(len, 5, 0.37);
                let mut y = x.clone();
                unary_in_place(act, &mut y);
                for (&v, &got) in x.iter().zip(&y) {
                    let want = crate::math::apply(act, v);
                    let same = got == want || (got.is_nan() && want.is_nan());
                    assert!(same, "{act:?}({v}) = {got}, want {want}");
                }
            }
        }
    }

    /// The in-place tile (AVX-512, or AVX2 at row offsets of six) against a plain sum for
    /// every row range of a panel, column counts around the vector width (masked tails, and
    /// inputs that end right after the last run), with biases and an activation; short
    /// inputs and row ranges past the panel are refused.
    #[test]
    fn in_place_tiles_match_a_plain_sum() {
        let k = 13;
        let a: Vec<f32> = (0..k * MR)
            .map(|i| ((i * 7 % 19) as f32 - 9.0) / 8.0)
            .collect();
        let x: Vec<f32> = (0..400)
            .map(|i| ((i * 13 % 23) as f32 - 11.0) / 5.0)
            .collect();
        let offs: Vec<usize> = (0..k).map(|t| (t * 29) % 331).collect();
        let rb: Vec<f32> = (0..MR).map(|r| r as f32 * 0.1 - 0.5).collect();
        let act = Activation::Clip {
            min: -1.0,
            max: 2.5,
        };
        for (row0, mr) in (0..MR).flat_map(|r0| (1..=MR - r0).map(move |mr| (r0, mr))) {
            for nr in [1, 7, 16, 17, 31, 32] {
                let ldc = 40;
                let ep = TileEpilogue {
                    accumulate: false,
                    alpha: 1.0,
                    row_bias: Some(&rb[row0..]),
                    col_bias: None,
                    last: true,
                    act,
                };
                let rows = InPlaceRows::new(&offs);
                let last = offs.iter().max().unwrap();
                let avx2 = avx2_in_use();
                // The whole input, then one that ends right after the furthest row's nr
                // floats (AVX2 reads its last columns through a copy).
                for x in [&x[..], &x[..last + nr]] {
                    let mut c = vec![f32::NAN; (mr - 1) * ldc + nr];
                    let ran = microkernel_in_place(&a, row0, x, &rows, &mut c, ldc, mr, nr, &ep);
                    assert_eq!(ran, has_avx512() || (avx2 && row0 % ROW_STEP == 0));
                    if !ran {
                        continue;
                    }
                    for r in 0..mr {
                        for j in 0..nr {
                            let dot: f32 =
                                (0..k).map(|t| a[t * MR + row0 + r] * x[offs[t] + j]).sum();
                            let want = act.apply_simple(dot + rb[row0 + r]);
                            let got = c[r * ldc + j];
                            assert!(
                                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                "rows {row0}+{mr} x {nr} ({r}, {j})"
                            );
                        }
                    }
                }
                let mut c = vec![f32::NAN; (mr - 1) * ldc + nr];
                // A row reaching past `x` is refused, not read; so are rows past the panel.
                let short = &x[..last + nr - 1];
                assert!(!microkernel_in_place(
                    &a, row0, short, &rows, &mut c, ldc, mr, nr, &ep
                ));
                assert!(!microkernel_in_place(
                    &a,
                    MR - mr + 1,
                    &x,
                    &rows,
                    &mut c,
                    ldc,
                    mr,
                    nr,
                    &ep
                ));
            }
        }
    }

    /// Transpose tiles of every size around the 8×8 blocks (1, 7, 8, 9, 17, 33 rows and
    /// columns), with strides wider than the tile, leave the rest of `dst` alone; short
    /// buffers are refused.
    #[test]
    fn transpose_tiles_match_the_definition() {
        for rows in [1, 7, 8, 9, 17, 33] {
            for cols in [1, 7, 8, 9, 17, 33] {
                let (ss, ds) = (cols + 3, rows + 5);
                let src: Vec<f32> = (0..rows * ss).map(|v| v as f32 * 0.5 - 7.0).collect();
                let mut dst = vec![f32::NAN; cols * ds];
                assert!(transpose_tile(&src, ss, rows, cols, &mut dst, ds));
                for j in 0..cols {
                    for i in 0..ds {
                        let got = dst[j * ds + i];
                        if i < rows {
                            assert_eq!(got, src[i * ss + j], "{rows}x{cols} at ({i}, {j})");
                        } else {
                            assert!(got.is_nan(), "{rows}x{cols}: ({i}, {j}) written");
                        }
                    }
                }
                let short = &mut dst[..(cols - 1) * ds + rows - 1];
                assert!(!transpose_tile(&src, ss, rows, cols, short, ds));
            }
        }
    }

    /// The tiles reading A in place (rows `lda` apart, and through a table of K offsets)
    /// against a plain sum, for every row count up to three tiles (tiles of five or six
    /// rows, each count of fewer than six with its own kernel), columns around the vector
    /// widths, with a column bias, an activation and accumulation onto C, from a panel with
    /// its halves interleaved and the same panel split. Where the CPU lacks AVX2 they refuse.
    #[test]
    fn strided_and_offset_tiles_match_a_plain_sum() {
        let (kc, lda) = (37, 41);
        let a: Vec<f32> = (0..20 * lda + kc)
            .map(|i| ((i * 7 % 19) as f32 - 9.0) / 8.0)
            .collect();
        let b: Vec<f32> = (0..kc * NR)
            .map(|i| ((i * 13 % 23) as f32 - 11.0) / 5.0)
            .collect();
        // The same panel with its halves one after the other.
        let split: Vec<f32> = (0..kc * NR)
            .map(|i| {
                let (h, k, j) = (i / (kc * HALF), i / HALF % kc, i % HALF);
                b[k * NR + h * HALF + j]
            })
            .collect();
        let offs: Vec<usize> = (0..kc).map(|t| (t * 5) % lda).collect();
        let cb: Vec<f32> = (0..NR).map(|j| j as f32 * 0.1 - 0.5).collect();
        let act = Activation::Clip {
            min: -1.0,
            max: 2.5,
        };
        for rows in 1..=18 {
            for nr in [1, 8, 13, 16, 17, 24] {
                for accumulate in [false, true] {
                    let ep = TileEpilogue {
                        accumulate,
                        alpha: 1.0,
                        row_bias: None,
                        col_bias: Some(&cb),
                        last: true,
                        act,
                    };
                    let ldc = 30;
                    let c0: Vec<f32> = (0..rows * ldc).map(|i| (i % 5) as f32 * 0.25).collect();
                    let cases = [false, true]
                        .map(|o| [(o, Halves::Interleaved), (o, Halves::Split)])
                        .into_iter()
                        .flatten();
                    for (offsets, halves) in cases {
                        if offsets && nr > HALF {
                            continue;
                        }
                        let panel = match halves {
                            Halves::Interleaved => (&b[..], halves),
                            Halves::Split => (&split[..], halves),
                        };
                        let mut c = c0.clone();
                        let ran = if offsets {
                            tiles_offsets(kc, &a, lda, &offs, rows, panel, &mut c, ldc, nr, &ep)
                        } else {
                            tiles_strided(kc, &a, lda, rows, panel, &mut c, ldc, nr, &ep, 0)
                        };
                        assert_eq!(ran, strided_tiles());
                        if !ran {
                            continue;
                        }
                        for r in 0..rows {
                            for j in 0..ldc {
                                let got = c[r * ldc + j];
                                if j >= nr {
                                    assert_eq!(got, c0[r * ldc + j], "column {j} past {nr}");
                                    continue;
                                }
                                let at = |t: usize| if offsets { offs[t] } else { t };
                                let dot: f32 =
                                    (0..kc).map(|t| a[r * lda + at(t)] * b[t * NR + j]).sum();
                                let base = if accumulate { c0[r * ldc + j] } else { 0.0 };
                                let want = act.apply_simple(dot + base + cb[j]);
                                assert!(
                                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                    "rows {rows} nr {nr} acc {accumulate} offsets {offsets} \
                                     {halves:?} at ({r}, {j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The vector transposes (AVX-512's 16×16 or AVX2's 8×8, whichever this CPU runs)
    /// against the plain loops, on partial blocks (fewer than 16 or 8 lanes, runs that are
    /// not a multiple of 16 or 8) and strides wider than the runs.
    #[test]
    fn lane_transposes_match_plain_loops() {
        for (n, len, stride) in [
            (8, 8, 8),
            (9, 24, 31),
            (16, 16, 16),
            (16, 37, 40),
            (5, 3, 3),
            (1, 1, 1),
            (16, 100, 100),
            (11, 17, 29),
        ] {
            let src: Vec<f32> = (0..(n - 1) * stride + len)
                .map(|i| i as f32 * 0.5 - 7.0)
                .collect();
            let mut want = vec![f32::NAN; len * BLOCK_LANES];
            gather_lanes_portable(&src, stride, n, len, &mut want, BLOCK_LANES);
            for i in 0..len {
                for l in 0..BLOCK_LANES {
                    let v = if l < n { src[l * stride + i] } else { 0.0 };
                    assert_eq!(want[i * BLOCK_LANES + l], v);
                }
            }
            let mut got = vec![f32::NAN; len * BLOCK_LANES];
            gather_lanes(&src, stride, n, len, &mut got);
            assert_eq!(got, want, "gather n{n} len{len} stride{stride}");
            let mut back_want = vec![-1.0f32; src.len()];
            scatter_lanes_portable(&want, len, n, &mut back_want, stride);
            let mut back = vec![-1.0f32; src.len()];
            scatter_lanes(&want, len, n, &mut back, stride);
            assert_eq!(back, back_want, "scatter n{n} len{len} stride{stride}");
            for l in 0..n {
                assert_eq!(
                    back[l * stride..l * stride + len],
                    src[l * stride..l * stride + len]
                );
            }
            // Twelve lanes a pixel (a GEMM A panel), and five (a masked last run), against
            // the plain loop.
            for pitch in [12, 5, 32] {
                if n <= pitch {
                    let mut want_p = vec![f32::NAN; len * pitch];
                    gather_lanes_portable(&src, stride, n, len, &mut want_p, pitch);
                    let mut got_p = vec![f32::NAN; len * pitch];
                    assert!(gather_lanes_pitched(
                        &src, stride, n, len, &mut got_p, pitch
                    ));
                    assert_eq!(got_p, want_p, "pitch {pitch}: n{n} len{len} stride{stride}");
                    for i in 0..len {
                        for l in 0..pitch {
                            let v = if l < n { src[l * stride + i] } else { 0.0 };
                            assert_eq!(want_p[i * pitch + l], v);
                        }
                    }
                } else {
                    assert!(!gather_lanes_pitched(&src, stride, n, len, &mut got, pitch));
                }
            }
            // Too-short slices: nothing is touched.
            let mut short = vec![f32::NAN; len * BLOCK_LANES - 1];
            gather_lanes(&src, stride, n, len, &mut short);
            assert!(short.iter().all(|v| v.is_nan()));
        }
        // Up to 32 lanes a pixel (32 columns of a column-major GEMM B into one panel).
        for (n, len, stride) in [(17, 9, 11), (29, 40, 45), (32, 16, 16), (20, 3, 7)] {
            let src: Vec<f32> = (0..(n - 1) * stride + len)
                .map(|i| i as f32 * 0.25 - 3.0)
                .collect();
            let mut got = vec![f32::NAN; len * 32];
            assert!(gather_lanes_pitched(&src, stride, n, len, &mut got, 32));
            for i in 0..len {
                for l in 0..32 {
                    let v = if l < n { src[l * stride + i] } else { 0.0 };
                    assert_eq!(got[i * 32 + l], v, "pitch 32: n{n} len{len} ({i}, {l})");
                }
            }
        }
    }

    /// The dispatched micro-kernel (AVX-512 or AVX2 here) and the portable one agree on every
    /// tile shape, epilogue and accumulation mode.
    #[test]
    fn dispatched_and_portable_kernels_agree() {
        let kc = 37;
        let a: Vec<f32> = (0..kc * MR)
            .map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5)
            .collect();
        let b: Vec<f32> = (0..kc * NR)
            .map(|i| ((i * 5) % 11) as f32 * 0.5 - 2.5)
            .collect();
        let rb: Vec<f32> = (0..MR).map(|i| i as f32 - 2.0).collect();
        let cb: Vec<f32> = (0..NR).map(|i| 1.0 - i as f32 * 0.1).collect();
        let ldc = NR + 3;
        for act in [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: -3.0,
                max: 4.0,
            },
            Activation::LeakyRelu { alpha: 0.2 },
        ] {
            for (mr, nr) in [
                (MR, NR),
                (1, 1),
                (5, 17),
                (6, 16),
                (3, 31),
                (2, 8),
                (7, 32),
                (11, 5),
                (12, 16),
                (9, 23),
                (4, 16),
                (10, 9),
            ] {
                for accumulate in [false, true] {
                    let ep = TileEpilogue {
                        accumulate,
                        alpha: 0.5,
                        row_bias: Some(&rb),
                        col_bias: Some(&cb),
                        last: true,
                        act,
                    };
                    let init: Vec<f32> = (0..MR * ldc).map(|i| (i % 5) as f32).collect();
                    for row0 in [0, ROW_STEP].into_iter().filter(|r| r + mr <= MR) {
                        let mut slow = init.clone();
                        portable_kernel(kc, &a, row0, &b, &mut slow, ldc, mr, nr, &ep);
                        // The portable kernel itself against a plain sum.
                        if !accumulate {
                            let (r, j) = (mr - 1, nr - 1);
                            let dot: f32 =
                                (0..kc).map(|k| a[k * MR + row0 + r] * b[k * NR + j]).sum();
                            let want = act.apply_simple(0.5 * dot + rb[r] + cb[j]);
                            let got = slow[r * ldc + j];
                            assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0));
                        }
                        for isa in [Isa::Avx512, Isa::Avx2]
                            .into_iter()
                            .filter(|i| i.available())
                        {
                            let mut fast = init.clone();
                            assert!(microkernel_on(
                                isa, kc, &a, row0, &b, &mut fast, ldc, mr, nr, &ep
                            ));
                            for (i, (x, y)) in fast.iter().zip(&slow).enumerate() {
                                assert!(
                                    (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                                    "{isa:?} {act:?} {mr}x{nr} row0 {row0} at {i}: {x} vs {y}"
                                );
                            }
                        }
                    }
                }
            }
        }
        // Bounds are checked, not trusted.
        let mut c = vec![0f32; 4];
        let ep = TileEpilogue {
            accumulate: false,
            alpha: 1.0,
            row_bias: None,
            col_bias: None,
            last: true,
            act: Activation::None,
        };
        assert!(!microkernel(kc, &a, &b, &mut c, ldc, MR, NR, &ep));
        // A tile may not run past its panel or start off the row step.
        let mut c = vec![0f32; MR * ldc];
        assert!(!microkernel_rows(
            kc, &a, ROW_STEP, &b, &mut c, ldc, 7, NR, &ep
        ));
        assert!(!microkernel_rows(kc, &a, 3, &b, &mut c, ldc, 2, NR, &ep));
    }
}

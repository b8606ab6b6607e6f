//! SGEMM micro-kernels: the tiles every product and convolution of CpuAcc ends in.
//!
//! A packed A panel (`kc × MR`) times a packed B panel (`kc × NR`) into a tile of C with an
//! epilogue (scale, accumulate, biases, an in-register activation): a 12×32 AVX-512 tile
//! (`avx512`), 6×16 AVX2 quarters of it (`avx2`), or plain Rust (`portable`). Variants
//! read A where it lies ([`tiles_strided`], [`tiles_strided_wide`], [`tiles_offsets`]) or B where it lies
//! ([`microkernel_in_place`]), or fetch the next packed B panel into L2 while they run
//! ([`microkernel_fetching`]).
//!
//! The rules that make the `unsafe` sound: an AVX2 or AVX-512 kernel is entered only when
//! the tier ([`crate::isa::kernels`]) says the CPU has its features, and every public entry
//! point checks each slice length the raw-pointer kernel relies on before calling it,
//! returning `false` instead of running when a precondition does not hold.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
mod pairs_avx512;
mod portable;
mod segments;
#[cfg(target_arch = "x86_64")]
mod segments_avx512;
#[cfg(test)]
mod tests;

pub use segments::{pack_segments, pack_segments_on, Segment};

use crate::act::Activation;
use crate::isa::{avx2_in_use, has_avx2_fma, has_avx512, isa_in_use, Isa};
use portable::portable_kernel;

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
pub const HALF: usize = 16;

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
    /// Activation applied when `last`: the in-kernel ones ([`Activation::in_kernel`]), and
    /// in the tiles that read A in place also the sigmoids and swishes where
    /// [`strided_tiles_apply`] says so; others pass through, for the caller to apply.
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
    microkernel_on(isa_in_use(), kc, a, 0, b, c, ldc, mr, nr, ep, Fetch::NONE)
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
    microkernel_on(
        isa_in_use(),
        kc,
        a,
        row0,
        b,
        c,
        ldc,
        mr,
        nr,
        ep,
        Fetch::NONE,
    )
}

/// Ask for the 64-byte lines that hold `data` to be brought into L2: a hint, nothing is read.
/// For a block of B a product packs next, whose rows lie in more pages than the hardware
/// prefetchers follow, fetched while the tiles of the block before run.
#[inline]
pub fn prefetch_l2(data: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        let p = data.as_ptr();
        for i in (0..data.len()).step_by(16).chain(data.len().checked_sub(1)) {
            // SAFETY: a prefetch reads nothing and never faults; `p + i` lies inside `data`
            // (i < data.len()), and SSE is part of x86_64.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p.add(i).cast::<i8>()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Runs of a slice whose 64-byte lines a tile fetches into L2 while it runs, one line per
/// K step (the AVX-512 tile; the others ignore it): `runs` runs of `run` floats, `pitch`
/// floats apart, from the slice's start; lines outside the slice are not fetched.
#[derive(Debug, Clone, Copy)]
pub struct Fetch<'a> {
    /// The slice the runs lie in.
    pub data: &'a [f32],
    /// Floats per run.
    pub run: usize,
    /// Floats from one run's start to the next's.
    pub pitch: usize,
    /// Runs.
    pub runs: usize,
}

impl<'a> Fetch<'a> {
    /// Nothing to fetch.
    pub const NONE: Fetch<'static> = Fetch {
        data: &[],
        run: 0,
        pitch: 0,
        runs: 0,
    };

    /// The whole of `data`, one run.
    pub fn run(data: &'a [f32]) -> Self {
        Fetch {
            data,
            run: data.len(),
            pitch: data.len(),
            runs: 1,
        }
    }

    /// The kernel's form: lines per run and how many lines in all, only whole runs that
    /// lie inside `data` (a run of a partial line counts its last line).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn lines(&self) -> avx512::Ahead {
        let per = self.run.div_ceil(16);
        let inside = match self.run {
            0 => 0,
            run => self
                .runs
                .min((self.data.len() + self.pitch).saturating_sub(run) / self.pitch.max(1)),
        };
        avx512::Ahead {
            at: self.data.as_ptr(),
            lines: inside * per,
            run: per,
            pitch: self.pitch,
        }
    }
}

/// [`microkernel_rows`] that also fetches `fetch`'s lines into L2 while it runs (the rows of
/// a B block to be packed next, say).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn microkernel_rows_fetching(
    kc: usize,
    a: &[f32],
    row0: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
    fetch: Fetch<'_>,
) -> bool {
    microkernel_on(isa_in_use(), kc, a, row0, b, c, ldc, mr, nr, ep, fetch)
}

/// [`microkernel`] that also fetches `ahead` into L2 while it runs, one 64-byte line per K
/// step (at most `kc` lines, as many as `ahead` holds): a product whose packed B is weights
/// streamed from memory (the pixel rows of a pointwise convolution on a small plane, a
/// transformer's projection) hands each tile a share of the next B panel, which the tile's
/// own prefetch, a few K steps ahead, fetches too late. The AVX-512 tile only; the others
/// ignore `ahead`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn microkernel_fetching(
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
    ahead: &[f32],
) -> bool {
    microkernel_on(
        isa_in_use(),
        kc,
        a,
        0,
        b,
        c,
        ldc,
        mr,
        nr,
        ep,
        Fetch::run(ahead),
    )
}

/// True when [`tiles_strided`] runs (AVX2 without AVX-512: with AVX-512 the SGEMM's packing
/// of A transposes in registers and its 12×32 tile is faster, except for the channels-last
/// pointwise convolutions of few channels, which [`tiles_strided_wide`] serves).
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
    #[inline]
    pub fn k_step(self) -> usize {
        match self {
            Halves::Interleaved => NR,
            Halves::Split => HALF,
        }
    }

    /// Where the half from column `h` (0 or 16) starts in a panel `kc` deep.
    #[inline]
    pub fn start(self, kc: usize, h: usize) -> usize {
        match self {
            Halves::Interleaved => h,
            Halves::Split => h * kc,
        }
    }

    /// The `prefetch` offset for [`tiles_strided`] over the half from column `h` (0 or 16)
    /// of a packed B panel, K blocks `kc` deep: the half that comes next in memory (the
    /// panels of a K block, and the blocks, lie one after another).
    #[inline]
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
/// convolution's tiles: its A is the input, pixels as rows. While the six-row tiles run
/// (each its share, spread over its K steps), `kc` cache lines from `prefetch` floats past
/// `b`'s start on (64 bytes apart) are fetched into L2: a hint only, never read, so it may lie past `b`'s end (0 when nothing is worth
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
    let fits = StridedOperands {
        kc,
        a,
        lda,
        rows,
        b_len: b.len(),
        b_need,
        c,
        ldc,
        nr,
        ep,
    };
    if !fits.check(WIDE) || !strided_tiles() {
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

/// What the in-place tiles ([`tiles_strided`], [`tiles_strided_wide`]) are given, for the
/// checks both make before their kernels run.
struct StridedOperands<'a, 'e> {
    kc: usize,
    a: &'a [f32],
    lda: usize,
    rows: usize,
    b_len: usize,
    /// The furthest B value the kernel reads, plus one.
    b_need: usize,
    c: &'a [f32],
    ldc: usize,
    nr: usize,
    ep: &'a TileEpilogue<'e>,
}

impl StridedOperands<'_, '_> {
    /// Whether `1..=max_nr` columns, depth at least 1, every row of A and C and the B values
    /// read lie inside their slices, and the epilogue has no row bias and a column bias of
    /// at least `nr` values (`rows` is at least 1).
    fn check(&self, max_nr: usize) -> bool {
        let (rows, nr) = (self.rows, self.nr);
        (1..=max_nr).contains(&nr)
            && self.kc >= 1
            && (nr <= self.ldc || rows == 1)
            && self.a.len() >= (rows - 1) * self.lda + self.kc
            && self.b_len >= self.b_need
            && self.c.len() >= (rows - 1) * self.ldc + nr
            && self.ep.row_bias.is_none()
            && !matches!(self.ep.col_bias, Some(r) if r.len() < nr)
    }
}

/// Whether the tiles reading A in place ([`tiles_strided`], [`tiles_strided_wide`]) apply
/// `act` whole as they store, on the tier in use: the in-kernel activations
/// ([`Activation::in_kernel`]) everywhere, and the sigmoids and swishes
/// ([`Activation::in_registers`]) on the AVX2 and AVX-512 tiers, bit-equal to CpuAcc's
/// compiled pass (see [`crate::act_vec`]). Otherwise (the portable tier, where the tiles
/// do not run) the caller applies `act` to the stored result, and hands the tiles only
/// [`Activation::kernel_part`].
#[inline]
pub fn strided_tiles_apply(act: Activation) -> bool {
    act.in_kernel() || act.in_registers() && (wide_strided_tiles() || strided_tiles())
}

/// True when [`tiles_strided_wide`] runs: the AVX-512 tier is in use.
#[inline]
pub fn wide_strided_tiles() -> bool {
    has_avx512()
}

/// [`tiles_strided`] on AVX-512: `rows` rows of `C = A·B` with A read where it lies (row
/// `r`'s `kc` values at `a[r·lda..]`), against up to a whole packed B panel (`nr` of 1..=[`NR`]
/// columns from the panel's start `b`, its halves laid out as `halves` says), into C's rows
/// `ldc` apart with the epilogue (no row bias). Tiles of up to twelve rows by one or two
/// 16-lane columns: a pointwise convolution of few channels runs without packing A per
/// block (its K of 16-32 gave the packing as much work as the product) and a panel of at
/// most 16 columns without the 32-column tile's idle half. Returns false, computing
/// nothing, without AVX-512 ([`wide_strided_tiles`]) or when a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn tiles_strided_wide(
    kc: usize,
    a: &[f32],
    lda: usize,
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
    let (bs, upper) = (halves.k_step(), halves.start(kc, HALF));
    // The furthest B value read (masked loads read only the nr columns).
    let b_need = match nr > HALF {
        true => upper + kc.saturating_sub(1) * bs + (nr - HALF),
        false => kc.saturating_sub(1) * bs + nr,
    };
    let fits = StridedOperands {
        kc,
        a,
        lda,
        rows,
        b_len: b.len(),
        b_need,
        c,
        ldc,
        nr,
        ep,
    };
    if !fits.check(NR) || !wide_strided_tiles() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: AVX-512F is present (`wide_strided_tiles`); rows r < rows of A hold kc
        // floats at r·lda (checked: (rows-1)·lda + kc <= a.len()); the tiles read
        // b[k·bs ..] for min(nr, 16) floats and, when nr > 16, b[upper + k·bs ..] for
        // nr − 16 floats, for k < kc (masked loads), inside `b` (b_need, checked); they
        // touch c[r·ldc .. r·ldc + nr] for r < rows only, inside `c`; there is no row bias
        // and the column bias holds nr values; kc >= 1 and 1 <= nr <= NR were checked.
        unsafe {
            avx512::column_strided(
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
            );
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`tiles_strided_wide`] across two adjacent packed panels at once: `rows` rows of
/// `C = A·B` with A read where it lies (row `r`'s `kc` values at `a[r·lda..]`) against
/// `nr` of 33..=64 columns from the start of panel `b` (interleaved halves, `kc` K steps;
/// the next panel `kc·NR` floats on, as one K block of a packed B lies), into C's rows
/// `ldc` apart with the epilogue (no row bias, no scale). Tiles of six rows by four 16-lane
/// columns (eight by three for at most 48 columns): a value of A broadcast feeds four FMAs
/// instead of two, and each row of A is read once per 64 columns, which the channels-last
/// pointwise convolutions of few input channels (K 16-40) were bound by. Returns false,
/// computing nothing, without AVX-512 ([`wide_strided_tiles`]) or when a slice is too short
/// or `nr` is outside 33..=64.
#[allow(clippy::too_many_arguments)]
pub fn tiles_strided_pairs(
    kc: usize,
    a: &[f32],
    lda: usize,
    rows: usize,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) -> bool {
    if rows == 0 {
        return true;
    }
    if !(NR + 1..=2 * NR).contains(&nr) || ep.alpha != 1.0 || kc == 0 {
        return false;
    }
    // The furthest B value read: the second panel's last K step, its masked columns.
    let ps = kc * NR;
    let last = nr - NR;
    let b_need = match last > HALF {
        true => ps + HALF + (kc - 1) * NR + (last - HALF),
        false => ps + (kc - 1) * NR + last,
    };
    let fits = StridedOperands {
        kc,
        a,
        lda,
        rows,
        b_len: b.len(),
        b_need,
        c,
        ldc,
        nr,
        ep,
    };
    if !fits.check(2 * NR) || !wide_strided_tiles() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: AVX-512F is present (`wide_strided_tiles`); rows r < rows of A hold kc
        // floats at r·lda (checked: (rows-1)·lda + kc <= a.len()); the tiles read, for
        // k < kc, b[k·NR ..] for 16 floats and b[16 + k·NR ..] for 16 (the first panel,
        // whole since nr > 32), b[ps + k·NR ..] for min(nr − 32, 16) and, when nr > 48,
        // b[ps + 16 + k·NR ..] for nr − 48 (masked loads), the furthest inside `b`
        // (b_need, checked); they touch c[r·ldc .. r·ldc + nr] for r < rows only, inside
        // `c`; there is no row bias or scale and the column bias holds nr values; kc >= 1
        // and 33 <= nr <= 64 were checked.
        unsafe {
            pairs_avx512::column_pairs(
                kc,
                a.as_ptr(),
                lda,
                rows,
                b.as_ptr(),
                ps,
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
    #[inline]
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
    fetch: Fetch<'_>,
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
        // 1 <= mr and 1 <= nr <= NR were checked; `fetch` is only prefetched, and only
        // lines of its whole runs inside its slice (`Fetch::lines`).
        unsafe {
            let a = a.as_ptr().add(row0);
            let ahead = fetch.lines();
            avx512::kernel(kc, a, b.as_ptr(), c.as_mut_ptr(), ldc, mr, nr, ep, ahead);
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
                    avx2::kernel_rows::<false>(rows, kc, a, (1, MR), b, NR, c, ldc, w, &half_ep);
                } else {
                    avx2::kernel_6x16(kc, a, b, c, ldc, rows, w, &half_ep);
                }
            }
        }
        return true;
    }
    let _ = (isa, fetch);
    portable_kernel(kc, a, row0, b, c, ldc, mr, nr, ep);
    true
}

/// Rows of one K block of a packed operand: the depth a micro-kernel call accumulates.
pub const KC: usize = 256;

/// Where element (row `r`, column `j`) of a K×N B operand lies in the packed-panel layout
/// the GEMM packs B into: K blocks of [`KC`] rows, each holding the [`NR`]-column panels one
/// after another, a panel's rows `NR` floats apart. The layout takes `k · ⌈n / NR⌉ · NR`
/// floats.
#[inline]
pub fn panel_offset(k: usize, n: usize, r: usize, j: usize) -> usize {
    let padded = n.div_ceil(NR) * NR;
    let k0 = r / KC * KC;
    let kc = KC.min(k - k0);
    k0 * padded + (j / NR) * kc * NR + (r - k0) * NR + j % NR
}

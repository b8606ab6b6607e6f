//! The AVX-512F micro-kernels: 12×32 tiles, one monomorphized kernel per row count.

use super::{TileEpilogue, MR, NR};
use crate::act::Activation;
use std::arch::x86_64::*;

/// An in-kernel activation (see [`Activation::in_kernel`]) with its constants in
/// registers, applied to accumulators before they are stored; the kernels that store
/// through it share one definition of what Relu, Clip and LeakyRelu compute (and, through
/// [`Act512::apply_all`], the depthwise rows that of the sigmoids and swishes).
#[derive(Clone, Copy)]
pub(crate) struct Act512 {
    act: Activation,
    lo: __m512,
    hi: __m512,
    slope: __m512,
}

impl Act512 {
    /// The constants of `act`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn new(act: Activation) -> Self {
        let (lo, hi, slope) = match act {
            Activation::Clip { min, max } => (min, max, 0.0),
            Activation::LeakyRelu { alpha } => (0.0, 0.0, alpha),
            Activation::HardSigmoid { alpha, beta } => (beta, 0.0, alpha),
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
    pub(crate) fn apply(&self, v: __m512) -> __m512 {
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

    /// `act(v)` lane by lane for every activation of [`Activation::in_registers`] (the
    /// channels-last depthwise rows' epilogue): [`Act512::apply`] and the sigmoid, SiLU and
    /// hard sigmoid and swish, kept out of `apply` so that the GEMM tiles' epilogue stays
    /// small; the others pass `v` through.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn apply_all(&self, v: __m512) -> __m512 {
        match self.act {
            Activation::Sigmoid => crate::act_vec::avx512::sigmoid(v),
            Activation::Silu => crate::act_vec::avx512::silu(v),
            Activation::HardSwish => crate::act_vec::avx512::hard_swish(v),
            Activation::HardSigmoid { .. } => {
                crate::act_vec::avx512::hard_sigmoid(self.slope, self.lo, v)
            }
            _ => self.apply(v),
        }
    }
}

/// How many k steps ahead the tile prefetches its panels.
const PREFETCH: usize = 8;
/// How many k steps ahead the tile prefetches its A panel: far enough (96 · 48 bytes,
/// about two tiles' time) to cover a read from memory, since A is a layer's packed weights
/// and a network's weights outgrow the caches, so each inference streams them from memory
/// once; at this distance cold weights ran as fast as warm ones (docs/cpu-acc-bounds.md,
/// "AVX-512 GEMM prefetch").
const PREFETCH_A: usize = 96;

/// Store an R×(16·C) tile of accumulators (`acc`, `[[__m512; C]; R]`, R at most the
/// row indices listed) into C with the epilogue (scale, earlier contents, biases,
/// activation), masked to `nr` columns; `$all` (a constant) true applies every activation
/// of [`Activation::in_registers`] ([`Act512::apply_all`]), false only the in-kernel ones. A macro, not a function: a `#[target_feature]`
/// function cannot be forced inline, and where the compiler declined (9–12-row tiles,
/// the main one among them) the accumulators went through the stack, zeroed by a memset
/// call per tile (4% of MobileNetV2's time). Safety: as [`kernel`].
macro_rules! store_tile {
    ($acc:expr, $c:expr, $ldc:expr, $nr:expr, $ep:expr, $cols:expr, $all:expr; $($row:literal)*) => {{
        let z = _mm512_setzero_ps();
        let masks: [__mmask16; $cols] = crate::lanes::first16_each($nr);
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
                    v = match $all {
                        true => act.apply_all(v),
                        false => act.apply(v),
                    };
                }
                _mm512_mask_storeu_ps(pj, m, v);
            }
        })*
    }};
}

/// Lines a tile fetches into L2 as it runs, one per K step: `lines` of them, in runs of
/// `run` lines 64 bytes apart, the runs `pitch` floats apart, from `at` on. Only
/// prefetched, never read, so `at` may point anywhere.
#[derive(Clone, Copy)]
pub(crate) struct Ahead {
    pub(crate) at: *const f32,
    pub(crate) lines: usize,
    pub(crate) run: usize,
    pub(crate) pitch: usize,
}

/// Run the AVX-512 tile for `mr` rows and `nr` columns: one monomorphized kernel per row
/// count, so a short edge tile costs only its own rows, and one or two 16-lane columns.
/// Safety: AVX-512F present; `a` readable for kc*MR floats, `b`
/// for kc*NR; rows r < mr of `c` readable and writable for nr floats at c + r*ldc; biases
/// readable for mr (row) and nr (column) floats; 1 <= mr <= MR, 1 <= nr <= NR.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
    ahead: Ahead,
) {
    let ahead = Ahead {
        lines: ahead.lines.min(kc),
        run: ahead.run.max(1),
        ..ahead
    };
    macro_rules! dispatch {
        ($($r:literal)*) => {
            match (mr, nr > 16) {
                $(($r, false) => tile::<$r, 1>(kc, a, b, c, ldc, nr, ep, ahead),
                  ($r, true) => tile::<$r, 2>(kc, a, b, c, ldc, nr, ep, ahead),)*
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
/// and issues 24 FMAs per 14 loads. The first `ahead.lines` K steps each also fetch one
/// line of `ahead` into L2 (the next B panel of weights streamed from memory, or the rows
/// of the next block of B to pack). Safety: as [`kernel`], with R == mr and nr <= 16·C.
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
    ahead: Ahead,
) {
    let z = _mm512_setzero_ps();
    let mut acc = [[z; C]; R];
    // The next line to fetch, the start of its run and its place in the run.
    let (mut line, mut run_at, mut in_run) = (ahead.at, ahead.at, 0);
    for k in 0..kc {
        if k < ahead.lines {
            _mm_prefetch::<_MM_HINT_T1>(line as *const i8);
            in_run += 1;
            line = line.wrapping_add(16);
            if in_run == ahead.run {
                in_run = 0;
                run_at = run_at.wrapping_add(ahead.pitch);
                line = run_at;
            }
        }
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
    store_tile!(acc, c, ldc, nr, ep, C, false; 0 1 2 3 4 5 6 7 8 9 10 11);
}

/// [`kernel`] with B read in place: k step `t`'s B row is `x + offs[t]`. Safety: as
/// [`kernel`], with `a + t·MR + r` readable for t < offs.len(), r < mr, and `x + offs[t]`
/// readable for nr floats for every t.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn kernel_in_place(
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
    let masks: [__mmask16; C] = crate::lanes::first16_each(nr);
    for &off in offs {
        let b = x.add(off);
        // Ask for the next tile's run of this row (the callers walk a row's tiles left
        // to right): each row is a different page, too many streams for the hardware
        // prefetcher, and without this the loads stall the FMAs (docs/cpu-acc-bounds.md,
        // "AVX-512 GEMM prefetch").
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
    store_tile!(acc, c, ldc, nr, ep, C, false; 0 1 2 3 4 5 6 7 8 9 10 11);
}

/// Rows `0..rows` of `C = A·B` with A read where it lies (row `r`'s K steps at
/// `a + r·lda`), against a packed B panel whose first 16 columns' K step `k` lies at
/// `b + k·bs` and whose next 16 at `b + upper + k·bs`: tiles of up to twelve rows, as even
/// as they can be (49 rows as four of ten and one of nine, not four of twelve and a single
/// row whose two FMA chains wait on their latency), each one or two 16-lane columns wide.
/// The epilogue's activation may be any of [`Activation::in_registers`] (the pointwise
/// convolutions' SiLU and hard swish applied as the tile is stored, not by a pass over
/// the stored block).
/// Safety: AVX-512F present; `a + r·lda + k` readable for r < rows, k < kc; `b + k·bs` for
/// min(nr, 16) floats and, when nr > 16, `b + upper + k·bs` for nr − 16 floats, for k < kc;
/// rows r < rows of `c` readable and writable for nr floats at c + r·ldc; no row bias, the
/// column bias readable for nr floats; kc >= 1, 1 <= nr <= NR.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn column_strided(
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
) {
    // The sigmoids and swishes in the store only in a tile variant of their own, so the
    // other activations' tiles keep their small store code.
    let all = ep.last && !ep.act.in_kernel() && ep.act.in_registers();
    macro_rules! dispatch {
        ($mr:expr, $a:expr, $c:expr; $($r:literal)*) => {
            match ($mr, nr > 16, all) {
                $(($r, false, false) => tile_strided::<$r, 1, false>(kc, $a, lda, b, (bs, upper), $c, ldc, nr, ep),
                  ($r, true, false) => tile_strided::<$r, 2, false>(kc, $a, lda, b, (bs, upper), $c, ldc, nr, ep),
                  ($r, false, true) => tile_strided::<$r, 1, true>(kc, $a, lda, b, (bs, upper), $c, ldc, nr, ep),
                  ($r, true, true) => tile_strided::<$r, 2, true>(kc, $a, lda, b, (bs, upper), $c, ldc, nr, ep),)*
                _ => {}
            }
        };
    }
    let tiles = rows.div_ceil(MR);
    let (base, extra) = (rows / tiles.max(1), rows % tiles.max(1));
    let mut r0 = 0;
    for t in 0..tiles {
        let mr = base + usize::from(t < extra);
        let (ar, cr) = (a.add(r0 * lda), c.add(r0 * ldc));
        dispatch!(mr, ar, cr; 1 2 3 4 5 6 7 8 9 10 11 12);
        r0 += mr;
    }
}

/// The R×(16·C) tile of [`column_strided`]: per K step, C vectors of B (masked to `nr`
/// columns, so nothing past them is read) and R broadcasts straight from A's rows; `ALL`
/// applies the whole activation of [`Activation::in_registers`] as the tile is stored.
/// Safety: as [`column_strided`], with R rows and nr <= 16·C.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_strided<const R: usize, const C: usize, const ALL: bool>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    (bs, upper): (usize, usize),
    c: *mut f32,
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) {
    let z = _mm512_setzero_ps();
    let mut acc = [[z; C]; R];
    let masks: [__mmask16; C] = crate::lanes::first16_each(nr);
    let starts = [0, upper];
    for k in 0..kc {
        let mut bv = [z; C];
        for (j, v) in bv.iter_mut().enumerate() {
            *v = _mm512_maskz_loadu_ps(masks[j], b.add(starts[j] + k * bs));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*a.add(r * lda + k));
            for (o, &v) in row.iter_mut().zip(&bv) {
                *o = _mm512_fmadd_ps(av, v, *o);
            }
        }
    }
    store_tile!(acc, c, ldc, nr, ep, C, ALL; 0 1 2 3 4 5 6 7 8 9 10 11);
}

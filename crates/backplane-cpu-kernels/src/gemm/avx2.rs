//! The AVX2+FMA micro-kernels: 6×16 tiles (two per 12×32 tile), the tiles that read A in
//! place, and the in-register activations they store through.

use super::{TileEpilogue, HALF, MR, NR};
use crate::act::Activation;
use std::arch::x86_64::*;

/// An in-kernel activation (see [`Activation::in_kernel`]) with its constants in
/// registers: the AVX2 twin of the AVX-512 kernels' `Act512` (its `apply_all` too), shared
/// by the AVX2 kernels that store through it.
#[derive(Clone, Copy)]
pub(crate) struct Act256 {
    act: Activation,
    lo: __m256,
    hi: __m256,
    slope: __m256,
}

impl Act256 {
    /// The constants of `act`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn new(act: Activation) -> Self {
        let (lo, hi, slope) = match act {
            Activation::Clip { min, max } => (min, max, 0.0),
            Activation::LeakyRelu { alpha } => (0.0, 0.0, alpha),
            Activation::HardSigmoid { alpha, beta } => (beta, 0.0, alpha),
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
    pub(crate) fn apply(&self, v: __m256) -> __m256 {
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

    /// `act(v)` lane by lane for every activation of [`Activation::in_registers`] (the
    /// channels-last depthwise rows' epilogue): [`Act256::apply`] and the sigmoid, SiLU and
    /// hard sigmoid and swish, kept out of `apply` so that the GEMM tiles' epilogue stays
    /// small; the others pass `v` through.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn apply_all(&self, v: __m256) -> __m256 {
        match self.act {
            Activation::Sigmoid => crate::act_vec::avx2::sigmoid(v),
            Activation::Silu => crate::act_vec::avx2::silu(v),
            Activation::HardSwish => crate::act_vec::avx2::hard_swish(v),
            Activation::HardSigmoid { .. } => {
                crate::act_vec::avx2::hard_sigmoid(self.slope, self.lo, v)
            }
            _ => self.apply(v),
        }
    }

    /// `act(x)` for one value, as [`Act256::apply_all`] computes it in a lane (the scalar
    /// tails of the kernels that store through it).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn apply_scalar(&self, x: f32) -> f32 {
        match self.act.in_kernel() {
            true => self.act.apply_simple(x),
            false => _mm256_cvtss_f32(self.apply_all(_mm256_set1_ps(x))),
        }
    }
}

/// `y[i] = act(y[i])` for an in-kernel activation, whole vectors stored. Safety: AVX2
/// and FMA present.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn act_in_place(act: Activation, y: &mut [f32]) {
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
                unsafe { _mm256_storeu_ps(b.as_mut_ptr(), a.apply(_mm256_loadu_ps(b.as_ptr()))) };
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
pub(crate) unsafe fn kernel_in_place_6x16(
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
    store_6x16::<false>(acc, c, ldc, mr, nr, ep);
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
pub(crate) unsafe fn kernel_6x16(
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
    store_6x16::<false>(rows, c, ldc, mr, nr, ep);
}

/// [`kernel_6x16`] for `mr` < 6 rows, computing just those: `mr` broadcasts and 2·`mr`
/// FMAs per K step instead of six and twelve. A's element (row r, step k) is at
/// `a + r·steps.0 + k·steps.1`: `(1, MR)` for a packed panel, `(lda, 1)` for rows read in
/// place; B's K steps are `bs` floats apart. Safety: AVX2 and FMA present; those elements
/// readable for r < mr, k < kc; `b` readable for 16 floats at each of kc steps of `bs`;
/// C and biases as for [`kernel_6x16`]; 1 <= mr < 6, nr <= 16.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn kernel_rows<const ALL: bool>(
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
        1 => rows_tile::<1, ALL>(kc, a, steps, b, bs, c, ldc, nr, ep),
        2 => rows_tile::<2, ALL>(kc, a, steps, b, bs, c, ldc, nr, ep),
        3 => rows_tile::<3, ALL>(kc, a, steps, b, bs, c, ldc, nr, ep),
        4 => rows_tile::<4, ALL>(kc, a, steps, b, bs, c, ldc, nr, ep),
        _ => rows_tile::<5, ALL>(kc, a, steps, b, bs, c, ldc, nr, ep),
    }
}

/// [`kernel_rows`] for `R` rows, unrolled.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_tile<const R: usize, const ALL: bool>(
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
    prefetch_tile(c, ldc, R, nr);
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
    store_6x16::<ALL>(acc, c, ldc, R, nr, ep);
}

/// [`kernel_6x16`] with A read in place: row r's K values start at `a + r·lda` (rows
/// r ≥ mr read row mr-1 again, their results not stored). Safety: AVX2 and FMA present;
/// rows r < mr of A readable for kc floats at a + r·lda; `b` readable for 16 floats at
/// each of kc steps of `bs`; C and biases as for [`kernel_6x16`]; 1 <= mr <= 6,
/// nr <= 16. The tile also prefetches (into L2) the `pf.1` lines `pf.0 + 16·l`, one every
/// `pf.2` K steps (any addresses: a prefetch never faults, and they are not read).
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn kernel_strided_6x16<const ALL: bool>(
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
    (pf, lines, every): (*const f32, usize, usize),
) {
    let (mut pf, mut lines) = (pf, lines);
    let mut due = 0;
    let row = |r: usize| a.add(r.min(mr - 1) * lda);
    let (a0, a1, a2, a3, a4, a5) = (row(0), row(1), row(2), row(3), row(4), row(5));
    prefetch_tile(c, ldc, mr, nr);
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
        if k == due && lines > 0 {
            _mm_prefetch::<_MM_HINT_T1>(pf as *const i8);
            pf = pf.wrapping_add(HALF);
            lines -= 1;
            due += every;
        }
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
    store_6x16::<ALL>(rows, c, ldc, mr, nr, ep);
}

/// [`kernel_strided_6x16`] with A's K steps at given offsets: row r's value at step k is
/// `a[r·lda + offs[k]]` (rows r ≥ mr read row mr-1). Safety: AVX2 and FMA present;
/// `offs` readable for kc values; a + r·lda + offs[k] readable for r < mr, k < kc; `b`
/// readable for 16 floats at each of kc steps of `bs`; C and biases as for
/// [`kernel_6x16`]; 1 <= mr <= 6, nr <= 16.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn kernel_offsets_6x16(
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
    store_6x16::<false>(rows, c, ldc, mr, nr, ep);
}

/// [`kernel_offsets_6x16`] down `rows` rows of A and C, six at a time. Safety: as
/// [`kernel_offsets_6x16`] for every tile, rows r < `rows`; rows >= 1.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn column_offsets(
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
unsafe fn kernel_strided_3x24<const ALL: bool>(
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
    store_6x16::<ALL>(left, c, ldc, mr, HALF, ep);
    let right = [(c02, z), (c12, z), (c22, z), (z, z), (z, z), (z, z)];
    let ep_right = TileEpilogue {
        col_bias: ep.col_bias.map(|cb| &cb[HALF..]),
        ..*ep
    };
    store_6x16::<ALL>(right, c.add(HALF), ldc, mr, nr - HALF, &ep_right);
}

/// [`kernel_strided_6x16`] down `rows` rows of A and C, in tiles of five or six rows
/// where there are that many, the six-row ones sharing out the prefetch of `kc` lines
/// from `pf` (see [`super::tiles_strided`]); more than 16 columns take 3×24 tiles, three
/// rows at a time, without the prefetch. Safety: as [`kernel_strided_6x16`] for every tile: rows
/// r < `rows` of A readable for kc floats at a + r·lda, of C writable for nr floats at
/// c + r·ldc; rows >= 1.
/// The epilogue's activation may be any of [`Activation::in_registers`]: the sigmoids and
/// swishes are applied as the tiles are stored, by tile variants of their own (so the
/// other activations' tiles keep their small store code).
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn column_strided(
    kc: usize,
    a: *const f32,
    lda: usize,
    rows: usize,
    b: *const f32,
    bs: (usize, usize),
    c: *mut f32,
    ldc: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
    pf: *const f32,
) {
    match ep.last && !ep.act.in_kernel() && ep.act.in_registers() {
        true => column_strided_as::<true>(kc, a, lda, rows, b, bs, c, ldc, nr, ep, pf),
        false => column_strided_as::<false>(kc, a, lda, rows, b, bs, c, ldc, nr, ep, pf),
    }
}

/// [`column_strided`] with the whole activation in the store (`ALL`) or its in-kernel
/// part. Safety: as [`column_strided`].
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn column_strided_as<const ALL: bool>(
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
            kernel_strided_3x24::<ALL>(kc, ar, lda, b, (bs, upper), cr, ldc, mr, nr, ep);
            r0 += WIDE_ROWS;
        }
        return;
    }
    // Tiles as even as they can be: 49 rows as four tiles of six and five of five, not
    // eight of six and one of one (whose two FMA chains wait on their latency: it took
    // two thirds of a full tile's time for a sixth of its work).
    let tiles = rows.div_ceil(super::AVX2_ROWS);
    let (base, extra) = (rows / tiles, rows % tiles);
    // The `kc` lines from `pf` are shared out between the six-row tiles, each fetching its
    // share evenly over its K steps. Fetched all by the first tile, one per K step, B from
    // memory (GPT-2's lm_head, 154 MB) is asked for at 16 KB per tile's time, more than a
    // loaded core's share of the memory's bandwidth (the speed effect is unmeasured: see
    // docs/perf.md, "The float GEMM, session 40").
    let full = match base {
        6 => tiles,
        5 => extra,
        _ => 0,
    };
    let share = kc.div_ceil(full.max(1));
    let every = (kc / share.max(1)).max(1);
    let mut r0 = 0;
    for t in 0..tiles {
        let mr = base + usize::from(t < extra);
        let (ar, cr) = (a.add(r0 * lda), c.add(r0 * ldc));
        if mr < super::AVX2_ROWS {
            kernel_rows::<ALL>(mr, kc, ar, (lda, 1), b, bs, cr, ldc, nr, ep);
        } else {
            let first = (t * share).min(kc);
            let lines = share.min(kc - first);
            let pf = (pf.wrapping_add(first * HALF), lines, every);
            kernel_strided_6x16::<ALL>(kc, ar, lda, b, bs, cr, ldc, mr, nr, ep, pf);
        }
        r0 += mr;
    }
}

/// Fetch the first `mr` rows of `nr` (≤ 16) columns of a C tile into L2 while the K loop
/// runs: the epilogue reads them back (after the first K block) and writes them, and a C
/// past L2 (ViT's 197-row products: 0.6-2.4 MB) otherwise comes from L3 once per K block
/// with the FMAs waiting on it. Safety: `c + r·ldc` for r < mr lies inside C's allocation
/// (a prefetch reads nothing and never faults; `wrapping_add` keeps the end of a row, which
/// may be its allocation's last element, from being an out-of-bounds `add`).
#[inline(always)]
unsafe fn prefetch_tile(c: *const f32, ldc: usize, mr: usize, nr: usize) {
    for r in 0..mr {
        let p = c.wrapping_add(r * ldc);
        _mm_prefetch::<_MM_HINT_T1>(p as *const i8);
        _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(nr.max(1) - 1) as *const i8);
    }
}

/// Store a 6×16 tile of accumulators (`rows`, six pairs of eight columns) into C with
/// the epilogue: its first `mr` rows and `nr` columns. Safety: AVX2 and FMA present; C's
/// rows r < mr writable (and readable) for nr floats at c + r·ldc; biases readable for
/// mr (row) and nr (column) floats; mr <= 6, nr <= 16. Always inlined into the
/// kernels (without a target feature of its own, which `inline(always)` does not allow):
/// called, it took its twelve accumulators through the stack.
#[inline(always)]
unsafe fn store_6x16<const ALL: bool>(
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
            6 => return store_full::<6, ALL>(rows, c, ldc, ep),
            5 => return store_full::<5, ALL>(rows, c, ldc, ep),
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
            (v0, v1) = act_pair::<ALL>(&act, _mm256_add_ps(v0, cb0), _mm256_add_ps(v1, cb1));
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

/// The activation on a row's two vectors: the whole of [`Activation::in_registers`] when
/// `ALL` ([`Act256::apply_all`]), else the in-kernel part ([`Act256::apply`]). Safety: AVX2
/// and FMA present.
#[inline(always)]
unsafe fn act_pair<const ALL: bool>(act: &Act256, v0: __m256, v1: __m256) -> (__m256, __m256) {
    match ALL {
        true => (act.apply_all(v0), act.apply_all(v1)),
        false => (act.apply(v0), act.apply(v1)),
    }
}

/// [`store_6x16`] for the common tiles: `R` (five or six) rows of sixteen columns, no
/// scale, no row bias. A fixed row count unrolls the loop and keeps the accumulators in
/// registers (the general loop, with its run-time row count, spilled them to the stack
/// and read them back: a cost per tile that a K of 16 or 24 does not hide; MobileNetV2's
/// K 16-32 layers 5-9% faster). Safety: as [`store_6x16`] with mr = R, nr = 16.
#[inline(always)]
unsafe fn store_full<const R: usize, const ALL: bool>(
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
            (v0, v1) = act_pair::<ALL>(&act, _mm256_add_ps(v0, cb0), _mm256_add_ps(v1, cb1));
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

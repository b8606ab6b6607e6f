//! Every `unsafe` block of CpuAcc lives here: the AVX2+FMA SGEMM micro-kernel and the
//! target-feature wrappers that compile the crate's safe, autovectorizable kernel bodies with
//! AVX2 enabled ("multiversioning").
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

use crate::act::Activation;

/// Rows of the micro-kernel's output tile (and of a packed A panel).
pub const MR: usize = 6;
/// Columns of the micro-kernel's output tile (and of a packed B panel): two AVX-512
/// registers, or two AVX2 6×16 half-tiles.
pub const NR: usize = 32;
/// Columns of one AVX2 half-tile.
const HALF: usize = 16;

/// True when this CPU has AVX-512F (and AVX2+FMA).
#[inline]
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && has_avx2_fma()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Which micro-kernel runs, for display.
pub fn isa() -> &'static str {
    if has_avx512() {
        "avx512f"
    } else if has_avx2_fma() {
        "avx2+fma"
    } else {
        "portable"
    }
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
    if mr == 0 || nr == 0 {
        return true;
    }
    let c_need = (mr - 1) * ldc + nr;
    let ok = mr <= MR
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
    if nr > HALF && has_avx512() {
        // SAFETY: AVX-512F is present (checked). `a` holds kc*MR and `b` kc*NR values, so
        // every load of the k loop is in bounds; for each row r < mr the kernel touches
        // c[r*ldc .. r*ldc + nr] only (masked loads/stores), within `c` because
        // c.len() >= (mr-1)*ldc + nr; the bias slices were checked to hold mr and nr values.
        unsafe {
            avx512::kernel_6x32(kc, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc, mr, nr, ep);
        }
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // Two half-tiles of 16 columns (the second only when there are more than 16).
        for (h, w) in [(0, nr.min(HALF)), (HALF, nr.saturating_sub(HALF))] {
            if w == 0 {
                continue;
            }
            let half_ep = TileEpilogue {
                col_bias: ep.col_bias.map(|cb| &cb[h..]),
                ..*ep
            };
            // SAFETY: AVX2 and FMA are present (checked above). The kernel reads, per k step,
            // b[h .. h+16] of a kc×NR panel (`b` holds kc*NR values and h + 16 <= NR) and
            // MR values of `a` (which holds kc*MR); for each row r < mr it touches
            // c[r*ldc + h .. + w] only (masked for w < 16), within `c` because h + w <= nr and
            // c.len() >= (mr-1)*ldc + nr; the row bias holds mr values and the column bias,
            // offset by h, at least w.
            unsafe {
                avx2::kernel_6x16(
                    kc,
                    a.as_ptr(),
                    b.as_ptr().add(h),
                    c.as_mut_ptr().add(h),
                    ldc,
                    mr,
                    w,
                    &half_ep,
                );
            }
        }
        return true;
    }
    portable_kernel(kc, a, b, c, ldc, mr, nr, ep);
    true
}

/// The portable micro-kernel: the same contract as the AVX2 one, in plain Rust.
#[allow(clippy::too_many_arguments)]
fn portable_kernel(
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    mr: usize,
    nr: usize,
    ep: &TileEpilogue<'_>,
) {
    let mut acc = [[0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        for (row, &av) in acc.iter_mut().zip(ap) {
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

    /// Lane masks: `MASKS[8 - n..16 - n]` enables the first `n` lanes.
    static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

    #[inline(always)]
    unsafe fn mask(n: usize) -> __m256i {
        // SAFETY (caller): n <= 8, so 8 - n .. 16 - n lies within MASKS.
        _mm256_loadu_si256(MASKS.as_ptr().add(8 - n) as *const __m256i)
    }

    /// The 6×16 AVX2 tile (one half of a 32-column B panel, whose k steps are NR apart).
    /// Safety: AVX2+FMA present; `a` readable for kc*MR floats, `b` for 16 floats at each of
    /// kc steps of NR; rows r < mr of `c` readable and writable for nr floats at c + r*ldc;
    /// biases readable for mr (row) and nr (column) floats; mr <= MR, nr <= 16.
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
        let zero = _mm256_setzero_ps();
        let (lo, hi, slope) = match ep.act {
            Activation::Clip { min, max } => (min, max, 0.0),
            Activation::LeakyRelu { alpha } => (0.0, 0.0, alpha),
            _ => (0.0, 0.0, 0.0),
        };
        let (lo, hi, slope) = (
            _mm256_set1_ps(lo),
            _mm256_set1_ps(hi),
            _mm256_set1_ps(slope),
        );
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
                    v0 = _mm256_add_ps(v0, _mm256_maskload_ps(p, m0));
                    v1 = _mm256_add_ps(v1, _mm256_maskload_ps(p.add(8), m1));
                }
            }
            if ep.last {
                if let Some(rb) = ep.row_bias {
                    let bias = _mm256_set1_ps(*rb.as_ptr().add(r));
                    v0 = _mm256_add_ps(v0, bias);
                    v1 = _mm256_add_ps(v1, bias);
                }
                v0 = _mm256_add_ps(v0, cb0);
                v1 = _mm256_add_ps(v1, cb1);
                match ep.act {
                    // max(0, v) returns v when v is NaN, so NaN propagates like CpuRef's.
                    Activation::Relu => {
                        v0 = _mm256_max_ps(zero, v0);
                        v1 = _mm256_max_ps(zero, v1);
                    }
                    Activation::Clip { .. } => {
                        v0 = _mm256_min_ps(hi, _mm256_max_ps(lo, v0));
                        v1 = _mm256_min_ps(hi, _mm256_max_ps(lo, v1));
                    }
                    Activation::LeakyRelu { .. } => {
                        let neg0 = _mm256_cmp_ps::<_CMP_LT_OQ>(v0, zero);
                        let neg1 = _mm256_cmp_ps::<_CMP_LT_OQ>(v1, zero);
                        v0 = _mm256_blendv_ps(v0, _mm256_mul_ps(v0, slope), neg0);
                        v1 = _mm256_blendv_ps(v1, _mm256_mul_ps(v1, slope), neg1);
                    }
                    _ => {}
                }
            }
            if full {
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p.add(8), v1);
            } else {
                _mm256_maskstore_ps(p, m0, v0);
                _mm256_maskstore_ps(p.add(8), m1, v1);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{TileEpilogue, MR, NR};
    use crate::act::Activation;
    use std::arch::x86_64::*;

    /// The 6×32 AVX-512 tile. Safety: AVX-512F present; `a` readable for kc*MR floats, `b`
    /// for kc*NR; rows r < mr of `c` readable and writable for nr floats at c + r*ldc; biases
    /// readable for mr (row) and nr (column) floats; mr <= MR, nr <= NR.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_6x32(
        kc: usize,
        mut a: *const f32,
        mut b: *const f32,
        c: *mut f32,
        ldc: usize,
        mr: usize,
        nr: usize,
        ep: &TileEpilogue<'_>,
    ) {
        let z = _mm512_setzero_ps();
        let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21) = (z, z, z, z, z, z);
        let (mut c30, mut c31, mut c40, mut c41, mut c50, mut c51) = (z, z, z, z, z, z);
        for _ in 0..kc {
            let b0 = _mm512_loadu_ps(b);
            let b1 = _mm512_loadu_ps(b.add(16));
            let a0 = _mm512_set1_ps(*a);
            c00 = _mm512_fmadd_ps(a0, b0, c00);
            c01 = _mm512_fmadd_ps(a0, b1, c01);
            let a1 = _mm512_set1_ps(*a.add(1));
            c10 = _mm512_fmadd_ps(a1, b0, c10);
            c11 = _mm512_fmadd_ps(a1, b1, c11);
            let a2 = _mm512_set1_ps(*a.add(2));
            c20 = _mm512_fmadd_ps(a2, b0, c20);
            c21 = _mm512_fmadd_ps(a2, b1, c21);
            let a3 = _mm512_set1_ps(*a.add(3));
            c30 = _mm512_fmadd_ps(a3, b0, c30);
            c31 = _mm512_fmadd_ps(a3, b1, c31);
            let a4 = _mm512_set1_ps(*a.add(4));
            c40 = _mm512_fmadd_ps(a4, b0, c40);
            c41 = _mm512_fmadd_ps(a4, b1, c41);
            let a5 = _mm512_set1_ps(*a.add(5));
            c50 = _mm512_fmadd_ps(a5, b0, c50);
            c51 = _mm512_fmadd_ps(a5, b1, c51);
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
        let lanes = |n: usize| -> __mmask16 {
            if n >= 16 {
                0xffff
            } else {
                ((1u32 << n) - 1) as __mmask16
            }
        };
        let (m0, m1) = (lanes(nr.min(16)), lanes(nr.saturating_sub(16)));
        let alpha = _mm512_set1_ps(ep.alpha);
        let (cb0, cb1) = match (ep.last, ep.col_bias) {
            (true, Some(cb)) => (
                _mm512_maskz_loadu_ps(m0, cb.as_ptr()),
                _mm512_maskz_loadu_ps(m1, cb.as_ptr().add(16)),
            ),
            _ => (z, z),
        };
        let (lo, hi, slope) = match ep.act {
            Activation::Clip { min, max } => (min, max, 0.0),
            Activation::LeakyRelu { alpha } => (0.0, 0.0, alpha),
            _ => (0.0, 0.0, 0.0),
        };
        let (lo, hi, slope) = (
            _mm512_set1_ps(lo),
            _mm512_set1_ps(hi),
            _mm512_set1_ps(slope),
        );
        for (r, &(mut v0, mut v1)) in rows.iter().enumerate().take(mr) {
            let p = c.add(r * ldc);
            if ep.alpha != 1.0 {
                v0 = _mm512_mul_ps(v0, alpha);
                v1 = _mm512_mul_ps(v1, alpha);
            }
            if ep.accumulate {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, p));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, p.add(16)));
            }
            if ep.last {
                if let Some(rb) = ep.row_bias {
                    let bias = _mm512_set1_ps(*rb.as_ptr().add(r));
                    v0 = _mm512_add_ps(v0, bias);
                    v1 = _mm512_add_ps(v1, bias);
                }
                v0 = _mm512_add_ps(v0, cb0);
                v1 = _mm512_add_ps(v1, cb1);
                match ep.act {
                    // max(0, v) returns v when v is NaN, so NaN propagates like CpuRef's.
                    Activation::Relu => {
                        v0 = _mm512_max_ps(z, v0);
                        v1 = _mm512_max_ps(z, v1);
                    }
                    Activation::Clip { .. } => {
                        v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
                        v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
                    }
                    Activation::LeakyRelu { .. } => {
                        let n0 = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v0, z);
                        let n1 = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v1, z);
                        v0 = _mm512_mask_mul_ps(v0, n0, v0, slope);
                        v1 = _mm512_mask_mul_ps(v1, n1, v1, slope);
                    }
                    _ => {}
                }
            }
            _mm512_mask_storeu_ps(p, m0, v0);
            _mm512_mask_storeu_ps(p.add(16), m1, v1);
        }
    }
}

/// Define a safe function that runs an `#[inline(always)]` safe body compiled with AVX2+FMA
/// when the CPU has them, and the same body compiled for the baseline otherwise.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:path;) => {
        $(#[$meta])*
        #[inline]
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
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
    /// Apply a unary function in place.
    pub fn unary_in_place(act: Activation, y: &mut [f32]) => crate::math::unary_in_place_body;
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
    /// A block of small depthwise planes, channels-last (see `crate::depthwise`).
    pub fn depthwise_block(plan: &crate::depthwise::Plan, x: &[f32], n: usize, w: &[f32], bias: &[f32], act: Activation, out: &mut [f32], scratch: &mut [f32])
        => crate::depthwise::block_body;
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
    /// Layer normalization of one row.
    pub fn layer_norm_row(x: &[f32], scale: &[f32], bias: Option<&[f32]>, epsilon: f32, y: &mut [f32])
        => crate::norm::layer_norm_row_body;
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
    /// Winograd input transform of one block of tiles (see `crate::winograd`).
    pub fn winograd_input(tiles: &crate::winograd::Tiles, c: usize, blk: &crate::winograd::Block, x: &[f32], v: &mut [f32])
        => crate::winograd::input_body;
}
multiversion! {
    /// Winograd output transform of one block of tiles, with bias and activation (see
    /// `crate::winograd`).
    pub fn winograd_output(geo: &crate::window::Geo2, tiles: &crate::winograd::Tiles, blk: &crate::winograd::Block, ep: &crate::winograd::OutEpilogue<'_>, mo: &[f32], dest: &mut crate::winograd::Dest<'_>)
        => crate::winograd::output_body;
}

#[cfg(test)]
mod tests {
    use super::*;

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
            for (mr, nr) in [(MR, NR), (1, 1), (5, 17), (6, 16), (3, 31), (2, 8)] {
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
                    let (mut fast, mut slow) = (init.clone(), init.clone());
                    assert!(microkernel(kc, &a, &b, &mut fast, ldc, mr, nr, &ep));
                    portable_kernel(kc, &a, &b, &mut slow, ldc, mr, nr, &ep);
                    for (i, (x, y)) in fast.iter().zip(&slow).enumerate() {
                        assert!(
                            (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                            "{act:?} {mr}x{nr} at {i}: {x} vs {y}"
                        );
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
    }
}

//! The AVX-512 micro-tiles of the integer GEMM: up to [`ROWS`] rows of A against one
//! 16-column panel. A panel's pair of K steps (16 columns × 2 values, [`super::packed_at`])
//! is one 512-bit vector, so each row's 16 sums are one register: a broadcast pair of A
//! against it, `vpmaddwd` then `vpaddd` (AVX-512BW, [`bw`]) or the one `vpdpwssd` that fuses
//! them (AVX-512 VNNI, [`vnni`]). The sums are exact either way (pairs of centered 8-bit
//! values; `vpdpwssd` adds without saturating), so both give the AVX2 and portable tiles'
//! sums. Stored as int32 sums (`tile`) or requantized to bytes in registers
//! (`tile_requant`) with the f32 operations of [`super::requantize_channels`], in its order.
//!
//! Twelve rows, not the AVX2 tile's four: `vpdpwssd` accumulates in place, so each
//! accumulator is a dependency chain through an instruction of several cycles' latency, and
//! a CPU that starts two per cycle needs about ten independent rows to keep both
//! multipliers busy; each panel vector loaded also serves more rows. Twelve accumulators,
//! the panel vector and a broadcast use 14 of the 32 registers.
//!
//! Written on a machine whose tests exercised both families (see docs/cpu-acc.md, "Quantized
//! layers"); every path is checked against the portable tile by the module's tests.

use super::channels::RequantRange;
use super::fixed_avx512::{fixed16, FixedConsts};
use super::fused::ColumnRequant;
use super::{MR_MAX, QNR};
use std::arch::x86_64::*;

/// Rows of A per AVX-512 tile.
pub(super) const ROWS: usize = 12;

// The tile's row array holds every row this family writes.
const _: () = assert!(ROWS <= MR_MAX);

/// The broadcast constants of a requantization.
struct Consts {
    lo: __m512,
    hi: __m512,
    magic: __m512,
    magic_bits: __m512i,
    zero: __m512i,
}

impl Consts {
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn new(range: RequantRange) -> Consts {
        Consts {
            lo: _mm512_set1_ps(range.lo),
            hi: _mm512_set1_ps(range.hi),
            magic: _mm512_set1_ps(super::requant::MAGIC),
            magic_bits: _mm512_set1_epi32(super::requant::MAGIC.to_bits() as i32),
            zero: _mm512_set1_epi32(range.zero as i32),
        }
    }
}

/// Sixteen sums requantized, each lane's byte in its low 8 bits:
/// `(clamp(round_half_even((s + b) · sc), lo, hi) + zero) & 0xff`, the operations of the
/// AVX2 tile's `requant8` in the same order.
#[target_feature(enable = "avx512f")]
#[inline]
fn requant16(s: __m512i, b: __m512i, sc: __m512, k: &Consts) -> __m512i {
    let v = _mm512_cvtepi32_ps(_mm512_add_epi32(s, b));
    let v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, sc), k.lo), k.hi);
    let i = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(v, k.magic)), k.magic_bits);
    _mm512_and_si512(_mm512_add_epi32(i, k.zero), _mm512_set1_epi32(0xff))
}

/// One family of tiles: `$features` enabled, `$step(acc, x, b)` the accumulation of one
/// pair of K steps (`acc` the row's sums, `x` the broadcast pair of A, `b` the panel's
/// vector). A macro rather than a generic: the BW family must be compiled without VNNI
/// enabled (a CPU may have AVX-512BW without it), and a `#[target_feature]` function only
/// inlines into one with at least its features.
macro_rules! family {
    ($(#[$doc:meta])* $name:ident, $features:literal, $step:ident) => {
        $(#[$doc])*
        pub(super) mod $name {
            use super::*;

            /// The sums of `R` rows of A against one panel, one vector per row.
            /// Safety: the family's features present; `a` readable for `(R-1)·lda + kp`
            /// values, `kp` even; `panel` readable for `kp · QNR`.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn sums<const R: usize>(
                a: *const i16,
                lda: usize,
                kp: usize,
                panel: *const i16,
            ) -> [__m512i; ROWS] {
                let mut acc = [_mm512_setzero_si512(); ROWS];
                for pair in 0..kp / 2 {
                    // SAFETY: pair < kp/2, so the 32 values at pair·2·QNR lie in the panel.
                    let b = unsafe { _mm512_loadu_si512(panel.add(pair * 2 * QNR).cast()) };
                    for (rr, sums) in acc.iter_mut().enumerate().take(R) {
                        // SAFETY: row rr < R reads values 2·pair, 2·pair + 1 < kp of its row.
                        let v =
                            unsafe { a.add(rr * lda + 2 * pair).cast::<i32>().read_unaligned() };
                        *sums = $step(*sums, _mm512_set1_epi32(v), b);
                    }
                }
                acc
            }

            /// Sums of `r` (1..=ROWS; more are cut to ROWS) rows of A against one panel
            /// into `tile`. Safety: the family's features present; `a` readable for
            /// `(r-1)·lda + kp` values, `kp` even; `panel` readable for `kp · QNR`.
            #[target_feature(enable = $features)]
            pub(in crate::qgemm) unsafe fn tile(
                a: *const i16,
                lda: usize,
                r: usize,
                kp: usize,
                panel: *const i16,
                tile: &mut [[i32; QNR]; MR_MAX],
            ) {
                let r = r.min(ROWS);
                // SAFETY: forwarded contract, for the row count each arm reads.
                let acc = unsafe {
                    match r {
                        0 => return,
                        1 => sums::<1>(a, lda, kp, panel),
                        2 => sums::<2>(a, lda, kp, panel),
                        3 => sums::<3>(a, lda, kp, panel),
                        4 => sums::<4>(a, lda, kp, panel),
                        5 => sums::<5>(a, lda, kp, panel),
                        6 => sums::<6>(a, lda, kp, panel),
                        7 => sums::<7>(a, lda, kp, panel),
                        8 => sums::<8>(a, lda, kp, panel),
                        9 => sums::<9>(a, lda, kp, panel),
                        10 => sums::<10>(a, lda, kp, panel),
                        11 => sums::<11>(a, lda, kp, panel),
                        _ => sums::<12>(a, lda, kp, panel),
                    }
                };
                for (row, v) in tile.iter_mut().zip(acc).take(r) {
                    // SAFETY: each row of `tile` holds QNR = 16 int32, one vector.
                    unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), v) };
                }
            }

            /// The sums of `r` (1..=ROWS) rows of A against panel `p`, requantized in
            /// registers with the columns' bias and scale into `bytes` (16 per row).
            /// Safety: as `tile`; `p` a panel of `rq`.
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            pub(in crate::qgemm) unsafe fn tile_requant(
                a: *const i16,
                lda: usize,
                r: usize,
                kp: usize,
                panel: *const i16,
                rq: &ColumnRequant,
                p: usize,
                bytes: &mut [[u8; QNR]; MR_MAX],
            ) {
                // One instantiation per row count, each with its sums inlined.
                // SAFETY: forwarded contract, for the row count each arm reads.
                unsafe {
                    match r {
                        0 => {}
                        1 => requant_rows::<1>(a, lda, kp, panel, rq, p, bytes),
                        2 => requant_rows::<2>(a, lda, kp, panel, rq, p, bytes),
                        3 => requant_rows::<3>(a, lda, kp, panel, rq, p, bytes),
                        4 => requant_rows::<4>(a, lda, kp, panel, rq, p, bytes),
                        5 => requant_rows::<5>(a, lda, kp, panel, rq, p, bytes),
                        6 => requant_rows::<6>(a, lda, kp, panel, rq, p, bytes),
                        7 => requant_rows::<7>(a, lda, kp, panel, rq, p, bytes),
                        8 => requant_rows::<8>(a, lda, kp, panel, rq, p, bytes),
                        9 => requant_rows::<9>(a, lda, kp, panel, rq, p, bytes),
                        10 => requant_rows::<10>(a, lda, kp, panel, rq, p, bytes),
                        11 => requant_rows::<11>(a, lda, kp, panel, rq, p, bytes),
                        _ => requant_rows::<12>(a, lda, kp, panel, rq, p, bytes),
                    }
                }
            }

            /// `tile_requant` for `R` rows. Safety: as `tile_requant` for `R` rows.
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn requant_rows<const R: usize>(
                a: *const i16,
                lda: usize,
                kp: usize,
                panel: *const i16,
                rq: &ColumnRequant,
                p: usize,
                bytes: &mut [[u8; QNR]; MR_MAX],
            ) {
                // SAFETY: forwarded contract.
                let acc = unsafe { sums::<R>(a, lda, kp, panel) };
                if let Some([q, left, right]) = rq.fixed_panel(p) {
                    // SAFETY: `fixed_panel` returns QNR = 16 values of each, one vector.
                    unsafe { fixed_rows::<R>(acc, rq, p, q, left, right, bytes) };
                    return;
                }
                let (bias, scale) = rq.panel(p);
                // SAFETY: `panel` returns QNR = 16 values of each, one vector.
                let (bias, scale) = unsafe {
                    (
                        _mm512_loadu_si512(bias.as_ptr().cast()),
                        _mm512_loadu_ps(scale.as_ptr()),
                    )
                };
                let k = Consts::new(rq.range());
                for (row, v) in bytes.iter_mut().zip(acc).take(R.min(ROWS)) {
                    // `vpmovdb`: each lane's low byte.
                    let b = _mm512_cvtepi32_epi8(requant16(v, bias, scale, &k));
                    // SAFETY: each row of `bytes` holds 16 bytes, one 128-bit vector.
                    unsafe { _mm_storeu_si128(row.as_mut_ptr().cast(), b) };
                }
            }

            /// `R` rows of sums requantized by the fixed-point rule with panel `p`'s bias
            /// and multipliers `q`, shifts `left`, `right`. Safety: the family's features
            /// present; `q`, `left` and `right` hold 16 values each.
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn fixed_rows<const R: usize>(
                acc: [__m512i; ROWS],
                rq: &ColumnRequant,
                p: usize,
                q: &[i32],
                left: &[i32],
                right: &[i32],
                bytes: &mut [[u8; QNR]; MR_MAX],
            ) {
                let (bias, _) = rq.panel(p);
                // SAFETY: the panel's bias holds 16 values, and `q`, `left`, `right` too.
                let (bias, q, left, right) = unsafe {
                    (
                        _mm512_loadu_si512(bias.as_ptr().cast()),
                        _mm512_loadu_si512(q.as_ptr().cast()),
                        _mm512_loadu_si512(left.as_ptr().cast()),
                        _mm512_loadu_si512(right.as_ptr().cast()),
                    )
                };
                let k = FixedConsts::new(rq.range());
                for (row, v) in bytes.iter_mut().zip(acc).take(R.min(ROWS)) {
                    let v = fixed16(_mm512_add_epi32(v, bias), q, left, right, &k);
                    // `vpmovdb`: each lane's low byte.
                    let b = _mm512_cvtepi32_epi8(v);
                    // SAFETY: each row of `bytes` holds 16 bytes, one 128-bit vector.
                    unsafe { _mm_storeu_si128(row.as_mut_ptr().cast(), b) };
                }
            }
        }
    };
}

family!(
    /// The AVX-512BW tiles: `vpmaddwd` then `vpaddd`.
    bw,
    "avx512f,avx512bw",
    bw_step
);

family!(
    /// The AVX-512 VNNI tiles: `vpdpwssd` (the pair products and their add in one). The
    /// tier runs them for tiles of at least [`VNNI_ROWS`] rows, the BW ones for fewer.
    vnni,
    "avx512f,avx512bw,avx512vnni",
    dpwssd
);

/// `acc + Σ pairs of x·b` by `vpmaddwd` then `vpaddd`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn bw_step(acc: __m512i, x: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(acc, _mm512_madd_epi16(x, b))
}

/// The fewest rows of a tile the VNNI tier runs on its own tiles; fewer go to the BW tiles.
/// Each row's accumulator is a chain through `vpdpwssd`, of several cycles' latency, so a
/// tile of few rows (a fully connected layer's one row) would wait on it, where `vpmaddwd`
/// then `vpaddd` chains through the add only. (Within a function compiled with VNNI, LLVM
/// fuses that pair into `vpdpwssd` itself: hence whole BW tiles rather than a per-row-count
/// step.)
pub(super) const VNNI_ROWS: usize = 5;

/// `acc + Σ pairs of x·b` in one `vpdpwssd`, what `_mm512_dpwssd_epi32` computes, written
/// as assembly: LLVM's machine combiner, tuning for a generic x86-64, splits the
/// intrinsic's instruction back into `vpmaddwd` and `vpaddd` (a shorter dependency chain
/// per accumulator, one more instruction) in all rows of the tile but one, which leaves
/// the VNNI family the BW family's code.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn dpwssd(acc: __m512i, x: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: AVX-512 VNNI is enabled for this function (its callers run only where the CPU
    // has it); the instruction reads and writes registers only.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {x}, {b}",
            acc = inout(zmm_reg) acc,
            x = in(zmm_reg) x,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        )
    };
    acc
}

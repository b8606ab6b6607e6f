//! The AVX-512 and AVX2 bodies of the channels-last int8 depthwise convolution
//! ([`super::depthwise`]): per output pixel and block of channels (32 on AVX-512, 16 on
//! AVX2), the input bytes of two taps widened to 16 bits (`vpmovsxbw` / `vpmovzxbw`),
//! interleaved (`vpunpck{l,h}wd`) and multiplied against the pair-interleaved weights
//! (`vpmaddwd`, then `vpaddd` into accumulators that start at the folded bias), then the
//! block requantized in registers and stored as bytes. The VNNI tier runs this body too
//! where its byte body does not apply: LLVM sums the pairs' products as a tree of adds,
//! and compiled with VNNI (which fuses them into `vpdpwssd` chains) it ran no faster. A
//! last block of fewer channels uses masked loads and stores (AVX-512BW) or goes through a
//! 16-byte copy (AVX2).

use super::channels::RequantRange;
use super::depthwise::{DwWeights, Parts, GROUP, HALF};
use super::fixed_avx512::{fixed16, FixedConsts};
use super::requant::{FixedLanes, MAGIC};
use std::arch::x86_64::*;

/// One run of output pixels: the layer's operands, each tap's input run and the distance
/// between successive pixels in them.
pub(super) struct Run<'a> {
    pub w: &'a DwWeights,
    pub taps: &'a [&'a [u8]],
    pub step: usize,
    pub pixels: usize,
    /// The bytes every tap's run holds: a last block of fewer channels whose whole width
    /// lies within them loads it unmasked (the lanes past the channels are not stored).
    pub avail: usize,
}

/// The broadcast constants of a requantization on 512-bit registers.
pub(super) struct Consts512 {
    lo: __m512,
    hi: __m512,
    magic: __m512,
    /// The bits of [`MAGIC`] less the output zero point: subtracted from the rounded value's
    /// bits, gives `round_half_even(v) + zero`.
    offset: __m512i,
    /// The fixed-point rule's constants ([`fixed16`]).
    fixed: FixedConsts,
}

impl Consts512 {
    #[target_feature(enable = "avx512f")]
    pub(super) fn new(r: RequantRange) -> Consts512 {
        let zero = r.zero as i32;
        Consts512 {
            lo: _mm512_set1_ps(r.lo),
            hi: _mm512_set1_ps(r.hi),
            magic: _mm512_set1_ps(MAGIC),
            offset: _mm512_set1_epi32((MAGIC.to_bits() as i32).wrapping_sub(zero)),
            fixed: FixedConsts::new(r),
        }
    }
}

/// The multipliers of a block's lanes (32 for the pair body, 64 for the four-tap one), in
/// lane order: the f32 scales, and the fixed-point rule's Q31 multipliers and left and right
/// shifts (empty when the weights do not follow it). The bodies take the rule as a const
/// parameter `FX`, so that each instantiation holds one requantization.
#[derive(Clone, Copy)]
pub(super) struct LaneRequant<'a> {
    pub scale: &'a [f32],
    pub q: &'a [i32],
    pub left: &'a [i32],
    pub right: &'a [i32],
}

impl<'a> LaneRequant<'a> {
    /// Lanes `lanes` of `scale` and, when `FX` and present, of `fixed` (per block of a run:
    /// inlined, and without the fixed lanes' slicing for the f32 rule).
    #[inline(always)]
    pub(super) fn of<const FX: bool>(
        scale: &'a [f32],
        fixed: Option<&'a FixedLanes>,
        lanes: std::ops::Range<usize>,
    ) -> LaneRequant<'a> {
        match fixed.filter(|_| FX) {
            Some(f) => LaneRequant {
                scale: &scale[lanes.clone()],
                q: &f.q[lanes.clone()],
                left: &f.left[lanes.clone()],
                right: &f.right[lanes],
            },
            None => LaneRequant {
                scale: &scale[lanes],
                q: &[],
                left: &[],
                right: &[],
            },
        }
    }

    /// Lanes `16·h .. 16·h + 16` of sums `s` requantized, by the fixed-point rule when `FX`.
    /// Safety: AVX-512F present; the scales (or, when `FX`, the fixed-point slices) hold
    /// `16·(h + 1)` lanes.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn apply<const FX: bool>(
        &self,
        s: __m512i,
        h: usize,
        k: &Consts512,
    ) -> __m512i {
        // SAFETY: the slices read hold 16 lanes from `16·h` (the caller's contract).
        unsafe {
            if FX {
                fixed16(
                    s,
                    _mm512_loadu_si512(self.q.as_ptr().add(16 * h).cast()),
                    _mm512_loadu_si512(self.left.as_ptr().add(16 * h).cast()),
                    _mm512_loadu_si512(self.right.as_ptr().add(16 * h).cast()),
                    &k.fixed,
                )
            } else {
                requant16(s, _mm512_loadu_ps(self.scale.as_ptr().add(16 * h)), k)
            }
        }
    }
}

/// Sixteen sums (bias included) requantized: `clamp(round_half_even(s · sc), lo, hi) +
/// zero`, the operations of [`super::requantize_f32`] in its order.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn requant16(s: __m512i, sc: __m512, k: &Consts512) -> __m512i {
    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc);
    let v = _mm512_min_ps(_mm512_max_ps(v, k.lo), k.hi);
    _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(v, k.magic)), k.offset)
}

/// 32 input bytes at `p` (the first `mask` ones when `M`, the others zero) widened to 16
/// bits, sign-extended when `S`. Safety: AVX-512F and BW present; the 32 bytes (the masked
/// ones when `M`) are readable.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn load32<const S: bool, const M: bool>(p: *const u8, mask: __mmask64) -> __m512i {
    // SAFETY: per the function's contract; masked-off bytes are not accessed.
    let v = unsafe {
        if M {
            _mm512_castsi512_si256(_mm512_maskz_loadu_epi8(mask, p.cast()))
        } else {
            _mm256_loadu_si256(p.cast())
        }
    };
    if S {
        _mm512_cvtepi8_epi16(v)
    } else {
        _mm512_cvtepu8_epi16(v)
    }
}

/// One block of 32 channels of one pixel, its bytes: the taps' bytes at offset `off` of
/// their runs, weights `w` (the group's `⌈taps / 2⌉ · 64` values), the group's bias and
/// multipliers in lane order (32 each). `T` the tap count when it is fixed at compile time (the
/// loop over the taps then unrolled), else 0. Safety: AVX-512F and BW present; each run
/// holds the 32 bytes from `off` (the first `mask` ones when `M`); `T` is 0 or the number
/// of taps.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn block32<const S: bool, const M: bool, const T: usize, const FX: bool>(
    taps: &[&[u8]],
    off: usize,
    w: &[i16],
    bias: &[i32],
    rq: LaneRequant<'_>,
    k: &Consts512,
    mask: __mmask64,
) -> __m256i {
    // SAFETY: the group's bias holds 32 values.
    let (mut lo, mut hi) = unsafe {
        (
            _mm512_loadu_si512(bias.as_ptr().cast()),
            _mm512_loadu_si512(bias.as_ptr().add(16).cast()),
        )
    };
    let n = if T > 0 { T } else { taps.len() };
    let (taps, w) = (&taps[..n], &w[..n.div_ceil(2) * 2 * GROUP]);
    let pairs = taps.chunks_exact(2);
    let last = pairs.remainder();
    let mut wq = w.chunks_exact(2 * GROUP);
    for (pair, wv) in pairs.zip(&mut wq) {
        // SAFETY: the runs hold the block's bytes from `off`; `wv` holds 64 weights.
        unsafe {
            let x0 = load32::<S, M>(pair[0].as_ptr().add(off), mask);
            let x1 = load32::<S, M>(pair[1].as_ptr().add(off), mask);
            let w0 = _mm512_loadu_si512(wv.as_ptr().cast());
            let w1 = _mm512_loadu_si512(wv.as_ptr().add(GROUP).cast());
            lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(x0, x1), w0));
            hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(x0, x1), w1));
        }
    }
    if let (Some(run), Some(wv)) = (last.first(), wq.next()) {
        // SAFETY: as above; the second tap of this pair has zero weights.
        unsafe {
            let x0 = load32::<S, M>(run.as_ptr().add(off), mask);
            let z = _mm512_setzero_si512();
            let w0 = _mm512_loadu_si512(wv.as_ptr().cast());
            let w1 = _mm512_loadu_si512(wv.as_ptr().add(GROUP).cast());
            lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(x0, z), w0));
            hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(x0, z), w1));
        }
    }
    // SAFETY: the group's multipliers hold 32 lanes.
    let (v0, v1) = unsafe { (rq.apply::<FX>(lo, 0, k), rq.apply::<FX>(hi, 1, k)) };
    // Per 128-bit lane, v0 holds channels 8j..8j+4 and v1 8j+4..8j+8: packed to 16 bits
    // (values within −128..=255, exact) they are in order, and `vpmovwb` keeps each byte.
    _mm512_cvtepi16_epi8(_mm512_packs_epi32(v0, v1))
}

/// The run on the AVX-512 tiers. Safety: AVX-512F and BW present; every tap's run holds
/// `(pixels − 1)·step + C` bytes, `out` `pixels·C`, and `run.taps.len()` is the weights'
/// tap count.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn avx512(run: &Run<'_>, out: &mut [u8]) {
    // SAFETY: the caller's contract, passed on; `T` is the tap count or 0.
    unsafe {
        let p = run.w.parts();
        match (p.x_signed, run.taps.len(), p.fixed_lanes.is_some()) {
            (true, 9, false) => avx512_body::<true, 9, false>(run, out),
            (true, 25, false) => avx512_body::<true, 25, false>(run, out),
            (true, _, false) => avx512_body::<true, 0, false>(run, out),
            (false, 9, false) => avx512_body::<false, 9, false>(run, out),
            (false, 25, false) => avx512_body::<false, 25, false>(run, out),
            (false, _, false) => avx512_body::<false, 0, false>(run, out),
            (true, 9, true) => avx512_body::<true, 9, true>(run, out),
            (true, 25, true) => avx512_body::<true, 25, true>(run, out),
            (true, _, true) => avx512_body::<true, 0, true>(run, out),
            (false, 9, true) => avx512_body::<false, 9, true>(run, out),
            (false, 25, true) => avx512_body::<false, 25, true>(run, out),
            (false, _, true) => avx512_body::<false, 0, true>(run, out),
        }
    }
}

/// See [`avx512`]; `S` whether the input bytes are signed, `T` the tap count (0: any),
/// `FX` whether the weights requantize by the fixed-point rule (they carry its lanes).
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn avx512_body<const S: bool, const T: usize, const FX: bool>(
    run: &Run<'_>,
    out: &mut [u8],
) {
    let p = run.w.parts();
    let c = p.channels;
    let k = Consts512::new(p.range);
    let gw = p.taps.div_ceil(2) * 2 * GROUP;
    let (whole, rem) = (c / GROUP, c % GROUP);
    let mask: __mmask64 = (1u64 << rem) - 1;
    for px in 0..run.pixels {
        let base = px * run.step;
        let dst = &mut out[px * c..][..c];
        for g in 0..whole {
            let at = g * GROUP;
            let lanes = at..at + GROUP;
            // SAFETY: the runs hold this pixel's C bytes from `base`, so 32 from `base + at`.
            let bytes = unsafe {
                block32::<S, false, T, FX>(
                    run.taps,
                    base + at,
                    &p.pairs[g * gw..][..gw],
                    &p.bias_lanes[lanes.clone()],
                    LaneRequant::of::<FX>(p.scale_lanes, p.fixed_lanes, lanes),
                    &k,
                    !0,
                )
            };
            // SAFETY: `dst` holds 32 bytes from `at`.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().add(at).cast(), bytes) };
        }
        if rem > 0 {
            let at = whole * GROUP;
            let (lanes, w) = (at..at + GROUP, &p.pairs[whole * gw..][..gw]);
            let bias = &p.bias_lanes[lanes.clone()];
            let scale = LaneRequant::of::<FX>(p.scale_lanes, p.fixed_lanes, lanes);
            // SAFETY: the runs hold this pixel's C bytes, so the `rem` masked ones from
            // `base + at`, and all 32 when `avail` reaches them; the weights, bias and scale
            // are stored for whole groups.
            let bytes = unsafe {
                if base + at + GROUP <= run.avail {
                    block32::<S, false, T, FX>(run.taps, base + at, w, bias, scale, &k, !0)
                } else {
                    block32::<S, true, T, FX>(run.taps, base + at, w, bias, scale, &k, mask)
                }
            };
            // SAFETY: `dst` holds the `rem` bytes from `at` the mask writes.
            unsafe {
                _mm512_mask_storeu_epi8(
                    dst.as_mut_ptr().add(at).cast(),
                    mask,
                    _mm512_castsi256_si512(bytes),
                )
            };
        }
    }
}

/// The broadcast constants of a requantization on 256-bit registers.
struct Consts256 {
    lo: __m256,
    hi: __m256,
    magic: __m256,
    offset: __m256i,
    byte: __m256i,
}

impl Consts256 {
    #[target_feature(enable = "avx2")]
    fn new(r: RequantRange) -> Consts256 {
        Consts256 {
            lo: _mm256_set1_ps(r.lo),
            hi: _mm256_set1_ps(r.hi),
            magic: _mm256_set1_ps(MAGIC),
            offset: _mm256_set1_epi32((MAGIC.to_bits() as i32).wrapping_sub(r.zero as i32)),
            byte: _mm256_set1_epi32(0xff),
        }
    }
}

/// Eight sums requantized, each lane's byte in its low 8 bits (the others zero).
#[target_feature(enable = "avx2")]
#[inline]
fn requant8(s: __m256i, sc: __m256, k: &Consts256) -> __m256i {
    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(s), sc);
    let v = _mm256_min_ps(_mm256_max_ps(v, k.lo), k.hi);
    let i = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(v, k.magic)), k.offset);
    _mm256_and_si256(i, k.byte)
}

/// 16 bytes widened to 16 bits, sign-extended when `S`.
#[target_feature(enable = "avx2")]
#[inline]
fn widen16<const S: bool>(v: __m128i) -> __m256i {
    if S {
        _mm256_cvtepi8_epi16(v)
    } else {
        _mm256_cvtepu8_epi16(v)
    }
}

/// Where a 16-channel block's operands lie: its tap offset and group layout.
struct Block16<'a> {
    /// The group's weights (`⌈taps / 2⌉ · 64` values).
    w: &'a [i16],
    /// The group's bias and scale in lane order (32 each).
    bias: &'a [i32],
    scale: &'a [f32],
    /// Which half of the group.
    h: usize,
}

/// One block of 16 channels of one pixel, its bytes in order, from `x(t)` each tap's 16
/// input bytes.
#[target_feature(enable = "avx2")]
#[inline]
fn block16<const S: bool>(
    ntaps: usize,
    x: impl Fn(usize) -> __m128i,
    b: &Block16<'_>,
    k: &Consts256,
) -> __m128i {
    let h = b.h;
    // SAFETY: the group's bias and scale hold 32 values; half h's low vector at 8h, its
    // high one at 16 + 8h.
    let (mut lo, mut hi, s0, s1) = unsafe {
        (
            _mm256_loadu_si256(b.bias.as_ptr().add(8 * h).cast()),
            _mm256_loadu_si256(b.bias.as_ptr().add(16 + 8 * h).cast()),
            _mm256_loadu_ps(b.scale.as_ptr().add(8 * h)),
            _mm256_loadu_ps(b.scale.as_ptr().add(16 + 8 * h)),
        )
    };
    let npairs = ntaps.div_ceil(2);
    let w = &b.w[..npairs * 2 * GROUP];
    for q in 0..npairs {
        let wv = &w[q * 2 * GROUP..][..2 * GROUP];
        let x0 = widen16::<S>(x(2 * q));
        let x1 = if 2 * q + 1 < ntaps {
            widen16::<S>(x(2 * q + 1))
        } else {
            _mm256_setzero_si256()
        };
        // SAFETY: `wv` holds 64 weights: pair q's low vector of half h at 16h, its high one
        // at 32 + 16h.
        let (w0, w1) = unsafe {
            (
                _mm256_loadu_si256(wv.as_ptr().add(HALF * h).cast()),
                _mm256_loadu_si256(wv.as_ptr().add(GROUP + HALF * h).cast()),
            )
        };
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), w0));
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), w1));
    }
    let v0 = requant8(lo, s0, k);
    let v1 = requant8(hi, s1, k);
    // Lanes [0..4, 8..12 | 4..8, 12..16] of v0 and v1 pack to channels 0..16 in order.
    let w16 = _mm256_packus_epi32(v0, v1);
    _mm_packus_epi16(
        _mm256_castsi256_si128(w16),
        _mm256_extracti128_si256::<1>(w16),
    )
}

/// The run on the AVX2 tier. Safety: AVX2 present; as for [`avx512`].
#[target_feature(enable = "avx2")]
pub(super) unsafe fn avx2(run: &Run<'_>, out: &mut [u8]) {
    // SAFETY: the caller's contract, passed on; `T` is the tap count or 0.
    unsafe {
        match (run.w.parts().x_signed, run.taps.len()) {
            (true, 9) => avx2_body::<true, 9>(run, out),
            (true, 25) => avx2_body::<true, 25>(run, out),
            (true, _) => avx2_body::<true, 0>(run, out),
            (false, 9) => avx2_body::<false, 9>(run, out),
            (false, 25) => avx2_body::<false, 25>(run, out),
            (false, _) => avx2_body::<false, 0>(run, out),
        }
    }
}

/// See [`avx2`]; `S` whether the input bytes are signed, `T` the tap count (0: any).
#[target_feature(enable = "avx2")]
unsafe fn avx2_body<const S: bool, const T: usize>(run: &Run<'_>, out: &mut [u8]) {
    let p: Parts<'_> = run.w.parts();
    let c = p.channels;
    let ntaps = if T > 0 { T } else { p.taps };
    let k = Consts256::new(p.range);
    let gw = ntaps.div_ceil(2) * 2 * GROUP;
    let (whole, rem) = (c / HALF, c % HALF);
    let layout = |b: usize| {
        let g = b / 2;
        Block16 {
            w: &p.pairs[g * gw..][..gw],
            bias: &p.bias_lanes[g * GROUP..][..GROUP],
            scale: &p.scale_lanes[g * GROUP..][..GROUP],
            h: b % 2,
        }
    };
    for px in 0..run.pixels {
        let base = px * run.step;
        let dst = &mut out[px * c..][..c];
        for b in 0..whole {
            let at = base + b * HALF;
            let x = |t: usize| {
                // SAFETY: each run holds this pixel's C bytes from `base`, so 16 from `at`.
                unsafe { _mm_loadu_si128(run.taps[t].as_ptr().add(at).cast()) }
            };
            let bytes = block16::<S>(ntaps, x, &layout(b), &k);
            // SAFETY: `dst` holds 16 bytes from `b · 16`.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().add(b * HALF).cast(), bytes) };
        }
        if rem > 0 {
            let at = base + whole * HALF;
            let bytes = if at + HALF <= run.avail {
                let x = |t: usize| {
                    // SAFETY: each run holds `avail` bytes, so 16 from `at`.
                    unsafe { _mm_loadu_si128(run.taps[t].as_ptr().add(at).cast()) }
                };
                block16::<S>(ntaps, x, &layout(whole), &k)
            } else {
                let x = |t: usize| {
                    let mut buf = [0u8; HALF];
                    buf[..rem].copy_from_slice(&run.taps[t][at..at + rem]);
                    // SAFETY: `buf` holds 16 bytes.
                    unsafe { _mm_loadu_si128(buf.as_ptr().cast()) }
                };
                block16::<S>(ntaps, x, &layout(whole), &k)
            };
            let mut buf = [0u8; HALF];
            // SAFETY: `buf` holds 16 bytes.
            unsafe { _mm_storeu_si128(buf.as_mut_ptr().cast(), bytes) };
            dst[whole * HALF..].copy_from_slice(&buf[..rem]);
        }
    }
}

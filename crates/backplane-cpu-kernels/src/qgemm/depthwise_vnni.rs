//! The AVX-512 VNNI body of the channels-last int8 depthwise convolution
//! ([`super::depthwise`]) for layers whose centered weights fit in a signed byte (TFLite's
//! symmetric int8 weights): four taps per `vpdpbusd`, which multiplies unsigned input bytes
//! by signed weight bytes and adds each group of four products into a 32-bit lane, exactly
//! (no intermediate saturation). Signed input bytes are made unsigned by flipping their top
//! bit (`x + 128`), the `128·Σ w` that adds taken out of the bias.
//!
//! Per pixel and block of 64 channels, the bytes of four taps are interleaved into groups of
//! four (`vpunpck{l,h}bw`, then `vpunpck{l,h}wd`); working per 128-bit lane, that leaves four
//! accumulators whose lane `4j + k` holds channel `16j + 4q + k` for accumulator `q`
//! (`quad_pos`). The weights, bias and scale are stored in that order, and the final packs
//! (`vpackssdw` of accumulators 0, 1 and of 2, 3, then `vpackuswb`) restore the channel order.
//! A last block of fewer channels uses masked loads and stores.

use super::depthwise::lanes_zeroed;
use super::depthwise_x86::{Consts512, LaneRequant, Run};
use super::requant::FixedLanes;
use crate::aligned::AlignedVec;
use std::arch::x86_64::*;

/// Channels per block.
pub(super) const BLOCK: usize = 64;

/// Position (32-bit lane over the four accumulators, 16 each) of channel `i < 64` of a
/// block after the interleaving.
#[inline]
fn quad_pos(i: usize) -> usize {
    let (j, r) = (i / 16, i % 16);
    (r / 4) * 16 + 4 * j + r % 4
}

/// The weights, bias and scale of a layer in the order of the four-tap body, stored for
/// `period` blocks: lane `L` of the stored lanes (block `L / 64`) holds channel `L % C`.
/// Where that period is short enough (`periodic`) it is the least common multiple of 64 and
/// C lanes, so a unit-step run of pixels, whose bytes are consecutive, is one span of
/// blocks, block `b` with the stored block `b % period`, all full but the last; else it is
/// `⌈C / 64⌉` blocks (the lanes past C zero), run one pixel at a time.
#[derive(Debug, Clone)]
pub(super) struct DwQuads {
    /// `[stored block][quad of taps][256]`: lane `L`'s weights of taps `4u .. 4u + 4` at
    /// `4·quad_pos(L % 64)` (zeros past the last tap).
    w: AlignedVec<i8>,
    /// Per stored block, in `quad_pos` order: the folded bias less `128·Σ w` for signed
    /// inputs.
    bias: AlignedVec<i32>,
    /// Per stored block, in `quad_pos` order.
    scale: AlignedVec<f32>,
    /// The fixed-point rule's multipliers in the same order, when the layer follows it
    /// ([`DwQuads::set_fixed_point`]).
    fixed: Option<FixedLanes>,
    /// Stored blocks.
    period: usize,
    /// Whether the lanes repeat the channels (unit-step runs as spans).
    periodic: bool,
}

/// The greatest common divisor.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl DwQuads {
    /// From the centered weights `plain` (`[tap][channel]`), the folded bias and the scale
    /// per channel. Periodic when the period (`lcm(64, C)` lanes) is at most `max(64, 8·C)`
    /// lanes. `None` when a weight does not fit in a signed byte, for fewer than 64 channels
    /// that are not periodic (a block would be mostly idle), or on no memory.
    pub(super) fn new(
        channels: usize,
        taps: usize,
        plain: &[i16],
        bias: &[i32],
        scale: &[f32],
        x_signed: bool,
    ) -> Option<DwQuads> {
        if channels == 0 || plain.iter().any(|&v| i8::try_from(v).is_err()) {
            return None;
        }
        let lcm = channels.checked_mul(BLOCK)? / gcd(channels, BLOCK);
        let periodic = lcm <= (8 * channels).max(BLOCK);
        if channels < BLOCK && !periodic {
            return None;
        }
        let (period, lanes) = if periodic {
            (lcm / BLOCK, lcm)
        } else {
            (channels.div_ceil(BLOCK), channels)
        };
        let nq = taps.div_ceil(4);
        let mut w = lanes_zeroed(period.checked_mul(nq)?.checked_mul(4 * BLOCK)?)?;
        let mut qb = lanes_zeroed(period * BLOCK)?;
        let mut qs = lanes_zeroed(period * BLOCK)?;
        for lane in 0..lanes {
            let ch = lane % channels;
            let (b, pos) = (lane / BLOCK, quad_pos(lane % BLOCK));
            let mut wsum = 0i32;
            for t in 0..taps {
                let v = plain[t * channels + ch];
                wsum = wsum.wrapping_add(i32::from(v));
                w[(b * nq + t / 4) * 4 * BLOCK + 4 * pos + t % 4] = v as i8;
            }
            let shift = if x_signed { wsum.wrapping_mul(128) } else { 0 };
            qb[b * BLOCK + pos] = bias[ch].wrapping_sub(shift);
            qs[b * BLOCK + pos] = scale[ch];
        }
        Some(DwQuads {
            w,
            bias: qb,
            scale: qs,
            fixed: None,
            period,
            periodic,
        })
    }

    /// Requantize by the fixed-point rule, channel `ch` with multiplier `m[ch]` (one per
    /// channel of the layer these were made for), in the stored lanes' order. `None` for no
    /// multipliers or on no memory.
    pub(super) fn set_fixed_point(&mut self, m: &[(i32, i32)]) -> Option<()> {
        let c = m.len();
        if c == 0 {
            return None;
        }
        let lanes = if self.periodic {
            self.period * BLOCK
        } else {
            c
        };
        let mut f = FixedLanes::zeros(self.period * BLOCK)?;
        for lane in 0..lanes {
            f.set((lane / BLOCK) * BLOCK + quad_pos(lane % BLOCK), m[lane % c])?;
        }
        self.fixed = Some(f);
        Some(())
    }

    /// The multipliers of stored lanes `lanes` (the fixed-point rule's when `FX`).
    #[inline(always)]
    fn requant<const FX: bool>(&self, lanes: std::ops::Range<usize>) -> LaneRequant<'_> {
        LaneRequant::of::<FX>(&self.scale, self.fixed.as_ref(), lanes)
    }

    /// Whether the four-tap body suits a run of `pixels` at `step` over `channels`: whole
    /// blocks of 64 channels, or a span of several pixels (a unit-step run).
    pub(super) fn suits(&self, channels: usize, step: usize, pixels: usize) -> bool {
        channels >= BLOCK || (self.periodic && step == channels && pixels > 1)
    }
}

/// 64 input bytes at `p` (the first `mask` ones when `M`, the others zero), as unsigned
/// bytes: the top bit flipped when `S` (signed input). Safety: AVX-512F and BW present; the
/// bytes (the masked ones when `M`) are readable.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn load64<const S: bool, const M: bool>(p: *const u8, mask: __mmask64) -> __m512i {
    // SAFETY: per the function's contract; masked-off bytes are not accessed.
    let v = unsafe {
        if M {
            _mm512_maskz_loadu_epi8(mask, p.cast())
        } else {
            _mm512_loadu_si512(p.cast())
        }
    };
    if S {
        _mm512_xor_si512(v, _mm512_set1_epi8(i8::MIN))
    } else {
        v
    }
}

/// One block of 64 channels of one pixel, its bytes in order: the taps' bytes at offset
/// `off` of their runs, the block's weights `w` (`⌈taps / 4⌉ · 256`), bias and multipliers
/// (64 each, `quad_pos` order). `T` the tap count when fixed at compile time, else 0. Safety:
/// AVX-512F, BW and VNNI present; each run holds the 64 bytes from `off` (the first `mask`
/// ones when `M`); `T` is 0 or the number of taps.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn block64<const S: bool, const M: bool, const T: usize, const FX: bool>(
    taps: &[&[u8]],
    off: usize,
    w: &[i8],
    bias: &[i32],
    rq: LaneRequant<'_>,
    k: &Consts512,
    mask: __mmask64,
) -> __m512i {
    let n = if T > 0 { T } else { taps.len() };
    let (taps, w) = (&taps[..n], &w[..n.div_ceil(4) * 4 * BLOCK]);
    let bias = &bias[..BLOCK];
    // SAFETY: `bias` holds 64 values.
    let mut acc =
        unsafe { [0, 1, 2, 3].map(|q| _mm512_loadu_si512(bias.as_ptr().add(16 * q).cast())) };
    for (quad, wu) in taps.chunks(4).zip(w.chunks_exact(4 * BLOCK)) {
        let x = |i: usize| match quad.get(i) {
            // SAFETY: the run holds the block's bytes from `off`.
            Some(run) => unsafe { load64::<S, M>(run.as_ptr().add(off), mask) },
            None => _mm512_setzero_si512(),
        };
        let (a, b, c, d) = (x(0), x(1), x(2), x(3));
        let (ab_lo, ab_hi) = (_mm512_unpacklo_epi8(a, b), _mm512_unpackhi_epi8(a, b));
        let (cd_lo, cd_hi) = (_mm512_unpacklo_epi8(c, d), _mm512_unpackhi_epi8(c, d));
        let q = [
            _mm512_unpacklo_epi16(ab_lo, cd_lo),
            _mm512_unpackhi_epi16(ab_lo, cd_lo),
            _mm512_unpacklo_epi16(ab_hi, cd_hi),
            _mm512_unpackhi_epi16(ab_hi, cd_hi),
        ];
        for (i, (s, v)) in acc.iter_mut().zip(q).enumerate() {
            // SAFETY: `wu` holds 256 weights, accumulator i's 64 from `64i`.
            let wv = unsafe { _mm512_loadu_si512(wu.as_ptr().add(BLOCK * i).cast()) };
            *s = _mm512_dpbusd_epi32(*s, v, wv);
        }
    }
    // SAFETY: the block's multipliers hold 64 lanes.
    let v = unsafe {
        [
            rq.apply::<FX>(acc[0], 0, k),
            rq.apply::<FX>(acc[1], 1, k),
            rq.apply::<FX>(acc[2], 2, k),
            rq.apply::<FX>(acc[3], 3, k),
        ]
    };
    // Per 128-bit lane j: v0, v1 pack to channels 16j..16j+8 and v2, v3 to 16j+8..16j+16
    // (values within −128..=255, exact); their low bytes pack to the 16 channels in order.
    let byte = _mm512_set1_epi16(0xff);
    let lo = _mm512_and_si512(_mm512_packs_epi32(v[0], v[1]), byte);
    let hi = _mm512_and_si512(_mm512_packs_epi32(v[2], v[3]), byte);
    _mm512_packus_epi16(lo, hi)
}

/// The run on the AVX-512 VNNI tier with the weights `q` made for `run.w`. Safety: AVX-512F,
/// BW and VNNI present; as for [`super::depthwise_x86::avx512`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn vnni(run: &Run<'_>, q: &DwQuads, out: &mut [u8]) {
    // SAFETY: the caller's contract, passed on; `T` is the tap count or 0.
    unsafe {
        match (run.w.parts().x_signed, run.taps.len(), q.fixed.is_some()) {
            (true, 9, false) => body::<true, 9, false>(run, q, out),
            (true, 25, false) => body::<true, 25, false>(run, q, out),
            (true, _, false) => body::<true, 0, false>(run, q, out),
            (false, 9, false) => body::<false, 9, false>(run, q, out),
            (false, 25, false) => body::<false, 25, false>(run, q, out),
            (false, _, false) => body::<false, 0, false>(run, q, out),
            (true, 9, true) => body::<true, 9, true>(run, q, out),
            (true, 25, true) => body::<true, 25, true>(run, q, out),
            (true, _, true) => body::<true, 0, true>(run, q, out),
            (false, 9, true) => body::<false, 9, true>(run, q, out),
            (false, 25, true) => body::<false, 25, true>(run, q, out),
            (false, _, true) => body::<false, 0, true>(run, q, out),
        }
    }
}

/// See [`vnni`]; `S` whether the input bytes are signed, `T` the tap count (0: any), `FX`
/// whether `q` requantizes by the fixed-point rule (it carries its lanes).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn body<const S: bool, const T: usize, const FX: bool>(
    run: &Run<'_>,
    q: &DwQuads,
    out: &mut [u8],
) {
    let p = run.w.parts();
    let c = p.channels;
    let k = Consts512::new(p.range);
    if q.periodic && run.step == c {
        // Consecutive pixels are consecutive bytes in every run and in `out`: one span of
        // `pixels · C` bytes, its blocks with the stored lanes' period.
        let len = run.pixels * c;
        // SAFETY: every run holds `(pixels − 1)·C + C` bytes and `out` `pixels·C`.
        unsafe { span::<S, T, FX>(run, 0, &mut out[..len], q, &k, true) };
        return;
    }
    for px in 0..run.pixels {
        // SAFETY: every run holds this pixel's C bytes from `px · step`.
        unsafe { span::<S, T, FX>(run, px * run.step, &mut out[px * c..][..c], q, &k, false) };
    }
}

/// The bytes `dst` from the runs' bytes at `base ..`, by blocks of 64: block `b` with the
/// stored block `b` (one pixel's channels) or, when `span`, `b % period` (a span of pixels
/// of periodic lanes).
/// Safety: AVX-512F, BW and VNNI present; every run holds `dst.len()` bytes from `base`,
/// and `run.avail` bytes in all.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn span<const S: bool, const T: usize, const FX: bool>(
    run: &Run<'_>,
    base: usize,
    dst: &mut [u8],
    q: &DwQuads,
    k: &Consts512,
    span: bool,
) {
    let taps = run.taps;
    let bw = taps.len().div_ceil(4) * 4 * BLOCK;
    let (whole, rem) = (dst.len() / BLOCK, dst.len() % BLOCK);
    let mask: __mmask64 = (1u64 << rem) - 1;
    let of = |b: usize| if span { b % q.period } else { b };
    for b in 0..whole {
        let (at, wb) = (b * BLOCK, of(b) * BLOCK);
        // SAFETY: the runs hold 64 bytes from `base + at`.
        let bytes = unsafe {
            block64::<S, false, T, FX>(
                taps,
                base + at,
                &q.w[of(b) * bw..][..bw],
                &q.bias[wb..wb + BLOCK],
                q.requant::<FX>(wb..wb + BLOCK),
                k,
                !0,
            )
        };
        // SAFETY: `dst` holds 64 bytes from `at`.
        unsafe { _mm512_storeu_si512(dst.as_mut_ptr().add(at).cast(), bytes) };
    }
    if rem > 0 {
        let (at, wb) = (whole * BLOCK, of(whole) * BLOCK);
        let w = &q.w[of(whole) * bw..][..bw];
        let (bias, scale) = (&q.bias[wb..wb + BLOCK], q.requant::<FX>(wb..wb + BLOCK));
        // SAFETY: the runs hold the `rem` masked bytes from `base + at`, and all 64 when
        // `avail` reaches them; the weights, bias and scale are stored for whole blocks.
        let bytes = unsafe {
            if base + at + BLOCK <= run.avail {
                block64::<S, false, T, FX>(taps, base + at, w, bias, scale, k, !0)
            } else {
                block64::<S, true, T, FX>(taps, base + at, w, bias, scale, k, mask)
            }
        };
        // SAFETY: `dst` holds the `rem` bytes from `at` the mask writes.
        unsafe { _mm512_mask_storeu_epi8(dst.as_mut_ptr().add(at).cast(), mask, bytes) };
    }
}

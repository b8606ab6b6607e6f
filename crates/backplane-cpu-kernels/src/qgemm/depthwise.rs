//! Channels-last int8 depthwise convolution: runs of output pixels, each pixel's channels
//! as vector lanes, its 8-bit input read in place.
//!
//! For each output pixel `p` of a run and channel `ch`,
//! `out = requant_ch(Σ_t w[t][ch] · (x_t[p·step + ch] − zx) + bias[ch])`, where `x_t` is the
//! input run tap `t` reads (a row of the input, or of bytes equal to the zero point where
//! the window leaves the image): any stride and dilation are the caller's `step` and run
//! offsets, so nothing is copied. The input zero point is folded into the bias once
//! (`Σ(x − zx)·w = Σ x·w − zx·Σ w`, exact in wrapping i32 arithmetic, as the sums are), so
//! the raw bytes, sign- or zero-extended to 16 bits, are multiplied directly.
//!
//! The weights are stored once per (tap, channel) ([`DwWeights`]), centered on their zero
//! point: plain for the portable tier and the pair interleaved for the vector ones, where
//! the 16-bit inputs of taps `t` and `t + 1` are interleaved (`vpunpck{l,h}wd`) so that one
//! `vpmaddwd` sums `x_t·w_t + x_{t+1}·w_{t+1}` per 32-bit lane (at most 2·255·255: exact).
//! Per pixel and block of channels (32 on the AVX-512 tiers, 16 on AVX2) every tap is
//! accumulated in registers from the folded bias, then requantized with the f32 operations of
//! [`super::requantize_f32`] (multiply, clamp, round half to even, zero point) and stored as
//! bytes: the same bytes on every tier, and as CpuRef's. The unpacking works per 128-bit
//! lane, which leaves the sums of channels `8j..8j+4` in the low accumulator and
//! `8j+4..8j+8` in the high one; the bias and scale are stored in that order (`lane_of`) and
//! the final `vpackssdw` restores the channel order. A channel count that is not a multiple
//! of the block runs a last, masked block (AVX-512) or one through a small copy (AVX2).
//!
//! On the AVX-512 VNNI tier, layers whose centered weights all fit in a signed byte
//! (TFLite's symmetric int8 weights) run four taps per `vpdpbusd` instead
//! (`super::depthwise_vnni`), where its blocks of 64 lanes are full enough; the others,
//! and every run on that tier that does not suit those blocks, run the AVX-512BW body.

use super::channels::RequantRange;
use super::requant::{requant_fixed_one, rounded_int, FixedLanes};
use crate::aligned::AlignedVec;
use crate::isa::Int8Isa;
use std::sync::Arc;

/// Channels per block on the AVX-512 tiers, and per group of the stored lane order.
pub(super) const GROUP: usize = 32;
/// Channels per block on AVX2 (half a group).
pub(super) const HALF: usize = GROUP / 2;

/// Position within a group of 32 channels of channel `i`'s sum after the pair interleaving:
/// the 512-bit low accumulator holds, per 128-bit lane `j`, channels `8j..8j+4`, the high one
/// `8j+4..8j+8`; stored low then high (16 each). An AVX2 block (half `h` of the group) reads
/// its low vector at `8h` and its high one at `16 + 8h`.
#[inline]
fn lane_of(i: usize) -> usize {
    let (j, k) = (i / 8, i % 8);
    if k < 4 {
        4 * j + k
    } else {
        16 + 4 * j + (k - 4)
    }
}

/// The constant operands of a depthwise layer: centered weights per (tap, channel), the
/// bias with the input zero point folded in, the requantization multipliers and range, and
/// whether the input bytes are signed.
#[derive(Debug, Clone)]
pub struct DwWeights {
    channels: usize,
    taps: usize,
    x_signed: bool,
    x_zero: i32,
    /// `[tap][channel]`, centered.
    plain: Vec<i16>,
    /// `[group of 32 channels][pair of taps][64]`: for taps `2q, 2q+1` (the second zero past
    /// the last tap), channel `i`'s two weights at `2·lane_of(i % 32)` (zeros past the last
    /// channel).
    pairs: AlignedVec<i16>,
    /// Per channel: `bias − zx·Σ_t w[t]` (wrapping), then the same in lane order per group.
    bias: Vec<i32>,
    bias_lanes: AlignedVec<i32>,
    /// Per channel the multiplier, then the same in lane order per group.
    scale: Vec<f32>,
    scale_lanes: AlignedVec<f32>,
    range: RequantRange,
    /// The fixed-point rule's Q31 multipliers `(q, shift)` per channel, which replace the
    /// f32 multipliers when present ([`DwWeights::with_fixed_point`]).
    fixed: Option<Vec<(i32, i32)>>,
    /// The same multipliers in lane order per group, for the AVX-512 body.
    fixed_lanes: Option<FixedLanes>,
    /// The AVX-512 VNNI tier's four-tap operands, when every centered weight fits in a
    /// signed byte.
    #[cfg(target_arch = "x86_64")]
    quads: Option<super::depthwise_vnni::DwQuads>,
}

/// A vector of `n` copies of `v`, or `None` when it cannot be allocated.
pub(super) fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).ok()?;
    out.resize(n, v);
    Some(out)
}

/// `n` zeros starting on a cache line (the operands the vector bodies load whole vectors
/// of), or `None` when they cannot be allocated.
pub(super) fn lanes_zeroed<T: bytemuck::Pod>(n: usize) -> Option<AlignedVec<T>> {
    AlignedVec::try_zeroed(n).ok()
}

impl DwWeights {
    /// `w(t, ch)`: the centered weight (8-bit weight less its zero point) of tap `t < taps`
    /// and channel `ch < channels`; `bias` and `scale` one per channel; `x_zero` the input
    /// zero point (added back through the bias); `x_signed` whether input bytes are int8.
    /// `None` when `bias` or `scale` is not one per channel, the sizes overflow or cannot be
    /// allocated.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        channels: usize,
        taps: usize,
        w: impl Fn(usize, usize) -> i16,
        bias: &[i32],
        scale: &[f32],
        range: RequantRange,
        x_zero: i32,
        x_signed: bool,
    ) -> Option<DwWeights> {
        if bias.len() != channels || scale.len() != channels {
            return None;
        }
        let mut plain = Vec::new();
        plain.try_reserve_exact(taps.checked_mul(channels)?).ok()?;
        for t in 0..taps {
            plain.extend((0..channels).map(|ch| w(t, ch)));
        }
        let npairs = taps.div_ceil(2);
        let groups = channels.div_ceil(GROUP);
        let mut pairs = lanes_zeroed(groups.checked_mul(npairs)?.checked_mul(2 * GROUP)?)?;
        let at = |t: usize, ch: usize| {
            if t < taps {
                plain[t * channels + ch]
            } else {
                0
            }
        };
        for ch in 0..channels {
            let (g, lane) = (ch / GROUP, lane_of(ch % GROUP));
            for q in 0..npairs {
                let dst = &mut pairs[(g * npairs + q) * 2 * GROUP..][..2 * GROUP];
                dst[2 * lane] = at(2 * q, ch);
                dst[2 * lane + 1] = at(2 * q + 1, ch);
            }
        }
        let mut folded = filled(channels, 0i32)?;
        for (ch, f) in folded.iter_mut().enumerate() {
            let wsum = (0..taps).fold(0i32, |s, t| s.wrapping_add(i32::from(at(t, ch))));
            *f = bias[ch].wrapping_sub(x_zero.wrapping_mul(wsum));
        }
        let mut bias_lanes = lanes_zeroed(groups * GROUP)?;
        let mut scale_lanes = lanes_zeroed(groups * GROUP)?;
        for ch in 0..channels {
            let at = ch / GROUP * GROUP + lane_of(ch % GROUP);
            bias_lanes[at] = folded[ch];
            scale_lanes[at] = scale[ch];
        }
        let mut scale_v = filled(channels, 0f32)?;
        scale_v.copy_from_slice(scale);
        #[cfg(target_arch = "x86_64")]
        let quads =
            super::depthwise_vnni::DwQuads::new(channels, taps, &plain, &folded, scale, x_signed);
        Some(DwWeights {
            channels,
            taps,
            x_signed,
            x_zero,
            plain,
            pairs,
            bias: folded,
            bias_lanes,
            scale: scale_v,
            scale_lanes,
            range,
            fixed: None,
            fixed_lanes: None,
            #[cfg(target_arch = "x86_64")]
            quads,
        })
    }

    /// These weights requantizing by the fixed-point rule of LiteRT's builtin kernels
    /// ([`super::requant_fixed_one`]) with one Q31 multiplier `(q, shift)` per channel
    /// instead of the f32 multipliers: what a model whose QuantizeLinear asks for that rule
    /// needs to equal CpuRef and LiteRT. The AVX-512 bodies requantize by it in 64-bit
    /// lanes; AVX2 runs a compiled (autovectorized) body of exact integer sums and
    /// requantization (AVX2 has no 64-bit shifts by lane), the portable tier its plain one.
    /// `None` when `multipliers` is not one per channel or cannot be allocated.
    pub fn with_fixed_point(mut self, multipliers: &[(i32, i32)]) -> Option<DwWeights> {
        if multipliers.len() != self.channels {
            return None;
        }
        let mut m = Vec::new();
        m.try_reserve_exact(multipliers.len()).ok()?;
        m.extend_from_slice(multipliers);
        let lanes = FixedLanes::placed(self.bias_lanes.len(), &m, |ch| {
            ch / GROUP * GROUP + lane_of(ch % GROUP)
        })?;
        #[cfg(target_arch = "x86_64")]
        if let Some(q) = &mut self.quads {
            q.set_fixed_point(&m)?;
        }
        self.fixed = Some(m);
        self.fixed_lanes = Some(lanes);
        Some(self)
    }

    /// Whether the AVX-512 VNNI tier can run these weights four taps per instruction: every
    /// centered weight fits in a signed byte (as symmetric int8 weights do), and there are at
    /// least 64 channels, or the least common multiple of 64 and the channel count is at most
    /// eight times the channels (a unit-step run then fills its blocks of 64 lanes). It does
    /// so for runs that fill its blocks (whole blocks of channels, or spans of unit-step
    /// pixels); others run the AVX-512BW body.
    pub fn has_byte_weights(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.quads.is_some()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Channels per pixel.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Taps per output pixel.
    pub fn taps(&self) -> usize {
        self.taps
    }
}

/// The shape of a channels-last depthwise layer: `n` images of `h × w` pixels in, `oh × ow`
/// out, the kernel's extent, strides, dilations and leading pads (top, left) per axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DwGeometry {
    /// Images.
    pub n: usize,
    /// Input height and width.
    pub h: usize,
    /// See `h`.
    pub w: usize,
    /// Output height and width.
    pub oh: usize,
    /// See `oh`.
    pub ow: usize,
    /// Kernel extent `[KH, KW]`.
    pub kernel: [usize; 2],
    /// Strides `[vertical, horizontal]`.
    pub strides: [usize; 2],
    /// Dilations `[vertical, horizontal]`.
    pub dilations: [usize; 2],
    /// Padding before: `[top, left]` (the trailing padding follows from the output extent).
    pub pads: [usize; 2],
}

/// A depthwise layer ready to run on whole output rows: its [`DwWeights`], its geometry, and
/// one input row of bytes equal to the input zero point, which the taps of a window that
/// leaves the image read instead of the image (so padding costs no copy of the input).
#[derive(Debug, Clone)]
pub struct DwLayer {
    /// Shareable between layers of other geometries (a model's plans for several input
    /// shapes): the weights do not depend on the geometry.
    weights: Arc<DwWeights>,
    geo: DwGeometry,
    zeros: Vec<u8>,
}

impl DwLayer {
    /// `None` when the weights' tap count is not the kernel's, an extent, stride or dilation
    /// is zero, the input zero point is not a value of the input type, or the sizes overflow
    /// or cannot be allocated.
    pub fn new(weights: impl Into<Arc<DwWeights>>, geo: DwGeometry) -> Option<DwLayer> {
        let weights = weights.into();
        let [kh, kw] = geo.kernel;
        if kh.checked_mul(kw)? != weights.taps
            || kh == 0
            || kw == 0
            || geo.strides.contains(&0)
            || geo.dilations.contains(&0)
        {
            return None;
        }
        let z = weights.x_zero;
        let byte = if weights.x_signed {
            i8::try_from(z).ok()? as u8
        } else {
            u8::try_from(z).ok()?
        };
        let zeros = filled(geo.w.max(1).checked_mul(weights.channels)?, byte)?;
        // The input's and output's sizes fit (the rows multiply their indices unchecked).
        geo.n
            .checked_mul(geo.h)?
            .checked_mul(geo.w)?
            .checked_mul(weights.channels)?;
        geo.n
            .checked_mul(geo.oh)?
            .checked_mul(geo.ow)?
            .checked_mul(weights.channels)?;
        Some(DwLayer {
            weights,
            geo,
            zeros,
        })
    }

    /// The layer's geometry.
    pub fn geometry(&self) -> &DwGeometry {
        &self.geo
    }

    /// The layer's weights.
    pub fn weights(&self) -> &DwWeights {
        &self.weights
    }
}

/// Output rows `rows` (indices over all images' rows, `n · oh`) of a depthwise layer, from
/// the whole input `x` (`n · h · w · C` bytes) into `out` (the rows' `ow · C` bytes each).
/// Returns `false`, computing nothing, when a length does not fit or a small list cannot be
/// allocated.
pub fn depthwise_rows(
    layer: &DwLayer,
    x: &[u8],
    rows: std::ops::Range<usize>,
    out: &mut [u8],
) -> bool {
    depthwise_rows_on(crate::isa::int8_in_use(), layer, x, rows, out)
}

/// [`depthwise_rows`] on the integer tier `isa` rather than the process's. Returns `false`,
/// computing nothing, also when this CPU lacks `isa`.
pub fn depthwise_rows_on(
    isa: Int8Isa,
    layer: &DwLayer,
    x: &[u8],
    rows: std::ops::Range<usize>,
    out: &mut [u8],
) -> bool {
    let g = &layer.geo;
    let c = layer.weights.channels;
    let [kh, kw] = g.kernel;
    let [sh, sw] = g.strides;
    let [dh, dw] = g.dilations;
    let [pt, pl] = g.pads;
    let (image, row_out) = (g.h * g.w * c, g.ow * c);
    if !isa.available()
        || x.len() < g.n * image
        || rows.end > g.n * g.oh
        || out.len() < rows.len() * row_out
    {
        return false;
    }
    if rows.is_empty() || c == 0 || g.ow == 0 {
        return true;
    }
    // Output columns whose whole window lies within the image's width: [lo, hi).
    let lo = pl.div_ceil(sw).min(g.ow);
    let reach = (kw - 1) * dw;
    let hi = if g.w + pl > reach {
        ((g.w + pl - reach - 1) / sw + 1).min(g.ow)
    } else {
        0
    }
    .max(lo);
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut taps: Vec<&[u8]> = Vec::new();
    if lines.try_reserve_exact(kh).is_err() || taps.try_reserve_exact(kh * kw).is_err() {
        return false;
    }
    let line = g.w * c;
    for (r, y) in rows.zip(out.chunks_exact_mut(row_out)) {
        let (n, oy) = (r / g.oh, r % g.oh);
        // The input row each kernel row reads, or the row of zero points past the image.
        lines.clear();
        lines.extend((0..kh).map(|ky| {
            match (oy * sh + ky * dh).checked_sub(pt).filter(|&iy| iy < g.h) {
                Some(iy) => &x[n * image + iy * line..][..line],
                None => &layer.zeros[..line],
            }
        }));
        if hi > lo {
            taps.clear();
            for l in &lines {
                taps.extend((0..kw).map(|kx| &l[(lo * sw + kx * dw - pl) * c..]));
            }
            let ran = depthwise_pixels_on(
                isa,
                &layer.weights,
                &taps,
                sw * c,
                hi - lo,
                &mut y[lo * c..hi * c],
            );
            if !ran {
                return false;
            }
        }
        for ox in (0..lo).chain(hi..g.ow) {
            taps.clear();
            for l in &lines {
                taps.extend((0..kw).map(|kx| {
                    match (ox * sw + kx * dw).checked_sub(pl).filter(|&ix| ix < g.w) {
                        Some(ix) => &l[ix * c..][..c],
                        None => &layer.zeros[..c],
                    }
                }));
            }
            if !depthwise_pixels_on(isa, &layer.weights, &taps, 0, 1, &mut y[ox * c..][..c]) {
                return false;
            }
        }
    }
    true
}

/// A run of `pixels` output pixels: pixel `p`'s `channels` bytes to `out[p·C..]`, from the
/// bytes each tap reads at `taps[t][p·step ..][..C]`. Returns `false`, computing nothing,
/// when the tap count differs from `w`'s, a tap's run or `out` is too short.
pub fn depthwise_pixels(
    w: &DwWeights,
    taps: &[&[u8]],
    step: usize,
    pixels: usize,
    out: &mut [u8],
) -> bool {
    depthwise_pixels_on(crate::isa::int8_in_use(), w, taps, step, pixels, out)
}

/// [`depthwise_pixels`] on the integer tier `isa` rather than the process's: for tests and
/// A/B timings of the tiers in one process. Returns `false`, computing nothing, also when
/// this CPU lacks `isa`.
pub fn depthwise_pixels_on(
    isa: Int8Isa,
    w: &DwWeights,
    taps: &[&[u8]],
    step: usize,
    pixels: usize,
    out: &mut [u8],
) -> bool {
    let c = w.channels;
    if pixels == 0 || c == 0 {
        return isa.available() && taps.len() == w.taps;
    }
    let span = (pixels - 1)
        .checked_mul(step)
        .and_then(|v| v.checked_add(c));
    let Some(span) = span else {
        return false;
    };
    if !isa.available()
        || taps.len() != w.taps
        || taps.iter().any(|r| r.len() < span)
        || pixels.checked_mul(c).is_none_or(|n| out.len() < n)
    {
        return false;
    }
    if w.fixed.is_some() && isa == Int8Isa::Avx2 {
        // The fixed-point rule on AVX2 (whose body requantizes in f32): the compiled body of
        // exact integers. The AVX-512 bodies requantize by the weights' fixed lanes.
        fixed_pixels(w, taps, step, pixels, out);
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let run = super::depthwise_x86::Run {
            w,
            taps,
            step,
            pixels,
            avail: taps.iter().map(|r| r.len()).min().unwrap_or(0),
        };
        match isa {
            Int8Isa::Avx512Vnni if w.quads.as_ref().is_some_and(|q| q.suits(c, step, pixels)) => {
                if let Some(q) = &w.quads {
                    // SAFETY: AVX-512F, BW and VNNI present (the tier has them); the lengths
                    // as for the arm below; `q` was made with `w`.
                    unsafe { super::depthwise_vnni::vnni(&run, q, out) };
                }
                return true;
            }
            Int8Isa::Avx512Vnni | Int8Isa::Avx512Bw => {
                // SAFETY: AVX-512F and BW present (the tier has them); every tap's run holds
                // `(pixels − 1)·step + C` bytes and `out` `pixels·C` (checked above); `w`'s
                // stored copies are sized for its channels and taps by construction.
                unsafe { super::depthwise_x86::avx512(&run, out) };
                return true;
            }
            Int8Isa::Avx2 => {
                // SAFETY: as for the AVX-512 arm, with AVX2 present.
                unsafe { super::depthwise_x86::avx2(&run, out) };
                return true;
            }
            Int8Isa::Portable => {}
        }
    }
    portable(w, taps, step, pixels, out);
    true
}

/// A run of pixels, one value at a time (the portable tier, and a reference of the tests).
/// The caller has checked the operands' lengths.
pub(super) fn portable(w: &DwWeights, taps: &[&[u8]], step: usize, pixels: usize, out: &mut [u8]) {
    let c = w.channels;
    let r = w.range;
    let zero = r.zero as i32;
    let widen = |b: u8| {
        if w.x_signed {
            i32::from(b as i8)
        } else {
            i32::from(b)
        }
    };
    for p in 0..pixels {
        for ch in 0..c {
            let mut s = w.bias[ch];
            for (t, run) in taps.iter().enumerate() {
                let x = widen(run[p * step + ch]);
                s = s.wrapping_add(i32::from(w.plain[t * c + ch]) * x);
            }
            out[p * c + ch] = match &w.fixed {
                Some(m) => requant_fixed_one(s, 0, m[ch], r),
                None => {
                    let v = (s as f32 * w.scale[ch]).max(r.lo).min(r.hi);
                    (rounded_int(v) + zero) as u8
                }
            };
        }
    }
}

/// Channels per block of [`fixed_pixels`]'s sums (a stack array).
const FIXED_BLOCK: usize = 64;

#[inline(always)]
fn fixed_pixels_body(w: &DwWeights, taps: &[&[u8]], step: usize, pixels: usize, out: &mut [u8]) {
    let Some(fixed) = &w.fixed else {
        return;
    };
    let c = w.channels;
    let r = w.range;
    let mut acc = [0i32; FIXED_BLOCK];
    for p in 0..pixels {
        for c0 in (0..c).step_by(FIXED_BLOCK) {
            let n = (c - c0).min(FIXED_BLOCK);
            let acc = &mut acc[..n];
            acc.copy_from_slice(&w.bias[c0..c0 + n]);
            for (t, run) in taps.iter().enumerate() {
                let x = &run[p * step + c0..][..n];
                let wt = &w.plain[t * c + c0..][..n];
                // Channels innermost, contiguous: the loops vectorize.
                if w.x_signed {
                    for i in 0..n {
                        acc[i] = acc[i].wrapping_add(i32::from(wt[i]) * i32::from(x[i] as i8));
                    }
                } else {
                    for i in 0..n {
                        acc[i] = acc[i].wrapping_add(i32::from(wt[i]) * i32::from(x[i]));
                    }
                }
            }
            let o = &mut out[p * c + c0..][..n];
            let m = &fixed[c0..c0 + n];
            for i in 0..n {
                o[i] = requant_fixed_one(acc[i], 0, m[i], r);
            }
        }
    }
}

crate::multiversion! {
    /// A run of pixels by the fixed-point rule ([`DwWeights::with_fixed_point`]): the
    /// portable tier's sums and requantization, blocks of channels innermost so that the
    /// compiled tiers vectorize them. The caller has checked the operands' lengths.
    fn fixed_pixels(w: &DwWeights, taps: &[&[u8]], step: usize, pixels: usize, out: &mut [u8]) => fixed_pixels_body;
}

/// What the vector bodies read: the layer's operands and one run of pixels.
#[cfg(target_arch = "x86_64")]
pub(super) struct Parts<'a> {
    pub pairs: &'a [i16],
    pub bias_lanes: &'a [i32],
    pub scale_lanes: &'a [f32],
    pub fixed_lanes: Option<&'a FixedLanes>,
    pub range: RequantRange,
    pub x_signed: bool,
    pub channels: usize,
    pub taps: usize,
}

#[cfg(target_arch = "x86_64")]
impl DwWeights {
    pub(super) fn parts(&self) -> Parts<'_> {
        Parts {
            pairs: &self.pairs,
            bias_lanes: &self.bias_lanes,
            scale_lanes: &self.scale_lanes,
            fixed_lanes: self.fixed_lanes.as_ref(),
            range: self.range,
            x_signed: self.x_signed,
            channels: self.channels,
            taps: self.taps,
        }
    }
}

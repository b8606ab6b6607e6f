//! One output row of a channels-last int8 depthwise convolution, its sums and their
//! requantization in one pass: for each block of 16 values of the row (pixels × channels),
//! every tap is accumulated in registers and the block is requantized to bytes before the
//! next one, so no int32 row is written and read back per tap.
//!
//! On AVX2 two taps go into one `vpmaddwd`: the 16-bit inputs of taps `t` and `t + 1` are
//! interleaved (`vpunpcklwd` / `vpunpckhwd`) against weights interleaved the same way once
//! at construction ([`DwTaps`]), so each 32-bit lane sums `x_t·w_t + x_{t+1}·w_{t+1}`
//! (centered 8-bit values: exact, no saturation). The interleaving leaves the sums in a
//! fixed order within each block, which the final `vpackusdw` undoes; the per-value bias
//! and scale are stored in that order ([`DwRequant`]). On the AVX-512 tiers the same runs
//! on blocks of 32 values (512-bit registers; `vpmaddwd` then `vpaddd`, not `vpdpwssd`,
//! whose latency the two accumulators per block would wait on): the weights, bias and
//! scale are stored per pair of 16-value blocks so that both widths read them in place
//! (`lane_of`). The sums and the f32 operations are those of
//! [`super::accumulate_products`] then [`super::requantize_channels`], so the bytes are the
//! same on every tier.

use super::channels::RequantRange;
use super::requant::rounded_int;
use crate::isa::Int8Isa;

/// Values per block of a row on AVX2 (two AVX2 vectors of eight int32 sums).
pub const DW_BLOCK: usize = 16;
/// Values per block of a row on the AVX-512 tiers, and per group of the stored lane order.
pub const DW_WIDE: usize = 2 * DW_BLOCK;

/// Position within a group of 32 values (two AVX2 blocks) of the sum of value `i` after
/// the pair interleaving, `vpunpck{l,h}wd` working per 128-bit lane: the AVX2 block `h`
/// (`i / 16`) has its low vector's eight sums (values 0..4 and 8..12 of the block) at
/// `8h ..`, its high vector's (values 4..8 and 12..16) at `16 + 8h ..`; so the 512-bit
/// low vector of the 32 values holds positions 0..16 and the high one 16..32.
#[inline]
fn lane_of(i: usize) -> usize {
    let (h, j) = (i / DW_BLOCK, i % DW_BLOCK);
    let (half, k) = (j / 8, j % 8);
    if k < 4 {
        8 * h + half * 4 + k
    } else {
        16 + 8 * h + half * 4 + (k - 4)
    }
}

/// The centered weights of a depthwise layer for one output row: per tap, the value of
/// each of the row's `len` positions (its channel's weight repeated per pixel), kept plain
/// (for the tail past the last whole block, and the portable tier) and interleaved by
/// pairs of taps for the whole blocks of 16.
#[derive(Debug, Clone)]
pub struct DwTaps {
    plain: Vec<i16>,
    /// `[group of 32 values][pair][64]`: for taps `2q, 2q+1` (the second zero past the last
    /// tap), value `i`'s two weights at `2·lane_of(i)`, as `vpunpck{l,h}wd` of the two taps'
    /// inputs pair them (zeros for the missing half of a last group of 16 values).
    pairs: Vec<i16>,
    taps: usize,
    len: usize,
}

impl DwTaps {
    /// `w(t, i)`: the weight of tap `t < taps` at row position `i < len`. `None` when the
    /// sizes overflow or cannot be allocated.
    pub fn new(taps: usize, len: usize, w: impl Fn(usize, usize) -> i16) -> Option<DwTaps> {
        let mut plain = Vec::new();
        plain.try_reserve_exact(taps.checked_mul(len)?).ok()?;
        for t in 0..taps {
            plain.extend((0..len).map(|i| w(t, i)));
        }
        let npairs = taps.div_ceil(2);
        let whole = len / DW_BLOCK * DW_BLOCK;
        let groups = whole.div_ceil(DW_WIDE);
        let size = groups.checked_mul(npairs)?.checked_mul(2 * DW_WIDE)?;
        let mut pairs = Vec::new();
        pairs.try_reserve_exact(size).ok()?;
        pairs.resize(size, 0);
        let at = |t: usize, i: usize| if t < taps { plain[t * len + i] } else { 0 };
        for g in 0..groups {
            for q in 0..npairs {
                let dst = &mut pairs[(g * npairs + q) * 2 * DW_WIDE..][..2 * DW_WIDE];
                for j in 0..DW_WIDE.min(whole - g * DW_WIDE) {
                    let i = g * DW_WIDE + j;
                    let lane = lane_of(j);
                    dst[2 * lane] = at(2 * q, i);
                    dst[2 * lane + 1] = at(2 * q + 1, i);
                }
            }
        }
        Some(DwTaps {
            plain,
            pairs,
            taps,
            len,
        })
    }

    /// Taps per output value.
    pub fn taps(&self) -> usize {
        self.taps
    }

    /// Values per output row.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a row of no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The per-value bias and multiplier of a depthwise output row (a channel's repeated per
/// pixel) and the output range: plain, and in the lane order of the interleaved sums for
/// the whole blocks of 16 (`lane_of`, per group of 32 values, zeros for the missing half
/// of a last group of 16).
#[derive(Debug, Clone)]
pub struct DwRequant {
    bias: Vec<i32>,
    scale: Vec<f32>,
    bias_lanes: Vec<i32>,
    scale_lanes: Vec<f32>,
    range: RequantRange,
}

impl DwRequant {
    /// From `bias` and `scale` of equal length (the row's). `None` when they differ or a
    /// copy cannot be allocated.
    pub fn new(bias: &[i32], scale: &[f32], range: RequantRange) -> Option<DwRequant> {
        if bias.len() != scale.len() {
            return None;
        }
        let whole = bias.len() / DW_BLOCK * DW_BLOCK;
        let copy = |v: &[i32]| -> Option<Vec<i32>> {
            let mut o = Vec::new();
            o.try_reserve_exact(v.len()).ok()?;
            o.extend_from_slice(v);
            Some(o)
        };
        let copyf = |v: &[f32]| -> Option<Vec<f32>> {
            let mut o = Vec::new();
            o.try_reserve_exact(v.len()).ok()?;
            o.extend_from_slice(v);
            Some(o)
        };
        let padded = whole.div_ceil(DW_WIDE) * DW_WIDE;
        let mut bias_lanes = Vec::new();
        bias_lanes.try_reserve_exact(padded).ok()?;
        bias_lanes.resize(padded, 0);
        let mut scale_lanes = Vec::new();
        scale_lanes.try_reserve_exact(padded).ok()?;
        scale_lanes.resize(padded, 0.0);
        for i in 0..whole {
            let at = i / DW_WIDE * DW_WIDE + lane_of(i % DW_WIDE);
            bias_lanes[at] = bias[i];
            scale_lanes[at] = scale[i];
        }
        Some(DwRequant {
            bias: copy(bias)?,
            scale: copyf(scale)?,
            bias_lanes,
            scale_lanes,
            range,
        })
    }
}

/// One depthwise output row: `out[i] = requant_i(Σ_t w_t[i] · x[t][i])`, where `x[t]` is
/// the row of centered input values tap `t` reads (at least `taps.len()` each). Returns
/// `false`, computing nothing, when the tap count, a row's length, `rq`'s or `out`'s
/// length does not fit.
pub fn depthwise_row(x: &[&[i16]], taps: &DwTaps, rq: &DwRequant, out: &mut [u8]) -> bool {
    depthwise_row_on(crate::isa::int8_in_use(), x, taps, rq, out)
}

/// [`depthwise_row`] on the integer tier `isa` rather than the process's: for tests and A/B
/// timings of the tiers in one process. Returns `false`, computing nothing, also when this
/// CPU lacks `isa`.
pub fn depthwise_row_on(
    isa: Int8Isa,
    x: &[&[i16]],
    taps: &DwTaps,
    rq: &DwRequant,
    out: &mut [u8],
) -> bool {
    let n = taps.len;
    if !isa.available()
        || x.len() != taps.taps
        || x.iter().any(|r| r.len() < n)
        || out.len() < n
        || rq.bias.len() != n
    {
        return false;
    }
    let mut whole = 0;
    #[cfg(target_arch = "x86_64")]
    {
        // In every arm: every row of `x` holds at least `n` values and `out` at least `n`
        // bytes (checked above); `taps.pairs` holds `⌈(n / 16) / 2⌉ · ⌈taps / 2⌉ · 64`
        // values and `rq`'s lane copies `⌈(n / 16) / 2⌉ · 32` each, by construction for
        // length `n`.
        let blocks = n / DW_BLOCK;
        match isa {
            Int8Isa::Avx512Vnni | Int8Isa::Avx512Bw => {
                let groups = n / DW_WIDE;
                // SAFETY: as said above the match; AVX-512F and BW present (the tier has
                // them); `groups · 32 <= n`.
                unsafe { super::avx512::depthwise_groups(x, taps, rq, out, groups) };
                // SAFETY: as said above the match; AVX2 present (the AVX-512 tiers imply it);
                // `blocks · 16 <= n`. At most one block: past the whole groups.
                unsafe { super::avx2::depthwise_blocks(x, taps, rq, out, 2 * groups..blocks) };
                whole = blocks * DW_BLOCK;
            }
            Int8Isa::Avx2 => {
                // SAFETY: as said above the match; AVX2 present; `blocks · 16 <= n`.
                unsafe { super::avx2::depthwise_blocks(x, taps, rq, out, 0..blocks) };
                whole = blocks * DW_BLOCK;
            }
            Int8Isa::Portable => {}
        }
    }
    let _ = isa;
    portable(x, taps, rq, out, whole..n);
    true
}

/// The values `range` of a row, one at a time (the tail, or the whole row off AVX2).
fn portable(
    x: &[&[i16]],
    taps: &DwTaps,
    rq: &DwRequant,
    out: &mut [u8],
    range: std::ops::Range<usize>,
) {
    let r = rq.range;
    let n = taps.len;
    for i in range {
        let mut s = 0i32;
        for (t, row) in x.iter().enumerate() {
            s += i32::from(taps.plain[t * n + i]) * i32::from(row[i]);
        }
        let v = (s.wrapping_add(rq.bias[i]) as f32 * rq.scale[i])
            .max(r.lo)
            .min(r.hi);
        out[i] = (rounded_int(v) + r.zero as i32) as u8;
    }
}

/// What the AVX2 body reads of the operands.
#[cfg(target_arch = "x86_64")]
pub(super) struct DwParts<'a> {
    pub pairs: &'a [i16],
    pub npairs: usize,
    pub bias_lanes: &'a [i32],
    pub scale_lanes: &'a [f32],
    pub range: RequantRange,
}

#[cfg(target_arch = "x86_64")]
impl DwTaps {
    pub(super) fn parts<'a>(&'a self, rq: &'a DwRequant) -> DwParts<'a> {
        DwParts {
            pairs: &self.pairs,
            npairs: self.taps.div_ceil(2),
            bias_lanes: &rq.bias_lanes,
            scale_lanes: &rq.scale_lanes,
            range: rq.range,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qgemm::{accumulate_products, requantize_channels};

    fn vals(n: usize, seed: u32, lo: i32, span: u32) -> Vec<i16> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(977);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (lo + ((s >> 8) % span) as i32) as i16
            })
            .collect()
    }

    /// The row against the two-pass path (sums per tap, then the requantization), on odd
    /// lengths (whole groups of 32, a last block of 16, a tail) and tap counts, at the
    /// extremes of centered 8-bit values, on the tier in use and on every tier this CPU has.
    #[test]
    fn row_equals_products_then_requantization() {
        let tiers: Vec<Int8Isa> = Int8Isa::ALL.into_iter().filter(|t| t.available()).collect();
        eprintln!(
            "int8 tiers depthwise row: tested {}",
            tiers.iter().map(|t| t.name()).collect::<Vec<_>>().join(" ")
        );
        for len in [
            1usize, 3, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 80, 97, 768,
        ] {
            for ntaps in [1usize, 2, 3, 9, 25] {
                let seed = (len * 31 + ntaps) as u32;
                let xs: Vec<Vec<i16>> = (0..ntaps)
                    .map(|t| {
                        if t % 3 == 0 {
                            vec![255; len + 5]
                        } else {
                            vals(len + 5, seed + t as u32, -255, 511)
                        }
                    })
                    .collect();
                let wv = vals(ntaps * len, seed + 99, -255, 511);
                let w = |t: usize, i: usize| if t == 0 { -255 } else { wv[t * len + i] };
                let bias: Vec<i32> = (0..len as i32).map(|i| i * 37 - 300).collect();
                let scale: Vec<f32> = (0..len).map(|i| 1e-4 + 3e-6 * i as f32).collect();
                let r = RequantRange {
                    zero: -3.0,
                    lo: -125.0,
                    hi: 130.0,
                };
                let taps = DwTaps::new(ntaps, len, w).expect("taps");
                let rq = DwRequant::new(&bias, &scale, r).expect("requant");
                let rows: Vec<&[i16]> = xs.iter().map(Vec::as_slice).collect();
                let mut acc = vec![0i32; len];
                for (t, row) in rows.iter().enumerate() {
                    let wt: Vec<i16> = (0..len).map(|i| w(t, i)).collect();
                    accumulate_products(&mut acc, &row[..len], &wt);
                }
                let mut want = vec![0u8; len];
                requantize_channels(&acc, &mut want, &bias, &scale, r);
                let mut got = vec![0u8; len];
                assert!(depthwise_row(&rows, &taps, &rq, &mut got));
                assert_eq!(got, want, "len {len} taps {ntaps}");
                for &isa in &tiers {
                    let mut got = vec![0x5au8; len + 3];
                    assert!(depthwise_row_on(isa, &rows, &taps, &rq, &mut got));
                    assert_eq!(got[..len], want, "{}: len {len} taps {ntaps}", isa.name());
                    assert_eq!(got[len..], [0x5a; 3], "{}: wrote past the row", isa.name());
                }
                let mut port = vec![0u8; len];
                portable(&rows, &taps, &rq, &mut port, 0..len);
                assert_eq!(port, want, "portable, len {len} taps {ntaps}");
            }
        }
    }

    #[test]
    fn mismatched_operands_are_refused() {
        let taps = DwTaps::new(2, 20, |_, _| 1).expect("taps");
        let r = RequantRange {
            zero: 0.0,
            lo: -128.0,
            hi: 127.0,
        };
        let rq = DwRequant::new(&[0; 20], &[1.0; 20], r).expect("requant");
        let row = [0i16; 20];
        let short = [0i16; 19];
        let mut out = [0u8; 20];
        assert!(!depthwise_row(&[&row], &taps, &rq, &mut out));
        assert!(!depthwise_row(&[&row, &short], &taps, &rq, &mut out));
        assert!(!depthwise_row(&[&row, &row], &taps, &rq, &mut out[..19]));
        assert!(DwRequant::new(&[0; 3], &[1.0; 2], r).is_none());
        assert!(depthwise_row(&[&row, &row], &taps, &rq, &mut out));
    }
}

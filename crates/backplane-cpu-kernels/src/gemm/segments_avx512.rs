//! The AVX-512 body of [`super::segments::pack_segments`]: each K row's two 16-lane halves
//! built by masked loads, one per segment and half, and stored masked to the panel's width.

use std::arch::x86_64::*;

/// Row `k` of the panel: for each segment `(d, s, len)`, lanes `d .. d + len` of the row's 32
/// loaded from `data + rows[k] + s` on (lane `i` from `data + rows[k] + s + i − d`), the other
/// lanes zero; its first `width` lanes stored at `panel + k·width`. Safety: AVX-512F present;
/// `1 <= width <= NR`; for every row `r` and segment, `d + len <= width` and
/// `data + r + s .. + len` readable; `panel` writable for `rows.len()·width` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack(
    data: *const f32,
    rows: &[usize],
    segments: &[super::segments::Segment],
    panel: *mut f32,
    width: usize,
) {
    // The lanes stored of each half (width <= 32, so the shift fits).
    let keep = (1u64 << width) - 1;
    let (keep_lo, keep_hi) = (keep as __mmask16, (keep >> 16) as __mmask16);
    for (k, &r) in rows.iter().enumerate() {
        let mut lo = _mm512_setzero_ps();
        let mut hi = _mm512_setzero_ps();
        for &(d, s, len) in segments {
            // Bits d .. d + len of the row's 32 lanes (d + len <= 32, so the shift fits).
            let bits = ((1u64 << len) - 1) << d;
            // Lane i reads base + i: a pointer that may lie before `data` or past its end,
            // never read there, as the lanes outside the segment are masked off.
            let base = data.wrapping_add(r + s).wrapping_sub(d);
            lo = _mm512_mask_loadu_ps(lo, bits as __mmask16, base);
            hi = _mm512_mask_loadu_ps(hi, (bits >> 16) as __mmask16, base.wrapping_add(16));
        }
        // Masked stores: only the row's `width` values are written (none of the second
        // half for a width of 16 or less, whose address may then lie past `panel`).
        let out = panel.wrapping_add(k * width);
        _mm512_mask_storeu_ps(out, keep_lo, lo);
        _mm512_mask_storeu_ps(out.wrapping_add(16), keep_hi, hi);
    }
}

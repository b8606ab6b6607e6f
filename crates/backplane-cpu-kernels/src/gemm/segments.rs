//! Packing panels from row segments: each K row of a panel gathered from a few runs of its
//! source row (a convolution's im2col rows over narrow planes, where a B panel's 32 columns
//! or an A panel's twelve pixels span several output rows; a plane's rows into a padded
//! copy), without a library copy per run and a fill per row.

use super::NR;
use crate::isa::{isa_in_use, Isa};

/// One run of a panel's columns: `(first column in the panel, offset of its first value from
/// a K row's start in the source, length)`.
pub type Segment = (usize, usize, usize);

/// Pack K rows of one panel `width` values wide (at most `NR`): row `k` of `panel` (values
/// `k·width ..`) gets, for each segment `(d, s, len)`, `data[rows[k] + s ..][..len]` in its
/// columns `d .. d + len`, and zeros in the columns no segment covers (segments are expected
/// not to overlap; where they do, the later one wins). Returns false, writing nothing, when
/// `width` is 0 or past `NR`, a segment ends past `width`, `panel` holds fewer than
/// `rows.len()·width` values or some row's segment ends past `data`.
pub fn pack_segments(
    data: &[f32],
    rows: &[usize],
    segments: &[Segment],
    panel: &mut [f32],
    width: usize,
) -> bool {
    pack_segments_on(isa_in_use(), data, rows, segments, panel, width)
}

/// [`pack_segments`] on the given tier (the AVX-512 kernel where `isa` is AVX-512 and the CPU
/// has it, plain Rust otherwise), so tests can run each.
pub fn pack_segments_on(
    isa: Isa,
    data: &[f32],
    rows: &[usize],
    segments: &[Segment],
    panel: &mut [f32],
    width: usize,
) -> bool {
    let Some(need) = rows.len().checked_mul(width) else {
        return false;
    };
    if panel.len() < need || !(1..=NR).contains(&width) {
        return false;
    }
    // The furthest value past a row's start any segment reads.
    let mut reach = 0usize;
    for &(d, s, len) in segments {
        match (d.checked_add(len), s.checked_add(len)) {
            (Some(end), Some(far)) if end <= width => reach = reach.max(far),
            _ => return false,
        }
    }
    let top = rows.iter().copied().max().unwrap_or(0);
    if !rows.is_empty() && top.checked_add(reach).is_none_or(|end| end > data.len()) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.available() {
        // SAFETY: AVX-512F is present (checked). For every row r of `rows` and segment
        // (d, s, len), d + len <= width <= NR and r + s + len <= data.len() (checked above
        // through the largest row and the furthest segment end), so the lanes the kernel
        // loads (lane i of the row's 32 for d <= i < d + len, at data + r + s + i - d) lie
        // inside `data`; the other lanes are masked off and not read. It stores `width`
        // values at panel + k·width for k < rows.len() (masked to them), inside `panel`
        // (panel.len() >= rows.len()·width was checked).
        unsafe {
            let out = panel.as_mut_ptr();
            super::segments_avx512::pack(data.as_ptr(), rows, segments, out, width);
        }
        return true;
    }
    let _ = isa;
    for (dst, &r) in panel.chunks_exact_mut(width).zip(rows) {
        dst.fill(0.0);
        for &(d, s, len) in segments {
            dst[d..d + len].copy_from_slice(&data[r + s..r + s + len]);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panel a plain loop packs, for comparison.
    fn plain(data: &[f32], rows: &[usize], segments: &[Segment], width: usize) -> Vec<f32> {
        let mut out = vec![0.0; rows.len() * width];
        for (dst, &r) in out.chunks_exact_mut(width).zip(rows) {
            for &(d, s, len) in segments {
                for i in 0..len {
                    dst[d + i] = data[r + s + i];
                }
            }
        }
        out
    }

    #[test]
    fn every_tier_packs_the_segments() {
        let data: Vec<f32> = (0..997).map(|i| i as f32 * 0.5 - 7.0).collect();
        // Narrow planes (2 and 4 wide with pitches 4 and 6), a single run, a full panel, one
        // column, segments reaching the data's last value, and none.
        let cases: Vec<(Vec<usize>, Vec<Segment>)> = vec![
            (vec![0, 16, 3, 40], vec![(0, 0, 2), (2, 4, 2)]),
            (
                vec![5, 11, 0],
                vec![(0, 0, 4), (4, 6, 4), (8, 12, 4), (12, 18, 4)],
            ),
            (vec![1, 2, 900], vec![(0, 0, 6)]),
            (vec![7, 960], vec![(0, 0, 32)]),
            (vec![3], vec![(0, 0, 1)]),
            (vec![990, 0], vec![(0, 0, 3), (3, 4, 3)]),
            (vec![2, 30], vec![(0, 0, 8), (8, 10, 4)]),
            (vec![12, 13], vec![]),
            (vec![], vec![(0, 0, 5)]),
        ];
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Portable] {
            if !isa.available() {
                continue;
            }
            for (rows, segs) in &cases {
                // B panels (32 wide), A panels (12), padded plane rows (9, 17, 1): each
                // width the case's segments fit.
                let reach = segs.iter().map(|&(d, _, len)| d + len).max().unwrap_or(0);
                for width in [NR, 12, 9, 17, 1].into_iter().filter(|&w| w >= reach) {
                    let what = format!("{isa:?} width {width} {segs:?}");
                    let n = rows.len() * width;
                    let mut got = vec![f32::NAN; n + 3];
                    assert!(
                        pack_segments_on(isa, &data, rows, segs, &mut got, width),
                        "{what}"
                    );
                    assert_eq!(got[..n], plain(&data, rows, segs, width)[..], "{what}");
                    assert!(got[n..].iter().all(|v| v.is_nan()), "{what}: wrote past");
                }
            }
            // Refused, writing nothing: a segment past the data's end, past the panel's
            // columns (32, or 12), a panel too short, a width of 0 or past NR.
            let refused: [(&[usize], &[Segment], usize, usize); 6] = [
                (&[990], &[(0, 0, 8)], NR, NR),
                (&[0], &[(30, 0, 3)], NR, NR),
                (&[0], &[(10, 0, 3)], NR, 12),
                (&[0, 1], &[(0, 0, 2)], NR + 5, NR),
                (&[0], &[], 4, 0),
                (&[0], &[(0, 0, 2)], 40, NR + 1),
            ];
            for (rows, segs, len, width) in refused {
                let mut got = vec![f32::NAN; len];
                let packed = pack_segments_on(isa, &data, rows, segs, &mut got, width);
                assert!(!packed, "{isa:?} width {width} {segs:?}");
                assert!(
                    got.iter().all(|v| v.is_nan()),
                    "{isa:?}: wrote while refusing"
                );
            }
        }
    }
}

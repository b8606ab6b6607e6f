//! The im2col matrix of a convolution as shifted runs of its padded input ([`Shifted`]), and
//! its packing into B panels.

use super::NR;
use backplane_backend_api::{BackendError, Result};

/// A K×N matrix whose row `l` starts at `data[rows[l]]`: the im2col matrix of a convolution
/// over its input's zero-padded stride phases, where each K row is a phase shifted by one tap.
///
/// Column `n` of a row is `data[rows[l] + (n / cols) · pitch + n % cols]`. A *contiguous* one
/// (`cols == pitch`) is computed at the phases' width (see `crate::conv`): packing is a plain
/// copy per row, and the caller drops the few extra columns of each output row. A *gathered*
/// one (`cols` < `pitch`: the output width) computes only real outputs, packing each panel in
/// row segments: what a dilated convolution needs, whose padded rows can be several times
/// wider than its output.
#[derive(Debug, Clone, Copy)]
pub struct Shifted<'a> {
    /// The padded input.
    pub data: &'a [f32],
    /// Start of each K row in `data`.
    pub rows: &'a [usize],
    /// Columns per output row (`pitch` for a contiguous matrix).
    cols: usize,
    /// Distance in `data` between output rows.
    pitch: usize,
}

impl<'a> Shifted<'a> {
    /// Rows read as one contiguous run each.
    pub fn contiguous(data: &'a [f32], rows: &'a [usize]) -> Self {
        Shifted {
            data,
            rows,
            cols: usize::MAX,
            pitch: usize::MAX,
        }
    }

    /// Rows read `cols` columns at a time, `pitch` apart (`cols` ≤ `pitch`, both > 0).
    pub fn gathered(data: &'a [f32], rows: &'a [usize], cols: usize, pitch: usize) -> Self {
        let cols = cols.max(1);
        Shifted {
            data,
            rows,
            cols,
            pitch: pitch.max(cols),
        }
    }

    /// Offset of column `n` from a row's start.
    #[inline]
    fn at(&self, n: usize) -> usize {
        if self.cols == self.pitch {
            n
        } else {
            (n / self.cols) * self.pitch + n % self.cols
        }
    }

    /// One past the last element an `n`-column product reads (0 when empty).
    pub fn end(&self, n: usize) -> usize {
        match n.checked_sub(1) {
            Some(last) => self.rows.iter().max().map_or(0, |r| r + self.at(last) + 1),
            None => 0,
        }
    }
}

/// Pack panels of a [`Shifted`] matrix: columns from `j0` (of `n`), K rows `k0..k0+kc`, by
/// the kernel crate's segment packing (masked loads where the CPU has them, no copy call per
/// run: a narrow plane's runs are a few values each). The bounds were checked once for the
/// whole product ([`Shifted::end`]); a panel the packing still refuses is an error.
pub(super) fn pack_b_shifted(
    b: &Shifted<'_>,
    n: usize,
    j0: usize,
    k0: usize,
    kc: usize,
    out: &mut [f32],
) -> Result<()> {
    // Each panel's columns as row segments (start in the panel, offset from a row start,
    // length): the same for every K row.
    let mut segments = [(0usize, 0usize, 0usize); NR];
    for (p, panel) in out.chunks_exact_mut(kc * NR).enumerate() {
        let n0 = j0 + p * NR;
        let width = NR.min(n.saturating_sub(n0));
        let mut count = 0;
        let mut j = 0;
        while j < width {
            let col = (n0 + j) % b.cols;
            let take = if b.cols == b.pitch {
                width - j
            } else {
                (b.cols - col).min(width - j)
            };
            segments[count] = (j, b.at(n0 + j), take);
            count += 1;
            j += take;
        }
        let rows = b.rows.get(k0..k0 + kc).unwrap_or(&[]);
        if rows.len() != kc
            || !crate::simd::pack_segments(b.data, rows, &segments[..count], panel, NR)
        {
            return Err(BackendError::Execution(
                "shifted B: a panel reads outside its image".into(),
            ));
        }
    }
    Ok(())
}

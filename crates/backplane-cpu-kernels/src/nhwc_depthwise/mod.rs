//! Rows of the channels-last depthwise convolution: what one output row reads, and its AVX2
//! kernels ([`avx2`]); CpuAcc's compiled loops (`nhwc::dw_row_body`) run where AVX2 does not.

#[cfg(target_arch = "x86_64")]
mod avx2;

use crate::act::Activation;
use crate::geo::Geo2;

/// One output row of a channels-last depthwise convolution, for [`dw_row_body`].
pub struct DwRow<'a> {
    /// The window.
    pub geo: &'a Geo2,
    /// Channels.
    pub c: usize,
    /// One image, `[H, W, C]`.
    pub x: &'a [f32],
    /// The taps, `[kh·kw][C]`.
    pub taps: &'a [f32],
    /// One bias per channel.
    pub bias: &'a [f32],
    /// The activation.
    pub act: Activation,
}

/// The taps `t < k` whose input index `start + t·d` lies in the image (`pad ≤ · < pad +
/// len`, in padded coordinates), as a range `lo..hi` (empty when none does).
#[inline(always)]
pub fn valid_taps(start: usize, d: usize, pad: usize, len: usize, k: usize) -> (usize, usize) {
    let first = |edge: usize| {
        if start >= edge {
            0
        } else {
            (edge - start).div_ceil(d.max(1))
        }
    };
    let lo = first(pad).min(k);
    (lo, first(pad + len).clamp(lo, k))
}

/// Whether the buffers of `job` hold output row `oy` and everything it reads (`res`, the
/// residual added before the activation, when given).
pub fn row_fits(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &[f32]) -> bool {
    let g = job.geo;
    let row = g.ow * job.c;
    oy < g.oh
        && job.x.len() >= g.h * g.w * job.c
        && job.taps.len() >= g.kh * g.kw * job.c
        && job.bias.len() >= job.c
        && out.len() >= row
        && res.is_none_or(|r| r.len() >= row)
        && g.sh > 0
        && g.sw > 0
}

/// Output row `oy` of a channels-last depthwise convolution into `out` by explicit AVX2 code
/// (the compiled loops kept their accumulators in memory). False, computing nothing, without
/// AVX2 or when a buffer is too short ([`row_fits`]).
pub fn row(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) -> bool {
    if !row_fits(job, oy, res, out) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::isa::avx2_in_use() {
        // SAFETY: AVX2 and FMA are present (checked); the buffer lengths the kernel relies
        // on were checked by `row_fits`, and `valid_taps` keeps every tap it visits inside
        // the image (rows pt ≤ iy·… < pt + h, columns likewise).
        unsafe { avx2::row(job, oy, res, out) };
        return true;
    }
    false
}

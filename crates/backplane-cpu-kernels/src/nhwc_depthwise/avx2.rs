//! The AVX2 row kernels of the channels-last depthwise convolution (`crate::nhwc`): 3×3
//! windows eight channels at a time with their weights in registers along the row; other
//! windows per output pixel, 32 channels (four independent FMA chains) at a time, then 8,
//! then one by one, each valid tap one load of input and one of weights per vector.

use super::{valid_taps, DwRow, BLOCKS_OUTER_TAPS};
use crate::gemm::avx2::Act256;
use std::arch::x86_64::*;

/// Output row `oy` of a channels-last depthwise convolution (see `crate::nhwc::dw_row_body`).
///
/// Safety: AVX2 and FMA present; `job.x` holds `h·w·c` floats, `job.taps` `kh·kw·c`,
/// `job.bias` `c`, `out` and `res` (when given) `ow·c`; `oy < oh`, and the geometry is the
/// one the output was computed for (so every valid tap lies inside the image).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn row(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) {
    let g = job.geo;
    // Weights in registers pay on wide stride-1 rows; on narrow or strided rows the
    // per-pixel loop's whole cache lines per tap win (docs/cpu-acc-bounds.md, "Channels-last
    // depthwise rows").
    if g.kh == 3
        && g.kw == 3
        && g.dh == 1
        && g.dw == 1
        && g.sh == 1
        && g.sw == 1
        && g.ow >= 32
        && job.c >= 8
    {
        row_3x3(job, oy, res, out);
    } else if g.kh * g.kw * job.c >= BLOCKS_OUTER_TAPS {
        row_blocks(job, oy, res, out);
    } else {
        row_any(job, oy, res, out, 0);
    }
}

/// [`row`] for 3×3 windows on wide rows: eight channels at a time, their nine weight vectors in
/// registers while the row's pixels go by (nine loads per output vector, not eighteen);
/// pixels whose window reaches into the padding, and the last `c % 8` channels, by
/// [`row_any`]. Safety: as [`row`], with a 3×3 window of dilation 1 and c >= 8.
#[target_feature(enable = "avx2,fma")]
unsafe fn row_3x3(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) {
    let g = job.geo;
    let c = job.c;
    let act = Act256::new(job.act);
    let (ky0, ky1) = valid_taps(oy * g.sh, 1, g.pt, g.h, 3);
    // Columns whose window lies inside the image.
    let lo = g.pl.div_ceil(g.sw);
    let hi = if g.w + g.pl >= 3 {
        ((g.w + g.pl - 3) / g.sw + 1).min(g.ow)
    } else {
        0
    };
    let full_rows = ky0 == 0 && ky1 == 3;
    let (xp, wp, bp) = (job.x.as_ptr(), job.taps.as_ptr(), job.bias.as_ptr());
    let op = out.as_mut_ptr();
    let rp = res.map(<[f32]>::as_ptr);
    let row_c = g.w * c;
    let mut c0 = 0;
    while c0 + 8 <= c {
        let w: [__m256; 9] = std::array::from_fn(|t| _mm256_loadu_ps(wp.add(t * c + c0)));
        let b = _mm256_loadu_ps(bp.add(c0));
        let mut ox = 0;
        while ox < g.ow {
            if full_rows && ox >= lo && ox + 4 <= hi {
                // Four interior pixels: four independent chains of nine FMAs.
                let p = xp.add(((oy * g.sh - g.pt) * g.w + ox * g.sw - g.pl) * c + c0);
                let step = g.sw * c;
                let mut a = [b; 4];
                for ky in 0..3 {
                    for kx in 0..3 {
                        let r = p.add(ky * row_c + kx * c);
                        for (j, aj) in a.iter_mut().enumerate() {
                            let x = _mm256_loadu_ps(r.add(j * step));
                            *aj = _mm256_fmadd_ps(x, w[ky * 3 + kx], *aj);
                        }
                    }
                }
                for (j, &aj) in a.iter().enumerate() {
                    let o = (ox + j) * c + c0;
                    let v = match rp {
                        Some(r) => _mm256_add_ps(aj, _mm256_loadu_ps(r.add(o))),
                        None => aj,
                    };
                    _mm256_storeu_ps(op.add(o), act.apply_all(v));
                }
                ox += 4;
                continue;
            }
            let o = ox * c + c0;
            let mut a = b;
            if full_rows && ox >= lo && ox < hi {
                // Top left of the window: row oy·sh - pt, column ox·sw - pl, channel c0.
                let p = xp.add(((oy * g.sh - g.pt) * g.w + ox * g.sw - g.pl) * c + c0);
                for ky in 0..3 {
                    let r = p.add(ky * row_c);
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(r), w[ky * 3], a);
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(r.add(c)), w[ky * 3 + 1], a);
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(r.add(2 * c)), w[ky * 3 + 2], a);
                }
            } else {
                let (kx0, kx1) = valid_taps(ox * g.sw, 1, g.pl, g.w, 3);
                for ky in ky0..ky1 {
                    for kx in kx0..kx1 {
                        let iy = oy * g.sh + ky - g.pt;
                        let ix = ox * g.sw + kx - g.pl;
                        let x = _mm256_loadu_ps(xp.add((iy * g.w + ix) * c + c0));
                        a = _mm256_fmadd_ps(x, w[ky * 3 + kx], a);
                    }
                }
            }
            if let Some(r) = rp {
                a = _mm256_add_ps(a, _mm256_loadu_ps(r.add(o)));
            }
            _mm256_storeu_ps(op.add(o), act.apply_all(a));
            ox += 1;
        }
        c0 += 8;
    }
    if c0 < c {
        row_any(job, oy, res, out, c0);
    }
}

/// [`row_any`] with the loops the other way round: each block of 32, then 8 channels along
/// the whole row before the next block, so the rows under the window stay in L1 (three rows
/// of 14 pixels by 32 channels: 5 KB), where pixel by pixel, all channels, a 14×14×576
/// layer's window and taps (41 KB) did not. Safety: as [`row`].
#[target_feature(enable = "avx2,fma")]
unsafe fn row_blocks(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) {
    let g = job.geo;
    let c = job.c;
    let act = Act256::new(job.act);
    let (ky0, ky1) = valid_taps(oy * g.sh, g.dh, g.pt, g.h, g.kh);
    let op = out.as_mut_ptr();
    let rp = res.map(<[f32]>::as_ptr);
    let mut c0 = 0;
    while c0 + 32 <= c {
        for ox in 0..g.ow {
            let (kx0, kx1) = valid_taps(ox * g.sw, g.dw, g.pl, g.w, g.kw);
            pixel32(job, (oy, ox), (ky0, ky1, kx0, kx1), c0, rp, op, &act);
        }
        c0 += 32;
    }
    // The last channels (fewer than 32) pixel by pixel.
    if c0 < c {
        row_any(job, oy, res, out, c0);
    }
}

/// [`row`] for any window, channels from `first` on: per output pixel, 32 channels (four
/// independent FMA chains) at a time, then 8, then one by one. Safety: as [`row`].
#[target_feature(enable = "avx2,fma")]
unsafe fn row_any(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32], first: usize) {
    let g = job.geo;
    let c = job.c;
    let act = Act256::new(job.act);
    let (ky0, ky1) = valid_taps(oy * g.sh, g.dh, g.pt, g.h, g.kh);
    let (xp, wp, bp) = (job.x.as_ptr(), job.taps.as_ptr(), job.bias.as_ptr());
    let op = out.as_mut_ptr();
    let rp = res.map(<[f32]>::as_ptr);
    for ox in 0..g.ow {
        let (kx0, kx1) = valid_taps(ox * g.sw, g.dw, g.pl, g.w, g.kw);
        let o = ox * c;
        // Input offset of valid tap (ky, kx), channel 0.
        let at = |ky: usize, kx: usize| {
            let iy = oy * g.sh + ky * g.dh - g.pt;
            let ix = ox * g.sw + kx * g.dw - g.pl;
            (iy * g.w + ix) * c
        };
        let mut c0 = first;
        while c0 + 32 <= c {
            pixel32(job, (oy, ox), (ky0, ky1, kx0, kx1), c0, rp, op, &act);
            c0 += 32;
        }
        while c0 + 8 <= c {
            let mut a = _mm256_loadu_ps(bp.add(c0));
            for ky in ky0..ky1 {
                for kx in kx0..kx1 {
                    let xs = xp.add(at(ky, kx) + c0);
                    let ws = wp.add((ky * g.kw + kx) * c + c0);
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(xs), _mm256_loadu_ps(ws), a);
                }
            }
            if let Some(r) = rp {
                a = _mm256_add_ps(a, _mm256_loadu_ps(r.add(o + c0)));
            }
            _mm256_storeu_ps(op.add(o + c0), act.apply_all(a));
            c0 += 8;
        }
        for ch in c0..c {
            let mut a = *bp.add(ch);
            for ky in ky0..ky1 {
                for kx in kx0..kx1 {
                    let w = *wp.add((ky * g.kw + kx) * c + ch);
                    a = (*xp.add(at(ky, kx) + ch)).mul_add(w, a);
                }
            }
            if let Some(r) = rp {
                a += *r.add(o + ch);
            }
            *op.add(o + ch) = act.apply_scalar(a);
        }
    }
}

/// Channels `c0 .. c0 + 32` of output pixel `ox` of row `oy` (four independent FMA chains),
/// over the valid taps `ky0..ky1` × `kx0..kx1`: plus the residual `rp` (when given) and the
/// activation, stored at `op`. Always inlined into [`row_any`] and [`row_blocks`], which
/// differ only in loop order. Safety: as [`row`], c0 + 32 <= C, the taps valid for the pixel.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pixel32(
    job: &DwRow<'_>,
    (oy, ox): (usize, usize),
    (ky0, ky1, kx0, kx1): (usize, usize, usize, usize),
    c0: usize,
    rp: Option<*const f32>,
    op: *mut f32,
    act: &Act256,
) {
    let (g, c) = (job.geo, job.c);
    let (xp, wp, bp) = (job.x.as_ptr(), job.taps.as_ptr(), job.bias.as_ptr());
    let mut a0 = _mm256_loadu_ps(bp.add(c0));
    let mut a1 = _mm256_loadu_ps(bp.add(c0 + 8));
    let mut a2 = _mm256_loadu_ps(bp.add(c0 + 16));
    let mut a3 = _mm256_loadu_ps(bp.add(c0 + 24));
    for ky in ky0..ky1 {
        for kx in kx0..kx1 {
            let iy = oy * g.sh + ky * g.dh - g.pt;
            let ix = ox * g.sw + kx * g.dw - g.pl;
            let xs = xp.add((iy * g.w + ix) * c + c0);
            let ws = wp.add((ky * g.kw + kx) * c + c0);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xs), _mm256_loadu_ps(ws), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xs.add(8)), _mm256_loadu_ps(ws.add(8)), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xs.add(16)), _mm256_loadu_ps(ws.add(16)), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xs.add(24)), _mm256_loadu_ps(ws.add(24)), a3);
        }
    }
    for (j, a) in [a0, a1, a2, a3].into_iter().enumerate() {
        let o = ox * c + c0 + 8 * j;
        let v = match rp {
            Some(r) => _mm256_add_ps(a, _mm256_loadu_ps(r.add(o))),
            None => a,
        };
        _mm256_storeu_ps(op.add(o), act.apply_all(v));
    }
}

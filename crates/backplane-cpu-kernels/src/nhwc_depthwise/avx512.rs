//! The AVX-512 row kernels of the channels-last depthwise convolution: the AVX2 kernels'
//! loops ([`super::avx2`]) on 16-channel vectors, with the last `c % 16` channels of a row
//! under a lane mask instead of a narrower loop; and, on this tier only, 3×3 rows at
//! strides 1 and 2 and 5×5 rows four pixels a step with each input vector loaded once.

use super::{valid_taps, DwRow, BLOCKS_OUTER_TAPS};
use crate::gemm::avx512::Act512;
use std::arch::x86_64::*;

/// Output row `oy` of a channels-last depthwise convolution (see `super::row`).
///
/// Safety: AVX-512F, AVX2 and FMA present; the buffers as `super::row_fits` checks them; the
/// geometry is the one the output was computed for (so every valid tap lies inside the
/// image).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn row(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) {
    let g = job.geo;
    let three = g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && job.c >= 16;
    let five = g.kh == 5 && g.kw == 5 && g.dh == 1 && g.dw == 1 && job.c >= 16;
    if three && g.sh == 1 && g.sw == 1 && g.ow >= 4 {
        row_3x3::<1, 6>(job, oy, res, out);
    } else if three && g.sh == 2 && g.sw == 2 && g.ow >= 4 {
        row_3x3::<2, 9>(job, oy, res, out);
    } else if five && g.sw == 1 {
        row_window::<5, 1, 8>(job, oy, res, out);
    } else if five && g.sw == 2 && g.ow >= 16 {
        // (On a short row, half its groups waste columns of padding: a 7-wide row of 672
        // channels ran slower on it than below.)
        row_window::<5, 2, 11>(job, oy, res, out);
    } else if g.kh * g.kw * job.c >= BLOCKS_OUTER_TAPS {
        row_blocks(job, oy, res, out);
    } else {
        row_any(job, oy, res, out, 0);
    }
}

use crate::lanes::first16 as lanes;

/// [`row`] for 3×3 windows on wide rows: sixteen channels at a time, their nine weight
/// vectors in registers while the row's pixels go by, four pixels a step with each input
/// vector under them loaded once (the `COLS` = 3·S + 3 columns their windows span, where a
/// load per tap and pixel made the loads, not the FMAs, the bound); pixels whose window
/// reaches into the padding one at a time; the last `c % 16` channels in the same steps
/// under a lane mask (MobileNetV3's 72, 120, 184 and 200 channels; pixel by pixel in
/// [`row_any`], those eight channels cost far more than their share). Safety: as [`row`], with a
/// 3×3 window of dilation 1, stride S both ways, COLS = 3·S + 3, c >= 16.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_3x3<const S: usize, const COLS: usize>(
    job: &DwRow<'_>,
    oy: usize,
    res: Option<&[f32]>,
    out: &mut [f32],
) {
    let g = job.geo;
    let c = job.c;
    let act = Act512::new(job.act);
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
    // One block of 16 channels from c0: plain loads and stores for the whole blocks, and
    // for the last `c % 16` channels the same steps under a lane mask (the lanes past C
    // read nothing and store nothing).
    macro_rules! block_3x3 {
        ($load:expr, $store:expr) => {{
            let w: [__m512; 9] = std::array::from_fn(|t| $load(wp.add(t * c + c0)));
            let b = $load(bp.add(c0));
            let mut ox = 0;
            while ox < g.ow {
                if full_rows && ox >= lo && ox + 4 <= hi {
                    // Four interior pixels: four independent chains of nine FMAs, over the
                    // COLS input columns of each window row (pixel j's tap kx at column j·S + kx).
                    let p = xp.add(((oy * g.sh - g.pt) * g.w + ox * S - g.pl) * c + c0);
                    let mut a = [b; 4];
                    for ky in 0..3 {
                        let r = p.add(ky * row_c);
                        let xs: [__m512; COLS] = std::array::from_fn(|i| $load(r.add(i * c)));
                        for kx in 0..3 {
                            for (j, aj) in a.iter_mut().enumerate() {
                                *aj = _mm512_fmadd_ps(xs[j * S + kx], w[ky * 3 + kx], *aj);
                            }
                        }
                    }
                    for (j, &aj) in a.iter().enumerate() {
                        let o = (ox + j) * c + c0;
                        let v = match rp {
                            Some(r) => _mm512_add_ps(aj, $load(r.add(o))),
                            None => aj,
                        };
                        $store(op.add(o), act.apply_all(v));
                    }
                    ox += 4;
                    continue;
                }
                let o = ox * c + c0;
                let mut a = b;
                if full_rows && ox >= lo && ox < hi {
                    let p = xp.add(((oy * g.sh - g.pt) * g.w + ox * g.sw - g.pl) * c + c0);
                    for ky in 0..3 {
                        let r = p.add(ky * row_c);
                        a = _mm512_fmadd_ps($load(r), w[ky * 3], a);
                        a = _mm512_fmadd_ps($load(r.add(c)), w[ky * 3 + 1], a);
                        a = _mm512_fmadd_ps($load(r.add(2 * c)), w[ky * 3 + 2], a);
                    }
                } else {
                    let (kx0, kx1) = valid_taps(ox * g.sw, 1, g.pl, g.w, 3);
                    for ky in ky0..ky1 {
                        for kx in kx0..kx1 {
                            let iy = oy * g.sh + ky - g.pt;
                            let ix = ox * g.sw + kx - g.pl;
                            let x = $load(xp.add((iy * g.w + ix) * c + c0));
                            a = _mm512_fmadd_ps(x, w[ky * 3 + kx], a);
                        }
                    }
                }
                if let Some(r) = rp {
                    a = _mm512_add_ps(a, $load(r.add(o)));
                }
                $store(op.add(o), act.apply_all(a));
                ox += 1;
            }
        }};
    }
    while c0 + 16 <= c {
        block_3x3!(|p: *const f32| _mm512_loadu_ps(p), |p: *mut f32, v| {
            _mm512_storeu_ps(p, v)
        });
        c0 += 16;
    }
    if c0 < c {
        let m = lanes(c - c0);
        block_3x3!(
            |p: *const f32| _mm512_maskz_loadu_ps(m, p),
            |p: *mut f32, v| _mm512_mask_storeu_ps(p, m, v)
        );
    }
}

/// [`row_any`] with the loops the other way round: each block of 64 channels along the
/// whole row before the next block, so the rows under the window stay in L1 (see the AVX2
/// kernel's notes). Safety: as [`row`].
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_blocks(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) {
    let g = job.geo;
    let c = job.c;
    let act = Act512::new(job.act);
    let (ky0, ky1) = valid_taps(oy * g.sh, g.dh, g.pt, g.h, g.kh);
    let op = out.as_mut_ptr();
    let rp = res.map(<[f32]>::as_ptr);
    let mut c0 = 0;
    while c0 + 64 <= c {
        for ox in 0..g.ow {
            let (kx0, kx1) = valid_taps(ox * g.sw, g.dw, g.pl, g.w, g.kw);
            pixel::<4>(
                job,
                (oy, ox),
                (ky0, ky1, kx0, kx1),
                c0,
                0xffff,
                rp,
                op,
                &act,
            );
        }
        c0 += 64;
    }
    if c0 < c {
        row_any(job, oy, res, out, c0);
    }
}

/// [`row`] for any window, channels from `first` on: per output pixel, 64 channels (four
/// independent FMA chains) at a time, then the rest as up to four chains, the last vector
/// under a lane mask. Safety: as [`row`].
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_any(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32], first: usize) {
    let act = Act512::new(job.act);
    let (ky0, ky1) = valid_taps(
        oy * job.geo.sh,
        job.geo.dh,
        job.geo.pt,
        job.geo.h,
        job.geo.kh,
    );
    let op = out.as_mut_ptr();
    let rp = res.map(<[f32]>::as_ptr);
    for ox in 0..job.geo.ow {
        pixel_from(job, (oy, ox), (ky0, ky1), first, rp, op, &act);
    }
}

/// Channels `first..` of output pixel `ox` of row `oy` (the valid rows of its window
/// `ky0..ky1`): 64 channels (four independent FMA chains) at a time, then the last 1 to 63
/// as one to four chains (one vector's chain alone would wait on the FMA latency at every
/// tap), the last under a lane mask. Safety: as [`row`].
#[inline(always)]
unsafe fn pixel_from(
    job: &DwRow<'_>,
    (oy, ox): (usize, usize),
    (ky0, ky1): (usize, usize),
    first: usize,
    rp: Option<*const f32>,
    op: *mut f32,
    act: &Act512,
) {
    let (g, c) = (job.geo, job.c);
    let (kx0, kx1) = valid_taps(ox * g.sw, g.dw, g.pl, g.w, g.kw);
    let taps = (ky0, ky1, kx0, kx1);
    let mut c0 = first;
    while c0 + 64 <= c {
        pixel::<4>(job, (oy, ox), taps, c0, 0xffff, rp, op, act);
        c0 += 64;
    }
    let rest = c - c0;
    let last = lanes(rest - (rest.max(1) - 1) / 16 * 16);
    match rest.div_ceil(16) {
        0 => {}
        1 => pixel::<1>(job, (oy, ox), taps, c0, last, rp, op, act),
        2 => pixel::<2>(job, (oy, ox), taps, c0, last, rp, op, act),
        3 => pixel::<3>(job, (oy, ox), taps, c0, last, rp, op, act),
        _ => pixel::<4>(job, (oy, ox), taps, c0, last, rp, op, act),
    }
}

/// [`row`] for K×K windows of dilation 1 and column stride S (5×5, whose weights do not all
/// fit in registers): sixteen channels at a time, four pixels a step, each input vector under
/// their windows loaded once (the `COLS` = 3·S + K columns they span) and each weight vector
/// once per step, where [`row_any`] loads both per tap and pixel. Columns outside the image
/// are not read, and their taps leave the sums as they are (a masked FMA), so the pixels at
/// the edges, and a last group of fewer than four, run in the same steps, and so do the last
/// `c % 16` channels, under a lane mask. Safety: as [`row`], with a K×K window of dilation 1,
/// column stride S, COLS = 3·S + K.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_window<const K: usize, const S: usize, const COLS: usize>(
    job: &DwRow<'_>,
    oy: usize,
    res: Option<&[f32]>,
    out: &mut [f32],
) {
    let (g, c) = (job.geo, job.c);
    let act = Act512::new(job.act);
    let (ky0, ky1) = valid_taps(oy * g.sh, 1, g.pt, g.h, K);
    let (xp, wp, bp) = (job.x.as_ptr(), job.taps.as_ptr(), job.bias.as_ptr());
    let op = out.as_mut_ptr();
    let rp = res.map(<[f32]>::as_ptr);
    let row_c = g.w * c;
    let z = _mm512_setzero_ps();
    // Channel blocks outermost: a block's weights and the window rows' columns of it stay
    // in L1 along the row.
    let mut c0 = 0;
    // One block of 16 channels from c0: plain loads and stores for the whole blocks, and
    // for the last `c % 16` channels the same steps under a lane mask (the lanes past C
    // read nothing and store nothing).
    macro_rules! block_window {
        ($load:expr, $store:expr) => {{
            let b = $load(bp.add(c0));
            for ox in (0..g.ow).step_by(4) {
                let n = (g.ow - ox).min(4);
                // Which of the group's columns lie in the image: the first at ox·S - pl.
                let inside: [bool; COLS] = std::array::from_fn(|i| {
                    let padded = ox * S + i;
                    padded >= g.pl && padded - g.pl < g.w
                });
                let mut a = [b; 4];
                if inside.iter().all(|&v| v) {
                    let p = xp.add((ox * S - g.pl) * c + c0);
                    for ky in ky0..ky1 {
                        let r = p.add((oy * g.sh + ky - g.pt) * row_c);
                        let xs: [__m512; COLS] = std::array::from_fn(|i| $load(r.add(i * c)));
                        for kx in 0..K {
                            let w = $load(wp.add((ky * K + kx) * c + c0));
                            // Pixel j's tap kx reads column j·S + kx of the group.
                            for (j, aj) in a.iter_mut().enumerate() {
                                *aj = _mm512_fmadd_ps(xs[j * S + kx], w, *aj);
                            }
                        }
                    }
                } else {
                    let masks: [__mmask16; COLS] = std::array::from_fn(|i| match inside[i] {
                        true => 0xffff,
                        false => 0,
                    });
                    for ky in ky0..ky1 {
                        let r = xp.add((oy * g.sh + ky - g.pt) * row_c + c0);
                        let xs: [__m512; COLS] = std::array::from_fn(|i| match inside[i] {
                            true => $load(r.add((ox * S + i - g.pl) * c)),
                            false => z,
                        });
                        for kx in 0..K {
                            let w = $load(wp.add((ky * K + kx) * c + c0));
                            for (j, aj) in a.iter_mut().enumerate() {
                                let i = j * S + kx;
                                *aj = _mm512_mask3_fmadd_ps(xs[i], w, *aj, masks[i]);
                            }
                        }
                    }
                }
                for (j, &aj) in a.iter().enumerate().take(n) {
                    let o = (ox + j) * c + c0;
                    let v = match rp {
                        Some(r) => _mm512_add_ps(aj, $load(r.add(o))),
                        None => aj,
                    };
                    $store(op.add(o), act.apply_all(v));
                }
            }
        }};
    }
    while c0 + 16 <= c {
        block_window!(|p: *const f32| _mm512_loadu_ps(p), |p: *mut f32, v| {
            _mm512_storeu_ps(p, v)
        });
        c0 += 16;
    }
    if c0 < c {
        let m = lanes(c - c0);
        block_window!(
            |p: *const f32| _mm512_maskz_loadu_ps(m, p),
            |p: *mut f32, v| _mm512_mask_storeu_ps(p, m, v)
        );
    }
}

/// Channels `c0 .. c0 + 16·V` of output pixel `ox` of row `oy` (V independent FMA chains,
/// the last vector's lanes under `last`, the others whole), over the valid taps `ky0..ky1` ×
/// `kx0..kx1`: plus the residual `rp` (when given) and the activation, stored at `op`.
/// Masked lanes are neither read nor written. Safety: as [`row`], the channels the lanes
/// cover within C, the taps valid for the pixel.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pixel<const V: usize>(
    job: &DwRow<'_>,
    (oy, ox): (usize, usize),
    (ky0, ky1, kx0, kx1): (usize, usize, usize, usize),
    c0: usize,
    last: __mmask16,
    rp: Option<*const f32>,
    op: *mut f32,
    act: &Act512,
) {
    let (g, c) = (job.geo, job.c);
    let (xp, wp, bp) = (job.x.as_ptr(), job.taps.as_ptr(), job.bias.as_ptr());
    let mask = |j: usize| if j + 1 == V { last } else { 0xffff };
    let mut a: [__m512; V] =
        std::array::from_fn(|j| _mm512_maskz_loadu_ps(mask(j), bp.add(c0 + 16 * j)));
    for ky in ky0..ky1 {
        for kx in kx0..kx1 {
            let iy = oy * g.sh + ky * g.dh - g.pt;
            let ix = ox * g.sw + kx * g.dw - g.pl;
            let xs = xp.add((iy * g.w + ix) * c + c0);
            let ws = wp.add((ky * g.kw + kx) * c + c0);
            for (j, aj) in a.iter_mut().enumerate() {
                let x = _mm512_maskz_loadu_ps(mask(j), xs.add(16 * j));
                let w = _mm512_maskz_loadu_ps(mask(j), ws.add(16 * j));
                *aj = _mm512_fmadd_ps(x, w, *aj);
            }
        }
    }
    for (j, &aj) in a.iter().enumerate() {
        let o = ox * c + c0 + 16 * j;
        let v = match rp {
            Some(r) => _mm512_add_ps(aj, _mm512_maskz_loadu_ps(mask(j), r.add(o))),
            None => aj,
        };
        _mm512_mask_storeu_ps(op.add(o), mask(j), act.apply_all(v));
    }
}

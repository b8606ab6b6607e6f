//! The AVX2 row kernel of the channels-last depthwise convolution (`crate::nhwc`): per
//! output pixel, 32 channels (four vectors, four independent FMA chains) at a time, then 8,
//! then one by one; each valid tap is one load of input and one of weights per vector.

use super::avx2::Act256;
use crate::nhwc::{valid_taps, DwRow};
use std::arch::x86_64::*;

/// Output row `oy` of a channels-last depthwise convolution (see `crate::nhwc::dw_row_body`).
///
/// Safety: AVX2 and FMA present; `job.x` holds `h·w·c` floats, `job.taps` `kh·kw·c`,
/// `job.bias` `c`, `out` and `res` (when given) `ow·c`; `oy < oh`, and the geometry is the
/// one the output was computed for (so every valid tap lies inside the image).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn row(job: &DwRow<'_>, oy: usize, res: Option<&[f32]>, out: &mut [f32]) {
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
        let mut c0 = 0;
        while c0 + 32 <= c {
            let mut a0 = _mm256_loadu_ps(bp.add(c0));
            let mut a1 = _mm256_loadu_ps(bp.add(c0 + 8));
            let mut a2 = _mm256_loadu_ps(bp.add(c0 + 16));
            let mut a3 = _mm256_loadu_ps(bp.add(c0 + 24));
            for ky in ky0..ky1 {
                for kx in kx0..kx1 {
                    let xs = xp.add(at(ky, kx) + c0);
                    let ws = wp.add((ky * g.kw + kx) * c + c0);
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xs), _mm256_loadu_ps(ws), a0);
                    a1 =
                        _mm256_fmadd_ps(_mm256_loadu_ps(xs.add(8)), _mm256_loadu_ps(ws.add(8)), a1);
                    a2 = _mm256_fmadd_ps(
                        _mm256_loadu_ps(xs.add(16)),
                        _mm256_loadu_ps(ws.add(16)),
                        a2,
                    );
                    a3 = _mm256_fmadd_ps(
                        _mm256_loadu_ps(xs.add(24)),
                        _mm256_loadu_ps(ws.add(24)),
                        a3,
                    );
                }
            }
            for (j, a) in [a0, a1, a2, a3].into_iter().enumerate() {
                let at = o + c0 + 8 * j;
                let v = match rp {
                    Some(r) => _mm256_add_ps(a, _mm256_loadu_ps(r.add(at))),
                    None => a,
                };
                _mm256_storeu_ps(op.add(at), act.apply(v));
            }
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
            _mm256_storeu_ps(op.add(o + c0), act.apply(a));
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
            *op.add(o + ch) = job.act.apply_simple(a);
        }
    }
}

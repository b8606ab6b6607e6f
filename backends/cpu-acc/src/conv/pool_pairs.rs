//! 2×2 stride-2 average pooling of NCHW planes with even sides and no padding (DenseNet's
//! transition pools): each plane's column pairs summed first, in one pass over the whole
//! plane (a pair never straddles two rows when the width is even), then each output row is
//! the sum of two such rows. Both are plain loops the compiler vectorizes; the depthwise
//! paths otherwise taking these pools move every plane into and out of a channels-last
//! buffer first.

use crate::conv::window::Geo2;
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};

/// Below this many outputs in all, handing planes to threads costs more than it saves.
const SMALL: usize = 16 * 1024;

/// Whether the pool of geometry `g` is one this module runs: a 2×2 window at stride 2, no
/// dilation, no padding before the plane, even sides, and every input inside a window.
pub fn applies(g: &Geo2) -> bool {
    (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl) == (2, 2, 2, 2, 1, 1, 0, 0)
        && g.h.is_multiple_of(2)
        && g.w.is_multiple_of(2)
        && g.oh == g.h / 2
        && g.ow == g.w / 2
        && g.oh > 0
        && g.ow > 0
}

/// The 2×2 average of every plane of `x` into `y` (geometry `g`, which [`applies`]).
pub fn run_average(th: &Threads, g: &Geo2, x: &[f32], y: &mut [f32]) -> Result<()> {
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    if !applies(g) {
        return Err(BackendError::Execution(
            "2×2 pooling: the geometry is not one this path runs".into(),
        ));
    }
    let planes = y.len() / out_plane;
    if x.len() < planes * in_plane {
        return Err(BackendError::Execution(
            "2×2 pooling: the input is smaller than the output's planes".into(),
        ));
    }
    let per = if planes * out_plane < SMALL {
        planes.max(1)
    } else {
        th.chunk_size(planes, 1, 1)
    };
    th.chunks(&mut y[..planes * out_plane], per * out_plane, |ci, yc| {
        let mut pairs = Vec::new();
        pairs
            .try_reserve_exact(in_plane / 2)
            .map_err(|_| BackendError::Execution("2×2 pooling: no memory for a row".into()))?;
        pairs.resize(in_plane / 2, 0.0);
        let first = ci * per * in_plane;
        let xs = &x[first..first + yc.len() / out_plane * in_plane];
        for (xp, yp) in xs
            .chunks_exact(in_plane)
            .zip(yc.chunks_exact_mut(out_plane))
        {
            simd::pair_average_plane(xp, g.ow, yp, &mut pairs);
        }
        Ok(())
    })
}

/// One plane: `x` holds `2·oh` rows of `2·ow` floats, `y` receives `oh` rows of `ow`;
/// `pairs` is scratch of at least half of `x`. The window sum is `(x00 + x01) + (x10 + x11)`.
#[inline(always)]
pub fn pair_average_plane_body(x: &[f32], ow: usize, y: &mut [f32], pairs: &mut [f32]) {
    let half = x.len() / 2;
    let Some(pairs) = pairs.get_mut(..half) else {
        return;
    };
    for (s, p) in pairs.iter_mut().zip(x.chunks_exact(2)) {
        *s = p[0] + p[1];
    }
    if ow == 0 {
        return;
    }
    for (yr, two) in y.chunks_exact_mut(ow).zip(pairs.chunks_exact(2 * ow)) {
        let (top, bottom) = two.split_at(ow);
        for ((o, &a), &b) in yr.iter_mut().zip(top).zip(bottom) {
            *o = (a + b) * 0.25;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::depthwise::tests::geo;

    /// The 2×2 average of one plane, plainly, in f64.
    fn plain(g: &Geo2, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; g.oh * g.ow];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let at = |dy: usize, dx: usize| f64::from(x[(2 * oy + dy) * g.w + 2 * ox + dx]);
                y[oy * g.ow + ox] = ((at(0, 0) + at(0, 1) + at(1, 0) + at(1, 1)) / 4.0) as f32;
            }
        }
        y
    }

    /// Planes of the networks' sizes and odd counts, NaN and infinities included, on 1, 2
    /// and 3 threads, against the plain loop.
    #[test]
    fn pair_average_matches_a_plain_loop() {
        let mut cases = 0;
        for &(h, w) in &[
            (2, 2),
            (2, 34),
            (14, 14),
            (56, 56),
            (112, 112),
            (28, 6),
            (4, 130),
        ] {
            let g = geo(h, w, 2, 2, 1, [0, 0, 0, 0]);
            assert!(applies(&g), "{h}x{w}");
            for planes in [1, 3, 17, 64] {
                let mut x: Vec<f32> = (0..planes * h * w)
                    .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 37.0)
                    .collect();
                if planes == 3 {
                    x[h * w + 1] = f32::NAN;
                    x[2 * h * w] = f32::INFINITY;
                }
                let want: Vec<f32> = x.chunks(h * w).flat_map(|p| plain(&g, p)).collect();
                for threads in [1, 2, 3] {
                    let th = Threads::new(threads).unwrap();
                    let mut y = vec![0f32; planes * g.oh * g.ow];
                    run_average(&th, &g, &x, &mut y).unwrap();
                    for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                        let close = (a - b).abs() <= 1e-5 * b.abs().max(1.0)
                            || (a.is_nan() && b.is_nan())
                            || a == b;
                        assert!(close, "{h}x{w} p{planes} t{threads} [{i}] {a} vs {b}");
                    }
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 7 * 4 * 3);
    }

    /// Odd sides, padding, other windows and strides are not taken.
    #[test]
    fn pair_average_refuses_other_geometries() {
        assert!(!applies(&geo(7, 8, 2, 2, 1, [0, 0, 0, 0])));
        assert!(!applies(&geo(8, 7, 2, 2, 1, [0, 0, 0, 0])));
        assert!(!applies(&geo(8, 8, 2, 2, 1, [1, 1, 1, 1])));
        assert!(!applies(&geo(8, 8, 3, 2, 1, [0, 0, 0, 0])));
        assert!(!applies(&geo(8, 8, 2, 1, 1, [0, 0, 0, 0])));
    }
}

//! Dilated 3×3 stride-1 convolutions on the Winograd F(4×4, 3×3) path, by space-to-batch.
//!
//! With stride 1 and dilation `(dh, dw)`, output pixel `(y, x)` reads the zero-padded input
//! at `(y + dh·ky, x + dw·kx)` only, so every pixel it reads lies in the same phase
//! `(y mod dh, x mod dw)`. The convolution is therefore `dh · dw` independent undilated 3×3
//! convolutions, one per phase sub-grid of the padded input. The phases are gathered
//! straight into the Winograd path's zero-padded planes as the images of a batch (image
//! `b · dh · dw + phase`), every phase with the largest phase's size (`⌈oh / dh⌉ ×
//! ⌈ow / dw⌉` outputs: the extra outputs of smaller phases read zeros and are dropped), run
//! through the same blocks of tiles, and each phase's output plane is scattered back at
//! stride `(dh, dw)`. Any padding, even asymmetric, is covered: the gather reads zeros
//! wherever a phase pixel falls outside the input.

use super::{Plan, Tiles, X_BUF};
use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::gemm;
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

thread_local! {
    /// The phases' output planes before the scatter.
    static PHASE_OUT: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// The undilated geometry every phase of a dilated `geo` runs with: the largest phase's
/// output (`⌈oh / dh⌉ × ⌈ow / dw⌉`) over an unpadded input two pixels larger each way (the
/// padding is already in the gathered phase planes).
pub(super) fn phase_geo(geo: &Geo2) -> Geo2 {
    let oh = geo.oh.div_ceil(geo.dh.max(1));
    let ow = geo.ow.div_ceil(geo.dw.max(1));
    Geo2 {
        h: oh + 2,
        w: ow + 2,
        kh: 3,
        kw: 3,
        sh: 1,
        sw: 1,
        dh: 1,
        dw: 1,
        pt: 0,
        pl: 0,
        oh,
        ow,
    }
}

/// Copy the phases of the input planes `x` (NCHW, `n` images of `geo`) into the padded
/// planes `xp` of the phase batch (`tiles` of `pg`, plane `(b · phases + p) · c + ci`):
/// phase `p = py · dw + px`, row `r`, column `s` holds the input at
/// `(py + dh · r − pt, px + dw · s − pl)`, zero outside the input and past the phase.
fn gather(
    th: &Threads,
    geo: &Geo2,
    pg: &Geo2,
    tiles: &Tiles,
    c: usize,
    x: &[f32],
    xp: &mut [f32],
) -> Result<()> {
    let (dh, dw) = (geo.dh.max(1), geo.dw.max(1));
    let phases = dh * dw;
    let plane = geo.h * geo.w;
    // Columns `s` of phase column `px` that lie inside the input: `px + dw·s − pl` in
    // `0..w`, and inside the phase (`s < pg.w`).
    let inside = |px: usize| {
        let lo = geo.pl.saturating_sub(px).div_ceil(dw);
        let hi = (geo.w + geo.pl)
            .checked_sub(px + 1)
            .map_or(0, |last| last / dw + 1)
            .min(pg.w);
        lo.min(hi)..hi
    };
    th.chunks(xp, tiles.padded_plane(), |pi, dst| {
        let (img, ci) = (pi / c, pi % c);
        let (b, p) = (img / phases, img % phases);
        let (py, px) = (p / dw, p % dw);
        let cols = inside(px);
        let src_at = (b * c + ci) * plane;
        let src = x
            .get(src_at..src_at + plane)
            .ok_or_else(|| BackendError::Execution("winograd: input too short".into()))?;
        for (r, row) in dst.chunks_exact_mut(tiles.pitch).enumerate() {
            let iy = (py + dh * r)
                .checked_sub(geo.pt)
                .filter(|&iy| r < pg.h && iy < geo.h);
            let Some(iy) = iy else {
                row.fill(0.0);
                continue;
            };
            let line = &src[iy * geo.w..(iy + 1) * geo.w];
            let (head, rest) = row.split_at_mut(cols.start.min(row.len()));
            let (mid, tail) = rest.split_at_mut(cols.len().min(rest.len()));
            head.fill(0.0);
            tail.fill(0.0);
            // The first column read: `px + dw·cols.start − pl` (inside by `inside`); the
            // columns in `cols` are all inside the row.
            let first = (px + dw * cols.start).saturating_sub(geo.pl);
            let src = line.get(first..).unwrap_or(&[]);
            let n = mid.len().min(src.len().div_ceil(dw));
            let (mid, past) = mid.split_at_mut(n);
            past.fill(0.0);
            for (v, run) in mid.iter_mut().zip(src.chunks(dw)) {
                *v = run[0];
            }
        }
        Ok(())
    })
}

/// Scatter the phases' outputs `yp` (`n · phases` images of `m` planes of `pg`'s output)
/// into `y` (`n` images of `m` planes of `geo`'s output): phase `(py, px)`'s pixel `(a, b)`
/// to `(py + dh · a, px + dw · b)`; a phase's pixels past the output are dropped.
fn scatter(
    th: &Threads,
    geo: &Geo2,
    pg: &Geo2,
    (n, m): (usize, usize),
    yp: &[f32],
    y: &mut [f32],
) -> Result<()> {
    let (dh, dw) = (geo.dh.max(1), geo.dw.max(1));
    let phases = dh * dw;
    let out_plane = geo.oh * geo.ow;
    let phase_plane = pg.oh * pg.ow;
    let y = y
        .get_mut(..n * m * out_plane)
        .ok_or_else(|| BackendError::Execution("winograd: output too short".into()))?;
    th.chunks(y, out_plane, |pi, plane| {
        let (b, co) = (pi / m, pi % m);
        for (oy, row) in plane.chunks_exact_mut(geo.ow).enumerate() {
            let (py, a) = (oy % dh, oy / dh);
            for px in 0..dw.min(geo.ow) {
                let img = b * phases + py * dw + px;
                let at = (img * m + co) * phase_plane + a * pg.ow;
                let src = yp
                    .get(at..at + pg.ow)
                    .ok_or_else(|| BackendError::Execution("winograd: phase missing".into()))?;
                let dst = row.get_mut(px..).unwrap_or(&mut []);
                for (run, s) in dst.chunks_mut(dw).zip(src) {
                    run[0] = *s;
                }
            }
        }
        Ok(())
    })
}

impl Plan {
    /// [`Plan::run`] for a dilated `geo`: the phases gathered as a batch, run undilated,
    /// scattered back (see the module's documentation).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_dilated(
        &self,
        th: &Threads,
        geo: &Geo2,
        n: usize,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let (c, m) = (self.c, self.m);
        let pg = phase_geo(geo);
        let images = n * geo.dh.max(1) * geo.dw.max(1);
        let tiles = Tiles::new(&pg, images);
        let len = images * c * tiles.padded_plane();
        let out_len = images * m * pg.oh * pg.ow;
        let mut xp = gemm::try_take(&X_BUF, len + simd::WINOGRAD_SLACK)?;
        let mut yp = match gemm::try_take(&PHASE_OUT, out_len) {
            Ok(v) => v,
            Err(e) => {
                gemm::give_back(&X_BUF, xp);
                return Err(e);
            }
        };
        // Zeros after the planes: the vector transform reads a little past the last window.
        xp[len..].fill(0.0);
        let res = gather(th, geo, &pg, &tiles, c, x, &mut xp[..len])
            .and_then(|()| {
                let padded = &xp[..len + simd::WINOGRAD_SLACK];
                let out = &mut yp[..out_len];
                self.run_tiles(th, &pg, images, &tiles, padded, bias, act, out)
            })
            .and_then(|()| scatter(th, geo, &pg, (n, m), &yp[..out_len], y));
        gemm::give_back(&X_BUF, xp);
        gemm::give_back(&PHASE_OUT, yp);
        res
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::direct;
    use super::*;

    /// Values in [-1, 1) from a small deterministic generator.
    fn values(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// A dilated 3×3 stride-1 geometry with pads `[top, left, bottom, right]`.
    fn geo(h: usize, w: usize, (dh, dw): (usize, usize), pads: [usize; 4]) -> Option<Geo2> {
        let [pt, pl, pb, pr] = pads;
        Some(Geo2 {
            h,
            w,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            dh,
            dw,
            pt,
            pl,
            oh: (h + pt + pb).checked_sub(2 * dh)?,
            ow: (w + pl + pr).checked_sub(2 * dw)?,
        })
        .filter(|g| g.oh > 0 && g.ow > 0)
    }

    /// Largest `|got − want| / (1 + max |raw|)` of one case, `raw` the output before the
    /// activation (as the undilated tests: a clipped output hides its magnitude).
    fn worst(got: &[f32], want: &[f32], raw: &[f32]) -> f32 {
        let scale = 1.0 + raw.iter().fold(0f32, |a, v| a.max(v.abs()));
        got.iter().zip(want).fold(0f32, |a, (p, q)| {
            assert!(!p.is_nan(), "NaN: a pixel was not written");
            a.max((p - q).abs() / scale)
        })
    }

    /// The dilated path (`Plan::run` with a dilated geometry) against the direct dilated
    /// convolution: dilations 1 to 4 (and unequal ones), planes that are no multiple of the
    /// dilation, smaller than it, or 1×1, pads 0, the dilation and asymmetric, channels 1, 3,
    /// 17 and 64, batches of 2, bias with Relu and Clip, one and two threads.
    #[test]
    fn dilated_matches_direct_convolution() {
        let mut seed = 3u64;
        let two = Threads::new(2).unwrap();
        let mut k = 0usize;
        let mut worst_seen = 0f32;
        let planes = [(13, 11), (9, 9), (1, 1), (2, 3), (28, 28), (17, 6)];
        for &(h, w) in &planes {
            for d in [(1, 1), (2, 2), (3, 3), (4, 4), (2, 3)] {
                let pads = [
                    [0, 0, 0, 0],
                    [d.0, d.1, d.0, d.1],
                    [d.0, 0, 2 * d.0, d.1 + 1],
                    [1, 2, 0, 3],
                ];
                for pads in pads {
                    let Some(g) = geo(h, w, d, pads) else {
                        continue;
                    };
                    for (c, m) in [(1, 3), (3, 17), (17, 1), (64, 64)] {
                        if c * m > 64 && g.oh * g.ow > 200 && !k.is_multiple_of(3) {
                            continue;
                        }
                        k += 1;
                        let n = 1 + k % 2;
                        let act = match k % 3 {
                            0 => Activation::None,
                            1 => Activation::Relu,
                            _ => Activation::Clip {
                                min: -0.5,
                                max: 0.75,
                            },
                        };
                        let th = if k.is_multiple_of(2) {
                            &two
                        } else {
                            &Threads::single()
                        };
                        let x = values(&mut seed, n * c * h * w);
                        let wt = values(&mut seed, m * c * 9);
                        let bias = values(&mut seed, m);
                        let plan = Plan::new(&wt, m, c).unwrap();
                        let mut got = vec![f32::NAN; n * m * g.oh * g.ow];
                        plan.run(th, &g, n, &x, Some(&bias), act, &mut got).unwrap();
                        let want = direct(&g, n, c, m, &x, &wt, &bias, act);
                        let raw = direct(&g, n, c, m, &x, &wt, &bias, Activation::None);
                        let e = worst(&got, &want, &raw);
                        let what = format!("{h}x{w} d{d:?} pads {pads:?} c{c} m{m} n{n} {act:?}");
                        assert!(e <= 5e-5, "{what}: {e}");
                        worst_seen = worst_seen.max(e);
                    }
                }
            }
        }
        assert!(k > 150, "only {k} cases ran");
        eprintln!("dilated winograd: worst relative error {worst_seen:e} over {k} cases");
    }

    /// The phase geometry: the largest phase's output, and [`super::super::worth`] takes
    /// DeepLabV3's dilation-2 and -4 layers on 28×28 (and the others whose phases fill
    /// their tiles well) but leaves the ASPP's wide dilations, phases that fill their tiles
    /// poorly (dilation 6 on 28×28: 5×5 phases) and narrow layers alone.
    #[test]
    fn phase_geometry_and_worth() {
        let g = geo(13, 11, (2, 2), [2, 2, 2, 2]).unwrap();
        let pg = phase_geo(&g);
        assert_eq!((g.oh, g.ow, pg.oh, pg.ow, pg.h, pg.w), (13, 11, 7, 6, 9, 8));
        let worth = super::super::worth;
        for (d, c, m, yes) in [
            (2, 256, 256, true),
            (3, 256, 256, true),
            (4, 512, 512, true),
            (5, 256, 256, true),
            (6, 256, 256, false),
            (8, 256, 256, true),
            (12, 2048, 256, false),
            (24, 2048, 256, false),
            (36, 2048, 256, false),
            (2, 32, 256, false),
        ] {
            let g = geo(28, 28, (d, d), [d; 4]).unwrap();
            assert_eq!(worth(&g, c, m), yes, "d{d} {c}→{m}");
        }
    }
}

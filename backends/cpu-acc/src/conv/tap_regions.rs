//! Dilated convolutions whose taps mostly read padding (atrous convolutions, as DeepLabV3's
//! ASPP: a 3×3 window at dilation 12 to 36 on a 28×28 plane), one GEMM per tap over only
//! the output pixels where that tap reads the input.
//!
//! With the dilation as large as the padding, an off-centre tap reads the input for a band
//! of the output only (dilation 24 on 28×28: 4 of 28 columns); the GEMM over all taps
//! (`crate::conv::nchw`) multiplies the other pixels' zeros all the same. Here the output
//! starts as the bias, and each live tap `t` adds `W_t · X_t`, where `W_t` is the `[m, c]`
//! slice of the weights at that tap (packed once) and `X_t` the input under the tap for the
//! rectangle of output pixels whose window position there is inside the input (gathered,
//! `[c, pixels]`; every read is inside, so nothing is padded). A rectangle as wide as the
//! output accumulates into the output planes in place; a narrower one goes through a
//! scratch product added into it. The activation is applied once at the end.
//!
//! The packed per-tap weights ([`TapWeights`]) depend on the live taps only, not on where
//! their rectangles lie, so plans at other planes with the same live taps share them
//! (`crate::weights`); each [`Plan`] places the rectangles on its own plane.

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

/// Largest share of the dense GEMM's multiply-adds the taps' rectangles may keep for this
/// path to be taken: below it the per-tap products save enough to pay for their gathers
/// (DeepLabV3's ASPP on 28×28: dilation 12 keeps 0.51, 24 keeps 0.18; its backbone's
/// dilation-4 3×3 convolutions keep 0.82, and take the Winograd path before this one is
/// considered: `crate::conv::winograd::worth`).
const MAX_KEPT: f64 = 0.75;

/// The output indices `o < out` whose input position `o·s + k·d − pad` lies in `0..size`.
fn valid(k: usize, d: usize, s: usize, pad: usize, out: usize, size: usize) -> Range<usize> {
    let off = (k * d) as isize - pad as isize;
    let s = s.max(1) as isize;
    // First o with o·s + off >= 0, and one past the last with o·s + off < size.
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let hi = if (size as isize) <= off {
        0
    } else {
        (size as isize - 1 - off) / s + 1
    };
    let (lo, hi) = (lo.max(0) as usize, (hi.max(0) as usize).min(out));
    lo.min(hi)..hi
}

/// One tap's rectangle of output pixels; its packed weights are
/// `TapWeights::packed[index]`.
#[derive(Debug, Clone)]
struct Tap {
    ky: usize,
    kx: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    index: usize,
}

/// The rectangles of the live taps of a window (row-major tap order).
fn rectangles(geo: &Geo2) -> Vec<(usize, usize, Range<usize>, Range<usize>)> {
    let mut out = Vec::new();
    for ky in 0..geo.kh {
        let rows = valid(ky, geo.dh, geo.sh, geo.pt, geo.oh, geo.h);
        for kx in 0..geo.kw {
            let cols = valid(kx, geo.dw, geo.sw, geo.pl, geo.ow, geo.w);
            if !rows.is_empty() && !cols.is_empty() {
                out.push((ky, kx, rows.clone(), cols));
            }
        }
    }
    out
}

/// The live taps of `geo`'s window (those whose rectangle of output pixels is not empty),
/// as indices `ky · kw + kx` in row-major order: what [`TapWeights`] are packed for.
pub fn live_taps(geo: &Geo2) -> Vec<usize> {
    rectangles(geo)
        .into_iter()
        .map(|(ky, kx, _, _)| ky * geo.kw + kx)
        .collect()
}

/// Whether a convolution of one group with this window takes [`Plan`]: dilated, and the
/// live taps' rectangles at most [`MAX_KEPT`] of the dense product's pixels. A single live
/// tap (dilation 36 on 28×28 leaves the centre) takes it too: it is one pointwise product
/// on the input, where the dense path would first copy the input into planes padded by the
/// whole dilation.
pub fn applies(geo: &Geo2) -> bool {
    let taps = geo.kh * geo.kw;
    let dense = taps * geo.oh * geo.ow;
    if (geo.dh <= 1 && geo.dw <= 1) || taps <= 1 || dense == 0 {
        return false;
    }
    let rects = rectangles(geo);
    let kept: usize = rects.iter().map(|(_, _, r, c)| r.len() * c.len()).sum();
    !rects.is_empty() && (kept as f64) <= MAX_KEPT * dense as f64
}

thread_local! {
    static GATHER: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static PRODUCT: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// The `[m, c]` weights of each live tap of a convolution, packed: they depend on the
/// channels, the window and which taps are live, not on the plane.
#[derive(Debug)]
pub struct TapWeights {
    m: usize,
    c: usize,
    window: usize,
    /// The live taps' indices (`ky · kw + kx`), ascending.
    live: Vec<usize>,
    packed: Vec<Packed>,
}

impl TapWeights {
    /// Pack the `live` taps (indices below `window`, ascending) of `m` filters of `c`
    /// channels (`w`: `[m, c, window]`).
    pub fn new(w: &[f32], m: usize, c: usize, window: usize, live: &[usize]) -> Result<Self> {
        let ascending = live.windows(2).all(|p| p[0] < p[1]);
        let inside = live.last().is_none_or(|&t| t < window);
        if w.len() < m * c * window || m == 0 || c == 0 || !ascending || !inside {
            return Err(BackendError::Other(
                "dilated convolution: weights do not match".into(),
            ));
        }
        let packed = live
            .iter()
            .map(|&t| {
                let view = MatView {
                    data: &w[t..],
                    rs: c * window,
                    cs: window,
                };
                Packed::pack_a(m, c, view)
            })
            .collect();
        Ok(TapWeights {
            m,
            c,
            window,
            live: live.to_vec(),
            packed,
        })
    }
}

/// The per-tap weights and rectangles of one convolution.
#[derive(Debug, Clone)]
pub struct Plan {
    geo: Geo2,
    c: usize,
    m: usize,
    taps: Vec<Tap>,
    weights: Arc<TapWeights>,
}

impl Plan {
    /// Plan a convolution with `weights` packed for the live taps of `geo`'s window
    /// ([`live_taps`]): the rectangles are this plan's own.
    pub fn with_weights(geo: &Geo2, weights: Arc<TapWeights>) -> Result<Self> {
        let rects = rectangles(geo);
        let same_taps = rects.len() == weights.live.len()
            && rects
                .iter()
                .zip(&weights.live)
                .all(|((ky, kx, _, _), &t)| ky * geo.kw + kx == t);
        if weights.window != geo.kh * geo.kw || !same_taps {
            return Err(BackendError::Other(
                "dilated convolution: the weights were packed for other taps".into(),
            ));
        }
        let taps = rects
            .into_iter()
            .enumerate()
            .map(|(index, (ky, kx, rows, cols))| Tap {
                ky,
                kx,
                rows,
                cols,
                index,
            })
            .collect();
        Ok(Plan {
            geo: *geo,
            c: weights.c,
            m: weights.m,
            taps,
            weights,
        })
    }

    /// `y = act(conv(x) + bias)` for one image: `x` its `c` input planes, `y` its `m`
    /// output planes.
    pub fn run(
        &self,
        th: &Threads,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let g = &self.geo;
        let (c, m) = (self.c, self.m);
        let (plane, out_plane) = (g.h * g.w, g.oh * g.ow);
        if x.len() < c * plane || y.len() < m * out_plane || bias.is_some_and(|b| b.len() < m) {
            return Err(BackendError::Execution(
                "dilated convolution: input, output or bias shorter than the plan".into(),
            ));
        }
        let y = &mut y[..m * out_plane];
        if let [tap] = self.taps.as_slice() {
            if tap.rows.len() == g.oh && tap.cols.len() == g.ow {
                // One tap reading the input for every output: a single product, with the
                // bias and activation in its epilogue.
                let ep = Epilogue {
                    row_bias: bias,
                    act,
                    ..Epilogue::default()
                };
                return self.tap_product(th, tap, x, y, &ep);
            }
        }
        // The bias (or zeros) first: every tap adds to it.
        let per = th.chunk_size(m, (16 * 1024usize).div_ceil(out_plane.max(1)), 1);
        th.chunks(y, per * out_plane.max(1), |i, ys| {
            for (j, yp) in ys.chunks_mut(out_plane.max(1)).enumerate() {
                yp.fill(bias.map_or(0.0, |b| b[i * per + j]));
            }
            Ok(())
        })?;
        for tap in &self.taps {
            self.add_tap(th, tap, x, y)?;
        }
        if act != Activation::None {
            let per = th.chunk_size(y.len(), 16 * 1024, 16);
            th.chunks(y, per, |_, yc| {
                simd::unary_in_place(act, yc);
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Where tap `tap` reads the input for its rectangle, when that is one contiguous run of
    /// each input plane (stride 1, rectangle rows as wide as the input): its start in the
    /// plane, so the product reads the input in place.
    fn in_place(&self, tap: &Tap) -> Option<usize> {
        let g = &self.geo;
        let contiguous = g.sh == 1 && g.sw == 1 && tap.cols.len() == g.w;
        let iy0 = (tap.rows.start + tap.ky * g.dh).checked_sub(g.pt)?;
        contiguous.then_some(iy0 * g.w)
    }

    /// Gather `X_t` (`[c, rectangle pixels]`) of one tap into `b`.
    fn gather(&self, th: &Threads, tap: &Tap, x: &[f32], b: &mut [f32]) -> Result<()> {
        let g = &self.geo;
        let plane = g.h * g.w;
        let rw = tap.cols.len();
        let n = tap.rows.len() * rw;
        // Input row and column of output (oy, ox) at this tap; inside by construction.
        let iy0 = tap.rows.start * g.sh + tap.ky * g.dh - g.pt;
        let ix0 = tap.cols.start * g.sw + tap.kx * g.dw - g.pl;
        let per = th.chunk_size(self.c, (16 * 1024usize).div_ceil(n.max(1)), 1);
        th.chunks(&mut b[..self.c * n], per * n, |i, bs| {
            for (j, bc) in bs.chunks_exact_mut(n).enumerate() {
                let xc = &x[(i * per + j) * plane..][..plane];
                for (r, row) in bc.chunks_exact_mut(rw).enumerate() {
                    let start = (iy0 + r * g.sh) * g.w + ix0;
                    if g.sw == 1 {
                        row.copy_from_slice(&xc[start..start + rw]);
                    } else {
                        for (v, &s) in row.iter_mut().zip(xc[start..].iter().step_by(g.sw)) {
                            *v = s;
                        }
                    }
                }
            }
            Ok(())
        })
    }

    /// Tap `tap`'s packed weights.
    fn tap_weights(&self, tap: &Tap) -> Result<&Packed> {
        self.weights.packed.get(tap.index).ok_or_else(|| {
            BackendError::Execution("dilated convolution: a tap has no weights".into())
        })
    }

    /// `f` on the tap's input rectangle gathered into a pooled buffer (`c` rows of `n`),
    /// the buffer given back after.
    fn with_gathered(
        &self,
        th: &Threads,
        tap: &Tap,
        x: &[f32],
        n: usize,
        f: impl FnOnce(&BSrc<'_>) -> Result<()>,
    ) -> Result<()> {
        let c = self.c;
        let mut b = gemm::try_take(&GATHER, c * n)?;
        let res = self.gather(th, tap, x, &mut b).and_then(|()| {
            f(&BSrc::View(MatView {
                data: &b[..c * n],
                rs: n,
                cs: 1,
            }))
        });
        gemm::give_back(&GATHER, b);
        res
    }

    /// `y[:, rect rows] = ep(W_t · X_t)` for one tap whose rectangle holds whole output rows
    /// (written where they lie in the planes; with `ep.accumulate`, added to them).
    fn tap_product(
        &self,
        th: &Threads,
        tap: &Tap,
        x: &[f32],
        y: &mut [f32],
        ep: &Epilogue<'_>,
    ) -> Result<()> {
        let g = &self.geo;
        let (c, m) = (self.c, self.m);
        let n = tap.rows.len() * tap.cols.len();
        let a = ASrc::Packed(self.tap_weights(tap)?);
        let yr = &mut y[tap.rows.start * g.ow..];
        let out_plane = g.oh * g.ow;
        if let Some(at) = self.in_place(tap) {
            let src = BSrc::View(MatView {
                data: &x[at..],
                rs: g.h * g.w,
                cs: 1,
            });
            return gemm::sgemm(th, m, n, c, &a, &src, yr, out_plane, ep);
        }
        self.with_gathered(th, tap, x, n, |src| {
            gemm::sgemm(th, m, n, c, &a, src, yr, out_plane, ep)
        })
    }

    /// `y[:, rect] += W_t · X_t` for one tap.
    fn add_tap(&self, th: &Threads, tap: &Tap, x: &[f32], y: &mut [f32]) -> Result<()> {
        let g = &self.geo;
        let (c, m) = (self.c, self.m);
        let out_plane = g.oh * g.ow;
        let (rh, rw) = (tap.rows.len(), tap.cols.len());
        let n = rh * rw;
        if rw == g.ow {
            // Whole output rows: accumulate into the planes where they lie.
            let ep = Epilogue {
                accumulate: true,
                ..Epilogue::default()
            };
            return self.tap_product(th, tap, x, y, &ep);
        }
        let packed = self.tap_weights(tap)?;
        self.with_gathered(th, tap, x, n, |src| {
            let mut p = gemm::try_take(&PRODUCT, m * n)?;
            let res = gemm::sgemm(
                th,
                m,
                n,
                c,
                &ASrc::Packed(packed),
                src,
                &mut p[..m * n],
                n,
                &Epilogue::default(),
            )
            .and_then(|()| {
                let p = &p;
                let per = th.chunk_size(m, (16 * 1024usize).div_ceil(n.max(1)), 1);
                th.chunks(y, per * out_plane, |i, ys| {
                    for (j, yp) in ys.chunks_exact_mut(out_plane).enumerate() {
                        let pm = &p[(i * per + j) * n..][..n];
                        for (r, pr) in pm.chunks_exact(rw).enumerate() {
                            let at = (tap.rows.start + r) * g.ow + tap.cols.start;
                            for (v, &s) in yp[at..at + rw].iter_mut().zip(pr) {
                                *v += s;
                            }
                        }
                    }
                    Ok(())
                })
            });
            gemm::give_back(&PRODUCT, p);
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ranges_are_the_outputs_that_read_the_input() {
        // Dilation 24, pad 24 on 28: tap 0 reads for outputs 24..28, tap 1 all, tap 2 0..4.
        assert_eq!(valid(0, 24, 1, 24, 28, 28), 24..28);
        assert_eq!(valid(1, 24, 1, 24, 28, 28), 0..28);
        assert_eq!(valid(2, 24, 1, 24, 28, 28), 0..4);
        // Dilation 36 on 28: only the centre.
        assert_eq!(valid(0, 36, 1, 36, 28, 28), 28..28);
        // Stride 2, pad 3, dilation 2, input 9, 5 outputs: o·2 + k·2 − 3 in 0..9.
        for k in 0..4 {
            let r = valid(k, 2, 2, 3, 5, 9);
            for o in 0..5 {
                let at = (o * 2 + k * 2) as isize - 3;
                assert_eq!(r.contains(&o), (0..9).contains(&at), "k {k} o {o}");
            }
        }
    }

    /// A 3×3 window at dilation `d` on a `plane`×`plane` input, padded by `d` so the output
    /// keeps the input's size.
    fn same_size(plane: usize, d: usize) -> Geo2 {
        Geo2 {
            h: plane,
            w: plane,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            dh: d,
            dw: d,
            pt: d,
            pl: d,
            oh: plane,
            ow: plane,
        }
    }

    #[test]
    fn large_dilations_take_it_and_small_ones_do_not() {
        let geo = |d: usize| same_size(28, d);
        assert!(applies(&geo(12)));
        assert!(applies(&geo(24)));
        // Only the centre tap reads the input: one pointwise product here.
        assert!(applies(&geo(36)));
        assert!(!applies(&geo(4)));
        assert!(!applies(&geo(1)));
    }

    /// Weights packed for one set of live taps serve a plane with the same live taps, and
    /// are refused (an error, not a panic) where other taps are live.
    #[test]
    fn tap_weights_serve_planes_with_the_same_live_taps() {
        let geo = same_size;
        let (m, c) = (5, 3);
        let w: Vec<f32> = (0..m * c * 9).map(|i| i as f32 * 0.01).collect();
        let live = live_taps(&geo(28, 12));
        assert_eq!(live, (0..9).collect::<Vec<_>>());
        let weights =
            Arc::new(TapWeights::new(&w, m, c, 9, &live).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(live_taps(&geo(20, 12)), live);
        assert!(Plan::with_weights(&geo(20, 12), weights.clone()).is_ok());
        // Dilation 36 on 28: the centre tap alone.
        assert_eq!(live_taps(&geo(28, 36)), [4]);
        assert!(Plan::with_weights(&geo(28, 36), weights).is_err());
        assert!(TapWeights::new(&w, m, c, 9, &[3, 1]).is_err());
        assert!(TapWeights::new(&w, m, c, 9, &[9]).is_err());
        assert!(TapWeights::new(&w[1..], m, c, 9, &live).is_err());
    }
}

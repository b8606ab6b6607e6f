//! Grouped 3×3 convolutions with groups of eight output channels (RegNet's), stride 1 or 2,
//! all groups in one pass: the group's eight outputs in the lanes of one AVX2 vector.
//!
//! The GEMM paths run such a layer one group at a time (each group a tiny product, with its
//! own stride-phase copy of the input and, on two threads, its own fork and join); on 7×7
//! planes that overhead is most of the work. Here, for each output row of a group, the
//! group's input rows under the window are copied zero-padded into a small window buffer
//! (`cg` × 3 rows, in L1), eight output pixels at a time accumulate `input × weights` with
//! each input value broadcast against the eight weights of its tap (packed `[group][c][ky][kx][8]`
//! at load), and the row's `[pixels, 8]` result is transposed into the eight output planes.
//! Stride 2 needs no phase copy: the broadcasts read the window at any stride. The groups
//! are shared out between threads, each group whole.

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};

/// Output channels per group this kernel takes (one AVX2 vector).
pub const LANES: usize = 8;
/// Output pixels per block of accumulators.
const PIXELS: usize = 8;
/// Floats a window row carries past its padded width, so that every block may read a
/// fixed-length segment (`PIXELS` pixels at stride 2 and the taps: 8·2 + 2 < 24).
const SLACK: usize = 24;
/// Most input channels per group (the window buffer, `cg`·3 rows, stays small).
pub const MAX_CG: usize = 64;

/// Whether a grouped convolution takes this kernel: AVX2, constant weights, more than one
/// group of [`LANES`] outputs and at most [`MAX_CG`] inputs each (not depthwise), a 3×3
/// window without dilation, the same stride (1 or 2) both ways, and the `direct` option on.
pub fn applies(geo: &Geo2, c: usize, m: usize, group: usize) -> bool {
    let cg = c / group.max(1);
    simd::avx2_in_use()
        && group > 1
        && m == group * LANES
        && (1..=MAX_CG).contains(&cg)
        && !(cg == 1 && m == c)
        && geo.kh == 3
        && geo.kw == 3
        && geo.dh == 1
        && geo.dw == 1
        && geo.sh == geo.sw
        && (1..=2).contains(&geo.sh)
        && geo.oh > 0
        && geo.ow > 0
        && crate::options::current().direct
}

/// The weights packed `[group][c][ky][kx][8]`, and the geometry.
#[derive(Debug, Clone)]
pub struct Plan {
    w: Vec<f32>,
    group: usize,
    cg: usize,
}

/// What one output row of a group reads besides its window and weights.
struct RowJob {
    /// Floats per window row.
    pitch: usize,
    /// Input channels of the group.
    cg: usize,
    /// Output pixels in the row.
    ow: usize,
    bias: [f32; LANES],
}

impl Plan {
    /// Pack `w` (`[m, cg, 3, 3]`) for `group` groups.
    pub fn new(w: &[f32], group: usize, cg: usize) -> Result<Self> {
        let taps = 9;
        if w.len() < group * LANES * cg * taps {
            return Err(BackendError::Other(
                "grouped convolution weights are shorter than their shape".into(),
            ));
        }
        let mut packed = vec![0f32; group * cg * taps * LANES];
        for g in 0..group {
            for j in 0..LANES {
                let src = &w[(g * LANES + j) * cg * taps..(g * LANES + j + 1) * cg * taps];
                for (ct, v) in src.iter().enumerate() {
                    packed[(g * cg * taps + ct) * LANES + j] = *v;
                }
            }
        }
        Ok(Plan {
            w: packed,
            group,
            cg,
        })
    }

    /// `y = act(conv(x) + bias)` for one image (`x`: its `group·cg` planes, `y`: its
    /// `group·8` output planes).
    pub fn run(
        &self,
        th: &Threads,
        geo: &Geo2,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let (group, cg) = (self.group, self.cg);
        let (in_plane, out_plane) = (geo.h * geo.w, geo.oh * geo.ow);
        let bad = |what: &str| BackendError::Execution(format!("grouped convolution: {what}"));
        if x.len() < group * cg * in_plane
            || y.len() < group * LANES * out_plane
            || bias.is_some_and(|b| b.len() < group * LANES)
        {
            return Err(bad("input, output or bias shorter than the plan"));
        }
        let s = geo.sh;
        // Padded width of a window row: every tap of every output pixel, and the slack.
        let pitch = (geo.ow.div_ceil(PIXELS) * PIXELS) * s + 2 + SLACK;
        // Threads take groups from a shared queue, a few at a time: RegNet's first stage has
        // six groups, which shares of two (two threads, two shares each) split 4:2.
        let per = if th.count() > 1 {
            (group / (4 * th.count())).max(1)
        } else {
            group
        };
        let span = LANES * out_plane;
        th.chunks(&mut y[..group * span], per * span, |i, yc| {
            let mut win = zeros(cg * 3 * pitch)?;
            let mut row = zeros(geo.ow.div_ceil(PIXELS) * PIXELS * LANES)?;
            for (k, yg) in yc.chunks_exact_mut(span).enumerate() {
                let g = i * per + k;
                let xg = &x[g * cg * in_plane..(g + 1) * cg * in_plane];
                let wg = &self.w[g * cg * 9 * LANES..(g + 1) * cg * 9 * LANES];
                let mut b = [0f32; LANES];
                if let Some(bias) = bias {
                    b.copy_from_slice(&bias[g * LANES..(g + 1) * LANES]);
                }
                let job = RowJob {
                    pitch,
                    cg,
                    ow: geo.ow,
                    bias: b,
                };
                for oy in 0..geo.oh {
                    fill_window(geo, xg, cg, oy, pitch, &mut win);
                    if s == 1 {
                        row_s1(&job, &win, wg, &mut row);
                    } else {
                        row_s2(&job, &win, wg, &mut row);
                    }
                    let dst = &mut yg[oy * geo.ow..];
                    if !simd::transpose_tile(&row, LANES, geo.ow, LANES, dst, out_plane) {
                        return Err(bad("a row does not fit the output"));
                    }
                }
                if act != Activation::None {
                    simd::unary_in_place(act, yg);
                }
            }
            Ok(())
        })
    }
}

/// `len` zeros, or an error when the memory cannot be had (the buffers grow with the row
/// width a model declares).
fn zeros(len: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        BackendError::Execution(format!(
            "grouped convolution: no memory for a {len}-float row buffer"
        ))
    })?;
    v.resize(len, 0.0);
    Ok(v)
}

/// Copy the input rows under output row `oy`'s window into `win` (`[c][ky][pitch]`),
/// zero-padded: column `ix + pl` of row `(c, ky)` is input `(c, oy·s + ky − pt, ix)`.
fn fill_window(geo: &Geo2, xg: &[f32], cg: usize, oy: usize, pitch: usize, win: &mut [f32]) {
    let (h, w, pl) = (geo.h, geo.w, geo.pl);
    let n = w.min(pitch.saturating_sub(pl));
    for c in 0..cg {
        for ky in 0..3 {
            let dst = &mut win[(c * 3 + ky) * pitch..(c * 3 + ky + 1) * pitch];
            let iy = (oy * geo.sh + ky) as isize - geo.pt as isize;
            dst[..pl.min(pitch)].fill(0.0);
            if iy < 0 || iy >= h as isize {
                dst[pl.min(pitch)..].fill(0.0);
                continue;
            }
            let src = &xg[c * h * w + iy as usize * w..][..n];
            dst[pl..pl + n].copy_from_slice(src);
            dst[pl + n..].fill(0.0);
        }
    }
}

/// One output row of one group at stride `S`: `out[p·8 + j] = bias[j] + Σ win[(c·3 + ky)·pitch
/// + p·S + kx] · w[((c·3 + ky)·3 + kx)·8 + j]`, for `p` up to the row's width rounded up to
/// eight (`out` holds that many pixels).
#[inline(always)]
fn row_body<const S: usize>(job: &RowJob, win: &[f32], w: &[f32], out: &mut [f32]) {
    let (pitch, cg, ow) = (job.pitch, job.cg, job.ow);
    let mut ox = 0;
    // Whole blocks of eight pixels, the last one past the row's end into `out`'s padding
    // (its window reads stay inside the row's slack).
    while ox < ow {
        let mut acc = [job.bias; PIXELS];
        for ct in 0..cg * 3 {
            let seg = &win[ct * pitch + ox * S..][..SLACK];
            let taps = &w[ct * 3 * LANES..][..3 * LANES];
            for kx in 0..3 {
                let wv: &[f32; LANES] = taps[kx * LANES..][..LANES]
                    .try_into()
                    .unwrap_or(&[0.0; LANES]);
                for (p, a) in acc.iter_mut().enumerate() {
                    let xv = seg[p * S + kx];
                    for (aj, wj) in a.iter_mut().zip(wv) {
                        *aj = xv.mul_add(*wj, *aj);
                    }
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            out[(ox + p) * LANES..(ox + p + 1) * LANES].copy_from_slice(a);
        }
        ox += PIXELS;
    }
}

#[inline(always)]
fn row_s1_body(job: &RowJob, win: &[f32], w: &[f32], out: &mut [f32]) {
    row_body::<1>(job, win, w, out)
}

#[inline(always)]
fn row_s2_body(job: &RowJob, win: &[f32], w: &[f32], out: &mut [f32]) {
    row_body::<2>(job, win, w, out)
}

backplane_cpu_kernels::multiversion! {
    /// [`row_body`] at stride 1, compiled per tier.
    fn row_s1(job: &RowJob, win: &[f32], w: &[f32], out: &mut [f32]) => row_s1_body;
}
backplane_cpu_kernels::multiversion! {
    /// [`row_body`] at stride 2, compiled per tier.
    fn row_s2(job: &RowJob, win: &[f32], w: &[f32], out: &mut [f32]) => row_s2_body;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::window::FromGeometry;
    use backplane_core::ops::{AutoPad, ConvDesc, Window};

    fn geo(h: usize, s: usize, k: usize) -> Geo2 {
        let desc = ConvDesc {
            window: Window {
                kernel: vec![k, k],
                strides: vec![s, s],
                dilations: vec![1, 1],
                pads: vec![k / 2; 4],
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        };
        let dims = [1, 8, h, h];
        let g = desc.geometry(&dims).expect("geometry");
        Geo2::from_geometry(&g, &dims[2..]).expect("2-D")
    }

    #[test]
    fn groups_of_eight_under_3x3_take_it() {
        if !simd::avx2_in_use() {
            return;
        }
        assert!(applies(&geo(112, 2, 3), 48, 48, 6));
        assert!(applies(&geo(7, 1, 3), 440, 440, 55));
        // Depthwise, other group widths and windows do not.
        assert!(!applies(&geo(7, 1, 3), 8, 8, 8));
        assert!(!applies(&geo(7, 1, 3), 64, 64, 4));
        assert!(!applies(&geo(7, 1, 5), 48, 48, 6));
        assert!(!applies(&geo(7, 1, 3), 48, 8, 1));
    }
}

//! Depthwise 2-D convolution, read in place a row at a time, channels-last in blocks of
//! planes, or one plane at a time; max pooling shares the rows path and the channels-last
//! blocks ([`run_max`]).
//!
//! With AVX-512 or AVX2, 3×3 windows (dilation 1, equal strides of 1 or 2) with rows wide
//! enough (`simd::depthwise_rows::worth`) take the *rows* path (`simd::depthwise_rows`):
//! each plane is read a row at a time, a row segment of up to 64 (AVX-512) or 32 (AVX2)
//! outputs per step; AVX-512 reads in place with masked loads at the borders (so padding
//! costs no copy), AVX2 from a buffer of three padded rows; stride 2 is de-interleaved in
//! registers; bias and Relu, Clip or LeakyRelu are applied before the store. No transposes,
//! so it beats the channels-last and per-plane paths on wide planes. Rows of 7 fill too
//! little of sixteen lanes, and channels-last stays faster there (with AVX2, rows up to 14
//! wide). Max pooling with 3×3 windows takes the same kernel (−∞ for padding, NaNs kept in a
//! mask).
//!
//! Otherwise, with AVX-512 (and, without it, for small planes of at most [`SMALL_PLANE`]
//! outputs) the *channels-last* path runs: blocks of [`LANES`] planes are transposed (16×16 in registers,
//! `simd::gather_lanes`) into one zero-padded `[row][column][lane]` buffer, a band of output
//! rows at a time so the buffer stays in L2; each output pixel accumulates its taps for all
//! lanes in one vector register, eight pixels at a time (`simd::depthwise_row`), and the band
//! is transposed back (`simd::scatter_lanes`). Every load is a whole vector and no plane
//! pays a setup of its own, which matters most on small planes.
//!
//! The *per-plane* path (the rest): each input plane is copied once into zero-padded stride
//! phases (the convolution's `Phases`: phase `(qy, qx)` holds padded rows `y·sh + qy`,
//! columns `x·sw + qx`), so every output's window lies inside the scratch and each tap of
//! output row `oy` reads a contiguous run at row `oy` (plus the tap's shift) of one phase: no
//! border cases, whatever the stride. Outputs are computed in chunks of up to 64 with every
//! tap accumulated in registers (the chunk loops are plain `acc[j] += w · src[j]` loops that
//! vectorize). Narrow planes (7×7, 14×14) are computed as one run at the phases' row pitch,
//! so they still fill whole vectors; the few values computed between rows are dropped when
//! the rows are copied out.
//!
//! Reading the input in place and handling the border outputs separately cost more than
//! the copy (computing the border columns one at a time), so the copy stays.
//!
//! The measurements behind these choices: docs/cpu-acc-bounds.md, "Depthwise convolutions".

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::conv::Phases;
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use std::sync::atomic::{AtomicBool, Ordering};

/// Planes computed together by the channels-last path (one AVX-512 vector, two AVX2 ones).
const LANES: usize = simd::BLOCK_LANES;

/// The largest window (taps) the channels-last path takes (7×7).
const MAX_TAPS: usize = 49;

/// Output planes of at most this many pixels take the channels-last path without AVX-512
/// (with AVX2 its transposes are 8×8 blocks in registers; beyond that, plain loops): up to
/// 14×14 it beat the rows path, at 28×28 it lost.
pub const SMALL_PLANE: usize = 256;

/// Outputs per band of the channels-last path: with 16 lanes, 24 KiB of scratch (1024 was
/// slower on wide planes).
const BAND_PIXELS: usize = 384;
/// Padded input pixels per band (96 KiB): more than the outputs, so that stride-2 bands of
/// wide planes hold several output rows and re-read fewer input rows (faster on wide
/// stride-2 planes than with the outputs' limit).
const BAND_INPUT_PIXELS: usize = 4 * BAND_PIXELS;

/// What is fixed for every plane of one depthwise convolution.
#[derive(Debug, Clone)]
pub struct Plan {
    geo: Geo2,
    phases: Phases,
    /// Offset of each tap (row-major) in the phases, relative to its output's position.
    offsets: Vec<usize>,
    /// Output rows per band of the channels-last path.
    band: usize,
    /// Whether the in-place rows path (`simd::depthwise_rows`) takes the planes.
    rows: bool,
    /// Whether the channels-last blocks may run (the `dw_channels_last` option when
    /// planned).
    channels_last_on: bool,
}

impl Plan {
    /// Plan a depthwise convolution of this geometry.
    pub fn new(geo: &Geo2) -> Self {
        let phases = Phases::new(geo);
        let mut plan = Plan {
            geo: *geo,
            phases,
            offsets: phases.rows(geo, 1),
            band: geo.oh.max(1),
            rows: simd::depthwise_rows::worth(geo) && crate::options::current().dw_rows,
            channels_last_on: crate::options::current().dw_channels_last,
        };
        // Bands of at most BAND_PIXELS outputs and BAND_INPUT_PIXELS padded inputs (per
        // lane), so the channels-last scratch stays well inside L2.
        let wp = plan.reach_cols();
        while plan.band > 1
            && (plan.band * geo.ow > BAND_PIXELS
                || plan.band_rows(plan.band) * wp > BAND_INPUT_PIXELS)
        {
            plan.band -= 1;
        }
        plan
    }

    /// Padded input rows that `rows` output rows reach.
    fn band_rows(&self, rows: usize) -> usize {
        let g = &self.geo;
        (rows.max(1) - 1) * g.sh + g.kh.saturating_sub(1) * g.dh + 1
    }

    /// Floats of scratch per plane: the phases, then the output rows at the phases' pitch.
    pub fn scratch_len(&self) -> usize {
        self.phases.plane() + self.phases.row_buf() + self.geo.oh * self.phases.pitch
    }

    /// Columns of padded input that the windows reach: the row length of the channels-last
    /// buffer.
    fn reach_cols(&self) -> usize {
        let g = &self.geo;
        g.ow.saturating_sub(1) * g.sw + g.kw.saturating_sub(1) * g.dw + 1
    }

    /// Floats of scratch per block of the channels-last path: one band's padded input, then
    /// its outputs, both `[pixel][lane]`.
    fn block_scratch_len(&self) -> usize {
        let wp = self.reach_cols();
        (self.band_rows(self.band) * wp + self.band * self.geo.ow) * LANES
    }

    /// Whether `planes` planes take the channels-last path.
    fn channels_last(&self, planes: usize) -> bool {
        planes >= LANES
            && (self.geo.oh * self.geo.ow <= SMALL_PLANE || simd::has_avx512())
            && self.geo.kh * self.geo.kw <= MAX_TAPS
            && self.channels_last_on
    }
}

/// Store a block of accumulators into `out` through an in-kernel activation (one loop per
/// activation, so each vectorizes). Written out, not applied in place: a select that keeps
/// the value it read compiles to a masked store of the changed lanes, slow on AMD's CPUs.
#[inline(always)]
fn activate_into<const N: usize>(acc: &[f32; N], act: Activation, out: &mut [f32]) {
    let pairs = acc.iter().zip(out.iter_mut());
    match act {
        Activation::Relu => pairs.for_each(|(a, o)| *o = act.apply_simple(*a)),
        Activation::Clip { min, max } => {
            let clip = Activation::Clip { min, max };
            pairs.for_each(|(a, o)| *o = clip.apply_simple(*a));
        }
        Activation::LeakyRelu { alpha } => {
            let leaky = Activation::LeakyRelu { alpha };
            pairs.for_each(|(a, o)| *o = leaky.apply_simple(*a));
        }
        _ => pairs.for_each(|(a, o)| *o = *a),
    }
}

/// What a channels-last block computes.
#[derive(Debug, Clone, Copy)]
pub enum BlockOp<'a> {
    /// Depthwise convolution: `w` holds the taps interleaved by lane (`w[t·LANES + lane]`),
    /// `bias` one value per lane; in-kernel activations are applied.
    Conv {
        /// Interleaved taps.
        w: &'a [f32],
        /// One bias per lane.
        bias: &'a [f32],
        /// The activation (only the in-kernel ones are applied here).
        act: Activation,
    },
    /// Max pooling of planes without NaN (the padding counts as -∞).
    Max,
}

/// One block of `n` ≤ [`LANES`] planes by the channels-last path: `x` holds the `n` input
/// planes, `out` receives the `n` output planes. Output rows are done in bands of
/// [`Plan::band`] rows, so the block's scratch stays in L2 whatever the plane size.
#[inline(always)]
pub fn block_body(
    plan: &Plan,
    x: &[f32],
    n: usize,
    op: BlockOp<'_>,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let g = &plan.geo;
    let wp = plan.reach_cols();
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let n = n.min(LANES);
    let (xt, ot) = scratch.split_at_mut(plan.band_rows(plan.band) * wp * LANES);
    let (w, bias, act, pad) = match op {
        BlockOp::Conv { w, bias, act } => (w, bias, act, 0.0),
        BlockOp::Max => (&[][..], &[][..], Activation::None, f32::NEG_INFINITY),
    };
    let max = matches!(op, BlockOp::Max);
    let simple = act.kernel_part();
    let mut b = [0f32; LANES];
    b[..bias.len().min(LANES)].copy_from_slice(&bias[..bias.len().min(LANES)]);
    // Each tap's offset in the padded buffer, relative to its output's window origin.
    let mut offs = [0usize; MAX_TAPS];
    let taps = (g.kh * g.kw).min(MAX_TAPS);
    for (t, o) in offs.iter_mut().enumerate().take(taps) {
        *o = ((t / g.kw) * g.dh * wp + (t % g.kw) * g.dw) * LANES;
    }
    let offs = &offs[..taps];
    let mut wl = [[0f32; LANES]; MAX_TAPS];
    for (dst, src) in wl.iter_mut().zip(w.chunks_exact(LANES)).take(taps) {
        dst.copy_from_slice(src);
    }
    let wl = &wl[..taps];
    // Columns of each input row inside the padded buffer's reach.
    let cols = g.w.min(wp.saturating_sub(g.pl));
    let (left, right) = (g.pl.min(wp), (g.pl + cols).min(wp));
    let mut oy0 = 0;
    while oy0 < g.oh {
        let rows = plan.band.min(g.oh - oy0);
        // Buffer row r is padded row oy0·sh + r, that is input row oy0·sh + r - pt.
        for r in 0..plan.band_rows(rows) {
            let dst = &mut xt[r * wp * LANES..(r + 1) * wp * LANES];
            match (oy0 * g.sh + r).checked_sub(g.pt).filter(|&iy| iy < g.h) {
                Some(iy) => {
                    dst[..left * LANES].fill(pad);
                    dst[right * LANES..].fill(pad);
                    simd::gather_lanes(&x[iy * g.w..], in_plane, n, cols, &mut dst[left * LANES..]);
                }
                None => dst.fill(pad),
            }
        }
        for oy in 0..rows {
            let orow = &mut ot[oy * g.ow * LANES..(oy + 1) * g.ow * LANES];
            let row_base = oy * g.sh * wp * LANES;
            let step = g.sw * LANES;
            if max {
                if !simd::max_row(&xt[row_base..], step, offs, g.ow, orow) {
                    max_pixels(&xt[row_base..], step, offs, orow);
                }
                continue;
            }
            if simd::depthwise_row(&xt[row_base..], step, offs, w, &b, g.ow, orow) {
                if simple != Activation::None {
                    simd::unary_in_place(simple, orow);
                }
                continue;
            }
            let mut ox = 0;
            while ox + PIXELS <= g.ow {
                let o = &mut orow[ox * LANES..(ox + PIXELS) * LANES];
                pixels::<PIXELS>(xt, row_base + ox * step, step, offs, wl, &b, simple, o);
                ox += PIXELS;
            }
            while ox < g.ow {
                let o = &mut orow[ox * LANES..(ox + 1) * LANES];
                pixels::<1>(xt, row_base + ox * step, step, offs, wl, &b, simple, o);
                ox += 1;
            }
        }
        let len = rows * g.ow;
        simd::scatter_lanes(
            &ot[..len * LANES],
            len,
            n,
            &mut out[oy0 * g.ow..],
            out_plane,
        );
        oy0 += rows;
    }
}

/// Output pixels computed together by the channels-last path (independent accumulator
/// chains, each tap's weights loaded once for all of them).
const PIXELS: usize = 4;

/// `P` consecutive output pixels of one row, channels-last: pixel `p`'s window starts at
/// `base + p·step` in `xt`; `out` receives `P` vectors of [`LANES`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pixels<const P: usize>(
    xt: &[f32],
    base: usize,
    step: usize,
    offs: &[usize],
    w: &[[f32; LANES]],
    bias: &[f32; LANES],
    act: Activation,
    out: &mut [f32],
) {
    let mut acc = [*bias; P];
    for (&off, wv) in offs.iter().zip(w) {
        for (p, a) in acc.iter_mut().enumerate() {
            let at = base + p * step + off;
            let Some(xv) = xt.get(at..at + LANES) else {
                return;
            };
            for l in 0..LANES {
                a[l] = wv[l].mul_add(xv[l], a[l]);
            }
        }
    }
    for (a, o) in acc.iter().zip(out.chunks_exact_mut(LANES)) {
        activate_into(a, act, o);
    }
}

/// Max pooling of one row of output pixels, channels-last, in plain Rust (see
/// `simd::max_row`): pixel `j`'s window starts at `x[j·step]`.
#[inline(always)]
fn max_pixels(x: &[f32], step: usize, offs: &[usize], out: &mut [f32]) {
    for (j, o) in out.chunks_exact_mut(LANES).enumerate() {
        let mut acc = [f32::NEG_INFINITY; LANES];
        for &off in offs {
            let at = j * step + off;
            let Some(xv) = x.get(at..at + LANES) else {
                return;
            };
            for l in 0..LANES {
                acc[l] = if xv[l] > acc[l] { xv[l] } else { acc[l] };
            }
        }
        o.copy_from_slice(&acc);
    }
}

/// `out[j] = act(bias + Σ_t w[t] · x[base + off[t] + j])` for a chunk of `N` outputs, all
/// taps accumulated in registers.
#[inline(always)]
fn chunk<const N: usize>(
    x: &[f32],
    offs: &[usize],
    w: &[f32],
    bias: f32,
    act: Activation,
    base: usize,
    out: &mut [f32],
) {
    let mut acc = [bias; N];
    for (&off, &wv) in offs.iter().zip(w) {
        let start = base + off;
        for (a, &v) in acc.iter_mut().zip(&x[start..start + N]) {
            *a = wv.mul_add(v, *a);
        }
    }
    match act {
        Activation::Relu | Activation::Clip { .. } | Activation::LeakyRelu { .. } => {
            // One activation per match arm, so each loop vectorizes.
            match act {
                Activation::Relu => acc.iter_mut().for_each(|a| *a = act.apply_simple(*a)),
                Activation::Clip { min, max } => {
                    let clip = Activation::Clip { min, max };
                    acc.iter_mut().for_each(|a| *a = clip.apply_simple(*a));
                }
                _ => acc.iter_mut().for_each(|a| *a = act.apply_simple(*a)),
            }
        }
        _ => {}
    }
    out[..N].copy_from_slice(&acc);
}

/// Outputs `out[j]` whose windows start at `base + j`: wide chunks, then narrower ones.
#[inline(always)]
fn span(
    x: &[f32],
    offs: &[usize],
    w: &[f32],
    bias: f32,
    act: Activation,
    mut base: usize,
    out: &mut [f32],
) {
    let n = out.len();
    let mut j = 0;
    while j + 64 <= n {
        chunk::<64>(x, offs, w, bias, act, base, &mut out[j..]);
        (j, base) = (j + 64, base + 64);
    }
    while j + 16 <= n {
        chunk::<16>(x, offs, w, bias, act, base, &mut out[j..]);
        (j, base) = (j + 16, base + 16);
    }
    while j + 4 <= n {
        chunk::<4>(x, offs, w, bias, act, base, &mut out[j..]);
        (j, base) = (j + 4, base + 4);
    }
    while j < n {
        chunk::<1>(x, offs, w, bias, act, base, &mut out[j..]);
        (j, base) = (j + 1, base + 1);
    }
}

/// One output plane from input plane `x` (h·w) and the channel's `w` (kh·kw taps), with the
/// activation applied when it is one of the simple ones (the caller applies the others);
/// `scratch` holds [`Plan::scratch_len`] floats.
#[inline(always)]
pub fn plane_body(
    plan: &Plan,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Activation,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let g = &plan.geo;
    let simple = act.kernel_part();
    let pitch = plan.phases.pitch;
    let (src, rest) = scratch.split_at_mut(plan.phases.plane());
    let (row, dst) = rest.split_at_mut(plan.phases.row_buf());
    plan.phases.fill(g, x, src, row);
    let offs = &plan.offsets;
    if g.ow < 64 {
        // All output rows as one run at the phases' row pitch.
        let n = (g.oh - 1) * pitch + g.ow;
        span(src, offs, w, bias, simple, 0, &mut dst[..n]);
        for (orow, drow) in out.chunks_exact_mut(g.ow).zip(dst.chunks(pitch)) {
            orow.copy_from_slice(&drow[..g.ow]);
        }
    } else {
        for (oy, orow) in out.chunks_exact_mut(g.ow).enumerate().take(g.oh) {
            span(src, offs, w, bias, simple, oy * pitch, orow);
        }
    }
}

/// Depthwise convolution of every plane of `x` into `y` (the channel of plane `p` is
/// `p % channels`; `weights` holds kh·kw taps per channel).
#[allow(clippy::too_many_arguments)]
pub fn run(
    th: &Threads,
    plan: &Plan,
    channels: usize,
    x: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> Result<()> {
    let g = &plan.geo;
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let taps = g.kh * g.kw;
    if out_plane == 0 || channels == 0 {
        return Ok(());
    }
    if plan.offsets.len() != taps {
        return Err(BackendError::Execution(
            "depthwise convolution: plan does not match the geometry".into(),
        ));
    }
    let planes = y.len() / out_plane;
    if x.len() < planes * in_plane || weights.len() < channels * taps {
        return Err(BackendError::Execution(
            "depthwise convolution: input or weights too small".into(),
        ));
    }
    // Below ~64k multiply-adds in all, handing planes to threads costs more than it saves.
    let small = planes * out_plane * taps < 64 * 1024;
    if plan.rows {
        return each_plane(th, y, out_plane, small, Vec::new, |rows, p, out| {
            let ch = p % channels;
            let xp = &x[p * in_plane..(p + 1) * in_plane];
            let wp = &weights[ch * taps..(ch + 1) * taps];
            let b = bias.and_then(|b| b.get(ch).copied()).unwrap_or(0.0);
            if !simd::depthwise_rows::plane(g, xp, wp, b, act, out, rows) {
                return Err(BackendError::Execution(
                    "depthwise convolution: rows path refused its plane".into(),
                ));
            }
            if !act.in_kernel() {
                simd::unary_in_place(act, out);
            }
            Ok(())
        });
    }
    if plan.channels_last(planes) {
        return blocks(th, plan, x, y, small, |p0, xb, n, yb, scratch| {
            let mut wt = [0f32; MAX_TAPS * LANES];
            let mut bl = [0f32; LANES];
            for lane in 0..n {
                let ch = (p0 + lane) % channels;
                for t in 0..taps {
                    wt[t * LANES + lane] = weights[ch * taps + t];
                }
                bl[lane] = bias.and_then(|b| b.get(ch).copied()).unwrap_or(0.0);
            }
            let op = BlockOp::Conv {
                w: &wt[..taps * LANES],
                bias: &bl,
                act,
            };
            simd::depthwise_block(plan, xb, n, op, yb, scratch);
            if !act.in_kernel() {
                simd::unary_in_place(act, yb);
            }
        });
    }
    let scratch = || vec![0f32; plan.scratch_len()];
    each_plane(th, y, out_plane, small, scratch, |scratch, p, out| {
        let ch = p % channels;
        let xp = &x[p * in_plane..(p + 1) * in_plane];
        let wp = &weights[ch * taps..(ch + 1) * taps];
        let b = bias.and_then(|b| b.get(ch).copied()).unwrap_or(0.0);
        simd::depthwise_plane(plan, xp, wp, b, act, out, scratch);
        if !act.in_kernel() {
            simd::unary_in_place(act, out);
        }
        Ok(())
    })
}

/// Run `f(state, p, out)` for every output plane `p` of `y` (`out_plane` floats each), the
/// planes shared out between the threads unless the whole op is `small`; `init` makes each
/// share's `state` (scratch) once.
fn each_plane<S>(
    th: &Threads,
    y: &mut [f32],
    out_plane: usize,
    small: bool,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, &mut [f32]) -> Result<()> + Sync,
) -> Result<()> {
    let planes = y.len() / out_plane.max(1);
    let per = if small {
        planes.max(1)
    } else {
        th.chunk_size(planes, 1, 1)
    };
    th.chunks(&mut y[..planes * out_plane], per * out_plane, |ci, yc| {
        let mut state = init();
        for (i, out) in yc.chunks_exact_mut(out_plane).enumerate() {
            f(&mut state, ci * per + i, out)?;
        }
        Ok(())
    })
}

/// Hand the planes of `x` and `y` to `block(first plane, its input planes, how many, their
/// output planes, scratch)` in blocks of [`LANES`] planes, shared out between threads unless
/// the op is `small`.
fn blocks<F>(
    th: &Threads,
    plan: &Plan,
    x: &[f32],
    y: &mut [f32],
    small: bool,
    block: F,
) -> Result<()>
where
    F: Fn(usize, &[f32], usize, &mut [f32], &mut [f32]) + Sync + Send,
{
    let g = &plan.geo;
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let planes = y.len() / out_plane.max(1);
    let per = if small {
        planes.max(1)
    } else {
        th.chunk_size(planes, LANES, LANES)
    };
    th.chunks(y, per * out_plane, |ci, yc| {
        let mut scratch = vec![0f32; plan.block_scratch_len()];
        for (bi, yb) in yc.chunks_mut(LANES * out_plane).enumerate() {
            let p0 = ci * per + bi * LANES;
            let n = yb.len() / out_plane;
            block(
                p0,
                &x[p0 * in_plane..(p0 + n) * in_plane],
                n,
                yb,
                &mut scratch,
            );
        }
        Ok(())
    })
}

/// Max pooling of every plane of `x` into `y` by the rows path (3×3 windows, as for the
/// convolution; NaNs propagate) or the channels-last path, when one applies (as for the
/// convolution: AVX-512, or small planes of at most [`SMALL_PLANE`] outputs, such as
/// SqueezeNet's 13×13 and 6×6 ones; for channels-last at least [`LANES`] planes, a window of
/// at most [`MAX_TAPS`], no NaN in `x`: its vector max does not propagate NaN the way CpuRef
/// does). Returns false otherwise, with `y` possibly half written; the caller then pools
/// plane by plane.
pub fn run_max(th: &Threads, plan: &Plan, x: &[f32], y: &mut [f32]) -> Result<bool> {
    let g = &plan.geo;
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    if out_plane == 0 {
        return Ok(false);
    }
    let planes = y.len() / out_plane;
    if plan.rows && x.len() >= planes * in_plane {
        let small = planes * out_plane * g.kh * g.kw < 64 * 1024;
        each_plane(th, y, out_plane, small, Vec::new, |rows, p, out| {
            let xp = &x[p * in_plane..(p + 1) * in_plane];
            if !simd::depthwise_rows::max_plane(g, xp, out, rows) {
                return Err(BackendError::Execution(
                    "max pooling: rows path refused its plane".into(),
                ));
            }
            Ok(())
        })?;
        return Ok(true);
    }
    if !plan.channels_last(planes) || x.len() < planes * in_plane {
        return Ok(false);
    }
    let small = planes * out_plane * g.kh * g.kw < 64 * 1024;
    // Each block checks its own planes for NaN (in parallel, and just before the block reads
    // them anyway); a NaN anywhere hands the whole op back to the caller, which redoes it.
    let nan = AtomicBool::new(false);
    blocks(th, plan, x, y, small, |_, xb, n, yb, scratch| {
        if nan.load(Ordering::Relaxed) || simd::any_nan(xb) {
            nan.store(true, Ordering::Relaxed);
            return;
        }
        simd::depthwise_block(plan, xb, n, BlockOp::Max, yb, scratch);
    })?;
    Ok(!nan.load(Ordering::Relaxed))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::conv::window::FromGeometry;
    use backplane_core::ops::{Geometry, Window};

    /// A zero-padded depthwise convolution of one plane (`w`: its kh·kw taps), plainly, in
    /// f64.
    pub(crate) fn naive(g: &Geo2, x: &[f32], w: &[f32], bias: f32) -> Vec<f32> {
        let mut y = vec![0f32; g.oh * g.ow];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let mut s = f64::from(bias);
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        let iy = (oy * g.sh + ky * g.dh) as isize - g.pt as isize;
                        let ix = (ox * g.sw + kx * g.dw) as isize - g.pl as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < g.h && (ix as usize) < g.w {
                            s += f64::from(w[ky * g.kw + kx])
                                * f64::from(x[iy as usize * g.w + ix as usize]);
                        }
                    }
                }
                y[oy * g.ow + ox] = s as f32;
            }
        }
        y
    }

    /// The max pooling of one plane, plainly: padding never wins, a NaN in a window makes
    /// its output NaN.
    pub(crate) fn naive_max(g: &Geo2, x: &[f32]) -> Vec<f32> {
        let mut y = vec![f32::NEG_INFINITY; g.oh * g.ow];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let o = &mut y[oy * g.ow + ox];
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        let iy = (oy * g.sh + ky * g.dh) as isize - g.pt as isize;
                        let ix = (ox * g.sw + kx * g.dw) as isize - g.pl as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < g.h && (ix as usize) < g.w {
                            let v = x[iy as usize * g.w + ix as usize];
                            if !o.is_nan() && (v.is_nan() || v > *o) {
                                *o = v;
                            }
                        }
                    }
                }
            }
        }
        y
    }

    /// The geometry of a k×k window (stride s, dilation d; pads top, left, bottom, right)
    /// over an h×w plane.
    pub(crate) fn geo(h: usize, w: usize, k: usize, s: usize, d: usize, pads: [usize; 4]) -> Geo2 {
        let window = Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![d, d],
            pads: pads.to_vec(),
            auto_pad: Default::default(),
        };
        let g: Geometry = window.geometry(&[h, w], false).unwrap();
        Geo2::from_geometry(&g, &[h, w]).unwrap()
    }

    /// The channels-last path on odd plane counts (a partial last block), strides,
    /// dilations, asymmetric pads and planes done in several bands, 1 and 2 threads, against
    /// a plain loop.
    #[test]
    fn channels_last_blocks_match_a_plain_loop() {
        for (h, w, k, s, d, pads, planes, channels) in [
            (7, 7, 3, 1, 1, [1, 1, 1, 1], 16, 16),
            (14, 14, 3, 2, 1, [1, 1, 1, 1], 37, 37),
            (10, 10, 3, 1, 1, [1, 1, 1, 1], 64, 32),
            (9, 9, 5, 2, 2, [0, 3, 2, 1], 17, 17),
            (1, 1, 3, 1, 1, [1, 1, 1, 1], 33, 11),
            (3, 17, 3, 1, 1, [0, 0, 0, 0], 20, 20),
            (13, 11, 3, 3, 1, [2, 0, 0, 2], 19, 19),
            // Larger planes (channels-last with AVX-512), in several bands.
            (40, 70, 3, 1, 1, [1, 1, 1, 1], 18, 18),
            (23, 150, 3, 2, 1, [1, 1, 1, 1], 17, 17),
            (31, 29, 5, 1, 2, [4, 4, 4, 4], 33, 33),
            (64, 64, 3, 2, 1, [0, 0, 1, 1], 32, 32),
        ] {
            let g = geo(h, w, k, s, d, pads);
            let plan = Plan::new(&g);
            assert!(plan.channels_last(planes) || g.oh * g.ow > SMALL_PLANE);
            if g.oh * g.ow > 1024 {
                assert!(plan.band < g.oh, "{h}x{w}: one band of {} rows", plan.band);
            }
            let x: Vec<f32> = (0..planes * h * w)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let wt: Vec<f32> = (0..channels * k * k)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 10.0)
                .collect();
            let bias: Vec<f32> = (0..channels).map(|c| c as f32 * 0.25 - 1.0).collect();
            for act in [Activation::Clip { min: 0.0, max: 6.0 }, Activation::Sigmoid] {
                for th in [Threads::single(), Threads::new(2).unwrap()] {
                    let mut y = vec![f32::NAN; planes * g.oh * g.ow];
                    run(&th, &plan, channels, &x, &wt, Some(&bias), act, &mut y).unwrap();
                    for p in 0..planes {
                        let ch = p % channels;
                        let mut want = naive(
                            &g,
                            &x[p * h * w..(p + 1) * h * w],
                            &wt[ch * k * k..(ch + 1) * k * k],
                            bias[ch],
                        );
                        crate::math::unary_in_place_body(act, &mut want);
                        let got = &y[p * g.oh * g.ow..(p + 1) * g.oh * g.ow];
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                                "{h}x{w} k{k} s{s} d{d} {act:?} plane {p} at {i}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The portable pixel groups (AVX2 and plain machines) against the AVX-512 row kernel
    /// where this CPU has one, and both against a plain sum, strided and not.
    #[test]
    fn pixel_groups_match_the_row_kernel() {
        let offs: Vec<usize> = [0usize, 1, 2, 9, 10, 11, 18, 19, 20]
            .iter()
            .map(|o| o * LANES)
            .collect();
        let w: Vec<f32> = (0..offs.len() * LANES)
            .map(|i| ((i * 7 % 23) as f32 - 11.0) / 8.0)
            .collect();
        let wl: Vec<[f32; LANES]> = w
            .chunks_exact(LANES)
            .map(|c| c.try_into().unwrap())
            .collect();
        let bias: [f32; LANES] = std::array::from_fn(|l| l as f32 * 0.5 - 3.0);
        let x: Vec<f32> = (0..9 * 40 * LANES)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) / 16.0)
            .collect();
        for (step, ow) in [(LANES, 7), (2 * LANES, 9), (LANES, 13)] {
            let mut want = vec![0f32; ow * LANES];
            for j in 0..ow {
                for l in 0..LANES {
                    want[j * LANES + l] = bias[l]
                        + offs
                            .iter()
                            .enumerate()
                            .map(|(t, &o)| w[t * LANES + l] * x[j * step + o + l])
                            .sum::<f32>();
                }
            }
            let mut got = vec![f32::NAN; ow * LANES];
            let mut j = 0;
            while j + PIXELS <= ow {
                let o = &mut got[j * LANES..(j + PIXELS) * LANES];
                pixels::<PIXELS>(&x, j * step, step, &offs, &wl, &bias, Activation::None, o);
                j += PIXELS;
            }
            for j in j..ow {
                let o = &mut got[j * LANES..(j + 1) * LANES];
                pixels::<1>(&x, j * step, step, &offs, &wl, &bias, Activation::None, o);
            }
            let mut fast = vec![f32::NAN; ow * LANES];
            let ran = simd::depthwise_row(&x, step, &offs, &w, &bias, ow, &mut fast);
            assert_eq!(ran, simd::has_avx512());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "portable step {step} at {i}"
                );
                if ran {
                    assert!(
                        (fast[i] - b).abs() <= 1e-4 * b.abs().max(1.0),
                        "avx512 step {step} at {i}"
                    );
                }
            }
            // A row reaching past the input is refused, not read.
            assert!(!simd::depthwise_row(
                &x[..ow * step],
                step,
                &offs,
                &w,
                &bias,
                ow,
                &mut fast
            ));
        }
    }

    /// Max pooling by the channels-last blocks against a plain loop, with padding (which
    /// never wins), strides and bands; a NaN sends it back to the caller.
    /// Max pooling by the rows path (3×3 windows with outputs at least 14 wide) and the
    /// channels-last blocks against a plain loop, on 1 and 2 threads; with a NaN the rows
    /// path propagates it and the channels-last path hands the op back.
    #[test]
    fn max_pooling_matches_a_plain_loop() {
        for (h, w, k, s, pads, planes) in [
            (112, 112, 3, 2, [1, 1, 1, 1], 20),
            (9, 13, 2, 2, [0, 0, 1, 1], 16),
            (40, 70, 3, 1, [1, 2, 0, 1], 33),
            (9, 13, 3, 1, [1, 1, 1, 1], 17),
            (10, 15, 3, 1, [1, 1, 1, 1], 16),
        ] {
            let g = geo(h, w, k, s, 1, pads);
            let plan = Plan::new(&g);
            let naive = |x: &[f32]| -> Vec<f32> {
                x.chunks_exact(h * w)
                    .flat_map(|plane| naive_max(&g, plane))
                    .collect()
            };
            // All negative, so a zero padding would show.
            let x: Vec<f32> = (0..planes * h * w)
                .map(|i| -1.0 - (i * 37 % 101) as f32)
                .collect();
            let mut xn = x.clone();
            xn[5] = f32::NAN;
            // 3×3 windows with rows of at least 14 (AVX-512) or 16 (AVX2) outputs.
            let min_width = if simd::has_avx512() { 14 } else { 16 };
            let rows = simd::avx2_in_use() && k == 3 && g.ow >= min_width;
            assert_eq!(plan.rows, rows);
            for th in [Threads::single(), Threads::new(2).unwrap()] {
                for (input, nan) in [(&x, false), (&xn, true)] {
                    let mut y = vec![0f32; planes * g.oh * g.ow];
                    let ran = run_max(&th, &plan, input, &mut y).unwrap();
                    // Channels-last with AVX-512, or (AVX2) on small planes.
                    let channels_last = plan.channels_last(planes);
                    assert_eq!(ran, plan.rows || (channels_last && !nan), "{h}x{w} k{k}");
                    if !ran {
                        continue;
                    }
                    for (i, (got, want)) in y.iter().zip(naive(input)).enumerate() {
                        assert!(
                            *got == want || (got.is_nan() && want.is_nan()),
                            "{h}x{w} k{k} NaN {nan} output {i}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// Every activation (the in-register ones and the others, applied afterwards) on planes
    /// that take the one-run path and the row-by-row path, against a plain loop.
    #[test]
    fn planes_with_activations_match_a_plain_loop() {
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::Sigmoid,
        ];
        for (h, w, k, s, d, pads) in [
            (7, 7, 3, 1, 1, [1, 1, 1, 1]),
            (14, 14, 3, 2, 1, [1, 1, 1, 1]),
            (5, 70, 3, 1, 1, [1, 1, 1, 1]),
            (9, 131, 5, 2, 2, [0, 3, 2, 1]),
            (1, 1, 3, 1, 1, [1, 1, 1, 1]),
            (17, 3, 7, 3, 1, [3, 3, 3, 3]),
        ] {
            let g = geo(h, w, k, s, d, pads);
            let plan = Plan::new(&g);
            let channels = 3;
            let x: Vec<f32> = (0..channels * h * w)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let wt: Vec<f32> = (0..channels * k * k)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 10.0)
                .collect();
            let bias = [0.5, -1.0, 2.0];
            for act in acts {
                for th in [Threads::single(), Threads::new(2).unwrap()] {
                    let mut y = vec![f32::NAN; channels * g.oh * g.ow];
                    run(&th, &plan, channels, &x, &wt, Some(&bias), act, &mut y).unwrap();
                    for ch in 0..channels {
                        let mut want = naive(
                            &g,
                            &x[ch * h * w..(ch + 1) * h * w],
                            &wt[ch * k * k..(ch + 1) * k * k],
                            bias[ch],
                        );
                        crate::math::unary_in_place_body(act, &mut want);
                        let got = &y[ch * g.oh * g.ow..(ch + 1) * g.oh * g.ow];
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                                "{h}x{w} k{k} s{s} d{d} {act:?} ch{ch} at {i}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

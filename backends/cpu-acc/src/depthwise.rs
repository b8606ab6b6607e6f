//! Depthwise 2-D convolution, one plane at a time.
//!
//! Each input plane is copied once into zero-padded stride phases (the convolution's
//! `Phases`: phase `(qy, qx)` holds padded rows `y·sh + qy`, columns `x·sw + qx`), so every
//! output's window lies inside the scratch and each tap of output row `oy` reads a contiguous
//! run at row `oy` (plus the tap's shift) of one phase: no border cases, whatever the stride.
//! Outputs are computed in chunks of up to 64 with every tap accumulated in registers (the
//! chunk loops are plain `acc[j] += w · src[j]` loops that vectorize). Narrow planes (7×7,
//! 14×14) are computed as one run at the phases' row pitch, so they still fill whole vectors;
//! the few values computed between rows are dropped when the rows are copied out.
//!
//! Small planes (at most [`SMALL_PLANE`] outputs, the 7×7 layers of MobileNet-like models)
//! spend more on that per-plane setup than on arithmetic, so they take a
//! *channels-last* path instead: blocks of [`LANES`] planes are transposed into one zero-padded
//! `[row][column][lane]` buffer, each output pixel accumulates its taps for all lanes in
//! registers (one vector per tap), and the block is transposed back. The two transposes are
//! most of its time (scalar moves one cache line apart); in-register transposes would make it
//! pay on larger planes too.
//!
//! Reading the input in place and handling the border outputs separately was measured too:
//! with 3×3 windows a 56×56 plane has 2 border columns per row, and computing those one at a
//! time cost more than the copy (twice as slow on 14×14 and 7×7 planes), so the copy stays.

use crate::act::Activation;
use crate::conv::Phases;
use crate::simd;
use crate::threads::Threads;
use crate::window::Geo2;
use backplane_backend_api::{BackendError, Result};

/// Planes computed together by the channels-last path (one AVX-512 vector, two AVX2 ones).
const LANES: usize = 16;

/// The largest window (taps) the channels-last path takes (7×7).
const MAX_TAPS: usize = 49;

/// Output planes of at most this many pixels take the channels-last path. Measured with
/// `conv_bench` (3×3, one thread): 576 planes 14×14 stride 2 (7×7 out) 2.0× and 960 planes
/// 7×7 1.6× faster than the per-plane path; 576 planes 14×14 stride 1 (196 out) no faster.
pub const SMALL_PLANE: usize = 100;

/// Set (to anything) to turn the channels-last path off, for A/B measurements.
pub const NO_CHANNELS_LAST_ENV: &str = "BACKPLANE_CPUACC_NO_DW_CHANNELS_LAST";

/// What is fixed for every plane of one depthwise convolution.
#[derive(Debug, Clone)]
pub struct Plan {
    geo: Geo2,
    phases: Phases,
    /// Offset of each tap (row-major) in the phases, relative to its output's position.
    offsets: Vec<usize>,
}

impl Plan {
    /// Plan a depthwise convolution of this geometry.
    pub fn new(geo: &Geo2) -> Self {
        let phases = Phases::new(geo);
        Plan {
            geo: *geo,
            phases,
            offsets: phases.rows(geo, 1),
        }
    }

    /// Floats of scratch per plane: the phases, then the output rows at the phases' pitch.
    pub fn scratch_len(&self) -> usize {
        self.phases.plane() + self.phases.row_buf() + self.geo.oh * self.phases.pitch
    }

    /// Rows and columns of padded input that the windows reach (channels-last path).
    fn reach(&self) -> (usize, usize) {
        let g = &self.geo;
        (
            (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1,
            (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1,
        )
    }

    /// Floats of scratch per block of the channels-last path: the padded input, then the
    /// outputs, both `[pixel][lane]`.
    fn block_scratch_len(&self) -> usize {
        let (hp, wp) = self.reach();
        (hp * wp + self.geo.oh * self.geo.ow) * LANES
    }

    /// Whether `planes` planes take the channels-last path.
    fn channels_last(&self, planes: usize) -> bool {
        planes >= LANES
            && self.geo.oh * self.geo.ow <= SMALL_PLANE
            && self.geo.kh * self.geo.kw <= MAX_TAPS
            && std::env::var_os(NO_CHANNELS_LAST_ENV).is_none()
    }
}

/// Apply an in-kernel activation to a block of accumulators (one loop per activation, so
/// each vectorizes).
#[inline(always)]
fn activate<const N: usize>(acc: &mut [f32; N], act: Activation) {
    match act {
        Activation::Relu => acc.iter_mut().for_each(|a| *a = act.apply_simple(*a)),
        Activation::Clip { min, max } => {
            let clip = Activation::Clip { min, max };
            acc.iter_mut().for_each(|a| *a = clip.apply_simple(*a));
        }
        Activation::LeakyRelu { alpha } => {
            let leaky = Activation::LeakyRelu { alpha };
            acc.iter_mut().for_each(|a| *a = leaky.apply_simple(*a));
        }
        _ => {}
    }
}

/// One block of `n` ≤ [`LANES`] planes by the channels-last path: `x` holds the `n` input
/// planes, `w` the taps interleaved by lane (`w[t·LANES + lane]`), `bias` one value per
/// lane; `out` receives the `n` output planes with in-kernel activations applied.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn block_body(
    plan: &Plan,
    x: &[f32],
    n: usize,
    w: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let g = &plan.geo;
    let (hp, wp) = plan.reach();
    let (in_plane, out_plane) = (g.h * g.w, g.oh * g.ow);
    let n = n.min(LANES);
    let (xt, ot) = scratch.split_at_mut(hp * wp * LANES);
    xt.fill(0.0);
    for (lane, xp) in x.chunks_exact(in_plane).take(n).enumerate() {
        for (iy, row) in xp.chunks_exact(g.w).enumerate() {
            let r = iy + g.pt;
            if r >= hp {
                break;
            }
            let cols = g.w.min(wp.saturating_sub(g.pl));
            let dst = &mut xt[(r * wp + g.pl) * LANES..];
            for (c, &v) in row[..cols].iter().enumerate() {
                dst[c * LANES + lane] = v;
            }
        }
    }
    let simple = if act.in_kernel() {
        act
    } else {
        Activation::None
    };
    let mut b = [0f32; LANES];
    b[..bias.len().min(LANES)].copy_from_slice(&bias[..bias.len().min(LANES)]);
    // Each tap's offset in the padded buffer, relative to its output's window origin.
    let mut offs = [0usize; MAX_TAPS];
    let taps = (g.kh * g.kw).min(MAX_TAPS);
    for (t, o) in offs.iter_mut().enumerate().take(taps) {
        *o = ((t / g.kw) * g.dh * wp + (t % g.kw) * g.dw) * LANES;
    }
    let offs = &offs[..taps];
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let mut acc = b;
            let base = (oy * g.sh * wp + ox * g.sw) * LANES;
            for (&off, wv) in offs.iter().zip(w.chunks_exact(LANES)) {
                let xv = &xt[base + off..base + off + LANES];
                for ((a, &wl), &xl) in acc.iter_mut().zip(wv).zip(xv) {
                    *a = wl.mul_add(xl, *a);
                }
            }
            activate(&mut acc, simple);
            let o = (oy * g.ow + ox) * LANES;
            ot[o..o + LANES].copy_from_slice(&acc);
        }
    }
    for (lane, op) in out.chunks_exact_mut(out_plane).take(n).enumerate() {
        for (j, v) in op.iter_mut().enumerate() {
            *v = ot[j * LANES + lane];
        }
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
    let simple = if act.in_kernel() {
        act
    } else {
        Activation::None
    };
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
    if plan.channels_last(planes) {
        let per = if small {
            planes
        } else {
            th.chunk_size(planes, LANES, LANES)
        };
        return th.chunks(y, per * out_plane, |ci, yc| {
            let mut scratch = vec![0f32; plan.block_scratch_len()];
            let mut wt = vec![0f32; taps * LANES];
            let mut bl = [0f32; LANES];
            let first = ci * per;
            for (bi, yb) in yc.chunks_mut(LANES * out_plane).enumerate() {
                let p0 = first + bi * LANES;
                let n = yb.len() / out_plane;
                for lane in 0..n {
                    let ch = (p0 + lane) % channels;
                    for t in 0..taps {
                        wt[t * LANES + lane] = weights[ch * taps + t];
                    }
                    bl[lane] = bias.and_then(|b| b.get(ch).copied()).unwrap_or(0.0);
                }
                let xb = &x[p0 * in_plane..(p0 + n) * in_plane];
                simd::depthwise_block(plan, xb, n, &wt, &bl, act, yb, &mut scratch);
                if !act.in_kernel() {
                    simd::unary_in_place(act, yb);
                }
            }
            Ok(())
        });
    }
    let per = if small {
        planes.max(1)
    } else {
        th.chunk_size(planes, 1, 1)
    };
    th.chunks(y, per * out_plane, |ci, yc| {
        let mut scratch = vec![0f32; plan.scratch_len()];
        for (i, out) in yc.chunks_exact_mut(out_plane).enumerate() {
            let p = ci * per + i;
            let ch = p % channels;
            let xp = &x[p * in_plane..(p + 1) * in_plane];
            let wp = &weights[ch * taps..(ch + 1) * taps];
            let b = bias.and_then(|b| b.get(ch).copied()).unwrap_or(0.0);
            simd::depthwise_plane(plan, xp, wp, b, act, out, &mut scratch);
            if !act.in_kernel() {
                simd::unary_in_place(act, out);
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::ops::{Geometry, Window};

    fn naive(g: &Geo2, x: &[f32], w: &[f32], bias: f32) -> Vec<f32> {
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

    fn geo(h: usize, w: usize, k: usize, s: usize, d: usize, pads: [usize; 4]) -> Geo2 {
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
    /// dilations and asymmetric pads, 1 and 2 threads, against a plain loop.
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
        ] {
            let g = geo(h, w, k, s, d, pads);
            assert!(g.oh * g.ow <= SMALL_PLANE);
            let plan = Plan::new(&g);
            assert!(plan.channels_last(planes) || std::env::var_os(NO_CHANNELS_LAST_ENV).is_some());
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

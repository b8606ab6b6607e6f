//! A network's first convolution and the max pooling after it as one layer (ResNet's,
//! DenseNet's, SqueezeNet's and ShuffleNet's stems: `Conv → [BatchNormalization →] ReLU →
//! MaxPool`), run by [`channel_lanes::Plan::run_pooled`]: the convolution's rows of sums,
//! channels-last in vector lanes, are pooled while they are still in cache, and only the
//! pooled rows are transposed into planes. The convolution's own output (four times the
//! pooled one, several MiB) is never written nor read back, and the pooling's windows
//! read whole vectors of channels instead of single planes' columns.
//!
//! Formed by `crate::fusion` where [`applies`] holds when the graph is optimized (the
//! channel-lanes kernels exist for this CPU's tier and the `channel_lanes` option is on).

use crate::act::Activation;
use crate::conv::channel_lanes;
use crate::conv::direct;
use crate::conv::window::{FromGeometry, Geo2};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::simd;
use crate::threads::Threads;
use crate::weights;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::{ConvDesc, PoolDesc, PoolKind};
use backplane_core::{Tensor, TensorView, TensorViewMut};
use std::sync::Arc;

/// Whether a convolution of `c` input channels (`x`: `[N, C, H, W]`, `w`: `[M, C, kh, kw]`,
/// one group, constant weights) with activation `act`, followed by the pooling `pool`, runs
/// as one layer: a first layer (the layers of [`direct::applies`]), a horizontal stride
/// of 1 or 2, an in-kernel activation (the pool reads finished values), a 2-D max pooling
/// without dilation (a window's rows are taken as one run),
/// the channel-lanes kernels on this CPU (AVX-512 or AVX2) and the `channel_lanes` option
/// on.
pub fn applies(
    desc: &ConvDesc,
    x: &[usize],
    w: &[usize],
    act: Activation,
    pool: &PoolDesc,
) -> bool {
    let Some((conv, pooled)) = geometries(desc, x, pool) else {
        return false;
    };
    let (c, k) = (x[1], w.iter().skip(1).product::<usize>());
    desc.group <= 1
        && w.len() == 4
        && w[1] == c
        && direct::applies(c, k)
        && (1..=2).contains(&conv.sw)
        && act.in_kernel()
        && pool.kind == PoolKind::Max
        && pooled.dh == 1
        && pooled.dw == 1
        && pooled.oh > 0
        && pooled.ow > 0
        && simd::channel_lanes::supports(1)
        && crate::options::current().channel_lanes
}

/// The convolution's geometry over `x` and the pooling's over the convolution's output,
/// when both are 2-D windows CpuAcc plans.
fn geometries(desc: &ConvDesc, x: &[usize], pool: &PoolDesc) -> Option<(Geo2, Geo2)> {
    if x.len() != 4 {
        return None;
    }
    let g = desc.geometry(x).ok()?;
    let conv = Geo2::from_geometry(&g, &x[2..])?;
    let y = [x[0], 1, conv.oh, conv.ow];
    let p = pool.geometry(&y).ok()?;
    let pooled = Geo2::from_geometry(&p, &y[2..])?;
    (conv.oh > 0 && conv.ow > 0).then_some((conv, pooled))
}

/// The larger of `a` and `v`; with `NAN`, a NaN in either (as CpuRef's pooling: `v > a`
/// is false for both). Without it `f32::max`: a select kept in place would compile to a
/// masked store (see `backplane_cpu_kernels::multiversion`).
#[inline(always)]
fn max2<const NAN: bool>(a: f32, v: f32) -> f32 {
    if !NAN {
        a.max(v)
    } else if v > a || v.is_nan() {
        v
    } else {
        a
    }
}

/// `a` = the larger of `a` and `v`, lane by lane ([`max2`]).
#[inline(always)]
fn max_into<const NAN: bool>(a: &mut [f32], v: &[f32]) {
    for (a, &v) in a.iter_mut().zip(v) {
        *a = max2::<NAN>(*a, v);
    }
}

/// The window columns `kx` whose input column `left + kx·dw` lies inside `0..p.w`.
#[inline(always)]
fn inside_columns(left: isize, p: &Geo2) -> std::ops::Range<usize> {
    let dw = p.dw.max(1) as isize;
    let first = if left < 0 { (-left + dw - 1) / dw } else { 0 };
    let end = (p.w as isize - left + dw - 1).div_euclid(dw).max(0);
    (first as usize).min(p.kw)..(end as usize).min(p.kw)
}

/// The body of [`max_lanes_row`] (`NAN`: keep NaNs, [`max_lanes_row_nan`]): the maximum
/// down the rows of each column into `scratch`, then across each window's columns.
#[inline(always)]
fn max_lanes_row_body<const NAN: bool>(
    src: &[f32],
    rows: usize,
    pitch: usize,
    p: &Geo2,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let width = p.w * 16;
    let Some(columns) = scratch.get_mut(..width) else {
        return;
    };
    // The first two rows in one pass (a copy of the first alone would cost a pass).
    match (src.get(..width), src.get(pitch..pitch + width)) {
        (Some(a), Some(b)) if rows > 1 => {
            for ((c, &a), &b) in columns.iter_mut().zip(a).zip(b) {
                *c = max2::<NAN>(a, b);
            }
        }
        (Some(a), _) if rows > 0 => columns.copy_from_slice(a),
        _ => columns.fill(f32::NEG_INFINITY),
    }
    for r in 2..rows {
        if let Some(row) = src.get(r * pitch..r * pitch + width) {
            max_into::<NAN>(columns, row);
        }
    }
    for (ox, o) in out.chunks_exact_mut(16).take(p.ow).enumerate() {
        let left = (ox * p.sw) as isize - p.pl as isize;
        let mut acc = [f32::NEG_INFINITY; 16];
        for kx in inside_columns(left, p) {
            let ix = (left + (kx * p.dw) as isize) as usize;
            if let Some(v) = columns.get(ix * 16..ix * 16 + 16) {
                max_into::<NAN>(&mut acc, v);
            }
        }
        o.copy_from_slice(&acc);
    }
}

/// [`max_lanes_row_body`] for rows without NaN.
#[inline(always)]
fn max_lanes_row_fast(
    src: &[f32],
    rows: usize,
    pitch: usize,
    p: &Geo2,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    max_lanes_row_body::<false>(src, rows, pitch, p, scratch, out)
}

/// [`max_lanes_row_body`] keeping NaNs.
#[inline(always)]
fn max_lanes_row_keep_nan(
    src: &[f32],
    rows: usize,
    pitch: usize,
    p: &Geo2,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    max_lanes_row_body::<true>(src, rows, pitch, p, scratch, out)
}

backplane_cpu_kernels::multiversion! {
    /// One pooled row over channels-last rows of 16 lanes that hold no NaN: `out[ox·16 + l]`
    /// = the maximum of `src[r·pitch + ix·16 + l]` over the window's columns `ix` inside
    /// `0..p.w` and the `rows` rows given (the window's rows inside the input); −∞ where
    /// none is. `scratch` holds `p.w · 16` floats (nothing is written when it is shorter).
    pub fn max_lanes_row(
        src: &[f32],
        rows: usize,
        pitch: usize,
        p: &Geo2,
        scratch: &mut [f32],
        out: &mut [f32],
    ) => max_lanes_row_fast;
}

backplane_cpu_kernels::multiversion! {
    /// [`max_lanes_row`] for rows that may hold a NaN: a NaN read makes its output NaN.
    pub fn max_lanes_row_nan(
        src: &[f32],
        rows: usize,
        pitch: usize,
        p: &Geo2,
        scratch: &mut [f32],
        out: &mut [f32],
    ) => max_lanes_row_keep_nan;
}

/// `MaxPool(act(conv(X) + B))` for the layers [`applies`] takes, NCHW in and out.
pub struct ConvMaxPoolWorkload {
    io: Io,
    n: usize,
    c: usize,
    m: usize,
    conv: Geo2,
    pooled: Geo2,
    plan: channel_lanes::Plan,
    bias: Option<Arc<Vec<f32>>>,
    act: Activation,
    threads: Threads,
}

impl ConvMaxPoolWorkload {
    /// Build it from the constant weights `w` `[M, C, kh, kw]` and bias `b` (`[M]`).
    pub fn new(
        io: Io,
        desc: &ConvDesc,
        pool: &PoolDesc,
        w: Option<&Arc<Tensor>>,
        b: Option<&Arc<Tensor>>,
        act: Activation,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: &str| BackendError::Other(format!("{}: {m}", io.layer));
        let x = io.input_dims()?;
        let wd = io
            .inputs
            .get(1)
            .ok_or_else(|| bad("no weights"))?
            .shape
            .dims()
            .to_vec();
        let w = w.ok_or_else(|| bad("the weights must be constant"))?;
        if !applies(desc, &x, &wd, act, pool) {
            return Err(bad(
                "this convolution and pooling do not run as one layer here",
            ));
        }
        let (conv, pooled) =
            geometries(desc, &x, pool).ok_or_else(|| bad("unsupported geometry"))?;
        let (n, c, m) = (x[0], x[1], wd[0]);
        let k = c * conv.kh * conv.kw;
        let vectors = channel_lanes::vectors_for(m, threads.count());
        if !simd::channel_lanes::supports(vectors) {
            return Err(bad("no channel-lanes kernel on this CPU"));
        }
        // The same blocks a lone channel-lanes convolution of these weights shares.
        let blocks = weights::shared(w, "conv_channel_lanes", &[m, k, vectors], || {
            channel_lanes::weight_blocks(w.as_slice::<f32>()?, m, k, vectors)
        })?;
        let plan = channel_lanes::Plan::with_blocks(&conv, blocks, m, c, threads.count())?;
        Ok(ConvMaxPoolWorkload {
            io,
            n,
            c,
            m,
            conv,
            pooled,
            plan,
            bias: crate::conv::shared_bias(b)?,
            act,
            threads,
        })
    }
}

impl Workload for ConvMaxPoolWorkload {
    /// The weights were prepared at load; the bias too when it was constant.
    fn reads_constant_input(&self, slot: usize) -> bool {
        slot != 1 && (slot != 2 || self.bias.is_none())
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let copied = |slot: usize| slot == 1 || (slot == 2 && self.bias.is_some());
        self.io.check_copied(inputs, outputs, copied)?;
        let x = f32s(input(inputs, 0)?)?;
        let bias = super::bias_of(&self.bias, inputs)?;
        let y = f32s_mut(output(outputs)?)?;
        let xs = self.c * self.conv.h * self.conv.w;
        let ys = self.m * self.pooled.oh * self.pooled.ow;
        if x.len() < self.n * xs || y.len() < self.n * ys {
            return Err(BackendError::Execution(format!(
                "{}: input or output too small",
                self.io.layer
            )));
        }
        for (xb, yb) in x.chunks(xs).zip(y.chunks_mut(ys)).take(self.n) {
            self.plan
                .run_pooled(&self.threads, xb, bias, self.act, &self.pooled, yb)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pooled row, plainly: NaN wins, columns outside `0..p.w` are skipped.
    fn naive(src: &[f32], rows: usize, pitch: usize, p: &Geo2) -> Vec<f32> {
        let mut out = vec![f32::NEG_INFINITY; p.ow * 16];
        for ox in 0..p.ow {
            for kx in 0..p.kw {
                let ix = (ox * p.sw + kx * p.dw) as isize - p.pl as isize;
                if ix < 0 || ix as usize >= p.w {
                    continue;
                }
                for r in 0..rows {
                    for l in 0..16 {
                        let v = src[r * pitch + ix as usize * 16 + l];
                        let o = &mut out[ox * 16 + l];
                        if !o.is_nan() && (v.is_nan() || v > *o) {
                            *o = v;
                        }
                    }
                }
            }
        }
        out
    }

    /// Both pooled-row kernels against the plain one: widths 1 to 111, windows 1 to 3 (the
    /// widths dilated by 2 too), strides 1 and 2, left pads 0 and 1, 0 to 3 rows; a NaN for
    /// the NaN-keeping one.
    #[test]
    fn pooled_rows_match_the_plain_maximum() {
        let mut seed = 47u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for w in [1usize, 2, 5, 14, 111] {
            for (kw, sw, pl, dw) in [
                (3, 2, 0, 1),
                (3, 2, 1, 1),
                (2, 2, 0, 1),
                (3, 1, 1, 1),
                (1, 1, 0, 1),
                (3, 1, 2, 2),
            ] {
                let ow = (w + 2 * pl).saturating_sub((kw - 1) * dw + 1) / sw + 1;
                let p = Geo2 {
                    h: 3,
                    w,
                    kh: 3,
                    kw,
                    sh: 2,
                    sw,
                    dh: 1,
                    dw,
                    pt: 0,
                    pl,
                    oh: 1,
                    ow,
                };
                let pitch = w * 16 + 32;
                for rows in 0..=3 {
                    let mut src: Vec<f32> = (0..3 * pitch).map(|_| next()).collect();
                    let mut out = vec![0f32; ow * 16];
                    let mut scratch = vec![0f32; w * 16];
                    max_lanes_row(&src, rows, pitch, &p, &mut scratch, &mut out);
                    assert_eq!(
                        out,
                        naive(&src, rows, pitch, &p),
                        "w {w} k {kw} s {sw} rows {rows}"
                    );
                    src[w * 8 + 5] = f32::NAN;
                    max_lanes_row_nan(&src, rows, pitch, &p, &mut scratch, &mut out);
                    let want = naive(&src, rows, pitch, &p);
                    for (i, (g, e)) in out.iter().zip(&want).enumerate() {
                        assert!(
                            g == e || (g.is_nan() && e.is_nan()),
                            "NaN: w {w} k {kw} s {sw} rows {rows} at {i}: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }
}

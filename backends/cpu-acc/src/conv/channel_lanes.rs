//! Convolution with the output channels in vector lanes, for a network's first layer (a few
//! input channels under a window) and for stride-2 windows (see [`applies`]):
//! `simd::channel_lanes` broadcasts each input value into 16 or 32 output channels at a time,
//! reading a zero-padded copy of the input at a stride of 1 or 2, and the rows of
//! channels-last sums are transposed into the output planes. Windows over many channels are
//! taken in passes of at most [`BLOCK_TAPS`] taps, each adding to the sums of the band of
//! output rows the pass before left (in L2), so a pass's weights stay in L1.
//!
//! Against the direct path (`crate::conv::direct`: the GEMM's 12×32 tiles over the input's stride
//! phases), whose tiles stream K runs of 32 inputs each (147 of them for a 7×7 window over
//! 3 channels: more than L1 holds with the next tile's prefetched), here the block of weights
//! (K × 32 floats, 18 KiB) stays in L1 and the inputs are single floats; against the im2col
//! GEMM, nothing is packed. First layers take this path on one thread only with AVX-512 and
//! the direct path on more (the direct tiles measured faster there, not understood); with
//! AVX2 (blocks of 16 channels as two 8-lane halves, 6 pixels per tile) first layers take it
//! on any number of threads. Writing the planes from registers instead of transposing the
//! channels-last rows would save a round trip through L1 (not done). The measurements behind
//! these choices: docs/cpu-acc-bounds.md, "Channel lanes". [`Plan::run_pooled`] serves a first
//! layer fused with the max pooling after it (`crate::conv::stem_pool`), on any number of
//! threads: the rows are pooled before the transpose.

use crate::act::Activation;
use crate::conv::direct;
use crate::conv::stem_pool;
use crate::conv::window::Geo2;
use crate::gemm;
use crate::simd::{self, channel_lanes};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    static PADDED: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static ROW: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static POOLED: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// Fewest floats of padded rows handed to a thread at once by [`Plan::padded`]: below
/// it the hand-off costs more than the copy.
const PAD_SHARE: usize = 8 * 1024;

/// Whether a convolution of one group with `c` input channels, `m` filters and this window,
/// on `threads` threads, takes the channel-lanes path (the `channel_lanes` option on,
/// AVX-512 or AVX2, horizontal stride 1 or 2): a network's first layer (the layers of
/// [`direct::applies`]) on one thread (on any number with AVX2 alone), or a windowed
/// stride-2 convolution whose output rows fill the kernel's tiles (14, 28, 56 pixels...),
/// where it beat the im2col GEMM. Not taken: stride 1 (Winograd's, or no faster), 1×1
/// windows (slower: a pixel's taps are whole planes apart) and 7×7 outputs (slower). With
/// AVX2 alone (blocks of 16 channels, 24-pixel tiles)
/// only first layers take it: the stride-2 case needs the 14-pixel tiles of two vectors.
pub fn applies(geo: &Geo2, c: usize, m: usize, threads: usize) -> bool {
    // With AVX-512, first layers on several threads were slower here than on the direct
    // tiles (see the module's notes); with AVX2 the direct tiles lost on two threads too.
    let first_layer =
        (threads <= 1 || !simd::has_avx512()) && direct::applies(c, c * geo.kh * geo.kw);
    let p = channel_lanes::tile_pixels(geo.ow, vectors_for(m, threads));
    let strided =
        geo.sh == 2 && geo.sw == 2 && geo.kh * geo.kw > 1 && p == 14 && geo.ow.is_multiple_of(p);
    channel_lanes::supports(vectors_for(m, threads))
        && geo.oh > 0
        && geo.ow > 0
        && (1..=2).contains(&geo.sw)
        && (first_layer || strided)
        && crate::options::current().channel_lanes
}

/// Whether a region's first layer (NCHW input, channels-last output: a network's image
/// entering a channels-last region) takes [`Plan::run_nhwc`]: the layers of
/// [`direct::applies`], stride 1 or 2, with AVX-512 (with AVX2 alone the in-place tiles of
/// `crate::conv::nhwc` take them) and the `channel_lanes` option on.
pub fn applies_nhwc(geo: &Geo2, c: usize, m: usize) -> bool {
    simd::has_avx512()
        && channel_lanes::supports(vectors_for(m, 1))
        && direct::applies(c, c * geo.kh * geo.kw)
        && geo.oh > 0
        && geo.ow > 0
        && (1..=2).contains(&geo.sw)
        && crate::options::current().channel_lanes
}

/// Vectors of 16 output channels per block: 2, or 1 when blocks of 32 would leave threads
/// idle or the CPU has no AVX-512 (AVX2 runs one vector as two halves).
pub(crate) fn vectors_for(m: usize, threads: usize) -> usize {
    if m > 16 && m.div_ceil(32) >= threads.max(1) && channel_lanes::supports(2) {
        2
    } else {
        1
    }
}

/// The filters `w` (`[m, k]`, `k` = channels × window) in blocks of `16·vectors` output
/// channels, each `k × 16·vectors` (zero past `m`): the form [`Plan`] reads.
pub fn weight_blocks(w: &[f32], m: usize, k: usize, vectors: usize) -> Result<AlignedVec<f32>> {
    if w.len() < m * k || m == 0 || k == 0 {
        return Err(BackendError::Execution(
            "channel-lanes convolution: weights do not match".into(),
        ));
    }
    let width = 16 * vectors;
    let blocks = m.div_ceil(width);
    let mut weights = blocks
        .checked_mul(k * width)
        .and_then(|n| AlignedVec::try_zeroed(n).ok())
        .ok_or_else(|| {
            BackendError::Execution("channel-lanes convolution: cannot allocate weights".into())
        })?;
    for (o, filter) in w.chunks(k).take(m).enumerate() {
        let block = &mut weights[o / width * k * width..][..k * width];
        for (t, &v) in filter.iter().enumerate() {
            block[t * width + o % width] = v;
        }
    }
    Ok(weights)
}

/// Most taps per pass over a row: a block of 32 channels' weights for them (160 × 32 floats,
/// 20 KiB) stays in L1 while the row's pixels go by. Deeper windows (more input channels)
/// take several passes, each adding to the sums of the one before.
const BLOCK_TAPS: usize = 160;

/// Most floats of channels-last sums kept per thread (a band of output rows: 256 KiB, in
/// L2), so that each pass over a block of taps finds them in cache.
const BAND_FLOATS: usize = 64 * 1024;

/// The weights in blocks of output channels, and where each tap reads the padded input.
#[derive(Debug, Clone)]
pub struct Plan {
    geo: Geo2,
    c: usize,
    m: usize,
    /// Vectors of 16 output channels per block (1 or 2).
    vectors: usize,
    /// Padded input: rows, row pitch.
    hp: usize,
    wp: usize,
    /// Offset of tap (channel, ky, kx), in that order, in the padded input.
    taps: Vec<usize>,
    /// Taps per pass (whole input channels, at most [`BLOCK_TAPS`] unless one channel's
    /// window is larger).
    block_taps: usize,
    /// Per block of `16·vectors` channels: K × `16·vectors` weights (zero past `m`);
    /// shared with plans for other planes (`crate::weights`).
    weights: Arc<AlignedVec<f32>>,
}

impl Plan {
    /// Plan a convolution of `m` filters of `c` channels for `threads` threads (blocks of 32
    /// channels, or 16 when 32 would leave threads idle) on its filters in blocks
    /// ([`weight_blocks`] for `vectors_for(m, threads)` vectors): they depend on the filters
    /// alone, so plans for other planes share them.
    pub fn with_blocks(
        geo: &Geo2,
        weights: Arc<AlignedVec<f32>>,
        m: usize,
        c: usize,
        threads: usize,
    ) -> Result<Self> {
        let k = c * geo.kh * geo.kw;
        let vectors = vectors_for(m, threads);
        let width = 16 * vectors;
        if weights.len() != m.div_ceil(width) * k * width || m == 0 || k == 0 {
            return Err(BackendError::Execution(
                "channel-lanes convolution: weight blocks do not match".into(),
            ));
        }
        let npad = channel_lanes::reach(geo.ow, vectors);
        let wp = (npad - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1;
        let hp = (geo.oh - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1;
        let mut taps = Vec::with_capacity(k);
        for ci in 0..c {
            for ky in 0..geo.kh {
                for kx in 0..geo.kw {
                    taps.push(ci * hp * wp + ky * geo.dh * wp + kx * geo.dw);
                }
            }
        }
        let window = geo.kh * geo.kw;
        Ok(Plan {
            geo: *geo,
            c,
            m,
            vectors,
            hp,
            wp,
            taps,
            block_taps: (BLOCK_TAPS / window).max(1) * window,
            weights,
        })
    }

    /// `y = act(conv(x) + bias)` for one image: `x` its `c` input planes, `y` its `m`
    /// output planes. Blocks of output channels are shared out between the threads.
    pub fn run(
        &self,
        th: &Threads,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let g = &self.geo;
        let (plane, out_plane) = (g.h * g.w, g.oh * g.ow);
        let bad =
            |what: &str| BackendError::Execution(format!("channel-lanes convolution: {what}"));
        if x.len() < self.c * plane || y.len() < self.m * out_plane {
            return Err(bad("input or output too small"));
        }
        if bias.is_some_and(|b| b.len() < self.m) {
            return Err(bad("bias too short"));
        }
        let wp = self.wp;
        let padded = self.padded(th, x)?;
        let kernel_act = act.kernel_part();
        let width = 16 * self.vectors;
        let k = self.taps.len();
        let npad = channel_lanes::reach(g.ow, self.vectors);
        let row_len = self.vectors * npad * 16;
        let band = (BAND_FLOATS / row_len).clamp(1, g.oh);
        let padded_ref = &padded;
        let res = th.chunks(
            &mut y[..self.m * out_plane],
            width * out_plane,
            |bi, slab| {
                let channels = slab.len() / out_plane;
                let mut b = [0f32; 32];
                if let Some(bias) = bias {
                    b[..channels].copy_from_slice(&bias[bi * width..bi * width + channels]);
                }
                let w = &self.weights[bi * k * width..(bi + 1) * k * width];
                let mut sums = gemm::take(&ROW, band * row_len);
                let mut res = Ok(());
                'bands: for oy0 in (0..g.oh).step_by(band) {
                    let rows = band.min(g.oh - oy0);
                    for (taps, wb, pass) in self.passes(w, &b, kernel_act) {
                        for (r, out) in sums.chunks_exact_mut(row_len).take(rows).enumerate() {
                            let x = &padded_ref[(oy0 + r) * g.sh * wp..];
                            let v = self.vectors;
                            if !channel_lanes::row(x, g.sw, taps, wb, v, pass, g.ow, out) {
                                res = Err(bad("a row does not fit its buffers"));
                                break 'bands;
                            }
                        }
                    }
                    for (r, row) in sums.chunks_exact(row_len).take(rows).enumerate() {
                        for v in 0..self.vectors {
                            let n = channels.saturating_sub(16 * v).min(16);
                            if n == 0 {
                                break;
                            }
                            let dst = &mut slab[16 * v * out_plane + (oy0 + r) * g.ow..];
                            simd::scatter_lanes(&row[v * npad * 16..], g.ow, n, dst, out_plane);
                        }
                    }
                }
                gemm::give_back(&ROW, sums);
                if res.is_ok() && !act.in_kernel() {
                    simd::unary_in_place(act, slab);
                }
                res
            },
        );
        gemm::give_back(&PADDED, padded);
        res
    }

    /// [`Plan::run`] followed by a max pooling `pool` of its output (`pool.h × pool.w` is
    /// this convolution's `oh × ow`): `y` holds the image's `m` pooled planes, and the
    /// convolution's own planes are never written. Each block of output channels keeps the
    /// channels-last rows of sums the pooled row being made reads (kept from one pooled row
    /// to the next, each computed once), pools them with the channels in vector lanes
    /// (`crate::conv::stem_pool`) and transposes only the pooled row into the planes. The
    /// activation must be an in-kernel one (see [`Activation::in_kernel`]): the pool reads
    /// the finished values.
    pub fn run_pooled(
        &self,
        th: &Threads,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        pool: &Geo2,
        y: &mut [f32],
    ) -> Result<()> {
        let g = &self.geo;
        let (plane, pooled_plane) = (g.h * g.w, pool.oh * pool.ow);
        let bad = |what: &str| {
            BackendError::Execution(format!("pooled channel-lanes convolution: {what}"))
        };
        if pool.h != g.oh || pool.w != g.ow || pooled_plane == 0 || !act.in_kernel() {
            return Err(bad("the pooling does not read this convolution's output"));
        }
        if x.len() < self.c * plane || y.len() < self.m * pooled_plane {
            return Err(bad("input or output too small"));
        }
        if bias.is_some_and(|b| b.len() < self.m) {
            return Err(bad("bias too short"));
        }
        let wp = self.wp;
        let padded = self.padded(th, x)?;
        let width = 16 * self.vectors;
        let k = self.taps.len();
        let npad = channel_lanes::reach(g.ow, self.vectors);
        let row_len = self.vectors * npad * 16;
        // Convolution rows one pooled row reads, and rows kept (at least that many).
        let reach = pool.kh.saturating_sub(1) * pool.dh + 1;
        let cap = (BAND_FLOATS / row_len).clamp(reach, g.oh.max(reach));
        let padded_ref = &padded;
        let res = th.chunks(
            &mut y[..self.m * pooled_plane],
            width * pooled_plane,
            |bi, slab| {
                let channels = slab.len() / pooled_plane;
                let mut b = [0f32; 32];
                if let Some(bias) = bias {
                    b[..channels].copy_from_slice(&bias[bi * width..bi * width + channels]);
                }
                let w = &self.weights[bi * k * width..(bi + 1) * k * width];
                let mut sums = gemm::try_take(&ROW, cap * row_len)?;
                // The pooled row, then the column maxima it is taken from.
                let mut pooled = gemm::take(&POOLED, (pool.ow + pool.w) * 16);
                // Which kept rows hold a NaN (those pool through the NaN-keeping maximum).
                let mut nan_rows = vec![false; cap];
                // The kept rows: convolution rows lo .. lo + kept, from the buffer's start.
                let (mut lo, mut kept) = (0usize, 0usize);
                let mut res = Ok(());
                'rows: for py in 0..pool.oh {
                    let top = (py * pool.sh) as isize - pool.pt as isize;
                    let first = top.clamp(0, g.oh as isize) as usize;
                    let end = (top + reach as isize).clamp(0, g.oh as isize) as usize;
                    if lo + kept < end {
                        // Rows above this window are done with: the rest (at most the
                        // window's overlap) move to the front, and as many new rows as the
                        // buffer holds (at least those needed) are computed after them.
                        let drop = (first - lo).min(kept);
                        sums.copy_within(drop * row_len..kept * row_len, 0);
                        nan_rows.copy_within(drop..kept, 0);
                        kept -= drop;
                        lo = first;
                        let (from, to) = (lo + kept, g.oh.min(lo + cap));
                        for (taps, wb, pass) in self.passes(w, &b, act) {
                            for r in from..to {
                                let x = &padded_ref[r * g.sh * wp..];
                                let out = &mut sums[(r - lo) * row_len..][..row_len];
                                let v = self.vectors;
                                if !channel_lanes::row(x, g.sw, taps, wb, v, pass, g.ow, out) {
                                    res = Err(bad("a row does not fit its buffers"));
                                    break 'rows;
                                }
                            }
                        }
                        for r in from..to {
                            let row = &sums[(r - lo) * row_len..][..row_len];
                            nan_rows[r - lo] = simd::any_nan(row);
                        }
                        kept = to - lo;
                    }
                    let rows = end.saturating_sub(first);
                    for v in 0..self.vectors {
                        let n = channels.saturating_sub(16 * v).min(16);
                        if n == 0 {
                            break;
                        }
                        let src = &sums[(first - lo) * row_len + v * npad * 16..];
                        let nan = nan_rows[first - lo..end - lo].contains(&true);
                        let pool_row = match nan {
                            false => stem_pool::max_lanes_row,
                            true => stem_pool::max_lanes_row_nan,
                        };
                        let (row, columns) = pooled.split_at_mut(pool.ow * 16);
                        pool_row(src, rows, row_len, pool, columns, row);
                        let dst = &mut slab[16 * v * pooled_plane + py * pool.ow..];
                        simd::scatter_lanes(row, pool.ow, n, dst, pooled_plane);
                    }
                }
                gemm::give_back(&ROW, sums);
                gemm::give_back(&POOLED, pooled);
                res
            },
        );
        gemm::give_back(&PADDED, padded);
        res
    }

    /// The passes over the taps of one block of channels (`w`, its weights): each pass's
    /// taps, their weights and how it runs (adding to the sums after the first; the last
    /// adds the bias `b` and applies `act`).
    fn passes<'a>(
        &'a self,
        w: &'a [f32],
        b: &'a [f32],
        act: Activation,
    ) -> impl Iterator<Item = (&'a [usize], &'a [f32], channel_lanes::RowPass<'a>)> + 'a {
        let (k, width) = (self.taps.len(), 16 * self.vectors);
        (0..k).step_by(self.block_taps).map(move |t0| {
            let t1 = (t0 + self.block_taps).min(k);
            let pass = channel_lanes::RowPass {
                accumulate: t0 > 0,
                finish: (t1 == k).then_some((b, act)),
            };
            (&self.taps[t0..t1], &w[t0 * width..t1 * width], pass)
        })
    }

    /// The input planes zero-padded to `hp × wp` each (a buffer from [`PADDED`], to be given
    /// back): each plane's border is zeroed and its inside copied, nothing written twice.
    /// The padded rows (of all planes) are shared out between the threads in runs of at
    /// least [`PAD_SHARE`] floats: a first layer's three 224×224 planes took a fixed slice
    /// of the layer on the calling thread while the helpers waited.
    fn padded(&self, th: &Threads, x: &[f32]) -> Result<AlignedVec<f32>> {
        let g = &self.geo;
        let (hp, wp, plane) = (self.hp, self.wp, g.h * g.w);
        let mut padded = gemm::take(&PADDED, self.c * hp * wp);
        let (pt, pl) = (g.pt.min(hp), g.pl.min(wp));
        let (rows, cols) = (g.h.min(hp - pt), g.w.min(wp - pl));
        let all = self.c * hp;
        if all == 0 || wp == 0 {
            return Ok(padded);
        }
        let per = th.chunk_size(all, PAD_SHARE.div_ceil(wp), 1);
        let res = th.chunks(&mut padded[..all * wp], per * wp, |i, run| {
            for (j, row) in run.chunks_exact_mut(wp).enumerate() {
                let r = i * per + j;
                let (ci, y) = (r / hp, r % hp);
                match y.checked_sub(pt).filter(|&iy| iy < rows) {
                    Some(iy) => {
                        let src = ci * plane + iy * g.w;
                        let inside = x.get(src..src + cols).ok_or_else(|| {
                            BackendError::Execution(
                                "channel-lanes convolution: input too short".into(),
                            )
                        })?;
                        row[..pl].fill(0.0);
                        row[pl..pl + cols].copy_from_slice(inside);
                        row[pl + cols..].fill(0.0);
                    }
                    None => row.fill(0.0),
                }
            }
            Ok(())
        });
        match res {
            Ok(()) => Ok(padded),
            Err(e) => {
                gemm::give_back(&PADDED, padded);
                Err(e)
            }
        }
    }

    /// [`Plan::run`] with channels-last output: `y` holds the image's `oh·ow` pixels of `m`
    /// channels, and `r` (when given, the same shape) is added before the activation. Bands
    /// of output rows are shared out between the threads; each row's sums, per block of
    /// channels, are copied into its pixels' channels (runs of 16), with no transpose.
    pub fn run_nhwc(
        &self,
        th: &Threads,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        r: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let g = &self.geo;
        let (m, out_len) = (self.m, g.oh * g.ow * self.m);
        let bad =
            |what: &str| BackendError::Execution(format!("channel-lanes convolution: {what}"));
        if x.len() < self.c * g.h * g.w || y.len() < out_len || r.is_some_and(|r| r.len() < out_len)
        {
            return Err(bad("input or output too small"));
        }
        if bias.is_some_and(|b| b.len() < m) {
            return Err(bad("bias too short"));
        }
        let padded = self.padded(th, x)?;
        // With a residual, the activation comes after it: the kernel adds the bias only.
        let kernel_act = if r.is_some() {
            Activation::None
        } else {
            act.kernel_part()
        };
        let width = 16 * self.vectors;
        let k = self.taps.len();
        let npad = channel_lanes::reach(g.ow, self.vectors);
        let row_len = self.vectors * npad * 16;
        let pixel_row = g.ow * m;
        let per = th.chunk_size(g.oh, 1, 1);
        let padded_ref = &padded;
        let res = th.chunks(&mut y[..out_len], per * pixel_row, |ti, band| {
            let oy0 = ti * per;
            let mut sums = gemm::take(&ROW, row_len);
            let res = (|| {
                for (bi, w) in self.weights.chunks_exact(k * width).enumerate() {
                    let c0 = bi * width;
                    let channels = (m - c0).min(width);
                    let mut b = [0f32; 32];
                    if let Some(bias) = bias {
                        b[..channels].copy_from_slice(&bias[c0..c0 + channels]);
                    }
                    for (ri, out) in band.chunks_exact_mut(pixel_row).enumerate() {
                        let xrow = &padded_ref[(oy0 + ri) * g.sh * self.wp..];
                        for (taps, wb, pass) in self.passes(w, &b, kernel_act) {
                            let v = self.vectors;
                            if !channel_lanes::row(xrow, g.sw, taps, wb, v, pass, g.ow, &mut sums) {
                                return Err(bad("a row does not fit its buffers"));
                            }
                        }
                        for v in 0..self.vectors {
                            let n = channels.saturating_sub(16 * v).min(16);
                            if n == 0 {
                                break;
                            }
                            let lanes = sums[v * npad * 16..].chunks_exact(16);
                            for (px, lane) in out.chunks_exact_mut(m).zip(lanes) {
                                px[c0 + 16 * v..][..n].copy_from_slice(&lane[..n]);
                            }
                        }
                    }
                }
                Ok(())
            })();
            gemm::give_back(&ROW, sums);
            res?;
            match r {
                Some(r) => {
                    let at = oy0 * pixel_row;
                    simd::add_act_in_place(act, band, &r[at..at + band.len()]);
                }
                None if !act.in_kernel() => simd::unary_in_place(act, band),
                None => {}
            }
            Ok(())
        });
        gemm::give_back(&PADDED, padded);
        res
    }
}

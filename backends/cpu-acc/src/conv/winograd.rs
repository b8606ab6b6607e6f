//! Winograd F(4×4, 3×3) convolution for 3×3, stride-1, ungrouped f32 convolutions (dilated
//! ones as a batch of their phases: [`dilated`]).
//!
//! Lavin & Gray's minimal filtering ("Fast Algorithms for Convolutional Neural Networks",
//! 2015): one 4×4 output tile of a 3×3 correlation is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` for the
//! tile's 6×6 input window `d`. The matrices come from the Toom-Cook construction over the
//! interpolation points 0, 1, −1, 2, −2 and ∞ (six points for 4 + 3 − 1 = 6 products):
//!
//! * `Aᵀ` (4×6) evaluates the output polynomial at the points: row `i` is `pᵢ` at each finite
//!   point `p` (columns 0..5) and, for the last row only, the leading coefficient at ∞;
//! * `G` (6×3) evaluates the filter polynomial at the points, scaled by the inverse of each
//!   point's Lagrange denominator `∏_{q≠p}(p − q)` (4, −6, −6, 24, 24 for 0, 1, −1, 2, −2; 1
//!   at ∞);
//! * `Bᵀ` (6×6) holds the coefficients of the Lagrange numerators `∏_{q≠p}(x − q)`, which
//!   makes the product of the two transforms the (transposed) polynomial product, i.e. the
//!   correlation. The unit tests check the 1-D identity on every input/filter basis pair.
//!
//! With the six points the input transform needs only the constants 1, 2, 4, 5, the filter
//! transform 1/4, 1/6, 1/12, 1/24 (computed in f64, once, at load) and the output transform
//! 1, 2, 4, 8, which keeps the rounding error near the direct convolution's (see the tests for
//! the measured bound).
//!
//! Weights are transformed once, when the workload is created, into 36 matrices `U_ξ`
//! (out-channels × in-channels), each packed as a GEMM A operand. Per inference the output is
//! cut into 4×4 tiles (of every image of the batch together), processed in blocks of tiles:
//! the block's input tiles are transformed into 36 matrices `V_ξ` (in-channels × tiles, read
//! from a zero-padded copy of the input made once per inference, so that every tile's window
//! lies inside it; each `V_ξ` written straight in the SGEMM's packed-panel layout, so the
//! products pack nothing), the 36 products `M_ξ = U_ξ · V_ξ` run through the packed
//! SGEMM, and the output transform adds the bias, applies the activation and writes the valid
//! pixels of each tile (partial tiles at the right and bottom borders). The transforms work on
//! [`LANES`] tiles at a time (plain `[f32; LANES]` arithmetic compiled for AVX2 by
//! `crate::simd`). Threads take whole blocks (each writing its tiles to its own buffer, copied
//! out at the end); when there are fewer blocks than threads the blocks run in turn, each
//! block's input transform shared out over input channels, its 36 products whole between
//! the threads, and (one image) its output transform over output channels.
//!
//! Where it is taken: see [`worth`]. With AVX2 the transforms run as intrinsics
//! (`simd::winograd`: window rows loaded as vectors and transposed in registers; the safe
//! bodies here are the fallback and the reference of the tests); the transforms, not the
//! products, decide from how many channels the path pays off. A row-wise formulation of
//! the safe transforms (whole padded rows combined, then split into column phases) was
//! tried and measured slower than the lane-gather one kept here.

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed};
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
pub use backplane_cpu_kernels::winograd::{
    xi_stride, Block, Dest, OutEpilogue, Tiles, ALPHA, LANES, STRIP, TILE,
};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

mod dilated;

/// Points of the transformed domain.
const XI: usize = ALPHA * ALPHA;

/// One value of [`LANES`] tiles.
pub type Lane = [f32; LANES];

thread_local! {
    static V_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static M_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static X_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static STRIPS_BUF: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// Whether the Winograd path computes this convolution at all: 3×3, stride 1, any dilation
/// (a dilated one as the batch of its phases, [`dilated`]; groups are the caller's business).
pub fn applies(geo: &Geo2) -> bool {
    geo.kh == 3
        && geo.kw == 3
        && geo.sh == 1
        && geo.sw == 1
        && geo.dh >= 1
        && geo.dw >= 1
        && geo.oh > 0
        && geo.ow > 0
}

/// Whether `geo` is dilated (and runs as the batch of its phases).
fn is_dilated(geo: &Geo2) -> bool {
    geo.dh > 1 || geo.dw > 1
}

/// Fewest input and output channels for which the Winograd path is taken.
const MIN_CHANNELS: usize = 64;
/// Smallest output side for which it is taken.
const MIN_SIDE: usize = 8;

/// Whether the Winograd path is worth it against the im2col GEMM path. The transforms cost
/// `(c + m) / (c · m)` of the products, so few channels do not pay them back, and on tiny
/// outputs (a 7×7 plane is 4 tiles) the 36 transformed weight matrices stream for very few
/// columns. Hence at least [`MIN_CHANNELS`] channels each way and an output of at least
/// [`MIN_SIDE`] × [`MIN_SIDE`].
///
/// With several threads and fewer blocks of tiles than threads, each block's 36 products are
/// shared out whole between the threads, and its transforms over channels.
///
/// Narrower layers (`c · m` ≥ [`MIN_NARROW_PRODUCT`], each side at least
/// [`MIN_NARROW_CHANNELS`]: DenseNet's 128→32, SqueezeNet's 16→64, EfficientNetV2's 32→16) take it
/// on planes of at least [`MIN_NARROW_SIDE`] a side. The measurements behind these bounds:
/// docs/cpu-acc-bounds.md, "Winograd".
pub fn worth(geo: &Geo2, c: usize, m: usize) -> bool {
    if is_dilated(geo) {
        return worth_dilated(geo, c, m);
    }
    let wide = c >= MIN_CHANNELS && m >= MIN_CHANNELS && geo.oh >= MIN_SIDE && geo.ow >= MIN_SIDE;
    let narrow = c.min(m) >= MIN_NARROW_CHANNELS
        && c * m >= MIN_NARROW_PRODUCT
        && geo.oh >= MIN_NARROW_SIDE
        && geo.ow >= MIN_NARROW_SIDE;
    applies(geo) && (wide || narrow)
}

/// Least share of the computed tile pixels a dilated layer's output must fill (in
/// hundredths) for it to take the Winograd path.
const MIN_TILE_USE_PCT: usize = 45;

/// [`worth`] for a dilated layer: each phase is an image of the batch, padded up to whole
/// 4×4 tiles at the largest phase's size, so what decides is the share of the computed
/// tile pixels that are outputs: at least [`MIN_TILE_USE_PCT`] in a hundred (DeepLabV3's
/// dilation 2 and 4 on 28×28 fill 0.77; dilation 6 on 28×28, phases of 5×5 in 8×8 tiles,
/// 0.34, and ran slower than `crate::conv::tap_regions` there; the ASPP's dilations 12 to
/// 36 fill less still), with [`MIN_CHANNELS`] channels each way. Measurements:
/// docs/perf.md, "Session 46".
fn worth_dilated(geo: &Geo2, c: usize, m: usize) -> bool {
    let pg = dilated::phase_geo(geo);
    let tiles = geo.dh * geo.dw * pg.oh.div_ceil(TILE) * pg.ow.div_ceil(TILE);
    let computed = tiles * TILE * TILE;
    applies(geo)
        && c >= MIN_CHANNELS
        && m >= MIN_CHANNELS
        && 100 * geo.oh * geo.ow >= MIN_TILE_USE_PCT * computed
}

/// Fewest channels on either side of a narrow layer that takes the Winograd path.
const MIN_NARROW_CHANNELS: usize = 16;
/// Fewest input × output channels of a narrow layer that takes it: any pair of at least
/// [`MIN_NARROW_CHANNELS`] (16 → 16 on 56×56 and 28×28, 32 → 16 on 48×48 and 14×14, 16 → 24
/// and 16 → 48 on 13×13 all ran 1.2-2.4× faster than on the im2col GEMM at one thread,
/// AVX-512 and AVX2; docs/perf.md, "Session 51").
const MIN_NARROW_PRODUCT: usize = 16 * 16;
/// Smallest output side of a narrow layer that takes it.
const MIN_NARROW_SIDE: usize = 13;

/// Most tiles, in multiples of a block's cache-fitting size, that one image's layer with no
/// more input than output channels runs as one block on several threads.
const ONE_BLOCK_MAX_FITS: usize = 2;

/// Tiles per block (see [`Plan::block_tiles`]); `one_image`: the tiles are of one image.
fn block_tiles(c: usize, m: usize, total: usize, threads: usize, one_image: bool) -> usize {
    let nr = simd::NR;
    let fit = (12 * 1024 / (c + m).max(1)).div_ceil(nr) * nr;
    let mut per = fit.clamp(2 * nr, 8 * nr);
    if threads > 1 && one_image && c <= m && total <= ONE_BLOCK_MAX_FITS * per {
        // One block: the threads share its transforms (over channels) and its products, as
        // evenly as whole lane groups and panels allow, where blocks of an even share each
        // would pad their products to whole panels and copy their strips. Measured faster
        // for SqueezeNet's 16→64 at 55×55 and 32→128 at 27×27, slower for DenseNet's
        // 128→32 at 28×28 (hence only c ≤ m): docs/perf.md, session 46.
        return total.div_ceil(nr) * nr;
    }
    if threads > 1 {
        // An even share per thread, in whole lane groups (a block's transforms and copy-out
        // scale with its tiles), but at least one GEMM panel: fewer tiles than that run as
        // one block whose products the threads share.
        per = per
            .min(total.div_ceil(threads).div_ceil(LANES) * LANES)
            .max(nr);
    }
    per
}

/// The filter transform's matrix G: rows are the filter polynomial at 0, 1, −1, 2, −2 over
/// the Lagrange denominators 4, −6, −6, 24, 24, and the leading coefficient (∞).
const G: [[f64; 3]; ALPHA] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// The filter transform `G g Gᵀ` of one 3×3 filter (row-major), in f64.
fn filter_transform(g: &[f32]) -> [f64; XI] {
    let mut tmp = [[0f64; 3]; ALPHA];
    for (i, row) in tmp.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (0..3).map(|k| G[i][k] * f64::from(g[k * 3 + j])).sum();
        }
    }
    let mut u = [0f64; XI];
    for i in 0..ALPHA {
        for j in 0..ALPHA {
            u[i * ALPHA + j] = (0..3).map(|k| tmp[i][k] * G[j][k]).sum();
        }
    }
    u
}

/// `Bᵀ d` for one column of six lane vectors (the Lagrange numerators' coefficients).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn bt(d: &[Lane; ALPHA]) -> [Lane; ALPHA] {
    let mut r = [[0f32; LANES]; ALPHA];
    for l in 0..LANES {
        let [d0, d1, d2, d3, d4, d5] = [d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]];
        r[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
        r[1][l] = -4.0 * (d1 + d2) + d3 + d4;
        r[2][l] = 4.0 * (d1 - d2) - d3 + d4;
        r[3][l] = 2.0 * (d3 - d1) - d2 + d4;
        r[4][l] = 2.0 * (d1 - d3) - d2 + d4;
        r[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
    }
    r
}

/// `Aᵀ m` for one column of six lane vectors.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn at(m: &[Lane; ALPHA]) -> [Lane; TILE] {
    let mut r = [[0f32; LANES]; TILE];
    for l in 0..LANES {
        let [m0, m1, m2, m3, m4, m5] = [m[0][l], m[1][l], m[2][l], m[3][l], m[4][l], m[5][l]];
        let (s12, d12, s34, d34) = (m1 + m2, m1 - m2, m3 + m4, m3 - m4);
        r[0][l] = m0 + s12 + s34;
        r[1][l] = d12 + 2.0 * d34;
        r[2][l] = s12 + 4.0 * s34;
        r[3][l] = d12 + 8.0 * d34 + m5;
    }
    r
}

/// The input transform of one block: `v[ξ·vs + panel_offset(c, count, ci, t)]` (V_ξ as packed
/// GEMM panels, `vs` = [`xi_stride`]) for every channel `ci` of the
/// `c` channels of `x`, the whole batch zero-padded by [`pad_input`] (so every tile's 6×6
/// window lies inside its plane). [`LANES`] tiles at a time: their windows are gathered into
/// lane vectors (one load per value and lane, no border cases), then `Bᵀ d B` is computed
/// lane-wise.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn input_body(tiles: &Tiles, c: usize, blk: &Block, x: &[f32], v: &mut [f32]) {
    let plane = tiles.padded_plane();
    let pw = tiles.pitch;
    let mut d = [[[0f32; LANES]; ALPHA]; ALPHA];
    let mut cols = [[[0f32; LANES]; ALPHA]; ALPHA];
    // Channel by channel, the block's tiles in order: each of the 36 matrices is then
    // written as one sequential stream (tiles outermost wrote one lane vector per channel,
    // so every cache line of V was fetched twice).
    for ci in 0..c {
        let off = ci * plane;
        for t0 in (0..blk.count).step_by(LANES) {
            // Each lane's window origin in its image's first padded plane (lanes past the
            // block's end repeat its last tile).
            let org: [usize; LANES] = std::array::from_fn(|l| {
                let (b, oy, ox) = tiles.origin(blk.first + (t0 + l).min(blk.count - 1));
                b * c * plane + oy * pw + ox
            });
            for (i, row) in d.iter_mut().enumerate() {
                for (j, dv) in row.iter_mut().enumerate() {
                    *dv = std::array::from_fn(|l| {
                        x.get(org[l] + off + i * pw + j).copied().unwrap_or(0.0)
                    });
                }
            }
            // Bᵀ d: columns first, then rows (d B = (Bᵀ dᵀ)ᵀ).
            for j in 0..ALPHA {
                let col: [Lane; ALPHA] = std::array::from_fn(|i| d[i][j]);
                let r = bt(&col);
                for i in 0..ALPHA {
                    cols[i][j] = r[i];
                }
            }
            for (i, row) in cols.iter().enumerate() {
                let r = bt(row);
                for (j, vals) in r.iter().enumerate() {
                    let at = (i * ALPHA + j) * xi_stride(c, blk.pitch)
                        + gemm::panel_offset(c, blk.count, ci, t0);
                    if let Some(dst) = v.get_mut(at..at + LANES) {
                        dst.copy_from_slice(vals);
                    }
                }
            }
        }
    }
}

/// The output transform of one block, for the output channels `channels` of `ep.m`:
/// `mo[(ξ·m + co)·pitch + t]` in, each tile's 4×4 values (bias added, activation applied)
/// out to `dest`, which starts at channel `channels.start` (a part of the channels with
/// [`Dest::Output`] only for tiles of the first image: see
/// `backplane_cpu_kernels::winograd::output_channels`).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn output_body(
    geo: &Geo2,
    tiles: &Tiles,
    blk: &Block,
    ep: &OutEpilogue<'_>,
    channels: std::ops::Range<usize>,
    mo: &[f32],
    dest: &mut Dest<'_>,
) {
    let (m, bias, act) = (ep.m, ep.bias, ep.act);
    let groups = blk.count.div_ceil(LANES);
    let out_plane = geo.oh * geo.ow;
    let co0 = channels.start;
    let mut rows = [[[0f32; LANES]; ALPHA]; TILE];
    for co in channels.start..channels.end.min(m) {
        let b = bias.and_then(|b| b.get(co)).copied().unwrap_or(0.0);
        for (g, t0) in (0..blk.count).step_by(LANES).enumerate() {
            for j in 0..ALPHA {
                let col: [Lane; ALPHA] = std::array::from_fn(|i| {
                    let at = (i * ALPHA + j) * xi_stride(m, blk.pitch) + co * blk.pitch + t0;
                    let mut lane = [0f32; LANES];
                    lane.copy_from_slice(&mo[at..at + LANES]);
                    lane
                });
                let r = at(&col);
                for i in 0..TILE {
                    rows[i][j] = r[i];
                }
            }
            // strip[i][4·l + j]: output row i of the lane group's tiles, side by side.
            let mut strip = [[0f32; STRIP]; TILE];
            for (i, row) in rows.iter().enumerate() {
                let r = at(row);
                for (j, vals) in r.iter().enumerate() {
                    for l in 0..LANES {
                        strip[i][l * TILE + j] = vals[l] + b;
                    }
                }
            }
            if act.in_kernel() {
                for v in strip.iter_mut().flatten() {
                    *v = act.apply_simple(*v);
                }
            } else {
                for v in strip.iter_mut().flatten() {
                    *v = crate::math::apply(act, *v);
                }
            }
            match dest {
                Dest::Strips(buf) => {
                    let at = ((co - co0) * groups + g) * TILE * STRIP;
                    if let Some(dst) = buf.get_mut(at..at + TILE * STRIP) {
                        for (d, s) in dst.chunks_exact_mut(STRIP).zip(&strip) {
                            d.copy_from_slice(s);
                        }
                    }
                }
                Dest::Output(y) => {
                    // Runs of lanes side by side in one tile row are copied row by row.
                    let end = (t0 + LANES).min(blk.count);
                    let mut l = 0;
                    while t0 + l < end {
                        let t = blk.first + t0 + l;
                        let (bi, oy, ox) = tiles.origin(t);
                        let run = (tiles.across - ox / TILE).min(end - t0 - l);
                        let cols = (run * TILE).min(geo.ow - ox);
                        let base = (bi * m + co - co0) * out_plane + oy * geo.ow + ox;
                        for (i, src) in strip.iter().enumerate().take(TILE.min(geo.oh - oy)) {
                            let at = base + i * geo.ow;
                            if let Some(dst) = y.get_mut(at..at + cols) {
                                dst.copy_from_slice(&src[l * TILE..l * TILE + cols]);
                            }
                        }
                        l += run;
                    }
                }
            }
        }
    }
}

/// Copy the input planes (`x`, NCHW) into zero-padded planes of [`Tiles::padded_plane`]
/// floats: input `(iy, ix)` at `(iy + pt, ix + pl)`, zeros around (only the border is
/// zeroed: clearing whole planes first was an eighth of a 64-channel layer's time).
///
/// The threads take runs of planes of at least [`PAD_SHARE`] floats, about two runs each: a
/// 14×14 plane pads in a fraction of a microsecond, less than handing it to a thread (one
/// plane per item was 128 hand-offs for DenseNet's 128-channel inputs).
fn pad_input(th: &Threads, geo: &Geo2, tiles: &Tiles, x: &[f32], xp: &mut [f32]) -> Result<()> {
    let (plane, padded) = (geo.h * geo.w, tiles.padded_plane());
    if padded == 0 {
        return Ok(());
    }
    let per = th.chunk_size(xp.len() / padded, PAD_SHARE.div_ceil(padded), 1);
    th.chunks(xp, per * padded, |ci, run| {
        for (j, dst) in run.chunks_exact_mut(padded).enumerate() {
            let pi = ci * per + j;
            let src = x
                .get(pi * plane..(pi + 1) * plane)
                .ok_or_else(|| BackendError::Execution("winograd: input too short".into()))?;
            pad_plane(geo, tiles.pitch, src, dst);
        }
        Ok(())
    })
}

/// Fewest floats of padded planes handed to a thread at once by [`pad_input`].
const PAD_SHARE: usize = 8 * 1024;

/// `dst = src` (as long) in arrays of [`GAP_STORE`] floats, the last one overlapping the one
/// before: vector moves where rows of a dozen floats were a library call each.
#[inline(always)]
fn copy_row(dst: &mut [f32], src: &[f32]) {
    let n = dst.len().min(src.len());
    if n < GAP_STORE {
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    let mut i = 0;
    loop {
        let at = i.min(n - GAP_STORE);
        let from = src
            .get(at..at + GAP_STORE)
            .and_then(|s| <&[f32; GAP_STORE]>::try_from(s).ok());
        let to = dst
            .get_mut(at..at + GAP_STORE)
            .and_then(|d| <&mut [f32; GAP_STORE]>::try_from(d).ok());
        if let (Some(from), Some(to)) = (from, to) {
            *to = *from;
        }
        if at + GAP_STORE >= n {
            break;
        }
        i += GAP_STORE;
    }
}

/// Zeros stored at once between two padded rows (see [`pad_plane`]).
const GAP_STORE: usize = 8;

/// One plane of [`pad_input`]: `src` (`geo.h` rows of `geo.w`) into `dst`, rows `pw` apart.
///
/// The zeros between one row's copy and the next one's (the row's right border and the
/// next row's left one, a few floats) are stored as [`GAP_STORE`] zeros at once, past the
/// gap into the next row's values, which its copy then overwrites: filling each border as a
/// slice of its own length was a library call per border, as many as there are rows, and
/// on 14×14 planes took more time than the copies.
fn pad_plane(geo: &Geo2, pw: usize, src: &[f32], dst: &mut [f32]) {
    // Input columns past the last window (never read) are left out.
    let n = geo.w.min(pw.saturating_sub(geo.pl));
    let left = geo.pl.min(pw);
    let len = dst.len();
    let rows = len / pw.max(1);
    let (r0, r1) = (geo.pt.min(rows), (geo.pt + geo.h).min(rows));
    if n == 0 || r0 >= r1 {
        dst.fill(0.0);
        return;
    }
    // The rows above the input and the first row's left border.
    let mut at = r0 * pw + left;
    dst[..at].fill(0.0);
    for (r, run) in (r0..r1).zip(src.chunks_exact(geo.w)) {
        copy_row(&mut dst[at..at + n], &run[..n]);
        at += n;
        let next = (r + 1) * pw + left;
        // A fixed-size array store: vector moves, where a slice fill was a library call.
        let gap = dst
            .get_mut(at..at + GAP_STORE)
            .and_then(|g| <&mut [f32; GAP_STORE]>::try_from(g).ok());
        match gap {
            Some(gap) if r + 1 < r1 && next - at <= GAP_STORE => *gap = [0.0; GAP_STORE],
            // The last row's right border, the rows below and any wide gap: a fill.
            _ => dst[at..next.min(len)].fill(0.0),
        }
        at = next;
    }
    // Rows below the input.
    if let Some(rest) = dst.get_mut((r1 * pw).min(at)..) {
        rest.fill(0.0);
    }
}

/// Fewest multiply-adds of the products one thread takes at once in a block shared by
/// several threads: DenseNet's 128→32 on 14×14 (16 tiles) is 36 products of 65K each, a
/// fraction of a microsecond, less than handing each out through the step's shared counter.
const PRODUCT_MACS: usize = 256 * 1024;

/// Products per item of a block's 36 on `th` when each is `macs` multiply-adds: one where
/// each is at least [`PRODUCT_MACS`] (the finest split, so that threads running ahead take
/// a late one's share), else runs of enough of them to reach it, about two per thread
/// ([`Threads::chunk_size`]).
fn products_per_item(th: &Threads, macs: usize) -> usize {
    let least = PRODUCT_MACS.div_ceil(macs.max(1));
    if th.count() < 2 || least <= 1 {
        1
    } else {
        th.chunk_size(XI, least, 1)
    }
}

/// A convolution's weights in the Winograd domain: 36 packed `m × c` matrices.
pub struct Plan {
    c: usize,
    m: usize,
    u: Vec<Packed>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Winograd F(4,3) plan {}→{}", self.c, self.m)
    }
}

impl Plan {
    /// Whether [`Plan::new`] takes weights of `len` floats for `m` filters of `c` channels.
    pub fn takes(len: usize, m: usize, c: usize) -> bool {
        m > 0 && c > 0 && len >= m * c * 9
    }

    /// Transform `w` (`[m][c][3][3]`) and pack the 36 matrices; `None` when `w` is too short
    /// ([`Plan::takes`]).
    pub fn new(w: &[f32], m: usize, c: usize) -> Option<Self> {
        if !Self::takes(w.len(), m, c) {
            return None;
        }
        let mut u = vec![0f32; XI * m * c];
        for (f, g) in w.chunks_exact(9).take(m * c).enumerate() {
            for (xi, val) in filter_transform(g).iter().enumerate() {
                u[xi * m * c + f] = *val as f32;
            }
        }
        let u = u
            .chunks_exact(m * c)
            .map(|data| Packed::pack_a(m, c, MatView { data, rs: c, cs: 1 }))
            .collect();
        Some(Plan { c, m, u })
    }

    /// Tiles per block: as many as keep V and M (36 × (c + m) × tiles floats) near 1.5 MB,
    /// a whole number of 32-column GEMM panels, between 64 and 256; with more threads at most
    /// an even share of the tiles per thread (whole lane groups), so that each gets a block,
    /// unless the tiles are one image's, at most [`ONE_BLOCK_MAX_FITS`] such blocks, and
    /// `c ≤ m` (the threads then share one block).
    fn block_tiles(&self, total: usize, threads: usize, one_image: bool) -> usize {
        block_tiles(self.c, self.m, total, threads, one_image)
    }

    /// `y = act(conv(x, w) + bias)` for `n` images (NCHW), `geo` a geometry [`applies`] to.
    ///
    /// The vector output transform applies some activations as it stores
    /// (`backplane_cpu_kernels::winograd::applies_in_output`); with another (the SiLU,
    /// sigmoid and hard swish of EfficientNets) the whole transform would run its plain body,
    /// the activation's exponential one value at a time. Those layers store the sums without
    /// it, and the activation then runs vectorized over the output, shared out between the
    /// threads.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        th: &Threads,
        geo: &Geo2,
        n: usize,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        if backplane_cpu_kernels::winograd::applies_in_output(act) {
            return self.run_act(th, geo, n, x, bias, act, y);
        }
        self.run_act(th, geo, n, x, bias, Activation::None, y)?;
        let out = y
            .get_mut(..n * self.m * geo.oh * geo.ow)
            .ok_or_else(|| BackendError::Execution("winograd: output too short".into()))?;
        let per = th.chunk_size(out.len(), 16 * 1024, 16);
        th.chunks(out, per, |_, part| {
            simd::unary_in_place(act, part);
            Ok(())
        })
    }

    /// [`Plan::run`] with the activation applied by the output transform.
    #[allow(clippy::too_many_arguments)]
    fn run_act(
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
        if !applies(geo)
            || x.len() < n * c * geo.h * geo.w
            || y.len() < n * m * geo.oh * geo.ow
            || bias.is_some_and(|b| b.len() < m)
        {
            return Err(BackendError::Execution(
                "winograd: operands do not match the plan".into(),
            ));
        }
        if is_dilated(geo) {
            return self.run_dilated(th, geo, n, x, bias, act, y);
        }
        let tiles = Tiles::new(geo, n);
        let len = n * c * tiles.padded_plane();
        // Zeros after the planes: the vector transform reads each window row as a whole
        // vector, a little past the last window.
        let mut xp = gemm::take(&X_BUF, len + simd::WINOGRAD_SLACK);
        xp[len..].fill(0.0);
        let res = pad_input(th, geo, &tiles, x, &mut xp[..len]).and_then(|()| {
            let padded = &xp[..len + simd::WINOGRAD_SLACK];
            self.run_tiles(th, geo, n, &tiles, padded, bias, act, y)
        });
        gemm::give_back(&X_BUF, xp);
        res
    }

    /// [`Plan::run`] over the padded input.
    #[allow(clippy::too_many_arguments)]
    fn run_tiles(
        &self,
        th: &Threads,
        geo: &Geo2,
        n: usize,
        tiles: &Tiles,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        y: &mut [f32],
    ) -> Result<()> {
        let (m, tiles) = (self.m, *tiles);
        let per = self.block_tiles(tiles.total, th.count(), n == 1);
        let blocks = tiles.total.div_ceil(per);
        let block = |i: usize| {
            let first = i * per;
            let count = per.min(tiles.total - first);
            Block {
                first,
                count,
                pitch: count.div_ceil(simd::NR) * simd::NR,
            }
        };
        if th.count() == 1 || blocks < th.count() {
            // One thread, or few blocks: one after the other, each block's 36 products shared
            // out between the threads.
            let mut dest = Dest::Output(y);
            for i in 0..blocks {
                self.block(th, geo, &tiles, &block(i), x, bias, act, &mut dest)?;
            }
            return Ok(());
        }
        // Blocks in parallel, each into its own slot of one buffer of strips (see
        // [`Dest::Strips`]; the buffer is kept between executions, and nothing reads a strip
        // no block wrote), then copied out plane by plane.
        let single = Threads::single();
        let slot = m * block(0).pitch * TILE * TILE;
        let mut strips = gemm::take(&STRIPS_BUF, blocks * slot);
        let res = th.chunks(&mut strips[..blocks * slot], slot, |i, buf| {
            let mut dest = Dest::Strips(buf);
            self.block(&single, geo, &tiles, &block(i), x, bias, act, &mut dest)
        });
        let res = res.and_then(|()| self.copy_strips(th, geo, n, &tiles, per, &strips, slot, y));
        gemm::give_back(&STRIPS_BUF, strips);
        res
    }

    /// Copy the strips of every block (block `i` in `strips[i·slot..]`, `per` tiles a
    /// block) into the output planes of `y` (`n` images).
    #[allow(clippy::too_many_arguments)]
    fn copy_strips(
        &self,
        th: &Threads,
        geo: &Geo2,
        n: usize,
        tiles: &Tiles,
        per: usize,
        strips: &[f32],
        slot: usize,
        y: &mut [f32],
    ) -> Result<()> {
        let m = self.m;
        let out_plane = geo.oh * geo.ow;
        th.chunks(&mut y[..n * m * out_plane], out_plane, |pi, plane| {
            let (b, co) = (pi / m, pi % m);
            let per_image = tiles.across * tiles.down;
            for ty in 0..tiles.down {
                let oy = ty * TILE;
                let rows = TILE.min(geo.oh - oy);
                // The tiles of this tile row, in runs that share a block and a lane group:
                // such a run's row `i` is contiguous in its strip, as in the output row.
                let mut tx = 0;
                while tx < tiles.across {
                    let t = b * per_image + ty * tiles.across + tx;
                    let (first, local) = (t / per * per, t % per);
                    let in_group = LANES - local % LANES;
                    let run = in_group
                        .min(tiles.across - tx)
                        .min(per.min(tiles.total - first) - local);
                    let groups = per.min(tiles.total - first).div_ceil(LANES);
                    let at = (co * groups + local / LANES) * TILE * STRIP + (local % LANES) * TILE;
                    let part = strips
                        .get(t / per * slot..(t / per + 1) * slot)
                        .ok_or_else(|| BackendError::Execution("winograd: block missing".into()))?;
                    let ox = tx * TILE;
                    let cols = (run * TILE).min(geo.ow - ox);
                    for i in 0..rows {
                        let s = (oy + i) * geo.ow + ox;
                        let src =
                            part.get(at + i * STRIP..at + i * STRIP + cols)
                                .ok_or_else(|| {
                                    BackendError::Execution("winograd: tile missing".into())
                                })?;
                        plane[s..s + cols].copy_from_slice(src);
                    }
                    tx += run;
                }
            }
            Ok(())
        })
    }

    /// One block: input transform, 36 products (on `th`), output transform into `store`.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        th: &Threads,
        geo: &Geo2,
        tiles: &Tiles,
        blk: &Block,
        x: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        dest: &mut Dest<'_>,
    ) -> Result<()> {
        let (c, m) = (self.c, self.m);
        let (vs, ms) = (xi_stride(c, blk.pitch), xi_stride(m, blk.pitch));
        let mut v = gemm::take(&V_BUF, XI * vs);
        let mut mo = gemm::take(&M_BUF, XI * ms);
        // The transforms share the threads out over channels (input channels here, output
        // channels below); blocks run in parallel are given one thread.
        simd::winograd_input(th, tiles, c, blk, x, &mut v);
        // The 36 products are independent: with several threads each takes whole products
        // (a block's products are too narrow to split well one by one), in runs of at
        // least PRODUCT_MACS multiply-adds ([`products_per_item`]).
        let single = Threads::single();
        let vt = &v;
        let per = products_per_item(th, m * blk.count * c);
        let res = th.chunks(&mut mo[..XI * ms], per * ms, |ri, run| {
            for (j, out) in run.chunks_mut(ms).enumerate() {
                let xi = ri * per + j;
                let u = self
                    .u
                    .get(xi)
                    .ok_or_else(|| BackendError::Execution("winograd: product missing".into()))?;
                // V_ξ was written as packed panels: nothing to pack.
                let b = BSrc::Panels(&vt[xi * vs..xi * vs + c * blk.pitch]);
                gemm::sgemm(
                    &single,
                    m,
                    blk.count,
                    c,
                    &ASrc::Packed(u),
                    &b,
                    &mut out[..m * blk.pitch],
                    blk.pitch,
                    &Epilogue::default(),
                )?;
            }
            Ok(())
        });
        let res = res.and_then(|()| {
            let ep = OutEpilogue { m, bias, act };
            self.output(th, geo, tiles, blk, &ep, &mo, dest)
        });
        gemm::give_back(&V_BUF, v);
        gemm::give_back(&M_BUF, mo);
        res
    }

    /// A block's output transform: with several threads, into the output, and the block's
    /// tiles all of the first image, shared out over ranges of output channels (each thread
    /// writes its channels' planes); else on this thread.
    #[allow(clippy::too_many_arguments)]
    fn output(
        &self,
        th: &Threads,
        geo: &Geo2,
        tiles: &Tiles,
        blk: &Block,
        ep: &OutEpilogue<'_>,
        mo: &[f32],
        dest: &mut Dest<'_>,
    ) -> Result<()> {
        let m = ep.m;
        let out_plane = geo.oh * geo.ow;
        let first_image = blk.first + blk.count <= tiles.across * tiles.down;
        match dest {
            Dest::Output(y) if th.count() > 1 && first_image && m > 1 => {
                let share = m.div_ceil(th.count());
                let y = y
                    .get_mut(..m * out_plane)
                    .ok_or_else(|| BackendError::Execution("winograd: output too short".into()))?;
                th.chunks(y, share * out_plane, |i, part| {
                    let channels = i * share..((i + 1) * share).min(m);
                    simd::winograd_output(
                        geo,
                        tiles,
                        blk,
                        ep,
                        channels,
                        mo,
                        &mut Dest::Output(part),
                    );
                    Ok(())
                })
            }
            _ => {
                simd::winograd_output(geo, tiles, blk, ep, 0..m, mo, dest);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;

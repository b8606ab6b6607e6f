//! Direct convolution for layers with few input channels (a network's first layer: 3
//! channels under a 3×3 or 7×7 window), and for pointwise (1×1) layers with few output
//! channels: the GEMM's tiles with B read in place. On one thread, first layers with constant
//! weights and a horizontal stride of 1 or 2 take `crate::conv::channel_lanes` instead (faster
//! there); the
//! rest (more threads, other strides, weights given at run time) come here.
//!
//! The im2col GEMM of such a layer is short and wide (K = c·kh·kw ≤ [`MAX_K`] rows against
//! oh·ow columns), so packing its B panels and compacting its wide output cost about as much
//! as its arithmetic. Here the GEMM's own 12×32 tiles (`simd::microkernel_in_place`, the
//! same weights panels) read each im2col row in place from the input's stride phases
//! (`conv::Phases`: every im2col row is a contiguous run of a phase), one output row at a
//! time, and store straight into the output planes: no B packing, no wide output. K is one
//! block, so a tile's im2col rows (K × 32 floats, at most 20 KiB) stay in L1 while every
//! panel of weights passes over them. AVX-512, or AVX2 (its 6×16 quarters of the tile).
//! The measurements behind the bounds here: docs/cpu-acc-bounds.md, "Direct convolutions".

use crate::act::Activation;
use crate::conv::window::Geo2;
use crate::conv::{fill_phases, Phases};
use crate::gemm::{self, Packed, KC};
use crate::simd::{self, TileEpilogue, MR, NR};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;

/// The deepest im2col (taps per output) the direct path takes: a tile's im2col rows stay in
/// L1 (160 × 32 floats = 20 KiB), and K is a single block.
pub const MAX_K: usize = 160;

const _: () = assert!(MAX_K <= KC);

/// Most output channels of a pointwise convolution that takes [`run_pointwise`]: with more
/// weight rows each packed B panel is read often enough to pay for its packing.
pub const MAX_POINTWISE_M: usize = 32;

thread_local! {
    static PHASES: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// Input channels of the layers the direct path takes (an image's colour channels): with
/// more channels the packed B is reused by enough weight rows to pay for its packing.
pub const MAX_C: usize = 4;

/// Whether a convolution of one group with a window, `c` input channels and im2col depth
/// `k` takes the direct path: AVX-512 or AVX2, `c` at most [`MAX_C`], `k` at most [`MAX_K`], and
/// the `direct` option on.
pub fn applies(c: usize, k: usize) -> bool {
    simd::avx2_in_use()
        && (1..=MAX_C).contains(&c)
        && (1..=MAX_K).contains(&k)
        && crate::options::current().direct
}

/// Most output channels per group of a grouped convolution that takes the direct path (one
/// [`run`] per group): with few weight rows per group, a packed B panel of the group's
/// im2col is read too few times to pay for its copy (RegNet's groups of 8 channels: eight
/// weight rows per panel).
pub const MAX_GROUP_M: usize = 32;

/// Narrowest output rows a grouped convolution takes the direct path with: its tiles span
/// [`NR`] pixels of one output row, so narrower rows leave most lanes idle (7×7 outputs
/// were slower than the im2col GEMM per group).
pub const MIN_GROUP_OW: usize = 14;

/// Whether a grouped convolution with a window, `cg` input and `mg` output channels per
/// group, per-group im2col depth `k` and output rows `ow` wide takes the direct path, one
/// group at a time: AVX-512 or AVX2, `mg` at most [`MAX_GROUP_M`], `k` at most [`MAX_K`],
/// `ow` at least [`MIN_GROUP_OW`], and the `direct` option on. (Depthwise convolutions
/// have their own kernel and are decided before.)
pub fn applies_grouped(cg: usize, mg: usize, k: usize, ow: usize) -> bool {
    simd::avx2_in_use()
        && cg >= 1
        && ow >= MIN_GROUP_OW
        && (1..=MAX_GROUP_M).contains(&mg)
        && (1..=MAX_K).contains(&k)
        && crate::options::current().direct
}

/// Whether a pointwise convolution of one group with `m` output and `c` input channels takes
/// [`run_pointwise`]: AVX-512 or AVX2, `m` at most [`MAX_POINTWISE_M`], `c` at most [`KC`] (one K
/// block), and the `direct` option on.
pub fn applies_pointwise(m: usize, c: usize) -> bool {
    simd::avx2_in_use()
        && (1..=MAX_POINTWISE_M).contains(&m)
        && (1..=KC).contains(&c)
        && crate::options::current().direct
}

/// `y = act(conv(x) + bias)` for one image: `x` holds its `c` input planes, `y` its output
/// planes (one per row of the packed weights `pa`); `rows` are the im2col rows' offsets in
/// the input's phases.
#[allow(clippy::too_many_arguments)]
pub fn run(
    th: &Threads,
    geo: &Geo2,
    rows: &[usize],
    pa: &Packed,
    x: &[f32],
    c: usize,
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> Result<()> {
    let (ow, out_plane) = (geo.ow, geo.oh * geo.ow);
    let (m, k) = (pa.len(), rows.len());
    if out_plane == 0 || m == 0 {
        return Ok(());
    }
    let bad = |what: &str| BackendError::Execution(format!("direct convolution: {what}"));
    if pa.depth() != k || k > KC || y.len() < m * out_plane {
        return Err(bad("weights or output do not match the plan"));
    }
    let panels = pa.block(0, 0)?;
    let ph = Phases::new(geo);
    let mut padded = gemm::take(&PHASES, c * ph.plane());
    let kernel_act = act.kernel_part();
    let res = fill_phases(th, geo, &ph, x, c, &mut padded).and_then(|()| {
        let padded = &padded;
        let offs = simd::InPlaceRows::new(rows);
        if th.count() > 1 {
            let tiles = Tiles {
                geo,
                pitch: ph.pitch,
                padded,
                offs: &offs,
                panels,
                k,
                bias,
                act: kernel_act,
            };
            return by_output_rows(th, &tiles, m, y, act);
        }
        let per = th.chunk_size(m.div_ceil(MR), 1, 1);
        th.chunks(&mut y[..m * out_plane], per * MR * out_plane, |ci, yc| {
            let here = yc.len() / out_plane;
            for oy in 0..geo.oh {
                let src = padded.get(oy * ph.pitch..).unwrap_or(&[]);
                for j0 in (0..ow).step_by(NR) {
                    let nr = NR.min(ow - j0);
                    for r0 in (0..here).step_by(MR) {
                        let (p, mr) = (ci * per + r0 / MR, MR.min(here - r0));
                        let ep = TileEpilogue {
                            accumulate: false,
                            alpha: 1.0,
                            row_bias: bias.and_then(|b| b.get(p * MR..)),
                            col_bias: None,
                            last: true,
                            act: kernel_act,
                        };
                        let a = panels.get(p * k * MR..).unwrap_or(&[]);
                        let b = src.get(j0..).unwrap_or(&[]);
                        let cs = &mut yc[r0 * out_plane + oy * ow + j0..];
                        if !simd::microkernel_in_place(a, 0, b, &offs, cs, out_plane, mr, nr, &ep) {
                            return Err(bad("a tile does not fit its buffers"));
                        }
                    }
                }
            }
            if !act.in_kernel() {
                simd::unary_in_place(act, yc);
            }
            Ok(())
        })
    });
    gemm::give_back(&PHASES, padded);
    res
}

/// What the tiles of [`run`] read, for [`by_output_rows`].
struct Tiles<'a> {
    geo: &'a Geo2,
    /// Row pitch of the input's phases.
    pitch: usize,
    padded: &'a [f32],
    offs: &'a simd::InPlaceRows<'a>,
    /// The weights' single K block of panels.
    panels: &'a [f32],
    /// Im2col depth.
    k: usize,
    bias: Option<&'a [f32]>,
    /// The activation's in-kernel part.
    act: Activation,
}

/// [`run`]'s tiles on several threads, split by output rows rather than by output channels
/// (ResNet-18's 64 channels are 5⅓ weight panels: split by panels, two threads would share
/// them 40/24 rows). Each task computes a band
/// of output rows of every channel, its tiles through a small buffer (the band is not
/// contiguous in the NCHW output) copied into the band's run of each plane.
fn by_output_rows(
    th: &Threads,
    t: &Tiles<'_>,
    m: usize,
    y: &mut [f32],
    act: Activation,
) -> Result<()> {
    let g = t.geo;
    let (ow, out_plane) = (g.ow, g.oh * g.ow);
    let band = th.chunk_size(g.oh, 1, 1);
    let bands = g.oh.div_ceil(band);
    // Each task's runs: one per output plane, rows band·i .. of it.
    let mut tasks: Vec<Vec<&mut [f32]>> = (0..bands).map(|_| Vec::with_capacity(m)).collect();
    for plane in y[..m * out_plane].chunks_mut(out_plane) {
        for (task, run) in tasks.iter_mut().zip(plane.chunks_mut(band * ow)) {
            task.push(run);
        }
    }
    let bad = |what: &str| BackendError::Execution(format!("direct convolution: {what}"));
    th.chunks(&mut tasks, 1, |bi, task| {
        let Some(runs) = task.first_mut() else {
            return Ok(());
        };
        let mut tile = [0f32; MR * NR];
        let oy0 = bi * band;
        let here = runs.first().map_or(0, |r| r.len() / ow.max(1));
        for oy in oy0..oy0 + here {
            let src = t.padded.get(oy * t.pitch..).unwrap_or(&[]);
            for j0 in (0..ow).step_by(NR) {
                let nr = NR.min(ow - j0);
                for p in 0..m.div_ceil(MR) {
                    let mr = MR.min(m - p * MR);
                    let ep = TileEpilogue {
                        accumulate: false,
                        alpha: 1.0,
                        row_bias: t.bias.and_then(|b| b.get(p * MR..)),
                        col_bias: None,
                        last: true,
                        act: t.act,
                    };
                    let a = t.panels.get(p * t.k * MR..).unwrap_or(&[]);
                    let b = src.get(j0..).unwrap_or(&[]);
                    if !simd::microkernel_in_place(a, 0, b, t.offs, &mut tile, NR, mr, nr, &ep) {
                        return Err(bad("a tile does not fit its buffers"));
                    }
                    let at = (oy - oy0) * ow + j0;
                    for (r, row) in tile.chunks_exact(NR).take(mr).enumerate() {
                        let run = runs
                            .get_mut(p * MR + r)
                            .ok_or_else(|| bad("missing plane"))?;
                        run[at..at + nr].copy_from_slice(&row[..nr]);
                    }
                }
            }
        }
        if !act.in_kernel() {
            for run in runs.iter_mut() {
                simd::unary_in_place(act, run);
            }
        }
        Ok(())
    })
}

/// `y = act(W·x + bias)` for a pointwise convolution of one image: `x` holds its input
/// planes (`plane` pixels each, one per column of the packed weights `pa`, a single K
/// block), `y` its output planes (one per row of `pa`). Each tile reads its K input rows in
/// place (32 pixels of each), so B is never packed: with few weight rows a packed panel
/// would be read too few times to pay for its copy. Threads split the rows (not by panel:
/// 16 rows split 8 and 8), each reading all of `x`.
pub fn run_pointwise(
    th: &Threads,
    pa: &Packed,
    x: &[f32],
    plane: usize,
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> Result<()> {
    let (m, k) = (pa.len(), pa.depth());
    if plane == 0 || m == 0 {
        return Ok(());
    }
    let bad = |what: &str| BackendError::Execution(format!("pointwise convolution: {what}"));
    if k == 0 || k > KC || x.len() < k * plane || y.len() < m * plane {
        return Err(bad("weights or operands do not match the plan"));
    }
    let panels = pa.block(0, 0)?;
    let kernel_act = act.kernel_part();
    let offs: Vec<usize> = (0..k).map(|t| t * plane).collect();
    let offs = simd::InPlaceRows::new(&offs);
    // Rows in multiples of 4 (a tile of fewer rows does too few FMAs per load), or of the
    // AVX2 tiles' 6 rows (where a tile may start in a panel).
    let step = if simd::has_avx512() {
        4
    } else {
        simd::ROW_STEP
    };
    let rows_per = m.div_ceil(th.count()).div_ceil(step) * step;
    th.chunks(&mut y[..m * plane], rows_per * plane, |ci, yc| {
        let (r0, rows) = (ci * rows_per, yc.len() / plane);
        for j0 in (0..plane).step_by(NR) {
            let nr = NR.min(plane - j0);
            let b = x.get(j0..).unwrap_or(&[]);
            let mut r = 0;
            while r < rows {
                // The tile covering rows r0 + r .. of one weights panel.
                let (p, row0) = ((r0 + r) / MR, (r0 + r) % MR);
                let mr = (MR - row0).min(rows - r);
                let ep = TileEpilogue {
                    accumulate: false,
                    alpha: 1.0,
                    row_bias: bias.and_then(|b| b.get(r0 + r..)),
                    col_bias: None,
                    last: true,
                    act: kernel_act,
                };
                let a = panels.get(p * k * MR..).unwrap_or(&[]);
                let cs = yc.get_mut(r * plane + j0..).unwrap_or(&mut []);
                if !simd::microkernel_in_place(a, row0, b, &offs, cs, plane, mr, nr, &ep) {
                    return Err(bad("a tile does not fit its buffers"));
                }
                r += mr;
            }
        }
        if !act.in_kernel() {
            simd::unary_in_place(act, yc);
        }
        Ok(())
    })
}

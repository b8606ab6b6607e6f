//! Convolution: 1×1 (stride 1, no padding) as a plain GEMM on the input, general kernels as a
//! GEMM over the im2col matrix of the input's zero-padded stride phases (each of its rows a
//! contiguous run, see [`Phases`]), depthwise as its own kernel (`crate::conv::depthwise`). Weights are
//! packed once at workload creation; bias and activation are applied in the GEMM epilogue.
//! 3×3 stride-1 convolutions with enough channels and output take the Winograd F(4×4, 3×3)
//! path instead (`crate::conv::winograd`); those with few input channels (a network's first layer)
//! take the direct path (`crate::conv::direct`: the same tiles, reading the phases in place).

use super::{choose_conv_algorithm, ConvAlgorithm, ConvLayoutIn, ConvShape};
use crate::act::Activation;
use crate::conv::channel_lanes;
use crate::conv::depthwise;
use crate::conv::direct;
use crate::conv::grouped;
use crate::conv::pixel_rows;
use crate::conv::tap_regions;
use crate::conv::window::{FromGeometry, Geo2};
use crate::conv::winograd;
use crate::fusion::PreNorm;
use crate::gemm::{self, ASrc, BSrc, Epilogue, MatView, Packed, RowNorm, Shifted};
use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::simd;
use crate::threads::Threads;
use crate::weights;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::ops::ConvDesc;
use backplane_core::{Tensor, TensorView, TensorViewMut};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;
use std::sync::Arc;

/// Why CpuAcc cannot run a convolution with these shapes, if it cannot.
pub fn check(desc: &ConvDesc, x: &[usize], w: &[usize]) -> std::result::Result<(), String> {
    if x.len() != 3 && x.len() != 4 {
        return Err(format!(
            "CpuAcc runs 1-D and 2-D convolutions, not {}-D",
            x.len().saturating_sub(2)
        ));
    }
    let g = desc.geometry(x).map_err(|e| e.to_string())?;
    Geo2::from_geometry(&g, &x[2..]).ok_or("unsupported geometry")?;
    if w.len() != x.len() {
        return Err("weight rank differs from input rank".into());
    }
    Ok(())
}

enum Weights {
    /// One packed A matrix per group.
    Packed(Vec<Packed>),
    /// Depthwise taps, [channels, kh·kw].
    Depthwise(Vec<f32>),
    /// Weights are a run-time input: packed per execution.
    Runtime,
    /// The weights in the Winograd domain only (see [`winograd`]): the im2col copy is not
    /// kept, so the layer holds one copy of its weights.
    Winograd(winograd::Plan),
    /// A first layer's weights in blocks of output channels (see [`channel_lanes`]).
    ChannelLanes(channel_lanes::Plan),
    /// A pointwise layer's weights as the B operand of a GEMM with the pixels as rows (see
    /// [`pixel_rows`]).
    PixelRows(pixel_rows::Plan),
    /// A grouped layer's weights with each group's eight outputs innermost (see [`grouped`]).
    Grouped(grouped::Plan),
    /// A dilated layer's weights one tap at a time (see [`tap_regions`]).
    TapRegions(tap_regions::Plan),
}

/// A convolution (optionally with a fused activation).
pub struct ConvWorkload {
    io: Io,
    geo: Geo2,
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    pointwise: bool,
    /// Set for depthwise convolutions.
    dw_plan: Option<depthwise::Plan>,
    /// Convolutions with a window: where each im2col row starts in the input's [`Phases`]
    /// (see [`Shifted`]).
    shifted_rows: Option<Vec<usize>>,
    /// The taps (`ky · kw + kx`) that read some input, when others read only padding (a
    /// dilation as wide as the plane): the packed weights and shifted rows hold only these.
    live_taps: Option<Vec<usize>>,
    /// Shared with the workloads of other plans that prepared the same constant alike
    /// (`crate::weights`).
    weights: Arc<Weights>,
    bias: Option<Arc<Vec<f32>>>,
    act: Activation,
    /// A fused residual connection: input 3 is added to the convolution (after its bias)
    /// before the activation.
    residual: bool,
    /// AVX-512, and few input channels under a window or few output channels of a pointwise
    /// convolution: B read in place ([`direct`]) instead of packed ([`conv_shifted`], or
    /// the SGEMM).
    direct: bool,
    /// The GEMM over the phases packs only the output's columns ([`Shifted::gathered`]).
    gather: bool,
    /// A normalization of the input folded into the layer ([`ConvWorkload::with_pre`]).
    pre: Option<PreNorm>,
    threads: Threads,
}

impl ConvWorkload {
    /// Build it: `weights`/`bias` are the constant values when known.
    pub fn new(
        io: Io,
        desc: &ConvDesc,
        weights: Option<&Arc<Tensor>>,
        bias: Option<&Arc<Tensor>>,
        act: Activation,
        threads: Threads,
    ) -> Result<Self> {
        let bad = |m: String| BackendError::Other(format!("{}: {m}", io.layer));
        let xd = io.input_dims()?;
        let wd = io
            .inputs
            .get(1)
            .ok_or_else(|| bad("no weights".into()))?
            .shape
            .dims()
            .to_vec();
        check(desc, &xd, &wd).map_err(bad)?;
        let g = desc.geometry(&xd)?;
        let geo = Geo2::from_geometry(&g, &xd[2..]).ok_or_else(|| bad("geometry".into()))?;
        let (n, c, m) = (xd[0], xd[1], wd[0]);
        let group = desc.group.max(1);
        let mut shape = ConvShape {
            geo: &geo,
            c,
            m,
            group,
            threads: threads.count(),
            const_weights: weights.is_some(),
            layout: ConvLayoutIn::Nchw,
            winograd: true,
        };
        let (depthwise, pointwise) = (shape.depthwise(), shape.pointwise());
        let mut algorithm = choose_conv_algorithm(&shape);
        let weights = match weights {
            None => Arc::new(Weights::Runtime),
            Some(t) => {
                let w = t.as_slice::<f32>()?;
                // The Winograd plan's refusal decided before packing, so that the prepared
                // weights come from one shared packing.
                if algorithm == ConvAlgorithm::WinogradF4 && !winograd::Plan::takes(w.len(), m, c) {
                    shape.winograd = false;
                    algorithm = choose_conv_algorithm(&shape);
                }
                let live = live_taps(&geo).filter(|_| !depthwise && !pointwise);
                prepare(t, algorithm, &geo, (m, c, group), threads.count(), live)?
            }
        };
        let bias = super::shared_bias(bias)?;
        let live = live_taps(&geo).filter(|_| !depthwise && !pointwise);
        Ok(ConvWorkload {
            io,
            geo,
            n,
            c,
            m,
            group,
            pointwise,
            dw_plan: depthwise.then(|| depthwise::Plan::new(&geo)),
            shifted_rows: (!depthwise && !pointwise && geo.oh > 0 && geo.ow > 0).then(|| {
                let rows = Phases::new(&geo).rows(&geo, c / group);
                match &live {
                    Some(live) => keep_live(&rows, geo.kh * geo.kw, live),
                    None => rows,
                }
            }),
            live_taps: live,
            weights,
            bias,
            act,
            residual: false,
            direct: algorithm == ConvAlgorithm::Direct,
            gather: gathers(&geo),
            pre: None,
            threads,
        })
    }

    /// Normalize the input per channel first, `x ↦ act(x · scale + shift)` (a folded
    /// BatchNormalization and its activation): applied to each K row of B as the pointwise
    /// GEMM packs it, or by the other algorithms to a copy of the input.
    pub fn with_pre(mut self, pre: PreNorm) -> Result<Self> {
        if pre.scale.len() != self.c || pre.shift.len() != self.c {
            let why = "the input normalization needs one value per input channel";
            return Err(self.io.error(why.into()));
        }
        self.pre = Some(pre);
        Ok(self)
    }

    /// Whether the SGEMM applies the input normalization while packing B (the pointwise GEMM
    /// of one group reading the input in place).
    fn pre_in_packing(&self) -> bool {
        self.pointwise
            && !self.direct
            && self.group == 1
            && matches!(*self.weights, Weights::Packed(_))
    }

    /// The input normalized by [`ConvWorkload::with_pre`]'s map into a new buffer (the
    /// algorithms that do not apply it while packing read that).
    fn normalized(&self, pre: &PreNorm, x: &[f32]) -> Result<Vec<f32>> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(x.len())
            .map_err(|_| self.io.error("no memory for the normalized input".into()))?;
        buf.resize(x.len(), 0.0);
        let plane = self.geo.h * self.geo.w;
        let affine = (pre.scale.as_slice(), pre.shift.as_slice());
        crate::ops::batch_norm_planes(&self.threads, x, affine, pre.act, plane, &mut buf)?;
        Ok(buf)
    }

    /// Take input 3 as a residual added before the activation: `act(conv(x) + b + r)`.
    pub fn with_residual(mut self) -> Result<Self> {
        self.io.check_residual()?;
        self.residual = true;
        Ok(self)
    }

    /// The activation the convolution paths apply (none when a residual comes first).
    fn conv_act(&self) -> Activation {
        if self.residual {
            Activation::None
        } else {
            self.act
        }
    }

    /// `y = act(y + r)` for a fused residual `r`, split between the threads.
    fn add_residual(&self, inputs: &[TensorView<'_>], y: &mut [f32]) -> Result<()> {
        let r = f32s(input(inputs, 3)?)?;
        if r.len() != y.len() {
            return Err(self.io.error("residual and output differ in size".into()));
        }
        let act = self.act;
        let per = self.threads.chunk_size(y.len(), 16 * 1024, 16);
        self.threads.chunks(y, per, |i, yc| {
            simd::add_act_in_place(act, yc, &r[i * per..i * per + yc.len()]);
            Ok(())
        })
    }
}

thread_local! {
    static PADDED: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
    static WIDE_OUT: RefCell<AlignedVec<f32>> = const { RefCell::new(AlignedVec::new()) };
}

/// A convolution input zero-padded and split into stride phases, `[channel][qy][qx][y][x]`:
/// element `(y, x)` of phase `(qy, qx)` is padded-input element `(y·sh + qy, x·sw + qx)`.
/// Output `(oy, ox)` of tap `(ky, kx)` then reads phase `(ky·dh % sh, kx·dw % sw)` at
/// `(oy + ky·dh / sh, ox + kx·dw / sw)`: with the output computed at the phases' row pitch,
/// each im2col row is one contiguous run, whatever the stride and dilation.
///
/// Only the phases some tap reads are filled (a 1×1 stride-2 convolution reads one of its
/// four); the others are left as they are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phases {
    /// Rows and row pitch of one phase.
    pub(crate) rows: usize,
    pub(crate) pitch: usize,
    sh: usize,
    sw: usize,
    /// Bit `q` set: row phase `q` (column phase `q`) is read by some tap (phases past 63
    /// always count as read).
    rows_read: u64,
    cols_read: u64,
}

/// Bit `q` set for every phase `(k·d) % s` of a tap `k < taps` (all bits when `s` > 64).
fn phases_read(taps: usize, d: usize, s: usize) -> u64 {
    if s > 64 {
        return u64::MAX;
    }
    (0..taps.min(s)).fold(0, |m, k| m | 1 << ((k * d) % s))
}

impl Phases {
    pub(crate) fn new(geo: &Geo2) -> Self {
        let (sh, sw) = (geo.sh.max(1), geo.sw.max(1));
        let hp = (geo.oh.saturating_sub(1)) * sh + (geo.kh.saturating_sub(1)) * geo.dh + 1;
        let wp = (geo.ow.saturating_sub(1)) * sw + (geo.kw.saturating_sub(1)) * geo.dw + 1;
        Phases {
            rows: hp.div_ceil(sh),
            pitch: wp.div_ceil(sw),
            sh,
            sw,
            rows_read: phases_read(geo.kh, geo.dh, sh),
            cols_read: phases_read(geo.kw, geo.dw, sw),
        }
    }

    fn reads(mask: u64, q: usize) -> bool {
        q >= 64 || mask & (1 << q) != 0
    }

    /// Floats per channel.
    pub(crate) fn plane(&self) -> usize {
        self.sh * self.sw * self.rows * self.pitch
    }

    /// Floats of the row buffer [`Phases::fill`] needs.
    pub(crate) fn row_buf(&self) -> usize {
        self.pitch * self.sw
    }

    /// Fill one channel's phases from its input plane (`row`: [`Phases::row_buf`] floats).
    #[inline(always)]
    pub(crate) fn fill(&self, geo: &Geo2, x: &[f32], dst: &mut [f32], row: &mut [f32]) {
        let (sh, sw, rows, pitch) = (self.sh, self.sw, self.rows, self.pitch);
        let phase = rows * pitch;
        let row = &mut row[..pitch * sw];
        // The one column phase read, when a single one is and nothing is padded on the left.
        let single = ((2..=64).contains(&sw) && geo.pl == 0 && self.cols_read.count_ones() == 1)
            .then_some(self.cols_read.trailing_zeros() as usize);
        for qy in (0..sh).filter(|&q| Self::reads(self.rows_read, q)) {
            for y in 0..rows {
                let iy = (y * sh + qy) as isize - geo.pt as isize;
                // Destination row of phase (qy, qx) is at base + qx·phase.
                let base = qy * sw * phase + y * pitch;
                if iy < 0 || iy >= geo.h as isize {
                    for qx in (0..sw).filter(|&q| Self::reads(self.cols_read, q)) {
                        dst[base + qx * phase..base + qx * phase + pitch].fill(0.0);
                    }
                    continue;
                }
                let xrow = &x[iy as usize * geo.w..(iy as usize + 1) * geo.w];
                if let Some(qx) = single {
                    // One column phase, no left padding (a 1×1 window with a stride): its
                    // columns picked straight from the input row, with no padded copy.
                    let d = &mut dst[base + qx * phase..base + qx * phase + pitch];
                    let src = xrow.get(qx..).unwrap_or(&[]);
                    let n = src.len().div_ceil(sw).min(pitch);
                    if sw == 2 {
                        for (v, pair) in d[..n].iter_mut().zip(src.chunks(2)) {
                            *v = pair[0];
                        }
                    } else {
                        for (v, &s) in d[..n].iter_mut().zip(src.iter().step_by(sw)) {
                            *v = s;
                        }
                    }
                    d[n..].fill(0.0);
                    continue;
                }
                // The padded row, then split into column phases.
                let lo = geo.pl.min(row.len());
                let n = geo.w.min(row.len() - lo);
                let target = if sw == 1 {
                    &mut dst[base..base + pitch]
                } else {
                    &mut *row
                };
                target[..lo].fill(0.0);
                target[lo..lo + n].copy_from_slice(&xrow[..n]);
                target[lo + n..].fill(0.0);
                if sw == 2 && self.cols_read & 3 == 3 {
                    let (first, second) = dst.split_at_mut(base + phase);
                    let even = &mut first[base..base + pitch];
                    let odd = &mut second[..pitch];
                    for ((e, o), pair) in even.iter_mut().zip(odd).zip(row.chunks_exact(2)) {
                        *e = pair[0];
                        *o = pair[1];
                    }
                } else if sw >= 2 {
                    for qx in (0..sw).filter(|&q| Self::reads(self.cols_read, q)) {
                        let d = &mut dst[base + qx * phase..base + qx * phase + pitch];
                        for (v, src) in d.iter_mut().zip(row.chunks_exact(sw)) {
                            *v = src[qx];
                        }
                    }
                }
            }
        }
    }

    /// Start of each im2col row `(channel, ky, kx)` in the phases of `channels` channels.
    pub(crate) fn rows(&self, geo: &Geo2, channels: usize) -> Vec<usize> {
        let p = *self;
        let plane = p.plane();
        (0..channels)
            .flat_map(|ci| (0..geo.kh).map(move |ky| (ci, ky * geo.dh)))
            .flat_map(|(ci, dy)| {
                (0..geo.kw).map(move |kx| {
                    let dx = kx * geo.dw;
                    ci * plane
                        + ((dy % p.sh) * p.sw + dx % p.sw) * p.rows * p.pitch
                        + (dy / p.sh) * p.pitch
                        + dx / p.sw
                })
            })
            .collect()
    }
}

/// Whether a convolution's GEMM over the phases should pack only the output's columns: when
/// computing at the phases' pitch would waste more than a quarter of the work (dilated
/// convolutions, whose padding is as wide as the dilation; small planes), and the option
/// allows it.
fn gathers(geo: &Geo2) -> bool {
    let ph = Phases::new(geo);
    let wide = geo.oh.saturating_sub(1) * ph.pitch + geo.ow;
    crate::options::current().conv_gather && 4 * wide > 5 * geo.oh * geo.ow
}

/// A convolution of one group of one image as a GEMM over its [`Phases`]: the output is
/// computed at the phases' row pitch (the few extra columns of each row are dropped when it
/// is copied out), so that every im2col row is one contiguous run and packing it is a plain
/// copy; or, with `gather`, only at the output's columns, each packed panel gathered from
/// row segments.
#[allow(clippy::too_many_arguments)]
fn conv_shifted(
    th: &Threads,
    geo: &Geo2,
    rows: &[usize],
    pa: &Packed,
    xg: &[f32],
    cg: usize,
    yg: &mut [f32],
    ep: &Epilogue<'_>,
    gather: bool,
) -> Result<()> {
    let ph = Phases::new(geo);
    let wp = ph.pitch;
    let out_plane = geo.oh * geo.ow;
    let mg = pa.len();
    let wide = (geo.oh - 1) * wp + geo.ow;
    let mut padded = gemm::take(&PADDED, cg * ph.plane());
    if wp == geo.ow || gather {
        // The phases are as wide as the output (a 1×1 window, no side padding), or the
        // columns are gathered: the product is the output, with nothing to drop.
        let res = fill_phases(th, geo, &ph, xg, cg, &mut padded).and_then(|()| {
            let src = BSrc::Shifted(if wp == geo.ow {
                Shifted::contiguous(&padded, rows)
            } else {
                Shifted::gathered(&padded, rows, geo.ow, wp)
            });
            let y = &mut yg[..mg * out_plane];
            gemm::sgemm(
                th,
                mg,
                out_plane,
                rows.len(),
                &ASrc::Packed(pa),
                &src,
                y,
                out_plane,
                ep,
            )
        });
        gemm::give_back(&PADDED, padded);
        return res;
    }
    let mut out = gemm::take(&WIDE_OUT, mg * wide);
    // The copies before and after the product are split between the threads too (in
    // shares of at least COPY_SHARE floats): for convolutions with few input channels (a
    // network's first layer) they are most of the work.
    let res = fill_phases(th, geo, &ph, xg, cg, &mut padded);
    let res = res.and_then(|()| {
        let src = BSrc::Shifted(Shifted::contiguous(&padded, rows));
        gemm::sgemm(
            th,
            mg,
            wide,
            rows.len(),
            &ASrc::Packed(pa),
            &src,
            &mut out[..mg * wide],
            wide,
            ep,
        )
    });
    let res = res.and_then(|()| {
        let out = &out;
        let per = th.chunk_size(mg, COPY_SHARE.div_ceil(out_plane.max(1)), 1);
        th.chunks(&mut yg[..mg * out_plane], per * out_plane, |i, ys| {
            for (j, yo) in ys.chunks_exact_mut(out_plane).enumerate() {
                let p = i * per + j;
                let wo = out.get(p * wide..(p + 1) * wide).unwrap_or(&[]);
                for (yr, wr) in yo.chunks_exact_mut(geo.ow).zip(wo.chunks(wp)) {
                    yr.copy_from_slice(&wr[..geo.ow]);
                }
            }
            Ok(())
        })
    });
    gemm::give_back(&PADDED, padded);
    gemm::give_back(&WIDE_OUT, out);
    res
}

/// The smallest share of a copy handed to a thread (floats): below it, waking a helper costs
/// more than the copy.
const COPY_SHARE: usize = 16 * 1024;

/// Fill `padded` with the stride phases of the `cg` input planes of `xg`, the planes shared
/// out between threads in shares of at least [`COPY_SHARE`] floats.
pub(crate) fn fill_phases(
    th: &Threads,
    geo: &Geo2,
    ph: &Phases,
    xg: &[f32],
    cg: usize,
    padded: &mut [f32],
) -> Result<()> {
    let (in_plane, plane) = (geo.h * geo.w, ph.plane());
    let per = th.chunk_size(cg, COPY_SHARE.div_ceil(plane), 1);
    th.chunks(&mut padded[..cg * plane], per * plane, |i, dst| {
        let mut row = vec![0f32; ph.row_buf()];
        for (j, d) in dst.chunks_exact_mut(plane).enumerate() {
            let ci = i * per + j;
            ph.fill(geo, &xg[ci * in_plane..(ci + 1) * in_plane], d, &mut row);
        }
        Ok(())
    })
}

/// The taps (`ky · kw + kx`) that read some input pixel for some output, when some read
/// only padding (`None` when every tap is live, or none is).
fn live_taps(geo: &Geo2) -> Option<Vec<usize>> {
    // Tap offset `k · d` reads input `o · s + k · d - pad` for outputs `o` in `0..out`.
    let reads = |k: usize, d: usize, s: usize, pad: usize, out: usize, size: usize| {
        let first = (k * d) as isize - pad as isize;
        let last = first + (out.saturating_sub(1) * s) as isize;
        out > 0 && last >= 0 && first < size as isize
    };
    let live: Vec<usize> = (0..geo.kh)
        .filter(|&ky| reads(ky, geo.dh, geo.sh, geo.pt, geo.oh, geo.h))
        .flat_map(|ky| {
            (0..geo.kw)
                .filter(|&kx| reads(kx, geo.dw, geo.sw, geo.pl, geo.ow, geo.w))
                .map(move |kx| ky * geo.kw + kx)
        })
        .collect();
    (!live.is_empty() && live.len() < geo.kh * geo.kw).then_some(live)
}

/// The entries of `per_tap`-long groups (one per channel) at the `live` taps.
fn keep_live<T: Copy>(v: &[T], per_tap: usize, live: &[usize]) -> Vec<T> {
    v.chunks(per_tap.max(1))
        .flat_map(|g| live.iter().filter_map(|&t| g.get(t).copied()))
        .collect()
}

/// The constant weights `t` prepared for `algorithm`, through the shared cache
/// (`crate::weights`): the key holds what the prepared form depends on besides the values.
/// Winograd, pixel-row, grouped, depthwise and channel-lanes forms depend on the channel
/// counts (and window) only, so plans at every input size share them; the GEMM's packed
/// weights also on the live taps (which follow the geometry only for dilations as wide as
/// the plane), and so do the tap-region weights (each plan places the taps' rectangles on
/// its own plane).
fn prepare(
    t: &Arc<Tensor>,
    algorithm: ConvAlgorithm,
    geo: &Geo2,
    (m, c, group): (usize, usize, usize),
    threads: usize,
    live: Option<Vec<usize>>,
) -> Result<Arc<Weights>> {
    let w = || t.as_slice::<f32>();
    match algorithm {
        ConvAlgorithm::WinogradF4 => weights::shared(t, "conv_winograd_f4", &[m, c], || {
            let plan = winograd::Plan::new(w()?, m, c);
            plan.map(Weights::Winograd)
                .ok_or_else(|| BackendError::Other("Winograd weights do not match".into()))
        }),
        ConvAlgorithm::ChannelLanes => {
            // The weight blocks are shared; the plan around them (where each tap reads the
            // padded plane) is this workload's own.
            let k = c * geo.kh * geo.kw;
            let vectors = channel_lanes::vectors_for(m, threads);
            let blocks = weights::shared(t, "conv_channel_lanes", &[m, k, vectors], || {
                channel_lanes::weight_blocks(w()?, m, k, vectors)
            })?;
            let plan = channel_lanes::Plan::with_blocks(geo, blocks, m, c, threads)?;
            Ok(Arc::new(Weights::ChannelLanes(plan)))
        }
        ConvAlgorithm::Depthwise => weights::shared(t, "conv_depthwise", &[], || {
            Ok(Weights::Depthwise(w()?.to_vec()))
        }),
        ConvAlgorithm::PixelRows => {
            let taps = geo.kh * geo.kw;
            weights::shared(t, "conv_pixel_rows", &[m, c, taps], || {
                let plan = pixel_rows::Plan::new_tap_major(w()?, m, c, taps)?;
                Ok(Weights::PixelRows(plan))
            })
        }
        ConvAlgorithm::TapRegions => {
            // The per-tap weights are shared; the plan around them (each tap's rectangle
            // on the plane) is this workload's own.
            let window = geo.kh * geo.kw;
            let live = tap_regions::live_taps(geo);
            let mut params = vec![m, c, window];
            params.extend(&live);
            let taps = weights::shared(t, "conv_tap_regions", &params, || {
                tap_regions::TapWeights::new(w()?, m, c, window, &live)
            })?;
            let plan = tap_regions::Plan::with_weights(geo, taps)?;
            Ok(Arc::new(Weights::TapRegions(plan)))
        }
        ConvAlgorithm::Grouped => weights::shared(t, "conv_grouped", &[group, c], || {
            Ok(Weights::Grouped(grouped::Plan::new(
                w()?,
                group,
                c / group,
            )?))
        }),
        ConvAlgorithm::WinogradF2 | ConvAlgorithm::Direct | ConvAlgorithm::Gemm => {
            let taps = geo.kh * geo.kw;
            let mut params = vec![m, group, c / group, taps];
            params.extend(live.iter().flatten().copied());
            weights::shared(t, "conv_gemm_a", &params, || {
                let cg = c / group;
                Ok(Weights::Packed(pack_live(
                    w()?,
                    m,
                    group,
                    cg,
                    geo,
                    live.as_deref(),
                )))
            })
        }
    }
}

/// Pack the weights for the GEMM over the phases: only the `live` taps' columns when some
/// taps read only padding (a sparser product with the same result), else all of them.
fn pack_live(
    w: &[f32],
    m: usize,
    group: usize,
    cg: usize,
    geo: &Geo2,
    live: Option<&[usize]>,
) -> Vec<Packed> {
    let taps = geo.kh * geo.kw;
    match live {
        Some(live) => {
            let compact = keep_live(w, taps, live);
            pack_weights(&compact, m, group, cg * live.len())
        }
        None => pack_weights(w, m, group, cg * taps),
    }
}

fn pack_weights(w: &[f32], m: usize, group: usize, k: usize) -> Vec<Packed> {
    let mg = m / group;
    (0..group)
        .map(|g| {
            let view = MatView {
                data: &w[g * mg * k..(g + 1) * mg * k],
                rs: k,
                cs: 1,
            };
            Packed::pack_a(mg, k, view)
        })
        .collect()
}

impl Workload for ConvWorkload {
    fn reads_constant_input(&self, slot: usize) -> bool {
        self.reads_input(slot)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |slot| !self.reads_input(slot))?;
        let mut x = f32s(input(inputs, 0)?)?;
        let normalized;
        if let Some(pre) = self.pre.as_ref().filter(|_| !self.pre_in_packing()) {
            normalized = self.normalized(pre, x)?;
            x = &normalized;
        }
        let bias = super::bias_of(&self.bias, inputs)?;
        let y = f32s_mut(output(outputs)?)?;
        self.convolve(inputs, x, bias, y)?;
        if self.residual {
            self.add_residual(inputs, y)?;
        }
        Ok(())
    }
}

impl ConvWorkload {
    /// Weights are read at execution only when they were not prepared at load, the bias
    /// only when it was not copied; X and the residual always.
    fn reads_input(&self, slot: usize) -> bool {
        match slot {
            1 => matches!(*self.weights, Weights::Runtime),
            2 => self.bias.is_none(),
            _ => true,
        }
    }

    /// `f` on each image of the batch: its input planes and its output planes.
    fn per_image(
        &self,
        x: &[f32],
        y: &mut [f32],
        mut f: impl FnMut(&[f32], &mut [f32]) -> Result<()>,
    ) -> Result<()> {
        let geo = &self.geo;
        let (xs, ys) = (self.c * geo.h * geo.w, self.m * geo.oh * geo.ow);
        for (xb, yb) in x.chunks(xs).zip(y.chunks_mut(ys)).take(self.n) {
            f(xb, yb)?;
        }
        Ok(())
    }

    /// `y = conv_act(conv(x) + bias)` by whichever path the workload prepared.
    fn convolve(
        &self,
        inputs: &[TensorView<'_>],
        x: &[f32],
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<()> {
        let geo = &self.geo;
        let act = self.conv_act();
        if let Weights::Winograd(plan) = &*self.weights {
            return plan.run(&self.threads, geo, self.n, x, bias, act, y);
        }
        let threads = &self.threads;
        match &*self.weights {
            Weights::ChannelLanes(plan) => {
                return self.per_image(x, y, |xb, yb| plan.run(threads, xb, bias, act, yb));
            }
            Weights::PixelRows(plan) => {
                return self.per_image(x, y, |xb, yb| {
                    plan.run_conv(threads, geo, xb, bias, act, yb)
                });
            }
            Weights::TapRegions(plan) => {
                return self.per_image(x, y, |xb, yb| plan.run(threads, xb, bias, act, yb));
            }
            Weights::Grouped(plan) => {
                return self.per_image(x, y, |xb, yb| plan.run(threads, geo, xb, bias, act, yb));
            }
            _ => {}
        }
        let runtime_weights;
        let weights = match &*self.weights {
            Weights::Runtime => {
                let w = f32s(input(inputs, 1)?)?;
                if self.group == self.c && self.m == self.c && self.c > 1 {
                    runtime_weights = Weights::Depthwise(w.to_vec());
                } else {
                    let (cg, live) = (self.c / self.group, self.live_taps.as_deref());
                    runtime_weights =
                        Weights::Packed(pack_live(w, self.m, self.group, cg, geo, live));
                }
                &runtime_weights
            }
            other => other,
        };
        match weights {
            Weights::Depthwise(w) => match &self.dw_plan {
                Some(plan) => depthwise::run(&self.threads, plan, self.c, x, w, bias, act, y),
                None => Err(self.io.error("depthwise plan missing".into())),
            },
            Weights::Packed(packed) => {
                let (cg, mg) = (self.c / self.group, self.m / self.group);
                let (in_plane, out_plane) = (geo.h * geo.w, geo.oh * geo.ow);
                let k = cg * self.live_taps.as_ref().map_or(geo.kh * geo.kw, Vec::len);
                for b in 0..self.n {
                    for (g, pa) in packed.iter().enumerate() {
                        let xs = (b * self.c + g * cg) * in_plane;
                        let xg = &x[xs..xs + cg * in_plane];
                        let ys = (b * self.m + g * mg) * out_plane;
                        let yg = &mut y[ys..ys + mg * out_plane];
                        let ep = Epilogue {
                            row_bias: bias.map(|bb| &bb[g * mg..(g + 1) * mg]),
                            act,
                            ..Epilogue::default()
                        };
                        if !self.pointwise {
                            // Empty outputs have no shifted rows, and nothing to compute.
                            match &self.shifted_rows {
                                Some(rows) if self.direct => {
                                    let b = ep.row_bias;
                                    direct::run(&self.threads, geo, rows, pa, xg, cg, b, act, yg)?;
                                }
                                Some(rows) => {
                                    let (th, gather) = (&self.threads, self.gather);
                                    conv_shifted(th, geo, rows, pa, xg, cg, yg, &ep, gather)?
                                }
                                None => {}
                            }
                            continue;
                        }
                        if self.direct {
                            let (th, b) = (&self.threads, ep.row_bias);
                            direct::run_pointwise(th, pa, xg, in_plane, b, act, yg)?;
                            continue;
                        }
                        let view = MatView {
                            data: xg,
                            rs: in_plane,
                            cs: 1,
                        };
                        let src = match &self.pre {
                            Some(pre) if self.pre_in_packing() => {
                                let (scale, shift) = (&pre.scale, &pre.shift);
                                BSrc::Normed(
                                    view,
                                    RowNorm {
                                        scale,
                                        shift,
                                        act: pre.act,
                                    },
                                )
                            }
                            _ => BSrc::View(view),
                        };
                        gemm::sgemm(
                            &self.threads,
                            mg,
                            out_plane,
                            k,
                            &ASrc::Packed(pa),
                            &src,
                            yg,
                            out_plane,
                            &ep,
                        )?;
                    }
                }
                Ok(())
            }
            Weights::Runtime
            | Weights::Winograd(_)
            | Weights::ChannelLanes(_)
            | Weights::PixelRows(_)
            | Weights::TapRegions(_)
            | Weights::Grouped(_) => Err(self.io.error("weights were not prepared".into())),
        }
    }
}

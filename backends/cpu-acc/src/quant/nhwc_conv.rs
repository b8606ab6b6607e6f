//! The channels-last int8 convolution (`QLinearConv` with `nhwc` set by [`super::region`]):
//! input and output `[N, H, W, C]`, so a TFLite model's tensors run in their own layout with
//! no transposes between layers.
//!
//! - Depthwise layers read the 8-bit input in place, channels as vector lanes
//!   (`qgemm::depthwise_rows`): per output pixel and block of channels every tap is summed in
//!   registers (the input zero point folded into the bias, so the raw bytes are multiplied)
//!   and requantized there; a window leaving the image reads a row of zero points instead.
//! - Other (one-group) layers first center the input into a zero-padded 16-bit copy (except
//!   for 1×1 layers), then are one GEMM with the output pixels as rows: A holds each
//!   pixel's window in `(ky, kx, c)` order (copied runs of the padded input; for a 1×1 layer
//!   the centered pixels themselves), B the constant centered weights packed once, and each
//!   tile of sums is requantized in registers.
//! - Where the int8 tier has a `vpdpbusd` tile and the centered weights fit i8, those
//!   layers run the byte GEMM instead ([`quads`]): A as unsigned bytes (u8 pixels read in
//!   place, i8 ones flipped by 128 in a block copy; windows from a byte-padded copy), the
//!   activations' zero point folded into the bias.
//!
//! The sums and the requantization are those of the NCHW path ([`super::conv`]), so both
//! layouts give the same bytes.

use super::conv::{
    alloc, centered, geometry, padded_extent, plan_workload, requant_params, Geometry, QConvDesc,
};
use super::packed_b::{packed_b, shared_requant, PackedB, Source};
use super::QLINEAR_CONV;
use crate::io::Io;
use crate::plan::Plan;
use crate::scratch;
use crate::threads::{Columns, GemmSplit, Threads};
use crate::weights;
use backplane_backend_api::{LayerDesc, Result, Workload};
use backplane_core::quant::Requantization;
use backplane_core::{DataType, Tensor, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    center_i8, center_u8, depthwise_rows, pair_tile_rows, qgemm_requantized, ColumnRequant,
    DwGeometry, DwLayer, DwWeights, QPackedB, QuadPackedB, RequantRange, QNR,
};
use backplane_cpu_kernels::AlignedVec;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::{Arc, Mutex};

#[path = "nhwc_quads.rs"]
mod quads;

#[path = "nhwc_pair.rs"]
pub(super) mod pair;

/// Output pixels per GEMM block (A rows centered, then summed and requantized together).
const BLOCK_ROWS: usize = 32;

/// The fewest elements of the padded input copy a thread takes (less is copied faster than
/// handed over).
const PADDED_COPY_SHARE: usize = 32 * 1024;

/// The fewest multiply-adds a thread's share of a GEMM layer (pointwise or im2col) carries:
/// a layer of less than twice this runs on the calling thread, whose hand-off to a second
/// thread and back would cost about what the second thread saves (a small model's late
/// layers). Set by a rough two-thread A/B on a loaded host (docs/tflite.md, session 48).
pub(super) const MIN_SHARED_MACS: usize = 1 << 18;

/// [`MIN_SHARED_MACS`] for the depthwise layers, whose multiply-adds cost several times a
/// GEMM's.
const MIN_SHARED_DW_MACS: usize = 1 << 15;

/// How `th` shares a GEMM layer of `pixels` output pixels (rows), `per_pixel` multiply-adds
/// each, over `m` output channels, on a kernel of tiles of `tile` rows whose short tiles
/// cost about their rows where they are `grain` rows or more (`grain` divides `tile`; the
/// pair GEMM passes `tile`): as [`Threads::gemm_split`] decides, each share at least
/// [`MIN_SHARED_MACS`], or all on the calling thread below twice that.
///
/// Shares of rows are whole tiles, not whole blocks of the callers' A buffers (a task runs
/// its rows in blocks, the last one short): a layer of few blocks (144 pixels, three blocks
/// of 48) is then cut evenly by rows, where whole blocks would leave one thread two of
/// three and push the layer to the channel split, which copies A once and each share's
/// output into place. Where every thread can have a tile's rows, shares are cut at grains
/// instead (36 pixels at two threads: 18 rows each, no copies); fewer rows (a 3×3 plane)
/// are left to the channel split, which shares them better than a short tile would.
fn gemm_share(
    th: &Threads,
    pixels: usize,
    per_pixel: usize,
    m: usize,
    tile: usize,
    grain: usize,
) -> GemmSplit {
    let (tile, per_pixel) = (tile.max(1), per_pixel.max(1));
    if pixels.saturating_mul(per_pixel) < 2 * MIN_SHARED_MACS {
        return GemmSplit::Rows(pixels.max(1));
    }
    let unit = if pixels >= tile.saturating_mul(th.count()) {
        grain.clamp(1, tile)
    } else {
        tile
    };
    let min_pixels = MIN_SHARED_MACS.div_ceil(per_pixel);
    let per_rows = th.chunk_size(pixels, min_pixels, unit);
    th.gemm_split(pixels, m.div_ceil(QNR), per_rows, unit)
}

/// Take the buffer kept in `slot` (empty the first time, or while another execution of the
/// layer holds it).
fn take<T>(slot: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *slot.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Give a buffer back to `slot` for the next execution.
fn keep<T>(slot: &Mutex<Vec<T>>, v: Vec<T>) {
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = v;
}

thread_local! {
    /// Each thread's block of centered A rows for [`NhwcQConv::gemm_by_pixels`], kept
    /// between layers and executions (not allocated and zeroed per share).
    static PAIR_BLOCK: RefCell<AlignedVec<i16>> = const { RefCell::new(AlignedVec::new()) };
}

/// Output rows of the stack tile a channel share's GEMM writes before its rows are copied
/// into the share's columns ([`share_columns`]).
const TILE_ROWS: usize = 48;
/// Column panels of that tile.
const TILE_PANELS: usize = 4;

/// Write one channel share of a GEMM of `rows` output rows into its columns `cols` of the
/// output: `gemm(rows, panels, tile, ld)` computes the requantized bytes of output rows
/// `rows` and column panels `panels` (of the share's `panels`) into `tile` at pitch `ld`,
/// `TILE_ROWS` rows by `TILE_PANELS` panels at a time, each row of which is then copied
/// into place. The threads write their columns of the shared output in place this way, with
/// no lock and no buffer of their own; the tile stays in the cache (the share's B panels
/// are read once per `TILE_ROWS` rows, as the kernels' own blocks of A about do). False
/// when `gemm` refuses its operands or a row does not fit the share.
fn share_columns(
    cols: &mut Columns<'_, u8>,
    rows: usize,
    panels: Range<usize>,
    gemm: impl Fn(Range<usize>, Range<usize>, &mut [u8], usize) -> bool,
) -> bool {
    let ld = TILE_PANELS * QNR;
    let mut tile = [0u8; TILE_ROWS * TILE_PANELS * QNR];
    let mut r0 = 0;
    while r0 < rows {
        let r1 = (r0 + TILE_ROWS).min(rows);
        let mut p = panels.start;
        while p < panels.end {
            let pe = (p + TILE_PANELS).min(panels.end);
            let c0 = (p - panels.start) * QNR;
            let width = cols.width().saturating_sub(c0).min((pe - p) * QNR);
            if !gemm(r0..r1, p..pe, &mut tile, ld) {
                return false;
            }
            for (i, src) in tile.chunks_exact(ld).take(r1 - r0).enumerate() {
                match cols.row(r0 + i).and_then(|row| row.get_mut(c0..c0 + width)) {
                    Some(dst) => dst.copy_from_slice(&src[..width]),
                    None => return false,
                }
            }
            p = pe;
        }
        r0 = r1;
    }
    true
}

/// `[N, H, W, C]` as the NCHW-ordered info the shared geometry check reads.
fn as_nchw(t: &TensorInfo) -> std::result::Result<TensorInfo, String> {
    match t.shape.dims() {
        &[n, h, w, c] => Ok(TensorInfo::new(t.dtype, vec![n, c, h, w])),
        d => Err(format!(
            "{QLINEAR_CONV}: channels-last tensor {d:?} is not 4-D"
        )),
    }
}

/// True when a channels-last convolution of this description and these NCHW dims runs here:
/// depthwise (one channel per group, no depth multiplier) or one group.
pub(super) fn runs(d: &QConvDesc, c: usize, m: usize) -> bool {
    d.group == 1 || (d.group == c && m == c)
}

/// The plan of a channels-last int8 convolution (tensor types checked by the caller).
pub(super) fn plan(d: QConvDesc, layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let [x, w, _bias] = layer.inputs.as_slice() else {
        return Err(format!("{QLINEAR_CONV} takes x, w and an int32 bias"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    let geo = geometry(&d, &as_nchw(x)?, w, &as_nchw(y)?)?;
    if !runs(&d, geo.c, geo.m) {
        return Err(format!(
            "{QLINEAR_CONV}: channels-last with {} groups over {} channels (only depthwise or \
             one group)",
            d.group, geo.c
        ));
    }
    plan_workload(layer, d, geo, NhwcQConv::new)
}

/// How the layer computes its sums.
enum Kind {
    /// The centered weights per (tap, channel), the bias with the input zero point folded in,
    /// the requantization and the layer's geometry.
    Depthwise(Box<DwLayer>),
    /// The centered weights packed as B (`KH·KW·C` × M) and the requantization per output
    /// channel; `pointwise` for a 1×1, stride-1, unpadded layer, whose A rows are the input
    /// pixels themselves.
    Gemm {
        b: Arc<QPackedB>,
        rq: Arc<ColumnRequant>,
        pointwise: bool,
    },
    /// The byte GEMM's form of `Gemm` ([`quads`]): the centered weights as i8 quads, the
    /// requantization's bias less the activations' (unsigned) zero point times each
    /// channel's weight sum.
    Quads {
        b: Arc<QuadPackedB>,
        rq: Arc<ColumnRequant>,
        pointwise: bool,
    },
}

/// Where a GEMM layer's A rows come from.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// The input pixels themselves (a pointwise layer), centered.
    Pixels(&'a [u8]),
    /// Windows of the padded centered input.
    Windows(&'a [i16]),
}

/// The channels-last int8 convolution.
struct NhwcQConv {
    io: Io,
    d: QConvDesc,
    geo: Geometry,
    x_signed: bool,
    kind: Kind,
    /// The zero-padded centered input, kept between executions: its padding is written once
    /// (the interior is rewritten each time), and a large buffer is not mapped afresh.
    padded: Mutex<Vec<i16>>,
    /// The byte GEMM's padded input (unsigned bytes, padding at the zero point), kept the
    /// same way.
    padded_bytes: Mutex<Vec<u8>>,
    /// The A rows of a layer shared by channels (every output pixel's), kept the same way:
    /// centered values on the pair GEMM (the K padding zero), unsigned bytes on the byte
    /// GEMM.
    a_pairs: Mutex<Vec<i16>>,
    /// See `a_pairs`.
    a_bytes: Mutex<Vec<u8>>,
    th: Threads,
}

impl NhwcQConv {
    fn new(
        io: Io,
        d: QConvDesc,
        geo: Geometry,
        wt: &Arc<Tensor>,
        bias: &[i32],
        th: Threads,
    ) -> Result<Self> {
        let w = wt.bytes();
        let x_signed = io.inputs[0].dtype == DataType::I8;
        let w_signed = io.inputs[1].dtype == DataType::I8;
        let (m, c) = (geo.m, geo.c);
        let cg = c / d.group;
        let [kh, kw] = d.kernel;
        let kk = kh * kw;
        let depth = cg * kk;
        if w.len() != m * depth || bias.len() != m {
            return Err(io.error(format!(
                "{} weights and {} biases for {m} channels of depth {depth}",
                w.len(),
                bias.len()
            )));
        }
        let zero = |ch: usize| {
            if d.w_zeros.len() == 1 {
                d.w_zeros[0]
            } else {
                d.w_zeros[ch]
            }
        };
        // w[ch][ci][ky][kx], centered.
        let wv = |ch: usize, ci: usize, t: usize| {
            centered(w_signed, w[(ch * cg + ci) * kk + t], zero(ch))
        };
        let rq = requant_params(&d, bias, &io)?;
        let range = match rq.first() {
            Some(p) => RequantRange {
                zero: p.f.zero,
                lo: p.f.lo,
                hi: p.f.hi,
            },
            None => RequantRange {
                zero: 0.0,
                lo: 0.0,
                hi: 0.0,
            },
        };
        // Bias and multiplier per output channel.
        let mut bias_v = alloc(m, 0i32, &io)?;
        let mut scale = alloc(m, 0f32, &io)?;
        for (i, (b, s)) in bias_v.iter_mut().zip(scale.iter_mut()).enumerate() {
            if let Some(p) = rq.get(i) {
                (*b, *s) = (p.f.bias, p.f.scale);
            }
        }
        // The fixed-point rule's multipliers, when the layer follows it.
        let fixed: Option<Vec<(i32, i32)>> = match d.requant {
            Requantization::F32 => None,
            Requantization::FixedPoint => {
                Some(rq.iter().map(|p| p.fixed.unwrap_or((0, 0))).collect())
            }
        };
        let kind = if d.group == 1 {
            let pointwise = kk == 1
                && d.strides == [1, 1]
                && d.pads == [0, 0]
                && (geo.oh, geo.ow) == (geo.h, geo.w);
            // Depth index k = tap · C + ci (the (ky, kx, c) order of an NHWC window). The
            // packed weights depend on the shape, signedness and zero points only: plans at
            // every input size share them, and their requantization too.
            let src = Source {
                tensor: wt,
                kind: "qconv_nhwc_b",
                requant: "qconv_nhwc_requant",
                params: &[c, kk],
                signed: w_signed,
                zeros: &d.w_zeros,
                fixed: fixed.as_deref(),
            };
            let b = packed_b(&src, (depth, m), |k, ch| wv(ch, k % c, k / c), &io)?;
            let (_, zero) = super::unsigned_form(x_signed, d.x.1);
            let rq = shared_requant(
                &src,
                &b,
                (depth, m),
                zero,
                &bias_v[..m],
                &scale[..m],
                range,
                &io,
            )?;
            match b {
                PackedB::Quads(b) => Kind::Quads { b, rq, pointwise },
                PackedB::Pairs(b) => Kind::Gemm { b, rq, pointwise },
            }
        } else {
            let (zx, x_signed) = (d.x.1, x_signed);
            // The weights with the bias and requantization folded in do not depend on the
            // geometry: keyed by every value they fold (the bias and scales by value, as a
            // plan's folded bias may be a new tensor), plans at every input size share them.
            let bits = |v: f32| v.to_bits() as usize;
            let mut key = Vec::new();
            key.try_reserve_exact(6 + d.w_zeros.len() + 2 * m + 3)
                .map_err(|_| io.error("cannot allocate the packing key".into()))?;
            key.extend([c, kk, zx as u32 as usize, usize::from(x_signed)]);
            key.extend([usize::from(w_signed), d.w_zeros.len()]);
            key.extend(d.w_zeros.iter().map(|&z| z as u32 as usize));
            key.extend(bias_v.iter().map(|&b| b as u32 as usize));
            key.extend(scale.iter().map(|&v| bits(v)));
            key.extend([bits(range.zero), bits(range.lo), bits(range.hi)]);
            key.push(usize::from(fixed.is_some()));
            for &(q, shift) in fixed.as_deref().unwrap_or_default() {
                key.extend([q as u32 as usize, shift as u32 as usize]);
            }
            let w = weights::shared(wt, "qconv_nhwc_depthwise", &key, || {
                let w = DwWeights::new(
                    c,
                    kk,
                    |t, ch| wv(ch, 0, t),
                    &bias_v,
                    &scale,
                    range,
                    zx,
                    x_signed,
                );
                match &fixed {
                    Some(m) => w.and_then(|w| w.with_fixed_point(m)),
                    None => w,
                }
                .ok_or_else(|| io.error("cannot allocate the depthwise weights".into()))
            })?;
            let dg = DwGeometry {
                n: geo.n,
                h: geo.h,
                w: geo.w,
                oh: geo.oh,
                ow: geo.ow,
                kernel: d.kernel,
                strides: d.strides,
                dilations: d.dilations,
                pads: d.pads,
            };
            let layer = DwLayer::new(w, dg).ok_or_else(|| {
                io.error(format!(
                    "depthwise layer refused (input zero point {zx} out of its type's range, or \
                     no memory)"
                ))
            })?;
            Kind::Depthwise(Box::new(layer))
        };
        Ok(NhwcQConv {
            io,
            d,
            geo,
            x_signed,
            kind,
            padded: Mutex::new(Vec::new()),
            padded_bytes: Mutex::new(Vec::new()),
            a_pairs: Mutex::new(Vec::new()),
            a_bytes: Mutex::new(Vec::new()),
            th,
        })
    }

    /// The input centered into zero-padded images of `hp × wp` pixels (the GEMM layers' A
    /// windows are read from it). Written into `out` (the buffer of the previous execution,
    /// whose padding is still zero, or a new one).
    fn padded(&self, x: &[u8], out: &mut Vec<i16>) -> Result<()> {
        let g = &self.geo;
        let c = g.c;
        let (hp, wp) = padded_extent(&self.d, &self.geo);
        let image = hp * wp * c;
        if out.len() != g.n * image {
            *out = alloc(g.n * image, 0i16, &self.io)?;
        }
        let (pt, pl) = (self.d.pads[0], self.d.pads[1]);
        let end = (pl + g.w).min(wp);
        if pl >= end || image == 0 {
            return Ok(());
        }
        let zx = self.d.x.1;
        let center = if self.x_signed { center_i8 } else { center_u8 };
        self.padded_rows(out, wp * c, |r, prow| {
            let (n, iy) = (r / hp, (r % hp).wrapping_sub(pt));
            if iy < g.h {
                let src = &x[((n * g.h + iy) * g.w) * c..][..(end - pl) * c];
                center(&mut prow[pl * c..][..src.len()], src, zx);
            }
        })
    }

    /// Run `fill(r, row)` on every padded row `r` (of `n · hp`, `row` bytes or values each)
    /// of `out`, the threads sharing blocks of rows where the copy is large enough to pay
    /// for the hand-off (a first layer's image: the layer's only serial part otherwise).
    fn padded_rows<T: Send>(
        &self,
        out: &mut [T],
        row: usize,
        fill: impl Fn(usize, &mut [T]) + Sync + Send,
    ) -> Result<()> {
        let row = row.max(1);
        let per = self
            .th
            .chunk_size(out.len() / row, PADDED_COPY_SHARE.div_ceil(row), 1);
        self.th.chunks(out, per * row, |i, chunk| {
            for (k, prow) in chunk.chunks_exact_mut(row).enumerate() {
                fill(i * per + k, prow);
            }
            Ok(())
        })
    }

    /// The depthwise layer, the threads sharing blocks of output rows.
    fn depthwise(&self, layer: &DwLayer, x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let row = g.ow * g.c;
        let per_row = row * self.d.kernel[0] * self.d.kernel[1];
        let min_rows = MIN_SHARED_DW_MACS.div_ceil(per_row.max(1));
        let per_task = self.th.chunk_size(g.n * g.oh, min_rows, 1);
        self.th.chunks(y, per_task * row, |task, yc| {
            let first = task * per_task;
            let rows = first..first + yc.len() / row.max(1);
            if depthwise_rows(layer, x, rows, yc) {
                Ok(())
            } else {
                Err(self
                    .io
                    .error("depthwise rows refused their operands".into()))
            }
        })
    }

    /// Fill `a` (rows of `kp`) with the windows of output pixels `p0 ..`, read from the
    /// padded input `xp` (one phase).
    fn im2col(&self, xp: &[i16], p0: usize, rows: usize, kp: usize, a: &mut [i16]) {
        let g = &self.geo;
        let d = &self.d;
        let c = g.c;
        let [kh, kw] = d.kernel;
        let (hp, wp) = padded_extent(&self.d, &self.geo);
        let out = g.oh * g.ow;
        for (i, arow) in a.chunks_exact_mut(kp).take(rows).enumerate() {
            let p = p0 + i;
            let (n, q) = (p / out, p % out);
            let (oy, ox) = (q / g.ow, q % g.ow);
            for ky in 0..kh {
                let yy = oy * d.strides[0] + ky * d.dilations[0];
                let base = ((n * hp + yy) * wp + ox * d.strides[1]) * c;
                if d.dilations[1] == 1 {
                    arow[ky * kw * c..][..kw * c].copy_from_slice(&xp[base..][..kw * c]);
                } else {
                    for kx in 0..kw {
                        let at = base + kx * d.dilations[1] * c;
                        arow[(ky * kw + kx) * c..][..c].copy_from_slice(&xp[at..at + c]);
                    }
                }
            }
        }
    }

    /// Fill `a` (rows of `kp`, the K padding zero) with the A rows of output pixels
    /// `p0 .. p0 + rows`: the centered pixels of a pointwise layer, else their windows in the
    /// padded input `xp`.
    fn a_rows(&self, src: Rows<'_>, p0: usize, rows: usize, kp: usize, a: &mut [i16]) {
        let c = self.geo.c;
        let zx = self.d.x.1;
        let center = if self.x_signed { center_i8 } else { center_u8 };
        match src {
            Rows::Pixels(x) if kp == c => center(&mut a[..rows * c], &x[p0 * c..][..rows * c], zx),
            Rows::Pixels(x) => {
                for (i, arow) in a.chunks_exact_mut(kp).take(rows).enumerate() {
                    center(&mut arow[..c], &x[(p0 + i) * c..][..c], zx);
                }
            }
            Rows::Windows(xp) => self.im2col(xp, p0, rows, kp, a),
        }
    }

    /// How the threads share the GEMM of `pixels` rows (its kernel's tiles of `tile` rows,
    /// short tiles of `grain` rows or more costing about their rows): [`gemm_share`] with
    /// this layer's multiply-adds per pixel.
    pub(super) fn share(&self, pixels: usize, tile: usize, grain: usize) -> GemmSplit {
        let g = &self.geo;
        let depth = (g.c / self.d.group.max(1)) * self.d.kernel[0] * self.d.kernel[1];
        gemm_share(
            &self.th,
            pixels,
            depth.saturating_mul(g.m),
            g.m,
            tile,
            grain,
        )
    }

    fn gemm(
        &self,
        b: &QPackedB,
        rq: &ColumnRequant,
        pointwise: bool,
        x: &[u8],
        y: &mut [u8],
    ) -> Result<()> {
        let g = &self.geo;
        let pixels = g.n * g.oh * g.ow;
        let mut xp = take(&self.padded);
        if !pointwise {
            self.padded(x, &mut xp)?;
        }
        let src = if pointwise {
            Rows::Pixels(x)
        } else {
            Rows::Windows(&xp)
        };
        let tile = pair_tile_rows();
        let done = match self.share(pixels, tile, tile) {
            GemmSplit::Panels(per_task) => self.gemm_by_channels(b, rq, src, per_task, y),
            GemmSplit::Rows(per_task) => self.gemm_by_pixels(b, rq, src, per_task, y),
        };
        keep(&self.padded, xp);
        done
    }

    /// The GEMM with the threads sharing blocks of output pixels (rows).
    fn gemm_by_pixels(
        &self,
        b: &QPackedB,
        rq: &ColumnRequant,
        src: Rows<'_>,
        per_task: usize,
        y: &mut [u8],
    ) -> Result<()> {
        let m = self.geo.m;
        let per_task = per_task.max(1);
        self.th.chunks(y, per_task * m, |task, yc| {
            self.gemm_rows(b, rq, src, task * per_task, yc)
        })
    }

    /// The output rows `yc` of the GEMM, from output pixel `first` on, on the calling thread:
    /// blocks of A rows made in the thread's kept block, then summed and requantized.
    fn gemm_rows(
        &self,
        b: &QPackedB,
        rq: &ColumnRequant,
        src: Rows<'_>,
        first: usize,
        yc: &mut [u8],
    ) -> Result<()> {
        let m = self.geo.m;
        let kp = b.depth_padded();
        let panels = m.div_ceil(QNR);
        let depth = b.depth();
        // This thread's kept block of A rows.
        let need = BLOCK_ROWS * kp;
        let mut kept = scratch::try_take(&PAIR_BLOCK, need)?;
        let a = &mut kept[..need];
        // The K padding must be zero (`a_rows` writes the depth only); an earlier layer may
        // have left values there.
        if kp > depth {
            for row in a.chunks_exact_mut(kp) {
                row[depth..].fill(0);
            }
        }
        let mut done = Ok(());
        for (bi, yb) in yc.chunks_mut(BLOCK_ROWS * m).enumerate() {
            let rows = yb.len() / m.max(1);
            let p0 = first + bi * BLOCK_ROWS;
            self.a_rows(src, p0, rows, kp, a);
            if !qgemm_requantized(a, kp, rows, b, 0..panels, rq, yb, m) {
                done = Err(self.io.error("integer GEMM refused its operands".into()));
                break;
            }
        }
        scratch::give_back(&PAIR_BLOCK, kept);
        done
    }

    /// The GEMM of a layer of few output pixels (too few row blocks to share evenly): every
    /// pixel's A row made once (into a buffer kept between executions), the threads sharing
    /// the output channels (panels of B, `per_task` at a time), each writing its columns of
    /// `y` in place ([`share_columns`]).
    fn gemm_by_channels(
        &self,
        b: &QPackedB,
        rq: &ColumnRequant,
        src: Rows<'_>,
        per_task: usize,
        y: &mut [u8],
    ) -> Result<()> {
        let g = &self.geo;
        let kp = b.depth_padded();
        let pixels = g.n * g.oh * g.ow;
        let mut a = take(&self.a_pairs);
        if a.len() != pixels * kp {
            // The K padding is written zero here once; `a_rows` leaves it as it is.
            a = alloc(pixels * kp, 0i16, &self.io)?;
        }
        self.a_rows(src, 0, pixels, kp, &mut a);
        let done = self.by_channel_shares(y, pixels, per_task, "integer", |rows, p, tile, ld| {
            let a = &a[rows.start * kp..];
            qgemm_requantized(a, kp, rows.len(), b, p, rq, tile, ld)
        });
        keep(&self.a_pairs, a);
        done
    }

    /// The `pixels` output rows of `y` written by channel shares of `per_task` panels, each
    /// thread writing its columns in place ([`share_columns`], with `gemm` as there); a
    /// refusal is an error naming the `what` GEMM.
    fn by_channel_shares(
        &self,
        y: &mut [u8],
        pixels: usize,
        per_task: usize,
        what: &str,
        gemm: impl Fn(Range<usize>, Range<usize>, &mut [u8], usize) -> bool + Sync + Send,
    ) -> Result<()> {
        let m = self.geo.m;
        let panels = m.div_ceil(QNR);
        let per_task = per_task.max(1);
        self.th
            .columns(y, m, pixels, m, per_task * QNR, |t, mut cols| {
                let range = t * per_task..((t + 1) * per_task).min(panels);
                if share_columns(&mut cols, pixels, range, &gemm) {
                    Ok(())
                } else {
                    Err(self.io.error(format!("{what} GEMM refused its operands")))
                }
            })
    }
}

impl NhwcQConv {
    /// The layer on the checked input and output bytes, shared by the threads as its kind
    /// shares it.
    fn run(&self, x: &[u8], y: &mut [u8]) -> Result<()> {
        match &self.kind {
            Kind::Depthwise(layer) => self.depthwise(layer, x, y),
            Kind::Gemm { b, rq, pointwise } => self.gemm(b, rq, *pointwise, x, y),
            Kind::Quads { b, rq, pointwise } => self.quads(b, rq, *pointwise, x, y),
        }
    }
}

impl Workload for NhwcQConv {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let (x, y) = super::int8_buffers(&self.io, inputs, outputs)?;
        self.run(x, y)
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel share's tiles land in its columns of the output: rows on either side of
    /// the tile's 48 (1, 47, 48, 49, 97), channels of one short panel, whole panels and a
    /// short last one (1, 16, 67, 131), shares of one to five panels, at one, two and three
    /// threads; every element holds its (row, column) value.
    #[test]
    fn channel_shares_write_their_columns_in_place() -> Result<()> {
        let value = |r: usize, j: usize| (r * 31 + j * 7 + 3) as u8;
        for threads in [1, 2, 3] {
            let th = Threads::new(threads)?;
            for rows in [1, 47, 48, 49, 97] {
                for m in [1usize, 16, 67, 131] {
                    let panels = m.div_ceil(QNR);
                    for per_task in 1..=5 {
                        let mut y = vec![0u8; rows * m];
                        th.columns(&mut y, m, rows, m, per_task * QNR, |t, mut cols| {
                            let range = t * per_task..((t + 1) * per_task).min(panels);
                            let ok = share_columns(&mut cols, rows, range, |rr, p, tile, ld| {
                                // As the kernels: rows `rr`, columns of panels `p` (at most
                                // the layer's), at column 0 of the tile.
                                let (c0, c1) = (p.start * QNR, (p.end * QNR).min(m));
                                assert!(rr.len() <= TILE_ROWS && p.len() <= TILE_PANELS);
                                for (i, r) in rr.enumerate() {
                                    for j in c0..c1 {
                                        tile[i * ld + j - c0] = value(r, j);
                                    }
                                }
                                true
                            });
                            assert!(ok);
                            Ok(())
                        })?;
                        for (i, &v) in y.iter().enumerate() {
                            let (r, j) = (i / m, i % m);
                            assert_eq!(v, value(r, j), "{threads} threads, {rows}×{m}, {per_task}");
                        }
                    }
                }
            }
        }
        // A refused GEMM, or more rows than the share's columns hold, gives false, not a panic.
        let mut y = vec![0u8; 4 * 20];
        Threads::single().columns(&mut y, 20, 4, 20, 20, |_, mut cols| {
            assert!(!share_columns(&mut cols, 4, 0..2, |_, _, _, _| false));
            assert!(!share_columns(&mut cols, 5, 0..2, |_, _, _, _| true));
            Ok(())
        })?;
        Ok(())
    }

    /// MobileNetV1's pointwise layers at two threads on the byte GEMM (tiles of 12 rows,
    /// grains of 6): 12×12 pixels (128 → 128 channels) shared by rows evenly (in blocks of
    /// 48 rows, one thread had two of three and the layer went to the channel split), 6×6
    /// (256 → 256) by rows of 18, 3×3 (512 → 512) by channels; on the pair GEMM (grain the
    /// tile) 6×6 by channels. A layer under twice the fewest multiply-adds stays on the
    /// calling thread; one thread takes every layer whole.
    #[test]
    fn gemm_layers_of_few_blocks_are_shared_by_tiles_or_grains() -> Result<()> {
        let two = Threads::new(2)?;
        assert_eq!(
            gemm_share(&two, 144, 128 * 128, 128, 12, 6),
            GemmSplit::Rows(36)
        );
        assert_eq!(
            gemm_share(&two, 36, 256 * 256, 256, 12, 6),
            GemmSplit::Rows(18)
        );
        assert!(matches!(
            gemm_share(&two, 36, 256 * 256, 256, 12, 12),
            GemmSplit::Panels(_)
        ));
        assert!(matches!(
            gemm_share(&two, 9, 512 * 512, 512, 12, 6),
            GemmSplit::Panels(_)
        ));
        // 11×13 pixels: shares of whole grains, the last one row short.
        match gemm_share(&two, 143, 61 * 67, 67, 12, 6) {
            GemmSplit::Rows(per) => assert!(per % 6 == 0 && per < 143, "{per}"),
            s => panic!("{s:?}"),
        }
        // Three threads: 36 rows in six shares of a grain, two each (the finest of the
        // evenest splits).
        let three = Threads::new(3)?;
        assert_eq!(
            gemm_share(&three, 36, 256 * 256, 256, 12, 6),
            GemmSplit::Rows(6)
        );
        let small = 2 * MIN_SHARED_MACS / (64 * 64) - 1;
        assert_eq!(
            gemm_share(&two, small, 64 * 64, 64, 12, 6),
            GemmSplit::Rows(small)
        );
        assert_eq!(
            gemm_share(&Threads::single(), 144, 128 * 128, 128, 12, 6),
            GemmSplit::Rows(144)
        );
        Ok(())
    }
}

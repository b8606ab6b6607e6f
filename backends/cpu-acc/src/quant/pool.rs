//! The quantized 2-D pools (custom `QLinearPool`, made by [`super::fold`] from
//! `DequantizeLinear → AveragePool | MaxPool → QuantizeLinear`, per tensor on 8-bit types):
//! DenseNet's transitions, Inception's padded 3×3 average pools and max pools, ResNet's
//! stem pool, NCHW or channels-last (inside a region, [`super::region`]), with padding
//! (counted in the average or not, as ONNX's `count_include_pad`; TFLite's SAME padding is
//! not counted), strides and `ceil_mode`.
//!
//! **Average.** CpuRef sums a window's dequantized values `t = (q - z) as f32 · s` in f64 in
//! row-major tap order. Every such sum is exact: each nonzero `t` is a multiple of the unit
//! in the last place of `s` (its magnitude is at least `s`), and below `2 · |q - z|max · s`,
//! so a sum of `taps` of them is an integer number of those units below
//! `taps · |q - z|max · 2²⁵`, representable in f64 while `taps · |q - z|max ≤ 2²⁸` (the
//! plan checks it). An exact sum does not depend on the order of the additions, so the pool
//! is computed separably, with vector lanes over the channels (or the columns, NCHW): each
//! output row first sums its window's input rows column by column, then each output pixel
//! sums its window's columns. The quotient by the tap count (in f64, rounded to f32) and the
//! quantization (the f32 quotient by the output scale, rounded half to even, the zero point
//! added, saturated) are CpuRef's, so the bytes equal CpuRef's chain.
//!
//! **Max.** The dequantization is monotone (`s > 0`), so the largest dequantized value of a
//! window is that of its largest byte; the pool takes the bytes' maximum (unsigned order,
//! int8 bytes with their top bit flipped) and maps it through a 256-entry table of
//! `quantize(dequantize(q))` (skipped where that is the identity, as when both sides share
//! one scale and zero point).
//!
//! **Integer average** (`round_away`, TFLite's rule, from `Op::IntegerAveragePool`): the
//! same exact f64 sums of the stored integers (scale 1, zero point 0), then the quotient by
//! the tap count rounded half away from zero in integers (`div_round_half_away`, CpuRef's
//! rule), saturated.
//!
//! A fused Relu or Clip is a clamp of the output bytes. Every window holds an input tap (the
//! fold takes begin pads narrower than the window), so no average divides by zero.

use super::binary_rows::{Deq, Req};
use super::{is_8bit, payload_of, range, QLINEAR_POOL};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{CustomOp, PoolDesc, PoolKind};
use backplane_core::{DataType, Op, TensorInfo, TensorView, TensorViewMut};

/// What a folded 2-D pool computes (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QPoolDesc {
    /// Max pooling (else average).
    pub max: bool,
    /// The window.
    pub kernel: [usize; 2],
    /// The strides.
    pub strides: [usize; 2],
    /// Padding: top, left, bottom, right (the resolved geometry's, `ceil_mode` included in
    /// the output's size).
    pub pads: [usize; 4],
    /// The average divides by the taps inside the padded input (else inside the input).
    pub count_include_pad: bool,
    /// Scale and zero point of the input.
    pub x: (f32, i32),
    /// Scale and zero point of the output.
    pub y: (f32, i32),
    /// The fused activation's range in output units.
    pub clamp: (i32, i32),
    /// Input and output are `[N, H, W, C]` (else `[N, C, H, W]`).
    pub nhwc: bool,
    /// TFLite's integer average (`Op::IntegerAveragePool`, folded from that layer): the sum
    /// of the stored integers over the taps counted, rounded half away from zero,
    /// saturated; `x` and `y` are then (1, 0) and nothing is rescaled.
    pub round_away: bool,
}

impl QPoolDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_POOL, self, y)
    }

    /// The description [`QPoolDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QPoolDesc, String> {
        payload_of(c, QLINEAR_POOL)
    }

    /// The pool of an `Op::IntegerAveragePool` over a 4-D NCHW `dt` input of dimensions
    /// `dims` (TFLite's integer average, `round_away`); `None` for a geometry the pool does
    /// not take (not 2-D, dilated, a window entirely in the padding, sums that could be
    /// inexact).
    pub(crate) fn integer(p: &PoolDesc, dims: &[usize], dt: DataType) -> Option<QPoolDesc> {
        if !is_8bit(dt) || p.kind != PoolKind::Average {
            return None;
        }
        let desc = QPoolDesc {
            x: (1.0, 0),
            y: (1.0, 0),
            clamp: range(dt),
            round_away: true,
            ..QPoolDesc::windows(p, dims)?
        };
        desc.exact(dt).then_some(desc)
    }

    /// The windows of `p` over a 4-D NCHW input of dimensions `dims`, as a pool of `p`'s kind
    /// on unit-scale bytes (the caller sets the quantization and the clamp); `None` for a
    /// geometry the pool does not take (not 2-D, dilated, a window entirely in the padding).
    pub(crate) fn windows(p: &PoolDesc, dims: &[usize]) -> Option<QPoolDesc> {
        if dims.len() != 4 {
            return None;
        }
        let geo = p.window.geometry(&dims[2..], p.ceil_mode).ok()?;
        let two = |v: &[usize]| -> Option<[usize; 2]> { <[usize; 2]>::try_from(v).ok() };
        let (kernel, strides) = (two(&geo.kernel)?, two(&geo.strides)?);
        let ([pt, pl], [pb, pr]) = (two(&geo.pads_begin)?, two(&geo.pads_end)?);
        // Every window must reach into the input (the pool never divides by zero).
        if geo.dilations.iter().any(|&v| v != 1) || pt >= kernel[0] || pl >= kernel[1] {
            return None;
        }
        Some(QPoolDesc {
            max: p.kind == PoolKind::Max,
            kernel,
            strides,
            pads: [pt, pl, pb, pr],
            count_include_pad: p.count_include_pad,
            x: (1.0, 0),
            y: (1.0, 0),
            clamp: (0, 0),
            nhwc: false,
            round_away: false,
        })
    }

    /// Whether an average over these windows of `dt` bytes sums exactly in f64 (see the
    /// module doc): `taps · |q - z|max ≤ 2²⁸`. Always true for max pooling.
    pub(crate) fn exact(&self, dt: DataType) -> bool {
        let (lo, hi) = range(dt);
        let far = (i64::from(lo) - i64::from(self.x.1))
            .abs()
            .max((i64::from(hi) - i64::from(self.x.1)).abs()) as u64;
        let taps = self.kernel[0] as u64 * self.kernel[1] as u64;
        self.max || taps.saturating_mul(far) <= 1 << 28
    }
}

/// The in-window taps of one axis: the output position's window `[o·s - pb, o·s - pb + k)`
/// clipped to the input `[0, n)` (`lo..hi`, possibly empty), and the taps inside the
/// padded input (`[0, n + pe)` after the begin padding) that `count_include_pad` counts.
#[derive(Debug, Clone, Copy)]
struct Span {
    lo: usize,
    hi: usize,
    padded: usize,
}

/// One axis of the pool: input size, window, stride, pads.
#[derive(Debug, Clone, Copy)]
struct Axis {
    n: usize,
    k: usize,
    s: usize,
    pb: usize,
    pe: usize,
}

impl Axis {
    fn span(self, o: usize) -> Span {
        let start = o * self.s;
        let end = start + self.k;
        let lo = start.max(self.pb).min(self.pb + self.n) - self.pb;
        let hi = end.max(self.pb).min(self.pb + self.n) - self.pb;
        let padded = end.min(self.pb + self.n + self.pe).saturating_sub(start);
        Span { lo, hi, padded }
    }

    /// Whether `o` outputs fit: each window starts inside the padded input and reaches
    /// into the input (the begin padding is narrower than the window), and the count is
    /// what the floor or ceiling rule gives.
    fn fits(self, o: usize) -> bool {
        let full = self.n + self.pb + self.pe;
        if self.k == 0 || self.s == 0 || full < self.k || o == 0 || self.pb >= self.k {
            return false;
        }
        let floor = (full - self.k) / self.s + 1;
        let ceil = (full - self.k).div_ceil(self.s) + 1;
        (o == floor || o == ceil) && (o - 1) * self.s < self.n + self.pb
    }
}

/// The plan of a folded pool: 4-D 8-bit input and output of the window's geometry.
pub(super) fn plan_pool<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    plan_desc(QPoolDesc::decode(c)?, layer)
}

/// The plan of an `Op::IntegerAveragePool` layer, as the quantized pool.
pub(super) fn plan_integer(layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let Op::IntegerAveragePool(p) = &layer.op else {
        return Err("not an IntegerAveragePool".into());
    };
    let [x] = layer.inputs.as_slice() else {
        return Err("IntegerAveragePool takes one input".into());
    };
    let d = QPoolDesc::integer(p, x.shape.dims(), x.dtype)
        .ok_or("IntegerAveragePool: a window CpuAcc's pool does not take")?;
    plan_desc(d, layer)
}

/// The plan of pool `d` on `layer`'s input and output.
fn plan_desc(d: QPoolDesc, layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let [x] = layer.inputs.as_slice() else {
        return Err(format!("{QLINEAR_POOL} takes one input"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    if !is_8bit(x.dtype) || !is_8bit(y.dtype) {
        return Err(format!(
            "{QLINEAR_POOL}: {} to {}, not 8-bit",
            x.dtype, y.dtype
        ));
    }
    let (&[n, a1, a2, a3], &[yn, b1, b2, b3]) = (x.shape.dims(), y.shape.dims()) else {
        return Err(format!("{QLINEAR_POOL}: 4-D tensors expected"));
    };
    // [channels, height, width] of input and output.
    let (xi, yo) = if d.nhwc {
        ([a3, a1, a2], [b3, b1, b2])
    } else {
        ([a1, a2, a3], [b1, b2, b3])
    };
    let [pt, pl, pb, pr] = d.pads;
    let rows = Axis {
        n: xi[1],
        k: d.kernel[0],
        s: d.strides[0],
        pb: pt,
        pe: pb,
    };
    let cols = Axis {
        n: xi[2],
        k: d.kernel[1],
        s: d.strides[1],
        pb: pl,
        pe: pr,
    };
    if yn != n || xi[0] != yo[0] || !rows.fits(yo[1]) || !cols.fits(yo[2]) {
        return Err(format!(
            "{QLINEAR_POOL}: output {} for input {}",
            y.shape, x.shape
        ));
    }
    if !d.exact(x.dtype) {
        return Err(format!(
            "{QLINEAR_POOL}: window and zero point too large for an exact sum"
        ));
    }
    let signed = x.dtype == DataType::I8;
    let (lo, hi) = range(y.dtype);
    if d.clamp.0 < lo || d.clamp.1 > hi || d.clamp.0 > d.clamp.1 {
        return Err(format!("{QLINEAR_POOL}: clamp outside the output type"));
    }
    let req = Req::new(d.y, d.clamp);
    let deq = |b: u8| (super::widen(signed, b) - d.x.1) as f32 * d.x.0;
    // Max pooling: the output byte of each (unflipped) input byte, and of -inf.
    let table: Vec<u8> = (0..=255u8).map(|b| req.at(deq(b))).collect();
    let identity = table.iter().enumerate().all(|(i, &v)| usize::from(v) == i);
    let p = Pool {
        max: d.max,
        round_away: d.round_away,
        include_pad: d.count_include_pad,
        // NCHW: each channel plane an image of one lane.
        lanes: if d.nhwc { xi[0] } else { 1 },
        rows,
        cols,
        out: [yo[1], yo[2]],
        flip: if signed { 0x80 } else { 0 },
        deq: Deq::new(signed, d.x).ok_or("zero point out of range")?,
        req,
        table: (!identity).then_some(table),
        clamp: (i64::from(d.clamp.0), i64::from(d.clamp.1)),
    };
    Ok(Plan::new(move |io, th| done(Pooling { io, p, th })))
}

/// The planned pool.
struct Pool {
    max: bool,
    /// The integer average's rounding (half away from zero) instead of `req`.
    round_away: bool,
    include_pad: bool,
    /// Values per pixel (the channels channels-last, else 1).
    lanes: usize,
    rows: Axis,
    cols: Axis,
    out: [usize; 2],
    /// 0x80 for int8 input: the bytes' order as unsigned bytes.
    flip: u8,
    deq: Deq,
    req: Req,
    /// Max pooling: the output byte of each input byte, unless that is the identity.
    table: Option<Vec<u8>>,
    /// The output range of the integer average (`round_away`).
    clamp: (i64, i64),
}

/// The pool, planned.
struct Pooling {
    io: Io,
    p: Pool,
    th: Threads,
}

/// A scratch row, allocated fallibly.
fn scratch<T: Clone>(io: &Io, len: usize, v: T) -> Result<Vec<T>> {
    let mut s = Vec::new();
    s.try_reserve_exact(len)
        .map_err(|e| io.error(format!("scratch of {len} values: {e}")))?;
    s.resize(len, v);
    Ok(s)
}

impl Pool {
    /// Output rows `first..` of the flattened `images × out[0]` rows into `y` (whole rows).
    fn average_rows(&self, io: &Io, x: &[u8], first: usize, y: &mut [u8]) -> Result<()> {
        if self.round_away {
            return self.integer_rows(io, x, first, y);
        }
        let (c, [oh, ow]) = (self.lanes, self.out);
        let (w, image) = (self.cols.n * c, self.rows.n * self.cols.n * c);
        let mut colsum = scratch(io, w, 0f64)?;
        let mut sums = scratch(io, ow * c, 0f64)?;
        let mut counts = scratch(io, ow * c, 0f64)?;
        let missing = || io.error("input too short".into());
        for (ox, px) in counts.chunks_mut(c.max(1)).enumerate() {
            let s = self.cols.span(ox);
            let n = if self.include_pad {
                s.padded
            } else {
                s.hi - s.lo
            };
            px.fill(n as f64);
        }
        for (k, yr) in y.chunks_mut(ow * c).enumerate() {
            let r = first + k;
            let (img, oy) = (r / oh, r % oh);
            let s = self.rows.span(oy);
            colsum.fill(0.0);
            for iy in s.lo..s.hi {
                let at = img * image + iy * w;
                let row = x.get(at..at + w).ok_or_else(missing)?;
                deq_add_row(self.deq, row, &mut colsum);
            }
            sums.fill(0.0);
            self.columns(&colsum, &mut sums, add_rows);
            let rows = if self.include_pad {
                s.padded
            } else {
                s.hi - s.lo
            };
            quantize_row(self.req, rows as f64, &sums, &counts, yr);
        }
        Ok(())
    }

    /// The integer average's output rows, as [`Pool::average_rows`]: the stored integers
    /// summed in `i32` (exact: the plan bounds `taps · |q|max` by 2²⁸), each sum divided by
    /// its tap count with [`round_away_row`].
    fn integer_rows(&self, io: &Io, x: &[u8], first: usize, y: &mut [u8]) -> Result<()> {
        let (c, [oh, ow]) = (self.lanes, self.out);
        let (w, image) = (self.cols.n * c, self.rows.n * self.cols.n * c);
        let mut colsum = scratch(io, w, 0i32)?;
        let mut sums = scratch(io, ow * c, 0i32)?;
        // Each output's tap count and its reciprocal, for the rows' count `recip_rows`
        // (made again only when a row's count differs from the last row's).
        let mut counts = scratch(io, ow * c, 0i32)?;
        let mut recip = scratch(io, ow * c, 0f64)?;
        let mut recip_rows = None;
        let missing = || io.error("input too short".into());
        // The integer of a byte: `(b ^ flip) - offset`.
        let offset = if self.flip != 0 { 128 } else { 0 };
        let taps = |s: Span| {
            if self.include_pad {
                s.padded
            } else {
                s.hi - s.lo
            }
        };
        for (k, yr) in y.chunks_mut(ow * c).enumerate() {
            let r = first + k;
            let (img, oy) = (r / oh, r % oh);
            let s = self.rows.span(oy);
            colsum.fill(0);
            for iy in s.lo..s.hi {
                let at = img * image + iy * w;
                let row = x.get(at..at + w).ok_or_else(missing)?;
                widen_add_row(self.flip, offset, row, &mut colsum);
            }
            sums.fill(0);
            self.columns(&colsum, &mut sums, add_i32_rows);
            let rows = taps(s);
            if recip_rows != Some(rows) {
                for (ox, (n, v)) in counts
                    .chunks_mut(c.max(1))
                    .zip(recip.chunks_mut(c.max(1)))
                    .enumerate()
                {
                    let d = rows * taps(self.cols.span(ox));
                    // Tap counts are below 2²⁸ (the plan's exactness bound).
                    n.fill(i32::try_from(d).unwrap_or(i32::MAX));
                    v.fill(1.0 / d as f64);
                }
                recip_rows = Some(rows);
            }
            let (lo, hi) = (self.clamp.0 as i32, self.clamp.1 as i32);
            round_away_row(&sums, &counts, &recip, (lo, hi), yr);
        }
        Ok(())
    }

    /// Each output pixel of a row: `combine(acc, column)` of its window's in-bounds
    /// columns of `cols` (pixels of `lanes` values) into `out` (the output row).
    fn columns<T>(&self, cols: &[T], out: &mut [T], combine: fn(&mut [T], &[T])) {
        let (c, ow, ax) = (self.lanes, self.out[1], self.cols);
        if ax.s == 1 {
            // Stride 1: each window column is one contiguous run of output pixels.
            for kx in 0..ax.k {
                // Output pixels whose column `ox + kx - pb` is inside the input.
                let lo = ax.pb.saturating_sub(kx).min(ow);
                let hi = (ax.n + ax.pb).saturating_sub(kx).min(ow).max(lo);
                let from = (lo + kx).saturating_sub(ax.pb) * c;
                if let (Some(o), Some(i)) = (
                    out.get_mut(lo * c..hi * c),
                    cols.get(from..from + (hi - lo) * c),
                ) {
                    combine(o, i);
                }
            }
            return;
        }
        for (ox, o) in out.chunks_mut(c).enumerate().take(ow) {
            let s = ax.span(ox);
            for ix in s.lo..s.hi {
                if let Some(i) = cols.get(ix * c..(ix + 1) * c) {
                    combine(o, i);
                }
            }
        }
    }

    /// Max pooling's output rows, as [`Pool::average_rows`].
    fn max_rows(&self, io: &Io, x: &[u8], first: usize, y: &mut [u8]) -> Result<()> {
        let (c, [oh, ow]) = (self.lanes, self.out);
        let (w, image) = (self.cols.n * c, self.rows.n * self.cols.n * c);
        let mut colmax = scratch(io, w, 0u8)?;
        let missing = || io.error("input too short".into());
        for (k, yr) in y.chunks_mut(ow * c).enumerate() {
            let r = first + k;
            let (img, oy) = (r / oh, r % oh);
            let s = self.rows.span(oy);
            colmax.fill(0);
            for iy in s.lo..s.hi {
                let at = img * image + iy * w;
                let row = x.get(at..at + w).ok_or_else(missing)?;
                max_flipped_row(self.flip, row, &mut colmax);
            }
            yr.fill(0);
            self.columns(&colmax, yr, max_rows);
            // Back to the input's bytes, then the output's.
            match &self.table {
                Some(t) => {
                    for v in yr.iter_mut() {
                        *v = t[usize::from(*v ^ self.flip)];
                    }
                }
                None => flip_row(self.flip, yr),
            }
        }
        Ok(())
    }
}

impl Workload for Pooling {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.data;
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        let p = &self.p;
        let row = p.out[1] * p.lanes;
        if row == 0 || y.is_empty() {
            return Ok(());
        }
        // Whole output rows per chunk.
        let chunk = self.th.chunk_size(y.len(), 8 * 1024, row);
        self.th.chunks(y, chunk, |i, yc| {
            let first = i * chunk / row;
            if p.max {
                p.max_rows(&self.io, x, first, yc)
            } else {
                p.average_rows(&self.io, x, first, yc)
            }
        })
    }
}

/// `acc[i] += f64(dequantize(x[i]))`.
#[inline(always)]
fn deq_add_row_body(d: Deq, x: &[u8], acc: &mut [f64]) {
    for (a, &q) in acc.iter_mut().zip(x) {
        *a += f64::from(d.at(q));
    }
}

/// `acc[i] += (x[i] ^ flip) - offset` (the stored integer of an int8 or uint8 byte).
#[inline(always)]
fn widen_add_row_body(flip: u8, offset: i32, x: &[u8], acc: &mut [i32]) {
    for (a, &q) in acc.iter_mut().zip(x) {
        *a += i32::from(q ^ flip) - offset;
    }
}

/// `acc[i] += v[i]` on integers.
#[inline(always)]
fn add_i32_rows_body(acc: &mut [i32], v: &[i32]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a += b;
    }
}

/// `y[i]` = `sums[i]` divided by its tap count `counts[i]`, rounded half away from zero
/// ([`div_round_half_away`]'s `(|s| + ⌊d/2⌋) / d`, the sign put back), clamped to `clamp`,
/// stored as its low byte. `recip[i]` is `1 / counts[i]` in f64.
///
/// The integer quotient is `⌊(a + ½) · recip⌋` for `a = |s| + ⌊d/2⌋`: `(a + ½) / d` lies
/// at least `1 / (2d)` from every integer, while the two roundings (of `1 / d` and of the
/// product) move it by under `2⁻⁵¹` of a value below 2¹⁰ (an average of bytes plus one), so
/// the floor is exact for any tap count below 2⁴⁰.
#[inline(always)]
fn round_away_row_body(
    sums: &[i32],
    counts: &[i32],
    recip: &[f64],
    clamp: (i32, i32),
    y: &mut [u8],
) {
    // Adding 1.5 · 2⁵² to an integer-valued f64 of magnitude below 2³¹ puts that integer's
    // two's complement in the low bits of the sum's representation: a bit cast, where an
    // `as` conversion (saturating) would not vectorize.
    const LOW_BITS: f64 = 6_755_399_441_055_744.0;
    let (lo, hi) = (f64::from(clamp.0), f64::from(clamp.1));
    for (((o, &s), &d), &r) in y.iter_mut().zip(sums).zip(counts).zip(recip) {
        let a = f64::from(s).abs() + f64::from(d >> 1);
        let q = ((a + 0.5) * r).floor();
        let v = if s < 0 { -q } else { q };
        *o = (v.max(lo).min(hi) + LOW_BITS).to_bits() as u8;
    }
}

/// `acc[i] += v[i]`.
#[inline(always)]
fn add_rows_body(acc: &mut [f64], v: &[f64]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a += b;
    }
}

/// `y[i] = quantize((sums[i] / (rows · counts[i])) as f32)`.
#[inline(always)]
fn quantize_row_body(r: Req, rows: f64, sums: &[f64], counts: &[f64], y: &mut [u8]) {
    for ((o, &s), &n) in y.iter_mut().zip(sums).zip(counts) {
        *o = r.at((s / (rows * n)) as f32);
    }
}

/// `acc[i] = max(acc[i], x[i] ^ flip)`.
#[inline(always)]
fn max_flipped_row_body(flip: u8, x: &[u8], acc: &mut [u8]) {
    for (a, &q) in acc.iter_mut().zip(x) {
        *a = (*a).max(q ^ flip);
    }
}

/// `acc[i] = max(acc[i], v[i])`.
#[inline(always)]
fn max_rows_body(acc: &mut [u8], v: &[u8]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a = (*a).max(b);
    }
}

/// `y[i] ^= flip`.
#[inline(always)]
fn flip_row_body(flip: u8, y: &mut [u8]) {
    for v in y.iter_mut() {
        *v ^= flip;
    }
}

backplane_cpu_kernels::multiversion! {
    /// Add a row's dequantized bytes to f64 sums.
    fn deq_add_row(d: Deq, x: &[u8], acc: &mut [f64]) => deq_add_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// Add a row's stored integers to i32 sums.
    fn widen_add_row(flip: u8, offset: i32, x: &[u8], acc: &mut [i32]) => widen_add_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// Add i32 values to sums.
    fn add_i32_rows(acc: &mut [i32], v: &[i32]) => add_i32_rows_body;
}
backplane_cpu_kernels::multiversion! {
    /// The integer average's quotients of a row, rounded half away from zero.
    fn round_away_row(sums: &[i32], counts: &[i32], recip: &[f64], clamp: (i32, i32), y: &mut [u8])
        => round_away_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// Add f64 values to sums.
    fn add_rows(acc: &mut [f64], v: &[f64]) => add_rows_body;
}
backplane_cpu_kernels::multiversion! {
    /// Quantize a row of averages.
    fn quantize_row(r: Req, rows: f64, sums: &[f64], counts: &[f64], y: &mut [u8])
        => quantize_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// Fold a row of bytes (top bit flipped) into a running maximum.
    fn max_flipped_row(flip: u8, x: &[u8], acc: &mut [u8]) => max_flipped_row_body;
}
backplane_cpu_kernels::multiversion! {
    /// Fold a row of bytes into a running maximum.
    fn max_rows(acc: &mut [u8], v: &[u8]) => max_rows_body;
}
backplane_cpu_kernels::multiversion! {
    /// Flip the top bit of each byte (or not).
    fn flip_row(flip: u8, y: &mut [u8]) => flip_row_body;
}

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::ops::div_round_half_away;

    /// Each output's in-bounds taps and taps inside the padded input, counted one by one
    /// as CpuRef does, against the spans.
    #[test]
    fn spans_count_the_taps_as_cpu_ref() {
        for n in [1, 2, 5, 13] {
            for k in 1..=4 {
                for s in 1..=3 {
                    for pb in 0..k {
                        for pe in 0..=k {
                            let ax = Axis { n, k, s, pb, pe };
                            let full = n + pb + pe;
                            if full < k {
                                continue;
                            }
                            let floor = (full - k) / s + 1;
                            let ceil = (full - k).div_ceil(s) + 1;
                            for o_count in [floor, ceil] {
                                if !ax.fits(o_count) {
                                    continue;
                                }
                                for o in 0..o_count {
                                    let taps = (0..k).map(|t| o * s + t);
                                    let inside: Vec<usize> = taps
                                        .clone()
                                        .filter(|&p| p >= pb && p < pb + n)
                                        .map(|p| p - pb)
                                        .collect();
                                    let padded = taps.filter(|&p| p < pb + n + pe).count();
                                    let sp = ax.span(o);
                                    let got: Vec<usize> = (sp.lo..sp.hi).collect();
                                    assert_eq!(got, inside, "{ax:?} o {o}");
                                    assert_eq!(sp.padded, padded, "{ax:?} o {o}");
                                    assert!(sp.hi > sp.lo, "{ax:?} o {o}: no input tap");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The vector rule's quotients equal CpuRef's integer `div_round_half_away` for every
    /// sum of bytes over tap counts 1 to 300 (every tie of the even counts among them), and
    /// for sums at the ends of the range over counts up to the exactness bound's 2²¹ taps.
    #[test]
    fn round_away_quotients_equal_the_integer_rule() {
        let check = |d: i32, sums: &mut dyn Iterator<Item = i32>| {
            let sums: Vec<i32> = sums.collect();
            let counts = vec![d; sums.len()];
            let recip = vec![1.0 / f64::from(d); sums.len()];
            let mut y = vec![0u8; sums.len()];
            round_away_row(&sums, &counts, &recip, (i32::MIN, i32::MAX), &mut y);
            let mut wide = vec![0u8; sums.len()];
            // The unclamped quotient's low byte, and the quotient's sign and size through
            // a clamp to the int8 range.
            let mut narrow = vec![0u8; sums.len()];
            round_away_row(&sums, &counts, &recip, (-128, 127), &mut narrow);
            round_away_row_body(&sums, &counts, &recip, (i32::MIN, i32::MAX), &mut wide);
            for (i, &s) in sums.iter().enumerate() {
                let want = div_round_half_away(i64::from(s), i64::from(d));
                assert_eq!(y[i], want as u8, "sum {s} over {d}");
                assert_eq!(wide[i], want as u8, "sum {s} over {d}");
                assert_eq!(
                    narrow[i],
                    want.clamp(-128, 127) as i8 as u8,
                    "sum {s} over {d}"
                );
            }
        };
        for d in 1..=300 {
            check(d, &mut (-255 * d..=255 * d));
        }
        for d in [1 << 10, 3 << 12, (1 << 21) - 1, 1 << 21] {
            let ends = [
                0,
                1,
                d / 2,
                d / 2 + 1,
                d - 1,
                d,
                3 * d / 2,
                127 * d + d / 2,
                255 * d,
            ];
            check(d, &mut ends.iter().flat_map(|&s| [s, -s, s - 1, 1 - s]));
        }
    }

    #[test]
    fn exact_sums_bound_the_window() {
        let d = |kernel: [usize; 2], z: i32, max: bool| QPoolDesc {
            max,
            kernel,
            strides: [1, 1],
            pads: [0; 4],
            count_include_pad: false,
            x: (0.1, z),
            y: (0.1, 0),
            clamp: (-128, 127),
            nhwc: true,
            round_away: false,
        };
        assert!(d([3, 3], -128, false).exact(DataType::I8));
        assert!(d([3, 3], 127, false).exact(DataType::I8));
        // taps · |q - z|max ≤ 2²⁸, with 2²⁰ and 2²¹ taps.
        assert!(d([1024, 1024], 0, false).exact(DataType::U8));
        assert!(d([2048, 1024], 0, false).exact(DataType::I8));
        assert!(!d([2048, 1024], 0, false).exact(DataType::U8));
        assert!(!d([2048, 1024], 127, false).exact(DataType::I8));
        assert!(d([2048, 1024], 255, true).exact(DataType::U8));
    }
}

//! The int8 convolution (custom `QLinearConv`, made by [`super::fold`]): NCHW 8-bit input
//! and output, constant 8-bit weights per output channel (scale and zero point), an int32
//! bias, exact int32 sums, requantized in f32 as XNNPACK does (`requantize_f32`: the sum
//! times `sx·sw/sy` rounded half to even), clamped to the fused activation's range.
//! Depthwise layers (one input channel per group) run directly, per channel on a centered,
//! zero-padded copy of its plane; the others as the constant centered weights (A) times the
//! packed im2col of the input (B, kept between executions), so each channel's sums come out
//! along its output row, the threads sharing blocks of output channels.

use super::{range, widen, QLINEAR_CONV};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use crate::weights;
use backplane_backend_api::{LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::quant::{fixed_point_multiplier, Requantization};
use backplane_core::{DataType, Tensor, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    accumulate_taps, packed_at, qgemm, requant_scale, requantize_f32, requantize_fixed,
    FloatRequant, QPackedB, QMR, QNR,
};
use backplane_cpu_kernels::AlignedVec;
use std::sync::{Arc, Mutex};

/// The quantization and geometry of a folded convolution (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QConvDesc {
    /// Kernel extent [KH, KW].
    pub kernel: [usize; 2],
    /// Strides.
    pub strides: [usize; 2],
    /// Dilations.
    pub dilations: [usize; 2],
    /// Padding before (top, left).
    pub pads: [usize; 2],
    /// Groups.
    pub group: usize,
    /// Input scale and zero point.
    pub x: (f32, i32),
    /// Output scale and zero point.
    pub y: (f32, i32),
    /// Weight scales (one, or one per output channel).
    pub w_scales: Vec<f32>,
    /// Weight zero points (as many as scales).
    pub w_zeros: Vec<i32>,
    /// The fused activation's range in output units.
    pub clamp: (i32, i32),
    /// Channels-last: input and output `[N, H, W, C]` ([`super::nhwc_conv`]), set by the
    /// quantized region pass ([`super::region`]); the weights stay `[M, C/group, KH, KW]`.
    pub nhwc: bool,
    /// How the sums become output integers (the chain's QuantizeLinear's rule).
    pub requant: Requantization,
}

impl QConvDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_CONV, self, y)
    }

    /// The description [`QConvDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QConvDesc, String> {
        super::payload_of(c, QLINEAR_CONV)
    }
}

/// Everything the workload needs, checked against the layer's tensors (dims named as
/// NCHW whatever the layout).
pub(super) struct Geometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub m: usize,
    pub oh: usize,
    pub ow: usize,
}

pub(super) fn geometry(
    d: &QConvDesc,
    x: &TensorInfo,
    w: &TensorInfo,
    y: &TensorInfo,
) -> std::result::Result<Geometry, String> {
    let four = |v: &[usize], what: &str| -> std::result::Result<[usize; 4], String> {
        <[usize; 4]>::try_from(v).map_err(|_| format!("{QLINEAR_CONV}: {what} must be 4-D"))
    };
    let (xd, wd, yd) = (x.shape.dims(), w.shape.dims(), y.shape.dims());
    let [n, c, h, wi] = four(xd, "x")?;
    let [m, cg, kh, kw] = four(wd, "w")?;
    let [yn, ym, oh, ow] = four(yd, "y")?;
    let g = d.group;
    if cg * g != c || !m.is_multiple_of(g) || [kh, kw] != d.kernel || yn != n || ym != m {
        return Err(format!(
            "{QLINEAR_CONV}: x {xd:?}, w {wd:?}, y {yd:?} and group {g} disagree"
        ));
    }
    if d.strides.contains(&0) || d.dilations.contains(&0) {
        return Err(format!("{QLINEAR_CONV}: zero stride or dilation"));
    }
    if d.w_scales.len() != 1 && d.w_scales.len() != m || d.w_zeros.len() != d.w_scales.len() {
        return Err(format!(
            "{QLINEAR_CONV}: {} weight scales for {m} channels",
            d.w_scales.len()
        ));
    }
    // Every read is bounds-checked against the input plane (outside is the padding), so the
    // output extents need no further check here: shape inference made them.
    Ok(Geometry {
        n,
        c,
        h,
        w: wi,
        m,
        oh,
        ow,
    })
}

/// The plan of a folded int8 convolution.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QConvDesc::decode(c)?;
    let [x, w, _, y] = super::int8_operands(layer, QLINEAR_CONV)?;
    if d.nhwc {
        return super::nhwc_conv::plan(d, layer);
    }
    let geo = geometry(&d, x, w, y)?;
    plan_workload(layer, d, geo, QConvWorkload::new)
}

/// How a layout's workload is made: from the description, geometry, the constant weights'
/// bytes and the int32 bias.
pub(super) type MakeWorkload<W> =
    fn(Io, QConvDesc, Geometry, &Arc<Tensor>, &[i32], Threads) -> Result<W>;

/// The plan both layouts share: the bias checked against the output channels, then the
/// workload made by `make` from the layer's constant weights and bias.
pub(super) fn plan_workload<W: Workload + 'static>(
    layer: &LayerDesc,
    d: QConvDesc,
    geo: Geometry,
    make: MakeWorkload<W>,
) -> std::result::Result<Plan<'_>, String> {
    let bias_len = layer.inputs.get(2).map_or(0, |b| b.shape.elements());
    if bias_len != geo.m {
        return Err(format!(
            "{QLINEAR_CONV}: bias of {bias_len} for {} channels",
            geo.m
        ));
    }
    Ok(Plan::new(move |io, th| {
        let (wt, bt) = super::int8_constants(layer, &io)?;
        done(make(io, d, geo, wt, bt.as_slice::<i32>()?, th)?)
    }))
}

/// Rows and columns of the zero-padded input plane the windows of `d` read for the output
/// of `g` (both layouts pad the same way).
pub(super) fn padded_extent(d: &QConvDesc, g: &Geometry) -> (usize, usize) {
    let span = |o: usize, s: usize, k: usize, dl: usize| {
        o.saturating_sub(1) * s + k.saturating_sub(1) * dl + 1
    };
    (
        span(g.oh, d.strides[0], d.kernel[0], d.dilations[0]),
        span(g.ow, d.strides[1], d.kernel[1], d.dilations[1]),
    )
}

/// The folded int8 convolution.
struct QConvWorkload {
    io: Io,
    d: QConvDesc,
    geo: Geometry,
    x_signed: bool,
    /// GEMM path: the centered weights, one row of `kp` values (zeros past the depth) per
    /// output channel, groups after each other; depthwise: `[M, KH·KW]`. Shared with other
    /// plans' workloads (`crate::weights`).
    weights: Arc<AlignedVec<i16>>,
    /// The padded depth of a weight row (GEMM path; 0 for depthwise layers).
    kp: usize,
    /// Per output channel: bias, multiplier, zero point and clamp of the requantization
    /// (shared with other plans' workloads).
    requant: Arc<Vec<ChannelRequant>>,
    /// The packed input (im2col) of the GEMM path, kept between executions; an execution
    /// that finds it busy (another running at once) packs into a buffer of its own.
    packed: Mutex<Option<QPackedB>>,
    th: Threads,
}

/// One output channel's requantization: its bias, f32 multiplier, zero point and clamp, and
/// with the fixed-point rule ([`Requantization::FixedPoint`]) the Q31 multiplier `(q,
/// shift)` that replaces the f32 one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ChannelRequant {
    /// The f32 rule's parameters (bias, zero point and clamp apply to both rules).
    pub f: FloatRequant,
    /// The fixed-point multiplier, `None` under the f32 rule.
    pub fixed: Option<(i32, i32)>,
}

impl ChannelRequant {
    /// `sums` (one channel's) requantized into `out` by this channel's rule.
    fn apply(&self, sums: &[i32], out: &mut [u8]) {
        match self.fixed {
            Some(m) => requantize_fixed(sums, out, self.f, m),
            None => requantize_f32(sums, out, self.f),
        }
    }
}

/// Per output channel: the bias, the real multiplier `sx·sw[c]/sy`, the output zero point and
/// the clamp of the requantization, and the fixed-point multiplier (LiteRT's
/// `x_scale · w_scale / y_scale` in f64, as CpuRef) when the rule is fixed point.
pub(super) fn requant_params(d: &QConvDesc, bias: &[i32], io: &Io) -> Result<Vec<ChannelRequant>> {
    let per = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
    let mut requant = Vec::new();
    requant
        .try_reserve_exact(bias.len())
        .map_err(|_| io.error("cannot allocate the requantization".into()))?;
    for (c, &b) in bias.iter().enumerate() {
        let real = requant_scale(d.x.0, per(&d.w_scales, c), d.y.0);
        if !(real.is_finite() && real > 0.0 && real < 1e30) {
            return Err(io.error(format!(
                "output channel {c}: scale {real} cannot be requantized"
            )));
        }
        let fixed = match d.requant {
            Requantization::F32 => None,
            Requantization::FixedPoint => {
                Some(fixed_point_multiplier(d.x.0, per(&d.w_scales, c), d.y.0))
            }
        };
        requant.push(ChannelRequant {
            f: FloatRequant {
                bias: b,
                scale: real,
                zero: d.y.1 as f32,
                lo: (d.clamp.0 - d.y.1) as f32,
                hi: (d.clamp.1 - d.y.1) as f32,
            },
            fixed,
        });
    }
    Ok(requant)
}

/// [`requant_params`] shared by the plans through the cache of packed constants: keyed by
/// the weights (whose requantization it is) and every value it is made of (the bias by
/// value: a plan's int32 bias is folded anew from the model's constants).
fn shared_requant(
    wt: &Arc<Tensor>,
    d: &QConvDesc,
    bias: &[i32],
    io: &Io,
) -> Result<Arc<Vec<ChannelRequant>>> {
    let bits = |v: f32| v.to_bits() as usize;
    let mut key = Vec::new();
    key.try_reserve_exact(bias.len() + d.w_scales.len() + 7)
        .map_err(|_| io.error("cannot allocate the requantization key".into()))?;
    key.extend([bits(d.x.0), bits(d.y.0), d.y.1 as u32 as usize]);
    key.extend([d.clamp.0 as u32 as usize, d.clamp.1 as u32 as usize]);
    key.extend([
        d.w_scales.len(),
        usize::from(d.requant == Requantization::FixedPoint),
    ]);
    key.extend(d.w_scales.iter().map(|&v| bits(v)));
    key.extend(bias.iter().map(|&b| b as u32 as usize));
    weights::shared(wt, "qconv_rows_requant", &key, || {
        requant_params(d, bias, io)
    })
}

pub(super) fn alloc<T: Clone>(n: usize, v: T, io: &Io) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| io.error(format!("cannot allocate {n} elements")))?;
    out.resize(n, v);
    Ok(out)
}

/// [`alloc`] of zeros starting on a cache line: operands the kernels load whole vectors of.
pub(super) fn alloc_lines<T: bytemuck::Pod>(n: usize, io: &Io) -> Result<AlignedVec<T>> {
    AlignedVec::try_zeroed(n).map_err(|_| io.error(format!("cannot allocate {n} elements")))
}

/// An 8-bit value less the zero point.
#[inline]
pub(super) fn centered(signed: bool, b: u8, zero: i32) -> i16 {
    (widen(signed, b) - zero) as i16
}

impl QConvWorkload {
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
        let m = geo.m;
        let cg = geo.c / d.group;
        let kk = d.kernel[0] * d.kernel[1];
        let depth = cg * kk;
        let zero = |c: usize| {
            if d.w_zeros.len() == 1 {
                d.w_zeros[0]
            } else {
                d.w_zeros[c]
            }
        };
        if w.len() != m * depth {
            return Err(io.error(format!(
                "weights hold {} values, expected {}",
                w.len(),
                m * depth
            )));
        }
        if bias.len() != m {
            return Err(io.error(format!("{} biases for {m} channels", bias.len())));
        }
        let requant = shared_requant(wt, &d, bias, &io)?;
        let kp = if cg == 1 { 0 } else { depth.div_ceil(2) * 2 };
        let row = kp.max(depth);
        // The centered rows depend on the shape, signedness and zero points only: plans at
        // every input size share them.
        let mut key = vec![m, depth, row, usize::from(w_signed)];
        key.extend(d.w_zeros.iter().map(|&z| z as u32 as usize));
        let weights = weights::shared(wt, "qconv_rows", &key, || {
            let mut weights = alloc_lines::<i16>(m * row, &io)?;
            for (c, r) in weights.chunks_exact_mut(row).enumerate() {
                for (k, v) in r.iter_mut().take(depth).enumerate() {
                    *v = centered(w_signed, w[c * depth + k], zero(c));
                }
            }
            Ok(weights)
        })?;
        Ok(QConvWorkload {
            io,
            d,
            geo,
            x_signed,
            weights,
            kp,
            requant,
            packed: Mutex::new(None),
            th,
        })
    }

    /// Depthwise layers (one input channel per group): per output channel, the input
    /// plane centered into a zero-padded scratch plane, then each tap added along an
    /// output row.
    fn depthwise(&self, x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let d = &self.d;
        let (plane, out) = (g.h * g.w, g.oh * g.ow);
        let [kh, kw] = d.kernel;
        let kk = kh * kw;
        let mg = g.m / d.group;
        let (hp, wp) = padded_extent(&self.d, &self.geo);
        // The padded plane split by column phase (column `xx` at `xx % s`, `xx / s`), so that
        // every tap reads a contiguous run of its phase whatever the stride.
        let s = d.strides[1];
        let wq = wp.div_ceil(s);
        let pl = d.pads[1];
        let channels = g.n * g.m;
        let per_task = self.th.chunk_size(channels, 1, 1);
        let zx = d.x.1;
        self.th.chunks(y, per_task * out, |task, yc| {
            let mut xp = alloc(s * hp * wq, 0i16, &self.io)?;
            let mut row = alloc(wp, 0i16, &self.io)?;
            let mut acc = alloc(out, 0i32, &self.io)?;
            for (ci, ych) in yc.chunks_mut(out).enumerate() {
                let i = task * per_task + ci;
                let (n, c) = (i / g.m, i % g.m);
                let xin = &x[(n * g.c + c / mg) * plane..][..plane];
                for yy in 0..hp {
                    let iy = yy.wrapping_sub(d.pads[0]);
                    row.fill(0);
                    if iy < g.h {
                        let src = &xin[iy * g.w..(iy + 1) * g.w];
                        let end = (pl + g.w).min(wp);
                        if pl < end {
                            for (v, &b) in row[pl..end].iter_mut().zip(src) {
                                *v = centered(self.x_signed, b, zx);
                            }
                        }
                    }
                    if s == 1 {
                        xp[yy * wq..(yy + 1) * wq].copy_from_slice(&row);
                    } else {
                        for (xx, &v) in row.iter().enumerate() {
                            xp[((xx % s) * hp + yy) * wq + xx / s] = v;
                        }
                    }
                }
                let taps = &self.weights[c * kk..(c + 1) * kk];
                acc.fill(0);
                for (oy, arow) in acc.chunks_exact_mut(g.ow).enumerate() {
                    for ky in 0..kh {
                        let yy = oy * d.strides[0] + ky * d.dilations[0];
                        for kx in 0..kw {
                            let t = i32::from(taps[ky * kw + kx]);
                            let off = kx * d.dilations[1];
                            let at = ((off % s) * hp + yy) * wq + off / s;
                            accumulate_taps(arow, &xp[at..at + g.ow], t);
                        }
                    }
                }
                self.requant[c].apply(&acc, ych);
            }
            Ok(())
        })
    }

    /// Fill the packed input (`B`: depth `(channel, ky, kx)` by output pixel) of group
    /// `gi` of image `n`: the im2col of centered values, zeros in the padding.
    fn pack_input(&self, x: &[u8], n: usize, gi: usize, b: &mut QPackedB) -> Result<()> {
        let g = &self.geo;
        let d = &self.d;
        let (plane, out) = (g.h * g.w, g.oh * g.ow);
        let cg = g.c / d.group;
        let [kh, kw] = d.kernel;
        let kk = kh * kw;
        let depth = cg * kk;
        let xin = &x[(n * g.c + gi * cg) * plane..][..cg * plane];
        let zx = d.x.1;
        let signed = self.x_signed;
        let pointwise = kk == 1 && d.strides == [1, 1] && d.pads == [0, 0];
        let len = b.panel_len();
        self.th.chunks(b.panels_mut(), len, |p, panel| {
            let j0 = p * QNR;
            let width = out.saturating_sub(j0).min(QNR);
            if pointwise {
                for ci in 0..depth {
                    let src = &xin[ci * plane + j0..][..width];
                    for (jj, &v) in src.iter().enumerate() {
                        panel[packed_at(ci, jj)] = centered(signed, v, zx);
                    }
                }
                return Ok(());
            }
            // The top-left input position of each pixel's window (wrapping below zero).
            let mut base = [(0usize, 0usize); QNR];
            for (jj, b) in base.iter_mut().enumerate().take(width) {
                let (oy, ox) = ((j0 + jj) / g.ow, (j0 + jj) % g.ow);
                *b = (
                    (oy * d.strides[0]).wrapping_sub(d.pads[0]),
                    (ox * d.strides[1]).wrapping_sub(d.pads[1]),
                );
            }
            for k in 0..depth {
                let (ci, r) = (k / kk, k % kk);
                let (dy, dx) = ((r / kw) * d.dilations[0], (r % kw) * d.dilations[1]);
                let src = &xin[ci * plane..(ci + 1) * plane];
                for (jj, &(by, bx)) in base.iter().enumerate().take(width) {
                    let (iy, ix) = (by.wrapping_add(dy), bx.wrapping_add(dx));
                    panel[packed_at(k, jj)] = if iy < g.h && ix < g.w {
                        centered(signed, src[iy * g.w + ix], zx)
                    } else {
                        0
                    };
                }
            }
            Ok(())
        })
    }

    /// Other layers: the weights (A, constant) times the packed input (B), blocks of output
    /// channels shared by the threads, each sum requantized as its tile is done.
    fn gemm(&self, x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let d = &self.d;
        let out = g.oh * g.ow;
        let (mg, cg) = (g.m / d.group, g.c / d.group);
        let depth = cg * d.kernel[0] * d.kernel[1];
        let kp = self.kp;
        let mut guard = self.packed.try_lock().ok();
        let mut own = None;
        let slot = match guard.as_deref_mut() {
            Some(s) => s,
            None => &mut own,
        };
        if slot.is_none() {
            *slot = Some(
                QPackedB::zeroed(depth, out)
                    .ok_or_else(|| self.io.error("cannot allocate the packed input".into()))?,
            );
        }
        let Some(b) = slot.as_mut() else {
            return Err(self.io.error("packed input missing".into()));
        };
        if (b.depth(), b.cols()) != (depth, out) && !b.reshape(depth, out) {
            return Err(self.io.error("cannot allocate the packed input".into()));
        }
        let block = self.th.chunk_size(mg, QMR, QMR);
        for n in 0..g.n {
            for gi in 0..d.group {
                self.pack_input(x, n, gi, b)?;
                let b = &*b;
                let ys = &mut y[(n * g.m + gi * mg) * out..][..mg * out];
                self.th.chunks(ys, block * out, |bi, yb| {
                    let rows = yb.len() / out.max(1);
                    let c0 = gi * mg + bi * block;
                    let a = &self.weights[c0 * kp..(c0 + rows) * kp];
                    // QMR channels at a time: their sums over every pixel, then requantized
                    // along each channel's row.
                    let mut c = alloc(QMR * out, 0i32, &self.io)?;
                    for r0 in (0..rows).step_by(QMR) {
                        let r = (rows - r0).min(QMR);
                        if !qgemm(&a[r0 * kp..], kp, r, b, &mut c, out) {
                            return Err(self.io.error("integer GEMM refused its operands".into()));
                        }
                        for (i, sums) in c.chunks_exact(out).take(r).enumerate() {
                            let ch = c0 + r0 + i;
                            let yrow = &mut yb[(r0 + i) * out..][..out];
                            self.requant[ch].apply(sums, yrow);
                        }
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}

impl Workload for QConvWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let (x, y) = super::int8_buffers(&self.io, inputs, outputs)?;
        if self.kp == 0 {
            self.depthwise(x, y)
        } else {
            self.gemm(x, y)
        }
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0
    }
}

/// The activation range `[lo, hi]` (real values) in output units of an 8-bit type.
pub(crate) fn clamp_range(dt: DataType, y: (f32, i32), lo: f32, hi: f32) -> (i32, i32) {
    let (qlo, qhi) = range(dt);
    let q = |v: f32| {
        let r = (v / y.0).round_ties_even();
        if r.is_nan() {
            0
        } else {
            (r.clamp(-1e9, 1e9) as i32).saturating_add(y.1)
        }
    };
    let lo = if lo == f32::NEG_INFINITY {
        qlo
    } else {
        q(lo).max(qlo)
    };
    let hi = if hi == f32::INFINITY {
        qhi
    } else {
        q(hi).min(qhi)
    };
    (lo, hi.max(lo))
}

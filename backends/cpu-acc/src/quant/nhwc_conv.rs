//! The channels-last int8 convolution (`QLinearConv` with `nhwc` set by [`super::region`]):
//! input and output `[N, H, W, C]`, so a TFLite model's tensors run in their own layout with
//! no transposes between layers.
//!
//! - Depthwise layers: per output pixel, each tap adds a weight row times the pixel's
//!   channels (`depthwise_tap_*`, vectorized over the channels), padding taps skipped.
//! - Other (one-group) layers are one GEMM with the output pixels as rows: A holds each
//!   pixel's window as centered 16-bit values in `(ky, kx, c)` order (for a 1×1 layer the
//!   pixel's channels as they are), B the constant centered weights packed once, and each
//!   block of rows is requantized from a small int32 block while it is still in cache.
//!
//! The sums and the requantization are those of the NCHW path ([`super::conv`]), so both
//! layouts give the same bytes.

use super::conv::{alloc, centered, geometry, requant_params, Geometry, QConvDesc};
use super::QLINEAR_CONV;
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    center_i8, center_u8, depthwise_tap_i8, depthwise_tap_u8, qgemm, requantize_channels, QPackedB,
    RequantRange,
};

/// Output pixels per GEMM block (A rows centered, summed and requantized together).
const BLOCK_ROWS: usize = 32;

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
    let [x, w, b] = layer.inputs.as_slice() else {
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
    if b.shape.elements() != geo.m {
        return Err(format!(
            "{QLINEAR_CONV}: bias of {} for {} channels",
            b.shape.elements(),
            geo.m
        ));
    }
    Ok(Plan::new(move |io, th| {
        let wt = layer
            .constant(1)
            .ok_or_else(|| io.error("weights not constant".into()))?;
        let bt = layer
            .constant(2)
            .ok_or_else(|| io.error("bias not constant".into()))?;
        let work = NhwcQConv::new(io, d, geo, wt.bytes(), bt.as_slice::<i32>()?, th)?;
        done(work)
    }))
}

/// How the layer computes its sums.
enum Kind {
    /// Centered weights `[KH·KW, C]`: one row of channels per tap.
    Depthwise { taps: Vec<i16> },
    /// The centered weights packed as B (`KH·KW·C` × M); `pointwise` for a 1×1, stride-1,
    /// unpadded layer, whose A rows are the input pixels themselves.
    Gemm { b: QPackedB, pointwise: bool },
}

/// The channels-last int8 convolution.
struct NhwcQConv {
    io: Io,
    d: QConvDesc,
    geo: Geometry,
    x_signed: bool,
    kind: Kind,
    bias: Vec<i32>,
    scale: Vec<f32>,
    range: RequantRange,
    th: Threads,
}

impl NhwcQConv {
    fn new(
        io: Io,
        d: QConvDesc,
        geo: Geometry,
        w: &[u8],
        bias: &[i32],
        th: Threads,
    ) -> Result<Self> {
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
        let kind = if d.group == 1 {
            let pointwise = kk == 1
                && d.strides == [1, 1]
                && d.pads == [0, 0]
                && (geo.oh, geo.ow) == (geo.h, geo.w);
            // Depth index k = tap · C + ci (the (ky, kx, c) order of an NHWC window).
            let b = QPackedB::pack(depth, m, |k, ch| wv(ch, k % c, k / c))
                .ok_or_else(|| io.error("cannot allocate the packed weights".into()))?;
            Kind::Gemm { b, pointwise }
        } else {
            let mut taps = alloc(kk * c, 0i16, &io)?;
            for t in 0..kk {
                for ch in 0..c {
                    taps[t * c + ch] = wv(ch, 0, t);
                }
            }
            Kind::Depthwise { taps }
        };
        let rq = requant_params(&d, bias, &io)?;
        let range = match rq.first() {
            Some(p) => RequantRange {
                zero: p.zero,
                lo: p.lo,
                hi: p.hi,
            },
            None => RequantRange {
                zero: 0.0,
                lo: 0.0,
                hi: 0.0,
            },
        };
        let mut bias_v = alloc(m, 0i32, &io)?;
        let mut scale = alloc(m, 0f32, &io)?;
        for (i, p) in rq.iter().enumerate() {
            bias_v[i] = p.bias;
            scale[i] = p.scale;
        }
        Ok(NhwcQConv {
            io,
            d,
            geo,
            x_signed,
            kind,
            bias: bias_v,
            scale,
            range,
            th,
        })
    }

    /// The input row `iy` and column `ix` of output pixel (oy, ox) at tap (ky, kx), `None` in
    /// the padding.
    #[inline]
    fn source(&self, oy: usize, ox: usize, ky: usize, kx: usize) -> Option<(usize, usize)> {
        let d = &self.d;
        let iy = (oy * d.strides[0] + ky * d.dilations[0]).wrapping_sub(d.pads[0]);
        let ix = (ox * d.strides[1] + kx * d.dilations[1]).wrapping_sub(d.pads[1]);
        (iy < self.geo.h && ix < self.geo.w).then_some((iy, ix))
    }

    fn depthwise(&self, taps: &[i16], x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let c = g.c;
        let [kh, kw] = self.d.kernel;
        let row = g.ow * c;
        let rows = g.n * g.oh;
        let per_task = self.th.chunk_size(rows, 1, 1);
        let zx = self.d.x.1;
        let tap = if self.x_signed {
            depthwise_tap_i8
        } else {
            depthwise_tap_u8
        };
        self.th.chunks(y, per_task * row, |task, yc| {
            let mut acc = alloc(c, 0i32, &self.io)?;
            for (ri, yrow) in yc.chunks_mut(row).enumerate() {
                let r = task * per_task + ri;
                let (n, oy) = (r / g.oh, r % g.oh);
                let image = &x[n * g.h * g.w * c..][..g.h * g.w * c];
                for (ox, out) in yrow.chunks_exact_mut(c).enumerate() {
                    acc.fill(0);
                    for ky in 0..kh {
                        for kx in 0..kw {
                            if let Some((iy, ix)) = self.source(oy, ox, ky, kx) {
                                let t = ky * kw + kx;
                                let px = &image[(iy * g.w + ix) * c..][..c];
                                tap(&mut acc, px, &taps[t * c..][..c], zx);
                            }
                        }
                    }
                    requantize_channels(&acc, out, &self.bias, &self.scale, self.range);
                }
            }
            Ok(())
        })
    }

    /// Fill `a` (`BLOCK_ROWS` rows of `kp`) with the windows of output pixels `p0 ..`.
    fn im2col(&self, x: &[u8], p0: usize, rows: usize, kp: usize, a: &mut [i16]) {
        let g = &self.geo;
        let c = g.c;
        let [kh, kw] = self.d.kernel;
        let zx = self.d.x.1;
        let center = if self.x_signed { center_i8 } else { center_u8 };
        let out = g.oh * g.ow;
        for (i, arow) in a.chunks_exact_mut(kp).take(rows).enumerate() {
            let p = p0 + i;
            let (n, q) = (p / out, p % out);
            let (oy, ox) = (q / g.ow, q % g.ow);
            let image = &x[n * g.h * g.w * c..][..g.h * g.w * c];
            for ky in 0..kh {
                for kx in 0..kw {
                    let dst = &mut arow[(ky * kw + kx) * c..][..c];
                    match self.source(oy, ox, ky, kx) {
                        Some((iy, ix)) => center(dst, &image[(iy * g.w + ix) * c..][..c], zx),
                        None => dst.fill(0),
                    }
                }
            }
        }
    }

    fn gemm(&self, b: &QPackedB, pointwise: bool, x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let (c, m) = (g.c, g.m);
        let kp = b.depth_padded();
        let pixels = g.n * g.oh * g.ow;
        let per_task = self.th.chunk_size(pixels, BLOCK_ROWS, 4);
        let zx = self.d.x.1;
        let center = if self.x_signed { center_i8 } else { center_u8 };
        self.th.chunks(y, per_task * m, |task, yc| {
            // The K padding (past the depth) stays zero.
            let mut a = alloc(BLOCK_ROWS * kp, 0i16, &self.io)?;
            let mut sums = alloc(BLOCK_ROWS * m, 0i32, &self.io)?;
            let first = task * per_task;
            for (bi, yb) in yc.chunks_mut(BLOCK_ROWS * m).enumerate() {
                let rows = yb.len() / m.max(1);
                let p0 = first + bi * BLOCK_ROWS;
                if pointwise {
                    for (i, arow) in a.chunks_exact_mut(kp).take(rows).enumerate() {
                        center(&mut arow[..c], &x[(p0 + i) * c..][..c], zx);
                    }
                } else {
                    self.im2col(x, p0, rows, kp, &mut a);
                }
                if !qgemm(&a, kp, rows, b, &mut sums, m) {
                    return Err(self.io.error("integer GEMM refused its operands".into()));
                }
                for (s, out) in sums.chunks_exact(m).zip(yb.chunks_exact_mut(m)) {
                    requantize_channels(s, out, &self.bias, &self.scale, self.range);
                }
            }
            Ok(())
        })
    }
}

impl Workload for NhwcQConv {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |k| k == 1 || k == 2)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.data;
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        match &self.kind {
            Kind::Depthwise { taps } => self.depthwise(taps, x, y),
            Kind::Gemm { b, pointwise } => self.gemm(b, *pointwise, x, y),
        }
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0
    }
}

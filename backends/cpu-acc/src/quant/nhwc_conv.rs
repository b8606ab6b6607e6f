//! The channels-last int8 convolution (`QLinearConv` with `nhwc` set by [`super::region`]):
//! input and output `[N, H, W, C]`, so a TFLite model's tensors run in their own layout with
//! no transposes between layers.
//!
//! - The input is first centered into a zero-padded 16-bit copy (except for 1×1 layers),
//!   its columns split by stride phase for depthwise layers.
//! - Depthwise layers: per output row, each tap is one multiply-add of a contiguous run of
//!   that copy (`OW·C` values, any stride) with the tap's weights repeated per pixel, then
//!   one requantization of the row.
//! - Other (one-group) layers are one GEMM with the output pixels as rows: A holds each
//!   pixel's window in `(ky, kx, c)` order (copied runs of the padded input; for a 1×1 layer
//!   the centered pixels themselves), B the constant centered weights packed once, and each
//!   block of rows is requantized from a small int32 block while it is still in cache.
//!
//! The sums and the requantization are those of the NCHW path ([`super::conv`]), so both
//! layouts give the same bytes.

use super::conv::{
    alloc, centered, geometry, padded_extent, plan_workload, requant_params, Geometry, QConvDesc,
};
use super::QLINEAR_CONV;
use crate::io::Io;
use crate::plan::Plan;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    accumulate_products, center_i8, center_u8, qgemm, requantize_channels, QPackedB, RequantRange,
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
    /// Centered weights `[KH·KW, OW·C]`: per tap, its channels repeated for each pixel of an
    /// output row.
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
    /// Bias and multiplier per output channel, repeated for a row of output pixels (an
    /// output row for depthwise layers, a GEMM block otherwise): one requantization call
    /// per row.
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
        let (kind, reps) = if d.group == 1 {
            let pointwise = kk == 1
                && d.strides == [1, 1]
                && d.pads == [0, 0]
                && (geo.oh, geo.ow) == (geo.h, geo.w);
            // Depth index k = tap · C + ci (the (ky, kx, c) order of an NHWC window).
            let b = QPackedB::pack(depth, m, |k, ch| wv(ch, k % c, k / c))
                .ok_or_else(|| io.error("cannot allocate the packed weights".into()))?;
            (Kind::Gemm { b, pointwise }, BLOCK_ROWS)
        } else {
            let row = geo.ow * c;
            let mut taps = alloc(kk * row, 0i16, &io)?;
            for (t, tr) in taps.chunks_exact_mut(row.max(1)).enumerate() {
                for (i, v) in tr.iter_mut().enumerate() {
                    *v = wv(i % c, 0, t);
                }
            }
            (Kind::Depthwise { taps }, geo.ow)
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
        let mut bias_v = alloc(reps * m, 0i32, &io)?;
        let mut scale = alloc(reps * m, 0f32, &io)?;
        for (i, (b, s)) in bias_v.iter_mut().zip(scale.iter_mut()).enumerate() {
            if let Some(p) = rq.get(i % m.max(1)) {
                (*b, *s) = (p.bias, p.scale);
            }
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

    /// The input centered into zero-padded images of `hp × wp` pixels, the columns split by
    /// phase: padded pixel (n, yy, xx) at `((n·phases + xx % phases)·hp + yy)·wq + xx / phases`
    /// (`wq = ⌈wp / phases⌉`), its C channels from there. With the stride as `phases`, each
    /// tap of an output row reads one contiguous run whatever the stride.
    fn padded(&self, x: &[u8], phases: usize) -> Result<Vec<i16>> {
        let g = &self.geo;
        let c = g.c;
        let (hp, wp) = padded_extent(&self.d, &self.geo);
        let wq = wp.div_ceil(phases);
        let image = phases * hp * wq * c;
        let mut out = alloc(g.n * image, 0i16, &self.io)?;
        let mut row = alloc(wp * c, 0i16, &self.io)?;
        let (pt, pl) = (self.d.pads[0], self.d.pads[1]);
        let end = (pl + g.w).min(wp);
        let zx = self.d.x.1;
        let center = if self.x_signed { center_i8 } else { center_u8 };
        for (n, img) in out.chunks_exact_mut(image.max(1)).enumerate().take(g.n) {
            for yy in 0..hp {
                let iy = yy.wrapping_sub(pt);
                if iy >= g.h || pl >= end {
                    continue;
                }
                let src = &x[((n * g.h + iy) * g.w) * c..][..(end - pl) * c];
                if phases == 1 {
                    center(&mut img[(yy * wq + pl) * c..][..src.len()], src, zx);
                    continue;
                }
                center(&mut row[pl * c..end * c], src, zx);
                for xx in pl..end {
                    let at = (((xx % phases) * hp + yy) * wq + xx / phases) * c;
                    img[at..at + c].copy_from_slice(&row[xx * c..(xx + 1) * c]);
                }
            }
        }
        Ok(out)
    }

    fn depthwise(&self, taps: &[i16], x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let d = &self.d;
        let c = g.c;
        let [kh, kw] = d.kernel;
        let s = d.strides[1];
        let (hp, wp) = padded_extent(&self.d, &self.geo);
        let wq = wp.div_ceil(s);
        let xp = self.padded(x, s)?;
        let image = s * hp * wq * c;
        let row = g.ow * c;
        let rows = g.n * g.oh;
        let per_task = self.th.chunk_size(rows, 1, 1);
        self.th.chunks(y, per_task * row, |task, yc| {
            let mut acc = alloc(row, 0i32, &self.io)?;
            for (ri, yrow) in yc.chunks_mut(row).enumerate() {
                let r = task * per_task + ri;
                let (n, oy) = (r / g.oh, r % g.oh);
                let img = &xp[n * image..][..image];
                acc.fill(0);
                for ky in 0..kh {
                    let yy = oy * d.strides[0] + ky * d.dilations[0];
                    for kx in 0..kw {
                        let off = kx * d.dilations[1];
                        let at = (((off % s) * hp + yy) * wq + off / s) * c;
                        let t = ky * kw + kx;
                        accumulate_products(&mut acc, &img[at..at + row], &taps[t * row..][..row]);
                    }
                }
                requantize_channels(&acc, yrow, &self.bias, &self.scale, self.range);
            }
            Ok(())
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

    fn gemm(&self, b: &QPackedB, pointwise: bool, x: &[u8], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let (c, m) = (g.c, g.m);
        let kp = b.depth_padded();
        let pixels = g.n * g.oh * g.ow;
        let per_task = self.th.chunk_size(pixels, BLOCK_ROWS, BLOCK_ROWS);
        let zx = self.d.x.1;
        let center = if self.x_signed { center_i8 } else { center_u8 };
        let xp = if pointwise {
            Vec::new()
        } else {
            self.padded(x, 1)?
        };
        self.th.chunks(y, per_task * m, |task, yc| {
            // The K padding (past the depth) stays zero.
            let mut a = alloc(BLOCK_ROWS * kp, 0i16, &self.io)?;
            let mut sums = alloc(BLOCK_ROWS * m, 0i32, &self.io)?;
            let first = task * per_task;
            for (bi, yb) in yc.chunks_mut(BLOCK_ROWS * m).enumerate() {
                let rows = yb.len() / m.max(1);
                let p0 = first + bi * BLOCK_ROWS;
                if pointwise && kp == c {
                    center(&mut a[..rows * c], &x[p0 * c..][..rows * c], zx);
                } else if pointwise {
                    for (i, arow) in a.chunks_exact_mut(kp).take(rows).enumerate() {
                        center(&mut arow[..c], &x[(p0 + i) * c..][..c], zx);
                    }
                } else {
                    self.im2col(&xp, p0, rows, kp, &mut a);
                }
                if !qgemm(&a, kp, rows, b, &mut sums, m) {
                    return Err(self.io.error("integer GEMM refused its operands".into()));
                }
                requantize_channels(&sums[..rows * m], yb, &self.bias, &self.scale, self.range);
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

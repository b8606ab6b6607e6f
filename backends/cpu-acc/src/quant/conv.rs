//! The int8 convolution (custom `QLinearConv`, made by [`super::fold`]): NCHW 8-bit input
//! and output, constant 8-bit weights per output channel (scale and zero point), an int32
//! bias, exact int32 sums and TFLite's requantization, clamped to the fused activation's
//! range. Depthwise layers (one input channel per group) run directly; the others as an
//! im2col of centered 16-bit rows against the packed weights (`qgemm`), the threads sharing
//! the output channels' panels.

use super::{range, widen, QLINEAR_CONV};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{AttrValue, CustomOp};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{qgemm_panel, QPackedB, QuantizedMultiplier, QNR};

/// The quantization and geometry of a folded convolution, as its attributes encode them.
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
}

fn ints<const N: usize>(v: [usize; N]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&u| u as i64).collect())
}

impl QConvDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        let a = |n: &str, v: AttrValue| (n.to_string(), v);
        CustomOp {
            domain: crate::CPU_ACC_ID.to_string(),
            op_type: QLINEAR_CONV.to_string(),
            attributes: vec![
                a("kernel", ints(self.kernel)),
                a("strides", ints(self.strides)),
                a("dilations", ints(self.dilations)),
                a("pads", ints(self.pads)),
                a("group", AttrValue::Int(self.group as i64)),
                a("x_scale", AttrValue::Float(self.x.0)),
                a("x_zero_point", AttrValue::Int(i64::from(self.x.1))),
                a("y_scale", AttrValue::Float(self.y.0)),
                a("y_zero_point", AttrValue::Int(i64::from(self.y.1))),
                a("w_scales", AttrValue::Floats(self.w_scales.clone())),
                a(
                    "w_zero_points",
                    AttrValue::Ints(self.w_zeros.iter().map(|&z| i64::from(z)).collect()),
                ),
                a(
                    "clamp",
                    AttrValue::Ints(vec![i64::from(self.clamp.0), i64::from(self.clamp.1)]),
                ),
            ],
            outputs: vec![y],
            payload: None,
        }
    }

    /// Decode the attributes of [`QConvDesc::to_op`].
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QConvDesc, String> {
        let get = |n: &str| {
            c.attributes
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v)
                .ok_or_else(|| format!("{QLINEAR_CONV} lacks attribute {n}"))
        };
        let pair = |n: &str| -> std::result::Result<[usize; 2], String> {
            match get(n)? {
                AttrValue::Ints(v) if v.len() == 2 && v.iter().all(|&x| x >= 0) => {
                    Ok([v[0] as usize, v[1] as usize])
                }
                _ => Err(format!(
                    "{QLINEAR_CONV}: {n} must be two non-negative integers"
                )),
            }
        };
        let int = |n: &str| -> std::result::Result<i64, String> {
            match get(n)? {
                AttrValue::Int(v) => Ok(*v),
                _ => Err(format!("{QLINEAR_CONV}: {n} must be an integer")),
            }
        };
        let float = |n: &str| -> std::result::Result<f32, String> {
            match get(n)? {
                AttrValue::Float(v) => Ok(*v),
                _ => Err(format!("{QLINEAR_CONV}: {n} must be a float")),
            }
        };
        let small = |v: i64| i32::try_from(v).map_err(|_| format!("{QLINEAR_CONV}: {v} too large"));
        let w_scales = match get("w_scales")? {
            AttrValue::Floats(v) => v.clone(),
            _ => return Err(format!("{QLINEAR_CONV}: w_scales must be floats")),
        };
        let w_zeros = match get("w_zero_points")? {
            AttrValue::Ints(v) => v
                .iter()
                .map(|&z| small(z))
                .collect::<std::result::Result<_, _>>()?,
            _ => return Err(format!("{QLINEAR_CONV}: w_zero_points must be integers")),
        };
        let clamp = match get("clamp")? {
            AttrValue::Ints(v) if v.len() == 2 => (small(v[0])?, small(v[1])?),
            _ => return Err(format!("{QLINEAR_CONV}: clamp must be two integers")),
        };
        let group = usize::try_from(int("group")?)
            .ok()
            .filter(|&g| g > 0)
            .ok_or_else(|| format!("{QLINEAR_CONV}: group must be positive"))?;
        Ok(QConvDesc {
            kernel: pair("kernel")?,
            strides: pair("strides")?,
            dilations: pair("dilations")?,
            pads: pair("pads")?,
            group,
            x: (float("x_scale")?, small(int("x_zero_point")?)?),
            y: (float("y_scale")?, small(int("y_zero_point")?)?),
            w_scales,
            w_zeros,
            clamp,
        })
    }
}

/// Everything the workload needs, checked against the layer's tensors.
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    oh: usize,
    ow: usize,
}

fn geometry(
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
    let [x, w, b] = layer.inputs.as_slice() else {
        return Err(format!("{QLINEAR_CONV} takes x, w and an int32 bias"));
    };
    let y = layer.outputs.first().ok_or("no output")?;
    for (t, what) in [(x, "x"), (w, "w"), (y, "y")] {
        if !super::is_8bit(t.dtype) {
            return Err(format!("{QLINEAR_CONV}: {what} is {}, not 8-bit", t.dtype));
        }
    }
    if b.dtype != DataType::I32 || layer.constant(1).is_none() || layer.constant(2).is_none() {
        return Err(format!(
            "{QLINEAR_CONV}: constant weights and int32 bias expected"
        ));
    }
    let geo = geometry(&d, x, w, y)?;
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
        let work = QConvWorkload::new(io, d, geo, wt.bytes(), bt.as_slice::<i32>()?, th)?;
        done(work)
    }))
}

/// The folded int8 convolution.
struct QConvWorkload {
    io: Io,
    d: QConvDesc,
    geo: Geometry,
    x_signed: bool,
    y_signed: bool,
    /// Per group: the packed centered weights (GEMM path), or none (depthwise).
    packed: Vec<QPackedB>,
    /// Depthwise: centered weights [M, KH·KW].
    taps: Vec<i16>,
    bias: Vec<i32>,
    mult: Vec<QuantizedMultiplier>,
    th: Threads,
}

fn alloc<T: Clone>(n: usize, v: T, io: &Io) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| io.error(format!("cannot allocate {n} elements")))?;
    out.resize(n, v);
    Ok(out)
}

impl QConvWorkload {
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
        let y_signed = io.outputs[0].dtype == DataType::I8;
        let (m, g) = (geo.m, d.group);
        let (mg, cg) = (m / g, geo.c / g);
        let kk = d.kernel[0] * d.kernel[1];
        let depth = cg * kk;
        let per = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
        let zero = |c: usize| {
            if d.w_zeros.len() == 1 {
                d.w_zeros[0]
            } else {
                d.w_zeros[c]
            }
        };
        let wv = |c: usize, k: usize| (widen(w_signed, w[c * depth + k]) - zero(c)) as i16;
        if w.len() != m * depth {
            return Err(io.error(format!(
                "weights hold {} values, expected {}",
                w.len(),
                m * depth
            )));
        }
        let mut mult = Vec::with_capacity(m);
        for c in 0..m {
            let real = f64::from(d.x.0) * f64::from(per(&d.w_scales, c)) / f64::from(d.y.0);
            mult.push(QuantizedMultiplier::new(real).ok_or_else(|| {
                io.error(format!(
                    "output channel {c}: scale {real} cannot be requantized"
                ))
            })?);
        }
        let depthwise = cg == 1;
        let (mut packed, mut taps) = (Vec::new(), Vec::new());
        if depthwise {
            taps = alloc(m * kk, 0i16, &io)?;
            for c in 0..m {
                for k in 0..kk {
                    taps[c * kk + k] = wv(c, k);
                }
            }
        } else {
            for gi in 0..g {
                let b = QPackedB::pack(depth, mg, |k, j| wv(gi * mg + j, k))
                    .ok_or_else(|| io.error("cannot allocate packed weights".into()))?;
                packed.push(b);
            }
        }
        Ok(QConvWorkload {
            io,
            d,
            geo,
            x_signed,
            y_signed,
            packed,
            taps,
            bias: bias.to_vec(),
            mult,
            th,
        })
    }

    /// Requantize one sum of output channel `c` to the output byte.
    #[inline]
    fn out(&self, c: usize, acc: i32) -> u8 {
        let v = self.mult[c]
            .apply(acc.saturating_add(self.bias[c]))
            .saturating_add(self.d.y.1);
        let v = v.clamp(self.d.clamp.0, self.d.clamp.1);
        if self.y_signed {
            (v as i8) as u8
        } else {
            v as u8
        }
    }

    /// Input pixel (iy, ix) of a centered plane, 0 in the padding.
    #[inline]
    fn at(&self, plane: &[i16], oy: usize, ox: usize, ky: usize, kx: usize) -> i16 {
        let d = &self.d;
        let iy = (oy * d.strides[0] + ky * d.dilations[0]).wrapping_sub(d.pads[0]);
        let ix = (ox * d.strides[1] + kx * d.dilations[1]).wrapping_sub(d.pads[1]);
        if iy < self.geo.h && ix < self.geo.w {
            plane[iy * self.geo.w + ix]
        } else {
            0
        }
    }

    fn depthwise(&self, xc: &[i16], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let (plane, out) = (g.h * g.w, g.oh * g.ow);
        let kk = self.d.kernel[0] * self.d.kernel[1];
        let mg = g.m / self.d.group;
        self.th.chunks(y, out, |i, yc| {
            let (n, c) = (i / g.m, i % g.m);
            let xin = &xc[(n * g.c + c / mg) * plane..][..plane];
            let w = &self.taps[c * kk..(c + 1) * kk];
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let mut acc = 0i32;
                    for ky in 0..self.d.kernel[0] {
                        for kx in 0..self.d.kernel[1] {
                            let v = self.at(xin, oy, ox, ky, kx);
                            acc += i32::from(v) * i32::from(w[ky * self.d.kernel[1] + kx]);
                        }
                    }
                    yc[oy * g.ow + ox] = self.out(c, acc);
                }
            }
            Ok(())
        })
    }

    fn gemm(&self, xc: &[i16], y: &mut [u8]) -> Result<()> {
        let g = &self.geo;
        let d = &self.d;
        let (plane, out) = (g.h * g.w, g.oh * g.ow);
        let (mg, cg) = (g.m / d.group, g.c / d.group);
        let kp = self.packed.first().map_or(0, QPackedB::depth_padded);
        let mut rows = alloc(out * kp, 0i16, &self.io)?;
        for n in 0..g.n {
            for gi in 0..d.group {
                // im2col: one centered row per output pixel, (channel, ky, kx) along it.
                let xin = &xc[(n * g.c + gi * cg) * plane..][..cg * plane];
                self.th.chunks(&mut rows, kp * g.ow, |oy, band| {
                    for ox in 0..g.ow {
                        let row = &mut band[ox * kp..(ox + 1) * kp];
                        let mut k = 0;
                        for ci in 0..cg {
                            let p = &xin[ci * plane..(ci + 1) * plane];
                            for ky in 0..d.kernel[0] {
                                for kx in 0..d.kernel[1] {
                                    row[k] = self.at(p, oy, ox, ky, kx);
                                    k += 1;
                                }
                            }
                        }
                    }
                    Ok(())
                })?;
                let b = &self.packed[gi];
                let ys = &mut y[(n * g.m + gi * mg) * out..][..mg * out];
                self.th.chunks(ys, QNR * out, |p, yp| {
                    let mut c = alloc(out * QNR, 0i32, &self.io)?;
                    if !qgemm_panel(&rows, kp, out, b, p, &mut c, QNR) {
                        return Err(self.io.error("integer GEMM refused its operands".into()));
                    }
                    for (jj, ych) in yp.chunks_mut(out).enumerate() {
                        let ch = gi * mg + p * QNR + jj;
                        for (px, v) in ych.iter_mut().enumerate() {
                            *v = self.out(ch, c[px * QNR + jj]);
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
        self.io
            .check_copied(inputs, outputs, |k| k == 1 || k == 2)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.data;
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        let zx = self.d.x.1;
        let mut xc = alloc(x.len(), 0i16, &self.io)?;
        for (o, &b) in xc.iter_mut().zip(x) {
            *o = (widen(self.x_signed, b) - zx) as i16;
        }
        if self.packed.is_empty() {
            self.depthwise(&xc, y)
        } else {
            self.gemm(&xc, y)
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

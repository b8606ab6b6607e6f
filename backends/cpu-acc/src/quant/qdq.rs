//! QuantizeLinear and DequantizeLinear between f32 and 8-bit integers, per tensor or per
//! axis, with constant scales and zero points: the same arithmetic as CpuRef, value for
//! value (quotient in f32, rounded half to even, saturated; dequantized products in f32).
//! Also the per-tensor QuantizeLinear of an NCHW f32 tensor written channels-last
//! (`QuantizeToNhwc`, made by [`super::region`] where an int8 region starts at a quantized
//! image): the same values, one pass instead of a transpose and a quantization.

use super::{is_8bit, payload_of, range, widen, QUANTIZE_NHWC};
use crate::io::Io;
use crate::plan::{done, Plan};
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::{DataType, Op, TensorInfo, TensorView, TensorViewMut};

/// Scales and zero points, one per slice along the axis (or one for the tensor).
#[derive(Debug, Clone)]
struct Params {
    scales: Vec<f32>,
    zeros: Vec<i32>,
    /// Elements per slice along the axis (1 for a per-tensor layer: every index maps to 0).
    inner: usize,
    /// Slices along the axis.
    len: usize,
}

impl Params {
    /// The runs of elements sharing one scale and zero point, in a tensor of `n` elements:
    /// the whole tensor when per tensor, else one slice along the axis.
    fn run(&self, n: usize) -> usize {
        if self.len <= 1 {
            n.max(1)
        } else {
            self.inner.max(1)
        }
    }

    /// The scale and zero point of run `j` (of [`Params::run`] elements).
    #[inline]
    fn of_run(&self, j: usize) -> (f32, i32) {
        let k = j % self.len.max(1);
        (self.scales[k], self.zeros[k])
    }
}

fn params(layer: &LayerDesc, axis: i64, q: DataType) -> std::result::Result<Params, String> {
    let name = layer.op.name();
    let x = layer.inputs.first().ok_or("no input")?;
    let scale = layer
        .constant(1)
        .ok_or_else(|| format!("CpuAcc runs {name} with a constant scale only"))?;
    let scales = scale
        .as_slice::<f32>()
        .map_err(|_| format!("CpuAcc runs {name} with f32 scales only"))?
        .to_vec();
    let zeros: Vec<i32> = match layer.inputs.get(2) {
        None => vec![0; scales.len()],
        Some(_) => {
            let z = layer
                .constant(2)
                .ok_or_else(|| format!("CpuAcc runs {name} with a constant zero point only"))?;
            if z.dtype() != q {
                return Err(format!("{name}'s zero point is {}, not {q}", z.dtype()));
            }
            if q == DataType::I32 {
                z.as_slice::<i32>().map_err(|e| e.to_string())?.to_vec()
            } else {
                z.bytes()
                    .iter()
                    .map(|&b| widen(q == DataType::I8, b))
                    .collect()
            }
        }
    };
    if zeros.len() != scales.len() || scales.is_empty() {
        return Err(format!(
            "{name}: {} scales, {} zero points",
            scales.len(),
            zeros.len()
        ));
    }
    let dims = x.shape.dims();
    if scales.len() == 1 {
        return Ok(Params {
            scales,
            zeros,
            inner: 1,
            len: 1,
        });
    }
    let rank = dims.len() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    let Some(a) = usize::try_from(a).ok().filter(|&a| a < dims.len()) else {
        return Err(format!("{name}: axis {axis} of a rank-{rank} tensor"));
    };
    if dims[a] != scales.len() {
        return Err(format!(
            "{name}: {} scales along an axis of {}",
            scales.len(),
            dims[a]
        ));
    }
    Ok(Params {
        scales,
        zeros,
        inner: dims[a + 1..].iter().product::<usize>().max(1),
        len: dims[a],
    })
}

/// The plan of a QuantizeLinear (f32 → i8/u8) or DequantizeLinear (i8/u8 → f32) layer with
/// per-tensor or per-axis constant parameters.
pub(super) fn plan(layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let x = layer.inputs.first().ok_or("no input")?;
    match layer.op {
        Op::QuantizeLinear {
            axis,
            to,
            block_size: 0,
            ..
        } if x.dtype == DataType::F32 && is_8bit(to) => {
            let p = params(layer, axis, to)?;
            Ok(Plan::new(move |io, _| {
                done(Quantize {
                    io,
                    p,
                    lo: range(to).0 as f32,
                    hi: range(to).1 as f32,
                })
            }))
        }
        Op::DequantizeLinear {
            axis,
            to: DataType::F32,
            block_size: 0,
        } if is_8bit(x.dtype) || x.dtype == DataType::I32 => {
            let p = params(layer, axis, x.dtype)?;
            let kind = x.dtype;
            Ok(Plan::new(move |io, _| done(Dequantize { io, p, kind })))
        }
        _ => Err(format!(
            "CpuAcc runs {} between f32 and 8-bit integers (int32 too when dequantizing), per tensor or per axis, only",
            layer.op.name()
        )),
    }
}

fn short(io: &Io) -> BackendError {
    io.error("missing input or output".into())
}

/// 1.5·2²³: a float of magnitude below 2²² plus this holds it rounded half to even in its
/// low mantissa bits.
const ROUNDER: f32 = 12_582_912.0;

/// f32 → 8-bit: `clamp(round_half_even(x / scale) + zero point)`.
struct Quantize {
    io: Io,
    p: Params,
    lo: f32,
    hi: f32,
}

impl Workload for Quantize {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = inputs
            .first()
            .ok_or_else(|| short(&self.io))?
            .as_slice::<f32>()?;
        let y = &mut outputs.first_mut().ok_or_else(|| short(&self.io))?.data;
        let run = self.p.run(x.len());
        for (j, (xs, ys)) in x.chunks(run).zip(y.chunks_mut(run)).enumerate() {
            let (s, z) = self.p.of_run(j);
            quantize_run(xs, ys, s, z, self.lo, self.hi);
        }
        Ok(())
    }
}

/// `ys[i] = clamp(round_half_even(xs[i] / s) + z, lo, hi)` (NaN to 0, as CpuRef converts
/// it).
#[inline]
fn quantize_run(xs: &[f32], ys: &mut [u8], s: f32, z: i32, lo: f32, hi: f32) {
    // Clamping before rounding equals rounding before clamping (integer bounds), and
    // leaves |v| < 2²², where adding ROUNDER rounds half to even in the float adder
    // (`round_ties_even` is a library call per element without SSE4.1).
    let (lo, hi) = (lo - z as f32, hi - z as f32);
    for (&v, out) in xs.iter().zip(ys) {
        let d = v / s;
        let r = (d.max(lo).min(hi) + ROUNDER).to_bits() as i32 - ROUNDER.to_bits() as i32;
        *out = if d.is_nan() { 0 } else { (r + z) as u8 };
    }
}

/// What a `QuantizeToNhwc` layer makes (its custom op's payload): the 8-bit type.
#[derive(Debug, Clone)]
pub(crate) struct QuantizeNhwcDesc {
    to: DataType,
}

/// The custom op quantizing an NCHW f32 tensor per tensor into the channels-last 8-bit
/// tensor `y` (inputs as QuantizeLinear's: x, scale, optional zero point).
pub(crate) fn quantize_nhwc_op(to: DataType, y: TensorInfo) -> CustomOp {
    super::custom_op(QUANTIZE_NHWC, &QuantizeNhwcDesc { to }, y)
}

/// The plan of a `QuantizeToNhwc` layer.
pub(super) fn plan_nhwc<'a>(
    c: &CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d: QuantizeNhwcDesc = payload_of(c, QUANTIZE_NHWC)?;
    let x = layer.inputs.first().ok_or("no input")?;
    let y = layer.outputs.first().ok_or("no output")?;
    let (&[n, ch, h, w], &[yn, yh, yw, yc]) = (x.shape.dims(), y.shape.dims()) else {
        return Err(format!("{QUANTIZE_NHWC}: 4-D input and output expected"));
    };
    if x.dtype != DataType::F32 || !is_8bit(d.to) || y.dtype != d.to {
        return Err(format!("{QUANTIZE_NHWC}: f32 to 8-bit only"));
    }
    if (yn, yh, yw, yc) != (n, h, w, ch) {
        return Err(format!(
            "{QUANTIZE_NHWC}: output not the input channels-last"
        ));
    }
    let p = params(layer, 1, d.to)?;
    if p.len > 1 {
        return Err(format!("{QUANTIZE_NHWC}: per tensor only"));
    }
    let (lo, hi) = range(d.to);
    Ok(Plan::new(move |io, _| {
        done(QuantizeNhwc {
            io,
            p,
            lo: lo as f32,
            hi: hi as f32,
            dims: [n, ch, h, w],
        })
    }))
}

/// f32 `[N, C, H, W]` → 8-bit `[N, H, W, C]`, per tensor: each row of a channel's plane
/// quantized as [`Quantize`] does, then its bytes spread at a stride of C.
struct QuantizeNhwc {
    io: Io,
    p: Params,
    lo: f32,
    hi: f32,
    dims: [usize; 4],
}

impl Workload for QuantizeNhwc {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = inputs
            .first()
            .ok_or_else(|| short(&self.io))?
            .as_slice::<f32>()?;
        let y = &mut outputs.first_mut().ok_or_else(|| short(&self.io))?.data;
        let [n, c, h, w] = self.dims;
        if x.len() != n * c * h * w || y.len() != x.len() {
            return Err(short(&self.io));
        }
        let (s, z) = self.p.of_run(0);
        let mut row = Vec::new();
        row.try_reserve_exact(w)
            .map_err(|_| self.io.error("cannot allocate a row".into()))?;
        row.resize(w, 0u8);
        for (plane, xs) in x.chunks_exact((h * w).max(1)).enumerate() {
            let (ni, ci) = (plane / c.max(1), plane % c.max(1));
            for (yi, xr) in xs.chunks_exact(w.max(1)).enumerate() {
                quantize_run(xr, &mut row, s, z, self.lo, self.hi);
                let base = (ni * h + yi) * w * c + ci;
                for (dst, &b) in y[base..].iter_mut().step_by(c.max(1)).zip(&row) {
                    *dst = b;
                }
            }
        }
        Ok(())
    }
}

/// 8-bit or int32 (a bias) → f32: `(q - zero point) · scale`, the difference rounded to
/// f32 once (exact for 8-bit values).
struct Dequantize {
    io: Io,
    p: Params,
    kind: DataType,
}

impl Workload for Dequantize {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = inputs.first().ok_or_else(|| short(&self.io))?;
        let y = outputs
            .first_mut()
            .ok_or_else(|| short(&self.io))?
            .as_mut_slice::<f32>()?;
        let run = self.p.run(y.len());
        if self.kind == DataType::I32 {
            let x = x.as_slice::<i32>()?;
            for (j, (xs, ys)) in x.chunks(run).zip(y.chunks_mut(run)).enumerate() {
                let (s, z) = self.p.of_run(j);
                for (&v, out) in xs.iter().zip(ys) {
                    *out = (i64::from(v) - i64::from(z)) as f32 * s;
                }
            }
            return Ok(());
        }
        let signed = self.kind == DataType::I8;
        for (j, (xs, ys)) in x.data.chunks(run).zip(y.chunks_mut(run)).enumerate() {
            let (s, z) = self.p.of_run(j);
            // One loop per signedness, so that each vectorizes.
            if signed {
                for (&b, out) in xs.iter().zip(ys) {
                    *out = (widen(true, b) - z) as f32 * s;
                }
            } else {
                for (&b, out) in xs.iter().zip(ys) {
                    *out = (widen(false, b) - z) as f32 * s;
                }
            }
        }
        Ok(())
    }
}

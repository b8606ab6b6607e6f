//! Dynamic quantization, as ONNX Runtime's `quantize_dynamic` writes transformers:
//! `DynamicQuantizeLinear(x)` picks a uint8 scale and zero point from each execution's
//! values, and `MatMulInteger(x_u8, w_i8 const, x_zero_point)` multiplies the bytes with int32
//! sums (the importer lowers it to `Cast → Sub → MatMul` on int32, which [`super::fold`]
//! folds back into the integer product here, custom `MatMulInteger`). The float work around
//! them (the scales' product, the Cast of the sums, the bias) stays elementwise layers.
//!
//! - [`DynamicQuantize`]: the minimum and maximum over the tensor, then each value divided by
//!   the scale in f32 and rounded half to even in f64, as CpuRef computes them, so the bytes,
//!   the scale and the zero point equal CpuRef's.
//! - [`IntegerMatMul`]: the rows of x against the constant centered weights packed once:
//!   on AVX-512 VNNI the byte GEMM (`vpdpbusd`, x's bytes as they are, the zero point times
//!   each column's weight sum taken off after) where every centered weight fits i8, else the
//!   16-bit pair GEMM of x less its zero point; exact int32 sums either way, equal to
//!   CpuRef's int32 MatMul of the lowered chain.

use super::conv::alloc;
use super::{is_8bit, payload_of, MATMUL_INTEGER};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use crate::weights;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::{DataType, Tensor, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    center_i8, center_u8, qgemm, quad_gemm_sums, quads_in_use, QPackedB, QuadPackedB, QNR,
};
use std::sync::{Arc, Mutex};

/// Rows of x per block of the integer product (centered, then multiplied, together).
const BLOCK_ROWS: usize = 32;

/// Values of x per parallel task of the dynamic quantization.
const QUANTIZE_CHUNK: usize = 1 << 16;

/// The plan of a DynamicQuantizeLinear layer: f32 x, outputs uint8 y, f32 scale and uint8
/// zero point (scalars).
pub(super) fn plan_dynamic_quantize(layer: &LayerDesc) -> std::result::Result<Plan<'_>, String> {
    let [x] = layer.inputs.as_slice() else {
        return Err("DynamicQuantizeLinear takes one input".into());
    };
    let [y, s, z] = layer.outputs.as_slice() else {
        return Err("DynamicQuantizeLinear has three outputs".into());
    };
    let types = [x.dtype, y.dtype, s.dtype, z.dtype];
    if types != [DataType::F32, DataType::U8, DataType::F32, DataType::U8] {
        return Err(format!(
            "DynamicQuantizeLinear of {} to {}: only f32 to uint8",
            x.dtype, y.dtype
        ));
    }
    if s.shape.elements() != 1 || z.shape.elements() != 1 {
        return Err("DynamicQuantizeLinear: scale and zero point must be scalars".into());
    }
    Ok(Plan::new(|io, th| done(DynamicQuantize { io, th })))
}

/// DynamicQuantizeLinear of an f32 tensor.
struct DynamicQuantize {
    io: Io,
    th: Threads,
}

backplane_cpu_kernels::multiversion! {
    /// The maximum of 0 and `x`'s values, and the minimum of 0 and them (NaNs skipped).
    fn extremes(x: &[f32]) -> (f32, f32) => extremes_body;
}

backplane_cpu_kernels::multiversion! {
    /// `y[i]` = x[i] quantized on `scale` and `zero` (see [`quantize_body`]).
    fn quantize(x: &[f32], scale: f32, zero: f32, y: &mut [u8]) => quantize_body;
}

#[inline(always)]
fn extremes_body(x: &[f32]) -> (f32, f32) {
    // Sixteen lanes of running extremes, folded at the end: max and min are exact, so the
    // order does not change the result. Comparisons (a NaN never wins one) rather than
    // `f32::max`, which the compiler does not vectorize.
    let (mut hi, mut lo) = ([0f32; 16], [0f32; 16]);
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for ((h, l), &v) in hi.iter_mut().zip(lo.iter_mut()).zip(c) {
            *h = if v > *h { v } else { *h };
            *l = if v < *l { v } else { *l };
        }
    }
    let rest = chunks.remainder();
    let hi = hi
        .iter()
        .chain(rest)
        .fold(0f32, |m, &v| if v > m { v } else { m });
    let lo = lo
        .iter()
        .chain(rest)
        .fold(0f32, |m, &v| if v < m { v } else { m });
    (hi, lo)
}

/// Each value: `round_half_even(x / scale) + zero`, saturated to [0, 255] (NaN to 0); with
/// scale 0, the zero point. CpuRef rounds the f32 quotient in f64; here in f32, the same
/// integer (the conversion to f64 is exact, and an f32 at or past 2²³ is an integer
/// already), and the sum with the zero point is exact in f32 below 2²⁴, past which both
/// saturate.
#[inline(always)]
fn quantize_body(x: &[f32], scale: f32, zero: f32, y: &mut [u8]) {
    if scale == 0.0 {
        y.fill(zero.clamp(0.0, 255.0) as u8);
        return;
    }
    // The byte is taken from the bits of `r + 2²³` (exact for the integers 0..=255), as
    // `as u8` on a float compiles to one conversion per element; comparisons (not `clamp`)
    // send NaN to 0.
    const INTEGER_BITS: f32 = 8_388_608.0;
    for (o, &v) in y.iter_mut().zip(x) {
        let r = (v / scale).round_ties_even() + zero;
        let r = if r > 0.0 { r } else { 0.0 };
        let r = if r < 255.0 { r } else { 255.0 };
        *o = (r + INTEGER_BITS).to_bits() as u8;
    }
}

impl Workload for DynamicQuantize {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.as_slice::<f32>()?;
        let [y, s, z] = outputs else {
            return Err(missing());
        };
        // The extremes per task, then of the tasks (exact: any order).
        let tasks = x.len().div_ceil(QUANTIZE_CHUNK).max(1);
        let parts = Mutex::new(Vec::new());
        self.th.range(tasks, |t| {
            let part = x.get(t * QUANTIZE_CHUNK..).unwrap_or(&[]);
            let e = extremes(&part[..part.len().min(QUANTIZE_CHUNK)]);
            parts.lock().unwrap_or_else(|p| p.into_inner()).push(e);
            Ok(())
        })?;
        let parts = parts.into_inner().unwrap_or_else(|p| p.into_inner());
        let max = parts.iter().fold(0f32, |m, e| m.max(e.0));
        let min = parts.iter().fold(0f32, |m, e| m.min(e.1));
        let scale = (max - min) / 255.0;
        let zero = if scale == 0.0 {
            0.0
        } else {
            (f64::from(-min) / f64::from(scale))
                .round_ties_even()
                .clamp(0.0, 255.0)
        };
        let y = &mut *y.data;
        self.th.chunks(y, QUANTIZE_CHUNK, |t, yc| {
            let xs = &x[t * QUANTIZE_CHUNK..][..yc.len()];
            quantize(xs, scale, zero as f32, yc);
            Ok(())
        })?;
        s.data.copy_from_slice(&scale.to_le_bytes());
        if let Some(b) = z.data.first_mut() {
            *b = zero as u8;
        }
        Ok(())
    }
}

/// What a folded integer product computes (its custom op's payload): the weights' shape
/// and which optional inputs follow x and w, in this order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MatMulIntegerDesc {
    /// K and N of the constant weights `[K, N]`.
    pub k: usize,
    /// N.
    pub n: usize,
    /// The weights are 8-bit with this zero point (else int32, centered already).
    pub w_zero: Option<i32>,
    /// x's 8-bit scalar zero point is an input (else 0).
    pub zero_point: bool,
    /// An f32 scalar input scales the sums: y = f32(sums) · scale (the Cast and Mul after a
    /// MatMulInteger), f32 output; else y is the int32 sums.
    pub scaled: bool,
    /// With `scaled`, a constant f32 `[N]` input is added after the scale (the bias).
    pub bias: bool,
}

impl MatMulIntegerDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(MATMUL_INTEGER, self, y)
    }
}

/// The plan of a folded integer product: x `[..., M, K]` of 8-bit values, constant int32
/// weights `[K, N]` (8-bit values less their zero point), then as the description says x's
/// 8-bit scalar zero point, an f32 scalar scale and a constant f32 bias `[N]`; y `[..., M,
/// N]`, int32 sums or f32 scaled ones.
pub(super) fn plan_matmul_integer<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d: MatMulIntegerDesc = payload_of(c, MATMUL_INTEGER)?;
    let bad = |what: &str| format!("{MATMUL_INTEGER}: {what}");
    let (x, w) = match layer.inputs.as_slice() {
        [x, w, ..] => (x, w),
        _ => return Err(bad("x and w expected")),
    };
    let slots = |on: bool, slot: usize| if on { slot + 1 } else { slot };
    let zero_at = d.zero_point.then_some(2);
    let scale_at = d.scaled.then(|| slots(d.zero_point, 2));
    let bias_at = (d.scaled && d.bias).then(|| slots(d.zero_point, 3));
    let count =
        2 + usize::from(d.zero_point) + usize::from(d.scaled) + usize::from(bias_at.is_some());
    if layer.inputs.len() != count || (d.bias && !d.scaled) {
        return Err(bad("inputs do not match the description"));
    }
    let scalar_of = |slot: Option<usize>, dt: DataType| {
        slot.is_none_or(|s| layer.inputs[s].dtype == dt && layer.inputs[s].shape.elements() == 1)
    };
    let y = layer.outputs.first().ok_or("no output")?;
    let (k, n) = (d.k, d.n);
    let m = x.shape.elements().checked_div(k).unwrap_or(0);
    let y_type = if d.scaled {
        DataType::F32
    } else {
        DataType::I32
    };
    let w_type_fits = match d.w_zero {
        Some(_) => is_8bit(w.dtype),
        None => w.dtype == DataType::I32,
    };
    let fits = is_8bit(x.dtype)
        && w_type_fits
        && y.dtype == y_type
        && w.shape.dims() == [k, n]
        && k > 0
        && m.checked_mul(k) == Some(x.shape.elements())
        && m.checked_mul(n) == Some(y.shape.elements())
        && scalar_of(zero_at, x.dtype)
        && scalar_of(scale_at, DataType::F32);
    if !fits {
        return Err(format!(
            "{MATMUL_INTEGER}: x {} {}, w {} {}, y {} {} disagree",
            x.dtype, x.shape, w.dtype, w.shape, y.dtype, y.shape
        ));
    }
    let wt = layer
        .constants
        .get(1)
        .and_then(Option::as_ref)
        .ok_or_else(|| bad("the weights must be constant"))?;
    let weights = match d.w_zero {
        None => {
            let values = wt.as_slice::<i32>().map_err(|e| e.to_string())?;
            if values.iter().any(|v| !(-255..=255).contains(v)) {
                return Err(bad("weights outside centered 8-bit values"));
            }
            Weights::Centered(values)
        }
        Some(zero) => {
            let signed = w.dtype == DataType::I8;
            let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
            if !(-255..=255).contains(&(lo - zero)) || !(-255..=255).contains(&(hi - zero)) {
                return Err(bad("the weights' zero point leaves centered 8-bit values"));
            }
            Weights::Bytes {
                bytes: wt.bytes(),
                signed,
                zero,
            }
        }
    };
    let bias = match bias_at {
        Some(s) => {
            let b = layer
                .constants
                .get(s)
                .and_then(Option::as_ref)
                .ok_or_else(|| bad("the bias must be constant"))?;
            if b.as_slice::<f32>().map_err(|e| e.to_string())?.len() != n {
                return Err(bad("the bias must hold N values"));
            }
            Some(b)
        }
        None => None,
    };
    Ok(Plan::new(move |io, th| {
        // A copy of the constant bias, shared with other plans' workloads.
        let bias = match bias {
            Some(b) => Some(weights::shared(b, "matmul_integer_bias", &[n], || {
                let mut v = alloc(n, 0f32, &io)?;
                v.copy_from_slice(b.as_slice::<f32>()?);
                Ok(v)
            })?),
            None => None,
        };
        let slots = Slots {
            zero: zero_at,
            scale: scale_at,
        };
        let b = packed(wt, weights, (k, n), &io)?;
        done(IntegerMatMul::new(io, [m, k, n], b, slots, bias, th)?)
    }))
}

/// The weights `w` (the constant `wt`, `[K, N]`) packed for the byte GEMM where its tile is
/// in use and every centered value fits i8, else for the pair GEMM: shared with other plans'
/// workloads through the cache of packed constants (keyed by the form's parameters: shape,
/// kind of values, signedness, zero point).
fn packed(
    wt: &Arc<Tensor>,
    w: Weights<'_>,
    (k, n): (usize, usize),
    io: &Io,
) -> Result<Arc<Packed>> {
    let form = match w {
        Weights::Centered(_) => [0, 0, 0],
        Weights::Bytes { signed, zero, .. } => [1, usize::from(signed), zero as u32 as usize],
    };
    let quads = quads_in_use();
    let key = [k, n, usize::from(quads), form[0], form[1], form[2]];
    weights::shared(wt, "matmul_integer_b", &key, || {
        // The centered values were checked to lie in [-255, 255].
        let value = |kk: usize, c: usize| match w {
            Weights::Centered(v) => v[kk * n + c] as i16,
            Weights::Bytes {
                bytes,
                signed,
                zero,
            } => (super::widen(signed, bytes[kk * n + c]) - zero) as i16,
        };
        let quads = if quads {
            QuadPackedB::pack(k, n, value)
        } else {
            None
        };
        Ok(match quads {
            Some(q) => Packed::Quads(q),
            None => Packed::Pairs(
                QPackedB::pack(k, n, value)
                    .ok_or_else(|| io.error("cannot allocate the packed weights".into()))?,
            ),
        })
    })
}

/// The constant weights of an integer product, `[K, N]`.
#[derive(Clone, Copy)]
enum Weights<'a> {
    /// int32 values, centered 8-bit ones.
    Centered(&'a [i32]),
    /// 8-bit values and their zero point.
    Bytes {
        bytes: &'a [u8],
        signed: bool,
        zero: i32,
    },
}

/// The output of an integer product: its int32 sums, or their scaled f32 values.
enum Out<'a> {
    I32(&'a mut [i32]),
    F32(&'a mut [f32]),
}

/// Where the optional run-time inputs of an integer product are.
#[derive(Debug, Clone, Copy)]
struct Slots {
    zero: Option<usize>,
    scale: Option<usize>,
}

/// The folded integer product.
struct IntegerMatMul {
    io: Io,
    rows: usize,
    k: usize,
    n: usize,
    x_signed: bool,
    /// Shared with other plans' workloads ([`packed`]).
    b: Arc<Packed>,
    slots: Slots,
    /// The bias added after the scale (copied at load, shared with other plans' workloads).
    bias: Option<Arc<Vec<f32>>>,
    /// The byte GEMM's rows of x, kept between executions.
    bytes: Mutex<Vec<u8>>,
    /// The byte GEMM's tasks' sums buffers, kept between executions (a large buffer is not
    /// mapped afresh each time).
    sums: Mutex<Vec<Vec<i32>>>,
    th: Threads,
}

/// The packed weights: i8 quads for the byte GEMM where the tier has its tile and every
/// centered weight fits i8 (ONNX Runtime's symmetric int8 weights), else 16-bit pairs.
enum Packed {
    Pairs(QPackedB),
    Quads(QuadPackedB),
}

impl IntegerMatMul {
    fn new(
        io: Io,
        [rows, k, n]: [usize; 3],
        b: Arc<Packed>,
        slots: Slots,
        bias: Option<Arc<Vec<f32>>>,
        th: Threads,
    ) -> Result<Self> {
        Ok(IntegerMatMul {
            x_signed: io.inputs[0].dtype == DataType::I8,
            io,
            rows,
            k,
            n,
            b,
            slots,
            bias,
            bytes: Mutex::new(Vec::new()),
            sums: Mutex::new(Vec::new()),
            th,
        })
    }

    /// The sums of rows `r0 .. r0 + rows` (at most [`BLOCK_ROWS`]) of x less its zero point
    /// into `c` (rows of N), on the pair GEMM; `a` the scratch of the centered rows (rows of
    /// `b.depth_padded()`, the K padding zero).
    #[allow(clippy::too_many_arguments)]
    fn pair_sums(
        &self,
        b: &QPackedB,
        x: &[u8],
        zero: i32,
        r0: usize,
        rows: usize,
        a: &mut [i16],
        c: &mut [i32],
    ) -> Result<()> {
        let (k, n) = (self.k, self.n);
        let kp = b.depth_padded();
        let center = if self.x_signed { center_i8 } else { center_u8 };
        for (i, row) in a.chunks_exact_mut(kp).take(rows).enumerate() {
            center(&mut row[..k], &x[(r0 + i) * k..][..k], zero);
        }
        if qgemm(a, kp, rows, b, c, n) {
            Ok(())
        } else {
            Err(self.io.error("integer GEMM refused its operands".into()))
        }
    }
}

backplane_cpu_kernels::multiversion! {
    /// `y[i] = f32(c[i]) · scale`, plus `bias[i % N]` when given (N = `bias.len()`).
    fn scale_sums(c: &[i32], scale: f32, bias: &[f32], y: &mut [f32]) => scale_sums_body;
}

/// The unfolded chain's operations in its order: the Cast (nearest f32), the Mul, the Add.
#[inline(always)]
fn scale_sums_body(c: &[i32], scale: f32, bias: &[f32], y: &mut [f32]) {
    if bias.is_empty() {
        for (o, &s) in y.iter_mut().zip(c) {
            *o = s as f32 * scale;
        }
        return;
    }
    for (yr, cr) in y
        .chunks_exact_mut(bias.len())
        .zip(c.chunks_exact(bias.len()))
    {
        for ((o, &s), &b) in yr.iter_mut().zip(cr).zip(bias) {
            *o = s as f32 * scale + b;
        }
    }
}

impl Workload for IntegerMatMul {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io
            .check_copied(inputs, outputs, |k| k == 1 || Some(k) == self.bias_slot())?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let x = inputs.first().ok_or_else(missing)?.data;
        let zero = match self.slots.zero {
            Some(s) => {
                let b = *inputs
                    .get(s)
                    .and_then(|z| z.data.first())
                    .ok_or_else(missing)?;
                super::widen(self.x_signed, b)
            }
            None => 0,
        };
        let n = self.n;
        let per_task = self.th.chunk_size(self.rows, BLOCK_ROWS, BLOCK_ROWS);
        let y = outputs.first_mut().ok_or_else(missing)?;
        let scale = match self.slots.scale {
            Some(s) => {
                let v = inputs.get(s).ok_or_else(missing)?.as_slice::<f32>()?;
                Some(*v.first().ok_or_else(missing)?)
            }
            None => None,
        };
        let b = match &*self.b {
            Packed::Quads(b) => return self.quads(b, x, zero, scale, y),
            Packed::Pairs(b) => b,
        };
        let kp = b.depth_padded();
        let Some(scale) = scale else {
            let y = y.as_mut_slice::<i32>()?;
            return self.th.chunks(y, per_task * n, |t, yc| {
                // The K padding (past the depth) stays zero.
                let mut a = alloc(BLOCK_ROWS * kp, 0i16, &self.io)?;
                for (bi, yb) in yc.chunks_mut(BLOCK_ROWS * n).enumerate() {
                    let rows = yb.len() / n.max(1);
                    let r0 = t * per_task + bi * BLOCK_ROWS;
                    self.pair_sums(b, x, zero, r0, rows, &mut a, yb)?;
                }
                Ok(())
            });
        };
        let bias = self.bias.as_ref().map_or(&[][..], |b| b.as_slice());
        let y = y.as_mut_slice::<f32>()?;
        self.th.chunks(y, per_task * n, |t, yc| {
            let mut a = alloc(BLOCK_ROWS * kp, 0i16, &self.io)?;
            let mut c = alloc(BLOCK_ROWS * n, 0i32, &self.io)?;
            for (bi, yb) in yc.chunks_mut(BLOCK_ROWS * n).enumerate() {
                let rows = yb.len() / n.max(1);
                let c = &mut c[..rows * n];
                let r0 = t * per_task + bi * BLOCK_ROWS;
                self.pair_sums(b, x, zero, r0, rows, &mut a, c)?;
                scale_sums(c, scale, bias, yb);
            }
            Ok(())
        })
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        slot != 1 && Some(slot) != self.bias_slot()
    }
}

/// Most panels of B one task of [`IntegerMatMul::quads`] takes (their int32 sums for every
/// row are a task's scratch).
const TASK_PANELS: usize = 64;

impl IntegerMatMul {
    /// The product on the byte GEMM: every row of x as bytes once, then the threads share
    /// the panels of B (each reads its share of the weights once, whatever the rows),
    /// writing their columns of y (the int32 sums, or scaled and biased f32 values).
    fn quads(
        &self,
        b: &QuadPackedB,
        x: &[u8],
        zero: i32,
        scale: Option<f32>,
        y: &mut TensorViewMut<'_>,
    ) -> Result<()> {
        let (rows, k, n) = (self.rows, self.k, self.n);
        let kq = b.depth_padded();
        // Unsigned bytes: int8 values flipped to x + 128, the zero point with them.
        let (flip, zero) = super::unsigned_form(self.x_signed, zero);
        // The byte rows' buffer of the previous execution (its K padding still zero).
        let mut a = std::mem::take(&mut *self.bytes.lock().unwrap_or_else(|p| p.into_inner()));
        if a.len() != rows * kq {
            a = alloc(rows * kq, 0u8, &self.io)?;
        }
        super::unsigned_rows(x, k, flip, &mut a, kq);
        let all = n.div_ceil(QNR);
        let per = all.div_ceil(2 * self.th.count()).clamp(1, TASK_PANELS);
        let bias = self.bias.as_ref().map_or(&[][..], |b| b.as_slice());
        let out = match scale {
            Some(_) => Out::F32(y.as_mut_slice::<f32>()?),
            None => Out::I32(y.as_mut_slice::<i32>()?),
        };
        let out = Mutex::new(out);
        let result = self.th.range(all.div_ceil(per), |t| {
            let panels = t * per..((t + 1) * per).min(all);
            let width = (panels.end * QNR).min(n) - panels.start * QNR;
            // A sums buffer kept from an earlier execution, or a new one.
            let kept = self.sums.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut c = match kept {
                Some(c) if c.len() >= rows * width => c,
                _ => alloc(rows * per * QNR, 0i32, &self.io)?,
            };
            let done = self.write_sums(b, &a, kq, zero, scale, bias, panels, &mut c, &out);
            self.sums.lock().unwrap_or_else(|p| p.into_inner()).push(c);
            done
        });
        *self.bytes.lock().unwrap_or_else(|p| p.into_inner()) = a;
        result
    }

    /// One task of [`IntegerMatMul::quads`]: the sums of every row for `panels` into `c`,
    /// then their columns of the output.
    #[allow(clippy::too_many_arguments)]
    fn write_sums(
        &self,
        b: &QuadPackedB,
        a: &[u8],
        kq: usize,
        zero: i32,
        scale: Option<f32>,
        bias: &[f32],
        panels: std::ops::Range<usize>,
        c: &mut [i32],
        out: &Mutex<Out<'_>>,
    ) -> Result<()> {
        let (rows, n) = (self.rows, self.n);
        let first = panels.start * QNR;
        let width = (panels.end * QNR).min(n) - first;
        let c = &mut c[..rows * width];
        if !quad_gemm_sums(a, kq, rows, b, panels, c, width) {
            return Err(self.io.error("integer GEMM refused its operands".into()));
        }
        // Σ (a − za)·w = Σ a·w − za·Σ w (wrapping, as the sums are).
        let sums = &b.column_sums()[first..first + width];
        for row in c.chunks_exact_mut(width) {
            for (v, &cs) in row.iter_mut().zip(sums) {
                *v = v.wrapping_sub(zero.wrapping_mul(cs));
            }
        }
        let bias = bias.get(first..first + width).unwrap_or(&[]);
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        for (i, row) in c.chunks_exact(width).enumerate() {
            match (&mut *out, scale) {
                (Out::F32(y), Some(s)) => {
                    scale_sums(row, s, bias, &mut y[i * n + first..][..width])
                }
                (Out::I32(y), _) => y[i * n + first..][..width].copy_from_slice(row),
                (Out::F32(_), None) => {}
            }
        }
        Ok(())
    }

    /// The input slot of the bias, if the layer has one.
    fn bias_slot(&self) -> Option<usize> {
        self.bias.as_ref().map(|_| self.io.inputs.len() - 1)
    }
}

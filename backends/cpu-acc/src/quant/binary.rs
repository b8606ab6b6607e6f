//! The quantized elementwise binary layer (custom `QLinearBinary`, made by [`super::fold`]
//! from `DequantizeLinear(a), DequantizeLinear(b) → Add | Sub | Mul | Max | Min → (Relu |
//! Clip) → QuantizeLinear`, the inputs of one shape or broadcast to the output's by numpy's
//! rule, as a squeeze-excite block's `[N, C, H, W] · [N, C, 1, 1]` gate): one pass over the
//! 8-bit inputs instead of four layers and two f32 tensors. The output is walked in rows
//! along its innermost axes (merged where both inputs allow), each input advancing along a
//! row or repeating one value.
//!
//! Each element is computed with the f32 operations of the unfolded chain, in its order
//! (`(q - z) · s` per input, the operation, the quotient by the output scale rounded half to
//! even, the zero point added, saturated), so it equals CpuRef's chain bit for bit; the fused
//! activation is the clamp of the quantized result, which equals quantizing the clamped value
//! (quantization is monotone). TFLite's reference ADD instead rescales in fixed point (20-bit
//! left shift, 31-bit multipliers): its results may differ by one quantum near a boundary.

use super::binary_affine::{affine_row, Affine};
use super::binary_rows::{
    binary_row, binary_rows, const_row, const_row_in_place, pair_row, Deq, Pair, Req, RowBlock,
    RowKernel,
};
use super::{range, widen, QLINEAR_BINARY};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{BinaryOp, CustomOp};
use backplane_core::quant::{
    multiply_by_quantized_multiplier, quantize_multiplier, Requantization,
};
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::isa::{isa_in_use, Isa};

/// Elements per piece when long rows are cut for the threads (a multiple of every tier's
/// vector width).
const ROW_PIECE: usize = 1024;

/// The fewest elements a thread's chunk holds: below that a hand-off costs more than the
/// chunk (each element is a few f32 operations).
const MIN_CHUNK: usize = 4 * 1024;

/// The longest row of constants the layer turns into byte tables ([`QBinary::tables`]):
/// shorter rows repeated at every pixel (an image's per-channel normalization over three
/// channels) cost a call and a vector remainder per row on the f32 path, a look-up per
/// element by table; longer rows vectorize well.
const MAX_TABLE_ROW: usize = 32;

/// What a folded quantized binary layer computes (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QBinaryDesc {
    /// The operation.
    pub op: BinaryOp,
    /// Scale and zero point of the first input.
    pub a: (f32, i32),
    /// Scale and zero point of the second input.
    pub b: (f32, i32),
    /// Scale and zero point of the output.
    pub y: (f32, i32),
    /// The fused activation's range in output units.
    pub clamp: (i32, i32),
    /// The second operand as f32 constant values of the given dims (a batch-norm scale or
    /// shift the TFLite importer dequantized at import) instead of an 8-bit input: the
    /// layer then reads one input, and `b` is unused.
    pub b_const: Option<(Vec<f32>, Vec<usize>)>,
    /// The constant is the operation's first operand.
    pub const_first: bool,
    /// A chain of layers with constants of one shape composed into one ([`super::fold`]):
    /// each layer in order, computed one after the other on each row (the fields above
    /// are then the last layer's, but for `a`, the chain's input).
    pub stages: Vec<QBinaryStage>,
    /// The chain's QuantizeLinear's requantization rule: the fixed-point one changes the
    /// multiplication of two 8-bit inputs ([`QBinaryDesc::fixed_mul`]); for the other
    /// operations both rules give the same bytes.
    pub requant: Requantization,
}

/// One layer of a composed chain ([`QBinaryDesc::stages`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QBinaryStage {
    /// The layer (with its constant operand; no stages of its own).
    pub desc: QBinaryDesc,
    /// Its input is int8 (else uint8).
    pub signed_in: bool,
    /// Its output is int8 (else uint8).
    pub signed_out: bool,
}

/// The operations the layer computes (those whose f32 result the chain quantizes as is).
pub(crate) fn foldable(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min
    )
}

impl QBinaryDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_BINARY, self, y)
    }

    /// The description [`QBinaryDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QBinaryDesc, String> {
        super::payload_of(c, QLINEAR_BINARY)
    }

    /// The same layer on channels-last tensors: a constant operand's values transposed
    /// from NCHW (its dims padded to 4 with leading ones) to NHWC; `None` for a constant of
    /// more than 4 dims.
    pub(crate) fn to_nhwc(&self) -> Option<QBinaryDesc> {
        let Some((v, dims)) = &self.b_const else {
            return Some(self.clone());
        };
        let pad = 4usize.checked_sub(dims.len())?;
        let mut d4 = vec![1; pad];
        d4.extend_from_slice(dims);
        let &[n, c, h, w] = d4.as_slice() else {
            return None;
        };
        let mut t = Vec::with_capacity(v.len());
        for i in 0..n {
            for y in 0..h {
                for x in 0..w {
                    for k in 0..c {
                        let at = ((i * c + k) * h + y) * w + x;
                        t.push(*v.get(at)?);
                    }
                }
            }
        }
        let stages = self
            .stages
            .iter()
            .map(|st| {
                Some(QBinaryStage {
                    desc: st.desc.to_nhwc()?,
                    ..st.clone()
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(QBinaryDesc {
            b_const: Some((t, vec![n, h, w, c])),
            stages,
            ..self.clone()
        })
    }

    /// The Q31 multiplier `(q, shift)` of LiteRT's builtin MUL when this layer follows it:
    /// the multiplication of two 8-bit inputs under the fixed-point rule, `a_scale · b_scale
    /// / y_scale` in f64 (CpuRef's `QMulFixedPoint`). `None` otherwise.
    pub(crate) fn fixed_mul(&self) -> Option<(i32, i32)> {
        let applies = self.requant == Requantization::FixedPoint
            && self.op == BinaryOp::Mul
            && self.b_const.is_none()
            && self.stages.is_empty();
        applies.then(|| {
            quantize_multiplier(f64::from(self.a.0) * f64::from(self.b.0) / f64::from(self.y.0))
        })
    }

    /// The output byte of input bytes `qa` and `qb` (`signed`: whether a, b and y are
    /// int8), as the layer computes it element by element.
    pub(crate) fn byte(&self, signed: [bool; 3], qa: u8, qb: u8) -> u8 {
        if let Some(m) = self.fixed_mul() {
            return fixed_mul_byte(signed, m, self, qa, qb);
        }
        let (x, z) = (deq(signed[0], qa, self.a), deq(signed[1], qb, self.b));
        let v = match self.op {
            BinaryOp::Add => x + z,
            BinaryOp::Sub => x - z,
            BinaryOp::Mul => x * z,
            BinaryOp::Max => x.max(z),
            BinaryOp::Min => x.min(z),
            // Not folded (`foldable`).
            BinaryOp::Div | BinaryOp::Pow => f32::NAN,
        };
        requantize(self, signed[2], v)
    }
}

/// True when inputs of dims `a` and `b` broadcast (numpy's rule) to an output of dims `y`.
pub(crate) fn broadcasts(a: &[usize], b: &[usize], y: &[usize]) -> bool {
    Rows::new(a, b, y).is_some()
}

/// The plan of a folded quantized binary layer: two 8-bit inputs and an 8-bit output, the
/// inputs of the output's shape or broadcast to it.
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QBinaryDesc::decode(c)?;
    let y = layer.outputs.first().ok_or("no output")?;
    let (a, b_dims) = match (layer.inputs.as_slice(), &d.b_const) {
        ([a, b], None) => {
            if !super::is_8bit(b.dtype) {
                return Err(format!("{QLINEAR_BINARY}: b is {}, not 8-bit", b.dtype));
            }
            (a, b.shape.dims().to_vec())
        }
        ([a], Some((v, dims))) if v.len() == dims.iter().product::<usize>() => (a, dims.clone()),
        _ => {
            return Err(format!(
                "{QLINEAR_BINARY} takes two inputs, or one and its constant"
            ))
        }
    };
    for (t, what) in [(a, "a"), (y, "y")] {
        if !super::is_8bit(t.dtype) {
            return Err(format!(
                "{QLINEAR_BINARY}: {what} is {}, not 8-bit",
                t.dtype
            ));
        }
    }
    let rows = Rows::new(a.shape.dims(), &b_dims, y.shape.dims()).ok_or_else(|| {
        format!(
            "{QLINEAR_BINARY}: inputs {} and {b_dims:?} do not broadcast to output {}",
            a.shape, y.shape
        )
    })?;
    let (lo, hi) = range(y.dtype);
    if d.clamp.0 < lo || d.clamp.1 > hi || d.clamp.0 > d.clamp.1 {
        return Err(format!("{QLINEAR_BINARY}: clamp outside the output type"));
    }
    Ok(Plan::new(move |io, th| {
        done(QBinary::new(io, d, rows, th)?)
    }))
}

/// How the output splits into rows along its innermost (merged) axis, and where each
/// input's values for a row start: numpy broadcasting, reduced to runs in which each input
/// advances by one element or stays on one.
#[derive(Debug, Clone)]
struct Rows {
    /// Elements per row.
    len: usize,
    /// The outer (merged) dims, outermost first, whose product is the row count.
    outer: Vec<usize>,
    /// Each input's element step along the outer dims (0 where broadcast).
    steps: [Vec<usize>; 2],
    /// Each input's step along a row: 1, or 0 where the row repeats one value.
    inner: [usize; 2],
}

impl Rows {
    /// The rows of `y` for inputs of dims `a` and `b`, `None` unless both broadcast to `y`.
    fn new(a: &[usize], b: &[usize], y: &[usize]) -> Option<Rows> {
        let rank = y.len();
        if a.len() > rank || b.len() > rank {
            return None;
        }
        // Each input's element steps over the output's axes (0 where it is broadcast).
        let steps_of = |d: &[usize]| -> Option<Vec<usize>> {
            let pad = rank - d.len();
            let mut steps = vec![0; rank];
            let mut step = 1;
            for k in (0..rank).rev() {
                let n = if k < pad { 1 } else { d[k - pad] };
                if n == y[k] {
                    steps[k] = if n == 1 { 0 } else { step };
                } else if n != 1 {
                    return None;
                }
                step *= n;
            }
            Some(steps)
        };
        let (sa, sb) = (steps_of(a)?, steps_of(b)?);
        // Merge neighbouring axes along which both inputs keep one pattern.
        let mut dims: Vec<usize> = Vec::new();
        let mut steps: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        for k in 0..rank {
            if y[k] == 1 {
                continue;
            }
            let merges = match (dims.last(), steps[0].last(), steps[1].last()) {
                (Some(_), Some(&pa), Some(&pb)) => pa == sa[k] * y[k] && pb == sb[k] * y[k],
                _ => false,
            };
            if merges {
                if let Some(d) = dims.last_mut() {
                    *d *= y[k];
                }
                let [ta, tb] = &mut steps;
                if let (Some(pa), Some(pb)) = (ta.last_mut(), tb.last_mut()) {
                    *pa = sa[k];
                    *pb = sb[k];
                }
            } else {
                dims.push(y[k]);
                steps[0].push(sa[k]);
                steps[1].push(sb[k]);
            }
        }
        let len = dims.pop().unwrap_or(1);
        let inner = [
            steps[0].pop().unwrap_or(0).min(1),
            steps[1].pop().unwrap_or(0).min(1),
        ];
        Some(Rows {
            len,
            outer: dims,
            steps,
            inner,
        })
    }

    /// Where row `r`'s values of each input start.
    fn starts(&self, mut r: usize) -> [usize; 2] {
        let mut at = [0, 0];
        for k in (0..self.outer.len()).rev() {
            let i = r % self.outer[k];
            r /= self.outer[k];
            at[0] += i * self.steps[0][k];
            at[1] += i * self.steps[1][k];
        }
        at
    }
}

/// The folded quantized binary layer.
struct QBinary {
    io: Io,
    d: QBinaryDesc,
    rows: Rows,
    th: Threads,
    /// The rows' arithmetic, vectorized.
    kernel: RowKernel,
    /// A composed chain's layers: each one's arithmetic and constants, in order.
    stages: Vec<(RowKernel, Vec<f32>)>,
    /// When the layer follows LiteRT's builtin MUL ([`QBinaryDesc::fixed_mul`]): its output
    /// byte for every pair of input bytes, `table[qa · 256 + qb]`, made once by
    /// [`fixed_mul_byte`] (one look-up per element instead of the 64-bit arithmetic).
    fixed: Option<Vec<u8>>,
    /// When the layer's (or chain's) constants are one short row repeated over an input of
    /// the output's shape (channels-last per-channel constants): the output byte of every
    /// input byte at each position of that row, `tables[k · 256 + q]`, made once by the
    /// row kernels themselves (so the bytes are theirs).
    tables: Option<Vec<u8>>,
    /// A chain of two layers that add or multiply by constants (a batch norm), run in one
    /// pass where a row's constants are the row's own ([`pair_row`]).
    pair: Option<Pair>,
    /// The pair as two straight lines per position, checked on every input at plan time
    /// ([`Affine`]); `None` where a position has none, and on the portable tier.
    affine: Option<Affine>,
}

impl QBinary {
    /// One output row by the fixed-point MUL's table: element `j` of `a[j·ia]` and
    /// `b[j·ib]` (each stride 1, or 0 for a repeated value).
    fn fixed_row(table: &[u8], a: &[u8], ia: usize, b: &[u8], ib: usize, y: &mut [u8]) {
        let at = |qa: u8, qb: u8| table[usize::from(qa) << 8 | usize::from(qb)];
        match (ia, ib) {
            (1, 1) => {
                for ((o, &qa), &qb) in y.iter_mut().zip(a).zip(b) {
                    *o = at(qa, qb);
                }
            }
            (1, 0) => {
                // b repeated: its row of the table.
                let row = &table[usize::from(b[0])..];
                for (o, &qa) in y.iter_mut().zip(a) {
                    *o = row[usize::from(qa) << 8];
                }
            }
            (0, 1) => {
                let row = &table[usize::from(a[0]) << 8..][..256];
                for (o, &qb) in y.iter_mut().zip(b) {
                    *o = row[usize::from(qb)];
                }
            }
            (0, 0) => y.fill(at(a[0], b[0])),
            _ => {
                for (j, o) in y.iter_mut().enumerate() {
                    *o = at(a[j * ia], b[j * ib]);
                }
            }
        }
    }
}

/// The table of [`QBinary::fixed`] for multiplier `m`, `None` when it cannot be allocated.
fn fixed_mul_table(d: &QBinaryDesc, signed: [bool; 3], m: (i32, i32)) -> Option<Vec<u8>> {
    let mut t = Vec::new();
    t.try_reserve_exact(1 << 16).ok()?;
    for qa in 0..=255u8 {
        t.extend((0..=255u8).map(|qb| fixed_mul_byte(signed, m, d, qa, qb)));
    }
    Some(t)
}

/// The tables of [`QBinary::tables`]: for each position `k` of the constants' row, every
/// input byte through the layer (`kernel` with constant `values[k]`) or through each layer
/// of a composed chain in turn (`stages`, each with its own constants), by the same row
/// kernels the layer runs otherwise. `None` when the tables cannot be allocated.
fn const_tables(
    kernel: &RowKernel,
    stages: &[(RowKernel, Vec<f32>)],
    values: &[f32],
) -> Option<Vec<u8>> {
    let mut t = Vec::new();
    t.try_reserve_exact(values.len() * 256).ok()?;
    t.resize(values.len() * 256, 0);
    let bytes: [u8; 256] = std::array::from_fn(|q| q as u8);
    let mut c = [0f32; 256];
    for (k, out) in t.chunks_exact_mut(256).enumerate() {
        if stages.is_empty() {
            c.fill(*values.get(k)?);
            const_row(kernel, &bytes, &c, out);
        }
        for (n, (sk, sv)) in stages.iter().enumerate() {
            c.fill(*sv.get(k)?);
            if n == 0 {
                const_row(sk, &bytes, &c, out);
            } else {
                const_row_in_place(sk, &c, out);
            }
        }
    }
    Some(t)
}

/// Output bytes `y` of input bytes `a` by the tables of a constants' row of `len` positions
/// (`tables[k · 256 + q]`), the first element at position `k0` of the row.
fn periodic_lookup(tables: &[u8], len: usize, k0: usize, a: &[u8], y: &mut [u8]) {
    if let (1, Some(table)) = (len, tables.first_chunk::<256>()) {
        // One table for every element: the vectorized byte look-up.
        backplane_cpu_kernels::byte_table::apply(table, a, y);
        return;
    }
    let rows = tables.chunks_exact(256);
    // The partial row up to the next row start, then whole rows, then the rest.
    let head = (len - k0).min(y.len());
    let (yh, yt) = y.split_at_mut(head);
    let (ah, at) = a.split_at(head.min(a.len()));
    for ((o, &q), t) in yh.iter_mut().zip(ah).zip(rows.clone().skip(k0)) {
        *o = t[usize::from(q)];
    }
    for (yr, ar) in yt.chunks_mut(len).zip(at.chunks(len)) {
        for ((o, &q), t) in yr.iter_mut().zip(ar).zip(rows.clone()) {
            *o = t[usize::from(q)];
        }
    }
}

/// LiteRT's builtin MUL of bytes `qa` and `qb` (CpuRef's `QMulFixedPoint`): `(a − za)(b −
/// zb)` through gemmlowp's reference `MultiplyByQuantizedMultiplier` with `m`, plus the
/// output zero point (saturating), clamped to the layer's range.
#[inline]
fn fixed_mul_byte(signed: [bool; 3], m: (i32, i32), d: &QBinaryDesc, qa: u8, qb: u8) -> u8 {
    let p = (widen(signed[0], qa) - d.a.1) * (widen(signed[1], qb) - d.b.1);
    let v = multiply_by_quantized_multiplier(p, m.0, m.1).saturating_add(d.y.1);
    let q = v.clamp(d.clamp.0, d.clamp.1);
    if signed[2] {
        (q as i8) as u8
    } else {
        q as u8
    }
}

/// The dequantized value of byte `q` (signed or not) on scale and zero point `(s, z)`.
#[inline]
fn deq(signed: bool, q: u8, (s, z): (f32, i32)) -> f32 {
    (widen(signed, q) - z) as f32 * s
}

/// The output byte of the real result `v`.
#[inline]
fn requantize(d: &QBinaryDesc, signed: bool, v: f32) -> u8 {
    // Clamp far outside the 8-bit range first: the rounding trick needs |v| < 2²².
    let q = round_even((v / d.y.0).clamp(-1e6, 1e6)) + d.y.1 as f32;
    let q = (q as i32).clamp(d.clamp.0, d.clamp.1);
    if signed {
        (q as i8) as u8
    } else {
        q as u8
    }
}

/// Round half to even for |v| < 2²², by the float adder: adding and taking away 1.5·2²³
/// leaves the nearest integer under the default rounding mode (the same as
/// `round_ties_even` on that range, and vectorizable).
#[inline]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

impl QBinary {
    fn new(io: Io, d: QBinaryDesc, rows: Rows, th: Threads) -> Result<QBinary> {
        let s = |t: Option<&TensorInfo>| t.is_some_and(|t| t.dtype == DataType::I8);
        let signed = [
            s(io.inputs.first()),
            s(io.inputs.get(1)),
            s(io.outputs.first()),
        ];
        let deq = |signed: bool, p: (f32, i32)| {
            Deq::new(signed, p).ok_or_else(|| io.error(format!("zero point {} out of range", p.1)))
        };
        let kernel = RowKernel {
            op: d.op,
            a: deq(signed[0], d.a)?,
            b: deq(signed[1], d.b)?,
            y: Req::new(d.y, d.clamp),
            const_first: d.const_first,
        };
        let size = d.b_const.as_ref().map(|(v, _)| v.len());
        let mut stages = Vec::new();
        for st in &d.stages {
            let (sd, values) = (&st.desc, st.desc.b_const.as_ref().map(|(v, _)| v));
            let (Some(values), Some(n)) = (values, size) else {
                return Err(io.error("a composed layer without its constants".into()));
            };
            if values.len() != n || !sd.stages.is_empty() {
                return Err(io.error("composed layers of other constants".into()));
            }
            let k = RowKernel {
                op: sd.op,
                a: deq(st.signed_in, sd.a)?,
                b: kernel.b,
                y: Req::new(sd.y, sd.clamp),
                const_first: sd.const_first,
            };
            stages.push((k, values.clone()));
        }
        let fixed = match d.fixed_mul() {
            Some(m) => Some(
                fixed_mul_table(&d, signed, m)
                    .ok_or_else(|| io.error("cannot allocate the multiplication's table".into()))?,
            ),
            None => None,
        };
        let periodic = rows.inner == [1, 1]
            && rows.steps[1].iter().all(|&s| s == 0)
            && size == Some(rows.len)
            && {
                let count = |t: Option<&TensorInfo>| t.and_then(|t| t.shape.num_elements().ok());
                let x = count(io.inputs.first());
                x.is_some() && x == count(io.outputs.first())
            };
        let tables = match (&d.b_const, &fixed) {
            (Some((values, _)), None) if periodic && rows.len <= MAX_TABLE_ROW => Some(
                const_tables(&kernel, &stages, values)
                    .ok_or_else(|| io.error("cannot allocate the constants' tables".into()))?,
            ),
            _ => None,
        };
        let pair = match (stages.as_slice(), d.stages.as_slice()) {
            ([(k1, _), (k2, _)], [s1, s2]) if tables.is_none() => {
                Pair::new(*k1, *k2, s1.signed_out == s2.signed_in)
            }
            _ => None,
        };
        // The lines take fused multiply-adds (calls on the portable tier).
        let affine = match (&pair, stages.as_slice()) {
            (Some(p), [(_, c1), (_, c2)]) if isa_in_use() != Isa::Portable => {
                Affine::fit(p, c1, c2)
            }
            _ => None,
        };
        Ok(QBinary {
            io,
            d,
            rows,
            th,
            kernel,
            stages,
            fixed,
            tables,
            pair,
            affine,
        })
    }
}

/// Elements `r` of `v` when they are `n`.
fn row_of(v: &[f32], r: std::ops::Range<usize>, n: usize) -> Option<&[f32]> {
    v.get(r).filter(|v| v.len() == n)
}

impl Workload for QBinary {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let missing = || BackendError::Execution(format!("{}: missing buffer", self.io.layer));
        let a = inputs.first().ok_or_else(missing)?.data;
        let consts = self.d.b_const.as_ref().map(|(v, _)| v.as_slice());
        let b = match consts {
            Some(_) => &[],
            None => inputs.get(1).ok_or_else(missing)?.data,
        };
        let y = &mut outputs.first_mut().ok_or_else(missing)?.data;
        let len = self.rows.len;
        if y.is_empty() || len == 0 {
            return Ok(());
        }
        // Chunks of whole rows, or of pieces of rows where they are long (inputs of one shape
        // are one row): each element is computed alone, so a piece gives the bytes the whole
        // row would.
        let piece = len.min(ROW_PIECE);
        let chunk = self.th.chunk_size(y.len(), MIN_CHUNK, piece);
        let [ia, ib] = self.rows.inner;
        // Blocks of whole rows along the innermost outer axis, for two 8-bit inputs.
        let block = match (self.rows.outer.last(), &self.fixed, consts) {
            (Some(&n), None, None) => Some((
                n,
                RowBlock {
                    len,
                    inner: [ia, ib],
                    outer: [
                        self.rows.steps[0].last().copied().unwrap_or(0),
                        self.rows.steps[1].last().copied().unwrap_or(0),
                    ],
                },
            )),
            _ => None,
        };
        self.th.chunks(y, chunk, |i, yc| {
            if let Some(t) = &self.tables {
                // One row of constants repeated over an input of the output's shape.
                let e0 = i * chunk;
                let ac = a.get(e0..e0 + yc.len()).ok_or_else(missing)?;
                periodic_lookup(t, len, e0 % len, ac, yc);
                return Ok(());
            }
            let mut at_element = i * chunk;
            let mut rest = &mut yc[..];
            while !rest.is_empty() {
                let (row, off) = (at_element / len, at_element % len);
                if let Some((n, blk)) = block.filter(|_| off == 0) {
                    let m = (n - row % n).min(rest.len() / len);
                    if m >= 2 {
                        let (yr, tail) = rest.split_at_mut(m * len);
                        rest = tail;
                        at_element += m * len;
                        let [at, bt] = self.rows.starts(row);
                        let ar = a.get(at..at + blk.span(0, m)).ok_or_else(missing)?;
                        let br = b.get(bt..bt + blk.span(1, m)).ok_or_else(missing)?;
                        binary_rows(&self.kernel, blk, ar, br, yr);
                        continue;
                    }
                }
                let run = (len - off).min(rest.len());
                let (yr, tail) = rest.split_at_mut(run);
                rest = tail;
                at_element += run;
                let [at, bt] = self.rows.starts(row);
                let (at, bt) = (at + off * ia, bt + off * ib);
                let ar = a.get(at..at + (run - 1) * ia + 1).ok_or_else(missing)?;
                let bs = bt..bt + (run - 1) * ib + 1;
                match consts {
                    _ if self.fixed.is_some() => {
                        let br = b.get(bs).ok_or_else(missing)?;
                        if let Some(t) = &self.fixed {
                            Self::fixed_row(t, ar, ia, br, ib, yr);
                        }
                    }
                    _ if !self.stages.is_empty() => {
                        if let Some(af) = &self.affine {
                            let [p1, q1, p2, q2] = &af.lines;
                            let at = |v| row_of(v, bs.clone(), yr.len());
                            if let (Some(p1), Some(q1), Some(p2), Some(q2), true) =
                                (at(p1), at(q1), at(p2), at(q2), ar.len() == yr.len())
                            {
                                affine_row(&af.frame, ar, p1, q1, p2, q2, yr);
                                continue;
                            }
                        }
                        if let (Some(p), [(_, c1), (_, c2)]) = (&self.pair, self.stages.as_slice())
                        {
                            let (c1, c2) = (c1.get(bs.clone()), c2.get(bs.clone()));
                            if let (Some(c1), Some(c2)) = (c1, c2) {
                                if [ar.len(), c1.len(), c2.len()] == [yr.len(); 3] {
                                    pair_row(p, ar, c1, c2, yr);
                                    continue;
                                }
                            }
                        }
                        for (n, (k, c)) in self.stages.iter().enumerate() {
                            let c = c.get(bs.clone()).ok_or_else(missing)?;
                            if n == 0 {
                                const_row(k, ar, c, yr);
                            } else {
                                const_row_in_place(k, c, yr);
                            }
                        }
                    }
                    Some(c) => const_row(&self.kernel, ar, c.get(bs).ok_or_else(missing)?, yr),
                    None => binary_row(&self.kernel, ar, b.get(bs).ok_or_else(missing)?, yr),
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::{periodic_lookup, Rows};

    #[test]
    fn periodic_lookups_start_anywhere_in_the_row() {
        // Tables whose entries name their position and byte (none the identity); runs
        // starting at every position of rows of 1, 3 and 7, shorter and longer than a row,
        // and long enough for the vectorized look-up of a one-value row.
        for len in [1usize, 3, 7] {
            let tables: Vec<u8> = (0..len * 256)
                .map(|i| ((i / 256) as u8).wrapping_mul(31).wrapping_add(101) ^ (i % 256) as u8)
                .collect();
            for k0 in 0..len {
                for n in [0usize, 1, 2, len, 2 * len + 1, 50, 200] {
                    let a: Vec<u8> = (0..n).map(|i| (i * 89 + 7) as u8).collect();
                    let mut y = vec![0u8; n];
                    periodic_lookup(&tables, len, k0, &a, &mut y);
                    for (i, (&o, &q)) in y.iter().zip(&a).enumerate() {
                        let k = (k0 + i) % len;
                        assert_eq!(
                            o,
                            tables[k * 256 + usize::from(q)],
                            "len {len} k0 {k0} n {n} i {i}"
                        );
                    }
                }
            }
        }
    }

    /// The input offsets of every output element, by the rows.
    fn offsets(a: &[usize], b: &[usize], y: &[usize]) -> Vec<[usize; 2]> {
        let r = Rows::new(a, b, y).unwrap_or_else(|| panic!("{a:?} {b:?} {y:?}"));
        let total: usize = y.iter().product();
        (0..total / r.len.max(1))
            .flat_map(|row| {
                let [sa, sb] = r.starts(row);
                (0..r.len).map(move |j| [sa + j * r.inner[0], sb + j * r.inner[1]])
            })
            .collect()
    }

    /// The same offsets by numpy's rule, element by element.
    fn numpy(a: &[usize], b: &[usize], y: &[usize]) -> Vec<[usize; 2]> {
        let total: usize = y.iter().product();
        let at = |d: &[usize], mut i: usize| {
            let mut idx = vec![0; y.len()];
            for k in (0..y.len()).rev() {
                idx[k] = i % y[k];
                i /= y[k];
            }
            let pad = y.len() - d.len();
            let mut off = 0;
            for (k, &n) in d.iter().enumerate() {
                off = off * n + if n == 1 { 0 } else { idx[k + pad] };
            }
            off
        };
        (0..total).map(|i| [at(a, i), at(b, i)]).collect()
    }

    #[test]
    fn rows_follow_numpy_broadcasting() {
        let cases: &[(&[usize], &[usize], &[usize])] = &[
            (&[2, 3, 5, 7], &[2, 3, 5, 7], &[2, 3, 5, 7]),
            (&[2, 5, 7, 3], &[2, 1, 1, 3], &[2, 5, 7, 3]),
            (&[2, 1, 1, 3], &[2, 5, 7, 3], &[2, 5, 7, 3]),
            (&[2, 3, 5, 7], &[2, 3, 1, 1], &[2, 3, 5, 7]),
            (&[1, 3, 1, 1], &[1, 3, 1, 1], &[1, 3, 1, 1]),
            (&[1, 1, 1, 1], &[1, 1, 1, 1], &[1, 1, 1, 1]),
            (&[4, 1, 6], &[1, 5, 1], &[4, 5, 6]),
            (&[3, 4], &[4], &[3, 4]),
            (&[3, 4], &[3, 1], &[3, 4]),
            (&[1], &[2, 3], &[2, 3]),
            (&[], &[5], &[5]),
            (&[17], &[17], &[17]),
        ];
        for &(a, b, y) in cases {
            assert_eq!(offsets(a, b, y), numpy(a, b, y), "{a:?} {b:?} {y:?}");
        }
        assert!(Rows::new(&[2, 3], &[3, 3], &[2, 3]).is_none());
        assert!(Rows::new(&[1, 2, 3], &[3], &[2, 3]).is_none());
    }
}

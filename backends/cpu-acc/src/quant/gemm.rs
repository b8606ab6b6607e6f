//! The int8 fully connected layer (custom `QLinearGemm`, made by [`super::fold`] from
//! `DequantizeLinear(x) → Gemm(·, DequantizeLinear(w const), bias) → (Relu | Clip) →
//! QuantizeLinear`, as the TFLite importer writes FULLY_CONNECTED and ONNX QDQ models write
//! Gemm; a MatMul of constant weights folds to it too): M rows of K values of x, 8-bit per
//! tensor, constant 8-bit weights per output channel (`[N, K]`,
//! or `[K, N]` without `trans_b`), an int32 bias; exact int32 sums requantized in the GEMM
//! tile's store ([`qgemm_requantized`]) by the convolutions' rule.
//!
//! The rows of x are A (centered once per execution), the weights B (centered and packed
//! once); the threads share the output channels when there are few rows (a classifier's one
//! row), else blocks of rows. Where the int8 tier has a `vpdpbusd` tile and the centered
//! weights fit i8, the byte GEMM runs instead ([`quad_gemm_requantized`]): u8 rows read in
//! place (when K is a multiple of 4), else copied as unsigned bytes (i8 flipped by 128), the
//! activations' zero point folded into the bias.

use super::conv::{alloc, centered};
use super::packed_b::{packed_b, shared_requant, PackedB, Source};
use super::{range, QLINEAR_GEMM};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::{GemmSplit, Threads};
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::quant::{fixed_point_multiplier, Requantization};
use backplane_core::{DataType, Tensor, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    center_i8, center_u8, pair_tile_rows, qgemm_requantized, quad_gemm_requantized, requant_scale,
    ColumnRequant, RequantRange, QNR, QUAD_ROWS,
};
use std::sync::{Arc, Mutex};

/// Rows of A per block when the threads share rows.
const BLOCK_ROWS: usize = 32;

/// The quantization of a folded fully connected layer (its custom op's payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QGemmDesc {
    /// Input scale and zero point.
    pub x: (f32, i32),
    /// Output scale and zero point.
    pub y: (f32, i32),
    /// Weight scales (one, or one per output channel).
    pub w_scales: Vec<f32>,
    /// Weight zero points (as many as scales).
    pub w_zeros: Vec<i32>,
    /// The weights are `[N, K]` (ONNX Gemm's `transB`, TFLite's layout), else `[K, N]`.
    pub trans_b: bool,
    /// The fused activation's range in output units.
    pub clamp: (i32, i32),
    /// How the sums become output integers (the chain's QuantizeLinear's rule).
    pub requant: Requantization,
}

impl QGemmDesc {
    /// The custom op, with output `y`.
    pub(crate) fn to_op(&self, y: TensorInfo) -> CustomOp {
        super::custom_op(QLINEAR_GEMM, self, y)
    }

    /// The description [`QGemmDesc::to_op`] put in the custom op.
    pub(crate) fn decode(c: &CustomOp) -> std::result::Result<QGemmDesc, String> {
        super::payload_of(c, QLINEAR_GEMM)
    }
}

/// The plan of a folded int8 fully connected layer: constant weights `[N, K]` or `[K, N]`, an
/// int32 constant bias of N values, x and y of M rows of K and N values in row order (`[M,
/// K]` and `[M, N]`, a MatMul's `[..., M, K]`, or the tensors of a folded Reshape).
pub(super) fn plan<'a>(
    c: &'a CustomOp,
    layer: &'a LayerDesc,
) -> std::result::Result<Plan<'a>, String> {
    let d = QGemmDesc::decode(c)?;
    let [x, w, b, y] = super::int8_operands(layer, QLINEAR_GEMM)?;
    let (xd, wd, yd) = (x.shape.dims(), w.shape.dims(), y.shape.dims());
    let &[w0, w1] = wd else {
        return Err(format!("{QLINEAR_GEMM}: w {wd:?} must be 2-D"));
    };
    let (n, k) = if d.trans_b { (w0, w1) } else { (w1, w0) };
    // x and y hold M rows of K and N values in order, whatever their shapes (a folded
    // Reshape on either side).
    let m = x.shape.elements().checked_div(k).unwrap_or(0);
    let rows_fit = m.checked_mul(k) == Some(x.shape.elements())
        && m.checked_mul(n) == Some(y.shape.elements());
    if !rows_fit || k == 0 || b.shape.elements() != n {
        return Err(format!(
            "{QLINEAR_GEMM}: x {xd:?}, w {wd:?}, bias {} and y {yd:?} disagree",
            b.shape
        ));
    }
    if d.w_scales.len() != 1 && d.w_scales.len() != n || d.w_zeros.len() != d.w_scales.len() {
        return Err(format!(
            "{QLINEAR_GEMM}: {} weight scales for {n} channels",
            d.w_scales.len()
        ));
    }
    let (lo, hi) = range(y.dtype);
    if d.clamp.0 < lo || d.clamp.1 > hi || d.clamp.0 > d.clamp.1 {
        return Err(format!("{QLINEAR_GEMM}: clamp outside the output type"));
    }
    Ok(Plan::new(move |io, th| {
        let (wt, bt) = super::int8_constants(layer, &io)?;
        done(QGemm::new(
            io,
            &d,
            [m, k, n],
            wt,
            bt.as_slice::<i32>()?,
            th,
        )?)
    }))
}

/// The folded int8 fully connected layer.
struct QGemm {
    io: Io,
    rows: usize,
    k: usize,
    n: usize,
    x_zero: i32,
    x_signed: bool,
    weights: Weights,
    /// Shared with other plans' workloads (`super::packed_b::shared_requant`).
    rq: Arc<ColumnRequant>,
    /// The centered rows of x, kept between executions (pair GEMM).
    a: Mutex<Vec<i16>>,
    /// The unsigned rows of x where they are not read in place (byte GEMM).
    a_bytes: Mutex<Vec<u8>>,
    th: Threads,
}

/// The packed weights: 16-bit pairs, or i8 quads for the byte GEMM (whose `rq` holds the
/// folded bias); shared with other plans' workloads (`super::packed_b`).
type Weights = PackedB;

/// A row block's GEMM on either packing: `rows` rows of A (`a`, pitch `lda`, in the
/// packing's form) against `panels`, requantized into `out` (pitch `ldo`).
enum RowsA<'a> {
    Pairs(&'a [i16]),
    Quads(&'a [u8]),
}

impl QGemm {
    fn new(
        io: Io,
        d: &QGemmDesc,
        [rows, k, n]: [usize; 3],
        wt: &Arc<Tensor>,
        bias: &[i32],
        th: Threads,
    ) -> Result<QGemm> {
        let w = wt.bytes();
        let x_signed = io.inputs[0].dtype == DataType::I8;
        let w_signed = io.inputs[1].dtype == DataType::I8;
        if w.len() != k * n || bias.len() != n {
            return Err(io.error(format!(
                "{} weights and {} biases for {n} channels of depth {k}",
                w.len(),
                bias.len()
            )));
        }
        let per = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
        let zero = |c: usize| {
            if d.w_zeros.len() == 1 {
                d.w_zeros[0]
            } else {
                d.w_zeros[c]
            }
        };
        let at = |kk: usize, c: usize| if d.trans_b { c * k + kk } else { kk * n + c };
        let wv = |kk: usize, c: usize| centered(w_signed, w[at(kk, c)], zero(c));
        // The activations' zero point as an unsigned byte value (i8 rows are read flipped).
        let (_, unsigned_zero) = super::unsigned_form(x_signed, d.x.1);
        // The fixed-point rule's multipliers (LiteRT's, as CpuRef forms them), if it applies.
        let fixed: Option<Vec<(i32, i32)>> = match d.requant {
            Requantization::F32 => None,
            Requantization::FixedPoint => {
                let mut m = Vec::new();
                m.try_reserve_exact(n)
                    .map_err(|_| io.error("cannot allocate the multipliers".into()))?;
                m.extend((0..n).map(|c| fixed_point_multiplier(d.x.0, per(&d.w_scales, c), d.y.0)));
                Some(m)
            }
        };
        let src = Source {
            tensor: wt,
            kind: "qgemm_b",
            requant: "qgemm_requant",
            params: &[usize::from(d.trans_b)],
            signed: w_signed,
            zeros: &d.w_zeros,
            fixed: fixed.as_deref(),
        };
        let weights = packed_b(&src, (k, n), wv, &io)?;
        let mut scale = alloc(n, 0f32, &io)?;
        for (c, s) in scale.iter_mut().enumerate() {
            let real = requant_scale(d.x.0, per(&d.w_scales, c), d.y.0);
            if !(real.is_finite() && real > 0.0 && real < 1e30) {
                return Err(io.error(format!(
                    "output channel {c}: scale {real} cannot be requantized"
                )));
            }
            *s = real;
        }
        let range = RequantRange {
            zero: d.y.1 as f32,
            lo: (d.clamp.0 - d.y.1) as f32,
            hi: (d.clamp.1 - d.y.1) as f32,
        };
        let rq = shared_requant(
            &src,
            &weights,
            (k, n),
            unsigned_zero,
            bias,
            &scale,
            range,
            &io,
        )?;
        Ok(QGemm {
            io,
            rows,
            k,
            n,
            x_zero: d.x.1,
            x_signed,
            weights,
            rq,
            a: Mutex::new(Vec::new()),
            a_bytes: Mutex::new(Vec::new()),
            th,
        })
    }

    fn refused(&self) -> BackendError {
        self.io.error("integer GEMM refused its operands".into())
    }
}

impl QGemm {
    /// The rows of x as A for the packing in use: centered into `pairs`, or as unsigned
    /// bytes (in place for u8 rows whose padded depth stays inside x, else flipped or
    /// copied into `bytes`). Returns A and its pitch.
    fn rows_a<'a>(
        &self,
        x: &'a [u8],
        pairs: &'a mut Vec<i16>,
        bytes: &'a mut Vec<u8>,
    ) -> Result<(RowsA<'a>, usize)> {
        let (rows, k) = (self.rows, self.k);
        match &self.weights {
            Weights::Pairs(b) => {
                let kp = b.depth_padded();
                if pairs.len() != rows * kp {
                    // The K padding (past the depth) stays zero.
                    *pairs = alloc(rows * kp, 0i16, &self.io)?;
                }
                let center = if self.x_signed { center_i8 } else { center_u8 };
                for (row, xr) in pairs.chunks_exact_mut(kp).zip(x.chunks_exact(k)) {
                    center(&mut row[..k], xr, self.x_zero);
                }
                Ok((RowsA::Pairs(pairs), kp))
            }
            Weights::Quads(b) => {
                let kq = b.depth_padded();
                if !self.x_signed && rows > 0 && (rows - 1) * k + kq <= x.len() {
                    return Ok((RowsA::Quads(x), k));
                }
                if bytes.len() != rows * kq {
                    // The bytes past the depth meet zero weights: any value will do.
                    *bytes = alloc(rows * kq, 0u8, &self.io)?;
                }
                let (flip, _) = super::unsigned_form(self.x_signed, 0);
                super::unsigned_rows(x, k, flip, bytes, kq);
                Ok((RowsA::Quads(bytes), kq))
            }
        }
    }

    /// `rows` rows of A from row `first` against `panels`, requantized into `out`.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        a: &RowsA<'_>,
        lda: usize,
        first: usize,
        rows: usize,
        panels: std::ops::Range<usize>,
        out: &mut [u8],
        ldo: usize,
    ) -> Result<()> {
        let ok = match (a, &self.weights) {
            (RowsA::Pairs(a), Weights::Pairs(b)) => {
                let a = a.get(first * lda..).unwrap_or_default();
                qgemm_requantized(a, lda, rows, b, panels, &self.rq, out, ldo)
            }
            (RowsA::Quads(a), Weights::Quads(b)) => {
                let a = a.get(first * lda..).unwrap_or_default();
                quad_gemm_requantized(a, lda, rows, b, panels, &self.rq, out, ldo)
            }
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(self.refused())
        }
    }
}

impl Workload for QGemm {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let (x, y) = super::int8_buffers(&self.io, inputs, outputs)?;
        let (rows, n) = (self.rows, self.n);
        let mut pairs = std::mem::take(&mut *self.a.lock().unwrap_or_else(|p| p.into_inner()));
        let mut bytes =
            std::mem::take(&mut *self.a_bytes.lock().unwrap_or_else(|p| p.into_inner()));
        let result = self.rows_a(x, &mut pairs, &mut bytes).and_then(|(a, lda)| {
            let panels = n.div_ceil(QNR);
            let tile = match &self.weights {
                Weights::Pairs(_) => pair_tile_rows(),
                Weights::Quads(_) => QUAD_ROWS,
            };
            let per_rows = self.th.chunk_size(rows, BLOCK_ROWS, 1);
            match self.th.gemm_split(rows, panels, per_rows, tile) {
                GemmSplit::Panels(per_task) => {
                    // Few rows: the threads share the output channels.
                    let per_task = per_task.max(1);
                    let y = Mutex::new(&mut *y);
                    self.th.range(panels.div_ceil(per_task), |t| {
                        let range = t * per_task..((t + 1) * per_task).min(panels);
                        let first = range.start * QNR;
                        let width = (range.end * QNR).min(n) - first;
                        let mut out = alloc(rows * width, 0u8, &self.io)?;
                        self.block(&a, lda, 0, rows, range, &mut out, width)?;
                        let mut y = y.lock().unwrap_or_else(|p| p.into_inner());
                        for (i, row) in out.chunks_exact(width).enumerate() {
                            y[i * n + first..][..width].copy_from_slice(row);
                        }
                        Ok(())
                    })
                }
                GemmSplit::Rows(per_task) => self.th.chunks(y, per_task * n, |t, yc| {
                    let r = yc.len() / n.max(1);
                    self.block(&a, lda, t * per_task, r, 0..panels, yc, n)
                }),
            }
        });
        *self.a.lock().unwrap_or_else(|p| p.into_inner()) = pairs;
        *self.a_bytes.lock().unwrap_or_else(|p| p.into_inner()) = bytes;
        result
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0
    }
}

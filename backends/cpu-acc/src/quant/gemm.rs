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
//! row), else blocks of rows.

use super::conv::{alloc, centered};
use super::{range, QLINEAR_GEMM};
use crate::io::Io;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::CustomOp;
use backplane_core::{DataType, TensorInfo, TensorView, TensorViewMut};
use backplane_cpu_kernels::qgemm::{
    center_i8, center_u8, qgemm_requantized, requant_scale, ColumnRequant, QPackedB, RequantRange,
    QNR,
};
use std::sync::Mutex;

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
            wt.bytes(),
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
    b: QPackedB,
    rq: ColumnRequant,
    /// The centered rows of x, kept between executions.
    a: Mutex<Vec<i16>>,
    th: Threads,
}

impl QGemm {
    fn new(
        io: Io,
        d: &QGemmDesc,
        [rows, k, n]: [usize; 3],
        w: &[u8],
        bias: &[i32],
        th: Threads,
    ) -> Result<QGemm> {
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
        let b = QPackedB::pack(k, n, |kk, c| centered(w_signed, w[at(kk, c)], zero(c)))
            .ok_or_else(|| io.error("cannot allocate the packed weights".into()))?;
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
        let rq = ColumnRequant::new(bias, &scale, range)
            .ok_or_else(|| io.error("cannot allocate the requantization".into()))?;
        Ok(QGemm {
            io,
            rows,
            k,
            n,
            x_zero: d.x.1,
            x_signed,
            b,
            rq,
            a: Mutex::new(Vec::new()),
            th,
        })
    }

    fn refused(&self) -> BackendError {
        self.io.error("integer GEMM refused its operands".into())
    }
}

impl Workload for QGemm {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        let (x, y) = super::int8_buffers(&self.io, inputs, outputs)?;
        let (rows, k, n) = (self.rows, self.k, self.n);
        let kp = self.b.depth_padded();
        let mut a = std::mem::take(&mut *self.a.lock().unwrap_or_else(|p| p.into_inner()));
        if a.len() != rows * kp {
            // The K padding (past the depth) stays zero.
            a = alloc(rows * kp, 0i16, &self.io)?;
        }
        let center = if self.x_signed { center_i8 } else { center_u8 };
        for (row, xr) in a.chunks_exact_mut(kp).zip(x.chunks_exact(k)) {
            center(&mut row[..k], xr, self.x_zero);
        }
        let panels = n.div_ceil(QNR);
        let threads = self.th.count();
        let result = if threads > 1 && rows.div_ceil(BLOCK_ROWS) < threads && panels > 1 {
            // Few rows: the threads share the output channels.
            let tasks = panels.min(2 * threads);
            let per_task = panels.div_ceil(tasks);
            let y = Mutex::new(&mut *y);
            self.th.range(panels.div_ceil(per_task), |t| {
                let range = t * per_task..((t + 1) * per_task).min(panels);
                let first = range.start * QNR;
                let width = (range.end * QNR).min(n) - first;
                let mut out = alloc(rows * width, 0u8, &self.io)?;
                if !qgemm_requantized(&a, kp, rows, &self.b, range, &self.rq, &mut out, width) {
                    return Err(self.refused());
                }
                let mut y = y.lock().unwrap_or_else(|p| p.into_inner());
                for (i, row) in out.chunks_exact(width).enumerate() {
                    y[i * n + first..][..width].copy_from_slice(row);
                }
                Ok(())
            })
        } else {
            let per_task = self.th.chunk_size(rows, BLOCK_ROWS, 1);
            self.th.chunks(y, per_task * n, |t, yc| {
                let r = yc.len() / n.max(1);
                let a = &a[t * per_task * kp..];
                if !qgemm_requantized(a, kp, r, &self.b, 0..panels, &self.rq, yc, n) {
                    return Err(self.refused());
                }
                Ok(())
            })
        };
        *self.a.lock().unwrap_or_else(|p| p.into_inner()) = a;
        result
    }

    fn reads_constant_input(&self, slot: usize) -> bool {
        slot == 0
    }
}

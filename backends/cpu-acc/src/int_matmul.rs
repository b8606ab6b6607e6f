//! MatMul on int32 (numpy semantics: a 1-D operand is a row or a column, leading batch axes
//! broadcast), with CpuRef's results: two's-complement wrap-around on overflow. The int32
//! product ONNX MatMulInteger is imported as usually folds into CpuAcc's integer GEMM
//! (`crate::quant::dynamic`); this is the layer where it does not (weights given at run
//! time, values past 8 bits): each output row the sum of B's rows scaled by A's values, a
//! loop the compiler vectorizes.

use crate::io::{input, output, Io};
use crate::matmul::batch_offsets;
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{LayerDesc, Result, Workload};
use backplane_core::shape::{broadcast_shapes, broadcast_strides, strides_of};
use backplane_core::{DataType, TensorView, TensorViewMut};

/// Plan an int32 MatMul, or say why CpuAcc leaves it.
pub fn plan(layer: &LayerDesc) -> std::result::Result<Plan<'static>, String> {
    let ([a, b], Some(y)) = (layer.inputs.as_slice(), layer.outputs.first()) else {
        return Err("MatMul takes two inputs".into());
    };
    if [a.dtype, b.dtype, y.dtype] != [DataType::I32; 3] {
        return Err(format!(
            "MatMul of {} and {}: CpuAcc's integer product takes int32",
            a.dtype, b.dtype
        ));
    }
    let promote = |d: &[usize], row: bool| match d {
        [k] if row => vec![1, *k],
        [k] => vec![*k, 1],
        d => d.to_vec(),
    };
    let (ad, bd) = (
        promote(a.shape.dims(), true),
        promote(b.shape.dims(), false),
    );
    if ad.len() < 2 || bd.len() < 2 || ad[ad.len() - 1] != bd[bd.len() - 2] {
        return Err(format!(
            "MatMul of {} and {}: shapes disagree",
            a.shape, b.shape
        ));
    }
    let (ab, am) = ad.split_at(ad.len() - 2);
    let (bb, bm) = bd.split_at(bd.len() - 2);
    let batch = broadcast_shapes(ab, bb).map_err(|e| e.to_string())?;
    let (m, k, n) = (am[0], am[1], bm[1]);
    // Element offsets of each output matrix's operands (Y's row-major, contiguous).
    let steps = |dims: &[usize]| {
        let mut to = batch.clone();
        to.extend_from_slice(&dims[dims.len() - 2..]);
        broadcast_strides(dims, &to)[..batch.len()].to_vec()
    };
    let y_steps: Vec<usize> = strides_of(&batch).iter().map(|s| s * m * n).collect();
    let shape = Shape {
        m,
        k,
        n,
        offsets: batch_offsets(&batch, [&steps(&ad), &steps(&bd), &y_steps]),
    };
    if shape.offsets.len() * shape.m * shape.n != y.shape.elements() {
        return Err(format!("MatMul: output {} does not match", y.shape));
    }
    Ok(Plan::new(move |io, th| done(IntMatMul { io, shape, th })))
}

/// The product's sizes, and for each output matrix (in order) the element offsets of the
/// matrices of A and B it multiplies (and its own).
#[derive(Debug, Clone)]
struct Shape {
    m: usize,
    k: usize,
    n: usize,
    offsets: Vec<(usize, usize, usize)>,
}

/// An int32 MatMul.
struct IntMatMul {
    io: Io,
    shape: Shape,
    th: Threads,
}

/// `y += x · b` elementwise over one row, wrapping.
#[inline]
fn axpy(y: &mut [i32], x: i32, b: &[i32]) {
    for (o, &v) in y.iter_mut().zip(b) {
        *o = o.wrapping_add(x.wrapping_mul(v));
    }
}

impl Workload for IntMatMul {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let a = input(inputs, 0)?.as_slice::<i32>()?;
        let b = input(inputs, 1)?.as_slice::<i32>()?;
        let y = output(outputs)?.as_mut_slice::<i32>()?;
        let Shape { m, k, n, .. } = self.shape;
        if m * n == 0 {
            return Ok(());
        }
        let rows = self.shape.offsets.len() * m;
        let per = self.th.chunk_size(rows, (4096 / (k * n).max(1)).max(1), 1);
        self.th.chunks(y, per * n, |t, yc| {
            for (r, row) in yc.chunks_exact_mut(n).enumerate() {
                let g = t * per + r;
                let (ao, bo, _) = self.shape.offsets[g / m];
                let arow = &a[ao + (g % m) * k..][..k];
                let bm = &b[bo..][..k * n];
                row.fill(0);
                for (&x, brow) in arow.iter().zip(bm.chunks_exact(n)) {
                    axpy(row, x, brow);
                }
            }
            Ok(())
        })
    }
}

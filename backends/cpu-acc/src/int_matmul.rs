//! MatMul on int32 (numpy semantics: a 1-D operand is a row or a column, leading batch axes
//! broadcast), with CpuRef's results: two's-complement wrap-around on overflow. The int32
//! product ONNX MatMulInteger is imported as usually folds into CpuAcc's integer GEMM
//! (`crate::quant::dynamic`); this is the layer where it does not (weights given at run
//! time, values past 8 bits): each output row the sum of B's rows scaled by A's values, a
//! loop the compiler vectorizes.

use crate::io::{input, output, Io};
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{LayerDesc, Result, Workload};
use backplane_core::shape::broadcast_shapes;
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
    let shape = Shape {
        m: am[0],
        k: am[1],
        n: bm[1],
        pairs: batch_pairs(ab, bb, &batch),
    };
    if shape.pairs.len() * shape.m * shape.n != y.shape.elements() {
        return Err(format!("MatMul: output {} does not match", y.shape));
    }
    Ok(Plan::new(move |io, th| done(IntMatMul { io, shape, th })))
}

/// The product's sizes, and for each output matrix the matrices of A and B it multiplies.
#[derive(Debug, Clone)]
struct Shape {
    m: usize,
    k: usize,
    n: usize,
    pairs: Vec<(usize, usize)>,
}

/// For each index of the broadcast batch `batch` (row-major), the matching matrix of a
/// batch of dims `a` and of `b` (each right-aligned, size-1 axes repeated).
fn batch_pairs(a: &[usize], b: &[usize], batch: &[usize]) -> Vec<(usize, usize)> {
    let total: usize = batch.iter().product();
    let index_in = |dims: &[usize], at: usize| {
        // The batch index `at`, digit by digit from the last axis, mapped into `dims`.
        let (mut rest, mut idx, mut stride) = (at, 0, 1);
        for (i, &d) in batch.iter().enumerate().rev() {
            let digit = rest % d.max(1);
            rest /= d.max(1);
            let off = batch.len() - i;
            if off <= dims.len() {
                let dd = dims[dims.len() - off];
                if dd > 1 {
                    idx += digit * stride;
                }
                stride *= dd;
            }
        }
        idx
    };
    (0..total)
        .map(|t| (index_in(a, t), index_in(b, t)))
        .collect()
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
        let rows = self.shape.pairs.len() * m;
        let per = self.th.chunk_size(rows, (4096 / (k * n).max(1)).max(1), 1);
        self.th.chunks(y, per * n, |t, yc| {
            for (r, row) in yc.chunks_exact_mut(n).enumerate() {
                let g = t * per + r;
                let (ai, bi) = self.shape.pairs[g / m];
                let arow = &a[(ai * m + g % m) * k..][..k];
                let bm = &b[bi * k * n..][..k * n];
                row.fill(0);
                for (&x, brow) in arow.iter().zip(bm.chunks_exact(n)) {
                    axpy(row, x, brow);
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_pairs_follow_numpy_broadcasting() {
        assert_eq!(batch_pairs(&[], &[], &[]), vec![(0, 0)]);
        assert_eq!(batch_pairs(&[3], &[], &[3]), vec![(0, 0), (1, 0), (2, 0)]);
        assert_eq!(
            batch_pairs(&[2, 1], &[3], &[2, 3]),
            vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        );
        assert_eq!(
            batch_pairs(&[1, 2], &[2, 1], &[2, 2]),
            vec![(0, 0), (1, 0), (0, 1), (1, 1)]
        );
    }
}

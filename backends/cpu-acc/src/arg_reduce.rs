//! ArgMax / ArgMin of f32 values along one axis, as i64 indices.
//!
//! Along an inner axis (a class axis of a segmentation output, `[N, C, H, W]` along C) the
//! pixels are scanned side by side: one pass over each channel's contiguous plane updates a
//! row of best values and indices, instead of a strided walk per pixel.

use crate::io::{f32s, input, output, Io};
use crate::threads::Threads;
use backplane_backend_api::{Result, Workload};
use backplane_core::ops::ArgReduceDesc;
use backplane_core::shape::normalize_axis;
use backplane_core::{TensorView, TensorViewMut};

/// Outputs per thread below which the work stays on one thread.
const PARALLEL_MIN: usize = 4096;

/// Whether `v` replaces the best `b` so far: strictly better, or equal when the last index
/// is wanted. NaN ranks above every number for ArgMax and never below one for ArgMin (as
/// CpuRef's total order); two NaNs are equal.
#[inline(always)]
fn replaces(max: bool, last: bool, v: f32, b: f32) -> bool {
    let (vn, bn) = (v.is_nan(), b.is_nan());
    let equal = v == b || (vn && bn);
    let better = if max {
        v > b || (vn && !bn)
    } else {
        v < b || (bn && !vn)
    };
    better || (last && equal)
}

/// ArgMax or ArgMin along one axis.
pub struct ArgReduceWorkload {
    io: Io,
    max: bool,
    last: bool,
    /// Product of the dims before the axis, the axis, and after it.
    outer: usize,
    len: usize,
    inner: usize,
    threads: Threads,
}

impl ArgReduceWorkload {
    /// Plan it.
    pub fn new(io: Io, desc: &ArgReduceDesc, threads: Threads) -> Result<Self> {
        let dims = io.input_dims()?;
        let a = normalize_axis(desc.axis, dims.len())?;
        Ok(ArgReduceWorkload {
            max: desc.max,
            last: desc.select_last_index,
            outer: dims[..a].iter().product(),
            len: dims[a],
            inner: dims[a + 1..].iter().product(),
            io,
            threads,
        })
    }

    /// Outputs `p0..p0 + y.len()` (flat `o·inner + i`), each the index of the best of
    /// `x[o, :, i]`; `best` is scratch of at least `y.len()` values. The axis is not empty
    /// (refused at support time) and the buffers were checked against the plan.
    fn outputs(&self, x: &[f32], p0: usize, y: &mut [i64], best: &mut [f32]) {
        let (len, inner) = (self.len, self.inner);
        if inner == 1 {
            // Along the last axis: one contiguous row per output.
            for (k, y) in y.iter_mut().enumerate() {
                let row = &x[(p0 + k) * len..(p0 + k + 1) * len];
                let mut b = row[0];
                *y = 0;
                for (j, &v) in row.iter().enumerate().skip(1) {
                    if replaces(self.max, self.last, v, b) {
                        b = v;
                        *y = j as i64;
                    }
                }
            }
            return;
        }
        let mut p = p0;
        let mut rest = y;
        while !rest.is_empty() {
            // The run of outputs sharing one outer index.
            let (o, i0) = (p / inner, p % inner);
            let n = (inner - i0).min(rest.len());
            let (ys, tail) = rest.split_at_mut(n);
            let base = o * len * inner + i0;
            let best = &mut best[..n];
            best.copy_from_slice(&x[base..base + n]);
            ys.fill(0);
            for j in 1..len {
                let row = &x[base + j * inner..base + j * inner + n];
                for ((b, y), &v) in best.iter_mut().zip(ys.iter_mut()).zip(row) {
                    if replaces(self.max, self.last, v, *b) {
                        *b = v;
                        *y = j as i64;
                    }
                }
            }
            rest = tail;
            p += n;
        }
    }
}

impl Workload for ArgReduceWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = f32s(input(inputs, 0)?)?;
        let y = output(outputs)?.as_mut_slice::<i64>()?;
        let total = self.outer * self.inner;
        if y.len() != total || x.len() != total * self.len {
            return Err(self.io.error("arg reduce buffers do not match".into()));
        }
        if y.is_empty() || self.len == 0 {
            return Ok(());
        }
        let per = self.threads.chunk_size(total, PARALLEL_MIN, 1);
        self.threads.chunks(y, per, |ci, yc| {
            let mut best = vec![0f32; if self.inner == 1 { 0 } else { yc.len() }];
            self.outputs(x, ci * per, yc, &mut best);
            Ok(())
        })
    }
}

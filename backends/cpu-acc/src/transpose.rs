//! Transpose for any element type. The permutation is first reduced to its essentials: size-1
//! axes dropped and input axes that stay adjacent and in order merged, so that ShuffleNet's
//! channel shuffle (`[1, 2, C, H, W]` by `[0, 2, 1, 3, 4]`) copies `2·C` runs of `H·W` values
//! rather than `2·C·H` runs of `W`, and the layout transposes at channels-last borders
//! (`[N, C, H, W]` by `[0, 2, 3, 1]`) become `N` matrix transposes.

use crate::io::{f32s, f32s_mut, input, output, Io};
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result, Workload};
use backplane_core::shape::strides_of;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// The same permutation of the same data on fewer axes: `(dims, perm)` with no size-1 axis and
/// no two input axes that follow each other in the output as they do in the input (those are
/// merged into one). Output axis `i` is input axis `perm[i]`, as in ONNX.
pub(crate) fn merge_axes(dims: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    // Input axes kept (size > 1), renumbered in input order.
    let mut new_index = vec![usize::MAX; dims.len()];
    let mut kept_dims = Vec::with_capacity(dims.len());
    for (axis, &d) in dims.iter().enumerate() {
        if d != 1 {
            new_index[axis] = kept_dims.len();
            kept_dims.push(d);
        }
    }
    let order: Vec<usize> = perm
        .iter()
        .filter_map(|&p| new_index.get(p).copied().filter(|&i| i != usize::MAX))
        .collect();
    // Runs of consecutive input axes in output order: each becomes one axis.
    let mut groups: Vec<(usize, usize)> = Vec::with_capacity(order.len());
    for &axis in &order {
        match groups.last_mut() {
            Some((_, last)) if *last + 1 == axis => *last = axis,
            _ => groups.push((axis, axis)),
        }
    }
    let mut by_input: Vec<usize> = (0..groups.len()).collect();
    by_input.sort_by_key(|&g| groups[g].0);
    let merged_dims = by_input
        .iter()
        .map(|&g| kept_dims[groups[g].0..=groups[g].1].iter().product())
        .collect();
    let mut merged_perm = vec![0; groups.len()];
    for (position, &g) in by_input.iter().enumerate() {
        merged_perm[g] = position;
    }
    (merged_dims, merged_perm)
}

/// What one execution does, decided at planning.
#[derive(Debug, Clone, PartialEq)]
enum Plan {
    /// The permutation moves nothing: one copy.
    Copy,
    /// `n` matrices `a×b` → `b×a` (f32 in cache-sized square blocks; other types as `Rows`).
    Matrices { n: usize, a: usize, b: usize },
    /// Output rows of `inner` values; per output axis but the last, its size and the input
    /// stride (in elements); `step`, the input stride along the last output axis.
    Rows {
        outer_dims: Vec<usize>,
        outer_strides: Vec<usize>,
        inner: usize,
        step: usize,
    },
}

/// Transpose (any element type, moved as bytes; f32 matrices in blocks).
pub struct TransposeWorkload {
    io: Io,
    plan: Plan,
    /// The same transpose as rows, for the element types the matrix blocks do not take.
    rows: Plan,
    threads: Threads,
}

/// Side of the square blocks of a matrix transpose (a multiple of 8, for the AVX2 blocks).
const TRANSPOSE_BLOCK: usize = 32;

/// Values one task moves at least (below that a hand-off costs more than the copy).
const MIN_TASK_VALUES: usize = 16384;

/// `y (b×a) = xᵀ` for `x` a×b, rows `j0..j0 + y.len() / a` of `y`, in square blocks (each
/// by [`simd::transpose_tile`]). False when a block does not fit its buffers.
fn transpose_rows(x: &[f32], a: usize, b: usize, j0: usize, y: &mut [f32]) -> bool {
    let rows = y.len() / a.max(1);
    for jb in (0..rows).step_by(TRANSPOSE_BLOCK) {
        let jn = TRANSPOSE_BLOCK.min(rows - jb);
        for ib in (0..a).step_by(TRANSPOSE_BLOCK) {
            let in_ = TRANSPOSE_BLOCK.min(a - ib);
            let src = x.get(ib * b + j0 + jb..).unwrap_or(&[]);
            let dst = y.get_mut(jb * a + ib..).unwrap_or(&mut []);
            if !simd::transpose_tile(src, b, in_, jn, dst, a) {
                return false;
            }
        }
    }
    true
}

/// The plan that copies output rows for the merged `dims` and `perm`.
fn rows_plan(dims: &[usize], perm: &[usize]) -> Plan {
    let strides = strides_of(dims);
    let r = perm.len();
    if r == 0 {
        return Plan::Copy;
    }
    Plan::Rows {
        outer_dims: perm[..r - 1].iter().map(|&p| dims[p]).collect(),
        outer_strides: perm[..r - 1].iter().map(|&p| strides[p]).collect(),
        inner: dims[perm[r - 1]],
        step: strides[perm[r - 1]],
    }
}

impl TransposeWorkload {
    /// Plan it.
    pub fn new(io: Io, perm: &[usize], threads: Threads) -> Result<Self> {
        let dims = io.input_dims()?;
        if perm.len() != dims.len() || perm.iter().any(|&p| p >= dims.len()) {
            return Err(io.error(format!(
                "permutation {perm:?} does not fit an input of rank {}",
                dims.len()
            )));
        }
        let (dims, perm) = merge_axes(&dims, perm);
        let rows = if perm.iter().enumerate().all(|(i, &p)| i == p) {
            Plan::Copy
        } else {
            rows_plan(&dims, &perm)
        };
        let plan = match (perm.as_slice(), dims.as_slice()) {
            ([1, 0], &[a, b]) => Plan::Matrices { n: 1, a, b },
            ([0, 2, 1], &[n, a, b]) => Plan::Matrices { n, a, b },
            _ => rows.clone(),
        };
        Ok(TransposeWorkload {
            io,
            plan,
            rows,
            threads,
        })
    }

    /// `n` f32 matrices `a×b` into their transposes.
    fn matrices(&self, x: &[f32], y: &mut [f32], (n, a, b): (usize, usize, usize)) -> Result<()> {
        if x.len() != n * a * b || y.len() != x.len() {
            return Err(self.io.error("transpose buffers do not match".into()));
        }
        if x.is_empty() {
            return Ok(());
        }
        for (xm, ym) in x.chunks_exact(a * b).zip(y.chunks_exact_mut(a * b)) {
            // Few rows or few columns (an image's 3 channels at a layout border): the square
            // blocks would be mostly remainder, so the values go in passes, one per short row.
            match (a, b) {
                (_, 2) => split_lanes_2(xm, ym),
                (_, 3) => split_lanes_3(xm, ym),
                (_, 4) => split_lanes_4(xm, ym),
                (2, _) => join_lanes_2(xm, ym),
                (3, _) => join_lanes_3(xm, ym),
                (4, _) => join_lanes_4(xm, ym),
                _ => {
                    self.blocks(xm, ym, a, b)?;
                }
            }
        }
        Ok(())
    }

    /// One `a×b` f32 matrix into its transpose by square blocks, shared by the threads.
    fn blocks(&self, xm: &[f32], ym: &mut [f32], a: usize, b: usize) -> Result<()> {
        let per = self
            .threads
            .chunk_size(b, (MIN_TASK_VALUES / a.max(1)).max(1), TRANSPOSE_BLOCK);
        self.threads.chunks(ym, per * a, |ci, yc| {
            if transpose_rows(xm, a, b, ci * per, yc) {
                Ok(())
            } else {
                Err(self.io.error("transpose blocks do not fit".into()))
            }
        })
    }
}

/// `y (B×a) = xᵀ` for `x` a×B with `B` small: pass `j` gathers lane `j` of every row of `x`
/// into row `j` of `y`.
#[inline(always)]
fn split_lanes_body<const B: usize>(x: &[f32], y: &mut [f32]) {
    let (rows, _) = x.as_chunks::<B>();
    for (j, out) in y.chunks_exact_mut(rows.len().max(1)).enumerate().take(B) {
        for (o, r) in out.iter_mut().zip(rows) {
            *o = r[j];
        }
    }
}

/// `y (b×A) = xᵀ` for `x` A×b with `A` small: pass `j` spreads row `j` of `x` into lane `j`
/// of every row of `y`.
#[inline(always)]
fn join_lanes_body<const A: usize>(x: &[f32], y: &mut [f32]) {
    let (rows, _) = y.as_chunks_mut::<A>();
    let b = rows.len();
    for (j, src) in x.chunks_exact(b.max(1)).enumerate().take(A) {
        for (r, &v) in rows.iter_mut().zip(src) {
            r[j] = v;
        }
    }
}

backplane_cpu_kernels::multiversion! {
    /// [`split_lanes_body`] for 2 lanes.
    fn split_lanes_2(x: &[f32], y: &mut [f32]) => split_lanes_body::<2>;
}
backplane_cpu_kernels::multiversion! {
    /// [`split_lanes_body`] for 3 lanes.
    fn split_lanes_3(x: &[f32], y: &mut [f32]) => split_lanes_body::<3>;
}
backplane_cpu_kernels::multiversion! {
    /// [`split_lanes_body`] for 4 lanes.
    fn split_lanes_4(x: &[f32], y: &mut [f32]) => split_lanes_body::<4>;
}
backplane_cpu_kernels::multiversion! {
    /// [`join_lanes_body`] for 2 lanes.
    fn join_lanes_2(x: &[f32], y: &mut [f32]) => join_lanes_body::<2>;
}
backplane_cpu_kernels::multiversion! {
    /// [`join_lanes_body`] for 3 lanes.
    fn join_lanes_3(x: &[f32], y: &mut [f32]) => join_lanes_body::<3>;
}
backplane_cpu_kernels::multiversion! {
    /// [`join_lanes_body`] for 4 lanes.
    fn join_lanes_4(x: &[f32], y: &mut [f32]) => join_lanes_body::<4>;
}

/// Copy output rows `first..` (as many as `y` holds, `inner` elements of `esize` bytes each)
/// from `x`: each row starts at the input offset its outer index gives (kept as an odometer,
/// not divided out per row) and reads every `step`-th element.
#[allow(clippy::too_many_arguments)]
fn copy_rows(
    x: &[u8],
    y: &mut [u8],
    first: usize,
    outer_dims: &[usize],
    outer_strides: &[usize],
    inner: usize,
    step: usize,
    esize: usize,
) -> Result<()> {
    let row_bytes = inner * esize;
    if row_bytes == 0 {
        return Ok(());
    }
    let r = outer_dims.len();
    let mut index = vec![0usize; r];
    let mut rest = first;
    let mut offset = 0usize;
    for i in (0..r).rev() {
        index[i] = rest % outer_dims[i].max(1);
        rest /= outer_dims[i].max(1);
        offset += index[i] * outer_strides[i];
    }
    let short = || BackendError::Execution("transpose: input too small".into());
    for out in y.chunks_exact_mut(row_bytes) {
        let start = offset * esize;
        if step == 1 {
            out.copy_from_slice(x.get(start..start + row_bytes).ok_or_else(short)?);
        } else if esize == 4 {
            // f32 and other 4-byte types: whole elements, iterators rather than indexing.
            let src = x.get(start..).ok_or_else(short)?;
            let mut it = src.chunks_exact(4).step_by(step);
            for o in out.chunks_exact_mut(4) {
                o.copy_from_slice(it.next().ok_or_else(short)?);
            }
        } else if esize == 1 {
            // Bytes (int8 tensors): one strided pass, no bounds check per element.
            let src = x.get(start..).ok_or_else(short)?;
            let mut it = src.iter().step_by(step);
            for o in out.iter_mut() {
                *o = *it.next().ok_or_else(short)?;
            }
        } else {
            for (j, o) in out.chunks_exact_mut(esize).enumerate() {
                let s = start + j * step * esize;
                o.copy_from_slice(x.get(s..s + esize).ok_or_else(short)?);
            }
        }
        // Next row: advance the odometer.
        for i in (0..r).rev() {
            index[i] += 1;
            offset += outer_strides[i];
            if index[i] < outer_dims[i] {
                break;
            }
            offset -= index[i] * outer_strides[i];
            index[i] = 0;
        }
    }
    Ok(())
}

impl Workload for TransposeWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?;
        let dtype = x.info.dtype;
        let esize = dtype.size();
        let y = output(outputs)?;
        if y.data.len() != x.data.len() {
            return Err(self.io.error("transpose buffers do not match".into()));
        }
        let plan = match (&self.plan, dtype) {
            (Plan::Matrices { n, a, b }, DataType::F32) => {
                return self.matrices(f32s(x)?, f32s_mut(y)?, (*n, *a, *b));
            }
            (Plan::Matrices { .. }, _) => &self.rows,
            (plan, _) => plan,
        };
        match plan {
            Plan::Copy | Plan::Matrices { .. } => {
                let per = self
                    .threads
                    .chunk_size(y.data.len(), MIN_TASK_VALUES * 4, 64);
                let src = x.data;
                self.threads.chunks(y.data, per, |ci, yc| {
                    let start = ci * per;
                    let part = src.get(start..start + yc.len()).ok_or_else(|| {
                        BackendError::Execution("transpose: input too small".into())
                    })?;
                    yc.copy_from_slice(part);
                    Ok(())
                })
            }
            Plan::Rows {
                outer_dims,
                outer_strides,
                inner,
                step,
            } => {
                let inner = *inner;
                let row_bytes = (inner * esize).max(1);
                let rows = y.data.len() / row_bytes;
                let per = self
                    .threads
                    .chunk_size(rows, (MIN_TASK_VALUES / inner.max(1)).max(1), 1);
                let src = x.data;
                self.threads.chunks(y.data, per * row_bytes, |ci, yc| {
                    copy_rows(
                        src,
                        yc,
                        ci * per,
                        outer_dims,
                        outer_strides,
                        inner,
                        *step,
                        esize,
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_axes_keep_the_permutation() {
        // ShuffleNet's channel shuffle: two groups of C channels of H·W values.
        assert_eq!(
            merge_axes(&[1, 2, 58, 28, 28], &[0, 2, 1, 3, 4]),
            (vec![2, 58, 784], vec![1, 0, 2])
        );
        // NCHW → NHWC: N matrices C × HW.
        assert_eq!(
            merge_axes(&[2, 8, 5, 7], &[0, 2, 3, 1]),
            (vec![2, 8, 35], vec![0, 2, 1])
        );
        // NHWC → NCHW with N = 1: one matrix.
        assert_eq!(
            merge_axes(&[1, 5, 7, 8], &[0, 3, 1, 2]),
            (vec![35, 8], vec![1, 0])
        );
        // Nothing moves once size-1 axes are dropped.
        assert_eq!(merge_axes(&[3, 1, 4], &[1, 0, 2]), (vec![12], vec![0]));
        assert_eq!(merge_axes(&[1, 1], &[1, 0]), (vec![], vec![]));
        // A full reversal merges nothing.
        assert_eq!(
            merge_axes(&[2, 3, 4], &[2, 1, 0]),
            (vec![2, 3, 4], vec![2, 1, 0])
        );
        // Two runs out of order.
        assert_eq!(
            merge_axes(&[2, 3, 4, 5, 6], &[3, 4, 0, 1, 2]),
            (vec![24, 30], vec![1, 0])
        );
    }

    #[test]
    fn byte_rows_match_a_naive_transpose() {
        // Matrices a × b of bytes to b × a, odd and prime sizes, from every first row.
        for (a, b) in [(1, 1), (1, 7), (7, 1), (13, 3), (256, 24), (31, 17)] {
            let x: Vec<u8> = (0..a * b).map(|i| (i * 37 % 251) as u8).collect();
            for first in [0, b / 2, b - 1] {
                let mut y = vec![0u8; (b - first) * a];
                copy_rows(&x, &mut y, first, &[b], &[1], a, b, 1).unwrap();
                for (r, row) in y.chunks_exact(a).enumerate() {
                    for (i, &v) in row.iter().enumerate() {
                        assert_eq!(v, x[i * b + first + r], "{a}x{b} from {first}");
                    }
                }
            }
        }
        let mut y = vec![0u8; 4];
        assert!(copy_rows(&[0u8; 5], &mut y, 0, &[1], &[1], 4, 2, 1).is_err());
    }
}

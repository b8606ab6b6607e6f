//! Data movement: Slice, Gather, Where, Expand, Tile, Pad and Split.
//!
//! These ops never compute on element values, so every whole-byte element type is moved as
//! `dtype.size()` bytes. Everything that depends only on shapes (which input element each
//! output row starts at, how far apart the elements of a row are, which parts of a padded row
//! are fill) is worked out when the workload is created; execution walks the output row by
//! row and copies contiguous runs whole. Outputs above [`PARALLEL_MIN`] elements are split
//! into blocks of rows across the thread pool.

use crate::io::{input, output, Io};
use crate::plan::{done, Plan};
use crate::threads::Threads;
use backplane_backend_api::{BackendError, LayerDesc, Result, Workload};
use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
use backplane_core::scalar::Scalar;
use backplane_core::shape::{broadcast_strides, normalize_axis, strides_of};
use backplane_core::{DataType, Tensor, TensorView, TensorViewMut};

/// Outputs with more elements than this are moved by several threads.
pub const PARALLEL_MIN: usize = 64 * 1024;

/// Why CpuAcc cannot move elements of `dtype` (slot `slot` of `op`), if it cannot.
fn movable(op: &str, slot: usize, dtype: DataType) -> std::result::Result<(), String> {
    match dtype {
        DataType::I4 | DataType::U4 => Err(format!(
            "{op} input {slot} is {dtype}; CpuAcc moves whole-byte element types only"
        )),
        _ => Ok(()),
    }
}

/// The first input can be moved, or the reason.
fn first_movable(layer: &LayerDesc) -> std::result::Result<(), String> {
    let dtype = layer.inputs.first().ok_or("no input")?.dtype;
    movable(layer.op.name(), 0, dtype)
}

/// The first input's dimensions and element size, from a workload's descriptions.
fn element(io: &Io) -> Result<(Vec<usize>, usize)> {
    let x = io
        .inputs
        .first()
        .ok_or_else(|| BackendError::Other(format!("{}: no input", io.layer)))?;
    Ok((x.shape.dims().to_vec(), x.dtype.size()))
}

/// The first output's dimensions.
fn out_dims(io: &Io) -> Vec<usize> {
    io.outputs
        .first()
        .map(|y| y.shape.dims().to_vec())
        .unwrap_or_default()
}

/// Plan a Slice (the caller has checked the layer's shapes and types with the op's
/// inference; so do the other plans here).
pub fn plan_slice<'a>(
    layer: &LayerDesc,
    desc: &'a SliceDesc,
) -> std::result::Result<Plan<'a>, String> {
    first_movable(layer)?;
    Ok(Plan::new(move |io, threads| {
        let (dims, esize) = element(&io)?;
        let walk = slice_walk(desc, &dims)?;
        done(StridedWorkload::new(io, walk, esize, threads)?)
    }))
}

/// Plan an Expand.
pub fn plan_expand(layer: &LayerDesc) -> std::result::Result<Plan<'static>, String> {
    first_movable(layer)?;
    Ok(Plan::new(|io, threads| {
        let (dims, esize) = element(&io)?;
        let y_dims = out_dims(&io);
        let st = broadcast_strides(&dims, &y_dims);
        let strides: Vec<[isize; 1]> = st.iter().map(|&s| [s as isize]).collect();
        let walk = Walk::new(&y_dims, &strides, [0])?;
        done(StridedWorkload::new(io, walk, esize, threads)?)
    }))
}

/// Plan a Tile: Expand of x viewed as [1, d0, 1, d1, ...] to [r0, d0, r1, d1, ...].
pub fn plan_tile<'a>(
    layer: &LayerDesc,
    repeats: &'a [usize],
) -> std::result::Result<Plan<'a>, String> {
    first_movable(layer)?;
    Ok(Plan::new(move |io, threads| {
        let (dims, esize) = element(&io)?;
        let st = strides_of(&dims);
        let mut tdims = Vec::with_capacity(2 * dims.len());
        let mut strides = Vec::with_capacity(2 * dims.len());
        for ((&d, &r), &s) in dims.iter().zip(repeats).zip(&st) {
            tdims.extend([r, d]);
            strides.extend([[0isize], [s as isize]]);
        }
        let walk = Walk::new(&tdims, &strides, [0])?;
        done(StridedWorkload::new(io, walk, esize, threads)?)
    }))
}

/// Plan a Gather (indices planned now when they are constant).
pub fn plan_gather(layer: &LayerDesc, axis: i64) -> std::result::Result<Plan<'_>, String> {
    first_movable(layer)?;
    Ok(Plan::new(move |io, threads| {
        done(GatherWorkload::new(io, axis, layer.constant(1), threads)?)
    }))
}

/// Plan a Where of ordinary element types.
pub fn plan_where(layer: &LayerDesc) -> std::result::Result<Plan<'static>, String> {
    for slot in 1..3 {
        let dt = layer
            .inputs
            .get(slot)
            .ok_or("Where takes three inputs")?
            .dtype;
        if !DataType::ORDINARY.contains(&dt) {
            return Err(format!(
                "Where input {slot} is {dt}; CpuAcc selects ordinary element types only"
            ));
        }
    }
    Ok(Plan::new(|io, threads| {
        done(WhereWorkload::new(io, threads)?)
    }))
}

/// Plan a Pad.
pub fn plan_pad<'a>(layer: &LayerDesc, desc: &'a PadDesc) -> std::result::Result<Plan<'a>, String> {
    first_movable(layer)?;
    Ok(Plan::new(move |io, threads| {
        done(PadWorkload::new(io, desc, threads)?)
    }))
}

/// Plan a Split.
pub fn plan_split(layer: &LayerDesc, axis: i64) -> std::result::Result<Plan<'static>, String> {
    first_movable(layer)?;
    Ok(Plan::new(move |io, threads| {
        done(SplitWorkload::new(io, axis, threads)?)
    }))
}

/// `data[from..to]`, or an error instead of a panic.
fn part(data: &[u8], from: usize, to: usize) -> Result<&[u8]> {
    data.get(from..to)
        .ok_or_else(|| BackendError::Execution("a data-movement read leaves its buffer".into()))
}

/// Fill `dst` with copies of `pattern` (whose length divides `dst`'s), doubling what is
/// written each time.
fn replicate(pattern: &[u8], dst: &mut [u8]) {
    let n = pattern.len().min(dst.len());
    if n == 0 {
        return;
    }
    dst[..n].copy_from_slice(&pattern[..n]);
    let mut filled = n;
    while filled < dst.len() {
        let take = filled.min(dst.len() - filled);
        dst.copy_within(..take, filled);
        filled += take;
    }
}

/// The output split into row-aligned blocks, run by `f(first_row, rows_bytes)` on the pool
/// when there are more than [`PARALLEL_MIN`] elements (`esize` bytes each), else in one call.
fn by_rows<F>(threads: &Threads, y: &mut [u8], row: usize, esize: usize, f: F) -> Result<()>
where
    F: Fn(usize, &mut [u8]) -> Result<()> + Sync + Send,
{
    if row == 0 || y.is_empty() {
        return Ok(());
    }
    let rows = y.len() / row;
    if threads.count() == 1 || y.len() / esize.max(1) <= PARALLEL_MIN || rows < 2 {
        return f(0, y);
    }
    // At least ~16K elements per block, so small blocks do not drown in overhead.
    let min_rows = (16 * 1024 * esize.max(1)).div_ceil(row);
    let per = threads.chunk_size(rows, min_rows, 1);
    threads.chunks(y, per * row, |ci, block| f(ci * per, block))
}

/// The longest row a walk moves at once: a walk that is one longer row (a broadcast
/// constant, a whole contiguous tensor) is cut so that the threads can share it.
const WALK_ROW: usize = 4096;

/// How the rows of an output are read from `K` inputs: coalesced outer dims with each
/// operand's strides (in elements, negative for reversed slices), the row length and each
/// operand's stride along a row.
#[derive(Debug, Clone)]
struct Walk<const K: usize> {
    dims: Vec<usize>,
    strides: Vec<[isize; K]>,
    inner: usize,
    step: [isize; K],
    base: [isize; K],
    /// Some dim is 0: there is nothing to move.
    empty: bool,
}

impl<const K: usize> Walk<K> {
    /// Plan the walk of an output of `dims` where a step along axis `i` moves operand `k` by
    /// `strides[i][k]` elements, starting at `base`. Axes of size 1 are dropped and axes that
    /// continue each other in every operand are merged.
    fn new(dims: &[usize], strides: &[[isize; K]], base: [isize; K]) -> Result<Self> {
        let empty = dims.contains(&0);
        let mut axes: Vec<(usize, [isize; K])> = Vec::with_capacity(dims.len());
        for (&d, &s) in dims.iter().zip(strides) {
            if d == 1 {
                continue;
            }
            if let Some(last) = axes.last_mut() {
                let d_isize = d as isize;
                if (0..K).all(|k| last.1[k] == s[k].wrapping_mul(d_isize)) {
                    last.0 *= d;
                    last.1 = s;
                    continue;
                }
            }
            axes.push((d, s));
        }
        let (inner, step) = axes.pop().unwrap_or((1, [0; K]));
        let mut walk = Walk {
            dims: axes.iter().map(|a| a.0).collect(),
            strides: axes.iter().map(|a| a.1).collect(),
            inner,
            step,
            base,
            empty,
        };
        walk.cut_long_rows(WALK_ROW);
        Ok(walk)
    }

    /// Cut a walk that is one long row into rows of at most `max` elements (a divisor of
    /// the row, at least a quarter of `max`), so that the rows can be shared by threads.
    /// A row with no such divisor stays whole.
    fn cut_long_rows(&mut self, max: usize) {
        if !self.dims.is_empty() || self.inner <= max || max < 4 {
            return;
        }
        let inner = self.inner;
        if let Some(k) = (max / 4..=max).rev().find(|&k| inner.is_multiple_of(k)) {
            self.dims.push(inner / k);
            self.strides.push(self.step.map(|s| s * k as isize));
            self.inner = k;
        }
    }

    /// Number of rows.
    fn rows(&self) -> usize {
        if self.empty {
            0
        } else {
            self.dims.iter().product()
        }
    }

    /// Whether every element the walk reads lies inside operands of `lens` elements.
    fn fits(&self, lens: [usize; K]) -> bool {
        if self.empty {
            return true;
        }
        (0..K).all(|k| {
            let mut lo = self.base[k] as i128;
            let mut hi = lo;
            let axes = self
                .dims
                .iter()
                .zip(self.strides.iter().map(|s| s[k]))
                .chain(std::iter::once((&self.inner, self.step[k])));
            for (&d, s) in axes {
                let reach = (d as i128 - 1) * s as i128;
                if reach < 0 {
                    lo += reach;
                } else {
                    hi += reach;
                }
            }
            lo >= 0 && hi < lens[k] as i128
        })
    }

    /// A cursor at row `row`.
    fn cursor(&self, row: usize) -> Cursor<'_, K> {
        let mut idx = vec![0; self.dims.len()];
        let mut off = self.base;
        let mut r = row;
        for a in (0..self.dims.len()).rev() {
            let d = self.dims[a].max(1);
            idx[a] = r % d;
            r /= d;
            for (o, s) in off.iter_mut().zip(self.strides[a]) {
                *o += idx[a] as isize * s;
            }
        }
        Cursor {
            walk: self,
            idx,
            off,
        }
    }
}

/// A position in a [`Walk`]: the current row's first element in each operand.
struct Cursor<'w, const K: usize> {
    walk: &'w Walk<K>,
    idx: Vec<usize>,
    off: [isize; K],
}

impl<const K: usize> Cursor<'_, K> {
    /// The current row's first element in each operand.
    fn at(&self) -> [usize; K] {
        self.off.map(|o| o.max(0) as usize)
    }

    /// Move to the next row.
    fn advance(&mut self) {
        for a in (0..self.idx.len()).rev() {
            let s = self.walk.strides[a];
            self.idx[a] += 1;
            if self.idx[a] < self.walk.dims[a] {
                for (o, s) in self.off.iter_mut().zip(s) {
                    *o += s;
                }
                return;
            }
            let back = (self.walk.dims[a] - 1) as isize;
            for (o, s) in self.off.iter_mut().zip(s) {
                *o -= back * s;
            }
            self.idx[a] = 0;
        }
    }
}

/// `dst` (a row of `n` elements of `N` bytes) from `src` reading every `step`-th element
/// from element `at` on (backwards for negative steps).
fn strided_elems<const N: usize>(src: &[u8], at: usize, step: isize, dst: &mut [u8]) -> Result<()> {
    let n = dst.len() / N;
    let (out, _) = dst.as_chunks_mut::<N>();
    let stride = step.unsigned_abs();
    if n == 0 {
        return Ok(());
    }
    let span = (n - 1) * stride;
    if step > 0 {
        let (elems, _) = part(src, at * N, (at + span + 1) * N)?.as_chunks::<N>();
        for (o, e) in out.iter_mut().zip(elems.iter().step_by(stride)) {
            *o = *e;
        }
    } else {
        let lo = at.checked_sub(span).ok_or_else(|| {
            BackendError::Execution("a reversed data-movement read leaves its buffer".into())
        })?;
        let (elems, _) = part(src, lo * N, (at + 1) * N)?.as_chunks::<N>();
        for (o, e) in out.iter_mut().zip(elems.iter().rev().step_by(stride)) {
            *o = *e;
        }
    }
    Ok(())
}

/// One row of a strided copy: `dst.len() / esize` elements from element `at` of `src`,
/// `step` elements apart (1: one contiguous run; 0: one element repeated).
fn copy_row(src: &[u8], at: usize, step: isize, esize: usize, dst: &mut [u8]) -> Result<()> {
    match step {
        1 => dst.copy_from_slice(part(src, at * esize, at * esize + dst.len())?),
        0 => replicate(part(src, at * esize, (at + 1) * esize)?, dst),
        _ => match esize {
            1 => strided_elems::<1>(src, at, step, dst)?,
            2 => strided_elems::<2>(src, at, step, dst)?,
            4 => strided_elems::<4>(src, at, step, dst)?,
            8 => strided_elems::<8>(src, at, step, dst)?,
            _ => {
                for (j, o) in dst.chunks_exact_mut(esize).enumerate() {
                    let e = (at as isize + j as isize * step) as usize;
                    o.copy_from_slice(part(src, e * esize, (e + 1) * esize)?);
                }
            }
        },
    }
    Ok(())
}

/// The walk of a Slice of an input of `dims`.
fn slice_walk(desc: &SliceDesc, dims: &[usize]) -> Result<Walk<1>> {
    let ranges = desc.resolve(dims)?;
    let st = strides_of(dims);
    let mut base = 0isize;
    let mut out = Vec::with_capacity(dims.len());
    let mut strides = Vec::with_capacity(dims.len());
    for (r, &s) in ranges.iter().zip(&st) {
        out.push(r.len);
        if r.len > 0 {
            base += r.start as isize * s as isize;
        }
        // A single element read has no step (the step may be huge).
        let step = if r.len > 1 {
            r.step as isize * s as isize
        } else {
            0
        };
        strides.push([step]);
    }
    Walk::new(&out, &strides, [base])
}

/// Slice, Expand and Tile: every output row reads one operand at a fixed stride.
pub struct StridedWorkload {
    io: Io,
    walk: Walk<1>,
    esize: usize,
    threads: Threads,
}

impl StridedWorkload {
    /// A workload walking its input by `walk` (checked to stay inside the input).
    fn new(io: Io, walk: Walk<1>, esize: usize, threads: Threads) -> Result<Self> {
        let len = io
            .inputs
            .first()
            .and_then(|x| x.shape.num_elements().ok())
            .unwrap_or(0);
        if !walk.fits([len]) {
            return Err(io.error("the planned reads leave the input".into()));
        }
        Ok(StridedWorkload {
            io,
            walk,
            esize,
            threads,
        })
    }
}

impl Workload for StridedWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?.data;
        let y = output(outputs)?;
        let row = self.walk.inner * self.esize;
        if self.walk.rows() * row != y.data.len() {
            return Err(self
                .io
                .error("the output does not match the planned rows".into()));
        }
        let (walk, esize) = (&self.walk, self.esize);
        by_rows(&self.threads, y.data, row, esize, |first, block| {
            let mut cur = walk.cursor(first);
            for dst in block.chunks_exact_mut(row) {
                let [at] = cur.at();
                copy_row(x, at, walk.step[0], esize, dst)?;
                cur.advance();
            }
            Ok(())
        })
    }
}

/// Gather along an axis: each output row (the elements after the axis) is one input row.
pub struct GatherWorkload {
    io: Io,
    /// Product of the dims before the axis.
    outer: usize,
    /// The axis' size.
    len: usize,
    axis: usize,
    /// Bytes of the elements after the axis.
    row: usize,
    esize: usize,
    /// Constant indices, resolved at load (or why they are out of range).
    fixed: Option<Result<Vec<usize>>>,
    threads: Threads,
}

/// The positions `indices` (i32 or i64, negative counting from the end) pick on an axis of
/// `len`, every one checked.
fn positions(indices: &TensorView<'_>, axis: usize, len: usize) -> Result<Vec<usize>> {
    fn wrap_all<T: Copy + Into<i64>>(idx: &[T], axis: usize, len: usize) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(idx.len());
        for &i in idx {
            let i: i64 = i.into();
            let w = if i < 0 { i.wrapping_add(len as i64) } else { i };
            match usize::try_from(w) {
                Ok(p) if p < len => out.push(p),
                _ => {
                    return Err(BackendError::Execution(format!(
                        "Gather: index {i} is out of range for axis {axis} of size {len}"
                    )))
                }
            }
        }
        Ok(out)
    }
    match indices.info.dtype {
        DataType::I32 => wrap_all(indices.as_slice::<i32>()?, axis, len),
        DataType::I64 => wrap_all(indices.as_slice::<i64>()?, axis, len),
        other => Err(BackendError::Execution(format!(
            "Gather: indices of type {other} are not supported"
        ))),
    }
}

impl GatherWorkload {
    /// Plan it; constant indices are resolved now.
    fn new(io: Io, axis: i64, constant: Option<&Tensor>, threads: Threads) -> Result<Self> {
        let x = io.first_input()?;
        let dims = x.shape.dims();
        let a = normalize_axis(axis, dims.len())?;
        let esize = x.dtype.size();
        let row = dims[a + 1..].iter().product::<usize>() * esize;
        let fixed = constant.map(|t| positions(&t.view(), a, dims[a]));
        Ok(GatherWorkload {
            outer: dims[..a].iter().product(),
            len: dims[a],
            axis: a,
            row,
            esize,
            fixed,
            io,
            threads,
        })
    }
}

impl Workload for GatherWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?.data;
        let runtime;
        let pos: &[usize] = match &self.fixed {
            Some(Ok(p)) => p,
            Some(Err(e)) => return Err(self.io.error(e.to_string())),
            None => {
                runtime = positions(input(inputs, 1)?, self.axis, self.len)
                    .map_err(|e| self.io.error(e.to_string()))?;
                &runtime
            }
        };
        let y = output(outputs)?;
        let (row, len) = (self.row, self.len);
        if self.outer * pos.len() * row != y.data.len() || x.len() != self.outer * len * row {
            return Err(self
                .io
                .error("the buffers do not match the planned rows".into()));
        }
        if pos.is_empty() {
            return Ok(());
        }
        by_rows(&self.threads, y.data, row, self.esize, |first, block| {
            // Row `first` is index `k` of outer step `o`; walk on from there.
            let n = pos.len();
            let (mut o, mut k) = (first / n, first % n);
            for dst in block.chunks_exact_mut(row) {
                let from = (o * len + pos[k]) * row;
                k += 1;
                if k == n {
                    k = 0;
                    o += 1;
                }
                dst.copy_from_slice(part(x, from, from + row)?);
            }
            Ok(())
        })
    }
}

/// Where: each output element from X where the condition is true, else from Y.
pub struct WhereWorkload {
    io: Io,
    /// Operands: condition, X, Y.
    walk: Walk<3>,
    esize: usize,
    threads: Threads,
}

impl WhereWorkload {
    /// Plan it.
    fn new(io: Io, threads: Threads) -> Result<Self> {
        let y = io
            .outputs
            .first()
            .ok_or_else(|| BackendError::Other("Where: no output".into()))?;
        let out = y.shape.dims().to_vec();
        let esize = y.dtype.size();
        let st: Vec<Vec<usize>> = io
            .inputs
            .iter()
            .map(|i| broadcast_strides(i.shape.dims(), &out))
            .collect();
        let [c, a, b] = st.as_slice() else {
            return Err(BackendError::Other("Where takes three inputs".into()));
        };
        let strides: Vec<[isize; 3]> = (0..out.len())
            .map(|i| [c[i] as isize, a[i] as isize, b[i] as isize])
            .collect();
        let walk = Walk::new(&out, &strides, [0; 3])?;
        let lens = [0, 1, 2].map(|s| {
            io.inputs
                .get(s)
                .and_then(|i| i.shape.num_elements().ok())
                .unwrap_or(0)
        });
        if !walk.fits(lens) {
            return Err(io.error("the planned reads leave the inputs".into()));
        }
        Ok(WhereWorkload {
            io,
            walk,
            esize,
            threads,
        })
    }
}

/// One output row of Where for elements of `N` bytes: the condition, X and Y read from `at`
/// with strides `step` (0 or 1 for broadcasting inputs).
fn where_row<const N: usize>(
    [c, x, y]: [&[u8]; 3],
    at: [usize; 3],
    step: [isize; 3],
    dst: &mut [u8],
    select: Select<N>,
) -> Result<()> {
    let (out, _) = dst.as_chunks_mut::<N>();
    let n = out.len();
    let [sc, sx, sy] = step.map(|s| s.max(0) as usize);
    // Elements each operand's row spans, so that every index below stays inside it.
    let span = |k: usize| n.saturating_sub(1) * [sc, sx, sy][k] + 1;
    let c = part(c, at[0], at[0] + span(0))?;
    let (x, _) = part(x, at[1] * N, (at[1] + span(1)) * N)?.as_chunks::<N>();
    let (y, _) = part(y, at[2] * N, (at[2] + span(2)) * N)?.as_chunks::<N>();
    // The broadcast forms exporters write (a constant on one side, a mask repeated along
    // the row) run as selects compiled per tier.
    match (sc, sx, sy) {
        (1, 0 | 1, 0 | 1) => {
            // X's or Y's row is one element when its stride is 0 (see `span`).
            select(c, x, y, out);
        }
        (0, 0 | 1, 0 | 1) => {
            // One condition for the whole row: the row is X's or Y's.
            let (src, s) = if c.first().is_some_and(|&c| c != 0) {
                (x, sx)
            } else {
                (y, sy)
            };
            if s == 1 {
                let src = src
                    .get(..n)
                    .ok_or_else(|| BackendError::Execution("a Where row leaves X or Y".into()))?;
                out.copy_from_slice(src);
            } else {
                out.fill(*src.first().unwrap_or(&[0; N]));
            }
        }
        _ => {
            // Each index is below the span taken above (a stride of 0 reads element 0).
            for (j, o) in out.iter_mut().enumerate() {
                *o = if c[j * sc] != 0 { x[j * sx] } else { y[j * sy] };
            }
        }
    }
    Ok(())
}

/// Where's select over one row: each output element from X where `c` is not 0, else
/// from Y; X or Y may be one element, repeated. Written as a blend through a mask (not an
/// `if` on the element), so that the compiler cannot turn it into a gather.
macro_rules! select_body {
    ($name:ident, $int:ty, $n:literal) => {
        #[inline(always)]
        fn $name(c: &[u8], x: &[[u8; $n]], y: &[[u8; $n]], out: &mut [[u8; $n]]) {
            let n = out.len();
            let pick = |c: u8, x: $int, y: $int| {
                let m = <$int>::MIN.wrapping_sub((c != 0) as $int);
                ((x & m) | (y & !m)).to_ne_bytes()
            };
            let one = |v: &[[u8; $n]]| match v {
                [v0] if n > 1 => Some(<$int>::from_ne_bytes(*v0)),
                _ => None,
            };
            match (one(x), one(y)) {
                (Some(x0), Some(y0)) => {
                    for (o, &c) in out.iter_mut().zip(c) {
                        *o = pick(c, x0, y0);
                    }
                }
                (Some(x0), None) => {
                    for ((o, &c), y) in out.iter_mut().zip(c).zip(y) {
                        *o = pick(c, x0, <$int>::from_ne_bytes(*y));
                    }
                }
                (None, Some(y0)) => {
                    for ((o, &c), x) in out.iter_mut().zip(c).zip(x) {
                        *o = pick(c, <$int>::from_ne_bytes(*x), y0);
                    }
                }
                (None, None) => {
                    for (((o, &c), x), y) in out.iter_mut().zip(c).zip(x).zip(y) {
                        *o = pick(c, <$int>::from_ne_bytes(*x), <$int>::from_ne_bytes(*y));
                    }
                }
            }
        }
    };
}

select_body!(select_1_body, u8, 1);
select_body!(select_2_body, u16, 2);
select_body!(select_4_body, u32, 4);
select_body!(select_8_body, u64, 8);

backplane_cpu_kernels::multiversion! {
    /// [`select_1_body`]: bytes and booleans.
    fn select_1(c: &[u8], x: &[[u8; 1]], y: &[[u8; 1]], out: &mut [[u8; 1]]) => select_1_body;
}

backplane_cpu_kernels::multiversion! {
    /// [`select_2_body`]: 2-byte elements (f16, bf16, i16).
    fn select_2(c: &[u8], x: &[[u8; 2]], y: &[[u8; 2]], out: &mut [[u8; 2]]) => select_2_body;
}

backplane_cpu_kernels::multiversion! {
    /// [`select_4_body`]: 4-byte elements (f32, i32).
    fn select_4(c: &[u8], x: &[[u8; 4]], y: &[[u8; 4]], out: &mut [[u8; 4]]) => select_4_body;
}

backplane_cpu_kernels::multiversion! {
    /// [`select_8_body`]: 8-byte elements (f64, i64).
    fn select_8(c: &[u8], x: &[[u8; 8]], y: &[[u8; 8]], out: &mut [[u8; 8]]) => select_8_body;
}

/// The select of one row of `N`-byte elements ([`select_1`] .. [`select_8`]).
type Select<const N: usize> = fn(&[u8], &[[u8; N]], &[[u8; N]], &mut [[u8; N]]);

impl Workload for WhereWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let (c, a, b) = (input(inputs, 0)?.data, input(inputs, 1)?, input(inputs, 2)?);
        let out = output(outputs)?;
        let (x, y) = (a.data, b.data);
        let (walk, esize) = (&self.walk, self.esize);
        if walk.rows() * walk.inner * esize != out.data.len() {
            return Err(self
                .io
                .error("the output does not match the planned rows".into()));
        }
        let row = walk.inner * esize;
        by_rows(&self.threads, out.data, row, esize, |first, block| {
            let mut cur = walk.cursor(first);
            for dst in block.chunks_exact_mut(row) {
                let (at, s) = (cur.at(), walk.step);
                match esize {
                    1 => where_row::<1>([c, x, y], at, s, dst, select_1)?,
                    2 => where_row::<2>([c, x, y], at, s, dst, select_2)?,
                    4 => where_row::<4>([c, x, y], at, s, dst, select_4)?,
                    8 => where_row::<8>([c, x, y], at, s, dst, select_8)?,
                    _ => return Err(self.io.error(format!("Where of {esize}-byte elements"))),
                }
                cur.advance();
            }
            Ok(())
        })
    }
}

/// The bytes of Pad's constant `value` as one element of `dtype`, converted by the shared
/// Cast rules (as CpuRef does).
fn fill_bytes(dtype: DataType, value: f64) -> Result<Vec<u8>> {
    match dtype {
        DataType::I4 | DataType::U4 => Err(BackendError::Other(format!("Pad cannot fill {dtype}"))),
        _ => Ok(Scalar::Float(value).to_le_bytes(dtype)),
    }
}

/// Input position read by output position `out` of an axis of `len` padded by `begin` in
/// front, or `None` for the fill value (ONNX Pad's modes; negative pads crop).
fn pad_source(mode: PadMode, out: usize, begin: i64, len: usize) -> Option<usize> {
    let n = len as i64;
    let p = out as i64 - begin;
    if (0..n).contains(&p) {
        return Some(p as usize);
    }
    if n == 0 {
        return None;
    }
    let s = match mode {
        PadMode::Constant => return None,
        PadMode::Edge => p.clamp(0, n - 1),
        PadMode::Wrap => p.rem_euclid(n),
        PadMode::Reflect if n == 1 => 0,
        PadMode::Reflect => {
            let period = 2 * (n - 1);
            let m = p.rem_euclid(period);
            if m < n {
                m
            } else {
                period - m
            }
        }
    };
    Some(s as usize)
}

/// A piece of a padded row (positions in units).
#[derive(Debug, Clone, Copy)]
enum Piece {
    /// `n` fill units.
    Fill { n: usize },
    /// `n` units read from unit `from` of the input row on.
    Copy { from: usize, n: usize },
}

/// Pad: rows of the last padded axis, built from fill runs and input runs planned at load.
pub struct PadWorkload {
    io: Io,
    /// Bytes of one unit: an element times the unpadded axes after the last padded one.
    unit: usize,
    /// Output dims of the axes before the last padded one.
    outer: Vec<usize>,
    /// For each of those axes, the input position each output position reads (None: fill).
    sources: Vec<Vec<Option<usize>>>,
    /// Input strides of those axes, in units.
    in_strides: Vec<usize>,
    /// The pieces of one output row.
    pieces: Vec<Piece>,
    /// Bytes of one output row.
    row: usize,
    /// One element of fill.
    fill: Vec<u8>,
    esize: usize,
    threads: Threads,
}

impl PadWorkload {
    /// Plan it.
    fn new(io: Io, desc: &PadDesc, threads: Threads) -> Result<Self> {
        let x = io.first_input()?;
        let dims = x.shape.dims();
        let r = dims.len();
        let esize = x.dtype.size();
        let pad = |i: usize| desc.pads.get(i).copied().unwrap_or(0);
        // The unpadded axes at the end move as one unit.
        let last = (0..r).rev().find(|&a| pad(a) != 0 || pad(r + a) != 0);
        let keep = last.map_or(0, |a| a + 1);
        let unit_elems: usize = dims[keep..].iter().product();
        let unit = esize * unit_elems;
        let mut axes: Vec<(usize, usize, i64)> = (0..keep)
            .map(|a| {
                let out = (dims[a] as i64 + pad(a) + pad(r + a)).max(0) as usize;
                (dims[a], out, pad(a))
            })
            .collect();
        if axes.is_empty() {
            axes.push((1, 1, 0));
        }
        let (in_len, out_len, begin) = axes.pop().unwrap_or((1, 1, 0));
        let mut pieces: Vec<Piece> = Vec::new();
        for o in 0..out_len {
            let piece = match pad_source(desc.mode, o, begin, in_len) {
                None => match pieces.last_mut() {
                    Some(Piece::Fill { n }) => {
                        *n += 1;
                        continue;
                    }
                    _ => Piece::Fill { n: 1 },
                },
                Some(s) => match pieces.last_mut() {
                    Some(Piece::Copy { from, n }) if *from + *n == s => {
                        *n += 1;
                        continue;
                    }
                    _ => Piece::Copy { from: s, n: 1 },
                },
            };
            pieces.push(piece);
        }
        let in_dims: Vec<usize> = axes.iter().map(|a| a.0).collect();
        let mut in_strides = strides_of(&in_dims);
        in_strides.iter_mut().for_each(|s| *s *= in_len);
        let sources = axes
            .iter()
            .map(|&(len, out, begin)| {
                (0..out)
                    .map(|o| pad_source(desc.mode, o, begin, len))
                    .collect()
            })
            .collect();
        let fill = fill_bytes(x.dtype, desc.value)?;
        Ok(PadWorkload {
            unit,
            outer: axes.iter().map(|a| a.1).collect(),
            sources,
            in_strides,
            pieces,
            row: out_len * unit,
            fill,
            esize,
            io,
            threads,
        })
    }

    /// Output rows `first..` into `block`.
    fn rows(&self, x: &[u8], first: usize, block: &mut [u8]) -> Result<()> {
        let row = self.row;
        let mut idx = vec![0; self.outer.len()];
        let mut r = first;
        for a in (0..self.outer.len()).rev() {
            idx[a] = r % self.outer[a].max(1);
            r /= self.outer[a].max(1);
        }
        for dst in block.chunks_exact_mut(row) {
            let mut start = Some(0);
            for ((src, &i), &s) in self.sources.iter().zip(&idx).zip(&self.in_strides) {
                start = match (start, src.get(i).copied().flatten()) {
                    (Some(o), Some(p)) => Some(o + p * s),
                    _ => None,
                };
            }
            match start {
                None => replicate(&self.fill, dst),
                Some(base) => {
                    let mut at = 0;
                    for piece in &self.pieces {
                        match *piece {
                            Piece::Fill { n } => {
                                let n = n * self.unit;
                                replicate(&self.fill, &mut dst[at..at + n]);
                                at += n;
                            }
                            Piece::Copy { from, n } => {
                                let (from, n) = ((base + from) * self.unit, n * self.unit);
                                dst[at..at + n].copy_from_slice(part(x, from, from + n)?);
                                at += n;
                            }
                        }
                    }
                }
            }
            for a in (0..idx.len()).rev() {
                idx[a] += 1;
                if idx[a] < self.outer[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
        Ok(())
    }
}

impl Workload for PadWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?.data;
        let y = output(outputs)?;
        let rows: usize = self.outer.iter().product();
        if rows * self.row != y.data.len() {
            return Err(self
                .io
                .error("the output does not match the planned rows".into()));
        }
        let row = self.row;
        by_rows(&self.threads, y.data, row, self.esize, |first, block| {
            self.rows(x, first, block)
        })
    }
}

/// Split along an axis: each output takes its block of every input row.
pub struct SplitWorkload {
    io: Io,
    /// Product of the dims before the axis.
    outer: usize,
    /// Bytes of one input row (the axis and everything after it).
    in_row: usize,
    /// Per output: where its block starts in an input row, and its length (bytes).
    blocks: Vec<(usize, usize)>,
    esize: usize,
    threads: Threads,
}

impl SplitWorkload {
    /// Plan it.
    fn new(io: Io, axis: i64, threads: Threads) -> Result<Self> {
        let x = io.first_input()?;
        let dims = x.shape.dims();
        let a = normalize_axis(axis, dims.len())?;
        let esize = x.dtype.size();
        let after = dims[a + 1..].iter().product::<usize>() * esize;
        let mut at = 0;
        let blocks = io
            .outputs
            .iter()
            .map(|y| {
                let n = y.shape.dims().get(a).copied().unwrap_or(0) * after;
                at += n;
                (at - n, n)
            })
            .collect();
        Ok(SplitWorkload {
            outer: dims[..a].iter().product(),
            in_row: dims[a] * after,
            blocks,
            esize,
            io,
            threads,
        })
    }
}

impl Workload for SplitWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.io.check(inputs, outputs)?;
        let x = input(inputs, 0)?.data;
        if x.len() != self.outer * self.in_row {
            return Err(self
                .io
                .error("the input does not match the planned rows".into()));
        }
        for (y, &(start, n)) in outputs.iter_mut().zip(&self.blocks) {
            if y.data.len() != self.outer * n {
                return Err(self
                    .io
                    .error("an output does not match the planned rows".into()));
            }
            let in_row = self.in_row;
            by_rows(&self.threads, y.data, n, self.esize, |first, block| {
                for (o, dst) in block.chunks_exact_mut(n).enumerate() {
                    let from = (first + o) * in_row + start;
                    dst.copy_from_slice(part(x, from, from + n)?);
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

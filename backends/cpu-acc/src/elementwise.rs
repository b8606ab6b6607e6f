//! Elementwise kernels: unary functions and binary arithmetic with numpy broadcasting.
//!
//! Broadcasting is reduced to runs: the output's axes are merged wherever both inputs walk
//! them contiguously (or both stay put), so the innermost run is one of four vectorized loops:
//! vector∘vector, vector∘scalar, scalar∘vector or a fill.

use crate::act::Activation;
use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
use backplane_core::ops::{BinaryExtOp, BinaryOp};
use backplane_core::shape::broadcast_strides;

/// Elements below which elementwise work stays on one thread.
const PARALLEL_MIN: usize = 1 << 15;

/// The binary functions CpuAcc runs (f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bin {
    /// a + b.
    Add,
    /// a - b.
    Sub,
    /// a * b.
    Mul,
    /// a / b.
    Div,
    /// max(a, b), NaN if either is NaN.
    Max,
    /// min(a, b), NaN if either is NaN.
    Min,
    /// a if a >= 0 else a·b (PRelu, b the slope).
    PRelu,
}

impl Bin {
    /// The f32 function of a binary op (Pow has its own workloads, `crate::pow`).
    pub fn from_op(op: BinaryOp) -> Option<Self> {
        Some(match op {
            BinaryOp::Add => Bin::Add,
            BinaryOp::Sub => Bin::Sub,
            BinaryOp::Mul => Bin::Mul,
            BinaryOp::Div => Bin::Div,
            BinaryOp::Max => Bin::Max,
            BinaryOp::Min => Bin::Min,
            BinaryOp::Pow => return None,
        })
    }

    /// The f32 function of a binary op beyond the core set, if it has one: PRelu (the
    /// predicates are `crate::predicate`'s; bitwise and Mod stay on CpuRef).
    pub fn from_ext(op: BinaryExtOp) -> Option<Self> {
        match op {
            BinaryExtOp::PRelu => Some(Bin::PRelu),
            // Predicates (bool results), bitwise and integer ops: not f32 functions.
            BinaryExtOp::Equal
            | BinaryExtOp::Less
            | BinaryExtOp::LessOrEqual
            | BinaryExtOp::Greater
            | BinaryExtOp::GreaterOrEqual
            | BinaryExtOp::And
            | BinaryExtOp::Or
            | BinaryExtOp::Xor
            | BinaryExtOp::BitwiseAnd
            | BinaryExtOp::BitwiseOr
            | BinaryExtOp::BitwiseXor
            | BinaryExtOp::BitShiftLeft
            | BinaryExtOp::BitShiftRight
            | BinaryExtOp::Mod
            | BinaryExtOp::Fmod => None,
        }
    }
}

macro_rules! per_bin {
    ($op:expr, $f:ident) => {
        match $op {
            Bin::Add => $f!(|a: f32, b: f32| a + b),
            Bin::Sub => $f!(|a: f32, b: f32| a - b),
            Bin::Mul => $f!(|a: f32, b: f32| a * b),
            Bin::Div => $f!(|a: f32, b: f32| a / b),
            Bin::Max => $f!(|a: f32, b: f32| {
                let m = if a >= b { a } else { b };
                if a.is_nan() | b.is_nan() {
                    f32::NAN
                } else {
                    m
                }
            }),
            Bin::Min => $f!(|a: f32, b: f32| {
                let m = if a <= b { a } else { b };
                if a.is_nan() | b.is_nan() {
                    f32::NAN
                } else {
                    m
                }
            }),
            Bin::PRelu => $f!(|a: f32, b: f32| if a < 0.0 { a * b } else { a }),
        }
    };
}

/// `y[i] = op(a[i], b[i])`.
#[inline(always)]
pub fn binary_vv_body(op: Bin, a: &[f32], b: &[f32], y: &mut [f32]) {
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            for ((o, &p), &q) in y.iter_mut().zip(a).zip(b) {
                *o = f(p, q);
            }
        }};
    }
    per_bin!(op, run)
}

/// `y[i] = op(a[i], s)`.
#[inline(always)]
pub fn binary_vs_body(op: Bin, a: &[f32], s: f32, y: &mut [f32]) {
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            for (o, &p) in y.iter_mut().zip(a) {
                *o = f(p, s);
            }
        }};
    }
    per_bin!(op, run)
}

/// `y[i] = op(s, b[i])`.
#[inline(always)]
pub fn binary_sv_body(op: Bin, s: f32, b: &[f32], y: &mut [f32]) {
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            for (o, &q) in y.iter_mut().zip(b) {
                *o = f(s, q);
            }
        }};
    }
    per_bin!(op, run)
}

/// `y = act(x)`, in parallel for large tensors.
pub fn unary(th: &Threads, act: Activation, x: &[f32], y: &mut [f32]) -> Result<()> {
    let chunk = if x.len() < PARALLEL_MIN {
        x.len()
    } else {
        th.chunk_size(x.len(), 4096, 64)
    };
    th.chunks(y, chunk, |i, yc| {
        let s = i * chunk;
        simd::unary(act, &x[s..s + yc.len()], yc);
        Ok(())
    })
}

/// The broadcast plan of one binary op: merged output axes with each input's strides; the
/// last axis is the innermost run.
#[derive(Debug, Clone)]
pub struct BroadcastPlan {
    dims: Vec<usize>,
    sa: Vec<usize>,
    sb: Vec<usize>,
}

impl BroadcastPlan {
    /// The plan of a layer's first two inputs into its first output.
    pub fn for_layer(io: &crate::io::Io) -> Result<Self> {
        let dims = |i: usize, v: &[backplane_core::TensorInfo]| {
            v.get(i)
                .map(|t| t.shape.dims().to_vec())
                .ok_or_else(|| BackendError::Other(format!("{}: missing tensor", io.layer)))
        };
        Ok(BroadcastPlan::new(
            &dims(0, &io.inputs)?,
            &dims(1, &io.inputs)?,
            &dims(0, &io.outputs)?,
        ))
    }

    /// Plan `a` (shape `ad`) ∘ `b` (shape `bd`) into the output shape `yd`.
    pub fn new(ad: &[usize], bd: &[usize], yd: &[usize]) -> Self {
        let sa_full = broadcast_strides(ad, yd);
        let sb_full = broadcast_strides(bd, yd);
        let mut dims: Vec<usize> = Vec::new();
        let mut sa: Vec<usize> = Vec::new();
        let mut sb: Vec<usize> = Vec::new();
        for i in 0..yd.len() {
            if yd[i] == 1 {
                continue;
            }
            if let (Some(d), Some(&pa), Some(&pb)) = (dims.last_mut(), sa.last(), sb.last()) {
                // Merge into the previous axis when both inputs continue it seamlessly.
                if pa == sa_full[i] * yd[i] && pb == sb_full[i] * yd[i] {
                    *d *= yd[i];
                    if let (Some(a), Some(b)) = (sa.last_mut(), sb.last_mut()) {
                        *a = sa_full[i];
                        *b = sb_full[i];
                    }
                    continue;
                }
            }
            dims.push(yd[i]);
            sa.push(sa_full[i]);
            sb.push(sb_full[i]);
        }
        if dims.is_empty() {
            dims.push(1);
            sa.push(0);
            sb.push(0);
        }
        BroadcastPlan { dims, sa, sb }
    }

    fn run_len(&self) -> usize {
        self.dims.last().copied().unwrap_or(1)
    }

    /// Input offsets of output run `row`.
    fn offsets(&self, mut row: usize) -> (usize, usize) {
        let (mut oa, mut ob) = (0, 0);
        for i in (0..self.dims.len() - 1).rev() {
            let idx = row % self.dims[i];
            row /= self.dims[i];
            oa += idx * self.sa[i];
            ob += idx * self.sb[i];
        }
        (oa, ob)
    }
}

/// `y = op(a, b)` with broadcasting, following `plan`.
pub fn binary(
    th: &Threads,
    op: Bin,
    plan: &BroadcastPlan,
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
) -> Result<()> {
    let run = plan.run_len();
    if run == 0 || y.is_empty() {
        return Ok(());
    }
    let rows = y.len() / run;
    let rows_per = if y.len() < PARALLEL_MIN {
        rows
    } else {
        th.chunk_size(rows, (4096 / run).max(1), 1)
    };
    let last = plan.dims.len() - 1;
    let (ia, ib) = (plan.sa[last], plan.sb[last]);
    th.chunks(y, rows_per * run, |ci, yc| {
        for (r, out) in yc.chunks_mut(run).enumerate() {
            let (oa, ob) = plan.offsets(ci * rows_per + r);
            match (ia, ib) {
                (0, 0) => {
                    simd::binary_vs(op, &a[oa..oa + 1], b[ob], &mut out[..1]);
                    let v = out[0];
                    out.fill(v);
                }
                (0, _) => simd::binary_sv(op, a[oa], &b[ob..ob + run], out),
                (_, 0) => simd::binary_vs(op, &a[oa..oa + run], b[ob], out),
                _ => simd::binary_vv(op, &a[oa..oa + run], &b[ob..ob + run], out),
            }
        }
        Ok(())
    })
}

/// `y = f(a, b)` with broadcasting following `plan`, for any element types: the typed
/// (integer, comparison, logical) ops' walk. Each run is one of the three plain loops
/// (vector∘vector, vector∘scalar, scalar∘vector), which the compiler vectorizes per type.
/// The buffers must match the descriptions the plan was made from (checked by `Io`).
pub fn zip_broadcast<A, B, Y, F>(
    th: &Threads,
    plan: &BroadcastPlan,
    a: &[A],
    b: &[B],
    y: &mut [Y],
    f: F,
) -> Result<()>
where
    A: Copy + Sync,
    B: Copy + Sync,
    Y: Send,
    F: Fn(A, B) -> Y + Sync + Send,
{
    let run = plan.run_len();
    if run == 0 || y.is_empty() {
        return Ok(());
    }
    let rows = y.len() / run;
    let rows_per = if y.len() < PARALLEL_MIN {
        rows
    } else {
        th.chunk_size(rows, (4096 / run).max(1), 1)
    };
    let last = plan.dims.len() - 1;
    let (ia, ib) = (plan.sa[last], plan.sb[last]);
    let short = || BackendError::Execution("a broadcast read leaves its buffer".into());
    th.chunks(y, rows_per * run, |ci, yc| {
        for (r, out) in yc.chunks_mut(run).enumerate() {
            let (oa, ob) = plan.offsets(ci * rows_per + r);
            let n = out.len();
            match (ia, ib) {
                (0, 0) => {
                    let (p, q) = (*a.get(oa).ok_or_else(short)?, *b.get(ob).ok_or_else(short)?);
                    for o in out.iter_mut() {
                        *o = f(p, q);
                    }
                }
                (0, _) => {
                    let p = *a.get(oa).ok_or_else(short)?;
                    let qs = b.get(ob..ob + n).ok_or_else(short)?;
                    for (o, &q) in out.iter_mut().zip(qs) {
                        *o = f(p, q);
                    }
                }
                (_, 0) => {
                    let ps = a.get(oa..oa + n).ok_or_else(short)?;
                    let q = *b.get(ob).ok_or_else(short)?;
                    for (o, &p) in out.iter_mut().zip(ps) {
                        *o = f(p, q);
                    }
                }
                _ => {
                    let ps = a.get(oa..oa + n).ok_or_else(short)?;
                    let qs = b.get(ob..ob + n).ok_or_else(short)?;
                    for ((o, &p), &q) in out.iter_mut().zip(ps).zip(qs) {
                        *o = f(p, q);
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_merge_axes() {
        let p = BroadcastPlan::new(&[1, 8, 5, 5], &[1, 8, 1, 1], &[1, 8, 5, 5]);
        assert_eq!(p.dims, vec![8, 25]);
        assert_eq!((p.sa.clone(), p.sb.clone()), (vec![25, 1], vec![1, 0]));
        let p = BroadcastPlan::new(&[4, 3], &[3], &[4, 3]);
        assert_eq!(p.dims, vec![4, 3]);
        let p = BroadcastPlan::new(&[4, 3], &[4, 3], &[4, 3]);
        assert_eq!(p.dims, vec![12]);
    }
}

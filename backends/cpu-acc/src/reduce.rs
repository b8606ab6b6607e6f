//! Reductions over a contiguous block of axes (f32 data, f64 accumulation like CpuRef).

use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::Result;
use backplane_core::ops::{ReduceDesc, ReduceKind};

/// What one pass over the values accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// Σ x.
    Sum,
    /// Σ x².
    SumSquare,
    /// Σ |x|.
    L1,
    /// max x (NaN if any).
    Max,
    /// min x (NaN if any).
    Min,
}

/// How a reduction kind maps onto a run kind plus a final step.
fn run_kind(kind: ReduceKind) -> Option<RunKind> {
    Some(match kind {
        ReduceKind::Sum | ReduceKind::Mean => RunKind::Sum,
        ReduceKind::SumSquare | ReduceKind::L2 => RunKind::SumSquare,
        ReduceKind::L1 => RunKind::L1,
        ReduceKind::Max => RunKind::Max,
        ReduceKind::Min => RunKind::Min,
        _ => return None,
    })
}

fn init(kind: RunKind) -> f64 {
    match kind {
        RunKind::Max => f64::NEG_INFINITY,
        RunKind::Min => f64::INFINITY,
        _ => 0.0,
    }
}

#[inline(always)]
fn combine(kind: RunKind, acc: f64, v: f32) -> f64 {
    combine64(kind, acc, f64::from(v))
}

#[inline(always)]
fn combine64(kind: RunKind, acc: f64, v: f64) -> f64 {
    match kind {
        RunKind::Sum => acc + v,
        RunKind::SumSquare => v.mul_add(v, acc),
        RunKind::L1 => acc + v.abs(),
        RunKind::Max => {
            if acc.is_nan() || acc >= v {
                acc
            } else {
                v
            }
        }
        RunKind::Min => {
            if acc.is_nan() || acc <= v {
                acc
            } else {
                v
            }
        }
    }
}

/// Reduce one contiguous run (four independent accumulators).
#[inline(always)]
pub fn reduce_run_body(kind: RunKind, x: &[f32]) -> f64 {
    let mut acc = [init(kind); 4];
    let chunks = x.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = combine(kind, *a, v);
        }
    }
    let mut r = init(kind);
    for &a in &acc {
        r = match kind {
            RunKind::Max | RunKind::Min => {
                if a.is_nan() {
                    a
                } else {
                    combine64(kind, r, a)
                }
            }
            _ => r + a,
        };
    }
    for &v in rest {
        r = combine(kind, r, v);
    }
    r
}

/// `acc[i] = combine(acc[i], x[i])`: one step of a max/min reduction over an outer axis
/// (exact in f32; sums accumulate in f64 instead, see [`reduce`]).
#[inline(always)]
pub fn reduce_accumulate_body(kind: RunKind, acc: &mut [f32], x: &[f32]) {
    // Max/min are exact in f32; only those use this path (sums go through f64 runs).
    for (a, &v) in acc.iter_mut().zip(x) {
        *a = match kind {
            RunKind::Max => {
                if a.is_nan() || *a >= v {
                    *a
                } else {
                    v
                }
            }
            RunKind::Min => {
                if a.is_nan() || *a <= v {
                    *a
                } else {
                    v
                }
            }
            RunKind::Sum => *a + v,
            RunKind::SumSquare => v.mul_add(v, *a),
            RunKind::L1 => *a + v.abs(),
        };
    }
}

/// A planned reduction: `outer × red × inner`, reducing the middle.
#[derive(Debug, Clone)]
pub struct ReducePlan {
    kind: ReduceKind,
    outer: usize,
    red: usize,
    inner: usize,
}

impl ReducePlan {
    /// Plan a reduction of `dims`, or say why CpuAcc does not run it.
    pub fn new(desc: &ReduceDesc, dims: &[usize]) -> std::result::Result<Self, String> {
        run_kind(desc.kind)
            .ok_or_else(|| format!("CpuAcc does not implement {}", desc.kind.name()))?;
        let mask = desc.reduced_mask(dims.len()).map_err(|e| e.to_string())?;
        let reduced: Vec<usize> = (0..dims.len())
            .filter(|&i| mask[i] && dims[i] != 1)
            .collect();
        let (a0, a1) = match (reduced.first(), reduced.last()) {
            (Some(&a), Some(&b)) => (a, b + 1),
            // Every reduced axis has size 1 (a classifier's mean over a 1×1 image): each
            // output reduces its one element, the same runs with `red` 1.
            _ if mask.iter().any(|&m| m) => (dims.len(), dims.len()),
            _ => return Err("CpuAcc only runs reductions over at least one axis".into()),
        };
        if (a0..a1).any(|i| !mask[i] && dims[i] != 1) {
            return Err("CpuAcc only reduces a contiguous block of axes".into());
        }
        let p = |d: &[usize]| d.iter().product::<usize>();
        let red = p(&dims[a0..a1]);
        if red == 0 {
            return Err("CpuAcc does not reduce empty axes".into());
        }
        Ok(ReducePlan {
            kind: desc.kind,
            outer: p(&dims[..a0]),
            red,
            inner: p(&dims[a1..]),
        })
    }

    fn finish(&self, v: f64) -> f32 {
        (match self.kind {
            ReduceKind::Mean => v / self.red as f64,
            ReduceKind::L2 => v.sqrt(),
            _ => v,
        }) as f32
    }
}

/// Least input (floats) whose reduction over middle axes [`reduce`] shares between threads.
/// Each thread reads every pixel for its part of the channels, about half of them from the
/// other core's cache (the layer before split the pixels), so a squeeze-excite block's mean
/// (MobileNetV3's: 30 to 130 thousand values) took no less time on two threads than on one,
/// and the hand-off on top.
const SPLIT_FLOATS: usize = 1 << 17;

/// Outputs per part of one image's `inner` outputs on `threads` threads: all of them on one
/// thread or when they are few, else the largest even split into at least two parts per
/// thread (a divisor of `inner`, so no part spans two images) whose parts keep 16 outputs
/// or more.
fn inner_part(inner: usize, threads: usize) -> usize {
    if threads <= 1 {
        return inner.max(1);
    }
    (2..=2 * threads)
        .rev()
        .filter(|&p| inner.is_multiple_of(p) && inner / p >= 16)
        .map(|p| inner / p)
        .next()
        .unwrap_or(inner)
        .max(1)
}

/// `acc[i] = combine(acc[i], row[i])` in f64 for every row of `x` (rows `stride` apart, the
/// last one possibly just `acc.len()` long), in row order: each element's additions in the
/// order of a row-by-row loop, so the results are the same bits.
#[inline(always)]
pub fn reduce_rows_f64_body(kind: RunKind, acc: &mut [f64], x: &[f32], stride: usize) {
    let n = acc.len();
    let mut s = 0;
    while s + n <= x.len() {
        let pairs = acc.iter_mut().zip(&x[s..s + n]);
        // The kind chosen outside the loop, so a sum (a mean over pixels) vectorizes.
        match kind {
            RunKind::Sum => pairs.for_each(|(a, &v)| *a += f64::from(v)),
            _ => pairs.for_each(|(a, &v)| *a = combine(kind, *a, v)),
        }
        s += stride.max(1);
    }
}

/// Run a planned reduction.
pub fn reduce(th: &Threads, plan: &ReducePlan, x: &[f32], y: &mut [f32]) -> Result<()> {
    let kind = run_kind(plan.kind).unwrap_or(RunKind::Sum);
    let (red, inner) = (plan.red, plan.inner);
    if inner == 1 {
        let per = th.chunk_size(plan.outer, (8192 / red).max(1), 1);
        return th.chunks(y, per, |ci, yc| {
            for (i, o) in yc.iter_mut().enumerate() {
                let r = ci * per + i;
                *o = plan.finish(simd::reduce_run(kind, &x[r * red..(r + 1) * red]));
            }
            Ok(())
        });
    }
    // Each image's `inner` outputs in parts (whole vectors of channels where `inner` allows),
    // so that a channels-last mean over the pixels of one image still uses every thread;
    // a small input (a squeeze-excite block's mean) on the calling thread alone.
    let threads = match plan.outer * red * inner < SPLIT_FLOATS {
        true => 1,
        false => th.count(),
    };
    let part = inner_part(inner, threads);
    th.chunks(y, part, |o, yc| {
        let (b, c0) = ((o * part) / inner, (o * part) % inner);
        let base = b * red * inner + c0;
        let inner_len = yc.len();
        match kind {
            RunKind::Max | RunKind::Min => {
                yc.copy_from_slice(&x[base..base + inner_len]);
                for r in 1..red {
                    let s = base + r * inner;
                    simd::reduce_accumulate(kind, yc, &x[s..s + inner_len]);
                }
                for v in yc.iter_mut() {
                    *v = plan.finish(f64::from(*v));
                }
            }
            _ => {
                let mut acc = vec![0f64; inner_len];
                let rows = &x[base..base + (red - 1) * inner + inner_len];
                simd::reduce_rows_f64(kind, &mut acc, rows, inner);
                for (v, &a) in yc.iter_mut().zip(&acc) {
                    *v = plan.finish(a);
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channels-last mean or max over the pixels (one image, `red` pixels of `inner`
    /// channels) gives the same bits on 1, 2 and 3 threads, below [`SPLIT_FLOATS`] (the
    /// calling thread alone) and above it (channel parts shared out), against a plain loop
    /// (f64 sums); an infinity comes through as it would there.
    #[test]
    fn pixel_means_match_a_plain_loop_on_any_thread_count() {
        for &(red, inner) in &[(1, 1), (49, 3), (49, 17), (196, 672), (784, 72), (3136, 96)] {
            let x: Vec<f32> = (0..red * inner)
                .map(|i| match i % 1009 {
                    500 => f32::INFINITY,
                    _ => ((i * 37 % 101) as f32 - 50.0) * 0.03,
                })
                .collect();
            for kind in [ReduceKind::Mean, ReduceKind::Max] {
                let plan = ReducePlan {
                    kind,
                    outer: 1,
                    red,
                    inner,
                };
                let want: Vec<f32> = (0..inner)
                    .map(|c| {
                        let col = (0..red).map(|r| x[r * inner + c]);
                        match kind {
                            ReduceKind::Max => col.fold(f32::NEG_INFINITY, f32::max),
                            _ => (col.map(f64::from).sum::<f64>() / red as f64) as f32,
                        }
                    })
                    .collect();
                for t in [1, 2, 3] {
                    let th = Threads::new(t).unwrap();
                    let mut y = vec![0f32; inner];
                    reduce(&th, &plan, &x, &mut y).unwrap();
                    for (c, (g, w)) in y.iter().zip(&want).enumerate() {
                        let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                        assert!(
                            same,
                            "{kind:?} {red}x{inner} {t} threads, channel {c}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

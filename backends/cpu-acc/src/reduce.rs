//! Reductions over a contiguous block of axes (f32 data, f64 accumulation like CpuRef).

use crate::simd;
use crate::threads::Threads;
use backplane_backend_api::{BackendError, Result};
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

/// Least input (floats) whose reduction over middle axes [`reduce`] shares between threads:
/// sums by parts of the pixels ([`pixel_sums`]), a max or min by parts of the channels. Below
/// it the calling thread runs it alone, in one pass: on two threads a squeeze-excite block's
/// pool (MobileNetV3's: 30 to 130 thousand values) took no less time than on one, the
/// hand-off on top (and a split of the channels, each thread reading every pixel, half of
/// them from the other core's cache, took longer still).
const SPLIT_FLOATS: usize = 1 << 17;

/// Least floats per pixel part of [`pixel_sums`].
const PART_MIN_FLOATS: usize = 1 << 15;

/// Most pixel parts of [`pixel_sums`] per image (enough for even shares on a few threads).
const MAX_PIXEL_PARTS: usize = 8;

/// Pixels per part when `red` pixels of `inner` channels are summed by [`pixel_sums`]: set
/// by the sizes alone, never by the thread count, so every thread count adds the same
/// partial sums in the same order (the same bits).
fn pixels_per_part(red: usize, inner: usize) -> usize {
    let parts = (red * inner / PART_MIN_FLOATS).clamp(1, MAX_PIXEL_PARTS.min(red.max(1)));
    red.div_ceil(parts).max(1)
}

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
    let large = plan.outer * red * inner >= SPLIT_FLOATS;
    if large && !matches!(kind, RunKind::Max | RunKind::Min) {
        return pixel_sums(th, plan, kind, x, y);
    }
    // Each image's `inner` outputs in parts (whole vectors of channels where `inner` allows),
    // so that a channels-last max over the pixels of one image still uses every thread;
    // a small input on the calling thread alone.
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

/// A sum over middle axes (a channels-last mean over the pixels: a squeeze-excite block's
/// pool, a classifier's) by parts of [`pixels_per_part`] consecutive pixels, each summing all
/// `inner` channels of its pixels into its own f64 row, then the rows added in part order.
/// The parts are shared out in order (`Threads::chunks`), so on two threads each sums the
/// pixels the layer before computed on it (that layer split the pixels too), where a split
/// of the channels had each thread read every pixel, half of them from the other core's
/// cache, and took several times as long as one thread.
fn pixel_sums(
    th: &Threads,
    plan: &ReducePlan,
    kind: RunKind,
    x: &[f32],
    y: &mut [f32],
) -> Result<()> {
    let (outer, red, inner) = (plan.outer, plan.red, plan.inner);
    let per = pixels_per_part(red, inner);
    let parts = red.div_ceil(per).max(1);
    let len = outer * parts * inner;
    if x.len() < outer * red * inner || y.len() < outer * inner {
        return Err(BackendError::Execution(
            "a reduction's buffers are too short".into(),
        ));
    }
    let mut acc: Vec<f64> = Vec::new();
    acc.try_reserve_exact(len)
        .map_err(|_| BackendError::Execution("out of memory for a reduction".into()))?;
    acc.resize(len, 0.0);
    th.chunks(&mut acc, inner.max(1), |i, row| {
        let (b, p) = (i / parts, i % parts);
        let (r0, r1) = (p * per, ((p + 1) * per).min(red));
        let base = (b * red + r0) * inner;
        simd::reduce_rows_f64(kind, row, &x[base..base + (r1 - r0) * inner], inner);
        Ok(())
    })?;
    for (b, yb) in y[..outer * inner].chunks_exact_mut(inner).enumerate() {
        // The parts' rows added onto the first, in part order.
        let (total, rest) = acc[b * parts * inner..(b + 1) * parts * inner].split_at_mut(inner);
        for row in rest.chunks_exact(inner) {
            total.iter_mut().zip(row).for_each(|(t, &s)| *t += s);
        }
        for (v, &t) in yb.iter_mut().zip(total.iter()) {
            *v = plan.finish(t);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums over the pixels by [`pixel_sums`]' parts (batches of 1 to 3 images, odd pixel
    /// and channel counts, one part and two to eight; the last three large enough
    /// that [`reduce`] takes them): the same bits on 1, 2 and 3 threads, and within an f32
    /// rounding of a plain f64 loop (the values span eight decades, so the partial sums are
    /// not exact).
    #[test]
    fn pixel_sums_are_the_same_bits_on_any_thread_count() {
        let shapes = [
            (1, 1, 5),
            (2, 7, 3),
            (3, 97, 13),
            (1, 8209, 17),
            (2, 2053, 37),
            (1, 4099, 64),
        ];
        for &(outer, red, inner) in &shapes {
            let x: Vec<f32> = (0..outer * red * inner)
                .map(|i| {
                    let m = ((i * 7919) % 1013) as f32 / 1013.0 - 0.37;
                    m * 10f32.powi((i % 9) as i32 - 4)
                })
                .collect();
            let kinds = [
                ReduceKind::Mean,
                ReduceKind::Sum,
                ReduceKind::L1,
                ReduceKind::L2,
                ReduceKind::SumSquare,
            ];
            for kind in kinds {
                let plan = ReducePlan {
                    kind,
                    outer,
                    red,
                    inner,
                };
                let rk = run_kind(kind).unwrap();
                let want: Vec<f32> = (0..outer * inner)
                    .map(|o| {
                        let (b, c) = (o / inner, o % inner);
                        let col = (0..red).map(|r| x[(b * red + r) * inner + c]);
                        plan.finish(col.fold(0.0, |a, v| combine(rk, a, v)))
                    })
                    .collect();
                let mut first: Option<Vec<f32>> = None;
                for t in [1, 2, 3] {
                    let th = Threads::new(t).unwrap();
                    let mut y = vec![f32::NAN; outer * inner];
                    match outer * red * inner >= SPLIT_FLOATS {
                        true => reduce(&th, &plan, &x, &mut y).unwrap(),
                        false => pixel_sums(&th, &plan, rk, &x, &mut y).unwrap(),
                    }
                    for (o, (g, w)) in y.iter().zip(&want).enumerate() {
                        let close = (g - w).abs() <= w.abs() * 2.5e-7;
                        assert!(
                            close,
                            "{kind:?} {outer}x{red}x{inner} {t}t, output {o}: {g} vs {w}"
                        );
                    }
                    match &first {
                        Some(f) => assert!(
                            f.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{kind:?} {outer}x{red}x{inner}: {t} threads differ from one"
                        ),
                        None => first = Some(y),
                    }
                }
            }
        }
    }

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

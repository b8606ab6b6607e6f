//! Operators along one axis: TopK, ArgMax/ArgMin, CumSum, LogSoftmax and Hardmax; and the
//! per-channel normalizations InstanceNormalization and LRN (statistics in f64).

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::product;
use crate::Result;
use backplane_core::ops::{ArgReduceDesc, TopKDesc};
use backplane_core::shape::normalize_axis;
use backplane_core::{TensorView, TensorViewMut};
use std::cmp::Ordering;

/// (outer, len, inner) of `dims` around axis `a`.
fn split_at(dims: &[usize], a: usize) -> (usize, usize, usize) {
    (product(&dims[..a]), dims[a], product(&dims[a + 1..]))
}

/// Total order for sorting: NaN above everything (as numpy), integers exactly.
fn order(a: Scalar, b: Scalar) -> Ordering {
    match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => x.cmp(&y),
        _ => {
            let (x, y) = (a.to_f64(), b.to_f64());
            match (x.is_nan(), y.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            }
        }
    }
}

/// TopK: values and indices, sorted (largest first, or smallest first); ties keep the lower
/// index first.
pub(crate) fn top_k(
    desc: &TopKDesc,
    x: &TensorView<'_>,
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let a = normalize_axis(desc.axis, x.dims().len())?;
    let (outer, len, inner) = split_at(x.dims(), a);
    let xs = read_scalars(x)?;
    let k = desc.k;
    let mut values = vec![Scalar::Int(0); outer * k * inner];
    let mut indices = vec![Scalar::Int(0); outer * k * inner];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let mut order_idx: Vec<usize> = (0..len).collect();
            order_idx.sort_by(|&p, &q| {
                let c = order(xs[at(p)], xs[at(q)]);
                let c = if desc.largest { c.reverse() } else { c };
                c.then(p.cmp(&q))
            });
            for (r, &j) in order_idx.iter().take(k).enumerate() {
                let to = (o * k + r) * inner + i;
                values[to] = xs[at(j)];
                indices[to] = Scalar::Int(j as i64);
            }
        }
    }
    let [v, ix] = outputs else {
        return Err(backplane_backend_api::BackendError::Other(
            "TopK needs two output buffers".into(),
        ));
    };
    write_scalars(v, &values)?;
    write_scalars(ix, &indices)
}

/// ArgMax / ArgMin.
pub(crate) fn arg_reduce(
    desc: &ArgReduceDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let a = normalize_axis(desc.axis, x.dims().len())?;
    let (outer, len, inner) = split_at(x.dims(), a);
    let xs = read_scalars(x)?;
    let ys = y.as_mut_slice::<i64>()?;
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let mut best = 0usize;
            for j in 1..len {
                let c = order(xs[at(j)], xs[at(best)]);
                let better = if desc.max {
                    c == Ordering::Greater
                } else {
                    c == Ordering::Less
                };
                if better || (desc.select_last_index && c == Ordering::Equal) {
                    best = j;
                }
            }
            ys[o * inner + i] = best as i64;
        }
    }
    Ok(())
}

/// CumSum along an axis, optionally exclusive and/or reversed.
pub(crate) fn cum_sum(
    axis: i64,
    exclusive: bool,
    reverse: bool,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let a = normalize_axis(axis, x.dims().len())?;
    let (outer, len, inner) = split_at(x.dims(), a);
    let xs = read_scalars(x)?;
    let mut out = xs.clone();
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let mut acc = Scalar::Int(0);
            for step in 0..len {
                let j = if reverse { len - 1 - step } else { step };
                let v = xs[at(j)];
                let next = match (acc, v) {
                    (Scalar::Int(s), Scalar::Int(t)) => Scalar::Int(s.wrapping_add(t)),
                    (s, t) => Scalar::Float(s.to_f64() + t.to_f64()),
                };
                out[at(j)] = if exclusive { acc } else { next };
                acc = next;
            }
        }
    }
    write_scalars(y, &out)
}

/// LogSoftmax along an axis: x - max - ln(sum(exp(x - max))).
pub(crate) fn log_softmax(axis: i64, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let a = normalize_axis(axis, x.dims().len())?;
    let (outer, len, inner) = split_at(x.dims(), a);
    let xs: Vec<f64> = x.to_f64_vec();
    let mut out = vec![Scalar::Float(0.0); xs.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let max = (0..len)
                .map(|j| xs[at(j)])
                .fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..len).map(|j| (xs[at(j)] - max).exp()).sum();
            let lse = max + sum.ln();
            for j in 0..len {
                out[at(j)] = Scalar::Float(xs[at(j)] - lse);
            }
        }
    }
    write_scalars(y, &out)
}

/// Hardmax: 1 at the first maximum along the axis, 0 elsewhere.
pub(crate) fn hardmax(axis: i64, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let a = normalize_axis(axis, x.dims().len())?;
    let (outer, len, inner) = split_at(x.dims(), a);
    let xs = read_scalars(x)?;
    let mut out = vec![Scalar::Float(0.0); xs.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let mut best = 0;
            for j in 1..len {
                if order(xs[at(j)], xs[at(best)]) == Ordering::Greater {
                    best = j;
                }
            }
            if len > 0 {
                out[at(best)] = Scalar::Float(1.0);
            }
        }
    }
    write_scalars(y, &out)
}

/// InstanceNormalization: each (n, c) plane normalized to zero mean and unit variance, then
/// scaled and shifted per channel.
pub(crate) fn instance_norm(
    epsilon: f32,
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    bias: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let d = x.dims();
    let (n, c, plane) = (d[0], d[1], product(&d[2..]));
    let xs = x.to_f64_vec();
    let (sc, bi) = (scale.to_f64_vec(), bias.to_f64_vec());
    let mut out = vec![Scalar::Float(0.0); xs.len()];
    for b in 0..n {
        for ch in 0..c {
            let base = (b * c + ch) * plane;
            let vals = &xs[base..base + plane];
            let mean = vals.iter().sum::<f64>() / plane.max(1) as f64;
            let var =
                vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / plane.max(1) as f64;
            let inv = 1.0 / (var + f64::from(epsilon)).sqrt();
            for (k, v) in vals.iter().enumerate() {
                out[base + k] = Scalar::Float((v - mean) * inv * sc[ch] + bi[ch]);
            }
        }
    }
    write_scalars(y, &out)
}

/// LRN: x / (bias + alpha / size * sum of squares over nearby channels)^beta.
pub(crate) fn lrn(
    alpha: f32,
    beta: f32,
    bias: f32,
    size: usize,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let d = x.dims();
    let (n, c, plane) = (d[0], d[1], product(&d[2..]));
    let xs = x.to_f64_vec();
    let before = (size.saturating_sub(1)) / 2;
    let after = size.saturating_sub(1).div_ceil(2);
    let mut out = vec![Scalar::Float(0.0); xs.len()];
    for b in 0..n {
        for ch in 0..c {
            let lo = ch.saturating_sub(before);
            let hi = (ch + after).min(c.saturating_sub(1));
            for p in 0..plane {
                let sq: f64 = (lo..=hi)
                    .map(|k| {
                        let v = xs[(b * c + k) * plane + p];
                        v * v
                    })
                    .sum();
                let at = (b * c + ch) * plane + p;
                let denom =
                    (f64::from(bias) + f64::from(alpha) / size as f64 * sq).powf(f64::from(beta));
                out[at] = Scalar::Float(xs[at] / denom);
            }
        }
    }
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval1, eval_f32, f32s};
    use backplane_core::ops::{ArgReduceDesc, TopKDesc};
    use backplane_core::Op;

    #[test]
    fn top_k_sorts_and_breaks_ties_by_index() {
        let x = f32s(&[1, 5], &[3.0, 1.0, 3.0, 5.0, 0.0]);
        let op = Op::TopK(TopKDesc {
            axis: -1,
            k: 3,
            largest: true,
            sorted: true,
        });
        let out = crate::evaluate(&op, &[&x]).unwrap();
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &[5.0, 3.0, 3.0]);
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[3, 0, 2]);
    }

    #[test]
    fn arg_reduce_and_cum_sum() {
        let x = f32s(&[2, 3], &[1.0, 9.0, 9.0, 4.0, 2.0, 0.0]);
        let mut d = ArgReduceDesc {
            max: true,
            axis: 1,
            keepdims: false,
            select_last_index: false,
        };
        let y = eval1(&Op::ArgReduce(d), &[&x]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[1, 0]);
        d.select_last_index = true;
        let y = eval1(&Op::ArgReduce(d), &[&x]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[2, 0]);
        let op = Op::CumSum {
            axis: 1,
            exclusive: true,
            reverse: true,
        };
        assert_eq!(eval_f32(&op, &[&x]), [18.0, 9.0, 0.0, 2.0, 0.0, 0.0]);
    }

    #[test]
    fn log_softmax_hardmax_and_norms() {
        let x = f32s(&[1, 2], &[0.0, 0.0]);
        let y = eval_f32(&Op::LogSoftmax { axis: 1 }, &[&x]);
        assert!((y[0] + std::f32::consts::LN_2).abs() < 1e-6);
        let h = f32s(&[1, 3], &[1.0, 3.0, 3.0]);
        assert_eq!(eval_f32(&Op::Hardmax { axis: 1 }, &[&h]), [0.0, 1.0, 0.0]);
        let x = f32s(&[1, 1, 2], &[1.0, 3.0]);
        let (s, b) = (f32s(&[1], &[2.0]), f32s(&[1], &[1.0]));
        let y = eval_f32(&Op::InstanceNormalization { epsilon: 0.0 }, &[&x, &s, &b]);
        assert_eq!(y, [-1.0, 3.0]);
        let x = f32s(&[1, 2, 1], &[1.0, 2.0]);
        let op = Op::Lrn {
            alpha: 2.0,
            beta: 1.0,
            bias: 1.0,
            size: 2,
        };
        // Channel 0 sums channels 0..=0 (1), channel 1 sums 0..=1? size 2: floor(1/2)=0
        // before, ceil(1/2)=1 after: channel 0 sums {0, 1} = 5, channel 1 sums {1} = 4.
        assert_eq!(eval_f32(&op, &[&x]), [1.0 / 6.0, 2.0 / 5.0]);
    }
}

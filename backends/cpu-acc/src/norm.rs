//! Softmax, LogSoftmax, LayerNormalization and InstanceNormalization rows, vectorized with
//! eight independent accumulators.

/// Lanes of the manual reductions (one AVX register).
const L: usize = 8;

#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; L];
    let chunks = x.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &v in acc.iter().chain(rest) {
        m = if v > m { v } else { m };
    }
    m
}

#[inline(always)]
fn sum_of(x: &[f32]) -> f32 {
    let mut acc = [0f32; L];
    let chunks = x.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + rest.iter().sum::<f32>()
}

#[inline(always)]
fn sum_sq_dev(x: &[f32], mean: f32) -> f32 {
    let mut acc = [0f32; L];
    let chunks = x.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            let d = v - mean;
            *a = d.mul_add(d, *a);
        }
    }
    acc.iter().sum::<f32>() + rest.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>()
}

/// Softmax of one row (stabilized by the row maximum).
#[inline(always)]
pub fn softmax_row_body(x: &[f32], y: &mut [f32]) {
    let m = max_of(x);
    for (o, &v) in y.iter_mut().zip(x) {
        *o = crate::math::exp(v - m);
    }
    let inv = 1.0 / sum_of(y);
    for o in y.iter_mut() {
        *o *= inv;
    }
}

/// LogSoftmax of one row: `(x - max) - ln(Σ exp(x - max))` (`y` holds the exponentials
/// first). `x - max` rounds relative to itself (it is exact where `x` is within a factor of
/// 2 of `max`); folding `max + ln(Σ)` into one shift first would round that shift to the ulp
/// of the maximum (0.0078 at 1e5), an error every output would carry.
#[inline(always)]
pub fn log_softmax_row_body(x: &[f32], y: &mut [f32]) {
    let m = max_of(x);
    for (o, &v) in y.iter_mut().zip(x) {
        *o = crate::math::exp(v - m);
    }
    let log_sum = sum_of(y).ln();
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (v - m) - log_sum;
    }
}

/// InstanceNormalization of one channel's plane: `(x - mean) / sqrt(var + eps) * scale +
/// bias`, with the channel's scale and bias.
#[inline(always)]
pub fn instance_norm_plane_body(x: &[f32], scale: f32, bias: f32, epsilon: f32, y: &mut [f32]) {
    let n = x.len() as f32;
    let mean = sum_of(x) / n;
    let var = sum_sq_dev(x, mean) / n;
    // (x - mean) first: folding the mean into the bias (x·a + (bias - mean·a)) cancels
    // badly where the variance is tiny and `a` large.
    let a = scale / (var + epsilon).sqrt();
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (v - mean).mul_add(a, bias);
    }
}

/// LayerNormalization of one row: `(x - mean) / sqrt(var + eps) * scale + bias`.
#[inline(always)]
pub fn layer_norm_row_body(
    x: &[f32],
    scale: &[f32],
    bias: Option<&[f32]>,
    epsilon: f32,
    y: &mut [f32],
) {
    let n = x.len() as f32;
    let mean = sum_of(x) / n;
    let var = sum_sq_dev(x, mean) / n;
    let inv = 1.0 / (var + epsilon).sqrt();
    match bias {
        Some(b) => {
            for (((o, &v), &s), &bb) in y.iter_mut().zip(x).zip(scale).zip(b) {
                *o = ((v - mean) * inv).mul_add(s, bb);
            }
        }
        None => {
            for ((o, &v), &s) in y.iter_mut().zip(x).zip(scale) {
                *o = (v - mean) * inv * s;
            }
        }
    }
}

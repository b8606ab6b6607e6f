//! Normalizations (f32, statistics in f64): inference BatchNormalization, LayerNormalization
//! and Softmax.

use super::indexing::{broadcast_offsets, product};
use crate::Result;
use backplane_core::shape::normalize_axis;
use backplane_core::{TensorView, TensorViewMut};

/// BatchNormalization (inference): per channel (axis 1),
/// `y = (x - mean) / sqrt(var + epsilon) * scale + bias`.
pub(crate) fn batch_norm(
    epsilon: f32,
    x: &TensorView<'_>,
    [scale, bias, mean, var]: [&TensorView<'_>; 4],
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let channels = dims[1];
    // Elements of one channel within one batch item.
    let plane = product(&dims[2..]);
    let (scale, bias) = (scale.as_slice::<f32>()?, bias.as_slice::<f32>()?);
    let (mean, var) = (mean.as_slice::<f32>()?, var.as_slice::<f32>()?);
    let xs = x.as_slice::<f32>()?;
    for (i, (slot, &v)) in y.as_mut_slice::<f32>()?.iter_mut().zip(xs).enumerate() {
        let c = (i / plane) % channels;
        let normalized =
            (f64::from(v) - f64::from(mean[c])) / (f64::from(var[c]) + f64::from(epsilon)).sqrt();
        *slot = (normalized * f64::from(scale[c]) + f64::from(bias[c])) as f32;
    }
    Ok(())
}

/// Softmax along `axis`, stabilized by subtracting the maximum of each slice.
pub(crate) fn softmax(axis: i64, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let dims = x.dims();
    let a = normalize_axis(axis, dims.len())?;
    let (outer, len, inner) = (product(&dims[..a]), dims[a], product(&dims[a + 1..]));
    let xs = x.as_slice::<f32>()?;
    let ys = y.as_mut_slice::<f32>()?;
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let max = (0..len)
                .map(|j| xs[at(j)])
                .fold(f32::NEG_INFINITY, f32::max);
            let exps: Vec<f64> = (0..len)
                .map(|j| (f64::from(xs[at(j)]) - f64::from(max)).exp())
                .collect();
            let sum: f64 = exps.iter().sum();
            for (j, e) in exps.iter().enumerate() {
                ys[at(j)] = (e / sum) as f32;
            }
        }
    }
    Ok(())
}

/// LayerNormalization over axes `axis..rank`: each such block is normalized to zero mean and
/// unit (population) variance, then scaled and shifted by `scale` and `bias`, which broadcast
/// to the block's shape.
pub(crate) fn layer_norm(
    axis: i64,
    epsilon: f32,
    x: &TensorView<'_>,
    scale: &TensorView<'_>,
    bias: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let a = normalize_axis(axis, dims.len())?;
    let block_dims = &dims[a..];
    let block = product(block_dims);
    if block == 0 {
        // Nothing to normalize (and the output is empty too).
        return Ok(());
    }
    let scales = scale.as_slice::<f32>()?;
    let scale_at = broadcast_offsets(scale.dims(), block_dims);
    let biases = match bias {
        Some(b) => Some((
            b.as_slice::<f32>()?,
            broadcast_offsets(b.dims(), block_dims),
        )),
        None => None,
    };
    let xs = x.as_slice::<f32>()?;
    let ys = y.as_mut_slice::<f32>()?;
    for (row, out) in xs.chunks_exact(block).zip(ys.chunks_exact_mut(block)) {
        let n = block as f64;
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let inv_std = 1.0 / (var + f64::from(epsilon)).sqrt();
        for (j, (slot, &v)) in out.iter_mut().zip(row).enumerate() {
            let mut r = (f64::from(v) - mean) * inv_std * f64::from(scales[scale_at[j]]);
            if let Some((bs, bias_at)) = &biases {
                r += f64::from(bs[bias_at[j]]);
            }
            *slot = r as f32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::evaluate;
    use crate::test_util::{assert_close, assert_near, eval_f32, f32s};
    use backplane_core::Op;

    #[test]
    fn batch_norm_per_channel() {
        // x [1,2,1,2]: channel 0 = [1,3], channel 1 = [2,4].
        // scale [2,1], bias [0,1], mean [2,3], var [1,4], epsilon 0:
        //   ch0: (1-2)/1*2 = -2, (3-2)/1*2 = 2;  ch1: (2-3)/2+1 = 0.5, (4-3)/2+1 = 1.5.
        let x = f32s(&[1, 2, 1, 2], &[1.0, 3.0, 2.0, 4.0]);
        let p = |v: [f32; 2]| f32s(&[2], &v);
        let (scale, bias, mean, var) = (p([2.0, 1.0]), p([0.0, 1.0]), p([2.0, 3.0]), p([1.0, 4.0]));
        let op = Op::BatchNormalization { epsilon: 0.0 };
        assert_eq!(
            eval_f32(&op, &[&x, &scale, &bias, &mean, &var]),
            vec![-2.0, 2.0, 0.5, 1.5]
        );
        // Epsilon is added to the variance: var 0.75 + 0.25 = 1.
        let var = p([0.75, 3.75]);
        let op = Op::BatchNormalization { epsilon: 0.25 };
        assert_eq!(
            eval_f32(&op, &[&x, &scale, &bias, &mean, &var]),
            vec![-2.0, 2.0, 0.5, 1.5]
        );
        // Rank 2 ([N, C]): channels are columns. x = [[1,2],[3,4],[5,6]].
        let x = f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let op = Op::BatchNormalization { epsilon: 0.0 };
        let var = p([1.0, 4.0]);
        // ch0: (x-2)*2 → -2, 2, 6; ch1: (x-3)/2+1 → 0.5, 1.5, 2.5.
        assert_eq!(
            eval_f32(&op, &[&x, &scale, &bias, &mean, &var]),
            vec![-2.0, 0.5, 2.0, 1.5, 6.0, 2.5]
        );
    }

    #[test]
    fn softmax_is_stable_and_follows_the_axis() {
        // softmax([1,2,3]) = [e^-2, e^-1, 1] / (e^-2 + e^-1 + 1) = [0.0900306, 0.2447285, 0.6652410].
        let x = f32s(&[3], &[1.0, 2.0, 3.0]);
        assert_close(
            &eval_f32(&Op::Softmax { axis: 0 }, &[&x]),
            &[0.090_030_57, 0.244_728_47, 0.665_240_96],
            1e-6,
        );
        // Huge inputs do not overflow.
        let x = f32s(&[2], &[1000.0, 1000.0]);
        assert_eq!(eval_f32(&Op::Softmax { axis: -1 }, &[&x]), vec![0.5, 0.5]);
        // -inf gets probability 0.
        let x = f32s(&[2], &[f32::NEG_INFINITY, 0.0]);
        assert_eq!(eval_f32(&Op::Softmax { axis: 0 }, &[&x]), vec![0.0, 1.0]);
        // [[1,1],[1,3]] along axis 0 (= -2): columns [0.5,0.5] and
        // [1/(1+e^2), e^2/(1+e^2)] = [0.1192029, 0.8807971].
        let x = f32s(&[2, 2], &[1.0, 1.0, 1.0, 3.0]);
        for axis in [0, -2] {
            assert_close(
                &eval_f32(&Op::Softmax { axis }, &[&x]),
                &[0.5, 0.119_202_92, 0.5, 0.880_797_1],
                1e-6,
            );
        }
        assert!(evaluate(&Op::Softmax { axis: 2 }, &[&x]).is_err());
    }

    #[test]
    fn layer_norm_over_trailing_axes() {
        // Rows [1,2,3] and [2,4,6]; each normalizes to [-1,0,1] * sqrt(3/2) = ±1.2247449.
        let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 2.0, 4.0, 6.0]);
        let ones = f32s(&[3], &[1.0, 1.0, 1.0]);
        let op = Op::LayerNormalization {
            axis: -1,
            epsilon: 0.0,
        };
        let r = 1.224_744_9;
        assert_near(
            &eval_f32(&op, &[&x, &ones]),
            &[-r, 0.0, r, -r, 0.0, r],
            1e-6,
        );
        // Scale [1,2,3] and bias [0,0,1].
        let scale = f32s(&[3], &[1.0, 2.0, 3.0]);
        let bias = f32s(&[3], &[0.0, 0.0, 1.0]);
        assert_near(
            &eval_f32(&op, &[&x, &scale, &bias]),
            &[-r, 0.0, 1.0 + 3.0 * r, -r, 0.0, 1.0 + 3.0 * r],
            1e-6,
        );
        // axis 0: all six values together. Mean 3, variance (4+1+0+1+1+9)/6 = 8/3;
        // deviations [-2,-1,0,-1,1,3] / sqrt(8/3). A [3] scale broadcasts over the block.
        let op0 = Op::LayerNormalization {
            axis: 0,
            epsilon: 0.0,
        };
        let s = (8.0f32 / 3.0).sqrt();
        assert_near(
            &eval_f32(&op0, &[&x, &ones]),
            &[-2.0 / s, -1.0 / s, 0.0, -1.0 / s, 1.0 / s, 3.0 / s],
            1e-6,
        );
        // Epsilon: a constant row has variance 0 and normalizes to 0 (not NaN).
        let flat = f32s(&[1, 3], &[5.0, 5.0, 5.0]);
        let eps = Op::LayerNormalization {
            axis: 1,
            epsilon: 1e-5,
        };
        assert_eq!(eval_f32(&eps, &[&flat, &ones]), vec![0.0, 0.0, 0.0]);
        // An empty normalized axis is an empty result, not a crash.
        let empty = f32s(&[2, 0], &[]);
        let none = f32s(&[0], &[]);
        assert!(eval_f32(&eps, &[&empty, &none]).is_empty());
    }
}

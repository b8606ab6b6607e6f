//! Resize: nearest (every data type), N-linear and cubic (f32).
//!
//! Each output coordinate is mapped back to an input coordinate per axis with the ONNX
//! `coordinate_transformation_mode` formulas, computed in f32 in the same order onnxruntime
//! does (so that nearest-mode rounding lands on the same side of a tie):
//!
//! * half_pixel: `(x + 0.5) / scale - 0.5`
//! * pytorch_half_pixel: the same, but 0 when the output length is 1
//! * align_corners: `x * (in - 1) / (out - 1)` (0 when the output length is 1)
//! * asymmetric: `x / scale`
//! * half_pixel_symmetric: `in/2 * (1 - out / (scale*in)) + (x + 0.5) / scale - 0.5`
//!
//! Nearest rounds that coordinate (per `nearest_mode`) and clamps it into the input. Linear
//! clamps the coordinate into `[0, in - 1]` and blends the two neighbours; cubic blends four
//! neighbours with the Keys kernel (coefficient `a`), clamping their indices to the edge or,
//! with `exclude_outside`, dropping outside neighbours and renormalizing the weights. Both are
//! separable, so they are applied one axis at a time (in f64).
//!
//! With `antialias`, linear and cubic downsampling (scale < 1) stretch their kernel by
//! 1 / scale: every input index within the stretched support contributes kernel(scale * d)
//! (d its distance to the coordinate, indices clamped to the edge), normalized to sum 1.
//! tf_crop_and_resize maps the output onto the region `roi` of the input (normalized
//! coordinates); an output whose coordinate on some axis falls outside the input is the
//! extrapolation value.

use super::cast::{encode, Scalar};
use super::indexing::{for_each_index, product};
use super::layout::gather_elements;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{
    clamp_index, crop_coordinate, linear_neighbours, CoordinateTransform, ResizeDesc, ResizeMode,
};
use backplane_core::shape::strides_of;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// Antialiased taps: the kernel (of support `radius`) stretched by 1 / scale around `c`,
/// indices clamped to the edge, weights normalized; with `exclude_outside`, outside indices
/// are dropped before normalizing.
fn antialias_taps(
    c: f32,
    len: usize,
    scale: f64,
    radius: f64,
    kernel: impl Fn(f64) -> f64,
    exclude_outside: bool,
) -> Taps {
    let c = f64::from(c);
    let c = if c.is_finite() { c } else { 0.0 };
    let reach = radius / scale;
    // Bounded: scale > 0 and c finite; a huge reach is cut to the input's extent plus the
    // reach needed to cover it.
    let first = (c - reach).floor().max(-(len as f64) - 1.0);
    let last = (c + reach).ceil().min(2.0 * len as f64 + 1.0);
    let mut taps: Vec<(f64, f64)> = Vec::new();
    let mut i = first;
    while i <= last {
        let w = kernel(scale * (i - c));
        let inside = i >= 0.0 && i <= (len - 1) as f64;
        if w != 0.0 && (inside || !exclude_outside) {
            taps.push((i, w));
        }
        i += 1.0;
    }
    let total: f64 = taps.iter().map(|&(_, w)| w).sum();
    if total != 0.0 {
        for tap in &mut taps {
            tap.1 /= total;
        }
    }
    taps.into_iter()
        .map(|(i, w)| (clamp_index(i, len), w))
        .collect()
}

/// Keys' cubic convolution kernel (coefficient `a`) at distance `d`.
fn keys(a: f64, d: f64) -> f64 {
    let d = d.abs();
    if d <= 1.0 {
        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    } else if d < 2.0 {
        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    } else {
        0.0
    }
}

/// The (input index, weight) pairs that make up one output element along one axis.
type Taps = Vec<(usize, f64)>;

/// Linear: the two neighbours of the clamped coordinate.
fn linear_taps(c: f32, len: usize) -> Taps {
    linear_neighbours(c, len).to_vec()
}

/// Cubic: four neighbours `floor(c) - 1 ..= floor(c) + 2` weighted by the Keys kernel.
fn cubic_taps(c: f32, len: usize, a: f64, exclude_outside: bool) -> Taps {
    let c = f64::from(c);
    let c = if c.is_finite() { c } else { 0.0 };
    let lo = c.floor();
    let t = c - lo;
    // Keys' cubic convolution kernel at distance d.
    let kernel = |d: f64| {
        let d = d.abs();
        if d <= 1.0 {
            ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
        } else if d < 2.0 {
            ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
        } else {
            0.0
        }
    };
    let mut taps: Vec<(f64, f64)> = (-1..=2)
        .map(|k| {
            let k = f64::from(k);
            (lo + k, kernel(t - k))
        })
        .collect();
    if exclude_outside {
        taps.retain(|&(i, _)| i >= 0.0 && i <= (len - 1) as f64);
        let total: f64 = taps.iter().map(|&(_, w)| w).sum();
        if total != 0.0 {
            for tap in &mut taps {
                tap.1 /= total;
            }
        }
    }
    taps.into_iter()
        .map(|(i, w)| (clamp_index(i, len), w))
        .collect()
}

/// Resize.
pub(crate) fn resize(
    desc: &ResizeDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let in_dims = x.dims().to_vec();
    let out_dims = y.dims().to_vec();
    if product(&out_dims) == 0 {
        return Ok(());
    }
    if let Some(axis) = in_dims.iter().position(|&d| d == 0) {
        return Err(BackendError::Execution(format!(
            "Resize: input axis {axis} is empty, so there is nothing to sample for output {:?}",
            out_dims
        )));
    }
    let rank = in_dims.len();
    let crop = desc.coordinate_transform == CoordinateTransform::TfCropAndResize;
    if crop && desc.roi.len() != 2 * rank {
        return Err(BackendError::Execution(format!(
            "Resize: tf_crop_and_resize needs {} roi values, got {}",
            2 * rank,
            desc.roi.len()
        )));
    }
    let coordinate = |axis: usize, o: usize| {
        if crop {
            crop_coordinate(
                o as f32,
                in_dims[axis],
                out_dims[axis],
                desc.roi[axis],
                desc.roi[rank + axis],
            )
        } else {
            desc.coordinate_transform
                .source(o, in_dims[axis], out_dims[axis], desc.scales[axis])
        }
    };
    // tf_crop_and_resize: per axis, the output indices whose coordinate is outside the input.
    let outside: Vec<Vec<bool>> = (0..rank)
        .map(|axis| {
            (0..out_dims[axis])
                .map(|o| {
                    let c = f64::from(coordinate(axis, o));
                    crop && !(0.0..=(in_dims[axis] as f64 - 1.0)).contains(&c)
                })
                .collect()
        })
        .collect();
    let extrapolated = |o: &[usize]| o.iter().enumerate().any(|(axis, &i)| outside[axis][i]);
    match desc.mode {
        ResizeMode::Nearest => {
            // Per axis, which input index each output index reads; then gather elements.
            let sources: Vec<Vec<usize>> = (0..in_dims.len())
                .map(|axis| {
                    (0..out_dims[axis])
                        .map(|o| desc.nearest_mode.index(coordinate(axis, o), in_dims[axis]))
                        .collect()
                })
                .collect();
            let in_strides = strides_of(&in_dims);
            let mut offsets = Vec::with_capacity(product(&out_dims));
            for_each_index(&out_dims, |o| {
                offsets.push(
                    o.iter()
                        .enumerate()
                        .map(|(axis, &i)| sources[axis][i] * in_strides[axis])
                        .sum(),
                );
            });
            gather_elements(x.data, &offsets, y.data, x.info.dtype.size());
            if crop {
                let size = x.info.dtype.size();
                let fill = encode(
                    x.info.dtype,
                    Scalar::Float(f64::from(desc.extrapolation_value)),
                );
                let mut at = 0;
                for_each_index(&out_dims, |o| {
                    if extrapolated(o) && fill.len() == size {
                        y.data[at * size..(at + 1) * size].copy_from_slice(&fill);
                    }
                    at += 1;
                });
            }
            Ok(())
        }
        ResizeMode::Linear | ResizeMode::Cubic => {
            if x.info.dtype != DataType::F32 {
                return Err(super::unsupported("Resize (linear/cubic)", x.info.dtype));
            }
            let mut data: Vec<f64> = x.as_slice::<f32>()?.iter().map(|&v| v.into()).collect();
            let mut dims = in_dims.clone();
            for axis in 0..dims.len() {
                let scale = f64::from(desc.scales[axis]);
                let stretch = desc.antialias && scale > 0.0 && scale < 1.0;
                let a = f64::from(desc.cubic_coeff_a);
                let taps: Vec<Taps> = (0..out_dims[axis])
                    .map(|o| {
                        let c = coordinate(axis, o);
                        if stretch && desc.mode == ResizeMode::Linear {
                            let tent = |d: f64| (1.0 - d.abs()).max(0.0);
                            antialias_taps(c, in_dims[axis], scale, 1.0, tent, false)
                        } else if stretch {
                            let cubic = |d: f64| keys(a, d);
                            antialias_taps(
                                c,
                                in_dims[axis],
                                scale,
                                2.0,
                                cubic,
                                desc.exclude_outside,
                            )
                        } else if desc.mode == ResizeMode::Linear {
                            linear_taps(c, in_dims[axis])
                        } else {
                            cubic_taps(
                                c,
                                in_dims[axis],
                                f64::from(desc.cubic_coeff_a),
                                desc.exclude_outside,
                            )
                        }
                    })
                    .collect();
                data = resample_axis(&data, &dims, axis, &taps);
                dims[axis] = out_dims[axis];
            }
            if crop {
                let mut at = 0;
                for_each_index(&out_dims, |o| {
                    if extrapolated(o) {
                        data[at] = f64::from(desc.extrapolation_value);
                    }
                    at += 1;
                });
            }
            for (slot, v) in y.as_mut_slice::<f32>()?.iter_mut().zip(data) {
                *slot = v as f32;
            }
            Ok(())
        }
    }
}

/// Resample `data` (shape `dims`) along `axis`: output index `j` on that axis is the weighted
/// sum of the input indices in `taps[j]`. Zero weights are skipped, so an infinite neighbour
/// does not turn an exact hit into NaN.
fn resample_axis(data: &[f64], dims: &[usize], axis: usize, taps: &[Taps]) -> Vec<f64> {
    let outer = product(&dims[..axis]);
    let inner = product(&dims[axis + 1..]);
    let (in_len, out_len) = (dims[axis], taps.len());
    let mut out = vec![0.0; outer * out_len * inner];
    for o in 0..outer {
        for (j, tap_list) in taps.iter().enumerate() {
            for i in 0..inner {
                out[(o * out_len + j) * inner + i] = tap_list
                    .iter()
                    .filter(|&&(_, w)| w != 0.0)
                    .map(|&(src, w)| w * data[(o * in_len + src) * inner + i])
                    .sum();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::cubic_taps;
    use crate::evaluate;
    use crate::test_util::{assert_close, eval1, expect_picks, f32s, iota};
    use backplane_core::ops::{CoordinateTransform, NearestMode, ResizeDesc, ResizeMode};
    use backplane_core::{DataType, Op};

    fn desc(
        mode: ResizeMode,
        transform: CoordinateTransform,
        output_shape: &[usize],
        scales: &[f32],
    ) -> ResizeDesc {
        ResizeDesc {
            mode,
            coordinate_transform: transform,
            nearest_mode: NearestMode::RoundPreferFloor,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            output_shape: output_shape.to_vec(),
            scales: scales.to_vec(),
            antialias: false,
            roi: vec![],
            extrapolation_value: 0.0,
        }
    }

    #[test]
    fn coordinate_transforms() {
        use CoordinateTransform::*;
        // Upscale 2 → 4 (scale 2), output index 0 and 3.
        assert_eq!(CoordinateTransform::source(HalfPixel, 0, 2, 4, 2.0), -0.25);
        assert_eq!(CoordinateTransform::source(HalfPixel, 3, 2, 4, 2.0), 1.25);
        assert_eq!(
            CoordinateTransform::source(PytorchHalfPixel, 0, 2, 1, 0.5),
            0.0
        );
        assert_eq!(
            CoordinateTransform::source(PytorchHalfPixel, 3, 2, 4, 2.0),
            1.25
        );
        assert_eq!(CoordinateTransform::source(AlignCorners, 3, 2, 4, 2.0), 1.0);
        assert_eq!(
            CoordinateTransform::source(AlignCorners, 2, 3, 5, 5.0 / 3.0),
            1.0
        );
        assert_eq!(CoordinateTransform::source(Asymmetric, 3, 2, 4, 2.0), 1.5);
        // half_pixel_symmetric equals half_pixel when scale = out / in exactly.
        assert_eq!(
            CoordinateTransform::source(HalfPixelSymmetric, 3, 2, 4, 2.0),
            1.25
        );
        // in 5, out 2 (from sizes) with scale 0.5 (2.5 would be the exact size): adjustment =
        // 2 / 2.5 = 0.8, offset = 2.5 * 0.2 = 0.5, x=0: 0.5 + 0.5/0.5 - 0.5 = 1.0.
        assert!((CoordinateTransform::source(HalfPixelSymmetric, 0, 5, 2, 0.5) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn nearest_upsampling_every_dtype() {
        for dt in DataType::ALL {
            // [[0,1],[2,3]] → 4x4 with asymmetric + floor: each element repeats in a 2x2 block.
            let x = iota(dt, &[1, 1, 2, 2]);
            let mut d = desc(
                ResizeMode::Nearest,
                CoordinateTransform::Asymmetric,
                &[1, 1, 4, 4],
                &[1.0, 1.0, 2.0, 2.0],
            );
            d.nearest_mode = NearestMode::Floor;
            let y = eval1(&Op::Resize(d), &[&x]);
            expect_picks(&y, &[0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3]);
        }
    }

    #[test]
    fn nearest_modes_round_ties_differently() {
        // 1-D [0,1,2,3] → 8 with asymmetric: coordinates 0, .5, 1, 1.5, 2, 2.5, 3, 3.5.
        let x = iota(DataType::F32, &[4]);
        let run = |mode| {
            let mut d = desc(
                ResizeMode::Nearest,
                CoordinateTransform::Asymmetric,
                &[8],
                &[2.0],
            );
            d.nearest_mode = mode;
            eval1(&Op::Resize(d), &[&x])
        };
        expect_picks(
            &run(NearestMode::RoundPreferFloor),
            &[0, 0, 1, 1, 2, 2, 3, 3],
        );
        // Ties up; 3.5 rounds to 4, clamped to 3.
        expect_picks(
            &run(NearestMode::RoundPreferCeil),
            &[0, 1, 1, 2, 2, 3, 3, 3],
        );
        expect_picks(&run(NearestMode::Floor), &[0, 0, 1, 1, 2, 2, 3, 3]);
        expect_picks(&run(NearestMode::Ceil), &[0, 1, 1, 2, 2, 3, 3, 3]);
        // Downsampling 5 → 3 with half_pixel (scale 0.6): coordinates 0.333, 2.0, 3.667.
        let x = iota(DataType::I64, &[5]);
        let d = desc(
            ResizeMode::Nearest,
            CoordinateTransform::HalfPixel,
            &[3],
            &[0.6],
        );
        expect_picks(&eval1(&Op::Resize(d), &[&x]), &[0, 2, 4]);
    }

    #[test]
    fn linear_interpolation_2d() {
        // [[0,1],[2,3]] (bilinear over the last two axes) → 4x4, half_pixel, scale 2.
        // Coordinates per axis: -0.25→0 (clamped), 0.25, 0.75, 1.25→1 (clamped). Along one
        // axis [a,b] becomes [a, .75a+.25b, .25a+.75b, b].
        let x = f32s(&[1, 1, 2, 2], &[0.0, 1.0, 2.0, 3.0]);
        let d = desc(
            ResizeMode::Linear,
            CoordinateTransform::HalfPixel,
            &[1, 1, 4, 4],
            &[1.0, 1.0, 2.0, 2.0],
        );
        let y = eval1(&Op::Resize(d), &[&x]);
        let y = y.as_slice::<f32>().unwrap();
        // Row values are r + [0, .25, .75, 1] with rows r = 0, 0.5, 1.5, 2.
        let mut expected = Vec::new();
        for r in [0.0, 0.5, 1.5, 2.0] {
            for c in [0.0, 0.25, 0.75, 1.0] {
                expected.push(r + c);
            }
        }
        assert_close(y, &expected, 1e-7);
        // align_corners 2 → 3: midpoint exactly; on a 1-D [1, 5].
        let x = f32s(&[2], &[1.0, 5.0]);
        let d = desc(
            ResizeMode::Linear,
            CoordinateTransform::AlignCorners,
            &[3],
            &[1.5],
        );
        assert_eq!(
            eval1(&Op::Resize(d), &[&x]).to_f64_vec(),
            vec![1.0, 3.0, 5.0]
        );
    }

    #[test]
    fn linear_downsampling_and_3d() {
        // [0,1,2,3] → 2 with half_pixel (scale 0.5): coordinates 0.5 and 2.5 → 0.5, 2.5.
        let x = f32s(&[4], &[0.0, 1.0, 2.0, 3.0]);
        let d = desc(
            ResizeMode::Linear,
            CoordinateTransform::HalfPixel,
            &[2],
            &[0.5],
        );
        assert_eq!(eval1(&Op::Resize(d), &[&x]).to_f64_vec(), vec![0.5, 2.5]);
        // Trilinear on a 2x2x2 cube of 0..7 down to 1x1x1 with align_corners: output length 1
        // maps to coordinate 0, the first corner.
        let x = f32s(&[2, 2, 2], &(0..8).map(|i| i as f32).collect::<Vec<_>>());
        let d = desc(
            ResizeMode::Linear,
            CoordinateTransform::AlignCorners,
            &[1, 1, 1],
            &[0.5, 0.5, 0.5],
        );
        assert_eq!(eval1(&Op::Resize(d), &[&x]).to_f64_vec(), vec![0.0]);
        // With half_pixel the centre: coordinate 0.5 on every axis → the mean 3.5.
        let d = desc(
            ResizeMode::Linear,
            CoordinateTransform::HalfPixel,
            &[1, 1, 1],
            &[0.5, 0.5, 0.5],
        );
        assert_eq!(eval1(&Op::Resize(d), &[&x]).to_f64_vec(), vec![3.5]);
    }

    #[test]
    fn cubic_weights_and_interpolation() {
        // At an integer coordinate the Keys kernel is the identity.
        let taps = cubic_taps(2.0, 5, -0.75, false);
        let weights: Vec<f64> = taps.iter().map(|t| t.1).collect();
        assert_eq!(weights, vec![0.0, 1.0, 0.0, 0.0]);
        // At t = 0.5 with a = -0.75: outer weights a*(1.5^3) - 5a*(1.5^2) + 8a*1.5 - 4a =
        // -0.09375, inner ((a+2)*0.125 - (a+3)*0.25 + 1) = 0.59375; they sum to 1.
        let taps = cubic_taps(1.5, 5, -0.75, false);
        let weights: Vec<f64> = taps.iter().map(|t| t.1).collect();
        assert_eq!(weights, vec![-0.093_75, 0.593_75, 0.593_75, -0.093_75]);
        assert_eq!(
            taps.iter().map(|t| t.0).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        // Near the edge the missing neighbour is clamped, or dropped and renormalized.
        let clamped = cubic_taps(0.5, 4, -0.75, false);
        assert_eq!(clamped[0].0, 0);
        let excluded = cubic_taps(0.5, 4, -0.75, true);
        assert_eq!(excluded.len(), 3);
        let total: f64 = excluded.iter().map(|t| t.1).sum();
        assert!((total - 1.0).abs() < 1e-12);
        // Linear data is reproduced exactly by the cubic kernel away from the edges:
        // [0,1,2,3,4,5] → 12 with asymmetric, coordinate 2.5 (output 5) gives 2.5.
        let x = f32s(&[6], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let d = desc(
            ResizeMode::Cubic,
            CoordinateTransform::Asymmetric,
            &[12],
            &[2.0],
        );
        let y = eval1(&Op::Resize(d), &[&x]);
        let y = y.as_slice::<f32>().unwrap();
        assert_close(&y[2..9], &[1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0], 1e-7);
    }

    #[test]
    fn resize_errors() {
        // Linear needs f32; an empty input cannot be upsampled.
        let xi = iota(DataType::I32, &[2]);
        let d = desc(
            ResizeMode::Linear,
            CoordinateTransform::HalfPixel,
            &[4],
            &[2.0],
        );
        assert!(evaluate(&Op::Resize(d.clone()), &[&xi]).is_err());
        let e = f32s(&[0], &[]);
        assert!(evaluate(&Op::Resize(d), &[&e]).is_err());
        // Output shape of the wrong rank.
        let x = f32s(&[2], &[1.0, 2.0]);
        let bad = desc(
            ResizeMode::Nearest,
            CoordinateTransform::HalfPixel,
            &[2, 2],
            &[1.0, 1.0],
        );
        assert!(evaluate(&Op::Resize(bad), &[&x]).is_err());
    }

    #[test]
    fn antialiased_linear_downsampling_widens_the_tent() {
        // [0, 1, 2, 3] → 2 (scale 0.5): the tent spans ±2 inputs; at c = 0.5 the taps
        // -1 (edge: 0), 0, 1, 2 weigh 1:3:3:1 → 0.625; at c = 2.5, 1, 2, 3, 4 (edge: 3) → 2.375.
        let mut d = desc(
            ResizeMode::Linear,
            CoordinateTransform::HalfPixel,
            &[1, 2],
            &[1.0, 0.5],
        );
        d.antialias = true;
        let x = f32s(&[1, 4], &[0.0, 1.0, 2.0, 3.0]);
        let y = eval1(&Op::Resize(d.clone()), &[&x]);
        assert_close(y.as_slice::<f32>().unwrap(), &[0.625, 2.375], 1e-6);
        // Without antialias: the two neighbours of 0.5 and 2.5.
        d.antialias = false;
        let y = eval1(&Op::Resize(d), &[&x]);
        assert_close(y.as_slice::<f32>().unwrap(), &[0.5, 2.5], 1e-6);
    }

    #[test]
    fn tf_crop_and_resize_maps_the_region_and_extrapolates() {
        // Region [0.25, 1.25] of [0, 10, 20]: coordinates 0.5, 1.5, 2.5 (outside).
        let mut d = desc(
            ResizeMode::Linear,
            CoordinateTransform::TfCropAndResize,
            &[1, 3],
            &[1.0, 1.0],
        );
        d.roi = vec![0.0, 0.25, 1.0, 1.25];
        d.extrapolation_value = 99.0;
        let x = f32s(&[1, 3], &[0.0, 10.0, 20.0]);
        let y = eval1(&Op::Resize(d.clone()), &[&x]);
        assert_close(y.as_slice::<f32>().unwrap(), &[5.0, 15.0, 99.0], 1e-6);
        // Nearest reads 0.5 → 0 (round half down), 1.5 → 1, and extrapolates the same way.
        d.mode = ResizeMode::Nearest;
        let y = eval1(&Op::Resize(d.clone()), &[&x]);
        assert_close(y.as_slice::<f32>().unwrap(), &[0.0, 10.0, 99.0], 0.0);
        // A region of the wrong length is an error, not a panic.
        d.roi = vec![0.0, 1.0];
        assert!(evaluate(&Op::Resize(d), &[&x]).is_err());
    }
}

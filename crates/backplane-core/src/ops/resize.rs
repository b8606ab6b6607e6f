//! Resize (nearest and linear interpolation).

use crate::{CoreError, Result, TensorInfo};

/// Interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// Nearest neighbour.
    Nearest,
    /// (Multi-)linear.
    Linear,
    /// Cubic.
    Cubic,
}

/// How an output coordinate maps back to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinateTransform {
    /// (x_out + 0.5) / scale - 0.5.
    HalfPixel,
    /// Like half_pixel, but 0 when the output length is 1.
    PytorchHalfPixel,
    /// x_out * (len_in - 1) / (len_out - 1).
    AlignCorners,
    /// x_out / scale.
    Asymmetric,
    /// half_pixel with the ratio len_in / len_out instead of 1 / scale.
    HalfPixelSymmetric,
    /// The region [roi start, roi end] (normalized) of the input is stretched onto the
    /// output: start * (len_in - 1) + x_out * (end - start) * (len_in - 1) / (len_out - 1);
    /// coordinates outside the input read the extrapolation value.
    TfCropAndResize,
}

/// How nearest mode rounds a fractional coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Floor.
    Floor,
    /// Ceil.
    Ceil,
}

impl CoordinateTransform {
    /// The input coordinate that output index `x` of one axis maps to, in the f32 (and, for
    /// align_corners, f64) arithmetic every backend shares so that nearest mode's ties round
    /// alike. tf_crop_and_resize maps onto the whole input here; its region is
    /// [`crop_coordinate`]'s.
    pub fn source(self, x: usize, in_len: usize, out_len: usize, scale: f32) -> f32 {
        let x = x as f32;
        match self {
            CoordinateTransform::HalfPixel => (x + 0.5) / scale - 0.5,
            CoordinateTransform::PytorchHalfPixel => {
                if out_len > 1 {
                    (x + 0.5) / scale - 0.5
                } else {
                    0.0
                }
            }
            CoordinateTransform::AlignCorners => {
                // ONNX uses the unrounded resized length (input length x scale), which
                // differs from the output length when a scale does not divide evenly.
                let resized = f64::from(in_len as f32) * f64::from(scale);
                if out_len > 1 && resized > 1.0 {
                    (f64::from(x) * (in_len as f64 - 1.0) / (resized - 1.0)) as f32
                } else {
                    0.0
                }
            }
            CoordinateTransform::Asymmetric => x / scale,
            CoordinateTransform::HalfPixelSymmetric => {
                let adjustment = out_len as f32 / (scale * in_len as f32);
                let center = in_len as f32 / 2.0;
                let offset = center * (1.0 - adjustment);
                offset + (x + 0.5) / scale - 0.5
            }
            CoordinateTransform::TfCropAndResize => crop_coordinate(x, in_len, out_len, 0.0, 1.0),
        }
    }
}

/// tf_crop_and_resize: the input coordinate of output index `x` on the region
/// [start, end] (normalized) of the input.
pub fn crop_coordinate(x: f32, in_len: usize, out_len: usize, start: f32, end: f32) -> f32 {
    let (start, end, last) = (f64::from(start), f64::from(end), in_len as f64 - 1.0);
    let c = if out_len > 1 {
        start * last + f64::from(x) * (end - start) * last / (out_len as f64 - 1.0)
    } else {
        0.5 * (start + end) * last
    };
    c as f32
}

/// Clamp a (possibly negative, infinite or NaN) index into `0..len` (0 when `len` is 0).
pub fn clamp_index(i: f64, len: usize) -> usize {
    if i.is_nan() || i <= 0.0 {
        0
    } else {
        // `as` saturates huge values; then clamp to the last element.
        (i as usize).min(len.saturating_sub(1))
    }
}

/// Linear mode's two neighbours along an axis of `len` elements for source coordinate `c`
/// (clamped into the axis; NaN reads element 0): `[(index, weight); 2]`, the weights summing
/// to 1. Every backend's linear Resize takes its taps from here.
pub fn linear_neighbours(c: f32, len: usize) -> [(usize, f64); 2] {
    let c = f64::from(c);
    let c = if c.is_nan() {
        0.0
    } else {
        c.clamp(0.0, len.saturating_sub(1) as f64)
    };
    let lo = c.floor();
    let frac = c - lo;
    let i0 = clamp_index(lo, len);
    let i1 = (i0 + 1).min(len.saturating_sub(1));
    [(i0, 1.0 - frac), (i1, frac)]
}

impl NearestMode {
    /// The input index nearest mode reads for coordinate `c`, clamped into `0..len`
    /// (rounding done in f64, where `c ± 0.5` is exact).
    pub fn index(self, c: f32, len: usize) -> usize {
        let c = f64::from(c);
        let rounded = match self {
            // Ties go down: 2.5 → 2, 2.6 → 3.
            NearestMode::RoundPreferFloor => (c - 0.5).ceil(),
            // Ties go up: 2.5 → 3, 2.4 → 2.
            NearestMode::RoundPreferCeil => (c + 0.5).floor(),
            NearestMode::Floor => c.floor(),
            NearestMode::Ceil => c.ceil(),
        };
        clamp_index(rounded, len)
    }
}

/// Resize to a fixed output shape; `scales` are the per-axis factors used for coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeDesc {
    /// Interpolation.
    pub mode: ResizeMode,
    /// Coordinate transformation.
    pub coordinate_transform: CoordinateTransform,
    /// Rounding for nearest mode.
    pub nearest_mode: NearestMode,
    /// Cubic coefficient `a`.
    pub cubic_coeff_a: f32,
    /// Exclude outside-of-input samples from cubic weights.
    pub exclude_outside: bool,
    /// Output shape (all axes).
    pub output_shape: Vec<usize>,
    /// Scale per axis (output / input, as the model gave it or as derived from sizes).
    pub scales: Vec<f32>,
    /// Linear and cubic downsampling stretch their filter by 1 / scale (antialiasing).
    pub antialias: bool,
    /// tf_crop_and_resize only: the normalized region, starts of every axis then ends
    /// (empty otherwise).
    pub roi: Vec<f32>,
    /// tf_crop_and_resize only: the value of outputs whose coordinate is outside the input.
    pub extrapolation_value: f32,
}

impl ResizeDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let x = inputs[0];
        if self.output_shape.len() != x.shape.rank() || self.scales.len() != x.shape.rank() {
            return Err(CoreError::op(
                "Resize",
                format!(
                    "output shape {:?} / scales {:?} do not match input {}",
                    self.output_shape, self.scales, x.shape
                ),
            ));
        }
        let crop = self.coordinate_transform == CoordinateTransform::TfCropAndResize;
        if crop && self.roi.len() != 2 * x.shape.rank() {
            return Err(CoreError::op(
                "Resize",
                format!(
                    "tf_crop_and_resize needs a start and an end per axis, got roi {:?}",
                    self.roi
                ),
            ));
        }
        Ok(vec![TensorInfo::new(x.dtype, self.output_shape.clone())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_neighbours_clamp_and_weigh() {
        assert_eq!(linear_neighbours(1.25, 4), [(1, 0.75), (2, 0.25)]);
        // Past either end: the edge element, all weight on it.
        assert_eq!(linear_neighbours(-3.0, 4), [(0, 1.0), (1, 0.0)]);
        assert_eq!(linear_neighbours(9.5, 4), [(3, 1.0), (3, 0.0)]);
        assert_eq!(linear_neighbours(f32::NAN, 4), [(0, 1.0), (1, 0.0)]);
        // One element, and none: index 0 either way.
        assert_eq!(linear_neighbours(0.5, 1), [(0, 1.0), (0, 0.0)]);
        assert_eq!(linear_neighbours(0.5, 0), [(0, 1.0), (0, 0.0)]);
    }
}

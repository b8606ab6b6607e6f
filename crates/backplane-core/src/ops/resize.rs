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

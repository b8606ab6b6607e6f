//! Quantization parameters carried by a [`crate::TensorInfo`].

/// How the integers of a tensor map to real values: `real = scale * (q - zero_point)`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Quantization {
    /// Not quantized.
    #[default]
    None,
    /// One scale and zero point for the whole tensor.
    PerTensor {
        /// Scale.
        scale: f32,
        /// Zero point.
        zero_point: i32,
    },
    /// One scale and zero point per slice along `axis`.
    PerAxis {
        /// The quantized axis.
        axis: usize,
        /// One scale per slice.
        scales: Vec<f32>,
        /// One zero point per slice.
        zero_points: Vec<i32>,
    },
}

//! Sampling an input at positions given by another tensor: GridSample.

use crate::{CoreError, Result, TensorInfo};

/// How GridSample interpolates between input elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GridSampleMode {
    /// N-linear interpolation of the 2^r neighbours.
    #[default]
    Linear,
    /// The nearest element (halfway positions round to the even index).
    Nearest,
    /// N-cubic convolution (Keys, a = -0.75) of the 4^r neighbours.
    Cubic,
}

impl GridSampleMode {
    /// The ONNX attribute value (opset 20 names).
    pub fn name(self) -> &'static str {
        match self {
            GridSampleMode::Linear => "linear",
            GridSampleMode::Nearest => "nearest",
            GridSampleMode::Cubic => "cubic",
        }
    }

    /// The mode of an ONNX attribute value (opset 16's `bilinear`/`bicubic` included).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "linear" | "bilinear" => GridSampleMode::Linear,
            "nearest" => GridSampleMode::Nearest,
            "cubic" | "bicubic" => GridSampleMode::Cubic,
            _ => return None,
        })
    }
}

/// What GridSample reads at positions outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GridSamplePadding {
    /// Zero.
    #[default]
    Zeros,
    /// The nearest border element.
    Border,
    /// The input mirrored at its borders, repeatedly.
    Reflection,
}

impl GridSamplePadding {
    /// The ONNX attribute value.
    pub fn name(self) -> &'static str {
        match self {
            GridSamplePadding::Zeros => "zeros",
            GridSamplePadding::Border => "border",
            GridSamplePadding::Reflection => "reflection",
        }
    }

    /// The padding of an ONNX attribute value.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            GridSamplePadding::Zeros,
            GridSamplePadding::Border,
            GridSamplePadding::Reflection,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// GridSample: X [N, C, d1..dr], grid [N, o1..or, r] (normalized positions in [-1, 1], the
/// last axis listing coordinates innermost axis first: x, y, ...) → Y [N, C, o1..or].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GridSampleDesc {
    /// Interpolation.
    pub mode: GridSampleMode,
    /// Values outside the input.
    pub padding: GridSamplePadding,
    /// -1 and 1 are the centers of the corner elements (true) or their outer edges.
    pub align_corners: bool,
}

impl GridSampleDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "GridSample";
        let (x, grid) = (inputs[0], inputs[1]);
        if !x.dtype.is_float() || !grid.dtype.is_float() {
            return Err(CoreError::op(
                OP,
                format!(
                    "X and grid must be float tensors, got {} and {}",
                    x.dtype, grid.dtype
                ),
            ));
        }
        let (xd, gd) = (x.shape.dims(), grid.shape.dims());
        if xd.len() < 3 {
            return Err(CoreError::op(
                OP,
                format!("X must be [N, C, d1, ...], got {}", x.shape),
            ));
        }
        let r = xd.len() - 2;
        if gd.len() != r + 2 || gd[0] != xd[0] || gd[r + 1] != r {
            return Err(CoreError::op(
                OP,
                format!(
                    "grid must be [{}, o1..o{r}, {r}] for X {}, got {}",
                    xd[0], x.shape, grid.shape
                ),
            ));
        }
        let out: Vec<usize> = xd[..2].iter().chain(&gd[1..=r]).copied().collect();
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{DataType, Op};

    #[test]
    fn output_takes_the_grid_spatial_shape() {
        let op = Op::GridSample(GridSampleDesc::default());
        let x = TensorInfo::new(DataType::F32, vec![2, 3, 4, 5]);
        let g = TensorInfo::new(DataType::F32, vec![2, 6, 7, 2]);
        assert_eq!(op.infer(&[&x, &g]).unwrap()[0].shape.dims(), &[2, 3, 6, 7]);
        let g3 = TensorInfo::new(DataType::F32, vec![2, 6, 7, 3]);
        assert!(op.infer(&[&x, &g3]).is_err());
        let g_batch = TensorInfo::new(DataType::F32, vec![1, 6, 7, 2]);
        assert!(op.infer(&[&x, &g_batch]).is_err());
        assert_eq!(
            GridSampleMode::from_name("bicubic"),
            Some(GridSampleMode::Cubic)
        );
        assert_eq!(
            GridSamplePadding::from_name("reflection"),
            Some(GridSamplePadding::Reflection)
        );
    }
}

//! Reductions over a set of axes.

use crate::shape::normalize_axis;
use crate::{CoreError, Result, TensorInfo};

/// Which reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Arithmetic mean.
    Mean,
    /// Sum.
    Sum,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Product.
    Prod,
    /// Sum of absolute values.
    L1,
    /// Square root of the sum of squares.
    L2,
    /// Log of the sum.
    LogSum,
    /// Log of the sum of exponentials.
    LogSumExp,
    /// Sum of squares.
    SumSquare,
}

impl ReduceKind {
    /// The ONNX operator name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Mean => "ReduceMean",
            ReduceKind::Sum => "ReduceSum",
            ReduceKind::Max => "ReduceMax",
            ReduceKind::Min => "ReduceMin",
            ReduceKind::Prod => "ReduceProd",
            ReduceKind::L1 => "ReduceL1",
            ReduceKind::L2 => "ReduceL2",
            ReduceKind::LogSum => "ReduceLogSum",
            ReduceKind::LogSumExp => "ReduceLogSumExp",
            ReduceKind::SumSquare => "ReduceSumSquare",
        }
    }
}

/// A reduction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReduceDesc {
    /// Which reduction.
    pub kind: ReduceKind,
    /// Axes to reduce (empty: all axes, unless `noop_with_empty_axes`).
    pub axes: Vec<i64>,
    /// Keep reduced axes as size 1.
    pub keepdims: bool,
    /// With empty `axes`, pass the input through unchanged.
    pub noop_with_empty_axes: bool,
}

impl ReduceDesc {
    /// Which input axes are reduced, as a mask.
    pub fn reduced_mask(&self, rank: usize) -> Result<Vec<bool>> {
        let mut mask = vec![self.axes.is_empty() && !self.noop_with_empty_axes; rank];
        for &a in &self.axes {
            mask[normalize_axis(a, rank)?] = true;
        }
        Ok(mask)
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let x = inputs[0];
        if x.dtype == crate::DataType::Bool
            && !matches!(self.kind, ReduceKind::Max | ReduceKind::Min)
        {
            return Err(CoreError::op("Reduce", "bool input"));
        }
        let mask = self.reduced_mask(x.shape.rank())?;
        let out: Vec<usize> = x
            .shape
            .dims()
            .iter()
            .zip(&mask)
            .filter_map(|(&d, &m)| match (m, self.keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }
}

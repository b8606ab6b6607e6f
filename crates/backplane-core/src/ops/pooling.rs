//! MaxPool with its Indices output, and MaxUnpool.

use super::{flat, AttrValue, PoolDesc, PoolKind};
use crate::{CoreError, DataType, Result, TensorInfo};

/// MaxPool that also outputs, for every output element, the flat index of the input element
/// it took (ONNX's `Indices` output). Outputs: Y (the input's type), Indices (i64).
///
/// An index counts over the whole input tensor `[N, C, D1, ...]`, padding excluded; with
/// `column_major` (ONNX `storage_order` 1) the spatial part of the index is column-major.
/// Ties go to the first tap in window order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaxPoolIndicesDesc {
    /// The pooling (its kind is always [`PoolKind::Max`]).
    pub pool: PoolDesc,
    /// Spatial indices in column-major order (ONNX `storage_order` 1).
    pub column_major: bool,
}

impl MaxPoolIndicesDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        if self.pool.kind != PoolKind::Max {
            return Err(CoreError::op(
                "MaxPool",
                "indices come from max pooling only",
            ));
        }
        let y = self.pool.infer(inputs)?;
        let Some(y) = y.into_iter().next() else {
            return Err(CoreError::op("MaxPool", "pooling produced no output"));
        };
        let indices = TensorInfo::new(DataType::I64, y.shape.dims().to_vec());
        Ok(vec![y, indices])
    }

    /// The attribute form (ONNX names).
    pub(crate) fn to_attrs(&self) -> Vec<(String, AttrValue)> {
        let w = &self.pool.window;
        vec![
            ("kernel_shape".into(), flat::usizes(&w.kernel)),
            ("strides".into(), flat::usizes(&w.strides)),
            ("dilations".into(), flat::usizes(&w.dilations)),
            ("pads".into(), flat::usizes(&w.pads)),
            (
                "auto_pad".into(),
                AttrValue::String(flat::auto_pad_name(w.auto_pad).into()),
            ),
            (
                "ceil_mode".into(),
                AttrValue::Int(i64::from(self.pool.ceil_mode)),
            ),
            (
                "storage_order".into(),
                AttrValue::Int(i64::from(self.column_major)),
            ),
        ]
    }

    /// The inverse of [`Self::to_attrs`].
    pub(crate) fn from_attrs(r: &flat::Reader<'_>) -> Result<Self> {
        let window = super::Window {
            kernel: r.usizes("kernel_shape")?,
            strides: r.usizes("strides")?,
            dilations: r.usizes("dilations")?,
            pads: r.usizes("pads")?,
            auto_pad: flat::auto_pad_from_name(r, r.string("auto_pad")?)?,
        };
        Ok(MaxPoolIndicesDesc {
            pool: PoolDesc {
                kind: PoolKind::Max,
                window,
                ceil_mode: r.flag("ceil_mode")?,
                count_include_pad: false,
            },
            column_major: r.flag("storage_order")?,
        })
    }
}

/// MaxUnpool: inputs X `[N, C, D1, ...]` and I (i64, the same shape). The values are
/// scattered into a zero tensor of shape `unpooled` (the shape the window gives,
/// `(D - 1) * stride + kernel - pads`) with `U.flat[I[j]] = X.flat[j]` (a later element wins
/// when indices repeat); the output, of shape `output` (ONNX's `output_shape` input, or
/// `unpooled`), holds U at its origin, zero elsewhere and cropped where it is smaller (the
/// specification leaves this open; the ONNX reference and test data place U so). An index
/// outside U is an error at execution.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaxUnpoolDesc {
    /// The shape the indices address, `[N, C, U1, ...]`.
    pub unpooled: Vec<usize>,
    /// The full output shape `[N, C, O1, ...]`.
    pub output: Vec<usize>,
}

impl MaxUnpoolDesc {
    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let err = |m: String| CoreError::op("MaxUnpool", m);
        let [x, i] = inputs else {
            return Err(err(format!("takes 2 inputs, got {}", inputs.len())));
        };
        if x.shape.rank() < 3 {
            return Err(err(format!("X must have rank 3 or more, got {}", x.shape)));
        }
        if i.dtype != DataType::I64 {
            return Err(err(format!("I must be an i64 tensor, got {}", i.dtype)));
        }
        if i.shape != x.shape {
            return Err(err(format!(
                "I has shape {}, X has shape {}",
                i.shape, x.shape
            )));
        }
        let xd = x.shape.dims();
        for (what, shape) in [("output", &self.output), ("unpooled", &self.unpooled)] {
            if shape.len() != xd.len() || shape[..2] != xd[..2] {
                return Err(err(format!(
                    "{what} shape {shape:?} does not match X {}",
                    x.shape
                )));
            }
        }
        Ok(vec![TensorInfo::new(x.dtype, self.output.clone())])
    }

    /// The attribute form.
    pub(crate) fn to_attrs(&self) -> Vec<(String, AttrValue)> {
        vec![
            ("unpooled_shape".into(), flat::usizes(&self.unpooled)),
            ("output_shape".into(), flat::usizes(&self.output)),
        ]
    }

    /// The inverse of [`Self::to_attrs`].
    pub(crate) fn from_attrs(r: &flat::Reader<'_>) -> Result<Self> {
        Ok(MaxUnpoolDesc {
            unpooled: r.usizes("unpooled_shape")?,
            output: r.usizes("output_shape")?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ops::Window;
    use crate::Op;

    fn f(d: &[usize]) -> TensorInfo {
        TensorInfo::new(DataType::F32, d.to_vec())
    }

    #[test]
    fn max_pool_indices_shapes() {
        let op = Op::MaxPoolWithIndices(MaxPoolIndicesDesc {
            pool: PoolDesc {
                kind: PoolKind::Max,
                window: Window {
                    kernel: vec![2, 2],
                    strides: vec![2, 2],
                    ..Window::default()
                },
                ceil_mode: false,
                count_include_pad: false,
            },
            column_major: true,
        });
        let out = op.infer(&[&f(&[1, 3, 4, 6])]).unwrap();
        assert_eq!(out[0].shape.dims(), &[1, 3, 2, 3]);
        assert_eq!(out[1].dtype, DataType::I64);
        assert_eq!(out[1].shape.dims(), &[1, 3, 2, 3]);
        assert!(op.infer(&[&f(&[4, 6])]).is_err());
    }

    #[test]
    fn max_unpool_checks_indices_and_output() {
        let op = Op::MaxUnpool(MaxUnpoolDesc {
            unpooled: vec![1, 2, 4, 4],
            output: vec![1, 2, 4, 4],
        });
        let i = TensorInfo::new(DataType::I64, vec![1, 2, 2, 2]);
        let out = op.infer(&[&f(&[1, 2, 2, 2]), &i]).unwrap();
        assert_eq!(out[0].shape.dims(), &[1, 2, 4, 4]);
        let bad_i = TensorInfo::new(DataType::I32, vec![1, 2, 2, 2]);
        assert!(op.infer(&[&f(&[1, 2, 2, 2]), &bad_i]).is_err());
        assert!(op.infer(&[&f(&[1, 3, 2, 2]), &i]).is_err());
    }
}

//! Signal processing: DFT and STFT (the window functions and MelWeightMatrix are constants
//! the importer computes).
//!
//! Complex tensors are real tensors with a last axis of 2 (real, imaginary); a real signal
//! may be given with a last axis of 1.

use super::flat::Reader;
use super::AttrValue;
use crate::{CoreError, Result, TensorInfo};

/// DFT along one axis: input [.., n_in, .., 1 or 2] → output [.., bins, .., 2].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DftDesc {
    /// The transformed axis (resolved: never the last, complex, axis).
    pub axis: usize,
    /// The transform length: the signal is cut or zero-padded to it.
    pub length: usize,
    /// The inverse transform (conjugate kernel, divided by the length).
    pub inverse: bool,
    /// Only the bins 0..=length/2 are produced.
    pub onesided: bool,
}

impl DftDesc {
    /// The number of output bins along the axis.
    pub fn bins(&self) -> usize {
        if self.onesided {
            self.length / 2 + 1
        } else {
            self.length
        }
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let x = inputs[0];
        let dims = complex_dims("DFT", x)?;
        if self.axis + 1 >= dims.len() {
            return Err(CoreError::op(
                "DFT",
                format!("axis {} is not a signal axis of {}", self.axis, x.shape),
            ));
        }
        if self.length == 0 {
            return Err(CoreError::op("DFT", "the DFT length must be positive"));
        }
        let mut out = dims.to_vec();
        out[self.axis] = self.bins();
        let last = out.len() - 1;
        out[last] = 2;
        Ok(vec![TensorInfo::new(x.dtype, out)])
    }

    pub(crate) fn to_attrs(self) -> Vec<(String, AttrValue)> {
        vec![
            ("axis".into(), AttrValue::Int(self.axis as i64)),
            ("dft_length".into(), AttrValue::Int(self.length as i64)),
            ("inverse".into(), AttrValue::Int(i64::from(self.inverse))),
            ("onesided".into(), AttrValue::Int(i64::from(self.onesided))),
        ]
    }

    pub(crate) fn from_attrs(r: &Reader<'_>) -> Result<Self> {
        Ok(DftDesc {
            axis: usize_attr(r, "axis")?,
            length: usize_attr(r, "dft_length")?,
            inverse: r.flag("inverse")?,
            onesided: r.flag("onesided")?,
        })
    }
}

/// STFT: signal [batch, length, 1 or 2] (and an optional window `[frame_length]`) → output
/// [batch, frames, bins, 2], frames = 1 + (length - frame_length) / frame_step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StftDesc {
    /// Samples between the starts of two frames.
    pub frame_step: usize,
    /// Samples per frame (the DFT length).
    pub frame_length: usize,
    /// Only the bins 0..=frame_length/2 are produced.
    pub onesided: bool,
}

impl StftDesc {
    /// The number of output bins per frame.
    pub fn bins(&self) -> usize {
        if self.onesided {
            self.frame_length / 2 + 1
        } else {
            self.frame_length
        }
    }

    pub(crate) fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        const OP: &str = "STFT";
        let x = inputs[0];
        let dims = complex_dims(OP, x)?;
        if dims.len() != 3 {
            return Err(CoreError::op(
                OP,
                format!(
                    "the signal must be [batch, length, 1 or 2], got {}",
                    x.shape
                ),
            ));
        }
        if self.frame_step == 0 || self.frame_length == 0 || self.frame_length > dims[1] {
            return Err(CoreError::op(
                OP,
                format!(
                    "frame_step {} and frame_length {} do not fit a signal of length {}",
                    self.frame_step, self.frame_length, dims[1]
                ),
            ));
        }
        if let Some(w) = inputs.get(1) {
            if w.dtype != x.dtype || w.shape.dims() != [self.frame_length] {
                return Err(CoreError::op(
                    OP,
                    format!(
                        "the window must be {} [{}], got {} {}",
                        x.dtype, self.frame_length, w.dtype, w.shape
                    ),
                ));
            }
        }
        let frames = 1 + (dims[1] - self.frame_length) / self.frame_step;
        Ok(vec![TensorInfo::new(
            x.dtype,
            vec![dims[0], frames, self.bins(), 2],
        )])
    }

    pub(crate) fn to_attrs(self) -> Vec<(String, AttrValue)> {
        vec![
            ("frame_step".into(), AttrValue::Int(self.frame_step as i64)),
            (
                "frame_length".into(),
                AttrValue::Int(self.frame_length as i64),
            ),
            ("onesided".into(), AttrValue::Int(i64::from(self.onesided))),
        ]
    }

    pub(crate) fn from_attrs(r: &Reader<'_>) -> Result<Self> {
        Ok(StftDesc {
            frame_step: usize_attr(r, "frame_step")?,
            frame_length: usize_attr(r, "frame_length")?,
            onesided: r.flag("onesided")?,
        })
    }
}

/// A non-negative integer attribute.
pub(crate) fn usize_attr(r: &Reader<'_>, name: &str) -> Result<usize> {
    let v = r.int(name)?;
    usize::try_from(v).map_err(|_| r.bad(name, v))
}

/// The dims of a float tensor whose last axis is 1 (real) or 2 (complex).
fn complex_dims<'a>(op: &'static str, x: &'a TensorInfo) -> Result<&'a [usize]> {
    let dims = x.shape.dims();
    if !x.dtype.is_float() {
        return Err(CoreError::op(
            op,
            format!("the input must be a float tensor, got {}", x.dtype),
        ));
    }
    match dims.last() {
        Some(1 | 2) if dims.len() >= 2 => Ok(dims),
        _ => Err(CoreError::op(
            op,
            format!(
                "the input must have a last axis of 1 (real) or 2 (complex), got {}",
                x.shape
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{DataType, Op};

    #[test]
    fn dft_output_shapes() {
        let x = TensorInfo::new(DataType::F32, vec![3, 10, 1]);
        let op = Op::Dft(DftDesc {
            axis: 1,
            length: 10,
            inverse: false,
            onesided: true,
        });
        assert_eq!(op.infer(&[&x]).unwrap()[0].shape.dims(), &[3, 6, 2]);
        let op = Op::Dft(DftDesc {
            axis: 0,
            length: 4,
            inverse: true,
            onesided: false,
        });
        assert_eq!(op.infer(&[&x]).unwrap()[0].shape.dims(), &[4, 10, 2]);
        let bad_axis = Op::Dft(DftDesc {
            axis: 2,
            length: 4,
            ..DftDesc::default()
        });
        assert!(bad_axis.infer(&[&x]).is_err());
        let not_complex = TensorInfo::new(DataType::F32, vec![3, 10, 3]);
        assert!(op.infer(&[&not_complex]).is_err());
    }

    #[test]
    fn stft_output_shapes() {
        let x = TensorInfo::new(DataType::F32, vec![1, 128, 1]);
        let desc = StftDesc {
            frame_step: 8,
            frame_length: 16,
            onesided: true,
        };
        let op = Op::Stft(desc);
        assert_eq!(op.infer(&[&x]).unwrap()[0].shape.dims(), &[1, 15, 9, 2]);
        let w = TensorInfo::new(DataType::F32, vec![16]);
        assert!(op.infer(&[&x, &w]).is_ok());
        let w_bad = TensorInfo::new(DataType::F32, vec![15]);
        assert!(op.infer(&[&x, &w_bad]).is_err());
        let too_long = Op::Stft(StftDesc {
            frame_length: 200,
            ..desc
        });
        assert!(too_long.infer(&[&x]).is_err());
    }
}

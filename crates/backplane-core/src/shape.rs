//! Tensor shapes and the index arithmetic around them.

use crate::{CoreError, Result};
use std::fmt;

/// The dimensions of a tensor, outermost first. A rank-0 shape is a scalar.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }

    /// The scalar (rank 0) shape.
    pub fn scalar() -> Self {
        Shape(Vec::new())
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements, checked for overflow.
    pub fn num_elements(&self) -> Result<usize> {
        checked_product(&self.0).ok_or_else(|| CoreError::SizeOverflow {
            shape: self.0.clone(),
        })
    }

    /// Number of elements; callers must have validated the shape (overflow saturates).
    pub fn elements(&self) -> usize {
        checked_product(&self.0).unwrap_or(usize::MAX)
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        strides_of(&self.0)
    }

    /// Turn a possibly negative ONNX axis into an index in `0..rank`.
    pub fn axis(&self, axis: i64) -> Result<usize> {
        normalize_axis(axis, self.rank())
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("x")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Product of dimensions, `None` on overflow.
pub fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Row-major strides in elements for `dims`.
pub fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(dims[i + 1]);
    }
    strides
}

/// Turn a possibly negative axis into an index in `0..rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(CoreError::op(
            "axis",
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Numpy-style broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(CoreError::op(
                "broadcast",
                format!("shapes {a:?} and {b:?} cannot be broadcast together"),
            ));
        };
    }
    Ok(out)
}

/// Strides (in elements) to read a tensor of shape `from` as if it had been broadcast to `to`:
/// broadcast dimensions get stride 0. `from` must be broadcastable to `to`.
pub fn broadcast_strides(from: &[usize], to: &[usize]) -> Vec<usize> {
    let own = strides_of(from);
    let offset = to.len() - from.len();
    (0..to.len())
        .map(|i| {
            if i < offset || from[i - offset] == 1 {
                0
            } else {
                own[i - offset]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes(&[3, 1], &[1, 4]).unwrap(), vec![3, 4]);
        assert_eq!(broadcast_shapes(&[2, 3, 4], &[4]).unwrap(), vec![2, 3, 4]);
        assert_eq!(broadcast_shapes(&[], &[5]).unwrap(), vec![5]);
        assert!(broadcast_shapes(&[3], &[4]).is_err());
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
    }

    #[test]
    fn axes_and_sizes() {
        assert_eq!(normalize_axis(-1, 4).unwrap(), 3);
        assert!(normalize_axis(4, 4).is_err());
        assert!(normalize_axis(-5, 4).is_err());
        assert_eq!(Shape::new(vec![2, 3, 4]).strides(), vec![12, 4, 1]);
        assert!(Shape::new(vec![usize::MAX, 2]).num_elements().is_err());
        assert_eq!(Shape::scalar().num_elements().unwrap(), 1);
        assert_eq!(
            Shape::new(vec![1, 3, 224, 224]).to_string(),
            "[1x3x224x224]"
        );
    }
}

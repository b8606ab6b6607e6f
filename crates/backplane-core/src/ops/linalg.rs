//! Linear algebra on the last two axes: Det.

use crate::{CoreError, Result, TensorInfo};

/// Det: X [*, M, M] (float) → [*].
pub(crate) fn infer_det(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let d = x.shape.dims();
    if !x.dtype.is_float() || d.len() < 2 || d[d.len() - 1] != d[d.len() - 2] {
        return Err(CoreError::op(
            "Det",
            format!("X must be float [*, M, M], got {}{}", x.dtype, x.shape),
        ));
    }
    Ok(vec![TensorInfo::new(x.dtype, d[..d.len() - 2].to_vec())])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::{DataType, Op, TensorInfo};

    #[test]
    fn det_drops_the_matrix_axes() {
        let x = TensorInfo::new(DataType::F32, vec![2, 3, 3]);
        assert_eq!(Op::Det.infer(&[&x]).unwrap()[0].shape.dims(), &[2]);
        let bad = TensorInfo::new(DataType::F32, vec![3, 2]);
        assert!(Op::Det.infer(&[&bad]).is_err());
        let int = TensorInfo::new(DataType::I32, vec![2, 2]);
        assert!(Op::Det.infer(&[&int]).is_err());
    }
}

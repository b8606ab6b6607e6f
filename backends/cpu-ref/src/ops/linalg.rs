//! Linear algebra on the last two axes: Det (LU decomposition with partial pivoting, in f64).

use super::cast::{write_scalars, Scalar};
use crate::Result;
use backplane_core::{TensorView, TensorViewMut};

/// The determinant of one row-major n×n matrix.
fn determinant(mut a: Vec<f64>, n: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..n {
        // The largest pivot in this column keeps the elimination stable.
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .unwrap_or(col);
        if a[pivot * n + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..n {
                a.swap(pivot * n + k, col * n + k);
            }
            det = -det;
        }
        let p = a[col * n + col];
        det *= p;
        for row in col + 1..n {
            let f = a[row * n + col] / p;
            for k in col..n {
                a[row * n + k] -= f * a[col * n + k];
            }
        }
    }
    det
}

/// Det: one determinant per matrix of the last two axes.
pub(crate) fn det(x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let dims = x.dims();
    let n = dims[dims.len() - 1];
    let xs = x.to_f64_vec();
    let out: Vec<Scalar> = if n == 0 {
        // The determinant of an empty matrix is 1.
        vec![Scalar::Float(1.0); dims[..dims.len() - 2].iter().product()]
    } else {
        xs.chunks_exact(n * n)
            .map(|m| Scalar::Float(determinant(m.to_vec(), n)))
            .collect()
    };
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{assert_close, eval_f32, f32s};
    use backplane_core::Op;

    #[test]
    fn determinants_with_pivoting_and_batches() {
        // [[0, 1], [2, 3]] needs a row swap: det = -2; [[2, 0, 0], [0, 3, 0], [1, 1, 4]] = 24.
        let x = f32s(&[2, 2], &[0.0, 1.0, 2.0, 3.0]);
        assert_close(&eval_f32(&Op::Det, &[&x]), &[-2.0], 1e-6);
        let x = f32s(&[3, 3], &[2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 1.0, 1.0, 4.0]);
        assert_close(&eval_f32(&Op::Det, &[&x]), &[24.0], 1e-6);
        // A batch of two; the second matrix is singular.
        let x = f32s(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 2.0, 4.0]);
        assert_close(&eval_f32(&Op::Det, &[&x]), &[-2.0, 0.0], 1e-6);
    }
}

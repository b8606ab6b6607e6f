//! MaxUnpool: scatter pooled values back to the positions their indices name.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::{for_each_index, product};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::MaxUnpoolDesc;
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// U = zeros(unpooled), `U.flat[I[j]] = X.flat[j]` in order (a later element wins a repeated
/// index); Y = U placed at the origin of a zero tensor of the output shape (cropped where the
/// output is smaller). An index outside U is an error.
pub(crate) fn max_unpool(
    desc: &MaxUnpoolDesc,
    x: &TensorView<'_>,
    indices: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let xs = read_scalars(x)?;
    let is = indices.as_slice::<i64>()?;
    let size = product(&desc.unpooled);
    let mut unpooled = vec![Scalar::Int(0); size];
    for (&index, &value) in is.iter().zip(&xs) {
        let slot = usize::try_from(index)
            .ok()
            .and_then(|i| unpooled.get_mut(i))
            .ok_or_else(|| {
                BackendError::Other(format!(
                    "MaxUnpool: index {index} is outside the unpooled tensor of {size} elements"
                ))
            })?;
        *slot = value;
    }
    if desc.output == desc.unpooled {
        return write_scalars(y, &unpooled);
    }
    let mut out = vec![Scalar::Int(0); product(&desc.output)];
    let out_strides = strides_of(&desc.output);
    let mut from = 0;
    for_each_index(&desc.unpooled, |at| {
        let inside = at.iter().zip(&desc.output).all(|(i, d)| i < d);
        if inside {
            let to: usize = at.iter().zip(&out_strides).map(|(i, s)| i * s).sum();
            if let (Some(slot), Some(v)) = (out.get_mut(to), unpooled.get(from)) {
                *slot = *v;
            }
        }
        from += 1;
    });
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{eval1, f32s};
    use backplane_core::ops::MaxUnpoolDesc;
    use backplane_core::{Op, Tensor};

    #[test]
    fn scatters_to_the_indices() {
        // 2x2 pooled values of a 4x4 plane, at (1,1) (0,3) (3,0) (2,2).
        let x = f32s(&[1, 1, 2, 2], &[5.0, 7.0, 13.0, 15.0]);
        let i = Tensor::from_vec(vec![1, 1, 2, 2], vec![5i64, 3, 12, 10]).unwrap();
        let mut desc = MaxUnpoolDesc {
            unpooled: vec![1, 1, 4, 4],
            output: vec![1, 1, 4, 4],
        };
        let y = eval1(&Op::MaxUnpool(desc.clone()), &[&x, &i]);
        let mut want = vec![0.0; 16];
        for (at, v) in [(5, 5.0), (3, 7.0), (12, 13.0), (10, 15.0)] {
            want[at] = v;
        }
        assert_eq!(y.to_f64_vec(), want);
        // A larger output holds the 4x4 block at its origin: (r, c) moves to r * 5 + c.
        desc.output = vec![1, 1, 5, 5];
        let y = eval1(&Op::MaxUnpool(desc.clone()), &[&x, &i]);
        let mut want = vec![0.0; 25];
        for (at, v) in [(6, 5.0), (3, 7.0), (15, 13.0), (12, 15.0)] {
            want[at] = v;
        }
        assert_eq!(y.to_f64_vec(), want);
        // A smaller one crops it: of (1,1) (0,3) (3,0) (2,2), a 3x3 output keeps (1,1) and (2,2).
        desc.output = vec![1, 1, 3, 3];
        let y = eval1(&Op::MaxUnpool(desc), &[&x, &i]);
        let mut want = vec![0.0; 9];
        want[4] = 5.0;
        want[8] = 15.0;
        assert_eq!(y.to_f64_vec(), want);
    }

    #[test]
    fn an_index_outside_the_output_is_an_error() {
        let x = f32s(&[1, 1, 1, 2], &[1.0, 2.0]);
        let op = Op::MaxUnpool(MaxUnpoolDesc {
            unpooled: vec![1, 1, 2, 2],
            output: vec![1, 1, 2, 2],
        });
        for bad in [4i64, -1] {
            let i = Tensor::from_vec(vec![1, 1, 1, 2], vec![0i64, bad]).unwrap();
            assert!(evaluate(&op, &[&x, &i]).is_err());
        }
    }
}

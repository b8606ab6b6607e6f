//! Matrix products (f32, accumulated in f64): numpy-style MatMul and Gemm.

use super::indexing::broadcast_offsets;
use super::unsupported;
use crate::Result;
use backplane_core::dtype::Element;
use backplane_core::ops::GemmDesc;
use backplane_core::shape::broadcast_shapes;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// MatMul with numpy semantics: a 1-D `a` is a row `[1, k]` and a 1-D `b` a column `[k, 1]`
/// (the added axis is dropped from the result); leading "batch" axes broadcast. f32 sums in
/// f64; i32 and i64 wrap on overflow.
pub(crate) fn matmul(
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    match a.info.dtype {
        DataType::F32 => matmul_typed(
            a,
            b,
            y,
            0f64,
            |acc, p: f32, q: f32| acc + f64::from(p) * f64::from(q),
            |acc| acc as f32,
        ),
        DataType::I32 => matmul_typed(
            a,
            b,
            y,
            0i32,
            |acc, p: i32, q: i32| acc.wrapping_add(p.wrapping_mul(q)),
            |acc| acc,
        ),
        DataType::I64 => matmul_typed(
            a,
            b,
            y,
            0i64,
            |acc, p: i64, q: i64| acc.wrapping_add(p.wrapping_mul(q)),
            |acc| acc,
        ),
        other => Err(unsupported("MatMul", other)),
    }
}

/// MatMul for element type `T`, accumulating dot products in `A` from `zero` with
/// `mul_add(acc, a, b)` and converting the sum back with `finish`.
fn matmul_typed<T: Element, A: Copy>(
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
    zero: A,
    mul_add: impl Fn(A, T, T) -> A,
    finish: impl Fn(A) -> T,
) -> Result<()> {
    let a_dims: Vec<usize> = match a.dims() {
        [k] => vec![1, *k],
        dims => dims.to_vec(),
    };
    let b_dims: Vec<usize> = match b.dims() {
        [k] => vec![*k, 1],
        dims => dims.to_vec(),
    };
    let (a_batch, a_mat) = a_dims.split_at(a_dims.len() - 2);
    let (b_batch, b_mat) = b_dims.split_at(b_dims.len() - 2);
    let (m, k, n) = (a_mat[0], a_mat[1], b_mat[1]);
    let batch = broadcast_shapes(a_batch, b_batch)?;
    // Which matrix of a and of b each output matrix multiplies.
    let a_index = broadcast_offsets(a_batch, &batch);
    let b_index = broadcast_offsets(b_batch, &batch);

    let (xa, xb) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
    let ys = y.as_mut_slice::<T>()?;
    for (out_matrix, (&ai, &bi)) in a_index.iter().zip(&b_index).enumerate() {
        let am = &xa[ai * m * k..(ai + 1) * m * k];
        let bm = &xb[bi * k * n..(bi + 1) * k * n];
        let ym = &mut ys[out_matrix * m * n..(out_matrix + 1) * m * n];
        for i in 0..m {
            for j in 0..n {
                let dot = (0..k).fold(zero, |acc, p| mul_add(acc, am[i * k + p], bm[p * n + j]));
                ym[i * n + j] = finish(dot);
            }
        }
    }
    Ok(())
}

/// Gemm: `Y = alpha * op(A) * op(B) + beta * C`, with op() an optional transpose and C
/// (optional) broadcast to `[M, N]`.
pub(crate) fn gemm(
    desc: &GemmDesc,
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    c: Option<&TensorView<'_>>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (ad, bd) = (a.dims(), b.dims());
    let (xa, xb) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
    let (m, k) = if desc.trans_a {
        (ad[1], ad[0])
    } else {
        (ad[0], ad[1])
    };
    let n = if desc.trans_b { bd[0] } else { bd[1] };
    // Element (row, col) of op(A) and op(B), reading the stored layout.
    let a_at = |i: usize, p: usize| {
        if desc.trans_a {
            xa[p * m + i]
        } else {
            xa[i * k + p]
        }
    };
    let b_at = |p: usize, j: usize| {
        if desc.trans_b {
            xb[j * k + p]
        } else {
            xb[p * n + j]
        }
    };
    let c_terms: Option<(&[f32], Vec<usize>)> = match c {
        Some(c) => Some((c.as_slice::<f32>()?, broadcast_offsets(c.dims(), &[m, n]))),
        None => None,
    };
    let (alpha, beta) = (f64::from(desc.alpha), f64::from(desc.beta));
    let ys = y.as_mut_slice::<f32>()?;
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| f64::from(a_at(i, p)) * f64::from(b_at(p, j)))
                .sum();
            let mut v = alpha * dot;
            if let Some((cs, c_index)) = &c_terms {
                v += beta * f64::from(cs[c_index[i * n + j]]);
            }
            ys[i * n + j] = v as f32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{eval1, f32s};
    use backplane_core::ops::GemmDesc;
    use backplane_core::Op;

    fn mm(a: (&[usize], &[f32]), b: (&[usize], &[f32])) -> (Vec<usize>, Vec<f32>) {
        let y = eval1(&Op::MatMul, &[&f32s(a.0, a.1), &f32s(b.0, b.1)]);
        (
            y.shape().dims().to_vec(),
            y.as_slice::<f32>().unwrap().to_vec(),
        )
    }

    const A23: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    const B32: [f32; 6] = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];

    #[test]
    fn matrix_times_matrix_and_vectors() {
        // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]] = [[58,64],[139,154]].
        assert_eq!(
            mm((&[2, 3], &A23), (&[3, 2], &B32)),
            (vec![2, 2], vec![58.0, 64.0, 139.0, 154.0])
        );
        // Vector x matrix: [1,2,3] x B = [58, 64], shape [2].
        assert_eq!(
            mm((&[3], &A23[..3]), (&[3, 2], &B32)),
            (vec![2], vec![58.0, 64.0])
        );
        // Matrix x vector: A x [1,1,1] = row sums [6, 15].
        assert_eq!(
            mm((&[2, 3], &A23), (&[3], &[1.0, 1.0, 1.0])),
            (vec![2], vec![6.0, 15.0])
        );
        // Vector . vector = scalar: 1*4 + 2*5 + 3*6 = 32.
        assert_eq!(
            mm((&[3], &A23[..3]), (&[3], &A23[3..])),
            (vec![], vec![32.0])
        );
    }

    #[test]
    fn batched_matmul_broadcasts_batch_axes() {
        // a: [2,1,2] = two row vectors [1,2] and [3,4]; b: [2,1] = column [10, 1].
        // Result [2,1,1]: 1*10+2*1 = 12, 3*10+4*1 = 34.
        assert_eq!(
            mm((&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]), (&[2, 1], &[10.0, 1.0])),
            (vec![2, 1, 1], vec![12.0, 34.0])
        );
        // a: [3,1,1,2] and b: [1,2,2,1] broadcast to batch [3,2]:
        // a_i = [i+1, 1]; b_j = [[1],[j]] → a_i . b_j = i + 1 + j.
        let a = [1.0, 1.0, 2.0, 1.0, 3.0, 1.0];
        let b = [1.0, 0.0, 1.0, 1.0];
        assert_eq!(
            mm((&[3, 1, 1, 2], &a), (&[1, 2, 2, 1], &b)),
            (vec![3, 2, 1, 1], vec![1.0, 2.0, 2.0, 3.0, 3.0, 4.0])
        );
        // A 1-D b is a column for every batch: [2,2,3] x [3] gives [2,2].
        let (dims, v) = mm(
            (
                &[2, 2, 3],
                &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
            ),
            (&[3], &[5.0, 6.0, 7.0]),
        );
        assert_eq!((dims, v), (vec![2, 2], vec![5.0, 6.0, 7.0, 18.0]));
        let bad = evaluate(&Op::MatMul, &[&f32s(&[2, 3], &A23), &f32s(&[2, 3], &A23)]);
        assert!(bad.is_err());
    }

    #[test]
    fn integer_matmul_wraps() {
        // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]] in i32 and i64.
        let a = backplane_core::Tensor::from_vec(vec![2, 2], vec![1i32, 2, 3, 4]).unwrap();
        let b = backplane_core::Tensor::from_vec(vec![2, 2], vec![5i32, 6, 7, 8]).unwrap();
        let y = eval1(&Op::MatMul, &[&a, &b]);
        assert_eq!(y.as_slice::<i32>().unwrap(), &[19, 22, 43, 50]);
        let a = backplane_core::Tensor::from_vec(vec![3], vec![1i64, -2, 3]).unwrap();
        let b = backplane_core::Tensor::from_vec(vec![3], vec![i64::MAX, 1, 0]).unwrap();
        // MAX - 2 (no wrap), a 1-D . 1-D scalar.
        let y = eval1(&Op::MatMul, &[&a, &b]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[i64::MAX - 2]);
        // 2 * i32::MAX wraps to -2.
        let a = backplane_core::Tensor::from_vec(vec![1, 1], vec![2i32]).unwrap();
        let b = backplane_core::Tensor::from_vec(vec![1, 1], vec![i32::MAX]).unwrap();
        assert_eq!(
            eval1(&Op::MatMul, &[&a, &b]).as_slice::<i32>().unwrap(),
            &[-2]
        );
    }

    fn gemm(desc: GemmDesc, inputs: &[&backplane_core::Tensor]) -> Vec<f32> {
        eval1(&Op::Gemm(desc), inputs)
            .as_slice::<f32>()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn gemm_transposes_scales_and_broadcasts_c() {
        let a = f32s(&[2, 3], &A23);
        let b = f32s(&[3, 2], &B32);
        let plain = GemmDesc::default();
        // No C: just A x B.
        assert_eq!(gemm(plain, &[&a, &b]), vec![58.0, 64.0, 139.0, 154.0]);
        // alpha 0.5, beta 2, C a row [1, -1] broadcast over rows.
        let c_row = f32s(&[2], &[1.0, -1.0]);
        let scaled = GemmDesc {
            alpha: 0.5,
            beta: 2.0,
            ..plain
        };
        assert_eq!(
            gemm(scaled, &[&a, &b, &c_row]),
            vec![31.0, 30.0, 71.5, 75.0]
        );
        // C a column [2,1] and a scalar.
        let c_col = f32s(&[2, 1], &[100.0, 200.0]);
        assert_eq!(
            gemm(plain, &[&a, &b, &c_col]),
            vec![158.0, 164.0, 339.0, 354.0]
        );
        let c_scalar = backplane_core::Tensor::scalar(1.0f32);
        assert_eq!(
            gemm(plain, &[&a, &b, &c_scalar]),
            vec![59.0, 65.0, 140.0, 155.0]
        );
        // Transposed storage gives the same product: A^T stored [3,2], B^T stored [2,3].
        let at = f32s(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let bt = f32s(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]);
        let both = GemmDesc {
            trans_a: true,
            trans_b: true,
            ..plain
        };
        assert_eq!(gemm(both, &[&at, &bt]), vec![58.0, 64.0, 139.0, 154.0]);
        let only_b = GemmDesc {
            trans_b: true,
            ..plain
        };
        assert_eq!(gemm(only_b, &[&a, &bt]), vec![58.0, 64.0, 139.0, 154.0]);
        // C that does not broadcast to [2,2] is rejected.
        let c_bad = f32s(&[3], &[1.0, 2.0, 3.0]);
        assert!(evaluate(&Op::Gemm(plain), &[&a, &b, &c_bad]).is_err());
    }
}

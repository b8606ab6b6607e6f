//! Einsum: every combination of label values is visited once; the product of the inputs'
//! elements it selects adds to the output element of its output labels (f64 accumulation;
//! integers exact below 2^53). A size-1 ellipsis axis broadcasts.

use super::cast::{read_scalars, write_scalars, Scalar};
use crate::Result;
use backplane_core::ops::EinsumDesc;
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// Einsum over `inputs`.
pub(crate) fn einsum(
    desc: &EinsumDesc,
    inputs: &[TensorView<'_>],
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|v| v.dims()).collect();
    let plan = desc.plan(&shapes)?;
    // Visit output labels first (outermost), then the summed ones.
    let mut order = plan.output.clone();
    for labels in &plan.inputs {
        for &l in labels {
            if !order.contains(&l) {
                order.push(l);
            }
        }
    }
    let sizes: Vec<usize> = order.iter().map(|&l| plan.sizes[l]).collect();
    // Per input: the stride each visited label moves it by (0 where it broadcasts or is
    // absent); a label repeated in one input (a diagonal) adds both strides.
    let steps: Vec<Vec<usize>> = plan
        .inputs
        .iter()
        .zip(&shapes)
        .map(|(labels, dims)| {
            let strides = strides_of(dims);
            order
                .iter()
                .map(|&l| {
                    labels
                        .iter()
                        .zip(dims.iter())
                        .zip(&strides)
                        .filter(|((&m, &d), _)| m == l && d != 1)
                        .map(|(_, &s)| s)
                        .sum()
                })
                .collect()
        })
        .collect();
    let values: Vec<Vec<Scalar>> = inputs.iter().map(read_scalars).collect::<Result<_>>()?;
    let integer = values
        .first()
        .and_then(|v| v.first())
        .is_some_and(|v| matches!(v, Scalar::Int(_)));
    let outputs: usize = sizes[..plan.output.len()].iter().product();
    let inner =
        backplane_core::shape::checked_product(&sizes[plan.output.len()..]).ok_or_else(|| {
            backplane_backend_api::BackendError::Execution(
                "Einsum: too many products to sum".into(),
            )
        })?;
    let mut out = Vec::with_capacity(outputs);
    let mut index = vec![0usize; order.len()];
    for _ in 0..outputs {
        let mut acc = 0f64;
        for _ in 0..inner {
            let mut product = 1f64;
            for (vals, st) in values.iter().zip(&steps) {
                let at: usize = index.iter().zip(st).map(|(i, s)| i * s).sum();
                product *= vals[at].to_f64();
            }
            acc += product;
            // Advance the summed labels (the innermost positions of `index`).
            for k in (plan.output.len()..order.len()).rev() {
                index[k] += 1;
                if index[k] < sizes[k] {
                    break;
                }
                index[k] = 0;
            }
        }
        out.push(if integer {
            Scalar::Int(acc as i64)
        } else {
            Scalar::Float(acc)
        });
        for k in (0..plan.output.len()).rev() {
            index[k] += 1;
            if index[k] < sizes[k] {
                break;
            }
            index[k] = 0;
        }
    }
    write_scalars(y, &out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval_f32, f32s};
    use backplane_core::ops::EinsumDesc;
    use backplane_core::Op;

    fn op(eq: &str) -> Op {
        Op::Einsum(EinsumDesc {
            equation: eq.into(),
        })
    }

    #[test]
    fn matmul_transpose_trace_diagonal_and_sums() {
        let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f32s(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        assert_eq!(
            eval_f32(&op("ij,jk->ik"), &[&a, &b]),
            [4.0, 5.0, 10.0, 11.0]
        );
        assert_eq!(
            eval_f32(&op("ij->ji"), &[&a]),
            [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        assert_eq!(eval_f32(&op("ij->i"), &[&a]), [6.0, 15.0]);
        assert_eq!(eval_f32(&op("ij->"), &[&a]), [21.0]);
        let sq = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(eval_f32(&op("ii"), &[&sq]), [5.0]);
        assert_eq!(eval_f32(&op("ii->i"), &[&sq]), [1.0, 4.0]);
        let v = f32s(&[3], &[1.0, 2.0, 3.0]);
        assert_eq!(eval_f32(&op("i,i"), &[&v, &v]), [14.0]);
        // Ellipsis broadcasting: [2, 1, 2] · [3, 2] → [2, 1, 3]... with a batch of 2.
        let x = f32s(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
        let w = f32s(&[2, 3], &[1.0, 0.0, 1.0, 0.0, 1.0, 1.0]);
        assert_eq!(
            eval_f32(&op("...j,jk->...k"), &[&x, &w]),
            [1.0, 2.0, 3.0, 3.0, 4.0, 7.0]
        );
    }
}

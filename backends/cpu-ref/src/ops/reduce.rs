//! Reductions (ReduceSum, ReduceMean, ...) over any set of axes, for f32, i32 and i64.
//!
//! Each input element is assigned to the output element it reduces into; every output then
//! reduces its list of values. f32 reduces in f64. Integers reduce in i64 with wrap-around
//! (Sum, Prod, L1, SumSquare; the final conversion to i32 wraps the same way), Mean truncates
//! toward zero, and the kinds whose result is not an integer (L2, LogSum, LogSumExp) are computed
//! in f64 and truncated toward zero.
//!
//! Over an empty set: Sum, L1, L2, SumSquare give 0, Prod 1, Max the lowest value (-inf, or the
//! type's minimum), Min the highest, LogSum and LogSumExp -inf, float Mean NaN, and integer
//! Mean is an error. With `noop_with_empty_axes` and no axes every output reduces just its own
//! element, so e.g. SumSquare squares and L1 takes the absolute value (as the ONNX reference).

use super::cast::{write_scalars, Scalar};
use super::indexing::{product, strided_offsets};
use super::unsupported;
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{ReduceDesc, ReduceKind};
use backplane_core::shape::strides_of;
use backplane_core::{DataType, TensorView, TensorViewMut};

/// Reduce.
pub(crate) fn reduce(
    desc: &ReduceDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let mask = desc.reduced_mask(dims.len())?;
    // The output in keepdims layout; stepping along a reduced axis stays on the same output.
    let kept: Vec<usize> = dims
        .iter()
        .zip(&mask)
        .map(|(&d, &reduced)| if reduced { 1 } else { d })
        .collect();
    let out_strides: Vec<usize> = strides_of(&kept)
        .into_iter()
        .zip(&mask)
        .map(|(s, &reduced)| if reduced { 0 } else { s })
        .collect();
    let output_of = strided_offsets(dims, &out_strides);
    let outputs = product(&kept);

    let kind = desc.kind;
    let results: Vec<Scalar> = match x.info.dtype {
        DataType::F32 | DataType::F64 => {
            let values: Vec<f64> = x.to_f64_vec();
            group_by_output(values, &output_of, outputs)
                .iter()
                .map(|g| Scalar::Float(reduce_floats(kind, g)))
                .collect()
        }
        DataType::I32 => {
            let values: Vec<i64> = x.as_slice::<i32>()?.iter().map(|&v| v.into()).collect();
            group_by_output(values, &output_of, outputs)
                .iter()
                .map(|g| reduce_ints(kind, g, i32::MIN.into(), i32::MAX.into()))
                .collect::<Result<_>>()?
        }
        DataType::I64 => {
            let values = x.as_slice::<i64>()?.to_vec();
            group_by_output(values, &output_of, outputs)
                .iter()
                .map(|g| reduce_ints(kind, g, i64::MIN, i64::MAX))
                .collect::<Result<_>>()?
        }
        DataType::Bool if matches!(kind, ReduceKind::Max | ReduceKind::Min) => {
            // Max is "any", Min is "all"; an empty reduction gives false for max, true for min.
            let values: Vec<bool> = x.as_slice::<u8>()?.iter().map(|&v| v != 0).collect();
            group_by_output(values, &output_of, outputs)
                .iter()
                .map(|g| {
                    Scalar::Bool(if kind == ReduceKind::Max {
                        g.iter().any(|&b| b)
                    } else {
                        g.iter().all(|&b| b)
                    })
                })
                .collect()
        }
        other => return Err(unsupported(kind.name(), other)),
    };
    write_scalars(y, &results)
}

/// The values reduced into each output: `values[i]` goes to output `output_of[i]`.
fn group_by_output<T>(values: Vec<T>, output_of: &[usize], outputs: usize) -> Vec<Vec<T>> {
    let mut groups: Vec<Vec<T>> = (0..outputs).map(|_| Vec::new()).collect();
    for (v, &o) in values.into_iter().zip(output_of) {
        groups[o].push(v);
    }
    groups
}

/// Reduce real values.
fn reduce_floats(kind: ReduceKind, v: &[f64]) -> f64 {
    let sum = |f: fn(f64) -> f64| v.iter().map(|&x| f(x)).sum::<f64>();
    let has_nan = v.iter().any(|x| x.is_nan());
    match kind {
        ReduceKind::Sum => sum(|x| x),
        ReduceKind::Mean => sum(|x| x) / v.len() as f64,
        ReduceKind::Max if has_nan => f64::NAN,
        ReduceKind::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ReduceKind::Min if has_nan => f64::NAN,
        ReduceKind::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceKind::Prod => v.iter().product(),
        ReduceKind::L1 => sum(f64::abs),
        ReduceKind::L2 => sum(|x| x * x).sqrt(),
        ReduceKind::LogSum => sum(|x| x).ln(),
        ReduceKind::SumSquare => sum(|x| x * x),
        ReduceKind::LogSumExp => {
            // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the maximum.
            let m = reduce_floats(ReduceKind::Max, v);
            if m.is_infinite() {
                // Empty or all -inf gives -inf; any +inf gives +inf.
                m
            } else {
                m + v.iter().map(|&x| (x - m).exp()).sum::<f64>().ln()
            }
        }
    }
}

/// Reduce integers of a type with range `min..=max`.
fn reduce_ints(kind: ReduceKind, v: &[i64], min: i64, max: i64) -> Result<Scalar> {
    let sum = |f: fn(i64) -> i64| v.iter().fold(0i64, |acc, &x| acc.wrapping_add(f(x)));
    Ok(Scalar::Int(match kind {
        ReduceKind::Sum => sum(|x| x),
        ReduceKind::Mean => {
            if v.is_empty() {
                return Err(BackendError::Execution(
                    "ReduceMean: the integer mean of an empty set is undefined".to_string(),
                ));
            }
            sum(|x| x).wrapping_div(i64::try_from(v.len()).unwrap_or(i64::MAX))
        }
        ReduceKind::Max => v.iter().copied().max().unwrap_or(min),
        ReduceKind::Min => v.iter().copied().min().unwrap_or(max),
        ReduceKind::Prod => v.iter().fold(1i64, |acc, &x| acc.wrapping_mul(x)),
        ReduceKind::L1 => sum(i64::wrapping_abs),
        ReduceKind::SumSquare => sum(|x| x.wrapping_mul(x)),
        ReduceKind::L2 | ReduceKind::LogSum | ReduceKind::LogSumExp => {
            let reals: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            return Ok(Scalar::Float(reduce_floats(kind, &reals)));
        }
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{assert_close, eval1, f32s, tensor};
    use backplane_core::ops::{ReduceDesc, ReduceKind};
    use backplane_core::{DataType, Op, Tensor};

    fn op(kind: ReduceKind, axes: &[i64], keepdims: bool) -> Op {
        Op::Reduce(ReduceDesc {
            kind,
            axes: axes.to_vec(),
            keepdims,
            noop_with_empty_axes: false,
        })
    }

    /// Reduce and return (shape, values).
    fn run(o: &Op, x: &Tensor) -> (Vec<usize>, Vec<f64>) {
        let y = eval1(o, &[x]);
        assert_eq!(y.dtype(), x.dtype());
        (y.shape().dims().to_vec(), y.to_f64_vec())
    }

    #[test]
    fn sum_over_axes_with_and_without_keepdims() {
        // x = [[1,2,3],[4,5,6]].
        let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        use ReduceKind::Sum;
        assert_eq!(run(&op(Sum, &[1], true), &x), (vec![2, 1], vec![6.0, 15.0]));
        assert_eq!(run(&op(Sum, &[-1], false), &x), (vec![2], vec![6.0, 15.0]));
        assert_eq!(
            run(&op(Sum, &[0], false), &x),
            (vec![3], vec![5.0, 7.0, 9.0])
        );
        // No axes: everything.
        assert_eq!(run(&op(Sum, &[], true), &x), (vec![1, 1], vec![21.0]));
        assert_eq!(run(&op(Sum, &[], false), &x), (vec![], vec![21.0]));
        // noop_with_empty_axes passes the input through.
        let noop = Op::Reduce(ReduceDesc {
            kind: Sum,
            axes: vec![],
            keepdims: true,
            noop_with_empty_axes: true,
        });
        assert_eq!(
            run(&noop, &x),
            (vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
        // Two of three axes of iota [2,3,5] (15i + 5j + k), keeping axis 1:
        // sum over i,k = 5*15*(0+1) + 10*5j + 2*(0+1+2+3+4) = 95 + 50j.
        let x3 = f32s(&[2, 3, 5], &(0..30).map(|i| i as f32).collect::<Vec<_>>());
        assert_eq!(
            run(&op(Sum, &[0, -1], false), &x3),
            (vec![3], vec![95.0, 145.0, 195.0])
        );
        assert!(evaluate(&op(Sum, &[2], true), &[&x]).is_err());
    }

    #[test]
    fn every_kind_on_f32() {
        let x = f32s(&[2, 2], &[1.0, -2.0, -3.0, 4.0]);
        let row = |kind| run(&op(kind, &[1], false), &x).1;
        assert_eq!(row(ReduceKind::Mean), vec![-0.5, 0.5]);
        assert_eq!(row(ReduceKind::Max), vec![1.0, 4.0]);
        assert_eq!(row(ReduceKind::Min), vec![-2.0, -3.0]);
        assert_eq!(row(ReduceKind::Prod), vec![-2.0, -12.0]);
        assert_eq!(row(ReduceKind::L1), vec![3.0, 7.0]);
        assert_eq!(row(ReduceKind::SumSquare), vec![5.0, 25.0]);
        let l2 = row(ReduceKind::L2);
        assert_close(&[l2[0] as f32, l2[1] as f32], &[5f32.sqrt(), 5.0], 1e-7);
        // LogSum of [[1,2],[4,5]] = [ln 3, ln 9].
        let p = f32s(&[2, 2], &[1.0, 2.0, 4.0, 5.0]);
        let ls = run(&op(ReduceKind::LogSum, &[1], false), &p).1;
        assert_close(&[ls[0] as f32, ls[1] as f32], &[3f32.ln(), 9f32.ln()], 1e-7);
        // LogSumExp of [0, ln 3] = ln 4; of [1000, 1000] = 1000 + ln 2 (no overflow).
        let q = f32s(&[2, 2], &[0.0, 3f32.ln(), 1000.0, 1000.0]);
        let lse = run(&op(ReduceKind::LogSumExp, &[1], false), &q).1;
        assert_close(
            &[lse[0] as f32, lse[1] as f32],
            &[4f32.ln(), 1000.0 + 2f32.ln()],
            1e-7,
        );
        // NaN propagates through Max and Min.
        let n = f32s(&[2], &[f32::NAN, 1.0]);
        assert!(run(&op(ReduceKind::Max, &[], false), &n).1[0].is_nan());
        assert!(run(&op(ReduceKind::Min, &[], false), &n).1[0].is_nan());
    }

    #[test]
    fn empty_reductions_give_the_identity() {
        let x = tensor(DataType::F32, &[2, 0], &[]);
        let row = |kind| run(&op(kind, &[1], false), &x).1;
        assert_eq!(row(ReduceKind::Sum), vec![0.0, 0.0]);
        assert_eq!(row(ReduceKind::Prod), vec![1.0, 1.0]);
        assert_eq!(row(ReduceKind::Max), vec![f64::NEG_INFINITY; 2]);
        assert_eq!(row(ReduceKind::Min), vec![f64::INFINITY; 2]);
        assert_eq!(row(ReduceKind::L2), vec![0.0, 0.0]);
        assert_eq!(row(ReduceKind::LogSumExp), vec![f64::NEG_INFINITY; 2]);
        assert!(row(ReduceKind::Mean)[0].is_nan());
        // Reducing the non-empty axis of an empty tensor gives an empty result.
        assert_eq!(
            run(&op(ReduceKind::Sum, &[0], false), &x),
            (vec![0], vec![])
        );
        let xi = tensor(DataType::I32, &[1, 0], &[]);
        assert_eq!(
            run(&op(ReduceKind::Max, &[1], false), &xi).1,
            vec![f64::from(i32::MIN)]
        );
        assert_eq!(
            run(&op(ReduceKind::Min, &[1], false), &xi).1,
            vec![f64::from(i32::MAX)]
        );
        assert!(evaluate(&op(ReduceKind::Mean, &[1], false), &[&xi]).is_err());
    }

    #[test]
    fn integer_reductions() {
        for dt in [DataType::I32, DataType::I64] {
            // [[1,2,3],[4,5,6]] and [[-1,-2,0],[7,7,7]].
            let x = tensor(dt, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
            let row = |kind, x: &Tensor| run(&op(kind, &[1], false), x).1;
            assert_eq!(row(ReduceKind::Sum, &x), vec![6.0, 15.0], "{dt}");
            assert_eq!(row(ReduceKind::Mean, &x), vec![2.0, 5.0], "{dt}");
            assert_eq!(row(ReduceKind::Prod, &x), vec![6.0, 120.0], "{dt}");
            assert_eq!(row(ReduceKind::Max, &x), vec![3.0, 6.0], "{dt}");
            assert_eq!(row(ReduceKind::SumSquare, &x), vec![14.0, 77.0], "{dt}");
            // sqrt(14) = 3.74 and sqrt(77) = 8.77 truncate.
            assert_eq!(row(ReduceKind::L2, &x), vec![3.0, 8.0], "{dt}");
            let y = tensor(dt, &[2, 3], &[-1.0, -2.0, 0.0, 7.0, 7.0, 7.0]);
            // Means -1 and 7; -3/2 would truncate toward zero.
            assert_eq!(row(ReduceKind::Mean, &y), vec![-1.0, 7.0], "{dt}");
            assert_eq!(row(ReduceKind::L1, &y), vec![3.0, 21.0], "{dt}");
            assert_eq!(row(ReduceKind::Min, &y), vec![-2.0, 7.0], "{dt}");
            let odd = tensor(dt, &[2], &[-1.0, -2.0]);
            assert_eq!(run(&op(ReduceKind::Mean, &[], false), &odd).1, vec![-1.0]);
        }
        // i32 sums wrap like i32 arithmetic.
        let big = Tensor::from_vec(vec![2], vec![i32::MAX, 1]).unwrap();
        assert_eq!(
            eval1(&op(ReduceKind::Sum, &[0], false), &[&big])
                .as_slice::<i32>()
                .unwrap(),
            &[i32::MIN]
        );
    }

    #[test]
    fn noop_keeps_elementwise_transform_and_bad_types_are_rejected() {
        let noop = |kind| {
            Op::Reduce(ReduceDesc {
                kind,
                axes: vec![],
                keepdims: false,
                noop_with_empty_axes: true,
            })
        };
        let x = f32s(&[3], &[-2.0, 0.5, 3.0]);
        assert_eq!(
            run(&noop(ReduceKind::SumSquare), &x).1,
            vec![4.0, 0.25, 9.0]
        );
        assert_eq!(run(&noop(ReduceKind::L1), &x).1, vec![2.0, 0.5, 3.0]);
        assert_eq!(run(&noop(ReduceKind::Max), &x).1, vec![-2.0, 0.5, 3.0]);
        let b = Tensor::from_bools(vec![2], &[true, false]).unwrap();
        assert!(evaluate(&op(ReduceKind::Sum, &[], false), &[&b]).is_err());
        let h = tensor(DataType::F16, &[2], &[1.0, 2.0]);
        assert!(evaluate(&op(ReduceKind::Sum, &[], false), &[&h]).is_err());
    }
}

//! Data-movement kernels: copy (Identity, Reshape, Flatten, Squeeze, Unsqueeze), Transpose,
//! Concat, Split, Slice, Gather and Pad.
//!
//! They move whole elements without looking at them, so they work on raw bytes, one element
//! being `dtype.size()` bytes, and support every data type alike.

use super::cast::{encode, Scalar};
use super::indexing::{product, strided_offsets, try_for_each_index};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
use backplane_core::shape::{normalize_axis, strides_of};
use backplane_core::{DataType, TensorView, TensorViewMut};

/// Copy the bytes unchanged (the shapes differ, the row-major order does not).
pub(crate) fn copy(x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    y.data.copy_from_slice(x.data);
    Ok(())
}

/// Fill `dst` element by element: element `i` is element `offsets[i]` of `src`.
pub(crate) fn gather_elements(src: &[u8], offsets: &[usize], dst: &mut [u8], size: usize) {
    for (element, &at) in dst.chunks_exact_mut(size).zip(offsets) {
        element.copy_from_slice(&src[at * size..(at + 1) * size]);
    }
}

/// Transpose: output axis `i` is input axis `perm[i]`.
pub(crate) fn transpose(
    perm: &[usize],
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let input_strides = strides_of(x.dims());
    // Walking the output in order, a step along output axis i is a step along input axis
    // perm[i].
    let strides: Vec<usize> = perm.iter().map(|&p| input_strides[p]).collect();
    let offsets = strided_offsets(y.dims(), &strides);
    gather_elements(x.data, &offsets, y.data, x.info.dtype.size());
    Ok(())
}

/// Concat along `axis`: for each index of the axes before it, the inputs' blocks in order.
pub(crate) fn concat(
    axis: i64,
    inputs: &[TensorView<'_>],
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = y.dims().to_vec();
    let a = normalize_axis(axis, dims.len())?;
    let outer = product(&dims[..a]);
    // Bytes of one step along the axis.
    let row = product(&dims[a + 1..]) * y.info.dtype.size();
    let mut written = 0;
    for o in 0..outer {
        for x in inputs {
            let block = x.dims()[a] * row;
            y.data[written..written + block].copy_from_slice(&x.data[o * block..(o + 1) * block]);
            written += block;
        }
    }
    Ok(())
}

/// Split along `axis`: the exact inverse of [`concat`].
pub(crate) fn split(
    axis: i64,
    x: &TensorView<'_>,
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let dims = x.dims();
    let a = normalize_axis(axis, dims.len())?;
    let outer = product(&dims[..a]);
    let row = product(&dims[a + 1..]) * x.info.dtype.size();
    let mut read = 0;
    for o in 0..outer {
        for y in outputs.iter_mut() {
            let block = y.dims()[a] * row;
            y.data[o * block..(o + 1) * block].copy_from_slice(&x.data[read..read + block]);
            read += block;
        }
    }
    Ok(())
}

/// Slice: output index `i` on an axis reads input index `start + i * step`.
pub(crate) fn slice(desc: &SliceDesc, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let dims = x.dims();
    let ranges = desc.resolve(dims)?;
    let strides = strides_of(dims);
    let mut offsets = Vec::with_capacity(product(y.dims()));
    try_for_each_index(y.dims(), |index| {
        let mut offset = 0;
        for (axis, &i) in index.iter().enumerate() {
            let range = ranges[axis];
            let pos = usize::try_from(range.start + i as i64 * range.step)
                .ok()
                .filter(|&p| p < dims[axis])
                .ok_or_else(|| {
                    BackendError::Other(format!(
                        "Slice: resolved range {range:?} leaves axis {axis} of size {}",
                        dims[axis]
                    ))
                })?;
            offset += pos * strides[axis];
        }
        offsets.push(offset);
        Ok::<(), BackendError>(())
    })?;
    gather_elements(x.data, &offsets, y.data, x.info.dtype.size());
    Ok(())
}

/// The indices of a Gather as i64.
fn indices_as_i64(indices: &TensorView<'_>) -> Result<Vec<i64>> {
    match indices.info.dtype {
        DataType::I32 => Ok(indices
            .as_slice::<i32>()?
            .iter()
            .map(|&i| i64::from(i))
            .collect()),
        DataType::I64 => Ok(indices.as_slice::<i64>()?.to_vec()),
        other => Err(BackendError::Other(format!(
            "Gather: indices of type {other} are not supported"
        ))),
    }
}

/// Gather along `axis`: output `[before, indices..., after]` takes input `[before, idx, after]`.
/// Negative indices count from the end; anything else out of range is an error.
pub(crate) fn gather(
    axis: i64,
    x: &TensorView<'_>,
    indices: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let a = normalize_axis(axis, dims.len())?;
    let len = dims[a];
    let signed_len = i64::try_from(len).unwrap_or(i64::MAX);
    // Check every index before moving any data.
    let positions = indices_as_i64(indices)?
        .into_iter()
        .map(|i| {
            let wrapped = if i < 0 { i + signed_len } else { i };
            usize::try_from(wrapped)
                .ok()
                .filter(|&p| p < len)
                .ok_or_else(|| {
                    BackendError::Execution(format!(
                        "Gather: index {i} is out of range for axis {a} of size {len}"
                    ))
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    let outer = product(&dims[..a]);
    let row = product(&dims[a + 1..]) * x.info.dtype.size();
    let mut written = 0;
    for o in 0..outer {
        for &p in &positions {
            let from = (o * len + p) * row;
            y.data[written..written + row].copy_from_slice(&x.data[from..from + row]);
            written += row;
        }
    }
    Ok(())
}

/// Which input index output index `out` of one axis reads, or `None` for the fill value.
fn pad_source(mode: PadMode, out: usize, pad_begin: i64, len: usize) -> Option<usize> {
    let n = i64::try_from(len).ok()?;
    let p = out as i64 - pad_begin;
    if (0..n).contains(&p) {
        return usize::try_from(p).ok();
    }
    if n == 0 {
        return None;
    }
    let source = match mode {
        PadMode::Constant => return None,
        PadMode::Edge => p.clamp(0, n - 1),
        PadMode::Wrap => p.rem_euclid(n),
        PadMode::Reflect => {
            if n == 1 {
                0
            } else {
                // Mirror without repeating the edge: the pattern 0,1,..,n-1,n-2,..,1 repeats.
                let period = 2 * (n - 1);
                let m = p.rem_euclid(period);
                if m < n {
                    m
                } else {
                    period - m
                }
            }
        }
    };
    usize::try_from(source).ok()
}

/// Pad (negative amounts crop).
pub(crate) fn pad(desc: &PadDesc, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let dims = x.dims();
    let strides = strides_of(dims);
    let size = x.info.dtype.size();
    let fill = encode(x.info.dtype, Scalar::Float(desc.value));
    let mut sources = Vec::with_capacity(product(y.dims()));
    try_for_each_index(y.dims(), |index| {
        let mut offset = Some(0);
        for (axis, &i) in index.iter().enumerate() {
            let begin = desc.pads.get(axis).copied().unwrap_or(0);
            offset = match (offset, pad_source(desc.mode, i, begin, dims[axis])) {
                (Some(o), Some(s)) => Some(o + s * strides[axis]),
                _ => None,
            };
        }
        sources.push(offset);
        Ok::<(), BackendError>(())
    })?;
    for (element, source) in y.data.chunks_exact_mut(size).zip(sources) {
        match source {
            Some(at) => element.copy_from_slice(&x.data[at * size..(at + 1) * size]),
            None => element.copy_from_slice(&fill),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{eval1, expect_picks, iota, tensor};
    use backplane_core::ops::{PadDesc, PadMode, SliceDesc};
    use backplane_core::{DataType, Op, Tensor};

    #[test]
    fn reshape_family_copies_for_every_dtype() {
        for dt in DataType::ALL {
            let x = iota(dt, &[2, 1, 3]);
            for (op, shape) in [
                (Op::Identity, vec![2, 1, 3]),
                (Op::Reshape { shape: vec![3, 2] }, vec![3, 2]),
                (Op::Flatten { axis: -1 }, vec![2, 3]),
                (Op::Flatten { axis: 0 }, vec![1, 6]),
                (Op::Squeeze { axes: vec![] }, vec![2, 3]),
                (Op::Squeeze { axes: vec![-2] }, vec![2, 3]),
                (Op::Unsqueeze { axes: vec![0, -1] }, vec![1, 2, 1, 3, 1]),
            ] {
                let y = eval1(&op, &[&x]);
                assert_eq!(y.shape().dims(), &shape[..], "{op:?} {dt}");
                assert_eq!(y.dtype(), dt);
                expect_picks(&y, &[0, 1, 2, 3, 4, 5]);
            }
        }
    }

    #[test]
    fn transpose_every_dtype_and_rank_3() {
        for dt in DataType::ALL {
            // [2,3] → [3,2]: y[i][j] = x[j][i].
            let y = eval1(&Op::Transpose { perm: vec![1, 0] }, &[&iota(dt, &[2, 3])]);
            assert_eq!(y.shape().dims(), &[3, 2]);
            expect_picks(&y, &[0, 3, 1, 4, 2, 5]);
        }
        // [2,3,5] with perm [2,0,1] → [5,2,3]; y[k][i][j] = x[i][j][k] at 15i + 5j + k.
        let y = eval1(
            &Op::Transpose {
                perm: vec![2, 0, 1],
            },
            &[&iota(DataType::I64, &[2, 3, 5])],
        );
        assert_eq!(y.shape().dims(), &[5, 2, 3]);
        let mut picks = Vec::new();
        for k in 0..5 {
            for i in 0..2 {
                for j in 0..3 {
                    picks.push(15 * i + 5 * j + k);
                }
            }
        }
        expect_picks(&y, &picks);
    }

    #[test]
    fn concat_and_split_are_inverse_for_every_dtype() {
        for dt in DataType::ALL {
            // a = [[0,1],[2,3]] (2x2), b = [[0,1,2],[3,4,5]] (2x3); along axis -1 → 2x5.
            let a = iota(dt, &[2, 2]);
            let b = iota(dt, &[2, 3]);
            let y = eval1(&Op::Concat { axis: -1 }, &[&a, &b]);
            assert_eq!(y.shape().dims(), &[2, 5]);
            let expected: Vec<f64> = [0, 1, 0, 1, 2, 2, 3, 3, 4, 5]
                .iter()
                .map(|&v| crate::test_util::value_of(dt, v))
                .collect();
            assert_eq!(y.to_f64_vec(), expected, "{dt}");
            let parts = evaluate(
                &Op::Split {
                    axis: 1,
                    splits: vec![2, 3],
                },
                &[&y],
            )
            .unwrap();
            assert_eq!(parts, vec![a, b], "{dt}");
        }
        // Along axis 0 with an empty input in the middle.
        let a = tensor(DataType::F32, &[1, 2], &[1.0, 2.0]);
        let e = tensor(DataType::F32, &[0, 2], &[]);
        let b = tensor(DataType::F32, &[2, 2], &[3.0, 4.0, 5.0, 6.0]);
        let y = eval1(&Op::Concat { axis: 0 }, &[&a, &e, &b]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }

    fn slice(starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]) -> Op {
        Op::Slice(SliceDesc {
            starts: starts.to_vec(),
            ends: ends.to_vec(),
            axes: axes.to_vec(),
            steps: steps.to_vec(),
        })
    }

    #[test]
    fn slice_with_steps_negative_steps_and_clamping() {
        for dt in DataType::ALL {
            // x = 0..35 as [5,7]; rows 1..4 step 2 → {1,3}; columns from the end backwards by
            // 3: 6, 3, 0.
            let x = iota(dt, &[5, 7]);
            let y = eval1(&slice(&[1, -1], &[4, i64::MIN], &[0, 1], &[2, -3]), &[&x]);
            assert_eq!(y.shape().dims(), &[2, 3]);
            expect_picks(&y, &[13, 10, 7, 27, 24, 21]);
        }
        // Out-of-range bounds clamp; an empty result is fine.
        let x = iota(DataType::F32, &[5]);
        let y = eval1(&slice(&[-100], &[100], &[], &[]), &[&x]);
        expect_picks(&y, &[0, 1, 2, 3, 4]);
        let y = eval1(&slice(&[3], &[1], &[0], &[1]), &[&x]);
        assert_eq!(y.shape().dims(), &[0]);
        // Reverse everything.
        let y = eval1(&slice(&[-1], &[i64::MIN], &[0], &[-1]), &[&x]);
        expect_picks(&y, &[4, 3, 2, 1, 0]);
        // A huge step takes just the first element (used to overflow in SliceDesc::resolve).
        let y = eval1(&slice(&[0], &[5], &[0], &[i64::MAX]), &[&x]);
        expect_picks(&y, &[0]);
        let y = eval1(&slice(&[4], &[i64::MIN], &[0], &[i64::MIN]), &[&x]);
        expect_picks(&y, &[4]);
        // Negative step on an empty axis reads nothing (used to claim one element).
        let e = tensor(DataType::F32, &[0], &[]);
        let y = eval1(&slice(&[-1], &[i64::MIN], &[0], &[-1]), &[&e]);
        assert_eq!(y.shape().dims(), &[0]);
        assert!(evaluate(&slice(&[0], &[1], &[0], &[0]), &[&x]).is_err());
    }

    #[test]
    fn gather_every_dtype_with_negative_indices() {
        for dt in DataType::ALL {
            // x = [[0,1,2],[3,4,5],[6,7,8]]; rows [2, -3] → [[6,7,8],[0,1,2]].
            let x = iota(dt, &[3, 3]);
            let i32_idx = Tensor::from_vec(vec![2], vec![2i32, -3]).unwrap();
            let y = eval1(&Op::Gather { axis: 0 }, &[&x, &i32_idx]);
            assert_eq!(y.shape().dims(), &[2, 3]);
            expect_picks(&y, &[6, 7, 8, 0, 1, 2]);
            // Columns with a [2,2] index tensor along axis -1 → shape [3,2,2].
            let i64_idx = Tensor::from_vec(vec![2, 2], vec![0i64, -1, 1, 1]).unwrap();
            let y = eval1(&Op::Gather { axis: -1 }, &[&x, &i64_idx]);
            assert_eq!(y.shape().dims(), &[3, 2, 2]);
            expect_picks(&y, &[0, 2, 1, 1, 3, 5, 4, 4, 6, 8, 7, 7]);
        }
        // A scalar index drops the axis.
        let x = iota(DataType::I32, &[3, 2]);
        let y = eval1(&Op::Gather { axis: 0 }, &[&x, &Tensor::scalar(1i64)]);
        assert_eq!(y.shape().dims(), &[2]);
        expect_picks(&y, &[2, 3]);
    }

    #[test]
    fn gather_out_of_range_is_an_error_not_a_panic() {
        let x = iota(DataType::F32, &[3, 2]);
        for bad in [3i64, -4, i64::MAX, i64::MIN] {
            let idx = Tensor::from_vec(vec![2], vec![0, bad]).unwrap();
            let err = evaluate(&Op::Gather { axis: 0 }, &[&x, &idx]).unwrap_err();
            assert!(err.to_string().contains("out of range"), "{err}");
        }
        let empty = tensor(DataType::F32, &[0, 2], &[]);
        let idx = Tensor::from_vec(vec![1], vec![0i32]).unwrap();
        assert!(evaluate(&Op::Gather { axis: 0 }, &[&empty, &idx]).is_err());
        let float_idx = tensor(DataType::F32, &[1], &[0.0]);
        assert!(evaluate(&Op::Gather { axis: 0 }, &[&x, &float_idx]).is_err());
    }

    fn pad(mode: PadMode, pads: &[i64], value: f64) -> Op {
        Op::Pad(PadDesc {
            mode,
            pads: pads.to_vec(),
            value,
        })
    }

    #[test]
    fn pad_modes_in_one_dimension() {
        // x = [0,1,2,3], pads 3 before and 2 after.
        let x = iota(DataType::F32, &[4]);
        let run = |mode| eval1(&pad(mode, &[3, 2], 9.0), &[&x]).to_f64_vec();
        assert_eq!(
            run(PadMode::Constant),
            vec![9.0, 9.0, 9.0, 0.0, 1.0, 2.0, 3.0, 9.0, 9.0]
        );
        // Mirror without the edge: ...3,2,1 | 0,1,2,3 | 2,1...
        assert_eq!(
            run(PadMode::Reflect),
            vec![3.0, 2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0, 1.0]
        );
        assert_eq!(
            run(PadMode::Edge),
            vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 3.0, 3.0]
        );
        assert_eq!(
            run(PadMode::Wrap),
            vec![1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0, 0.0, 1.0]
        );
        // Negative pads crop: drop one in front, add one (edge) at the back.
        let y = eval1(&pad(PadMode::Edge, &[-1, 1], 0.0), &[&x]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 2.0, 3.0, 3.0]);
        // Reflect pads must be smaller than the axis.
        assert!(evaluate(&pad(PadMode::Reflect, &[4, 0], 0.0), &[&x]).is_err());
    }

    #[test]
    fn pad_two_dimensions_every_dtype() {
        for dt in DataType::ALL {
            // x = [[0,1,2],[3,4,5]]; one row of fill 1 on top, one column at the right.
            let x = iota(dt, &[2, 3]);
            let y = eval1(&pad(PadMode::Constant, &[1, 0, 0, 1], 1.0), &[&x]);
            assert_eq!(y.shape().dims(), &[3, 4]);
            let v = |i| crate::test_util::value_of(dt, i);
            assert_eq!(
                y.to_f64_vec(),
                vec![
                    1.0,
                    1.0,
                    1.0,
                    1.0,
                    v(0),
                    v(1),
                    v(2),
                    1.0,
                    v(3),
                    v(4),
                    v(5),
                    1.0
                ],
                "{dt}"
            );
            // Edge on both axes: corners repeat the corner elements.
            let y = eval1(&pad(PadMode::Edge, &[1, 1, 0, 0], 0.0), &[&x]);
            expect_picks(&y, &[0, 0, 1, 2, 0, 0, 1, 2, 3, 3, 4, 5]);
        }
        // Constant fill is converted to the element type: 2.9 → 2 for integers.
        let x = iota(DataType::I32, &[1]);
        let y = eval1(&pad(PadMode::Constant, &[1, 0], 2.9), &[&x]);
        assert_eq!(y.as_slice::<i32>().unwrap(), &[2, 0]);
        // Constant padding of an empty axis is allowed.
        let e = tensor(DataType::F32, &[0], &[]);
        let y = eval1(&pad(PadMode::Constant, &[1, 1], 5.0), &[&e]);
        assert_eq!(y.to_f64_vec(), vec![5.0, 5.0]);
        assert!(evaluate(&pad(PadMode::Edge, &[1, 1], 0.0), &[&e]).is_err());
    }
}

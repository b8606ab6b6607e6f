//! Index arithmetic shared by the kernels: walking every multi-index of a shape, and turning
//! multi-indices into buffer offsets (plain, permuted, broadcast, or through a sliding window).

use backplane_core::ops::Geometry;
use backplane_core::shape::broadcast_strides;
use std::convert::Infallible;

/// Number of elements of a validated shape.
pub(crate) fn product(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// Calls `f` with every multi-index of `dims` in row-major order (last axis fastest), stopping
/// at the first error. A shape with a zero dimension has no indices; a rank-0 shape has exactly
/// one, the empty index.
pub(crate) fn try_for_each_index<E>(
    dims: &[usize],
    mut f: impl FnMut(&[usize]) -> Result<(), E>,
) -> Result<(), E> {
    if dims.contains(&0) {
        return Ok(());
    }
    let mut index = vec![0usize; dims.len()];
    loop {
        f(&index)?;
        // Advance like an odometer: bump the last axis, carrying into earlier ones.
        let mut axis = dims.len();
        loop {
            if axis == 0 {
                return Ok(());
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < dims[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// Calls `f` with every multi-index of `dims` in row-major order (see [`try_for_each_index`]).
pub(crate) fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    let result: Result<(), Infallible> = try_for_each_index(dims, |i| {
        f(i);
        Ok(())
    });
    match result {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// The offset `sum(index[i] * strides[i])` of every multi-index of `dims`, in row-major order.
pub(crate) fn strided_offsets(dims: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(product(dims));
    for_each_index(dims, |index| {
        offsets.push(index.iter().zip(strides).map(|(i, s)| i * s).sum());
    });
    offsets
}

/// For every element of a tensor of shape `to` (row-major), the offset of the element of a
/// tensor of shape `from` that numpy broadcasting reads for it. `from` must broadcast to `to`.
pub(crate) fn broadcast_offsets(from: &[usize], to: &[usize]) -> Vec<usize> {
    strided_offsets(to, &broadcast_strides(from, to))
}

/// Where output position `out` with kernel tap `tap` of a sliding window (convolution or
/// pooling) reads the input: the input offset for `input_strides`, or `None` when the tap falls
/// into the padding.
pub(crate) fn window_input_offset(
    geo: &Geometry,
    out: &[usize],
    tap: &[usize],
    input_dims: &[usize],
    input_strides: &[usize],
) -> Option<usize> {
    let mut offset = 0;
    for axis in 0..input_dims.len() {
        // Position in the padded input, then shifted back by the leading padding.
        let padded = out[axis] * geo.strides[axis] + tap[axis] * geo.dilations[axis];
        let pos = padded.checked_sub(geo.pads_begin[axis])?;
        if pos >= input_dims[axis] {
            return None;
        }
        offset += pos * input_strides[axis];
    }
    Some(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_row_major_and_handles_scalars_and_empty_shapes() {
        let mut seen = Vec::new();
        for_each_index(&[2, 3], |i| seen.push(i.to_vec()));
        assert_eq!(
            seen,
            vec![
                vec![0, 0],
                vec![0, 1],
                vec![0, 2],
                vec![1, 0],
                vec![1, 1],
                vec![1, 2]
            ]
        );
        let mut count = 0;
        for_each_index(&[], |i| {
            assert!(i.is_empty());
            count += 1;
        });
        assert_eq!(count, 1);
        for_each_index(&[3, 0, 2], |_| count += 100);
        assert_eq!(count, 1);
    }

    #[test]
    fn try_walk_stops_at_the_first_error() {
        let mut visited = 0;
        let r = try_for_each_index(&[5], |i| {
            visited += 1;
            if i[0] == 2 {
                Err("stop")
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err("stop"));
        assert_eq!(visited, 3);
    }

    #[test]
    fn broadcast_offsets_repeat_the_smaller_operand() {
        // [3,1] read as [3,2]: rows repeat their single column.
        assert_eq!(broadcast_offsets(&[3, 1], &[3, 2]), vec![0, 0, 1, 1, 2, 2]);
        // [2] read as [3,2]: the row repeats.
        assert_eq!(broadcast_offsets(&[2], &[3, 2]), vec![0, 1, 0, 1, 0, 1]);
        // A scalar is read everywhere.
        assert_eq!(broadcast_offsets(&[], &[2, 2]), vec![0, 0, 0, 0]);
        // Transpose of [2,3] (strides [3,1]) as [3,2] reads with strides [1,3].
        assert_eq!(strided_offsets(&[3, 2], &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
    }
}

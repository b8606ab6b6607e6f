//! Index-driven data movement: Expand, Tile, Trilu, GatherElements, GatherND, ScatterND,
//! ScatterElements and OneHot. Elements are moved as bytes, so every type works; indices may
//! be negative (counting from the end) and out-of-range indices are execution errors.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::{broadcast_offsets, for_each_index, product};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::ScatterReduction;
use backplane_core::shape::{normalize_axis, strides_of};
use backplane_core::{DataType, TensorView, TensorViewMut};

/// The values of an i32 or i64 index tensor.
pub(crate) fn read_indices(v: &TensorView<'_>) -> Result<Vec<i64>> {
    Ok(match v.info.dtype {
        DataType::I32 => v.as_slice::<i32>()?.iter().map(|&i| i64::from(i)).collect(),
        _ => v.as_slice::<i64>()?.to_vec(),
    })
}

/// Resolve a possibly negative index against a dimension.
fn resolve(op: &str, i: i64, dim: usize) -> Result<usize> {
    let d = dim as i64;
    let r = if i < 0 { i + d } else { i };
    if (0..d).contains(&r) {
        Ok(r as usize)
    } else {
        Err(BackendError::Execution(format!(
            "{op}: index {i} is out of range for a dimension of {dim}"
        )))
    }
}

fn copy_elem(src: &[u8], from: usize, dst: &mut [u8], to: usize, size: usize) {
    dst[to * size..(to + 1) * size].copy_from_slice(&src[from * size..(from + 1) * size]);
}

/// Expand: broadcast the input to the output shape.
pub(crate) fn expand(x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let size = x.info.dtype.size();
    let offsets = broadcast_offsets(x.dims(), y.dims());
    for (k, &o) in offsets.iter().enumerate() {
        copy_elem(x.data, o, y.data, k, size);
    }
    Ok(())
}

/// Tile: output index i reads input index i mod dim, per axis.
pub(crate) fn tile(x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let size = x.info.dtype.size();
    let (xd, yd) = (x.dims().to_vec(), y.dims().to_vec());
    let xs = strides_of(&xd);
    let mut k = 0;
    for_each_index(&yd, |idx| {
        let o: usize = idx
            .iter()
            .zip(&xd)
            .zip(&xs)
            .map(|((&i, &d), &s)| (i % d) * s)
            .sum();
        copy_elem(x.data, o, y.data, k, size);
        k += 1;
    });
    Ok(())
}

/// Trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes.
pub(crate) fn trilu(
    upper: bool,
    k: i64,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let size = x.info.dtype.size();
    let d = x.dims();
    let (rows, cols) = (d[d.len() - 2], d[d.len() - 1]);
    y.data.fill(0);
    for e in 0..product(d) {
        let (i, j) = (((e / cols) % rows) as i64, (e % cols) as i64);
        let keep = if upper { j - i >= k } else { j - i <= k };
        if keep {
            copy_elem(x.data, e, y.data, e, size);
        }
    }
    Ok(())
}

/// GatherElements: out[i] = data[i with i[axis] replaced by indices[i]].
pub(crate) fn gather_elements(
    axis: i64,
    x: &TensorView<'_>,
    idx: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let size = x.info.dtype.size();
    let a = normalize_axis(axis, x.dims().len())?;
    let xd = x.dims();
    let xs = strides_of(xd);
    let ids = read_indices(idx)?;
    let mut k = 0;
    let mut err = None;
    for_each_index(idx.dims(), |pos| {
        if err.is_some() {
            return;
        }
        match resolve("GatherElements", ids[k], xd[a]) {
            Ok(r) => {
                let o: usize = pos
                    .iter()
                    .enumerate()
                    .map(|(ax, &p)| if ax == a { r } else { p } * xs[ax])
                    .sum();
                copy_elem(x.data, o, y.data, k, size);
            }
            Err(e) => err = Some(e),
        }
        k += 1;
    });
    err.map_or(Ok(()), Err)
}

/// ScatterElements: a copy of data with updates written (or combined) at the indexed places.
pub(crate) fn scatter_elements(
    axis: i64,
    reduction: ScatterReduction,
    x: &TensorView<'_>,
    idx: &TensorView<'_>,
    upd: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let a = normalize_axis(axis, x.dims().len())?;
    let xd = x.dims();
    let xs = strides_of(xd);
    let ids = read_indices(idx)?;
    let mut targets = Vec::with_capacity(ids.len());
    let mut k = 0;
    let mut err = None;
    for_each_index(idx.dims(), |pos| {
        if err.is_some() {
            return;
        }
        match resolve("ScatterElements", ids[k], xd[a]) {
            Ok(r) => targets.push(
                pos.iter()
                    .enumerate()
                    .map(|(ax, &p)| if ax == a { r } else { p } * xs[ax])
                    .sum::<usize>(),
            ),
            Err(e) => err = Some(e),
        }
        k += 1;
    });
    if let Some(e) = err {
        return Err(e);
    }
    scatter(reduction, x, &targets, 1, upd, y)
}

/// Write `updates` (blocks of `block` elements) at element offsets `targets` of a copy of `x`.
fn scatter(
    reduction: ScatterReduction,
    x: &TensorView<'_>,
    targets: &[usize],
    block: usize,
    upd: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let mut data = read_scalars(x)?;
    let updates = read_scalars(upd)?;
    for (n, &t) in targets.iter().enumerate() {
        for e in 0..block {
            let (old, new) = (data[t + e], updates[n * block + e]);
            data[t + e] = combine(reduction, old, new);
        }
    }
    write_scalars(y, &data)
}

fn combine(reduction: ScatterReduction, old: Scalar, new: Scalar) -> Scalar {
    match (reduction, old, new) {
        (ScatterReduction::None, _, n) => n,
        (r, Scalar::Int(a), Scalar::Int(b)) => Scalar::Int(match r {
            ScatterReduction::Add => a.wrapping_add(b),
            ScatterReduction::Mul => a.wrapping_mul(b),
            ScatterReduction::Max => a.max(b),
            _ => a.min(b),
        }),
        (ScatterReduction::Add, a, b) => Scalar::Float(a.to_f64() + b.to_f64()),
        (ScatterReduction::Mul, a, b) => Scalar::Float(a.to_f64() * b.to_f64()),
        (ScatterReduction::Max, a, b) => Scalar::Float(a.to_f64().max(b.to_f64())),
        (ScatterReduction::Min, a, b) => Scalar::Float(a.to_f64().min(b.to_f64())),
    }
}

/// The element offsets of data that the index tuples (last axis of `idx`) point to, after
/// `batch_dims` leading batch dimensions; also the size of each addressed block.
fn nd_offsets(
    op: &str,
    batch_dims: usize,
    xd: &[usize],
    idx: &TensorView<'_>,
) -> Result<(Vec<usize>, usize)> {
    let id = idx.dims();
    let q = id[id.len() - 1];
    let ids = read_indices(idx)?;
    let xs = strides_of(xd);
    let block = product(&xd[batch_dims + q..]);
    let batch_size: usize = product(&xd[..batch_dims]);
    let batch_stride = if batch_dims == 0 {
        0
    } else {
        xs[batch_dims - 1]
    };
    let tuples = product(&id[..id.len() - 1]);
    let per_batch = tuples / batch_size.max(1);
    let mut out = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let b = t.checked_div(per_batch).unwrap_or(0);
        let mut o = b * batch_stride;
        for (k, &v) in ids[t * q..(t + 1) * q].iter().enumerate() {
            let ax = batch_dims + k;
            o += resolve(op, v, xd[ax])? * xs[ax];
        }
        out.push(o);
    }
    Ok((out, block))
}

/// GatherND.
pub(crate) fn gather_nd(
    batch_dims: usize,
    x: &TensorView<'_>,
    idx: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let size = x.info.dtype.size();
    let (offsets, block) = nd_offsets("GatherND", batch_dims, x.dims(), idx)?;
    for (n, &o) in offsets.iter().enumerate() {
        let (from, to) = (o * size, n * block * size);
        y.data[to..to + block * size].copy_from_slice(&x.data[from..from + block * size]);
    }
    Ok(())
}

/// ScatterND.
pub(crate) fn scatter_nd(
    reduction: ScatterReduction,
    x: &TensorView<'_>,
    idx: &TensorView<'_>,
    upd: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (offsets, block) = nd_offsets("ScatterND", 0, x.dims(), idx)?;
    scatter(reduction, x, &offsets, block, upd, y)
}

/// OneHot: `values[1]` where the index (negative counts from depth) equals the position along
/// the new axis, `values[0]` elsewhere; out-of-range indices give an all-off row.
pub(crate) fn one_hot(
    axis: i64,
    depth: usize,
    idx: &TensorView<'_>,
    values: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let size = values.info.dtype.size();
    let rank = idx.dims().len() + 1;
    let a = normalize_axis(axis, rank)?;
    let ids: Vec<f64> = idx.to_f64_vec();
    let (outer, inner) = (product(&idx.dims()[..a]), product(&idx.dims()[a..]));
    let d = depth as i64;
    for o in 0..outer {
        for j in 0..depth {
            for i in 0..inner {
                let mut v = ids[o * inner + i].trunc() as i64;
                if v < 0 {
                    v += d;
                }
                let on = v == j as i64;
                let at = (o * depth + j) * inner + i;
                copy_elem(values.data, usize::from(on), y.data, at, size);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::test_util::{eval_f32, f32s};
    use backplane_core::ops::ScatterReduction;
    use backplane_core::{Op, Tensor};

    fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn expand_tile_trilu() {
        let x = f32s(&[2, 1], &[1.0, 2.0]);
        let y = eval_f32(&Op::Expand { shape: vec![2, 3] }, &[&x]);
        assert_eq!(y, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        let y = eval_f32(
            &Op::Tile {
                repeats: vec![2, 2],
            },
            &[&x],
        );
        assert_eq!(y, [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]);
        let m = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let y = eval_f32(&Op::Trilu { upper: true, k: 1 }, &[&m]);
        assert_eq!(y, [0.0, 2.0, 3.0, 0.0, 0.0, 6.0]);
        let y = eval_f32(&Op::Trilu { upper: false, k: 0 }, &[&m]);
        assert_eq!(y, [1.0, 0.0, 0.0, 4.0, 5.0, 0.0]);
    }

    #[test]
    fn gathers_and_scatters() {
        let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let idx = i64s(&[2, 2], &[0, 0, 1, -2]);
        let y = eval_f32(&Op::GatherElements { axis: 1 }, &[&x, &idx]);
        assert_eq!(y, [1.0, 1.0, 4.0, 3.0]);
        let bad = i64s(&[2, 2], &[0, 0, 2, 0]);
        assert!(crate::evaluate(&Op::GatherElements { axis: 1 }, &[&x, &bad]).is_err());
        let nd = i64s(&[2, 2], &[0, 1, 1, 0]);
        let y = eval_f32(&Op::GatherND { batch_dims: 0 }, &[&x, &nd]);
        assert_eq!(y, [2.0, 3.0]);
        let rows = i64s(&[1, 1], &[1]);
        let upd = f32s(&[1, 2], &[10.0, 20.0]);
        let op = Op::ScatterND {
            reduction: ScatterReduction::Add,
        };
        assert_eq!(eval_f32(&op, &[&x, &rows, &upd]), [1.0, 2.0, 13.0, 24.0]);
        let idx = i64s(&[1, 2], &[1, 0]);
        let upd = f32s(&[1, 2], &[7.0, 8.0]);
        let op = Op::ScatterElements {
            axis: 0,
            reduction: ScatterReduction::None,
        };
        assert_eq!(eval_f32(&op, &[&x, &idx, &upd]), [1.0, 8.0, 7.0, 4.0]);
    }

    #[test]
    fn one_hot_puts_the_new_axis_where_asked() {
        let idx = i64s(&[2], &[1, -1]);
        let values = f32s(&[2], &[0.0, 5.0]);
        let y = eval_f32(&Op::OneHot { axis: 0, depth: 3 }, &[&idx, &values]);
        // [depth, 2]: column 0 has its 1 at row 1, column 1 (index -1 = 2) at row 2.
        assert_eq!(y, [0.0, 0.0, 5.0, 0.0, 0.0, 5.0]);
    }
}

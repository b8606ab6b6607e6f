//! N-dimensional max and average pooling, and global pooling (f32; averages in f64; max
//! pooling of f16, f64, i8 and u8, and with indices, on widened values).
//!
//! Window taps that fall into the padding are ignored by max pooling. Average pooling divides
//! the sum of the in-bounds taps by their count, or with `count_include_pad` by the number of
//! taps inside the padded input (taps beyond the end padding, possible with `ceil_mode`, never
//! count). NaN inputs propagate to the max.

use super::cast::{read_scalars, write_scalars, Scalar};
use super::indexing::{for_each_index, product, window_input_offset};
use crate::Result;
use backplane_backend_api::BackendError;
use backplane_core::ops::{Geometry, MaxPoolIndicesDesc, PoolDesc, PoolKind};
use backplane_core::shape::strides_of;
use backplane_core::{TensorView, TensorViewMut};

/// One input plane (one batch item and channel) and how to walk it.
struct Plane<'a> {
    values: &'a [f32],
    dims: &'a [usize],
    strides: &'a [usize],
    geo: &'a Geometry,
}

impl Plane<'_> {
    fn max(&self, out: &[usize]) -> f32 {
        let mut best = f32::NEG_INFINITY;
        let mut saw_nan = false;
        for_each_index(&self.geo.kernel, |k| {
            if let Some(at) = window_input_offset(self.geo, out, k, self.dims, self.strides) {
                let v = self.values[at];
                if v.is_nan() {
                    saw_nan = true;
                } else if v > best {
                    best = v;
                }
            }
        });
        if saw_nan {
            f32::NAN
        } else {
            best
        }
    }

    fn average(&self, out: &[usize], count_include_pad: bool) -> f32 {
        let mut sum = 0f64;
        let count = average_taps(
            self.geo,
            self.dims,
            self.strides,
            out,
            count_include_pad,
            |at| sum += f64::from(self.values[at]),
        );
        (sum / count as f64) as f32
    }
}

/// Visit the in-bounds taps of output `out`'s window over a plane of dimensions `dims`
/// (`visit` gets each tap's offset in the plane) and return what an average divides by: the
/// in-bounds taps, or with `count_include_pad` the taps inside the input extended by both
/// paddings (taps beyond the end padding, possible with `ceil_mode`, never count).
pub(crate) fn average_taps(
    geo: &Geometry,
    dims: &[usize],
    strides: &[usize],
    out: &[usize],
    count_include_pad: bool,
    mut visit: impl FnMut(usize),
) -> usize {
    let (mut in_bounds, mut in_padded) = (0usize, 0usize);
    for_each_index(&geo.kernel, |k| {
        if let Some(at) = window_input_offset(geo, out, k, dims, strides) {
            visit(at);
            in_bounds += 1;
        }
        let inside = (0..dims.len()).all(|axis| {
            let padded = out[axis] * geo.strides[axis] + k[axis] * geo.dilations[axis];
            padded < geo.pads_begin[axis] + dims[axis] + geo.pads_end[axis]
        });
        if inside {
            in_padded += 1;
        }
    });
    if count_include_pad {
        in_padded
    } else {
        in_bounds
    }
}

/// MaxPool / AveragePool.
pub(crate) fn pool(desc: &PoolDesc, x: &TensorView<'_>, y: &mut TensorViewMut<'_>) -> Result<()> {
    let dims = x.dims();
    let geo = desc.geometry(dims)?;
    let spatial = &dims[2..];
    let strides = strides_of(spatial);
    let in_plane = product(spatial);
    let planes = dims[0] * dims[1];
    let xs = x.as_slice::<f32>()?;
    let ys = y.as_mut_slice::<f32>()?;
    let mut written = 0;
    for p in 0..planes {
        let plane = Plane {
            values: &xs[p * in_plane..(p + 1) * in_plane],
            dims: spatial,
            strides: &strides,
            geo: &geo,
        };
        for_each_index(&geo.output, |o| {
            ys[written] = match desc.kind {
                PoolKind::Max => plane.max(o),
                PoolKind::Average => plane.average(o, desc.count_include_pad),
            };
            written += 1;
        });
    }
    Ok(())
}

/// Max pooling of any type CpuRef claims for it (computed on widened values, so exact), with
/// the flat input index of every maximum: `(values, indices)`, one per output element. The
/// first tap in window order wins ties; a NaN wins over every number. Indices count over the
/// whole input, with the spatial part column-major when `column_major`.
fn max_with_indices(
    desc: &PoolDesc,
    x: &TensorView<'_>,
    column_major: bool,
) -> Result<(Vec<Scalar>, Vec<i64>)> {
    let dims = x.dims();
    let geo = desc.geometry(dims)?;
    let spatial = &dims[2..];
    let strides = strides_of(spatial);
    // Column-major strides of the spatial axes: the first axis varies fastest.
    let mut col_strides = vec![1usize; spatial.len()];
    for axis in 1..spatial.len() {
        col_strides[axis] = col_strides[axis - 1] * spatial[axis - 1];
    }
    let in_plane = product(spatial);
    let xs = read_scalars(x)?;
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    for p in 0..dims[0] * dims[1] {
        let plane = &xs[p * in_plane..(p + 1) * in_plane];
        for_each_index(&geo.output, |o| {
            let mut best: Option<(f64, usize)> = None;
            for_each_index(&geo.kernel, |k| {
                let Some(at) = window_input_offset(&geo, o, k, spatial, &strides) else {
                    return;
                };
                let v = plane[at].to_f64();
                let better = match best {
                    None => true,
                    Some((b, _)) => !b.is_nan() && (v.is_nan() || v > b),
                };
                if better {
                    best = Some((v, at));
                }
            });
            // A window entirely in the padding (impossible for valid geometry) yields -inf.
            let (value, at) = match best {
                Some((_, at)) => (plane[at], at),
                None => (Scalar::Float(f64::NEG_INFINITY), 0),
            };
            let spatial_index = if column_major {
                // Row-major offset → coordinates → column-major offset.
                let mut rest = at;
                let mut index = 0;
                for axis in 0..spatial.len() {
                    let coord = rest / strides[axis];
                    rest %= strides[axis];
                    index += coord * col_strides[axis];
                }
                index
            } else {
                at
            };
            values.push(value);
            indices.push((p * in_plane + spatial_index) as i64);
        });
    }
    Ok((values, indices))
}

/// MaxPool of a type other than f32 (f16, f64, i8, u8).
pub(crate) fn max_pool_any(
    desc: &PoolDesc,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let (values, _) = max_with_indices(desc, x, false)?;
    write_scalars(y, &values)
}

/// MaxPool with its Indices output (outputs Y, Indices).
pub(crate) fn max_pool_indices(
    desc: &MaxPoolIndicesDesc,
    x: &TensorView<'_>,
    outputs: &mut [TensorViewMut<'_>],
) -> Result<()> {
    let [y, i] = outputs else {
        return Err(BackendError::Other(format!(
            "MaxPool with indices has 2 outputs, got {}",
            outputs.len()
        )));
    };
    let (values, indices) = max_with_indices(&desc.pool, x, desc.column_major)?;
    write_scalars(y, &values)?;
    let slots = i.as_mut_slice::<i64>()?;
    if slots.len() != indices.len() {
        return Err(BackendError::Other(format!(
            "MaxPool: {} index slots for {} outputs",
            slots.len(),
            indices.len()
        )));
    }
    slots.copy_from_slice(&indices);
    Ok(())
}

/// GlobalMaxPool / GlobalAveragePool: one value per batch item and channel.
pub(crate) fn global_pool(
    kind: PoolKind,
    x: &TensorView<'_>,
    y: &mut TensorViewMut<'_>,
) -> Result<()> {
    let dims = x.dims();
    let in_plane = product(&dims[2..]);
    let xs = x.as_slice::<f32>()?;
    let ys = y.as_mut_slice::<f32>()?;
    for (p, slot) in ys.iter_mut().enumerate() {
        let plane = &xs[p * in_plane..(p + 1) * in_plane];
        *slot = match kind {
            PoolKind::Max => {
                if plane.iter().any(|v| v.is_nan()) {
                    f32::NAN
                } else {
                    plane.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                }
            }
            PoolKind::Average => {
                (plane.iter().map(|&v| f64::from(v)).sum::<f64>() / in_plane as f64) as f32
            }
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::evaluate;
    use crate::test_util::{eval1, eval_f32, f32s, tensor};
    use backplane_core::ops::{AutoPad, MaxPoolIndicesDesc, PoolDesc, PoolKind, Window};
    use backplane_core::{DataType, Op};

    fn pool(kind: PoolKind, kernel: &[usize], strides: &[usize], pads: &[usize]) -> PoolDesc {
        PoolDesc {
            kind,
            window: Window {
                kernel: kernel.to_vec(),
                strides: strides.to_vec(),
                dilations: vec![],
                pads: pads.to_vec(),
                auto_pad: AutoPad::NotSet,
            },
            ceil_mode: false,
            count_include_pad: false,
        }
    }

    #[test]
    fn max_pool_2d_and_3d() {
        // 4x4 = 0..15, 2x2 windows with stride 2: the bottom-right of each block.
        let x = f32s(
            &[1, 1, 4, 4],
            &(0..16).map(|i| i as f32).collect::<Vec<_>>(),
        );
        let y = eval1(&Op::Pool(pool(PoolKind::Max, &[2, 2], &[2, 2], &[])), &[&x]);
        assert_eq!(y.shape().dims(), &[1, 1, 2, 2]);
        assert_eq!(y.to_f64_vec(), vec![5.0, 7.0, 13.0, 15.0]);
        // 2x2x2 cube 0..7 → 7; with a NaN inside → NaN.
        let mut v: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let cube = f32s(&[1, 1, 2, 2, 2], &v);
        let op = Op::Pool(pool(PoolKind::Max, &[2, 2, 2], &[], &[]));
        assert_eq!(eval_f32(&op, &[&cube]), vec![7.0]);
        v[3] = f32::NAN;
        assert!(eval_f32(&op, &[&f32s(&[1, 1, 2, 2, 2], &v)])[0].is_nan());
    }

    #[test]
    fn average_pool_padding_counts() {
        // [1,2,3,4,5], kernel 3, pads 1/1: windows [_,1,2] [1,2,3] [2,3,4] [3,4,5] [4,5,_].
        let x = f32s(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let mut d = pool(PoolKind::Average, &[3], &[], &[1, 1]);
        assert_eq!(
            eval_f32(&Op::Pool(d.clone()), &[&x]),
            vec![1.5, 2.0, 3.0, 4.0, 4.5]
        );
        d.count_include_pad = true;
        assert_eq!(eval_f32(&Op::Pool(d), &[&x]), vec![1.0, 2.0, 3.0, 4.0, 3.0]);
    }

    #[test]
    fn ceil_mode_adds_a_partial_window() {
        // [1..5], kernel 2, stride 2: floor → [1,2],[3,4]; ceil adds [5,(beyond the end)].
        let x = f32s(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let mut d = pool(PoolKind::Average, &[2], &[2], &[]);
        assert_eq!(eval_f32(&Op::Pool(d.clone()), &[&x]), vec![1.5, 3.5]);
        d.ceil_mode = true;
        assert_eq!(eval_f32(&Op::Pool(d.clone()), &[&x]), vec![1.5, 3.5, 5.0]);
        // The tap beyond the end is not padding, so count_include_pad still divides by 1.
        d.count_include_pad = true;
        assert_eq!(eval_f32(&Op::Pool(d.clone()), &[&x]), vec![1.5, 3.5, 5.0]);
        d.kind = PoolKind::Max;
        assert_eq!(eval_f32(&Op::Pool(d), &[&x]), vec![2.0, 4.0, 5.0]);
    }

    #[test]
    fn dilated_windows() {
        // Kernel 2 with dilation 3 pairs x[i] with x[i+3]; 8 inputs → 5 outputs.
        let x = f32s(&[1, 1, 8], &[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]);
        let mut d = pool(PoolKind::Max, &[2], &[], &[]);
        d.window.dilations = vec![3];
        assert_eq!(
            eval_f32(&Op::Pool(d.clone()), &[&x]),
            vec![3.0, 5.0, 9.0, 2.0, 6.0]
        );
        d.kind = PoolKind::Average;
        assert_eq!(eval_f32(&Op::Pool(d), &[&x]), vec![2.0, 3.0, 6.5, 1.5, 5.5]);
    }

    #[test]
    fn same_upper_average_pool_2d() {
        // 3x3 = 0..8, 2x2 windows, SAME_UPPER pads one row/column at the end.
        let x = f32s(&[1, 1, 3, 3], &(0..9).map(|i| i as f32).collect::<Vec<_>>());
        let mut d = pool(PoolKind::Average, &[2, 2], &[], &[]);
        d.window.auto_pad = AutoPad::SameUpper;
        // Windows: {0,1,3,4} {1,2,4,5} {2,5} {3,4,6,7} {4,5,7,8} {5,8} {6,7} {7,8} {8}.
        assert_eq!(
            eval_f32(&Op::Pool(d.clone()), &[&x]),
            vec![2.0, 3.0, 3.5, 5.0, 6.0, 6.5, 6.5, 7.5, 8.0]
        );
        d.count_include_pad = true;
        assert_eq!(
            eval_f32(&Op::Pool(d), &[&x]),
            vec![2.0, 3.0, 1.75, 5.0, 6.0, 3.25, 3.25, 3.75, 2.0]
        );
    }

    #[test]
    fn max_pool_indices_row_and_column_major() {
        // 2 channels of 2x3: channel 0 = [1 5 2 / 4 3 6], channel 1 = [9 9 0 / 0 0 8].
        // A 2x2 window with stride 1 gives 1x2 outputs per channel.
        let x = f32s(
            &[1, 2, 2, 3],
            &[1.0, 5.0, 2.0, 4.0, 3.0, 6.0, 9.0, 9.0, 0.0, 0.0, 0.0, 8.0],
        );
        let mut d = MaxPoolIndicesDesc {
            pool: pool(PoolKind::Max, &[2, 2], &[], &[]),
            column_major: false,
        };
        let out = evaluate(&Op::MaxPoolWithIndices(d.clone()), &[&x]).unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![5.0, 6.0, 9.0, 9.0]);
        // Row-major: 5 at (0,1) = 1, 6 at (1,2) = 5; channel 1 starts at 6, the first 9 wins
        // the tie in the first window, (0,1) in the second.
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[1, 5, 6, 7]);
        // Column-major: (h, w) → h + w * 2.
        d.column_major = true;
        let out = evaluate(&Op::MaxPoolWithIndices(d), &[&x]).unwrap();
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[2, 5, 6, 8]);
    }

    #[test]
    fn max_pool_of_integers_and_halves() {
        for dtype in [DataType::U8, DataType::I8, DataType::F16, DataType::F64] {
            let x = tensor(dtype, &[1, 1, 4], &[3.0, 100.0, 7.0, 2.0]);
            let y = eval1(&Op::Pool(pool(PoolKind::Max, &[2], &[2], &[])), &[&x]);
            assert_eq!(y.dtype(), dtype);
            assert_eq!(y.to_f64_vec(), vec![100.0, 7.0], "{dtype}");
        }
    }

    #[test]
    fn global_pools() {
        // Channel 0 = [1,2,3,4], channel 1 = [-1,-5,0,2] as 2x2 planes.
        let x = f32s(&[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, -1.0, -5.0, 0.0, 2.0]);
        let avg = eval1(&Op::GlobalPool(PoolKind::Average), &[&x]);
        assert_eq!(avg.shape().dims(), &[1, 2, 1, 1]);
        assert_eq!(avg.to_f64_vec(), vec![2.5, -1.0]);
        let max = eval1(&Op::GlobalPool(PoolKind::Max), &[&x]);
        assert_eq!(max.to_f64_vec(), vec![4.0, 2.0]);
        // 1-D spatial with 7 elements.
        let x = f32s(&[1, 1, 7], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(
            eval_f32(&Op::GlobalPool(PoolKind::Average), &[&x]),
            vec![4.0]
        );
    }
}

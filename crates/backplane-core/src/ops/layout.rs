//! Data-movement operators: reshapes, transposes, slicing, joining, gathering, padding, casts.

use crate::shape::normalize_axis;
use crate::{CoreError, DataType, Result, TensorInfo};

/// Slice (ONNX semantics: negative indices count from the end, out-of-range values clamp).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SliceDesc {
    /// Start per listed axis.
    pub starts: Vec<i64>,
    /// End (exclusive) per listed axis.
    pub ends: Vec<i64>,
    /// The axes (empty means 0..starts.len()).
    pub axes: Vec<i64>,
    /// Steps (empty means all 1; negative walks backwards).
    pub steps: Vec<i64>,
}

/// One axis of a resolved slice: read `len` elements from `start` stepping by `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRange {
    /// First index read.
    pub start: i64,
    /// Step between reads.
    pub step: i64,
    /// Number of elements read.
    pub len: usize,
}

impl SliceDesc {
    /// Resolve against concrete dims: one range per axis of the input.
    pub fn resolve(&self, dims: &[usize]) -> Result<Vec<SliceRange>> {
        let n = self.starts.len();
        if self.ends.len() != n
            || (!self.axes.is_empty() && self.axes.len() != n)
            || (!self.steps.is_empty() && self.steps.len() != n)
        {
            return Err(CoreError::op(
                "Slice",
                "starts, ends, axes and steps differ in length",
            ));
        }
        let mut ranges: Vec<SliceRange> = dims
            .iter()
            .map(|&d| SliceRange {
                start: 0,
                step: 1,
                len: d,
            })
            .collect();
        let mut seen = vec![false; dims.len()];
        for i in 0..n {
            let axis = if self.axes.is_empty() {
                normalize_axis(i as i64, dims.len())?
            } else {
                normalize_axis(self.axes[i], dims.len())?
            };
            if std::mem::replace(&mut seen[axis], true) {
                return Err(CoreError::op(
                    "Slice",
                    format!("axis {axis} is listed twice"),
                ));
            }
            let step = if self.steps.is_empty() {
                1
            } else {
                self.steps[i]
            };
            if step == 0 {
                return Err(CoreError::op("Slice", "step must not be 0"));
            }
            let dim = dims[axis] as i64;
            let fix = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
            let (mut s, mut e) = (fix(self.starts[i]), fix(self.ends[i]));
            if step > 0 {
                s = s.clamp(0, dim);
                e = e.clamp(0, dim);
            } else {
                s = s.clamp(0, (dim - 1).max(0));
                e = e.clamp(-1, dim - 1);
            }
            // ceil(distance / |step|), written so that huge steps cannot overflow.
            let len = if step > 0 {
                if e > s {
                    (e - s - 1) / step + 1
                } else {
                    0
                }
            } else if s > e && dim > 0 {
                (s - e - 1) / step.saturating_neg() + 1
            } else {
                0
            };
            ranges[axis] = SliceRange {
                start: s,
                step,
                len: len as usize,
            };
        }
        Ok(ranges)
    }
}

/// Pad mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// Fill with a constant.
    Constant,
    /// Mirror without repeating the edge.
    Reflect,
    /// Repeat the edge value.
    Edge,
    /// Wrap around.
    Wrap,
}

/// Pad with per-axis begin/end amounts (negative amounts crop).
#[derive(Debug, Clone, PartialEq)]
pub struct PadDesc {
    /// How to fill.
    pub mode: PadMode,
    /// All begins then all ends, one per input axis.
    pub pads: Vec<i64>,
    /// The fill value for `Constant`.
    pub value: f64,
}

pub(crate) fn infer_flatten(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let r = x.shape.rank() as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a > r {
        return Err(CoreError::op(
            "Flatten",
            format!("axis {axis} out of range for rank {r}"),
        ));
    }
    let d = x.shape.dims();
    let outer: usize = d[..a as usize].iter().product();
    let inner: usize = d[a as usize..].iter().product();
    Ok(vec![TensorInfo::new(x.dtype, vec![outer, inner])])
}

pub(crate) fn infer_reshape(shape: &[usize], inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let want = crate::shape::checked_product(shape);
    if want != Some(x.shape.elements()) {
        return Err(CoreError::op(
            "Reshape",
            format!(
                "cannot reshape {} ({} elements) to {shape:?}",
                x.shape,
                x.shape.elements()
            ),
        ));
    }
    Ok(vec![TensorInfo::new(x.dtype, shape.to_vec())])
}

/// Whether `order` holds each of `0..rank` once.
fn is_order(order: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    order.len() == rank
        && order
            .iter()
            .all(|&a| a < rank && !std::mem::replace(&mut seen[a], true))
}

/// A layout conversion keeps the description; both orders must fit the input's rank.
pub(crate) fn infer_permute(
    from: &[usize],
    to: &[usize],
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let rank = inputs[0].shape.rank();
    if !is_order(from, rank) || !is_order(to, rank) {
        return Err(CoreError::InvalidOp {
            op: "Permute",
            message: format!("axis orders {from:?} -> {to:?} do not fit a rank-{rank} tensor"),
        });
    }
    Ok(vec![inputs[0].clone()])
}

pub(crate) fn infer_transpose(perm: &[usize], inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let d = x.shape.dims();
    let mut seen = vec![false; d.len()];
    if perm.len() != d.len()
        || perm
            .iter()
            .any(|&p| p >= d.len() || std::mem::replace(&mut seen[p], true))
    {
        return Err(CoreError::op(
            "Transpose",
            format!("perm {perm:?} is not a permutation of 0..{}", d.len()),
        ));
    }
    Ok(vec![TensorInfo::new(
        x.dtype,
        perm.iter().map(|&p| d[p]).collect::<Vec<_>>(),
    )])
}

pub(crate) fn infer_squeeze(axes: &[i64], inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let d = x.shape.dims();
    let mut drop = vec![false; d.len()];
    if axes.is_empty() {
        for (i, &v) in d.iter().enumerate() {
            drop[i] = v == 1;
        }
    } else {
        for &a in axes {
            let a = normalize_axis(a, d.len())?;
            if d[a] != 1 {
                return Err(CoreError::op(
                    "Squeeze",
                    format!("axis {a} of {} is not 1", x.shape),
                ));
            }
            drop[a] = true;
        }
    }
    let out: Vec<usize> = d
        .iter()
        .zip(&drop)
        .filter(|(_, &k)| !k)
        .map(|(&v, _)| v)
        .collect();
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

pub(crate) fn infer_unsqueeze(axes: &[i64], inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let r = x.shape.rank() + axes.len();
    let mut inserted = vec![false; r];
    for &a in axes {
        let a = normalize_axis(a, r)?;
        if std::mem::replace(&mut inserted[a], true) {
            return Err(CoreError::op("Unsqueeze", format!("axis {a} repeated")));
        }
    }
    let mut src = x.shape.dims().iter();
    let out: Vec<usize> = inserted
        .iter()
        .map(|&ins| {
            if ins {
                1
            } else {
                src.next().copied().unwrap_or(1)
            }
        })
        .collect();
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

pub(crate) fn infer_concat(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let first = inputs[0];
    let a = normalize_axis(axis, first.shape.rank())?;
    let mut out = first.shape.dims().to_vec();
    out[a] = 0;
    for t in inputs {
        let d = t.shape.dims();
        if t.dtype != first.dtype
            || d.len() != out.len()
            || d.iter().enumerate().any(|(i, &v)| i != a && v != out[i])
        {
            return Err(CoreError::op(
                "Concat",
                format!("input {} does not match {} outside axis {a}", t, first),
            ));
        }
        out[a] += d[a];
    }
    Ok(vec![TensorInfo::new(first.dtype, out)])
}

pub(crate) fn infer_split(
    axis: i64,
    splits: &[usize],
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let a = normalize_axis(axis, x.shape.rank())?;
    if splits.iter().sum::<usize>() != x.shape.dims()[a] {
        return Err(CoreError::op(
            "Split",
            format!("splits {splits:?} do not sum to dim {} of {}", a, x.shape),
        ));
    }
    Ok(splits
        .iter()
        .map(|&s| {
            let mut d = x.shape.dims().to_vec();
            d[a] = s;
            TensorInfo::new(x.dtype, d)
        })
        .collect())
}

pub(crate) fn infer_gather(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (x, idx) = (inputs[0], inputs[1]);
    if !matches!(idx.dtype, DataType::I32 | DataType::I64) {
        return Err(CoreError::op(
            "Gather",
            format!("indices must be i32 or i64, got {}", idx.dtype),
        ));
    }
    let a = normalize_axis(axis, x.shape.rank())?;
    let d = x.shape.dims();
    let mut out = d[..a].to_vec();
    out.extend_from_slice(idx.shape.dims());
    out.extend_from_slice(&d[a + 1..]);
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

pub(crate) fn infer_slice(desc: &SliceDesc, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let r = desc.resolve(x.shape.dims())?;
    Ok(vec![TensorInfo::new(
        x.dtype,
        r.iter().map(|s| s.len).collect::<Vec<_>>(),
    )])
}

pub(crate) fn infer_pad(desc: &PadDesc, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let d = x.shape.dims();
    if desc.pads.len() != 2 * d.len() {
        return Err(CoreError::op(
            "Pad",
            format!("pads has {} values for rank {}", desc.pads.len(), d.len()),
        ));
    }
    let mut out = Vec::with_capacity(d.len());
    for (i, &v) in d.iter().enumerate() {
        let n = v as i64 + desc.pads[i] + desc.pads[d.len() + i];
        if n < 0 {
            return Err(CoreError::op(
                "Pad",
                format!("axis {i} would have negative size {n}"),
            ));
        }
        if desc.mode == PadMode::Reflect
            && v > 0
            && (desc.pads[i] >= v as i64 || desc.pads[d.len() + i] >= v as i64)
        {
            return Err(CoreError::op(
                "Pad",
                format!("reflect pads on axis {i} must be smaller than {v}"),
            ));
        }
        if desc.mode != PadMode::Constant && v == 0 && n > 0 {
            return Err(CoreError::op(
                "Pad",
                "cannot reflect, edge- or wrap-pad an empty axis",
            ));
        }
        out.push(n as usize);
    }
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_clamps_and_walks_backwards() {
        let s = SliceDesc {
            starts: vec![-1],
            ends: vec![i64::MIN],
            axes: vec![0],
            steps: vec![-1],
        };
        let r = s.resolve(&[5]).unwrap();
        assert_eq!(
            r[0],
            SliceRange {
                start: 4,
                step: -1,
                len: 5
            }
        );
        let s = SliceDesc {
            starts: vec![1],
            ends: vec![1000],
            axes: vec![-1],
            steps: vec![2],
        };
        let r = s.resolve(&[3, 6]).unwrap();
        assert_eq!(
            r[1],
            SliceRange {
                start: 1,
                step: 2,
                len: 3
            }
        );
        assert_eq!(r[0].len, 3);
    }
}

//! Operators whose outputs are computed at import from constant inputs: ConstantOfShape and
//! Range (outputs fully determined by their parameters) and NonZero (a data-dependent output
//! shape). When their inputs are computed at run time the import needs those values
//! ([`super::TxError::NeedsValues`]): the model is then imported specialized on them.

use super::{Lowering, NodeCx, Tx, TxError};
use crate::tensor::{check_size, Decoded};
use crate::OnnxError;
use backplane_core::{DataType, Tensor, TensorInfo};

pub(super) fn constant_of_shape(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let shape = cx
        .const_ints(0, "shape")?
        .ok_or_else(|| cx.invalid("the shape input is required"))?;
    let dims = shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| cx.invalid(format!("negative dimension {d}"))))
        .collect::<Tx<Vec<usize>>>()?;
    let value = match cx.attrs.get("value").and_then(|a| a.t.as_ref()) {
        Some(tp) => match cx.imp.decode_attr_tensor(tp, cx.name)? {
            Decoded::Tensor(t) => t,
            Decoded::Unsupported { reason, .. } => {
                return Err(TxError::Unsupported(format!(
                    "{reason}, which backplane does not support"
                )))
            }
        },
        None => Tensor::scalar(0.0f32),
    };
    if value.shape().elements() != 1 {
        return Err(cx.invalid("the value must hold exactly one element"));
    }
    check_size(
        cx.name,
        &dims,
        value.dtype().size(),
        cx.imp.max_tensor_bytes(),
    )?;
    // Filled in place: one allocation of the output, which fails as an error.
    let mut t = Tensor::zeros(TensorInfo::new(value.dtype(), dims))
        .map_err(|e| TxError::Fatal(OnnxError::core(cx.name, e)))?;
    let element = value.bytes();
    if !element.is_empty() && element.iter().any(|&b| b != 0) {
        for chunk in t.bytes_mut().chunks_exact_mut(element.len()) {
            chunk.copy_from_slice(element);
        }
    }
    Ok(Lowering::Constants(vec![t]))
}

pub(super) fn range(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let (start, limit, delta) = (
        cx.known(0, "Range's output")?,
        cx.known(1, "Range's output")?,
        cx.known(2, "Range's output")?,
    );
    let dtype = start.dtype();
    if [&limit, &delta].iter().any(|t| t.dtype() != dtype)
        || [&start, &limit, &delta]
            .iter()
            .any(|t| t.shape().elements() != 1)
    {
        return Err(cx.invalid("start, limit and delta must be scalars of one type"));
    }
    let (s, l, d) = (
        start.to_f64_vec()[0],
        limit.to_f64_vec()[0],
        delta.to_f64_vec()[0],
    );
    if !(s.is_finite() && l.is_finite() && d.is_finite()) {
        return Err(cx.invalid(format!(
            "start ({s}), limit ({l}) and delta ({d}) must be finite numbers"
        )));
    }
    if d == 0.0 {
        return Err(cx.invalid("delta must not be 0"));
    }
    let count = ((l - s) / d).ceil().max(0.0);
    let limit_elems = (cx.imp.max_tensor_bytes() / dtype.size().max(1)) as f64;
    if !count.is_finite() || count > limit_elems {
        return Err(cx.invalid(format!("Range would have {count} elements")));
    }
    let n = count as usize;
    let t = match dtype {
        DataType::I32 | DataType::I64 | DataType::I8 => {
            let (s, d) = (s as i64, d as i64);
            let v: Vec<f64> = (0..n as i64).map(|i| (s + i * d) as f64).collect();
            Tensor::from_f64_values(TensorInfo::new(dtype, vec![n]), &v)
        }
        DataType::F32 => {
            // Accumulated in f32, as the reference implementation does.
            let (s, d) = (s as f32, d as f32);
            let v: Vec<f32> = (0..n).map(|i| s + i as f32 * d).collect();
            Tensor::from_vec(vec![n], v)
        }
        other => {
            return Err(TxError::Unsupported(format!(
                "Range of {other} is not supported"
            )))
        }
    }
    .map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

pub(super) fn non_zero(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.known(0, "NonZero's output shape")?;
    let dims = x.shape().dims().to_vec();
    let values = x.to_f64_vec();
    let strides = backplane_core::shape::strides_of(&dims);
    let hits: Vec<usize> = values
        .iter()
        .enumerate()
        .filter(|(_, &v)| v != 0.0)
        .map(|(i, _)| i)
        .collect();
    let rank = dims.len();
    let mut out = vec![0i64; rank * hits.len()];
    for (k, &flat) in hits.iter().enumerate() {
        for a in 0..rank {
            out[a * hits.len() + k] = ((flat / strides[a]) % dims[a]) as i64;
        }
    }
    let t = Tensor::from_vec(vec![rank, hits.len()], out).map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

/// The window functions of signal processing (opset 17).
#[derive(Debug, Clone, Copy)]
pub(super) enum WindowKind {
    /// sin²(πn/N).
    Hann,
    /// 25/46 - 21/46 cos(2πn/N).
    Hamming,
    /// 0.42 - 0.5 cos(2πn/N) + 0.08 cos(4πn/N).
    Blackman,
}

/// HannWindow, HammingWindow, BlackmanWindow: a constant computed from the size input
/// (N is the size when `periodic`, else size - 1).
pub(super) fn window_function(cx: &NodeCx<'_>, kind: WindowKind) -> Tx<Lowering> {
    cx.require_opset(17)?;
    let size = cx
        .const_scalar(0, "size")?
        .ok_or_else(|| cx.invalid("the size input is required"))?;
    let code = cx.attr(cx.attrs.int_or("output_datatype", 1))?;
    let dtype = DataType::from_onnx_code(code)
        .ok_or_else(|| TxError::Unsupported(format!("output_datatype {code} is not supported")))?;
    let limit = (cx.imp.max_tensor_bytes() / dtype.size().max(1)) as f64;
    if !(0.0..=limit).contains(&size) || size.fract() != 0.0 {
        return Err(cx.invalid(format!("size must be a count of elements, got {size}")));
    }
    let n = size as usize;
    let periodic = cx.attr(cx.attrs.flag("periodic", true))?;
    let denominator = if periodic { size } else { size - 1.0 };
    let tau = 2.0 * std::f64::consts::PI;
    let values: Vec<f64> = (0..n)
        .map(|i| {
            let x = i as f64 / denominator;
            match kind {
                WindowKind::Hann => (std::f64::consts::PI * x).sin().powi(2),
                WindowKind::Hamming => 25.0 / 46.0 - 21.0 / 46.0 * (tau * x).cos(),
                WindowKind::Blackman => 0.42 - 0.5 * (tau * x).cos() + 0.08 * (2.0 * tau * x).cos(),
            }
        })
        .collect();
    let t = Tensor::from_f64_values(TensorInfo::new(dtype, vec![n]), &values)
        .map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

/// EyeLike: ones on the k-th diagonal of a matrix shaped like the input; only the input's
/// shape matters, so the output is a constant.
pub(super) fn eye_like(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.info(0)?;
    let dims = x.shape.dims().to_vec();
    if dims.len() != 2 {
        return Err(cx.invalid(format!("the input must be 2-D, got {}", x.shape)));
    }
    let dtype = match cx.attr(cx.attrs.int("dtype"))? {
        None => x.dtype,
        Some(code) => DataType::from_onnx_code(code)
            .ok_or_else(|| TxError::Unsupported(format!("dtype {code} is not supported")))?,
    };
    let k = cx.attr(cx.attrs.int_or("k", 0))?;
    check_size(cx.name, &dims, dtype.size(), cx.imp.max_tensor_bytes())?;
    let (rows, cols) = (dims[0], dims[1]);
    let values: Vec<f64> = (0..rows * cols)
        .map(|i| {
            let (r, c) = ((i / cols) as i64, (i % cols) as i64);
            if c - r == k {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    let t = Tensor::from_f64_values(TensorInfo::new(dtype, dims), &values)
        .map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

/// The corners (y_min, x_min, y_max, x_max) of a box in either NonMaxSuppression format.
fn box_corners(b: &[f64], center_point_box: bool) -> [f64; 4] {
    if center_point_box {
        // [x_center, y_center, width, height]
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[1] - hh, b[0] - hw, b[1] + hh, b[0] + hw]
    } else {
        // [y1, x1, y2, x2], either diagonal.
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

/// Intersection over union of two boxes given by corners; 0 when either has no area.
fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let h = a[2].min(b[2]) - a[0].max(b[0]);
    let w = a[3].min(b[3]) - a[1].max(b[1]);
    if h <= 0.0 || w <= 0.0 {
        return 0.0;
    }
    let inter = h * w;
    let area_a = (a[2] - a[0]) * (a[3] - a[1]);
    let area_b = (b[2] - b[0]) * (b[3] - b[1]);
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return 0.0;
    }
    inter / union
}

/// The boxes NonMaxSuppression kept so far for one class, and the test a candidate must
/// pass: its IoU with each of them at most the threshold. Only boxes that overlap the
/// candidate can have a positive IoU, so with a threshold of 0 or more and finite corners
/// the kept boxes are indexed by their left edge and only those whose span can reach the
/// candidate's are tested (detectors offset each class's boxes apart, so most kept boxes
/// are far away: the test per candidate no longer grows with every box kept).
struct Kept<'a> {
    corners: &'a [[f64; 4]],
    threshold: f64,
    /// Kept boxes by the order key of their left edge (`None`: test every kept box).
    by_left: Option<std::collections::BTreeMap<u64, Vec<usize>>>,
    /// The widest kept box.
    widest: f64,
    all: Vec<usize>,
}

/// A key ordered as the finite float `x` is.
fn order_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

impl<'a> Kept<'a> {
    fn new(corners: &'a [[f64; 4]], threshold: f64) -> Self {
        let indexed = threshold >= 0.0 && corners.iter().flatten().all(|v| v.is_finite());
        Kept {
            corners,
            threshold,
            by_left: indexed.then(std::collections::BTreeMap::new),
            widest: 0.0,
            all: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.all.len()
    }

    fn push(&mut self, i: usize) {
        self.all.push(i);
        let c = &self.corners[i];
        if let Some(by_left) = &mut self.by_left {
            by_left.entry(order_key(c[1])).or_default().push(i);
            self.widest = self.widest.max(c[3] - c[1]);
        }
    }

    /// Whether box `i` overlaps no kept box by more than the threshold.
    fn admits(&self, i: usize) -> bool {
        let c = &self.corners[i];
        let fits = |k: &usize| iou(c, &self.corners[*k]) <= self.threshold;
        match &self.by_left {
            None => self.all.iter().all(fits),
            Some(by_left) => {
                // A kept box overlapping this one starts before its right edge and no
                // further left than its left edge minus the widest kept box.
                let (from, to) = (order_key(c[1] - self.widest), order_key(c[3]));
                from > to || by_left.range(from..=to).flat_map(|(_, v)| v).all(fits)
            }
        }
    }
}

/// NonMaxSuppression: per batch and class, greedily keep the highest-scoring boxes (ties:
/// lower index first) above `score_threshold` whose IoU with every box kept so far is at most
/// `iou_threshold`, up to `max_output_boxes_per_class`. The output's length depends on the
/// values, so they must be known (the model is imported specialized on them otherwise).
pub(super) fn non_max_suppression(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let what = "NonMaxSuppression's output shape";
    let boxes = cx.known(0, what)?;
    let scores = cx.known(1, what)?;
    let (bd, sd) = (boxes.shape().dims(), scores.shape().dims());
    if bd.len() != 3 || bd[2] != 4 || sd.len() != 3 || sd[0] != bd[0] || sd[2] != bd[1] {
        return Err(cx.invalid(format!(
            "boxes must be [B, N, 4] and scores [B, C, N], got {} and {}",
            boxes.shape(),
            scores.shape()
        )));
    }
    let (batches, classes, count) = (sd[0], sd[1], sd[2]);
    let scalar = |i: usize| -> Tx<Option<f64>> {
        if cx.input_name(i).is_none() {
            return Ok(None);
        }
        let t = cx.known(i, what)?;
        Ok(t.to_f64_vec().first().copied())
    };
    let max_per_class = scalar(2)?.unwrap_or(0.0).clamp(0.0, count as f64) as usize;
    let iou_threshold = scalar(3)?.unwrap_or(0.0);
    let score_threshold = scalar(4)?;
    let center_point_box = cx.attr(cx.attrs.int_or("center_point_box", 0))? != 0;
    let (bv, sv) = (boxes.to_f64_vec(), scores.to_f64_vec());
    let mut selected: Vec<i64> = Vec::new();
    for b in 0..batches {
        let corners: Vec<[f64; 4]> = (0..count)
            .map(|i| {
                box_corners(
                    &bv[(b * count + i) * 4..(b * count + i + 1) * 4],
                    center_point_box,
                )
            })
            .collect();
        for c in 0..classes {
            let s = &sv[(b * classes + c) * count..(b * classes + c + 1) * count];
            let mut order: Vec<usize> = (0..count)
                .filter(|&i| score_threshold.is_none_or(|t| s[i] > t))
                .collect();
            // Highest score first; the sort is stable, so ties keep the lower index first.
            order.sort_by(|&i, &j| s[j].partial_cmp(&s[i]).unwrap_or(std::cmp::Ordering::Equal));
            let mut kept = Kept::new(&corners, iou_threshold);
            for i in order {
                if kept.len() >= max_per_class {
                    break;
                }
                if kept.admits(i) {
                    kept.push(i);
                    selected.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    let n = selected.len() / 3;
    let t = Tensor::from_vec(vec![n, 3], selected).map_err(|e| cx.invalid(e))?;
    Ok(Lowering::Constants(vec![t]))
}

/// Unique: the distinct elements (or slices along `axis`) of a known input, sorted or in
/// order of first occurrence, with the index of each one's first occurrence, the index of
/// each input element's (slice's) unique value, and the counts. The output's length depends
/// on the values, so the input must be known (the model is imported specialized on it
/// otherwise).
pub(super) fn unique(cx: &NodeCx<'_>) -> Tx<Lowering> {
    let x = cx.known(0, "Unique's output shape")?;
    let dims = x.shape().dims().to_vec();
    let values = x.to_f64_vec();
    let sorted = cx.attr(cx.attrs.flag("sorted", true))?;
    let axis = match cx.attr(cx.attrs.int("axis"))? {
        Some(a) => {
            Some(backplane_core::shape::normalize_axis(a, dims.len()).map_err(|e| cx.invalid(e))?)
        }
        None => None,
    };
    // Slices: (outer, len, inner) around the axis; a flattened input is one axis.
    let (outer, len, inner) = match axis {
        Some(a) => (
            dims[..a].iter().product::<usize>(),
            dims[a],
            dims[a + 1..].iter().product::<usize>(),
        ),
        None => (1, values.len(), 1),
    };
    let slice = |k: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |i| (o * len + k) * inner + i))
            .map(|at| values[at])
            .collect()
    };
    let compare = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| x.total_cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    };
    // Distinct slices in order of first occurrence: (slice, first index, count).
    let mut found: Vec<(Vec<f64>, usize, usize)> = Vec::new();
    let mut inverse = Vec::with_capacity(len);
    for k in 0..len {
        let s = slice(k);
        match found.iter().position(|(u, _, _)| compare(u, &s).is_eq()) {
            Some(u) => {
                found[u].2 += 1;
                inverse.push(u);
            }
            None => {
                inverse.push(found.len());
                found.push((s, k, 1));
            }
        }
    }
    let mut order: Vec<usize> = (0..found.len()).collect();
    if sorted {
        order.sort_by(|&a, &b| compare(&found[a].0, &found[b].0));
    }
    let mut rank = vec![0usize; found.len()];
    for (r, &u) in order.iter().enumerate() {
        rank[u] = r;
    }
    let unique_count = found.len();
    let mut y_dims = dims.clone();
    let mut y = vec![0f64; outer * unique_count * inner];
    match axis {
        Some(a) => y_dims[a] = unique_count,
        None => y_dims = vec![unique_count],
    }
    for (r, &u) in order.iter().enumerate() {
        for o in 0..outer {
            for i in 0..inner {
                y[(o * unique_count + r) * inner + i] = found[u].0[o * inner + i];
            }
        }
    }
    let ints = |v: Vec<usize>| {
        let n = v.len();
        Tensor::from_vec(
            vec![n],
            v.into_iter().map(|i| i as i64).collect::<Vec<i64>>(),
        )
        .map_err(|e| cx.invalid(e))
    };
    let outputs = vec![
        Tensor::from_f64_values(TensorInfo::new(x.dtype(), y_dims), &y)
            .map_err(|e| cx.invalid(e))?,
        ints(order.iter().map(|&u| found[u].1).collect())?,
        ints(inverse.iter().map(|&u| rank[u]).collect())?,
        ints(order.iter().map(|&u| found[u].2).collect())?,
    ];
    Ok(Lowering::Constants(
        outputs
            .into_iter()
            .take(cx.node.output.len().max(1))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The greedy selection of every box against every kept one, as the operator defines it.
    fn greedy(corners: &[[f64; 4]], threshold: f64) -> Vec<usize> {
        let mut kept: Vec<usize> = Vec::new();
        for i in 0..corners.len() {
            if kept
                .iter()
                .all(|&k| iou(&corners[i], &corners[k]) <= threshold)
            {
                kept.push(i);
            }
        }
        kept
    }

    /// The indexed test keeps exactly the boxes the plain one does: boxes of many sizes, in
    /// clusters far apart (as a detector's per-class offsets make them), with touching and
    /// equal boxes, zero-area ones, negative coordinates, and thresholds 0, 0.5 and below 0.
    #[test]
    fn kept_boxes_match_the_plain_greedy_selection() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut unit = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut corners: Vec<[f64; 4]> = Vec::new();
        for cluster in 0..7 {
            let off = f64::from(cluster) * 1000.0 - 3000.0;
            for _ in 0..150 {
                let (y, x) = (unit() * 50.0 + off, unit() * 50.0 + off);
                let (h, w) = (unit() * 30.0, unit() * 30.0 * f64::from(cluster % 3));
                corners.push([y, x, y + h, x + w]);
            }
        }
        corners.push(corners[3]);
        corners.push([
            corners[5][0],
            corners[5][3],
            corners[5][2],
            corners[5][3] + 4.0,
        ]);
        for threshold in [0.0, 0.5, 0.9, -0.1] {
            let mut kept = Kept::new(&corners, threshold);
            let mut got = Vec::new();
            for i in 0..corners.len() {
                if kept.admits(i) {
                    kept.push(i);
                    got.push(i);
                }
            }
            let want = greedy(&corners, threshold);
            assert_eq!(got, want, "threshold {threshold}");
            // Meaningful cases: some boxes suppressed, many kept (a negative threshold keeps
            // only the first box: every IoU, 0 included, is above it).
            let (n, all) = (want.len(), corners.len());
            match threshold {
                t if t < 0.0 => assert_eq!(n, 1),
                t if t <= 0.5 => assert!(n > 7 && n < all, "{n} of {all}"),
                _ => {}
            }
        }
    }
}

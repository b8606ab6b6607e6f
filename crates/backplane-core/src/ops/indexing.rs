//! Index-driven and shape-building operators: Expand, Tile, Trilu, GatherElements, GatherND,
//! ScatterND, ScatterElements, OneHot, TopK, CumSum, ArgMax/ArgMin, and the softmax relatives.

use crate::shape::{broadcast_shapes, normalize_axis};
use crate::{CoreError, DataType, Result, TensorInfo};

/// How a scatter combines an update with the existing value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScatterReduction {
    /// Replace.
    #[default]
    None,
    /// Add.
    Add,
    /// Multiply.
    Mul,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

impl ScatterReduction {
    /// The ONNX attribute value.
    pub fn name(self) -> &'static str {
        match self {
            ScatterReduction::None => "none",
            ScatterReduction::Add => "add",
            ScatterReduction::Mul => "mul",
            ScatterReduction::Max => "max",
            ScatterReduction::Min => "min",
        }
    }
}

/// ArgMax / ArgMin along one axis; i64 indices out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArgReduceDesc {
    /// ArgMax (true) or ArgMin (false).
    pub max: bool,
    /// The axis.
    pub axis: i64,
    /// Keep the reduced axis as size 1.
    pub keepdims: bool,
    /// On ties, the last index instead of the first.
    pub select_last_index: bool,
}

/// TopK along one axis: values and i64 indices of the `k` largest (or smallest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopKDesc {
    /// The axis.
    pub axis: i64,
    /// How many.
    pub k: usize,
    /// Largest (true) or smallest.
    pub largest: bool,
    /// Sorted output (ties: lower index first). backplane always sorts.
    pub sorted: bool,
}

const INDICES: [DataType; 2] = [DataType::I32, DataType::I64];

fn need_indices(op: &'static str, t: &TensorInfo) -> Result<()> {
    if INDICES.contains(&t.dtype) {
        Ok(())
    } else {
        Err(CoreError::op(
            op,
            format!("indices must be i32 or i64, got {}", t.dtype),
        ))
    }
}

pub(crate) fn infer_expand(shape: &[usize], inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let out = broadcast_shapes(x.shape.dims(), shape)
        .map_err(|e| CoreError::op("Expand", e.to_string()))?;
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

pub(crate) fn infer_tile(repeats: &[usize], inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if repeats.len() != x.shape.rank() {
        return Err(CoreError::op(
            "Tile",
            format!("{} repeats for rank {}", repeats.len(), x.shape.rank()),
        ));
    }
    let out = x
        .shape
        .dims()
        .iter()
        .zip(repeats)
        .map(|(&d, &r)| d.checked_mul(r))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| CoreError::op("Tile", "the output size overflows"))?;
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

pub(crate) fn infer_trilu(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if x.shape.rank() < 2 {
        return Err(CoreError::op("Trilu", "the input must have rank >= 2"));
    }
    Ok(vec![x.clone()])
}

pub(crate) fn infer_gather_elements(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (x, idx) = (inputs[0], inputs[1]);
    need_indices("GatherElements", idx)?;
    normalize_axis(axis, x.shape.rank())?;
    if idx.shape.rank() != x.shape.rank() {
        return Err(CoreError::op(
            "GatherElements",
            "data and indices must have the same rank",
        ));
    }
    Ok(vec![TensorInfo::new(x.dtype, idx.shape.clone())])
}

pub(crate) fn infer_gather_nd(
    batch_dims: usize,
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let (x, idx) = (inputs[0], inputs[1]);
    need_indices("GatherND", idx)?;
    let (d, i) = (x.shape.dims(), idx.shape.dims());
    let Some(&last) = i.last() else {
        return Err(CoreError::op("GatherND", "indices must have rank >= 1"));
    };
    if batch_dims >= d.len().min(i.len()) || d[..batch_dims] != i[..batch_dims] {
        return Err(CoreError::op("GatherND", "bad batch_dims"));
    }
    if last + batch_dims > d.len() {
        return Err(CoreError::op(
            "GatherND",
            "the last indices dimension is too large",
        ));
    }
    let mut out = i[..i.len() - 1].to_vec();
    out.extend_from_slice(&d[batch_dims + last..]);
    Ok(vec![TensorInfo::new(x.dtype, out)])
}

pub(crate) fn infer_scatter_nd(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (x, idx, upd) = (inputs[0], inputs[1], inputs[2]);
    need_indices("ScatterND", idx)?;
    let (d, i, u) = (x.shape.dims(), idx.shape.dims(), upd.shape.dims());
    let Some(&last) = i.last() else {
        return Err(CoreError::op("ScatterND", "indices must have rank >= 1"));
    };
    let mut want = i[..i.len() - 1].to_vec();
    if last > d.len() {
        return Err(CoreError::op(
            "ScatterND",
            "the last indices dimension is too large",
        ));
    }
    want.extend_from_slice(&d[last..]);
    if want != u || upd.dtype != x.dtype {
        return Err(CoreError::op(
            "ScatterND",
            format!("updates must be {:?} of {}", want, x.dtype),
        ));
    }
    Ok(vec![x.clone()])
}

pub(crate) fn infer_scatter_elements(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let (x, idx, upd) = (inputs[0], inputs[1], inputs[2]);
    need_indices("ScatterElements", idx)?;
    normalize_axis(axis, x.shape.rank())?;
    if idx.shape != upd.shape || idx.shape.rank() != x.shape.rank() || upd.dtype != x.dtype {
        return Err(CoreError::op(
            "ScatterElements",
            "indices and updates must have the same shape and the data's rank",
        ));
    }
    Ok(vec![x.clone()])
}

pub(crate) fn infer_one_hot(
    axis: i64,
    depth: usize,
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let (idx, values) = (inputs[0], inputs[1]);
    if idx.dtype == DataType::Bool {
        return Err(CoreError::op("OneHot", "indices must be numeric"));
    }
    if values.shape.elements() != 2 {
        return Err(CoreError::op("OneHot", "values must have two elements"));
    }
    let rank = idx.shape.rank() + 1;
    let a = normalize_axis(axis, rank)?;
    let mut out = idx.shape.dims().to_vec();
    out.insert(a, depth);
    Ok(vec![TensorInfo::new(values.dtype, out)])
}

pub(crate) fn infer_top_k(desc: &TopKDesc, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let a = normalize_axis(desc.axis, x.shape.rank())?;
    if desc.k > x.shape.dims()[a] {
        return Err(CoreError::op(
            "TopK",
            format!(
                "k = {} is larger than the axis ({})",
                desc.k,
                x.shape.dims()[a]
            ),
        ));
    }
    if x.dtype == DataType::Bool {
        return Err(CoreError::op("TopK", "bool input"));
    }
    let mut out = x.shape.dims().to_vec();
    out[a] = desc.k;
    Ok(vec![
        TensorInfo::new(x.dtype, out.clone()),
        TensorInfo::new(DataType::I64, out),
    ])
}

pub(crate) fn infer_cum_sum(axis: i64, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    normalize_axis(axis, x.shape.rank())?;
    if x.dtype == DataType::Bool {
        return Err(CoreError::op("CumSum", "bool input"));
    }
    Ok(vec![x.clone()])
}

pub(crate) fn infer_arg_reduce(
    desc: &ArgReduceDesc,
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    let a = normalize_axis(desc.axis, x.shape.rank())?;
    if x.dtype == DataType::Bool {
        return Err(CoreError::op("ArgMax", "bool input"));
    }
    let mut out = x.shape.dims().to_vec();
    if desc.keepdims {
        out[a] = 1;
    } else {
        out.remove(a);
    }
    Ok(vec![TensorInfo::new(DataType::I64, out)])
}

pub(crate) fn infer_axis_float(
    op: &'static str,
    axis: i64,
    inputs: &[&TensorInfo],
) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if !x.dtype.is_float() {
        return Err(CoreError::op(op, format!("{} input", x.dtype)));
    }
    normalize_axis(axis, x.shape.rank())?;
    Ok(vec![TensorInfo::new(x.dtype, x.shape.clone())])
}

pub(crate) fn infer_instance_norm(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if x.shape.rank() < 2 || !x.dtype.is_float() {
        return Err(CoreError::op(
            "InstanceNormalization",
            "the input must be float of rank >= 2",
        ));
    }
    let c = x.shape.dims()[1];
    for p in &inputs[1..] {
        if p.shape.dims() != [c] || p.dtype != x.dtype {
            return Err(CoreError::op(
                "InstanceNormalization",
                format!("scale and bias must be [{c}] of {}", x.dtype),
            ));
        }
    }
    Ok(vec![x.clone()])
}

pub(crate) fn infer_lrn(inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
    let x = inputs[0];
    if x.shape.rank() < 3 || !x.dtype.is_float() {
        return Err(CoreError::op("LRN", "the input must be float of rank >= 3"));
    }
    Ok(vec![x.clone()])
}

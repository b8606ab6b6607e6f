//! Operators whose outputs are computed at import from constant inputs: ConstantOfShape and
//! Range (outputs fully determined by their parameters) and NonZero (a data-dependent output
//! shape). When their inputs are computed at run time the import needs those values
//! ([`super::TxError::NeedsValues`]): the model is then imported specialized on them.

use super::{Lowering, NodeCx, Tx, TxError};
use crate::tensor::{check_size, Decoded};
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
    let n = backplane_core::shape::checked_product(&dims).unwrap_or(0);
    let t = Tensor::from_bytes(
        TensorInfo::new(value.dtype(), dims),
        &value.bytes().repeat(n),
    )
    .map_err(|e| cx.invalid(e))?;
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

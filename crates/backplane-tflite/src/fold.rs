//! Constants computed at read time: DEQUANTIZE and DENSIFY operators whose input is data.
//!
//! Converters store weights in f16 (or int8 for weight-only quantization) and widen them
//! with a DEQUANTIZE before the operator that reads them, so a convolution's weights are a
//! computed tensor in the file; pruned weights are stored sparse and made dense by a
//! DENSIFY (the model reader has densified the data already: `sparse.rs`). The importer
//! folds each such operator into a constant before lowering, so the weights reach their
//! operator as data, as in a plain float32 model.

use crate::error::{Result, TfliteError};
use crate::model::{Code, Model};
use crate::schema::BUILTIN_NAMES;
use backplane_core::{DataType, Quantization, Tensor, TensorInfo};
use std::borrow::Cow;

/// The f32 value of constant `value`: f16 widened, quantized integers dequantized with their
/// per-tensor or per-axis scales (`(q - zero_point) * scale`), f32 as it is. `Ok(None)` for a
/// type with no real value (an integer without quantization).
pub(crate) fn to_f32(value: &Tensor, name: &str) -> Result<Option<Tensor>> {
    let shape = value.shape().clone();
    let f: Vec<f32> = match (value.dtype(), &value.info().quant) {
        (DataType::F32, _) => {
            return Ok(Some(
                value
                    .clone()
                    .reinterpret(TensorInfo::new(DataType::F32, shape))?,
            ))
        }
        (DataType::F16, Quantization::None) => {
            value.to_f64_vec().iter().map(|&v| v as f32).collect()
        }
        (_, Quantization::None) => return Ok(None),
        (_, Quantization::PerTensor { scale, zero_point }) => value
            .to_f64_vec()
            .iter()
            .map(|&v| (v as f32 - *zero_point as f32) * scale)
            .collect(),
        (
            _,
            Quantization::PerAxis {
                axis,
                scales,
                zero_points,
            },
        ) => {
            let dims = shape.dims();
            let Some(&len) = dims.get(*axis) else {
                return Err(TfliteError::Invalid(format!(
                    "'{name}' is quantized along axis {axis} of a rank-{} tensor",
                    dims.len()
                )));
            };
            if scales.len() != len || zero_points.len() != len {
                return Err(TfliteError::Invalid(format!(
                    "'{name}' has {} scales for {len} slices",
                    scales.len()
                )));
            }
            let inner: usize = dims[axis + 1..].iter().product();
            value
                .to_f64_vec()
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let c = (i / inner.max(1)) % len;
                    (v as f32 - zero_points[c] as f32) * scales[c]
                })
                .collect()
        }
    };
    Ok(Some(Tensor::from_vec(shape, f)?))
}

/// Fold every DEQUANTIZE of stored data into an f32 constant, and every DENSIFY of stored
/// data into a copy of it: the output tensor gets the data and the operator is marked folded
/// (skipped when lowering). An operator the fold cannot compute is left to the lowering,
/// which reports it.
pub(crate) fn fold_constants(model: &mut Model<'_>) -> Result<()> {
    let code_of = |name: &str| BUILTIN_NAMES.iter().position(|&n| n == name);
    let (dequantize, densify) = (code_of("DEQUANTIZE"), code_of("DENSIFY"));
    for k in 0..model.operators.len() {
        let op = &model.operators[k];
        let code = match op.code {
            Code::Builtin(c) => usize::try_from(c).ok(),
            Code::Custom(_) => None,
        };
        let (Some(Some(x)), [y]) = (op.inputs.first(), op.outputs.as_slice()) else {
            continue;
        };
        let (x, y) = (*x, *y);
        if code.is_none() || !(code == dequantize || code == densify) || x == y {
            continue;
        }
        let (Some(input), Some(output)) = (model.tensors.get(x), model.tensors.get(y)) else {
            continue;
        };
        if code == densify {
            if output.data.is_none()
                && input.data.is_some()
                && input.dtype == output.dtype
                && input.shape == output.shape
                && input.quant == output.quant
            {
                let data = input.data.clone();
                model.tensors[y].data = data;
                model.operators[k].folded = true;
            }
            continue;
        }
        if output.data.is_some() || output.dtype != Some(DataType::F32) {
            continue;
        }
        let (Some(data), Some(dtype)) = (input.data.as_deref(), input.dtype) else {
            continue;
        };
        let info = TensorInfo {
            dtype,
            shape: input.shape.clone().into(),
            quant: input.quant.clone(),
        };
        if info.num_bytes()? != data.len() || input.shape != output.shape {
            continue; // left to the lowering, which reports the inconsistency
        }
        let value = Tensor::from_bytes(info, data)?;
        let Some(f) = to_f32(&value, &input.name)? else {
            continue;
        };
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(f.bytes().len())
            .map_err(|_| TfliteError::Invalid(format!("no memory to widen '{}'", input.name)))?;
        bytes.extend_from_slice(f.bytes());
        let out = &mut model.tensors[y];
        out.data = Some(Cow::Owned(bytes));
        out.quant = Quantization::None;
        model.operators[k].folded = true;
    }
    Ok(())
}

//! A custom op's attribute form: its own attributes plus its output descriptions under
//! reserved `__output` names.

use super::codec::{Attrs, Reader};
use super::{dtype_from_onnx_code, onnx_dtype_code};
use crate::ops::{AttrValue, CustomOp, Op};
use crate::{Quantization, Result, Shape, TensorInfo};

/// Reserved attribute-name prefix for a custom op's output descriptions.
const OUTPUT_PREFIX: &str = "__output";

pub(super) fn custom_outputs(mut attrs: Attrs, outputs: &[TensorInfo]) -> Attrs {
    for (i, info) in outputs.iter().enumerate() {
        let p = format!("{OUTPUT_PREFIX}{i}_");
        attrs = attrs
            .int(&format!("{p}dtype"), onnx_dtype_code(info.dtype))
            .usizes(&format!("{p}shape"), info.shape.dims());
        match &info.quant {
            Quantization::None => {}
            Quantization::PerTensor { scale, zero_point } => {
                attrs = attrs
                    .floats(&format!("{p}scales"), &[*scale])
                    .ints(&format!("{p}zero_points"), &[i64::from(*zero_point)]);
            }
            Quantization::PerAxis {
                axis,
                scales,
                zero_points,
            } => {
                let zps: Vec<i64> = zero_points.iter().map(|&z| i64::from(z)).collect();
                attrs = attrs
                    .floats(&format!("{p}scales"), scales)
                    .ints(&format!("{p}zero_points"), &zps)
                    .usize(&format!("{p}axis"), *axis);
            }
        }
    }
    attrs
}

pub(super) fn custom_from_attributes(
    domain: &str,
    name: &str,
    attrs: &[(String, AttrValue)],
) -> Result<Op> {
    let r = Reader {
        op_type: name,
        attrs,
    };
    let mut outputs = Vec::new();
    for i in 0.. {
        let p = format!("{OUTPUT_PREFIX}{i}_");
        let dtype_name = format!("{p}dtype");
        if r.get(&dtype_name).is_none() {
            break;
        }
        let code = r.int(&dtype_name)?;
        let dtype = dtype_from_onnx_code(code).ok_or_else(|| r.bad(&dtype_name, code))?;
        let shape = Shape::new(r.usizes(&format!("{p}shape"))?);
        let scales_name = format!("{p}scales");
        let axis_name = format!("{p}axis");
        let quant = if r.get(&scales_name).is_none() {
            Quantization::None
        } else {
            let scales = r.floats(&scales_name)?;
            let zps_name = format!("{p}zero_points");
            let zero_points = r
                .ints(&zps_name)?
                .into_iter()
                .map(|z| i32::try_from(z).map_err(|_| r.bad(&zps_name, z)))
                .collect::<Result<Vec<i32>>>()?;
            if r.get(&axis_name).is_some() {
                Quantization::PerAxis {
                    axis: r.usize(&axis_name)?,
                    scales,
                    zero_points,
                }
            } else {
                match (scales.as_slice(), zero_points.as_slice()) {
                    ([scale], [zero_point]) => Quantization::PerTensor {
                        scale: *scale,
                        zero_point: *zero_point,
                    },
                    _ => return Err(r.bad(&scales_name, "per-tensor values")),
                }
            }
        };
        outputs.push(TensorInfo {
            dtype,
            shape,
            quant,
        });
    }
    Ok(Op::Custom(CustomOp {
        domain: domain.to_string(),
        op_type: name.to_string(),
        attributes: attrs
            .iter()
            .filter(|(n, _)| !n.starts_with(OUTPUT_PREFIX))
            .cloned()
            .collect(),
        outputs,
        payload: None,
    }))
}

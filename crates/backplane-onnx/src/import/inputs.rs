//! A model's graph inputs: their declared types and shapes, and the check of a shape given
//! for one against its declaration.

use crate::proto::{type_proto, GraphProto, ModelProto, ValueInfoProto};
use crate::tensor::{dtype_name, map_dtype};
use crate::{Dim, ModelInput, OnnxError};
use std::collections::HashSet;

/// A shape given for `input` must keep its declared rank and every dimension declared as a
/// number; symbolic dimensions take the given values. An input declared without a shape
/// takes any.
pub(super) fn check_declared_shape(input: &ModelInput, given: &[usize]) -> Result<(), OnnxError> {
    if !input.shape_known {
        return Ok(());
    }
    let declared = || {
        let dims: Vec<String> = input
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(v) => v.to_string(),
                Dim::Symbolic(s) => s.clone(),
            })
            .collect();
        format!("[{}]", dims.join(", "))
    };
    let mismatch = |reason: String| OnnxError::InputShapeMismatch {
        input: input.name.clone(),
        declared: declared(),
        given: given.to_vec(),
        reason,
    };
    if given.len() != input.dims.len() {
        return Err(mismatch(format!(
            "it has {} dimensions, the model declares {}",
            given.len(),
            input.dims.len()
        )));
    }
    for (k, (d, &g)) in input.dims.iter().zip(given).enumerate() {
        if let Dim::Fixed(v) = d {
            if *v != g {
                return Err(mismatch(format!(
                    "dimension {k} is declared as {v}, the shape given has {g}"
                )));
            }
        }
    }
    Ok(())
}

/// Read the declared type and shape of a graph input.
pub(crate) fn describe_input(vi: &ValueInfoProto) -> Result<ModelInput, OnnxError> {
    let name = vi.name.clone().unwrap_or_default();
    let what = format!("input '{name}'");
    let tensor = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        Some(_) => {
            return Err(OnnxError::UnsupportedDataType {
                what,
                dtype: "a non-tensor type (sequence, map, optional or sparse)".into(),
            })
        }
        None => return Err(OnnxError::invalid(format!("{what} declares no type"))),
    };
    let code = tensor.elem_type.unwrap_or(0);
    let dtype = map_dtype(code).ok_or_else(|| OnnxError::UnsupportedDataType {
        what: what.clone(),
        dtype: dtype_name(code),
    })?;
    let (dims, shape_known) = match &tensor.shape {
        None => (Vec::new(), false),
        Some(s) => {
            let mut dims = Vec::with_capacity(s.dim.len());
            for (i, d) in s.dim.iter().enumerate() {
                use crate::proto::tensor_shape_proto::dimension::Value as D;
                dims.push(match &d.value {
                    // Exporters of other frameworks write an unknown dimension as -1.
                    Some(D::DimValue(-1)) => Dim::Symbolic(format!("{name}_dim{i}")),
                    Some(D::DimValue(v)) => Dim::Fixed(usize::try_from(*v).map_err(|_| {
                        OnnxError::invalid(format!(
                            "{what} has the negative dimension {v} (only -1, an unknown \
                             dimension, is accepted)"
                        ))
                    })?),
                    Some(D::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
                    _ => Dim::Symbolic(format!("{name}_dim{i}")),
                });
            }
            (dims, true)
        }
    };
    Ok(ModelInput {
        name,
        dtype,
        dims,
        shape_known,
    })
}

/// The graph inputs that are not initializers.
pub(crate) fn runtime_inputs(graph: &GraphProto) -> Vec<&ValueInfoProto> {
    let inits: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    graph
        .input
        .iter()
        .filter(|vi| !inits.contains(vi.name.as_deref().unwrap_or("")))
        .collect()
}

/// The runtime inputs of a decoded model.
pub(crate) fn inspect(model: &ModelProto) -> Result<Vec<ModelInput>, OnnxError> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::invalid("the model has no graph"))?;
    runtime_inputs(graph)
        .into_iter()
        .map(describe_input)
        .collect()
}

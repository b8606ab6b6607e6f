//! A model's graph inputs and outputs with the kind of value each carries, and the `.pb` files
//! that hold such values (the format of the ONNX backend test data sets).
//!
//! A tool that feeds a model from files and writes its outputs back needs to know, before the
//! import, whether `input_0.pb` holds a `TensorProto`, a `SequenceProto` or an
//! `OptionalProto`, and after the execution, which network tensors (`x[0]`, `x[1]`, ... see
//! [`crate::element_name`]) make up a sequence output. [`ValueType`] answers both.

use crate::proto::type_proto::Value as TypeValue;
use crate::proto::{ModelProto, OptionalProto, SequenceProto, TensorProto, TypeProto};
use crate::{decode_optional, decode_sequence, decode_tensor, element_name, OnnxError, OnnxValue};
use backplane_core::{DataType, Tensor};
use prost::Message;
use std::collections::BTreeMap;

/// The kind of value a graph input or output carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueType {
    /// A tensor.
    Tensor,
    /// A sequence whose elements have this type.
    Sequence(Box<ValueType>),
    /// An optional holding a value of this type, or nothing.
    Optional(Box<ValueType>),
    /// A map or a sparse tensor: backplane holds neither.
    Unsupported(String),
}

/// A graph input or output: its name and the kind of value it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphValue {
    /// The value's name in the graph.
    pub name: String,
    /// What it carries.
    pub ty: ValueType,
}

/// The values a model takes and gives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelSignature {
    /// The graph inputs that are not initializers, in the graph's order.
    pub inputs: Vec<GraphValue>,
    /// The graph outputs, in the graph's order.
    pub outputs: Vec<GraphValue>,
}

impl ModelSignature {
    /// The signature of a decoded model.
    pub fn of(model: &ModelProto) -> ModelSignature {
        let Some(graph) = model.graph.as_ref() else {
            return ModelSignature::default();
        };
        let initializers: std::collections::HashSet<&str> = graph
            .initializer
            .iter()
            .filter_map(|t| t.name.as_deref())
            .collect();
        let value = |v: &crate::proto::ValueInfoProto| GraphValue {
            name: v.name.clone().unwrap_or_default(),
            ty: ValueType::of(v.r#type.as_ref()),
        };
        ModelSignature {
            inputs: graph
                .input
                .iter()
                .filter(|v| !initializers.contains(v.name.as_deref().unwrap_or("")))
                .map(value)
                .collect(),
            outputs: graph.output.iter().map(value).collect(),
        }
    }

    /// The type of input `name`, if the model has such an input.
    pub fn input(&self, name: &str) -> Option<&ValueType> {
        self.inputs.iter().find(|v| v.name == name).map(|v| &v.ty)
    }
}

/// The deepest nesting of sequence and optional types followed.
const MAX_DEPTH: usize = 16;

impl ValueType {
    /// The kind of value an ONNX type describes (no type at all counts as a tensor).
    pub fn of(ty: Option<&TypeProto>) -> ValueType {
        Self::of_depth(ty, 0)
    }

    fn of_depth(ty: Option<&TypeProto>, depth: usize) -> ValueType {
        if depth > MAX_DEPTH {
            return ValueType::Unsupported("types nested too deeply".into());
        }
        match ty.and_then(|t| t.value.as_ref()) {
            None | Some(TypeValue::TensorType(_)) => ValueType::Tensor,
            Some(TypeValue::SequenceType(s)) => {
                ValueType::Sequence(Box::new(Self::of_depth(s.elem_type.as_deref(), depth + 1)))
            }
            Some(TypeValue::OptionalType(o)) => {
                ValueType::Optional(Box::new(Self::of_depth(o.elem_type.as_deref(), depth + 1)))
            }
            Some(TypeValue::MapType(_)) => ValueType::Unsupported("a map".into()),
            Some(TypeValue::SparseTensorType(_)) => {
                ValueType::Unsupported("a sparse tensor".into())
            }
        }
    }

    /// The name of the protobuf message that holds a value of this type in a `.pb` file.
    pub fn message_name(&self) -> &str {
        match self {
            ValueType::Tensor => "TensorProto",
            ValueType::Sequence(_) => "SequenceProto",
            ValueType::Optional(_) => "OptionalProto",
            ValueType::Unsupported(what) => what,
        }
    }

    /// Decode a serialized value of this type (a `.pb` file of the ONNX test data sets).
    pub fn decode(&self, bytes: &[u8]) -> Result<OnnxValue, OnnxError> {
        match self {
            ValueType::Tensor => decode_tensor(bytes).map(OnnxValue::Tensor),
            ValueType::Sequence(_) => decode_sequence(bytes),
            ValueType::Optional(_) => decode_optional(bytes),
            ValueType::Unsupported(what) => Err(OnnxError::UnsupportedDataType {
                what: "a value".into(),
                dtype: what.clone(),
            }),
        }
    }

    /// Rebuild the value of graph output `name` from the network tensors that carry it (the
    /// names [`OnnxValue::flatten`] gives: `name`, `name[0]`, `name[0][1]`, ...).
    ///
    /// An optional holding an empty sequence has no tensors, so it reads back as an empty
    /// optional.
    pub fn collect(
        &self,
        name: &str,
        tensors: &[(String, Tensor)],
    ) -> Result<OnnxValue, OnnxError> {
        let by_name: BTreeMap<&str, &Tensor> =
            tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        self.collect_from(name, &by_name)
    }

    fn collect_from(
        &self,
        name: &str,
        tensors: &BTreeMap<&str, &Tensor>,
    ) -> Result<OnnxValue, OnnxError> {
        match self {
            ValueType::Tensor => tensors
                .get(name)
                .map(|t| OnnxValue::Tensor((*t).clone()))
                .ok_or_else(|| OnnxError::invalid(format!("no tensor carries the value '{name}'"))),
            ValueType::Sequence(elem) => {
                let mut items = Vec::new();
                loop {
                    let item = element_name(name, items.len());
                    if !carries(tensors, &item) {
                        break;
                    }
                    items.push(elem.collect_from(&item, tensors)?);
                }
                Ok(OnnxValue::Sequence(items))
            }
            ValueType::Optional(inner) => {
                if carries(tensors, name) {
                    Ok(OnnxValue::Optional(Some(Box::new(
                        inner.collect_from(name, tensors)?,
                    ))))
                } else {
                    Ok(OnnxValue::Optional(None))
                }
            }
            ValueType::Unsupported(what) => Err(OnnxError::UnsupportedDataType {
                what: format!("value '{name}'"),
                dtype: what.clone(),
            }),
        }
    }

    /// Serialize `value` as the protobuf message of this type (`TensorProto`,
    /// `SequenceProto` or `OptionalProto`) named `name`.
    pub fn encode(&self, value: &OnnxValue, name: &str) -> Result<Vec<u8>, OnnxError> {
        match (self, value) {
            (ValueType::Tensor, OnnxValue::Tensor(t)) => Ok(tensor_proto(t, name)?.encode_to_vec()),
            (ValueType::Sequence(_), OnnxValue::Sequence(_)) => {
                Ok(sequence_proto(self, value, name, 0)?.encode_to_vec())
            }
            (ValueType::Optional(_), OnnxValue::Optional(_)) => {
                Ok(optional_proto(self, value, name, 0)?.encode_to_vec())
            }
            _ => Err(OnnxError::invalid(format!(
                "value '{name}' does not have the type the model declares ({})",
                self.message_name()
            ))),
        }
    }

    /// `SequenceProto.DataType` / `OptionalProto.DataType` code of this type.
    fn elem_code(&self) -> i32 {
        match self {
            ValueType::Tensor => 1,
            ValueType::Sequence(_) => 3,
            ValueType::Optional(_) => 5,
            ValueType::Unsupported(_) => 0,
        }
    }
}

/// True when a tensor is named `name` or lies inside it (`name[...`).
fn carries(tensors: &BTreeMap<&str, &Tensor>, name: &str) -> bool {
    if tensors.contains_key(name) {
        return true;
    }
    let prefix = format!("{name}[");
    tensors
        .range(prefix.as_str()..)
        .next()
        .is_some_and(|(k, _)| k.starts_with(&prefix))
}

/// A `TensorProto` holding `t` in `raw_data` (4-bit types packed two to a byte, as ONNX
/// stores them).
pub fn tensor_proto(t: &Tensor, name: &str) -> Result<TensorProto, OnnxError> {
    let dims = t
        .shape()
        .dims()
        .iter()
        .map(|&d| i64::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| OnnxError::invalid(format!("tensor '{name}' has a dimension too large")))?;
    let raw = match t.dtype() {
        DataType::I4 | DataType::U4 => t
            .bytes()
            .chunks(2)
            .map(|pair| (pair[0] & 0x0f) | (pair.get(1).copied().unwrap_or(0) << 4))
            .collect(),
        _ => t.bytes().to_vec(),
    };
    Ok(TensorProto {
        name: Some(name.to_string()),
        dims,
        data_type: i32::try_from(t.dtype().onnx_code()).ok(),
        raw_data: Some(raw),
        ..Default::default()
    })
}

fn sequence_proto(
    ty: &ValueType,
    value: &OnnxValue,
    name: &str,
    depth: usize,
) -> Result<SequenceProto, OnnxError> {
    let (ValueType::Sequence(elem), OnnxValue::Sequence(items)) = (ty, value) else {
        return Err(mismatch(name, "a sequence"));
    };
    if depth > MAX_DEPTH {
        return Err(OnnxError::invalid("sequence values are nested too deeply"));
    }
    let mut sp = SequenceProto {
        name: Some(name.to_string()),
        elem_type: Some(elem.elem_code()),
        ..Default::default()
    };
    for (i, item) in items.iter().enumerate() {
        let item_name = element_name(name, i);
        match (&**elem, item) {
            (ValueType::Tensor, OnnxValue::Tensor(t)) => {
                sp.tensor_values.push(tensor_proto(t, &item_name)?)
            }
            (ValueType::Sequence(_), _) => {
                sp.sequence_values
                    .push(sequence_proto(elem, item, &item_name, depth + 1)?)
            }
            (ValueType::Optional(_), _) => {
                sp.optional_values
                    .push(optional_proto(elem, item, &item_name, depth + 1)?)
            }
            _ => return Err(mismatch(&item_name, elem.message_name())),
        }
    }
    Ok(sp)
}

fn optional_proto(
    ty: &ValueType,
    value: &OnnxValue,
    name: &str,
    depth: usize,
) -> Result<OptionalProto, OnnxError> {
    let (ValueType::Optional(elem), OnnxValue::Optional(inner)) = (ty, value) else {
        return Err(mismatch(name, "an optional"));
    };
    if depth > MAX_DEPTH {
        return Err(OnnxError::invalid("optional values are nested too deeply"));
    }
    let mut op = OptionalProto {
        name: Some(name.to_string()),
        elem_type: Some(elem.elem_code()),
        ..Default::default()
    };
    match (&**elem, inner.as_deref()) {
        (_, None) => {}
        (ValueType::Tensor, Some(OnnxValue::Tensor(t))) => {
            op.tensor_value = Some(tensor_proto(t, name)?)
        }
        (ValueType::Sequence(_), Some(v)) => {
            op.sequence_value = Some(Box::new(sequence_proto(elem, v, name, depth + 1)?))
        }
        (ValueType::Optional(_), Some(v)) => {
            op.optional_value = Some(Box::new(optional_proto(elem, v, name, depth + 1)?))
        }
        _ => return Err(mismatch(name, elem.message_name())),
    }
    Ok(op)
}

fn mismatch(name: &str, what: &str) -> OnnxError {
    OnnxError::invalid(format!("value '{name}' is not {what} as its type says"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::proto::type_proto;

    fn seq_of(elem: TypeProto) -> TypeProto {
        TypeProto {
            value: Some(TypeValue::SequenceType(Box::new(type_proto::Sequence {
                elem_type: Some(Box::new(elem)),
            }))),
            ..Default::default()
        }
    }

    fn opt_of(elem: TypeProto) -> TypeProto {
        TypeProto {
            value: Some(TypeValue::OptionalType(Box::new(type_proto::Optional {
                elem_type: Some(Box::new(elem)),
            }))),
            ..Default::default()
        }
    }

    fn tensor_type() -> TypeProto {
        TypeProto {
            value: Some(TypeValue::TensorType(type_proto::Tensor::default())),
            ..Default::default()
        }
    }

    fn f32s(values: &[f32]) -> Tensor {
        Tensor::from_vec(vec![values.len()], values.to_vec()).unwrap()
    }

    #[test]
    fn types_are_read_from_the_model_types() {
        assert_eq!(ValueType::of(Some(&tensor_type())), ValueType::Tensor);
        assert_eq!(ValueType::of(None), ValueType::Tensor);
        assert_eq!(
            ValueType::of(Some(&opt_of(seq_of(tensor_type())))),
            ValueType::Optional(Box::new(ValueType::Sequence(Box::new(ValueType::Tensor))))
        );
    }

    #[test]
    fn nested_sequences_round_trip_through_tensors_and_protobuf() {
        let ty = ValueType::of(Some(&seq_of(seq_of(tensor_type()))));
        let value = OnnxValue::Sequence(vec![
            OnnxValue::Sequence(vec![OnnxValue::Tensor(f32s(&[1.0]))]),
            OnnxValue::Sequence(vec![]),
            OnnxValue::Sequence(vec![
                OnnxValue::Tensor(f32s(&[2.0, 3.0])),
                OnnxValue::Tensor(f32s(&[4.0])),
            ]),
        ]);
        let flat = value.flatten("s");
        assert_eq!(
            flat.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["s[0][0]", "s[2][0]", "s[2][1]"]
        );
        // The empty middle sequence has no tensors: what comes back is the value up to it.
        let back = ty.collect("s", &flat).unwrap();
        assert_eq!(
            back,
            OnnxValue::Sequence(vec![OnnxValue::Sequence(vec![OnnxValue::Tensor(f32s(&[
                1.0
            ]))])])
        );
        let bytes = ty.encode(&value, "s").unwrap();
        assert_eq!(ty.decode(&bytes).unwrap(), value);
    }

    #[test]
    fn optionals_collect_present_or_empty() {
        let ty = ValueType::Optional(Box::new(ValueType::Tensor));
        let some = ty.collect("o", &[("o".to_string(), f32s(&[5.0]))]).unwrap();
        assert_eq!(
            some,
            OnnxValue::Optional(Some(Box::new(OnnxValue::Tensor(f32s(&[5.0])))))
        );
        let none = ty
            .collect("o", &[("other".to_string(), f32s(&[5.0]))])
            .unwrap();
        assert_eq!(none, OnnxValue::Optional(None));
        for v in [some, none] {
            assert_eq!(ty.decode(&ty.encode(&v, "o").unwrap()).unwrap(), v);
        }
        // A value of another type than declared is refused.
        assert!(ty.encode(&OnnxValue::Tensor(f32s(&[1.0])), "o").is_err());
        assert!(ValueType::Tensor.collect("missing", &[]).is_err());
    }

    #[test]
    fn four_bit_tensors_pack_two_per_byte() {
        let t = Tensor::from_bytes(
            backplane_core::TensorInfo::new(DataType::U4, vec![3]),
            &[1, 15, 7],
        )
        .unwrap();
        let tp = tensor_proto(&t, "q").unwrap();
        assert_eq!(tp.raw_data.as_deref(), Some(&[0xf1u8, 0x07][..]));
        let back = ValueType::Tensor
            .decode(
                &ValueType::Tensor
                    .encode(&OnnxValue::Tensor(t.clone()), "q")
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(back, OnnxValue::Tensor(t));
    }

    #[test]
    fn signature_lists_runtime_inputs_and_outputs() {
        use crate::proto::{GraphProto, ValueInfoProto};
        let vi = |n: &str, t: TypeProto| ValueInfoProto {
            name: Some(n.into()),
            r#type: Some(t),
            ..Default::default()
        };
        let model = ModelProto {
            graph: Some(GraphProto {
                input: vec![
                    vi("x", tensor_type()),
                    vi("w", tensor_type()),
                    vi("s", seq_of(tensor_type())),
                ],
                output: vec![vi("y", opt_of(tensor_type()))],
                initializer: vec![TensorProto {
                    name: Some("w".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let sig = ModelSignature::of(&model);
        assert_eq!(
            sig.inputs
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>(),
            ["x", "s"]
        );
        assert_eq!(
            sig.input("s"),
            Some(&ValueType::Sequence(Box::new(ValueType::Tensor)))
        );
        assert_eq!(
            sig.outputs[0].ty,
            ValueType::Optional(Box::new(ValueType::Tensor))
        );
    }
}

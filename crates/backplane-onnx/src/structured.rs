//! Sequence and optional values at the edges of a model.
//!
//! backplane networks carry tensors only. The importer keeps ONNX sequences and optionals as
//! import-time structure (see `import/sequence.rs`): a graph input or output of such a type
//! becomes one network tensor per element, named by [`element_name`] (`x[0]`, `x[1]`, and
//! `x[0][2]` inside nested sequences); an optional is its value's tensors, or none when it is
//! empty. A sequence input is therefore imported for a given structure (its length and its
//! elements' shapes), given in [`crate::ImportOptions::input_structures`].

use crate::proto::{OptionalProto, SequenceProto, TensorProto};
use crate::{decode_tensor, OnnxError};
use backplane_core::Tensor;
use prost::Message;

/// The name of element `index` of the sequence value `base` among a network's tensors.
pub fn element_name(base: &str, index: usize) -> String {
    format!("{base}[{index}]")
}

/// The shape of a sequence or optional graph input for one import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputStructure {
    /// A tensor with these dimensions (its element type is the one the model declares).
    Tensor(Vec<usize>),
    /// A sequence with these elements.
    Sequence(Vec<InputStructure>),
    /// An optional: empty, or holding a value.
    Optional(Option<Box<InputStructure>>),
}

/// A value of an ONNX graph input or output: a tensor, a sequence or an optional.
#[derive(Debug, Clone, PartialEq)]
pub enum OnnxValue {
    /// A tensor.
    Tensor(Tensor),
    /// A sequence of values.
    Sequence(Vec<OnnxValue>),
    /// An optional value (`None`: empty).
    Optional(Option<Box<OnnxValue>>),
}

impl OnnxValue {
    /// The value's structure, as [`crate::ImportOptions::input_structures`] takes it.
    pub fn structure(&self) -> InputStructure {
        match self {
            OnnxValue::Tensor(t) => InputStructure::Tensor(t.shape().dims().to_vec()),
            OnnxValue::Sequence(items) => {
                InputStructure::Sequence(items.iter().map(OnnxValue::structure).collect())
            }
            OnnxValue::Optional(v) => {
                InputStructure::Optional(v.as_ref().map(|v| Box::new(v.structure())))
            }
        }
    }

    /// The network tensors that carry the value of graph input or output `name`, in order.
    pub fn flatten(&self, name: &str) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.flatten_into(name, &mut out);
        out
    }

    fn flatten_into(&self, name: &str, out: &mut Vec<(String, Tensor)>) {
        match self {
            OnnxValue::Tensor(t) => out.push((name.to_string(), t.clone())),
            OnnxValue::Sequence(items) => {
                for (i, v) in items.iter().enumerate() {
                    v.flatten_into(&element_name(name, i), out);
                }
            }
            OnnxValue::Optional(Some(v)) => v.flatten_into(name, out),
            OnnxValue::Optional(None) => {}
        }
    }
}

/// The deepest nesting of sequences and optionals decoded (a guard against hostile data).
const MAX_DEPTH: usize = 16;

fn not_a(what: &str, e: prost::DecodeError) -> OnnxError {
    OnnxError::Decode {
        path: None,
        reason: format!("not a {what}: {e}"),
    }
}

fn tensor_value(tp: &TensorProto) -> Result<OnnxValue, OnnxError> {
    decode_tensor(&tp.encode_to_vec()).map(OnnxValue::Tensor)
}

fn from_sequence(sp: &SequenceProto, depth: usize) -> Result<OnnxValue, OnnxError> {
    if depth > MAX_DEPTH {
        return Err(OnnxError::invalid("sequence values are nested too deeply"));
    }
    let items = match sp.elem_type.unwrap_or(0) {
        // An empty sequence may leave its element kind undefined.
        0 | 1 => sp
            .tensor_values
            .iter()
            .map(tensor_value)
            .collect::<Result<_, _>>()?,
        3 => sp
            .sequence_values
            .iter()
            .map(|s| from_sequence(s, depth + 1))
            .collect::<Result<_, _>>()?,
        5 => sp
            .optional_values
            .iter()
            .map(|o| from_optional(o, depth + 1))
            .collect::<Result<_, _>>()?,
        other => {
            return Err(OnnxError::UnsupportedDataType {
                what: format!("sequence '{}'", sp.name.as_deref().unwrap_or("")),
                dtype: match other {
                    2 => "sequence of sparse tensors".into(),
                    4 => "sequence of maps".into(),
                    k => format!("sequence element kind {k}"),
                },
            })
        }
    };
    Ok(OnnxValue::Sequence(items))
}

fn from_optional(op: &OptionalProto, depth: usize) -> Result<OnnxValue, OnnxError> {
    if depth > MAX_DEPTH {
        return Err(OnnxError::invalid("optional values are nested too deeply"));
    }
    let inner = if let Some(t) = &op.tensor_value {
        Some(tensor_value(t)?)
    } else if let Some(s) = &op.sequence_value {
        Some(from_sequence(s, depth + 1)?)
    } else if let Some(o) = &op.optional_value {
        Some(from_optional(o, depth + 1)?)
    } else {
        None
    };
    Ok(OnnxValue::Optional(inner.map(Box::new)))
}

/// Decode a serialized `SequenceProto` (a `.pb` file of the ONNX backend tests).
pub fn decode_sequence(bytes: &[u8]) -> Result<OnnxValue, OnnxError> {
    let sp = SequenceProto::decode(bytes).map_err(|e| not_a("SequenceProto", e))?;
    from_sequence(&sp, 0)
}

/// Decode a serialized `OptionalProto` (a `.pb` file of the ONNX backend tests).
pub fn decode_optional(bytes: &[u8]) -> Result<OnnxValue, OnnxError> {
    let op = OptionalProto::decode(bytes).map_err(|e| not_a("OptionalProto", e))?;
    from_optional(&op, 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn f32_tensor(values: &[f32]) -> TensorProto {
        TensorProto {
            dims: vec![values.len() as i64],
            data_type: Some(1),
            float_data: values.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn sequences_and_optionals_round_trip_and_flatten() {
        let seq = SequenceProto {
            elem_type: Some(1),
            tensor_values: vec![f32_tensor(&[1.0]), f32_tensor(&[2.0, 3.0])],
            ..Default::default()
        };
        let v = decode_sequence(&seq.encode_to_vec()).unwrap();
        let flat = v.flatten("s");
        assert_eq!(flat.len(), 2);
        assert_eq!(flat[1].0, "s[1]");
        assert_eq!(flat[1].1.to_f64_vec(), vec![2.0, 3.0]);
        assert_eq!(
            v.structure(),
            InputStructure::Sequence(vec![
                InputStructure::Tensor(vec![1]),
                InputStructure::Tensor(vec![2])
            ])
        );

        let opt = OptionalProto {
            elem_type: Some(3),
            sequence_value: Some(Box::new(seq)),
            ..Default::default()
        };
        let v = decode_optional(&opt.encode_to_vec()).unwrap();
        assert_eq!(v.flatten("o")[0].0, "o[0]");
        let empty = OptionalProto::default();
        let v = decode_optional(&empty.encode_to_vec()).unwrap();
        assert_eq!(v, OnnxValue::Optional(None));
        assert!(v.flatten("o").is_empty());
    }

    #[test]
    fn hostile_nesting_is_an_error() {
        let mut o = OptionalProto::default();
        for _ in 0..40 {
            o = OptionalProto {
                elem_type: Some(5),
                optional_value: Some(Box::new(o)),
                ..Default::default()
            };
        }
        assert!(decode_optional(&o.encode_to_vec()).is_err());
        assert!(decode_sequence(&[0xff, 0xff, 0xff]).is_err());
    }
}

//! ONNX models and protobuf files written from the ONNX protobuf types, for tests that need
//! a model the repository does not ship.

use backplane::onnx::proto::tensor_proto::DataType as T;
use backplane::onnx::proto::{
    type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TypeProto,
    ValueInfoProto,
};
use prost::Message;
use std::path::{Path, PathBuf};

/// A tensor type of unknown shape.
pub fn tensor_type(elem: T) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem as i32),
            shape: None,
        })),
        ..Default::default()
    }
}

/// A tensor type with fixed dimensions.
pub fn shaped(elem: T, dims: &[i64]) -> TypeProto {
    use backplane::onnx::proto::tensor_shape_proto::{dimension, Dimension};
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem as i32),
            shape: Some(backplane::onnx::proto::TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&d| Dimension {
                        denotation: None,
                        value: Some(dimension::Value::DimValue(d)),
                    })
                    .collect(),
            }),
        })),
        ..Default::default()
    }
}

pub fn sequence_type(elem: TypeProto) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::SequenceType(Box::new(
            type_proto::Sequence {
                elem_type: Some(Box::new(elem)),
            },
        ))),
        ..Default::default()
    }
}

pub fn optional_type(elem: TypeProto) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::OptionalType(Box::new(
            type_proto::Optional {
                elem_type: Some(Box::new(elem)),
            },
        ))),
        ..Default::default()
    }
}

pub fn value(name: &str, ty: TypeProto) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(ty),
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs.join("_"))),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Write a model of these nodes (opset 18) to `dir/name.onnx`.
pub fn write_model(
    dir: &Path,
    name: &str,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> PathBuf {
    write_model_with(dir, name, nodes, inputs, outputs, Vec::new())
}

/// [`write_model`] with initializers.
pub fn write_model_with(
    dir: &Path,
    name: &str,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
) -> PathBuf {
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(GraphProto {
            name: Some(name.into()),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: initializers,
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join(format!("{name}.onnx"));
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

pub fn f32_proto(dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(T::Float as i32),
        float_data: values.to_vec(),
        ..Default::default()
    }
}

/// A float16 tensor of `values`, each exactly representable in f16 (a normal number or
/// zero: the test that writes it chooses them so; anything else panics).
pub fn f16_proto(dims: &[i64], values: &[f32]) -> TensorProto {
    let raw: Vec<u8> = values
        .iter()
        .flat_map(|&v| {
            let bits = v.to_bits();
            let sign = (bits >> 16) & 0x8000;
            let h = if v == 0.0 {
                sign
            } else {
                let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
                assert!(
                    (1..31).contains(&exp) && bits & 0x1fff == 0,
                    "{v} is not exact in f16"
                );
                sign | ((exp as u32) << 10) | ((bits >> 13) & 0x3ff)
            };
            (h as u16).to_le_bytes()
        })
        .collect();
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(T::Float16 as i32),
        raw_data: Some(raw),
        ..Default::default()
    }
}

pub fn i64_proto(dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(T::Int64 as i32),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

pub fn write_pb(path: &Path, message: &impl Message) -> String {
    std::fs::write(path, message.encode_to_vec()).unwrap();
    path.to_string_lossy().into_owned()
}

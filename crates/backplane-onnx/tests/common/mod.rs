//! Helpers to build small ONNX models in Rust with the prost types.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane_core::ops::{Evaluator, Op};
use backplane_core::{Layer, Network, Tensor};
use backplane_onnx::proto::attribute_proto::AttributeType;
use backplane_onnx::proto::tensor_proto::DataType as T;
use backplane_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use backplane_onnx::proto::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use backplane_onnx::{import_model, ImportOptions, OnnxError};
use prost::Message;

pub const FLOAT: i32 = T::Float as i32;
pub const INT64: i32 = T::Int64 as i32;
pub const INT32: i32 = T::Int32 as i32;

/// A dimension of a declared input shape.
#[derive(Clone, Copy)]
pub enum D {
    /// A fixed value.
    V(i64),
    /// A named symbolic dimension.
    P(&'static str),
    /// An unknown, unnamed dimension.
    Unknown,
}

pub fn value_info(name: &str, elem_type: i32, dims: Option<&[D]>) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| Dimension {
                denotation: None,
                value: match d {
                    D::V(v) => Some(dimension::Value::DimValue(*v)),
                    D::P(p) => Some(dimension::Value::DimParam(p.to_string())),
                    D::Unknown => None,
                },
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_type),
                shape,
            })),
        }),
        ..Default::default()
    }
}

/// An f32 input with fixed dims.
pub fn input(name: &str, dims: &[i64]) -> ValueInfoProto {
    let d: Vec<D> = dims.iter().map(|&v| D::V(v)).collect();
    value_info(name, FLOAT, Some(&d))
}

/// An output (type left out: the importer infers it).
pub fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

pub fn named(mut n: NodeProto, name: &str) -> NodeProto {
    n.name = Some(name.into());
    n
}

fn attr(name: &str, t: AttributeType) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

pub fn a_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        i: Some(v),
        ..attr(name, AttributeType::Int)
    }
}

pub fn a_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        f: Some(v),
        ..attr(name, AttributeType::Float)
    }
}

pub fn a_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        ints: v.to_vec(),
        ..attr(name, AttributeType::Ints)
    }
}

pub fn a_floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        floats: v.to_vec(),
        ..attr(name, AttributeType::Floats)
    }
}

pub fn a_str(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        s: Some(v.as_bytes().to_vec()),
        ..attr(name, AttributeType::String)
    }
}

pub fn a_strs(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..attr(name, AttributeType::Strings)
    }
}

pub fn a_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        t: Some(t),
        ..attr(name, AttributeType::Tensor)
    }
}

pub fn tensor_f32(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        float_data: values.to_vec(),
        ..Default::default()
    }
}

pub fn tensor_i64(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(INT64),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

/// An f32 tensor stored as raw little-endian bytes.
pub fn tensor_f32_raw(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    }
}

/// A 1-D i64 vector.
pub fn ints(name: &str, values: &[i64]) -> TensorProto {
    tensor_i64(name, &[values.len() as i64], values)
}

/// A 1-D f32 vector.
pub fn floats(name: &str, values: &[f32]) -> TensorProto {
    tensor_f32(name, &[values.len() as i64], values)
}

/// `n` zeros of the given shape.
pub fn zeros(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    tensor_f32(name, dims, &vec![0.0; n as usize])
}

/// A model under construction.
pub struct Model {
    pub opset: i64,
    pub graph: GraphProto,
    pub extra_opsets: Vec<(String, i64)>,
}

impl Model {
    pub fn new(opset: i64) -> Self {
        Model {
            opset,
            graph: GraphProto {
                name: Some("test".into()),
                ..Default::default()
            },
            extra_opsets: Vec::new(),
        }
    }

    pub fn input(mut self, vi: ValueInfoProto) -> Self {
        self.graph.input.push(vi);
        self
    }

    pub fn output(mut self, name: &str) -> Self {
        self.graph.output.push(output(name));
        self
    }

    pub fn init(mut self, t: TensorProto) -> Self {
        self.graph.initializer.push(t);
        self
    }

    pub fn node(mut self, n: NodeProto) -> Self {
        self.graph.node.push(n);
        self
    }

    pub fn proto(self) -> ModelProto {
        let mut opset_import = vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(self.opset),
        }];
        for (d, v) in self.extra_opsets {
            opset_import.push(OperatorSetIdProto {
                domain: Some(d),
                version: Some(v),
            });
        }
        ModelProto {
            ir_version: Some(8),
            opset_import,
            producer_name: Some("backplane-onnx tests".into()),
            graph: Some(self.graph),
            ..Default::default()
        }
    }

    pub fn bytes(self) -> Vec<u8> {
        self.proto().encode_to_vec()
    }

    pub fn import_with(self, options: &ImportOptions) -> Result<Network, OnnxError> {
        import_model(self.proto(), None, options)
    }

    pub fn import(self) -> Result<Network, OnnxError> {
        self.import_with(&ImportOptions::default())
    }

    /// Import, panicking with the error's message on failure.
    pub fn ok(self) -> Network {
        self.import()
            .unwrap_or_else(|e| panic!("import failed: {e}"))
    }
}

/// The ops of the network's layers, in order.
pub fn ops(net: &Network) -> Vec<String> {
    net.layers()
        .iter()
        .map(|l| l.op.name().to_string())
        .collect()
}

/// The only layer of a network.
pub fn only_layer(net: &Network) -> &Layer {
    assert_eq!(net.layers().len(), 1, "layers: {:?}", ops(net));
    &net.layers()[0]
}

/// The op of the only layer.
pub fn only_op(net: &Network) -> &Op {
    &only_layer(net).op
}

/// The dims of a tensor by name.
pub fn dims(net: &Network, name: &str) -> Vec<usize> {
    let id = net
        .find_tensor(name)
        .unwrap_or_else(|| panic!("no tensor '{name}'"));
    net.tensor(id).info.shape.dims().to_vec()
}

/// The names of a layer's input tensors.
pub fn input_names(net: &Network, layer: &Layer) -> Vec<String> {
    layer
        .inputs
        .iter()
        .map(|&t| net.tensor(t).name.clone())
        .collect()
}

/// A tiny evaluator for tests: Gather, Concat and Unsqueeze on i64 tensors.
pub struct TinyEvaluator;

impl Evaluator for TinyEvaluator {
    fn evaluate(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        let infos: Vec<_> = inputs.iter().map(|t| t.info()).collect();
        let out = op.infer(&infos).map_err(|e| e.to_string())?;
        let out_shape = out[0].shape.dims().to_vec();
        let i64s = |t: &Tensor| {
            t.as_slice::<i64>()
                .map(<[i64]>::to_vec)
                .map_err(|e| e.to_string())
        };
        match op {
            Op::Unsqueeze { .. } => {
                let v = i64s(inputs[0])?;
                Ok(vec![
                    Tensor::from_vec(out_shape, v).map_err(|e| e.to_string())?
                ])
            }
            Op::Concat { axis }
                if inputs.iter().all(|t| t.shape().rank() == 1) && (*axis == 0 || *axis == -1) =>
            {
                let mut v = Vec::new();
                for t in inputs {
                    v.extend(i64s(t)?);
                }
                Ok(vec![
                    Tensor::from_vec(out_shape, v).map_err(|e| e.to_string())?
                ])
            }
            Op::Gather { axis: 0 } if inputs[0].shape().rank() == 1 => {
                let data = i64s(inputs[0])?;
                let idx = i64s(inputs[1])?;
                let n = data.len() as i64;
                let v = idx
                    .iter()
                    .map(|&i| {
                        let i = if i < 0 { i + n } else { i };
                        data.get(i as usize).copied().ok_or("index out of range")
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(vec![
                    Tensor::from_vec(out_shape, v).map_err(|e| e.to_string())?
                ])
            }
            other => Err(format!("TinyEvaluator does not compute {}", other.name())),
        }
    }
}

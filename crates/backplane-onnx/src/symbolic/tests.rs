#![allow(clippy::unwrap_used)]

use super::*;
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, GraphProto, OperatorSetIdProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use backplane_core::symbolic::display_shape;

fn input(name: &str, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d.parse::<i64>() {
                Ok(v) => tensor_shape_proto::dimension::Value::DimValue(v),
                Err(_) => tensor_shape_proto::dimension::Value::DimParam(d.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        attribute,
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn i64s(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(Dt::Int64 as i32),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn model(
    inputs: Vec<ValueInfoProto>,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    outputs: &[&str],
) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits,
            input: inputs,
            output: outputs
                .iter()
                .map(|o| ValueInfoProto {
                    name: Some(o.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn output_shape(sig: &SymbolicSignature, name: &str) -> String {
    let (_, shape) = sig.outputs.iter().find(|(n, _)| n == name).unwrap();
    shape
        .as_ref()
        .map_or("unknown".into(), |s| display_shape(s))
}

/// The BERT-shaped encoder of testdata: embeddings through a Shape→Slice chain, attention
/// heads split by Reshape [0, 0, 4, 24] and merged back, all the way to [batch, seq, 96].
#[test]
fn a_bert_shaped_encoder_keeps_batch_and_seq() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/dynamic/bert_tiny.onnx");
    let model = crate::decode_model_file(&path).unwrap();
    let sig = symbolic_signature(&model);
    assert_eq!(sig.inputs.len(), 1);
    assert_eq!(
        display_shape(sig.inputs[0].1.as_ref().unwrap()),
        "[batch, seq]"
    );
    assert_eq!(output_shape(&sig, "hidden"), "[batch, seq, 96]");
}

/// A Shape → Gather → Unsqueeze → Concat → Reshape chain keeps its symbols, and a strided
/// convolution derives its output sizes.
#[test]
fn shape_chains_and_windows() {
    let m = model(
        vec![
            input("x", &["batch", "seq", "96"]),
            input("img", &["n", "3", "h", "w"]),
        ],
        vec![
            node("Shape", &["x"], "s", vec![]),
            node("Gather", &["s", "zero"], "b", vec![]),
            node("Unsqueeze", &["b", "axes0"], "b1", vec![]),
            node(
                "Concat",
                &["b1", "minus_one"],
                "target",
                vec![AttributeProto {
                    name: Some("axis".into()),
                    r#type: Some(AttributeType::Int as i32),
                    i: Some(0),
                    ..Default::default()
                }],
            ),
            node("Reshape", &["x", "target"], "flat", vec![]),
            node(
                "Conv",
                &["img", "weight"],
                "conv",
                vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
            ),
            node(
                "MaxPool",
                &["conv"],
                "pool",
                vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])],
            ),
            node("NonZero", &["x"], "nz", vec![]),
            node("Transpose", &["nz"], "nz_t", vec![]),
        ],
        vec![
            i64s("zero", &[], &[0]),
            i64s("axes0", &[1], &[0]),
            i64s("minus_one", &[1], &[-1]),
            TensorProto {
                name: Some("weight".into()),
                dims: vec![16, 3, 3, 3],
                data_type: Some(Dt::Float as i32),
                float_data: vec![0.0; 16 * 27],
                ..Default::default()
            },
        ],
        &["flat", "conv", "pool", "nz_t"],
    );
    let sig = symbolic_signature(&m);
    assert_eq!(output_shape(&sig, "flat"), "[batch, 96*seq]");
    assert_eq!(output_shape(&sig, "conv"), "[n, 16, (h-1)/2+1, (w-1)/2+1]");
    assert_eq!(
        output_shape(&sig, "pool"),
        "[n, 16, ((h-1)/2-1)/2+1, ((w-1)/2-1)/2+1]"
    );
    // A data-dependent shape, and what follows it, is unknown.
    assert_eq!(output_shape(&sig, "nz_t"), "unknown");
    // The bindings of one concrete input set evaluate the derived sizes.
    let bound = sig
        .bind(&[("x", &[2, 7, 96]), ("img", &[1, 3, 224, 224])])
        .unwrap();
    let conv = sig.outputs[1].1.as_ref().unwrap();
    assert_eq!(conv[2].eval(&bound), Some(112));
}

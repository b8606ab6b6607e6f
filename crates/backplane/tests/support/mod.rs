//! Shared test helpers: the op-table JSON format, building one-node ONNX models from it,
//! running models through backends and comparing tensors with tolerances.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::onnx::proto;
use backplane::{
    BackendId, DataType, ImportOptions, OptimizerOptions, Runtime, Tensor, TensorInfo,
};
use prost::Message;
use serde_json::Value;
use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dtype_of(name: &str) -> DataType {
    name.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn onnx_type(d: DataType) -> i32 {
    d.onnx_code() as i32
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad number {other}"),
        },
        other => panic!("bad number {other}"),
    }
}

/// A tensor from the JSON form {dtype, shape, data}.
pub fn tensor_of(v: &Value) -> Tensor {
    let dtype = dtype_of(v["dtype"].as_str().unwrap());
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let data = v["data"].as_array().unwrap();
    let ints = |d: &Value| -> i64 {
        match d {
            Value::Number(n) => n.as_i64().unwrap_or_else(|| n.as_f64().unwrap() as i64),
            other => number(other) as i64,
        }
    };
    match dtype {
        DataType::F32 => Tensor::from_vec(shape, data.iter().map(|d| number(d) as f32).collect()),
        DataType::F64 => Tensor::from_vec(shape, data.iter().map(number).collect()),
        DataType::F16 => Tensor::from_vec(
            shape,
            data.iter()
                .map(|d| half::f16::from_f64(number(d)))
                .collect(),
        ),
        DataType::I8 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as i8).collect()),
        DataType::U8 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as u8).collect()),
        DataType::I32 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as i32).collect()),
        DataType::I64 => Tensor::from_vec(shape, data.iter().map(ints).collect()),
        DataType::I16 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as i16).collect()),
        DataType::U16 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as u16).collect()),
        DataType::U32 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as u32).collect()),
        DataType::U64 => Tensor::from_vec(shape, data.iter().map(|d| ints(d) as u64).collect()),
        DataType::Bool => Tensor::from_bools(
            shape,
            &data.iter().map(|d| number(d) != 0.0).collect::<Vec<_>>(),
        ),
        // bf16, float8 (rounded to nearest even) and int4/uint4 from their values.
        DataType::BF16
        | DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz
        | DataType::I4
        | DataType::U4 => Tensor::from_f64_values(
            TensorInfo::new(dtype, shape),
            &data.iter().map(number).collect::<Vec<_>>(),
        ),
    }
    .unwrap()
}

fn value_info(name: &str, info: &TensorInfo) -> proto::ValueInfoProto {
    use proto::tensor_shape_proto::{dimension, Dimension};
    proto::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: Some(onnx_type(info.dtype)),
                    shape: Some(proto::TensorShapeProto {
                        dim: info
                            .shape
                            .dims()
                            .iter()
                            .map(|&d| Dimension {
                                value: Some(dimension::Value::DimValue(d as i64)),
                                ..Default::default()
                            })
                            .collect(),
                    }),
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tensor_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.to_string()),
        dims: t.shape().dims().iter().map(|&d| d as i64).collect(),
        data_type: Some(onnx_type(t.dtype())),
        raw_data: Some(t.bytes().to_vec()),
        ..Default::default()
    }
}

fn attribute(name: &str, v: &Value) -> proto::AttributeProto {
    let mut a = proto::AttributeProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    let (k, val) = v.as_object().unwrap().iter().next().unwrap();
    match k.as_str() {
        "f" => {
            a.r#type = Some(1);
            a.f = Some(number(val) as f32);
        }
        "i" => {
            a.r#type = Some(2);
            a.i = Some(val.as_i64().unwrap());
        }
        "s" => {
            a.r#type = Some(3);
            a.s = Some(val.as_str().unwrap().as_bytes().to_vec());
        }
        "floats" => {
            a.r#type = Some(6);
            a.floats = val
                .as_array()
                .unwrap()
                .iter()
                .map(|x| number(x) as f32)
                .collect();
        }
        "ints" => {
            a.r#type = Some(7);
            a.ints = val
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
        }
        other => panic!("attribute kind {other} not handled by the harness"),
    }
    a
}

/// One case of an op table.
pub struct OpCase {
    pub name: String,
    pub op_type: String,
    pub model: Vec<u8>,
    /// Inputs fed at run time (not initializers).
    pub inputs: Vec<(String, Tensor)>,
    pub outputs: Vec<(String, Tensor)>,
    pub rtol: f64,
    pub atol: f64,
}

/// Turn one JSON case into a one-node ONNX model plus its data.
pub fn op_case(case: &Value) -> OpCase {
    let name = case["name"].as_str().unwrap().to_string();
    let op_type = case["op_type"].as_str().unwrap().to_string();
    let mut graph = proto::GraphProto {
        name: Some(name.clone()),
        ..Default::default()
    };
    let mut node = proto::NodeProto {
        name: Some(format!("{name}_node")),
        op_type: Some(op_type.clone()),
        ..Default::default()
    };
    let mut inputs = Vec::new();
    for input in case["inputs"].as_array().unwrap() {
        let iname = input["name"].as_str().unwrap();
        node.input.push(iname.to_string());
        if iname.is_empty() {
            continue;
        }
        let t = tensor_of(input);
        if input["initializer"].as_bool().unwrap_or(false) {
            graph.initializer.push(tensor_proto(iname, &t));
        } else {
            graph.input.push(value_info(iname, t.info()));
            inputs.push((iname.to_string(), t));
        }
    }
    let mut outputs = Vec::new();
    for output in case["outputs"].as_array().unwrap() {
        let oname = output["name"].as_str().unwrap();
        node.output.push(oname.to_string());
        let t = tensor_of(output);
        graph.output.push(value_info(oname, t.info()));
        outputs.push((oname.to_string(), t));
    }
    if let Some(attrs) = case["attributes"].as_object() {
        for (k, v) in attrs {
            node.attribute.push(attribute(k, v));
        }
    }
    graph.node.push(node);
    let opset = case["opset"].as_i64().unwrap();
    let model = proto::ModelProto {
        ir_version: Some(if opset >= 21 { 10 } else { 8 }),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    OpCase {
        name,
        op_type,
        model: model.encode_to_vec(),
        inputs,
        outputs,
        rtol: case["rtol"].as_f64().unwrap_or(1e-5),
        atol: case["atol"].as_f64().unwrap_or(1e-6),
    }
}

/// Every case of every table under testdata/ops, as (family, case).
pub fn op_tables() -> Vec<(String, Value)> {
    let dir = repo().join("testdata/ops");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for f in files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let family = v["family"].as_str().unwrap().to_string();
        for c in v["cases"].as_array().unwrap() {
            cases.push((family.clone(), c.clone()));
        }
    }
    cases
}

/// Compare `actual` with `expected`: same type and shape, every value within
/// `atol + rtol * |expected|`, NaN where NaN is expected, infinities equal. bf16 and float8
/// values compare as their (exact) f32 values with the given tolerances; integer types,
/// int4/uint4 included, exactly.
pub fn compare(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if actual.info().dtype != expected.info().dtype || actual.shape() != expected.shape() {
        return Err(format!(
            "got {}, expected {}",
            actual.info(),
            expected.info()
        ));
    }
    let (a, e) = (actual.to_f64_vec(), expected.to_f64_vec());
    let dtype = expected.dtype();
    let exact = !(dtype.is_float() || dtype == DataType::BF16 || dtype.is_float8());
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        let ok = if y.is_nan() {
            x.is_nan()
        } else if y.is_infinite() || exact {
            x == y
        } else {
            (x - y).abs() <= atol + rtol * y.abs()
        };
        if !ok {
            return Err(format!("element {i}: got {x}, expected {y}"));
        }
    }
    Ok(())
}

/// Import a model from bytes (folding with CpuRef), optimize for `backends`, load and run.
pub fn run_model(
    runtime: &Runtime,
    model: &[u8],
    backends: &[&str],
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, String> {
    let options = ImportOptions::default()
        .with_evaluator(std::sync::Arc::new(backplane::cpu_ref::CpuRefEvaluator));
    let network =
        backplane::onnx::import_bytes(model, None, &options).map_err(|e| format!("import: {e}"))?;
    let ids = backends
        .iter()
        .map(|b| BackendId::new(*b).unwrap())
        .collect();
    let optimized = runtime
        .optimize(&network, &OptimizerOptions::new(ids))
        .map_err(|e| format!("optimize: {e}"))?;
    let id = runtime
        .load_network(optimized)
        .map_err(|e| format!("load: {e}"))?;
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let out = runtime
        .execute(id, &named)
        .map_err(|e| format!("execute: {e}"));
    runtime
        .unload_network(id)
        .map_err(|e| format!("unload: {e}"))?;
    out
}

//! A model's graph inputs and outputs as it declares them: names, ONNX Runtime-style type
//! strings (`tensor(float)`) and shapes with symbolic dimensions.

use backplane::onnx::proto::{tensor_shape_proto, type_proto, ModelProto, TypeProto};
use backplane::DataType;
use std::collections::HashSet;

/// One declared dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A symbolic size (`dim_param`).
    Param(String),
    /// Neither a size nor a name (or a negative size, as some exporters write).
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Param(p) => f.write_str(p),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A graph input or output as the model declares it.
#[derive(Debug, Clone)]
pub struct Declared {
    /// Its name.
    pub name: String,
    /// ONNX Runtime's type string: `tensor(float)`, `seq(tensor(int64))`, ...
    pub type_string: String,
    /// The element type, for a tensor of a type backplane has (`None` otherwise).
    pub dtype: Option<DataType>,
    /// Whether the value is a tensor (not a sequence, map, optional or sparse tensor).
    pub is_tensor: bool,
    /// The declared dimensions; `None` when the model declares no shape.
    pub dims: Option<Vec<Dim>>,
}

impl Declared {
    /// "f32[<batch>x1x8x8]": the runtime's notation for tensor descriptions, with symbolic
    /// dimensions in angle brackets (and `?` for unnamed unknown ones) unless `free` gives
    /// them a value.
    pub fn describe(&self, free: &[(String, usize)]) -> String {
        let dtype = self
            .dtype
            .map_or_else(|| self.type_string.clone(), |d| d.to_string());
        match &self.dims {
            Some(dims) => format!(
                "{dtype}[{}]",
                dims.iter()
                    .map(|d| match (d, resolve(d, free)) {
                        (_, Some(n)) => n.to_string(),
                        (Dim::Param(p), None) => format!("<{p}>"),
                        (d, None) => d.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("x")
            ),
            None => format!("{dtype} (any shape)"),
        }
    }

    /// Whether every dimension is known once `free` dimensions take values.
    pub fn static_dims(&self, free: &[(String, usize)]) -> Option<Vec<usize>> {
        self.dims
            .as_ref()?
            .iter()
            .map(|d| resolve(d, free))
            .collect()
    }
}

/// The size of a declared dimension, when it is fixed or overridden.
pub fn resolve(dim: &Dim, free: &[(String, usize)]) -> Option<usize> {
    match dim {
        Dim::Fixed(n) => Some(*n),
        Dim::Param(p) => free.iter().find(|(n, _)| n == p).map(|(_, v)| *v),
        Dim::Unknown => None,
    }
}

/// The model's graph inputs (initializers excluded) and outputs, in the graph's order.
pub fn declarations(model: &ModelProto) -> (Vec<Declared>, Vec<Declared>) {
    let Some(graph) = model.graph.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let initializers: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let inputs = graph
        .input
        .iter()
        .filter(|v| !initializers.contains(v.name.as_deref().unwrap_or("")))
        .map(|v| declared(v.name.clone().unwrap_or_default(), v.r#type.as_ref()))
        .collect();
    let outputs = graph
        .output
        .iter()
        .map(|v| declared(v.name.clone().unwrap_or_default(), v.r#type.as_ref()))
        .collect();
    (inputs, outputs)
}

fn declared(name: String, ty: Option<&TypeProto>) -> Declared {
    let (is_tensor, dtype, dims) = match ty.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => (
            true,
            t.elem_type
                .and_then(|c| DataType::from_onnx_code(i64::from(c))),
            t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(tensor_shape_proto::dimension::Value::DimValue(v)) => {
                            usize::try_from(*v).map_or(Dim::Unknown, Dim::Fixed)
                        }
                        Some(tensor_shape_proto::dimension::Value::DimParam(p))
                            if !p.is_empty() =>
                        {
                            Dim::Param(p.clone())
                        }
                        _ => Dim::Unknown,
                    })
                    .collect()
            }),
        ),
        _ => (false, None, None),
    };
    Declared {
        name,
        type_string: type_string(ty, 0),
        dtype,
        is_tensor,
        dims,
    }
}

/// ONNX Runtime's name of an element type code.
fn elem_name(code: Option<i32>) -> String {
    let name = match code.unwrap_or(0) {
        1 => "float",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "double",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        17 => "float8e4m3fn",
        18 => "float8e4m3fnuz",
        19 => "float8e5m2",
        20 => "float8e5m2fnuz",
        21 => "uint4",
        22 => "int4",
        23 => "float4e2m1",
        other => return format!("unknown{other}"),
    };
    name.to_string()
}

/// ONNX Runtime's type string of a value type (`tensor(float)`, `seq(tensor(int64))`,
/// `map(int64,tensor(float))`, `optional(tensor(float))`).
fn type_string(ty: Option<&TypeProto>, depth: usize) -> String {
    // Type protos nest; a hostile model could nest them deeply.
    if depth > 16 {
        return "unknown".into();
    }
    match ty.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => format!("tensor({})", elem_name(t.elem_type)),
        Some(type_proto::Value::SparseTensorType(t)) => {
            format!("sparse_tensor({})", elem_name(t.elem_type))
        }
        Some(type_proto::Value::SequenceType(s)) => {
            format!("seq({})", type_string(s.elem_type.as_deref(), depth + 1))
        }
        Some(type_proto::Value::OptionalType(o)) => {
            format!(
                "optional({})",
                type_string(o.elem_type.as_deref(), depth + 1)
            )
        }
        Some(type_proto::Value::MapType(m)) => format!(
            "map({},{})",
            elem_name(m.key_type),
            type_string(m.value_type.as_deref(), depth + 1)
        ),
        None => "unknown".into(),
    }
}

/// The names of `values`, comma-separated (for errors that list what a model declares).
pub fn all_names(values: &[Declared]) -> String {
    values
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

//! The model's flatbuffer read into plain descriptions of one subgraph: its tensors (with
//! their constant data borrowed in place), operators and inputs/outputs.

use crate::error::{Result, TfliteError};
use crate::fbs::{Buf, Table};
use crate::schema::{self, buffer, model, operator, operator_code, quantization, subgraph, tensor};
use backplane_core::{DataType, Quantization};
use std::borrow::Cow;

/// What an operator is.
#[derive(Debug, Clone)]
pub(crate) enum Code {
    /// A builtin operator, by code.
    Builtin(i32),
    /// A custom operator, by its custom code.
    Custom(String),
}

/// One tensor of the subgraph.
#[derive(Debug)]
pub(crate) struct TensorDef<'a> {
    pub name: String,
    /// The core type, or None for types backplane lacks (strings, complex, resources).
    pub dtype: Option<DataType>,
    /// TFLite's name of the type, for messages.
    pub type_name: String,
    pub shape: Vec<usize>,
    /// Constant data, borrowed from the model's bytes (owned when computed at read time:
    /// see `fold.rs`).
    pub data: Option<Cow<'a, [u8]>>,
    pub quant: Quantization,
}

/// One operator of the subgraph.
pub(crate) struct OpDef<'a> {
    pub code: Code,
    /// Input tensors (None: an omitted optional input, index -1).
    pub inputs: Vec<Option<usize>>,
    pub outputs: Vec<usize>,
    /// The `BuiltinOptions` union: its type and table.
    pub options: Option<(u8, Table<'a>)>,
    /// A custom operator's options, as the model stores them (their format is the
    /// operator's own).
    pub custom_options: Option<&'a [u8]>,
    /// Computed at read time (its outputs hold data): not lowered.
    pub folded: bool,
}

/// One subgraph of a model, read.
pub(crate) struct Model<'a> {
    pub tensors: Vec<TensorDef<'a>>,
    pub operators: Vec<OpDef<'a>>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

fn invalid(what: impl Into<String>) -> TfliteError {
    TfliteError::Invalid(what.into())
}

fn dtype(code: i8) -> (Option<DataType>, String) {
    let name = usize::try_from(code)
        .ok()
        .and_then(|c| schema::tensor_type::NAMES.get(c))
        .map_or_else(|| format!("type #{code}"), |n| n.to_string());
    let dt = match code {
        0 => Some(DataType::F32),
        1 => Some(DataType::F16),
        2 => Some(DataType::I32),
        3 => Some(DataType::U8),
        4 => Some(DataType::I64),
        6 => Some(DataType::Bool),
        7 => Some(DataType::I16),
        9 => Some(DataType::I8),
        10 => Some(DataType::F64),
        12 => Some(DataType::U64),
        15 => Some(DataType::U32),
        16 => Some(DataType::U16),
        18 => Some(DataType::BF16),
        _ => None,
    };
    (dt, name)
}

fn index(v: i32, len: usize, what: &str) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| invalid(format!("{what} index {v} out of range (there are {len})")))
}

impl<'a> Model<'a> {
    /// Read subgraph `which` of the model in `bytes`.
    pub fn read(bytes: &'a [u8], which: usize) -> Result<Self> {
        if !crate::is_tflite(bytes) {
            return Err(TfliteError::Decode(
                "the file identifier at bytes 4..8 is not TFL3".into(),
            ));
        }
        let root = Buf(bytes).root()?;
        let version = root.u32(model::VERSION, 0)?;
        if version != 3 {
            return Err(TfliteError::Decode(format!(
                "schema version {version}; this importer reads version 3"
            )));
        }
        let buffers = root.tables(model::BUFFERS)?;
        let mut codes = Vec::new();
        for c in root.tables(model::OPERATOR_CODES)? {
            let deprecated = i32::from(c.i8(operator_code::DEPRECATED_BUILTIN_CODE, 0)?);
            let builtin = c.i32(operator_code::BUILTIN_CODE, 0)?.max(deprecated);
            // CUSTOM = 32.
            codes.push(if builtin == 32 {
                Code::Custom(
                    c.string(operator_code::CUSTOM_CODE)?
                        .unwrap_or("(unnamed)")
                        .to_string(),
                )
            } else {
                Code::Builtin(builtin)
            });
        }
        let subgraphs = root.tables(model::SUBGRAPHS)?;
        let sg = subgraphs.get(which).ok_or_else(|| {
            invalid(format!(
                "subgraph {which} requested; the model has {}",
                subgraphs.len()
            ))
        })?;
        let mut tensors = Vec::new();
        for (i, t) in sg.tables(subgraph::TENSORS)?.iter().enumerate() {
            let name = t
                .string(tensor::NAME)?
                .map_or_else(|| format!("tensor_{i}"), str::to_string);
            let shape = t
                .i32s(tensor::SHAPE)?
                .into_iter()
                .map(|d| {
                    usize::try_from(d)
                        .map_err(|_| invalid(format!("tensor '{name}' has dimension {d}")))
                })
                .collect::<Result<Vec<_>>>()?;
            let (dtype, type_name) = dtype(t.i8(tensor::TYPE, 0)?);
            let b = t.u32(tensor::BUFFER, 0)? as usize;
            let data = if b == 0 {
                None
            } else {
                let buf = buffers.get(b).ok_or_else(|| {
                    invalid(format!(
                        "tensor '{name}' refers to buffer {b} of {}",
                        buffers.len()
                    ))
                })?;
                if buf.u64(buffer::OFFSET, 0)? > 1 || buf.u64(buffer::SIZE, 0)? > 0 {
                    return Err(invalid(format!(
                        "tensor '{name}' keeps its data outside the flatbuffer (models over 2 GB \
                         are not supported)"
                    )));
                }
                buf.bytes(buffer::DATA)?
                    .filter(|d| !d.is_empty())
                    .map(Cow::Borrowed)
            };
            let data = match (t.table(tensor::SPARSITY)?, data) {
                (Some(sp), Some(stored)) => {
                    let Some(elem) = dtype.map(|d| d.size()) else {
                        return Err(invalid(format!(
                            "sparse tensor '{name}' of type {type_name}"
                        )));
                    };
                    Some(Cow::Owned(crate::sparse::densify(
                        &sp, &shape, elem, &stored, &name,
                    )?))
                }
                (_, data) => data,
            };
            let quant = match t.table(tensor::QUANTIZATION)? {
                Some(q) => read_quant(&q, &name, shape.len())?,
                None => Quantization::None,
            };
            let _ = t.bool(tensor::IS_VARIABLE, false)?;
            tensors.push(TensorDef {
                name,
                dtype,
                type_name,
                shape,
                data,
                quant,
            });
        }
        let n = tensors.len();
        let list = |slot| -> Result<Vec<usize>> {
            sg.i32s(slot)?
                .into_iter()
                .map(|v| index(v, n, "tensor"))
                .collect()
        };
        let inputs = list(subgraph::INPUTS)?;
        let outputs = list(subgraph::OUTPUTS)?;
        let mut operators = Vec::new();
        for o in sg.tables(subgraph::OPERATORS)? {
            let ci = o.u32(operator::OPCODE_INDEX, 0)? as usize;
            let code = codes
                .get(ci)
                .cloned()
                .ok_or_else(|| invalid(format!("operator code index {ci} out of range")))?;
            let ins = o
                .i32s(operator::INPUTS)?
                .into_iter()
                .map(|v| {
                    if v == -1 {
                        Ok(None)
                    } else {
                        index(v, n, "tensor").map(Some)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let outs = o
                .i32s(operator::OUTPUTS)?
                .into_iter()
                .map(|v| index(v, n, "tensor"))
                .collect::<Result<Vec<_>>>()?;
            let kind = o.u8(operator::BUILTIN_OPTIONS_TYPE, 0)?;
            let options = match o.table(operator::BUILTIN_OPTIONS)? {
                Some(t) if kind != 0 => Some((kind, t)),
                _ => None,
            };
            let custom_options = o.bytes(operator::CUSTOM_OPTIONS)?;
            operators.push(OpDef {
                code,
                inputs: ins,
                outputs: outs,
                options,
                custom_options,
                folded: false,
            });
        }
        Ok(Model {
            tensors,
            operators,
            inputs,
            outputs,
        })
    }

    /// Tensor `t`.
    pub fn tensor(&self, t: usize) -> Result<&TensorDef<'a>> {
        self.tensors
            .get(t)
            .ok_or_else(|| invalid(format!("tensor index {t} out of range")))
    }
}

fn read_quant(q: &Table<'_>, name: &str, rank: usize) -> Result<Quantization> {
    if q.u8(quantization::DETAILS_TYPE, 0)? != 0 {
        return Err(invalid(format!(
            "tensor '{name}' uses custom quantization details"
        )));
    }
    let scales = q.f32s(quantization::SCALE)?;
    let zps = q.i64s(quantization::ZERO_POINT)?;
    if scales.is_empty() {
        return Ok(Quantization::None);
    }
    let zero_points = if zps.is_empty() {
        vec![0; scales.len()]
    } else {
        zps.iter()
            .map(|&z| i32::try_from(z).map_err(|_| invalid(format!("zero point {z} of '{name}'"))))
            .collect::<Result<Vec<_>>>()?
    };
    if zero_points.len() != scales.len() {
        return Err(invalid(format!(
            "tensor '{name}' has {} scales and {} zero points",
            scales.len(),
            zero_points.len()
        )));
    }
    if scales.iter().any(|s| !s.is_finite()) {
        return Err(invalid(format!("tensor '{name}' has a non-finite scale")));
    }
    if scales.len() == 1 {
        return Ok(Quantization::PerTensor {
            scale: scales[0],
            zero_point: zero_points[0],
        });
    }
    let axis = q.i32(quantization::QUANTIZED_DIMENSION, 0)?;
    let axis = usize::try_from(axis)
        .ok()
        .filter(|&a| a < rank)
        .ok_or_else(|| invalid(format!("tensor '{name}' is quantized along axis {axis}")))?;
    Ok(Quantization::PerAxis {
        axis,
        scales,
        zero_points,
    })
}

//! The TFLite importer: a `.tflite` flatbuffer → a backplane-core [`Network`].
//!
//! The flatbuffer is read in place by a small safe reader (`fbs.rs`: every offset is checked
//! as it is followed, so a malformed file is an error, never a panic) through the field slots
//! of TFLite's schema (`schema.rs`).
//! Operators become core `Op`s (`ops/`); TFLite's channels-last images meet the core's
//! channels-first convolutions through `layout`, with transposes only where a tensor
//! changes form; quantized tensors keep their integer type and their scale and zero point
//! (per tensor, or per axis for weights) in [`TensorInfo::quant`](backplane_core::TensorInfo),
//! and quantized operators compute through f32 between a dequantize and a quantize (see
//! `ops/mod.rs` and docs/tflite.md). Every unsupported operator is listed at once.
//!
//! ```no_run
//! let network = backplane_tflite::import_file(
//!     std::path::Path::new("model.tflite"),
//!     &backplane_tflite::ImportOptions::default(),
//! )?;
//! # Ok::<(), backplane_tflite::TfliteError>(())
//! ```

mod error;
mod fbs;
mod fold;
mod layout;
mod model;
mod ops;
mod requant;
mod schema;
mod sparse;

pub use error::{Result, TfliteError, UnsupportedOp};

use backplane_core::ops::Evaluator;
use backplane_core::quant::Requantization;
use backplane_core::{Network, TensorInfo};
use layout::Graph;
use model::Model;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The largest model file the importer reads (TFLite's flatbuffers are limited to 2 GiB).
pub const MAX_MODEL_BYTES: u64 = 2 << 30;

/// How to import a model.
#[derive(Clone, Default)]
pub struct ImportOptions {
    /// The subgraph to import (0, the main one, unless set).
    pub subgraph: usize,
    /// Computes at import the small shape-arithmetic layers whose inputs are all constants
    /// (the facade passes CpuRef's); without one they run at every execution.
    pub evaluator: Option<Arc<dyn Evaluator + Send + Sync>>,
    /// How the int8 convolutions and fully connected layers requantize (the rule each
    /// quantized output's QuantizeLinear carries); see [`Int8Requant`] and docs/tflite.md.
    pub int8_requant: Int8Requant,
}

/// The requantization rule a TFLite model's int8 layers are imported with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Int8Requant {
    /// The rule of the kernels LiteRT runs this model on: fixed point when its XNNPACK
    /// delegate refuses the model (a requantization scale of 256 or more), f32 otherwise,
    /// so the outputs equal LiteRT's bit for bit.
    #[default]
    Litert,
    /// The f32 rule of LiteRT's XNNPACK delegate on every model (CpuAcc's fastest int8
    /// kernels; on a model XNNPACK refuses, results differ from LiteRT's by rounding).
    F32,
    /// The fixed-point rule of LiteRT's builtin kernels (a Q31 multiplier) on every model.
    FixedPoint,
}

impl Int8Requant {
    /// The choice named `f32`, `fixed-point` or `litert`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f32" => Some(Int8Requant::F32),
            "fixed-point" => Some(Int8Requant::FixedPoint),
            "litert" => Some(Int8Requant::Litert),
            _ => None,
        }
    }
}

impl std::fmt::Debug for ImportOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportOptions")
            .field("subgraph", &self.subgraph)
            .field("int8_requant", &self.int8_requant)
            .field(
                "evaluator",
                &self.evaluator.as_ref().map(|_| "dyn Evaluator"),
            )
            .finish()
    }
}

/// Whether `bytes` look like a TFLite model: the file identifier `TFL3` at bytes 4..8.
pub fn is_tflite(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(b"TFL3".as_slice())
}

/// Whether the file at `path` is a TFLite model: by its `.tflite` extension, or by the
/// file identifier in the first bytes of a regular file (never opening a FIFO or device,
/// which could block).
pub fn is_tflite_file(path: &Path) -> bool {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tflite"))
    {
        return true;
    }
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map(|_| is_tflite(&head))
        .unwrap_or(false)
}

/// Read a model file (a regular file of at most [`MAX_MODEL_BYTES`]).
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    let io = |source| TfliteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(io(std::io::Error::other(
            "not a regular file (a directory, FIFO or device)",
        )));
    }
    if meta.len() > MAX_MODEL_BYTES {
        return Err(io(std::io::Error::other(format!(
            "{} bytes is larger than the {MAX_MODEL_BYTES}-byte limit",
            meta.len()
        ))));
    }
    std::fs::read(path).map_err(io)
}

/// Import a `.tflite` file.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Network> {
    import_bytes(&read_file(path)?, options)
}

/// The inputs of a model, with their types and shapes, without importing it.
pub fn inspect_inputs(bytes: &[u8], options: &ImportOptions) -> Result<Vec<(String, TensorInfo)>> {
    let model = Model::read(bytes, options.subgraph)?;
    model
        .inputs
        .iter()
        .map(|&t| {
            let d = model.tensor(t)?;
            let dtype = d.dtype.ok_or_else(|| {
                TfliteError::UnsupportedOps(vec![UnsupportedOp {
                    index: 0,
                    op_type: "input".into(),
                    output: d.name.clone(),
                    reason: format!("inputs of type {} are not supported", d.type_name),
                }])
            })?;
            Ok((
                d.name.clone(),
                TensorInfo {
                    dtype,
                    shape: d.shape.clone().into(),
                    quant: d.quant.clone(),
                },
            ))
        })
        .collect()
}

/// Import a model from its bytes.
pub fn import_bytes(bytes: &[u8], options: &ImportOptions) -> Result<Network> {
    let mut model = Model::read(bytes, options.subgraph)?;
    fold::fold_constants(&mut model)?;
    let litert = requant::litert_rule(&model);
    let requant = match (options.int8_requant, litert) {
        (Int8Requant::F32, (_, Some(why))) => {
            tracing::info!(
                "int8 requantization: f32 as asked, while LiteRT runs this model on its \
                 builtin kernels (fixed point: {why}); results differ from LiteRT's by rounding"
            );
            Requantization::F32
        }
        (Int8Requant::F32, _) => Requantization::F32,
        (Int8Requant::FixedPoint, _) => Requantization::FixedPoint,
        (Int8Requant::Litert, (r, why)) => {
            if let Some(why) = why {
                tracing::info!(
                    "int8 requantization: {} (LiteRT's builtin kernels): {why}",
                    r.name()
                );
            }
            r
        }
    };
    let mut g = Graph::new(options.evaluator.clone());
    for (t, d) in model.tensors.iter().enumerate() {
        g.set_name(t, &d.name);
    }
    for (t, info) in inspect_inputs(bytes, options)?
        .into_iter()
        .zip(model.inputs.iter())
        .map(|((n, i), &t)| (t, (n, i)))
    {
        let id = g.net.add_input(&info.0, info.1)?;
        g.set_nhwc(t, id);
    }
    let mut unsupported = Vec::new();
    let mut poisoned: HashSet<usize> = HashSet::new();
    let mut dq_cache = HashMap::new();
    for (index, op) in model.operators.iter().enumerate() {
        if op.folded {
            continue;
        }
        let first_out = op
            .outputs
            .first()
            .and_then(|&t| model.tensors.get(t))
            .map(|d| d.name.clone())
            .unwrap_or_default();
        if op.inputs.iter().flatten().any(|t| poisoned.contains(t)) {
            // Downstream of an unsupported operator: listed only if unsupported itself.
            if let Some(reason) = ops::code_refusal(&op.code) {
                unsupported.push(UnsupportedOp {
                    index,
                    op_type: ops::code_name(&op.code),
                    output: first_out,
                    reason,
                });
            }
            poisoned.extend(op.outputs.iter().copied());
            continue;
        }
        let name = format!("op{index}_{}", ops::code_name(&op.code));
        let mut cx = ops::Cx {
            g: &mut g,
            m: &model,
            op,
            name,
            dq_cache: &mut dq_cache,
            requant,
        };
        match ops::lower(&mut cx) {
            Ok(()) => {}
            Err(ops::OpError::Unsupported(reason)) => {
                unsupported.push(UnsupportedOp {
                    index,
                    op_type: ops::code_name(&op.code),
                    output: first_out,
                    reason,
                });
                poisoned.extend(op.outputs.iter().copied());
            }
            Err(ops::OpError::Fatal(e)) => return Err(e),
        }
    }
    if !unsupported.is_empty() {
        return Err(TfliteError::UnsupportedOps(unsupported));
    }
    for &t in &model.outputs {
        let id = g.nhwc(t)?;
        let name = model.tensor(t)?.name.clone();
        // The network's output carries the model's name for it.
        let id = if g.net.tensor(id).name == name {
            id
        } else {
            let layer = g.fresh(&format!("output/{name}"));
            let outs =
                g.net
                    .add_layer_named(&layer, backplane_core::Op::Identity, &[id], &[name])?;
            outs.first()
                .copied()
                .ok_or_else(|| TfliteError::Invalid("an output layer without output".into()))?
        };
        g.net.mark_output(id)?;
    }
    g.net.validate()?;
    Ok(g.net)
}

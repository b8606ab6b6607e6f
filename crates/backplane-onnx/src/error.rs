//! The error type of the ONNX importer.

use backplane_core::CoreError;
use std::fmt;
use std::path::PathBuf;

/// One node the importer could not translate, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedOp {
    /// The node's name (or a generated `<op_type>_<index>` when the model leaves it empty).
    pub node: String,
    /// The ONNX operator type, e.g. `NonMaxSuppression`.
    pub op_type: String,
    /// The operator's domain (`""` is the default ONNX domain).
    pub domain: String,
    /// The opset version the model imports for that domain (0 when it imports none).
    pub opset: i64,
    /// Why the node is not supported.
    pub reason: String,
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let domain = if self.domain.is_empty() || self.domain == "ai.onnx" {
            String::new()
        } else {
            format!("{}::", self.domain)
        };
        write!(
            f,
            "node '{}' ({domain}{}, opset {}): {}",
            self.node, self.op_type, self.opset, self.reason
        )
    }
}

/// Everything that can go wrong while importing an ONNX model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxError {
    /// The model file (or an external data file) could not be read.
    #[error("cannot read '{}': {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a protobuf-encoded ONNX model (e.g. a truncated file).
    #[error("{} is not a valid ONNX model: {reason}", describe_source(.path))]
    Decode {
        /// The file, when importing from a file.
        path: Option<PathBuf>,
        /// What the decoder reported.
        reason: String,
    },
    /// Some nodes use operators (or operator variants) that backplane does not support.
    /// Every such node of the model is listed, not just the first.
    #[error("{}", format_unsupported(.0))]
    UnsupportedOps(Vec<UnsupportedOp>),
    /// Operator parameters or output shapes depend on the values of graph inputs (a Reshape
    /// whose shape is an input, a NonZero of an input): import the model specialized on their
    /// values ([`crate::import_specialized`] or [`crate::ImportOptions::input_values`]).
    #[error(
        "the model needs the values of the inputs {} at import (they determine parameters or \
         shapes); import it specialized on them:{}",
        .inputs.join(", "),
        .nodes.iter().map(|n| format!("\n  - {n}")).collect::<String>()
    )]
    NeedsInputValues {
        /// The graph inputs whose values are needed.
        inputs: Vec<String>,
        /// The nodes that need them, with the parameter each one needs.
        nodes: Vec<UnsupportedOp>,
    },
    /// The model's IR version is newer than the importer knows: its format may hold what the
    /// importer would misread.
    #[error(
        "the model has IR version {version}; this importer knows IR versions up to {newest} \
         (a newer format may mean things it cannot read)"
    )]
    UnsupportedIrVersion {
        /// The model's `ir_version`.
        version: i64,
        /// The newest IR version the importer knows.
        newest: i64,
    },
    /// An input has a symbolic dimension for which no value was given.
    #[error(
        "input '{input}' has the symbolic dimension '{dim_name}' and no value was given for it: \
         give a value for '{dim_name}' or the full shape of the input \
         (e.g. --input-shape {input}=1x1x8x8)"
    )]
    MissingDim {
        /// The model input.
        input: String,
        /// The dimension's name (`dim_param`), or `<input>_dim<index>` for an unnamed one.
        dim_name: String,
    },
    /// An input declares no shape at all, and none was given.
    #[error(
        "input '{input}' has no declared shape: give its full shape \
         (e.g. --input-shape {input}=1x3x224x224)"
    )]
    MissingShape {
        /// The model input.
        input: String,
    },
    /// An option names an input the model does not have.
    #[error("the model has no input named '{name}' (its inputs: {})", .inputs.join(", "))]
    UnknownInput {
        /// The name given.
        name: String,
        /// The model's actual inputs.
        inputs: Vec<String>,
    },
    /// A shape given for an input contradicts a dimension the model declares as a fixed
    /// number (symbolic dimensions take any value).
    #[error(
        "input '{input}' is declared with shape {declared}, but the shape given is {given:?}: {reason}"
    )]
    InputShapeMismatch {
        /// The input.
        input: String,
        /// The declared shape, e.g. `[batch, 1, 8, 8]`.
        declared: String,
        /// The shape given (from an input file, `input_shapes` or `input_values`).
        given: Vec<usize>,
        /// Which dimension differs, or the ranks.
        reason: String,
    },
    /// A tensor of the model uses an element type backplane does not support.
    #[error("{what} has element type {dtype}, which backplane does not support")]
    UnsupportedDataType {
        /// Which tensor (e.g. "input 'x'").
        what: String,
        /// The ONNX type name.
        dtype: String,
    },
    /// The model breaks the ONNX specification.
    #[error("invalid ONNX model: {0}")]
    InvalidModel(String),
    /// A tensor would exceed [`crate::ImportOptions::max_tensor_bytes`].
    #[error(
        "tensor '{name}' needs {} bytes, more than the limit of {limit} bytes",
        bytes.map_or_else(|| "an overflowing number of".to_string(), |b| b.to_string())
    )]
    TensorTooLarge {
        /// The tensor's name.
        name: String,
        /// Its size in bytes (`None` when the size overflows).
        bytes: Option<usize>,
        /// The limit in force.
        limit: usize,
    },
    /// External tensor data could not be used.
    #[error("external data '{}': {reason}", path.display())]
    ExternalData {
        /// The `location` as the model gives it (or the resolved file).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Building the network failed at a node (e.g. its shapes do not fit).
    #[error("node '{node}': {source}")]
    Core {
        /// The node (or graph element) being imported.
        node: String,
        /// The error from backplane-core.
        #[source]
        source: CoreError,
    },
    /// The constant-folding evaluator returned results that contradict shape inference.
    #[error("node '{node}': the evaluator returned a wrong result: {message}")]
    Evaluator {
        /// The node being folded.
        node: String,
        /// What is wrong.
        message: String,
    },
}

impl OnnxError {
    /// The unsupported nodes, if this is [`OnnxError::UnsupportedOps`].
    /// For [`OnnxError::NeedsInputValues`], the nodes that need input values (they cannot be
    /// imported without a specialization).
    pub fn unsupported_ops(&self) -> &[UnsupportedOp] {
        match self {
            OnnxError::UnsupportedOps(v) => v,
            OnnxError::NeedsInputValues { nodes, .. } => nodes,
            _ => &[],
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        OnnxError::InvalidModel(message.into())
    }

    pub(crate) fn core(node: impl Into<String>, source: CoreError) -> Self {
        OnnxError::Core {
            node: node.into(),
            source,
        }
    }
}

fn describe_source(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!("'{}'", p.display()),
        None => "the data".to_string(),
    }
}

fn format_unsupported(ops: &[UnsupportedOp]) -> String {
    let mut s = format!(
        "the model has {} node{} that backplane cannot import:",
        ops.len(),
        if ops.len() == 1 { "" } else { "s" }
    );
    for op in ops {
        s.push_str("\n  - ");
        s.push_str(&op.to_string());
    }
    s
}

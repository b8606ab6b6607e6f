//! The error type of the TFLite importer.

use backplane_core::CoreError;
use std::fmt;
use std::path::PathBuf;

/// One operator the importer could not translate, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedOp {
    /// The operator's position in the subgraph.
    pub index: usize,
    /// The builtin operator's name (e.g. `LSTM`), or the custom code of a custom operator.
    pub op_type: String,
    /// The name of the operator's first output tensor (TFLite operators have no names).
    pub output: String,
    /// Why it is not supported.
    pub reason: String,
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operator #{} ({}) producing '{}': {}",
            self.index, self.op_type, self.output, self.reason
        )
    }
}

/// Everything that can go wrong while importing a TFLite model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TfliteError {
    /// The model file could not be read.
    #[error("cannot read '{}': {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a well-formed TFLite flatbuffer (bad magic, truncated, an offset out
    /// of bounds, an enum value the schema does not define where one is required).
    #[error("not a valid TFLite model: {0}")]
    Decode(String),
    /// The model is well formed but inconsistent (a tensor index out of range, a buffer
    /// smaller than its tensor, options that do not fit the operator).
    #[error("invalid TFLite model: {0}")]
    Invalid(String),
    /// Some operators (or operator variants, or data types) are not supported. Every such
    /// operator of the model is listed, not just the first.
    #[error("{}", format_unsupported(.0))]
    UnsupportedOps(Vec<UnsupportedOp>),
    /// A layer built from the model was rejected by the core (shape inference).
    #[error(transparent)]
    Core(#[from] CoreError),
}

fn format_unsupported(ops: &[UnsupportedOp]) -> String {
    let mut s = format!(
        "the model uses {} operator{} backplane does not support:",
        ops.len(),
        if ops.len() == 1 { "" } else { "s" }
    );
    for op in ops {
        s.push_str(&format!("\n  - {op}"));
    }
    s
}

/// The importer's result type.
pub type Result<T, E = TfliteError> = std::result::Result<T, E>;

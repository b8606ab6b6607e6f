//! The error type of backplane-core.

use crate::DataType;

/// Result alias for this crate.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// Everything that can go wrong while describing tensors or building a network.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CoreError {
    /// A shape's element count or byte size does not fit in memory arithmetic.
    #[error("tensor of shape {shape:?} is too large: its size overflows")]
    SizeOverflow {
        /// The offending dimensions.
        shape: Vec<usize>,
    },
    /// Data length does not match what the shape and data type require.
    #[error("tensor data has {actual} bytes but shape {shape:?} of {dtype} needs {expected}")]
    DataLength {
        /// The shape.
        shape: Vec<usize>,
        /// The element type.
        dtype: DataType,
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A tensor was read as the wrong element type.
    #[error("tensor holds {actual} but was read as {expected}")]
    DataTypeMismatch {
        /// Type the caller asked for.
        expected: DataType,
        /// Type the tensor holds.
        actual: DataType,
    },
    /// The shape inference of an operator rejected its inputs.
    #[error("layer '{layer}' ({op}): {message}")]
    InvalidLayer {
        /// Layer name.
        layer: String,
        /// Operator name.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// Shape inference of an operator failed, before the layer name is known.
    #[error("{op}: {message}")]
    InvalidOp {
        /// Operator name.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The memory for a tensor could not be allocated.
    #[error("cannot allocate {bytes} bytes for a tensor of shape {shape:?}: out of memory")]
    OutOfMemory {
        /// The shape.
        shape: Vec<usize>,
        /// Bytes asked for.
        bytes: usize,
    },
    /// The network graph is malformed.
    #[error("invalid network: {0}")]
    InvalidNetwork(String),
}

impl CoreError {
    /// Shorthand for an [`CoreError::InvalidOp`].
    pub fn op(op: &'static str, message: impl Into<String>) -> Self {
        CoreError::InvalidOp {
            op,
            message: message.into(),
        }
    }
}

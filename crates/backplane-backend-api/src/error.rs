//! The error type a backend returns.

use backplane_core::CoreError;

/// Result alias for backend calls.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// What a backend reports when it cannot do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The layer is not supported (asked for a workload it declared unsupported).
    #[error("layer '{layer}' ({op}) is not supported: {reason}")]
    Unsupported {
        /// Layer name.
        layer: String,
        /// Operator name.
        op: String,
        /// Why.
        reason: String,
    },
    /// A workload failed while executing.
    #[error("execution failed: {0}")]
    Execution(String),
    /// A tensor description or value the backend cannot use.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Anything else, with a message that says what to do.
    #[error("{0}")]
    Other(String),
}

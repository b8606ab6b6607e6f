//! GpuAcc's error type: what went wrong on the device, turned into the backend API's error
//! at the crate's edge.

use backplane_backend_api::BackendError;

/// A failure of the GPU backend.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter could be used (none present, only software ones without
    /// `allow_software=true`, or the device could not be created).
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The device reported an error (validation, out of memory, device lost).
    #[error("GPU device error: {0}")]
    Device(String),
    /// A buffer larger than the device allows.
    #[error("GPU buffer of {bytes} bytes for {what} exceeds the device's limit of {limit} bytes")]
    TooLarge {
        /// What the buffer is for.
        what: String,
        /// Its size.
        bytes: u64,
        /// The device's limit.
        limit: u64,
    },
    /// A layer's kernel found an input value it cannot compute with (a run-time Gather index
    /// outside its axis), reported through the layer's status word.
    #[error("{layer}: {what}")]
    BadInput {
        /// The layer.
        layer: String,
        /// What was wrong.
        what: String,
    },
    /// A tensor handle or view the workload cannot use.
    #[error("{0}")]
    Binding(String),
}

impl From<GpuError> for BackendError {
    fn from(e: GpuError) -> Self {
        BackendError::Execution(e.to_string())
    }
}

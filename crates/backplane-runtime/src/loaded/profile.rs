//! Per-layer timings of one execution (`Runtime::execute_profiled`).

use backplane_backend_api::BackendId;
use std::time::Duration;

/// How long one workload took in one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerTiming {
    /// Layer name.
    pub layer: String,
    /// Operator name.
    pub op: String,
    /// The backend that ran it.
    pub backend: BackendId,
    /// When it started, from the start of the execution.
    pub start: Duration,
    /// How long it ran.
    pub duration: Duration,
}

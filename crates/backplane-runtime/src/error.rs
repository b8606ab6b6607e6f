//! The error type of the runtime.

use backplane_backend_api::{BackendError, BackendId, NetworkId};
use backplane_core::CoreError;
use std::fmt;

/// Result alias for this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// A layer that no backend accepted, with each backend's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedLayer {
    /// Layer name.
    pub layer: String,
    /// Operator name.
    pub op: String,
    /// (backend, reason) for every backend asked.
    pub reasons: Vec<(BackendId, String)>,
}

impl fmt::Display for UnsupportedLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "  layer '{}' ({}):", self.layer, self.op)?;
        for (b, r) in &self.reasons {
            write!(f, "\n    {b}: {r}")?;
        }
        Ok(())
    }
}

fn list(layers: &[UnsupportedLayer]) -> String {
    layers
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A backend id is registered twice.
    #[error("backend '{0}' is already registered")]
    DuplicateBackend(BackendId),
    /// A backend id is not registered.
    #[error("backend '{id}' is not registered (registered: {registered})")]
    UnknownBackend {
        /// The id asked for.
        id: String,
        /// What is registered, comma-separated.
        registered: String,
    },
    /// A registered factory produced a backend with another id.
    #[error(
        "the factory registered as '{registered}' created a backend that calls itself '{actual}'"
    )]
    BackendIdMismatch {
        /// Registered id.
        registered: BackendId,
        /// Id the backend reports.
        actual: BackendId,
    },
    /// No backend preferences were given.
    #[error("no backends were given: name at least one (e.g. CpuRef)")]
    NoBackends,
    /// Some layers are supported by none of the preferred backends.
    #[error("{} layer(s) are not supported by any of the preferred backends [{backends}]:\n{}", layers.len(), list(layers))]
    UnsupportedLayers {
        /// The preferred backends, comma-separated.
        backends: String,
        /// Every unsupported layer with every backend's reason.
        layers: Vec<UnsupportedLayer>,
    },
    /// A per-layer override names a layer that does not exist.
    #[error("the backend override for '{0}' matches no layer name or op type in the network")]
    UnknownOverride(String),
    /// A backend's optimize_subgraph returned something inconsistent. The optimizer does not
    /// fail with it: it leaves that run untouched and records the reason in
    /// `OptimizationReport::rejected`.
    #[error("backend '{backend}' returned an invalid subgraph optimization: {reason}")]
    InvalidOptimization {
        /// The backend.
        backend: BackendId,
        /// What is wrong.
        reason: String,
    },
    /// A backend call failed.
    #[error("backend '{backend}'{}: {source}", layer.as_ref().map(|l| format!(", layer '{l}'")).unwrap_or_default())]
    Backend {
        /// The backend.
        backend: BackendId,
        /// The layer, when the failure concerns one.
        layer: Option<String>,
        /// The backend's error.
        #[source]
        source: Box<BackendError>,
    },
    /// No network with this id is loaded.
    #[error("no network with id {0} is loaded")]
    UnknownNetwork(NetworkId),
    /// An execution ran past the runtime's time limit; it stopped before `layer`.
    #[error(
        "the execution ran past its time limit of {limit:?} and stopped before layer '{layer}'"
    )]
    TimeLimit {
        /// The limit (`RuntimeOptions::max_execution_time`).
        limit: std::time::Duration,
        /// The layer that would have run next.
        layer: String,
    },
    /// An input the network needs was not given.
    #[error("input '{name}' ({expected}) was not given; the network's inputs are: {all}")]
    MissingInput {
        /// Input name.
        name: String,
        /// Its description.
        expected: String,
        /// All input names.
        all: String,
    },
    /// A given input is not an input of the network.
    #[error("'{name}' is not an input of the network; its inputs are: {all}")]
    UnknownInput {
        /// The name given.
        name: String,
        /// All input names.
        all: String,
    },
    /// An input was given twice.
    #[error("input '{0}' was given more than once")]
    DuplicateInput(String),
    /// An input has the wrong shape or type.
    #[error("input '{name}' must be {expected}, got {actual}")]
    InputMismatch {
        /// Input name.
        name: String,
        /// Expected description.
        expected: String,
        /// Given description.
        actual: String,
    },
    /// A backend refused the custom allocator the application set for it.
    #[error("backend '{backend}' refused its custom allocator: {reason}")]
    CustomAllocatorRefused {
        /// The backend.
        backend: BackendId,
        /// Its reason.
        reason: String,
    },
    /// No way to move a tensor between the memories of its producer and a consumer.
    #[error("no tensor-handle strategy for '{tensor}': {reason}")]
    NoTensorStrategy {
        /// The tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// Loading the network would take more memory than the runtime's budget.
    #[error(
        "the network needs {bytes} bytes of working memory per execution, more than the memory \
         budget of {budget} bytes (RuntimeOptions::max_memory, --max-memory); its largest tensor \
         is '{tensor}' ({tensor_bytes} bytes), the output of layer '{layer}'"
    )]
    MemoryBudget {
        /// Bytes one execution needs (the planned arena plus other memories' tensors, with
        /// the control-flow bodies').
        bytes: usize,
        /// The budget in force.
        budget: usize,
        /// The largest tensor of the network (or of the body that went over).
        tensor: String,
        /// Its size in bytes.
        tensor_bytes: usize,
        /// The layer that computes it.
        layer: String,
    },
    /// Memory the runtime asked for could not be allocated.
    #[error("cannot allocate {bytes} bytes for {what}: out of memory")]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        bytes: usize,
    },
    /// A core error (invalid graph, sizes).
    #[error(transparent)]
    Core(#[from] CoreError),
}

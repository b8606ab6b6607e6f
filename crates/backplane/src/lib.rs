//! backplane: a neural-network inference runtime whose heart is a pluggable backend system.
//!
//! This facade is the one dependency an application needs. The path of a model:
//!
//! ```
//! use backplane::ImportOptions;
//!
//! # fn main() -> Result<(), backplane::Error> {
//! # let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
//! let runtime = backplane::RuntimeBuilder::new().build()?;
//! // The digits model has a symbolic batch size; give it a value.
//! let options = ImportOptions::default().with_dim("batch", 1);
//! let network = backplane::load_onnx(&repo.join("models/digits/model.onnx"), &options)?;
//! // CpuAcc first, CpuRef for whatever CpuAcc does not claim; `OptimizerOptions::new` takes
//! // any other preference (e.g. `vec![BackendId::new("CpuRef")?]` for the reference alone).
//! let optimized = runtime.optimize(&network, &backplane::default_optimizer_options())?;
//! let id = runtime.load_network(optimized)?;
//! let image = backplane::npy::read_file(&repo.join("models/digits/samples/digit_3.npy"))?;
//! let outputs = runtime.execute(id, &[("input", &image)])?;
//! let probabilities = outputs[0].1.as_slice::<f32>()?;
//! assert_eq!(probabilities.len(), 10);
//! # Ok(()) }
//! ```
//!
//! The crates behind it: [`core`] (IR), [`backend_api`] (what backends implement),
//! [`runtime`] (registry, optimizer, execution), [`onnx`] (importer) and the backends.

mod cache_budget;
pub mod compare;
pub mod dynamic_network;
#[cfg(feature = "ndarray")]
pub mod ndarray_interop;
pub mod node_cache;
pub mod npy;
pub mod runtime_ref;
pub mod staged;

use std::path::Path;
use std::sync::Arc;

pub use backplane_backend_api as backend_api;
/// GpuAcc, the GPU backend (with the `gpu` feature).
#[cfg(feature = "gpu")]
pub use backplane_backend_gpu as gpu;
pub use backplane_core as core;
pub use backplane_cpu_acc as cpu_acc;
pub use backplane_cpu_ref as cpu_ref;
pub use backplane_onnx as onnx;
pub use backplane_runtime as runtime;
pub use backplane_tflite as tflite;

pub use backplane_backend_api::{Backend, BackendId, BackendOptions, NetworkId};
pub use backplane_core::{DataType, Network, Shape, Tensor, TensorInfo};
pub use backplane_onnx::ImportOptions;
pub use backplane_runtime::{
    BackendFactory, BackendRegistry, CacheCounts, OptimizationRecord, OptimizedNetwork,
    OptimizerOptions, PlanCacheTotals, ReplayOutcome, Runtime, RuntimeError, RuntimeOptions,
    SupportAnswers,
};
pub use dynamic_network::{CutSummary, DynamicNetwork, PlanCacheStats, PlanTimings};
pub use node_cache::NodeCacheStats;
pub use runtime_ref::RuntimeRef;

/// Any error of the facade's operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the runtime (optimize, load, execute).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// From the ONNX importer.
    #[error(transparent)]
    Onnx(#[from] backplane_onnx::OnnxError),
    /// From the TFLite importer.
    #[error(transparent)]
    Tflite(#[from] backplane_tflite::TfliteError),
    /// From reading or writing a .npy file.
    #[error(transparent)]
    Npy(#[from] npy::NpyError),
    /// From tensor handling.
    #[error(transparent)]
    Core(#[from] backplane_core::CoreError),
    /// An invalid name or argument.
    #[error("{0}")]
    Invalid(String),
    /// A cache entry a run needs (a plan, a cut node's run) that alone takes more than the
    /// runtime's memory budget, which every cache of a `DynamicNetwork` shares.
    #[error(
        "{what} needs {bytes} bytes, more than the whole memory budget of {budget} bytes that \
         the network's caches share (raise it with RuntimeBuilder::max_memory)"
    )]
    CacheBudget {
        /// The entry.
        what: String,
        /// The bytes it needs.
        bytes: usize,
        /// The runtime's memory budget.
        budget: usize,
    },
}

impl From<String> for Error {
    fn from(s: String) -> Self {
        Error::Invalid(s)
    }
}

/// The backends compiled into this build, registered explicitly (no life-before-main tricks,
/// which lose backends in static builds).
pub fn builtin_registry() -> BackendRegistry {
    let mut registry = BackendRegistry::new();
    #[allow(unused_mut)]
    let mut backends: Vec<BackendFactory> = vec![
        Arc::new(|| Box::new(backplane_cpu_ref::CpuRefBackend) as Box<dyn Backend>),
        Arc::new(backplane_cpu_acc::CpuAccBackend::factory()),
    ];
    #[cfg(feature = "gpu")]
    backends.push(Arc::new(backplane_backend_gpu::GpuAccBackend::factory()));
    for factory in backends {
        let id = factory().id();
        // The built-in ids are distinct by construction; a clash would be a build error of
        // this crate, caught by its tests.
        let _ = registry.register(id, factory);
    }
    registry
}

/// Builds a [`Runtime`]: the built-in backends plus any the application adds.
#[derive(Debug)]
pub struct RuntimeBuilder {
    registry: BackendRegistry,
    options: RuntimeOptions,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RuntimeBuilder {
    /// Start from the built-in backends.
    pub fn new() -> Self {
        RuntimeBuilder {
            registry: builtin_registry(),
            options: RuntimeOptions::default(),
        }
    }

    /// Start from no backends at all.
    pub fn empty() -> Self {
        RuntimeBuilder {
            registry: BackendRegistry::new(),
            options: RuntimeOptions::default(),
        }
    }

    /// Register another backend.
    pub fn backend(mut self, id: BackendId, factory: BackendFactory) -> Result<Self, Error> {
        self.registry.register(id, factory)?;
        Ok(self)
    }

    /// Set options for one backend.
    pub fn backend_options(mut self, id: BackendId, options: BackendOptions) -> Self {
        self.options.backend_options.insert(id, options);
        self
    }

    /// Fail a Loop's execution once it reaches this many iterations (a guard against models
    /// or inputs that never end; default [`backplane_runtime::DEFAULT_MAX_LOOP_ITERATIONS`]).
    pub fn max_loop_iterations(mut self, limit: u64) -> Self {
        self.options.max_loop_iterations = Some(limit);
        self
    }

    /// Stop any execution that runs longer than `limit` (checked before every layer,
    /// control-flow bodies included) with a time-limit error.
    pub fn max_execution_time(mut self, limit: std::time::Duration) -> Self {
        self.options.max_execution_time = Some(limit);
        self
    }

    /// Refuse at load a network whose execution needs more than `bytes` of working memory
    /// (default: the memory available when the runtime is created; see
    /// [`RuntimeOptions::max_memory`]).
    pub fn max_memory(mut self, bytes: usize) -> Self {
        self.options.max_memory = Some(bytes);
        self
    }

    /// Create the runtime.
    pub fn build(self) -> Result<Runtime, Error> {
        Ok(Runtime::new(self.registry, self.options)?)
    }
}

/// Import an ONNX model, folding constant subgraphs with CpuRef when the options name no
/// evaluator.
pub fn load_onnx(path: &Path, options: &ImportOptions) -> Result<Network, Error> {
    let mut options = options.clone();
    if options.evaluator.is_none() {
        options.evaluator = Some(Arc::new(backplane_cpu_ref::CpuRefEvaluator));
    }
    Ok(backplane_onnx::import_file(path, &options)?)
}

/// Import a TFLite model (`.tflite`), computing its shape arithmetic on constants with
/// CpuRef at import.
pub fn load_tflite(path: &Path) -> Result<Network, Error> {
    load_tflite_with(path, &backplane_tflite::ImportOptions::default())
}

/// Import a TFLite model with `options` (e.g. its int8 requantization rule), computing its
/// shape arithmetic on constants with CpuRef when the options name no evaluator.
pub fn load_tflite_with(
    path: &Path,
    options: &backplane_tflite::ImportOptions,
) -> Result<Network, Error> {
    let mut options = options.clone();
    if options.evaluator.is_none() {
        options.evaluator = Some(Arc::new(backplane_cpu_ref::CpuRefEvaluator));
    }
    Ok(backplane_tflite::import_file(path, &options)?)
}

/// Import a model of either format: TFLite when the file is one (by its `.tflite` extension
/// or the `TFL3` identifier in its first bytes), ONNX otherwise. `options` apply to ONNX
/// models (TFLite models have static shapes).
pub fn load_model(path: &Path, options: &ImportOptions) -> Result<Network, Error> {
    if backplane_tflite::is_tflite_file(path) {
        load_tflite(path)
    } else {
        load_onnx(path, options)
    }
}

/// The default preference, as [`parse_backends`] takes it: the fast CPU backend first, the
/// reference backend behind it for every layer the fast one does not claim.
pub const DEFAULT_BACKENDS: &str = "CpuAcc,CpuRef";

/// [`DEFAULT_BACKENDS`] as backend ids.
pub fn default_backends() -> Vec<BackendId> {
    // The built-in ids are valid names; a bad one would fail this crate's tests.
    parse_backends(DEFAULT_BACKENDS).unwrap_or_default()
}

/// Optimizer options with the default preference ([`DEFAULT_BACKENDS`]) and no overrides.
pub fn default_optimizer_options() -> OptimizerOptions {
    OptimizerOptions::new(default_backends())
}

/// Parse a comma-separated backend list (e.g. `CpuAcc,CpuRef`).
pub fn parse_backends(list: &str) -> Result<Vec<BackendId>, Error> {
    list.split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| BackendId::new(s).map_err(Error::Invalid))
        .collect()
}

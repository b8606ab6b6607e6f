//! backplane-runtime: turns a [`Network`](backplane_core::Network) into something that runs.
//!
//! * [`BackendRegistry`]: backend factories by id, owned by each runtime (no global state).
//! * [`dynamic`]: dynamic backends, loaded from shared objects through the plugin C ABI
//!   into the runtime's own registry when it is created ([`Runtime::dynamic_backends`] says
//!   what was loaded and why other files were skipped).
//! * [`optimize`](Runtime::optimize): assigns every layer to the first preferred backend whose
//!   layer support accepts it (per-layer overrides first), cuts the graph into per-backend
//!   subgraphs, lets each backend optimize its subgraphs, and re-assigns what a backend
//!   rejects to the next backends.
//! * [`Runtime::load_network`]: creates workloads through each backend's workload factory,
//!   acquires memory managers and notifies the contexts of the backends the network uses.
//! * [`Runtime::execute`]: checks inputs against the network's descriptions and runs the
//!   workloads in order.
//! * [`plan_cache`]: the totals of the plan caches serving models on a runtime
//!   ([`Runtime::plan_cache_stats`]).

mod budget;
mod builtin;
pub mod dynamic;
mod error;
mod host_memory;
mod loaded;
pub mod memory_plan;
mod optimizer;
pub mod plan_cache;
mod registry;
mod runtime;
pub mod strategy;

pub use builtin::{BuiltinBackend, BUILTIN, DEFAULT_MAX_LOOP_ITERATIONS};
pub use dynamic::{DynamicBackendReport, DynamicBackendsOption};
pub use error::{Result, RuntimeError, UnsupportedLayer};
pub use host_memory::{HostFactory, OwnedHostHandle};
pub use loaded::{LayerTiming, LoadedNetwork, OutputWrite};
pub use optimizer::{
    OptimizationRecord, OptimizationReport, OptimizedNetwork, OptimizerOptions,
    RejectedOptimization, ReplayOutcome, SubstitutionRecord, SupportAnswers,
};
pub use plan_cache::{CacheCounts, CacheKind, PlanCacheCounters, PlanCacheTotals};
pub use registry::{BackendFactory, BackendRegistry};
pub use runtime::{available_memory, Runtime, RuntimeOptions};

/// Named tensors, in a network's input or output order.
pub type NamedTensors = Vec<(String, backplane_core::Tensor)>;

pub use backplane_backend_api as backend_api;
pub use backplane_core as core;

//! backplane-backend-api: the contract between the runtime and a backend.
//!
//! A backend author implements [`Backend`] (and the traits it hands out) against this crate
//! alone, never against the runtime. The shape follows Arm NN's `IBackendInternal`:
//!
//! * [`Backend`] is a stateless *factory of factories*: the runtime may create and drop it at
//!   will, so state lives in what it creates.
//! * [`LayerSupport`] answers "can you run this layer, and if not, why".
//! * [`WorkloadFactory`] turns a layer into an executable [`Workload`].
//! * [`MemoryManager`] is acquired before a network executes and released after.
//! * [`BackendContext`] lives as long as the runtime and hears about network loads/unloads.
//! * [`Backend::optimize_subgraph`] returns [`OptimizationViews`]: substitutions, failed and
//!   untouched parts of the subgraph the optimizer handed it.
//!
//! The API is versioned by [`BACKEND_API_VERSION`]: the major number changes on any
//! incompatible change, the minor number on compatible additions.
//!
//! Where tensors live is negotiated through tensor-handle factories ([`TensorHandleFactory`]):
//! a backend registers the kinds of memory it has and lists, best first, the factories it can
//! work with. Workloads on host memory read and write [`backplane_core::TensorView`]s; a
//! workload on memory it cannot map overrides [`Workload::execute_handles`].

mod allocator;
mod backend;
mod context;
mod error;
mod id;
mod memory;
pub mod patterns;
mod subgraph;
mod support;
mod tensor_handle;
mod workload;

pub use allocator::CustomAllocator;
pub use backend::{Backend, BackendOptions, Capabilities, CapabilityValue};
pub use context::{BackendContext, NetworkId};
pub use error::{BackendError, Result};
pub use id::{BackendId, BackendVersion, BACKEND_API_VERSION, MAX_BACKEND_ID_LEN};
pub use memory::MemoryManager;
pub use subgraph::{OptimizationViews, ReplacementLayer, SubgraphView, Substitution, ValueRef};
pub use support::{LayerDesc, LayerSupport, Support};
pub use tensor_handle::{
    DataLayout, FactoryId, FactoryProperties, HostViewHandle, HostViewHandleMut, MemorySources,
    OwnedHostHandle, TensorHandle, TensorHandleFactory, TensorHandleFactoryRegistry,
};
pub use workload::{NestedNetwork, Workload, WorkloadFactory};

/// Re-export of the core crate, so a backend needs one dependency.
pub use backplane_core as core;

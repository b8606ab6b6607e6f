//! The host side: open a dynamic backend's shared object, check it, and wrap it in
//! [`DynamicBackend`], an ordinary [`Backend`](backplane_backend_api::Backend).
//!
//! # When libraries are closed: never
//!
//! [`PluginLibrary::open`] keeps every library it opens in a process-wide cache keyed by
//! canonical path, for the life of the process; opening the same file again reuses the handle.
//! `dlclose` is never called, deliberately:
//!
//! * a Rust plugin registers thread-local destructors (std's, rayon's pools) that run when
//!   their threads exit, possibly after an unload: calling into unmapped code crashes;
//! * function pointers, workloads and contexts handed out by a plugin may be held by loaded
//!   networks; keeping the code mapped makes that safe by construction.
//!
//! The cost is the mapping of each distinct file for the rest of the process. What *is*
//! released when a runtime is dropped is everything the plugin created for it: the backend
//! instance, its workload factories, workloads, memory managers and context. The instance is
//! reference-counted by everything it created, so it is destroyed last.
//!
//! # ABI 1.2 on the host side
//!
//! [`DynamicBackend`] registers the plugin's tensor-handle factories as ordinary
//! [`TensorHandleFactory`](backplane_backend_api::TensorHandleFactory)s and reports its preferences, so the runtime's tensor-handle
//! strategy uses them unchanged. Their handles map lazily: a handle is mapped the first time
//! the host needs its bytes and unmapped only when a borrow proves no view of the mapping is
//! alive (before the plugin writes it, before the plugin reads what the host wrote, at
//! destruction). A workload of the plugin receives the instance's own handles as handles and
//! every other tensor as host memory. `optimize_subgraph` sends the subgraph as C structs
//! and turns the plugin's answer, checked id by id, into [`OptimizationViews`](backplane_backend_api::OptimizationViews).
//!
//! # Modules
//!
//! `library` opens and checks a shared object and keeps the process-wide cache; `instance`
//! is one backend instance and its call discipline; `backend` is [`DynamicBackend`] and
//! `optimize` its `optimize_subgraph`; `tensor_handle`, `workload` and `adapters` wrap the
//! plugin's handles, workloads and factories, layer support, memory managers and context.

mod adapters;
mod backend;
mod instance;
mod library;
mod optimize;
mod tensor_handle;
mod workload;

pub use backend::DynamicBackend;
pub use instance::PluginInstance;
pub use library::{
    exports_symbol, is_compatible, library_handles, live_instances, mapped_handles, open_libraries,
    PluginLibrary, MAX_BACKEND_ID_LEN,
};

use crate::abi;
use backplane_backend_api::BackendVersion;

/// The ABI version this host speaks.
pub const HOST_ABI_VERSION: BackendVersion = BackendVersion {
    major: abi::ABI_VERSION_MAJOR,
    minor: abi::ABI_VERSION_MINOR,
};

/// Size of the message buffers handed to the plugin.
const MESSAGE_BYTES: usize = 1024;

/// Why a shared object could not be used as a dynamic backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The path is empty.
    #[error("the shared-object path is empty")]
    EmptyPath,
    /// `dlopen` failed (missing file, not a shared object, unresolved dependencies).
    #[error("cannot open it as a shared object: {0}")]
    Open(String),
    /// A required entry point is not exported with C linkage.
    #[error("it does not export '{symbol}' with C linkage ({detail})")]
    MissingEntryPoint {
        /// The symbol.
        symbol: &'static str,
        /// dlerror's text.
        detail: String,
    },
    /// `GetBackendId` returned null.
    #[error("GetBackendId returned null")]
    NullId,
    /// The id is not a valid backend id.
    #[error("GetBackendId returned an invalid id: {0}")]
    InvalidId(String),
    /// The ABI version is not compatible with the host's.
    #[error("it was built against ABI {plugin}, which this runtime (ABI {host}) cannot load: the major versions must be equal and the plugin's minor version not newer")]
    IncompatibleVersion {
        /// The plugin's version.
        plugin: BackendVersion,
        /// The host's.
        host: BackendVersion,
    },
    /// `BackendFactory` returned null.
    #[error("BackendFactory returned null")]
    NullFactory,
    /// The function table is malformed.
    #[error("its function table is malformed: {0}")]
    BadTable(String),
    /// `create_instance` failed.
    #[error("creating the backend failed: {0}")]
    CreateFailed(String),
    /// The plugin panicked.
    #[error("{0}")]
    Panicked(String),
}

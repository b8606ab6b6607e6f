//! The backend trait itself: a stateless factory of factories.

use crate::{
    BackendContext, BackendId, BackendVersion, LayerSupport, MemoryManager, OptimizationViews,
    Result, SubgraphView, WorkloadFactory, BACKEND_API_VERSION,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Options an application sets for one backend (name → value), passed to its context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// The option values.
    pub values: BTreeMap<String, String>,
}

impl BackendOptions {
    /// The value of an option.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
}

/// The value of one capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapabilityValue {
    /// A yes/no capability.
    Bool(bool),
    /// A number (e.g. a thread count).
    Int(i64),
    /// Text.
    Text(String),
}

impl std::fmt::Display for CapabilityValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapabilityValue::Bool(b) => write!(f, "{b}"),
            CapabilityValue::Int(i) => write!(f, "{i}"),
            CapabilityValue::Text(s) => f.write_str(s),
        }
    }
}

/// What a backend can do beyond running layers, as name → value pairs
/// (e.g. `"ProtectedContentAllocation" → false`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities(pub BTreeMap<String, CapabilityValue>);

impl Capabilities {
    /// Add a capability.
    pub fn with(mut self, name: &str, value: CapabilityValue) -> Self {
        self.0.insert(name.to_string(), value);
        self
    }

    /// Look one up.
    pub fn get(&self, name: &str) -> Option<&CapabilityValue> {
        self.0.get(name)
    }
}

/// A backend. The object is a lightweight, stateless entry point: the runtime creates it from
/// the registry when it needs it and may drop it at any time, so it must make no assumption
/// about outliving what it creates.
pub trait Backend: Send + Sync {
    /// The unique id this backend registers under.
    fn id(&self) -> BackendId;

    /// The backend API version this backend was built against.
    fn api_version(&self) -> BackendVersion {
        BACKEND_API_VERSION
    }

    /// The backend's own version, for display (e.g. `"0.1.0"`).
    fn version(&self) -> String {
        String::from("0.0.0")
    }

    /// The layer-support oracle.
    fn layer_support(&self) -> Arc<dyn LayerSupport>;

    /// The memory manager for one loaded network, if the backend manages memory.
    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        None
    }

    /// A workload factory for one loaded network, using its memory manager.
    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>>;

    /// A context kept for the runtime's lifetime, notified of network loads and unloads.
    fn create_backend_context(
        &self,
        _options: &crate::BackendOptions,
    ) -> Result<Option<Box<dyn BackendContext>>> {
        Ok(None)
    }

    /// Optimize the part of a network assigned to this backend. The default leaves it
    /// untouched.
    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        OptimizationViews::untouched(subgraph)
    }

    /// Capabilities, shown to users and queried by the runtime.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Register the backend's own tensor-handle factories (and the memory managers behind
    /// them). The default registers none: the backend works on the runtime's host memory.
    fn register_tensor_handle_factories(&self, _registry: &mut crate::TensorHandleFactoryRegistry) {
    }

    /// Use an application's allocator for this backend's tensor memory. The runtime calls it
    /// on every backend object it creates when the application set an allocator for this
    /// backend; an error makes the runtime refuse to start, with the reason. The default
    /// refuses: a backend must opt in.
    fn use_custom_allocator(
        &self,
        _allocator: std::sync::Arc<dyn crate::CustomAllocator>,
    ) -> std::result::Result<(), String> {
        Err(format!(
            "backend '{}' does not support custom allocators",
            self.id()
        ))
    }

    /// The factories the backend's workloads can read and write, best first (its own and
    /// other backends'). The default is the host factory only.
    fn handle_factory_preferences(&self) -> Vec<crate::FactoryId> {
        vec![crate::FactoryId::host()]
    }
}

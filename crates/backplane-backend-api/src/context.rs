//! Backend contexts: per-runtime state notified of network loads and unloads.

use crate::Result;
use std::fmt;

/// Identifies a loaded network within one runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetworkId(pub u64);

impl fmt::Display for NetworkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// State a backend keeps for the life of a runtime. Only backends that a network uses are
/// notified about it. An error from a `before_*` hook stops that load or unload.
pub trait BackendContext: Send + Sync {
    /// Before a network using this backend is loaded; an error aborts the load.
    fn before_load_network(&self, _id: NetworkId) -> Result<()> {
        Ok(())
    }
    /// After it is loaded.
    fn after_load_network(&self, _id: NetworkId) -> Result<()> {
        Ok(())
    }
    /// Before it is unloaded; an error keeps it loaded.
    fn before_unload_network(&self, _id: NetworkId) -> Result<()> {
        Ok(())
    }
    /// After it is unloaded.
    fn after_unload_network(&self, _id: NetworkId) {}
    /// After each execution of a network using this backend ended, successfully or not
    /// (called once per top-level execution, not per control-flow body): the moment to
    /// finish work the backend deferred, such as device commands recorded but not yet
    /// submitted. An error fails an execution that had otherwise succeeded.
    fn after_execute_network(&self, _id: NetworkId) -> Result<()> {
        Ok(())
    }
}

//! Backend memory managers.

use crate::Result;

/// Memory a backend manages for the workloads of a loaded network. The runtime calls
/// [`MemoryManager::acquire`] before the network first executes and
/// [`MemoryManager::release`] when it is unloaded.
pub trait MemoryManager: Send + Sync {
    /// Make the backend's working memory available.
    fn acquire(&self) -> Result<()>;
    /// Give the working memory back.
    fn release(&self);
}

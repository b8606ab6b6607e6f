//! Custom allocators: an application hands a backend the allocator it must use for tensor
//! memory (e.g. for protected content), as Arm NN's `ICustomAllocator`.

use crate::MemorySources;

/// Memory an application allocates for a backend.
pub trait CustomAllocator: Send + Sync {
    /// Allocate `bytes` bytes aligned to `alignment`; the returned buffer's length is `bytes`.
    fn allocate(&self, bytes: usize, alignment: usize) -> Result<Vec<u8>, String>;
    /// Give a buffer back.
    fn free(&self, buffer: Vec<u8>);
    /// The kind of memory it hands out.
    fn memory_source(&self) -> MemorySources {
        MemorySources::HOST
    }
}

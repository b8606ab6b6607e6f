//! CpuRef's memory manager. The reference kernels allocate nothing of their own (the runtime
//! owns every buffer), so it only counts how often the runtime acquires and releases it, which
//! lets tests check the runtime's bookkeeping.

use backplane_backend_api::{MemoryManager, Result};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A memory manager that counts [`MemoryManager::acquire`] and [`MemoryManager::release`].
#[derive(Debug, Default)]
pub struct CpuRefMemoryManager {
    acquired: AtomicUsize,
    released: AtomicUsize,
}

impl CpuRefMemoryManager {
    /// A manager with both counts at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times `acquire` was called.
    pub fn acquire_count(&self) -> usize {
        self.acquired.load(Ordering::SeqCst)
    }

    /// How many times `release` was called.
    pub fn release_count(&self) -> usize {
        self.released.load(Ordering::SeqCst)
    }

    /// Whether more acquires than releases happened.
    pub fn is_acquired(&self) -> bool {
        self.acquire_count() > self.release_count()
    }
}

impl MemoryManager for CpuRefMemoryManager {
    fn acquire(&self) -> Result<()> {
        self.acquired.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn release(&self) {
        self.released.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn counts_acquire_and_release() {
        let m = CpuRefMemoryManager::new();
        assert!(!m.is_acquired());
        m.acquire().unwrap();
        assert!(m.is_acquired());
        m.acquire().unwrap();
        m.release();
        assert_eq!((m.acquire_count(), m.release_count()), (2, 1));
        m.release();
        assert!(!m.is_acquired());
    }
}

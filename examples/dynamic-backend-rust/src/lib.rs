//! An example dynamic backend in Rust: the reference backend (CpuRef) exported through the C
//! ABI under its own id, `CpuRefDyn`, as Arm NN's RefDynamicBackend wraps its reference
//! backend.
//!
//! Build it with `cargo build --release -p dynamic-backend-rust`, then install
//! `target/release/libbackplane_cpuref_dyn.so` under a name the runtime accepts, e.g.
//! `Backplane_CpuRefDyn_backend.so`, in a dynamic-backends directory.

use backplane_backend_api::{
    Backend, BackendId, Capabilities, LayerSupport, MemoryManager, Result, WorkloadFactory,
};
use backplane_cpu_ref::CpuRefBackend;
use std::sync::Arc;

/// The id this backend registers under.
pub const ID: &str = "CpuRefDyn";

/// CpuRef under another id: every method delegates to [`CpuRefBackend`].
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuRefDyn(CpuRefBackend);

impl Backend for CpuRefDyn {
    #[allow(clippy::expect_used)]
    fn id(&self) -> BackendId {
        // A constant made of ASCII letters: always valid (checked by the loader's tests).
        BackendId::new(ID).expect("CpuRefDyn is a valid backend id")
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        self.0.layer_support()
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        self.0.create_memory_manager()
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        self.0.create_workload_factory(memory_manager)
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

backplane_plugin::export_backend!(CpuRefDyn);

//! The workload factory and the workload: a layer ready to run on CpuRef.

use crate::ops;
use crate::support::CpuRefLayerSupport;
use backplane_backend_api::{
    BackendError, LayerDesc, LayerSupport, MemoryManager, Result, Support, Workload,
    WorkloadFactory,
};
use backplane_core::{Op, TensorView, TensorViewMut};
use std::sync::Arc;

/// Creates CpuRef workloads for one loaded network.
#[derive(Default)]
pub struct CpuRefWorkloadFactory {
    memory_manager: Option<Arc<dyn MemoryManager>>,
}

impl CpuRefWorkloadFactory {
    /// A factory using `memory_manager` (CpuRef's kernels do not need one).
    pub fn new(memory_manager: Option<Arc<dyn MemoryManager>>) -> Self {
        CpuRefWorkloadFactory { memory_manager }
    }

    /// The memory manager the factory was created with.
    pub fn memory_manager(&self) -> Option<&Arc<dyn MemoryManager>> {
        self.memory_manager.as_ref()
    }
}

impl WorkloadFactory for CpuRefWorkloadFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        match CpuRefLayerSupport.is_layer_supported(layer) {
            Support::Supported => Ok(Box::new(CpuRefWorkload {
                layer: layer.name.clone(),
                op: layer.op.clone(),
            })),
            Support::Unsupported(reason) => Err(BackendError::Unsupported {
                layer: layer.name.clone(),
                op: layer.op.name().to_string(),
                reason,
            }),
        }
    }
}

/// One layer: its op, run by the reference kernels. Holds no per-execution state, so
/// concurrent `execute` calls with separate buffers are safe.
struct CpuRefWorkload {
    layer: String,
    op: Op,
}

impl Workload for CpuRefWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        ops::execute(&self.layer, &self.op, inputs, outputs)
    }
}

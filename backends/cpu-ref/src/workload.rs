//! The workload factory and the workload: a layer ready to run on CpuRef.

use crate::ops::{self, Plan};
use crate::support::plan_layer;
use backplane_backend_api::{
    BackendError, LayerDesc, MemoryManager, Result, Workload, WorkloadFactory,
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
        // The plan layer support answers from: supported exactly when it can be built.
        match plan_layer(layer) {
            Ok(plan) => Ok(Box::new(CpuRefWorkload {
                layer: layer.name.clone(),
                op: layer.op.clone(),
                plan,
            })),
            Err(reason) => Err(BackendError::Unsupported {
                layer: layer.name.clone(),
                op: layer.op.name().to_string(),
                reason,
            }),
        }
    }
}

/// One layer: its op and its plan, run by the reference kernels. Holds no per-execution
/// state, so concurrent `execute` calls with separate buffers are safe.
struct CpuRefWorkload {
    layer: String,
    op: Op,
    plan: Plan,
}

impl Workload for CpuRefWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        ops::execute(&self.layer, &self.op, &self.plan, inputs, outputs)
    }
}

//! The workload factory: builds each layer's workload from its plan ([`crate::plan`]), doing
//! the load-time work (weight packing, constant folding of parameters) there.

use crate::io::Io;
use crate::plan::{self, refused};
use crate::thread_choice::Chosen;
use crate::threads::Threads;
use backplane_backend_api::{LayerDesc, MemoryManager, Result, Workload, WorkloadFactory};
use std::sync::Arc;

/// Creates CpuAcc workloads for one loaded network.
pub struct CpuAccWorkloadFactory {
    threads: Threads,
    _memory_manager: Option<Arc<dyn MemoryManager>>,
}

impl CpuAccWorkloadFactory {
    /// A factory whose workloads use `threads`.
    pub fn new(threads: Threads, memory_manager: Option<Arc<dyn MemoryManager>>) -> Self {
        CpuAccWorkloadFactory {
            threads,
            _memory_manager: memory_manager,
        }
    }

    /// The number of threads its workloads use.
    pub fn threads(&self) -> usize {
        self.threads.count()
    }
}

impl WorkloadFactory for CpuAccWorkloadFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        // The plan layer support answers from: supported exactly when it can be built.
        let plan = plan::plan(layer).map_err(|reason| refused(layer, reason))?;
        let io = Io {
            layer: layer.name.clone(),
            inputs: layer.inputs.clone(),
            outputs: layer.outputs.clone(),
        };
        let workload = plan.build(io, self.threads.clone())?;
        Ok(match crate::options::current().thread_choice {
            true => Chosen::wrap(workload, &layer.name, &self.threads),
            false => workload,
        })
    }
}

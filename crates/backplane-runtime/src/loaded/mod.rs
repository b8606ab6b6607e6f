//! A loaded network: workloads created, memory planned and acquired, ready to execute.
//!
//! Every tensor has a *slot*: the caller's input, a constant, a region of the host arena
//! (planned so that tensors alive at the same time never overlap), or a handle from a
//! backend's tensor-handle factory. Each execution takes a *working memory* (one arena plus
//! the handles) from a pool, so executions on several threads never share buffers, and
//! returns it afterwards: after the first execution nothing is allocated.
//!
//! * [`plan`]: the host arena layout, the slots, and the working memory they are carved from.
//! * [`execute`]: binding inputs, running the workloads in order, and delivering outputs.
//! * [`deadline`]: the per-thread deadline of one execution (`max_execution_time`).
//! * [`profile`]: per-layer timings of one execution.

mod deadline;
mod execute;
mod plan;
mod profile;

pub use execute::OutputWrite;
pub(crate) use plan::{plan_host_memory, HostLayout, LoadParts};
pub use profile::LayerTiming;

use crate::memory_plan::MemoryPlan;
use backplane_backend_api::{
    BackendId, FactoryId, MemoryManager, NetworkId, TensorHandleFactoryRegistry, Workload,
};
use backplane_core::{Network, TensorId};
use plan::{Slot, WorkingMemory};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct Step {
    pub(crate) layer: usize,
    pub(crate) workload: Box<dyn Workload>,
}

/// A network whose workloads exist and whose memory is planned and acquired.
pub struct LoadedNetwork {
    pub(crate) id: NetworkId,
    pub(crate) network: Network,
    pub(crate) assignment: Vec<BackendId>,
    pub(crate) steps: Vec<Step>,
    pub(crate) memory_managers: Vec<(BackendId, Arc<dyn MemoryManager>)>,
    pub(crate) backends_used: Vec<BackendId>,
    slots: Vec<Slot>,
    elided: Vec<bool>,
    direct_output: Vec<Option<usize>>,
    arena_bytes: usize,
    plan: MemoryPlan,
    /// For each handle slot: the factory id and the tensor it holds.
    handle_specs: Vec<(FactoryId, TensorId)>,
    factories: TensorHandleFactoryRegistry,
    pool: Mutex<Vec<WorkingMemory>>,
    allocations: std::sync::atomic::AtomicUsize,
    /// The loaded bodies of control-flow layers: (layer index, one per subgraph).
    pub(crate) subgraphs: Vec<(usize, Vec<Arc<LoadedNetwork>>)>,
    /// How long one execution may run (`RuntimeOptions::max_execution_time`).
    pub(crate) max_execution_time: Option<Duration>,
}

impl std::fmt::Debug for LoadedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedNetwork")
            .field("id", &self.id)
            .field("layers", &self.steps.len())
            .field("backends", &self.backends_used)
            .field("arena_bytes", &self.arena_bytes)
            .finish()
    }
}

impl LoadedNetwork {
    /// Its id in the runtime.
    pub fn id(&self) -> NetworkId {
        self.id
    }

    /// The optimized graph it runs.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The backend of each layer.
    pub fn assignment(&self) -> &[BackendId] {
        &self.assignment
    }

    /// The backends it uses, in order of first use.
    pub fn backends_used(&self) -> &[BackendId] {
        &self.backends_used
    }

    /// The host-memory plan of this network.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The loaded bodies of control-flow layers: (layer index, one network per subgraph of
    /// its op, in the op's order).
    pub fn subgraphs(&self) -> &[(usize, Vec<Arc<LoadedNetwork>>)] {
        &self.subgraphs
    }

    /// How many working-memory sets were ever allocated: one per execution that ran while
    /// all others were busy; it stays constant across sequential executions.
    pub fn working_memory_allocations(&self) -> usize {
        self.allocations.load(std::sync::atomic::Ordering::Relaxed)
    }
}

//! A loaded network: workloads created, memory acquired, ready to execute.

use crate::{NamedTensors, Result, RuntimeError};
use backplane_backend_api::{BackendError, BackendId, MemoryManager, NetworkId, Workload};
use backplane_core::{Network, Tensor, TensorKind, TensorView, TensorViewMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct Step {
    pub(crate) layer: usize,
    pub(crate) workload: Box<dyn Workload>,
}

/// The per-execution buffers of intermediate tensors, indexed by tensor id. Executions
/// running at the same time each take their own set from a pool.
struct WorkingMemory {
    tensors: Vec<Option<Tensor>>,
}

/// How long one workload took in one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerTiming {
    /// Layer name.
    pub layer: String,
    /// Operator name.
    pub op: String,
    /// The backend that ran it.
    pub backend: BackendId,
    /// When it started, from the start of the execution.
    pub start: Duration,
    /// How long it ran.
    pub duration: Duration,
}

/// A network whose workloads exist and whose memory is acquired.
pub struct LoadedNetwork {
    pub(crate) id: NetworkId,
    pub(crate) network: Network,
    pub(crate) assignment: Vec<BackendId>,
    pub(crate) steps: Vec<Step>,
    pub(crate) memory_managers: Vec<(BackendId, Arc<dyn MemoryManager>)>,
    pub(crate) backends_used: Vec<BackendId>,
    pool: Mutex<Vec<WorkingMemory>>,
}

impl std::fmt::Debug for LoadedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedNetwork")
            .field("id", &self.id)
            .field("layers", &self.steps.len())
            .field("backends", &self.backends_used)
            .finish()
    }
}

impl LoadedNetwork {
    pub(crate) fn new(
        id: NetworkId,
        network: Network,
        assignment: Vec<BackendId>,
        steps: Vec<Step>,
        memory_managers: Vec<(BackendId, Arc<dyn MemoryManager>)>,
        backends_used: Vec<BackendId>,
    ) -> Self {
        LoadedNetwork {
            id,
            network,
            assignment,
            steps,
            memory_managers,
            backends_used,
            pool: Mutex::new(Vec::new()),
        }
    }

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

    fn allocate(&self) -> Result<WorkingMemory> {
        let mut tensors = Vec::with_capacity(self.network.tensors().len());
        for e in self.network.tensors() {
            tensors.push(match e.kind {
                TensorKind::Produced { .. } => Some(Tensor::zeros(e.info.clone())?),
                _ => None,
            });
        }
        Ok(WorkingMemory { tensors })
    }

    /// Check the inputs and run every workload in order; outputs come back in the network's
    /// output order, named.
    pub(crate) fn execute(
        &self,
        inputs: &[(&str, &Tensor)],
        profile: Option<&mut Vec<LayerTiming>>,
    ) -> Result<NamedTensors> {
        let bound = self.bind_inputs(inputs)?;
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut mem = match taken {
            Some(m) => m,
            None => self.allocate()?,
        };
        let result = self.run(&bound, &mut mem, profile);
        let outputs = match result {
            Ok(()) => self.collect_outputs(&bound, &mem),
            Err(e) => Err(e),
        };
        if outputs.is_ok() {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mem);
        }
        outputs
    }

    /// For each network input (in order), the caller's tensor, after checking names, types
    /// and shapes.
    fn bind_inputs<'a>(&self, given: &[(&str, &'a Tensor)]) -> Result<Vec<&'a Tensor>> {
        let names: Vec<&str> = self
            .network
            .inputs()
            .iter()
            .map(|t| self.network.tensor(*t).name.as_str())
            .collect();
        let all = names.join(", ");
        for (i, (name, _)) in given.iter().enumerate() {
            if !names.contains(name) {
                return Err(RuntimeError::UnknownInput {
                    name: name.to_string(),
                    all,
                });
            }
            if given[..i].iter().any(|(n, _)| n == name) {
                return Err(RuntimeError::DuplicateInput(name.to_string()));
            }
        }
        let mut bound = Vec::with_capacity(names.len());
        for &t in self.network.inputs() {
            let e = self.network.tensor(t);
            let Some((_, tensor)) = given.iter().find(|(n, _)| *n == e.name) else {
                return Err(RuntimeError::MissingInput {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    all,
                });
            };
            if !tensor.info().same_layout(&e.info) {
                return Err(RuntimeError::InputMismatch {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    actual: tensor.info().to_string(),
                });
            }
            bound.push(*tensor);
        }
        Ok(bound)
    }

    fn run(
        &self,
        inputs: &[&Tensor],
        mem: &mut WorkingMemory,
        mut profile: Option<&mut Vec<LayerTiming>>,
    ) -> Result<()> {
        let started = Instant::now();
        for step in &self.steps {
            let layer = &self.network.layers()[step.layer];
            let fail = |source: BackendError| RuntimeError::Backend {
                backend: self.assignment[step.layer].clone(),
                layer: Some(layer.name.clone()),
                source: Box::new(source),
            };
            // Move the outputs out so that inputs can be borrowed from the same memory.
            let mut outs: Vec<Tensor> = Vec::with_capacity(layer.outputs.len());
            for t in &layer.outputs {
                let taken = mem.tensors[t.0].take().ok_or_else(|| {
                    fail(BackendError::Other(format!(
                        "output '{}' is computed twice",
                        self.network.tensor(*t).name
                    )))
                })?;
                outs.push(taken);
            }
            let outcome = {
                let mut in_views: Vec<TensorView<'_>> = Vec::with_capacity(layer.inputs.len());
                for t in &layer.inputs {
                    in_views.push(self.view_of(*t, inputs, mem).ok_or_else(|| {
                        fail(BackendError::Other(format!(
                            "input '{}' is not available",
                            self.network.tensor(*t).name
                        )))
                    })?);
                }
                let mut out_views: Vec<TensorViewMut<'_>> =
                    outs.iter_mut().map(|t| t.view_mut()).collect();
                let began = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    step.workload.execute(&in_views, &mut out_views)
                }));
                if let Some(p) = profile.as_deref_mut() {
                    p.push(LayerTiming {
                        layer: layer.name.clone(),
                        op: layer.op.name().to_string(),
                        backend: self.assignment[step.layer].clone(),
                        start: began.duration_since(started),
                        duration: began.elapsed(),
                    });
                }
                outcome
            };
            for (t, tensor) in layer.outputs.iter().zip(outs) {
                mem.tensors[t.0] = Some(tensor);
            }
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(fail(e)),
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    return Err(fail(BackendError::Other(format!(
                        "the workload panicked: {msg}"
                    ))));
                }
            }
        }
        Ok(())
    }

    fn view_of<'a>(
        &'a self,
        t: backplane_core::TensorId,
        inputs: &[&'a Tensor],
        mem: &'a WorkingMemory,
    ) -> Option<TensorView<'a>> {
        match &self.network.tensor(t).kind {
            TensorKind::Input => {
                let pos = self.network.inputs().iter().position(|i| *i == t)?;
                inputs.get(pos).map(|x| x.view())
            }
            TensorKind::Constant(c) => Some(c.view()),
            TensorKind::Produced { .. } => mem.tensors.get(t.0)?.as_ref().map(|x| x.view()),
        }
    }

    fn collect_outputs(
        &self,
        inputs: &[&Tensor],
        mem: &WorkingMemory,
    ) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::with_capacity(self.network.outputs().len());
        for &t in self.network.outputs() {
            let e = self.network.tensor(t);
            let view = self.view_of(t, inputs, mem).ok_or_else(|| {
                RuntimeError::Core(backplane_core::CoreError::InvalidNetwork(format!(
                    "output '{}' was not computed",
                    e.name
                )))
            })?;
            out.push((e.name.clone(), view.to_tensor()?));
        }
        Ok(out)
    }
}

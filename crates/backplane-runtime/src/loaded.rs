//! A loaded network: workloads created, memory planned and acquired, ready to execute.
//!
//! Every tensor has a *slot*: the caller's input, a constant, a region of the host arena
//! (planned so that tensors alive at the same time never overlap), or a handle from a
//! backend's tensor-handle factory. Each execution takes a *working memory* (one arena plus
//! the handles) from a pool, so executions on several threads never share buffers, and
//! returns it afterwards: after the first execution nothing is allocated.

use crate::host_memory::{HostView, HostViewMut};
use crate::memory_plan::{self, Lifetime, MemoryPlan};
use crate::{NamedTensors, Result, RuntimeError};
use backplane_backend_api::{
    BackendError, BackendId, FactoryId, MemoryManager, NetworkId, TensorHandle,
    TensorHandleFactoryRegistry, Workload,
};
use backplane_core::{Network, Op, Tensor, TensorId, TensorKind, TensorView, TensorViewMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

thread_local! {
    /// The deadline of the execution running on this thread (with its limit), shared with
    /// the control-flow bodies it runs, which execute on the same thread.
    static DEADLINE: std::cell::Cell<Option<(Instant, Duration)>> =
        const { std::cell::Cell::new(None) };
}

/// Sets this thread's deadline for one top-level execution; restores the previous one
/// (none, or an enclosing execution's) when dropped.
struct DeadlineGuard(Option<(Instant, Duration)>);

impl DeadlineGuard {
    fn start(limit: Option<Duration>) -> Self {
        let previous = DEADLINE.with(|d| d.get());
        if previous.is_none() {
            if let Some(limit) = limit {
                let deadline = Instant::now().checked_add(limit);
                DEADLINE.with(|d| d.set(deadline.map(|at| (at, limit))));
            }
        }
        DeadlineGuard(previous)
    }
}

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        let previous = self.0;
        DEADLINE.with(|d| d.set(previous));
    }
}

pub(crate) struct Step {
    pub(crate) layer: usize,
    pub(crate) workload: Box<dyn Workload>,
}

/// Where a tensor's bytes are during an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// The caller's input number `n`.
    Input(usize),
    /// A constant of the network.
    Constant(TensorId),
    /// A constant no workload reads at execution (they copied it at load): released, and
    /// passed as an empty view.
    Released,
    /// Bytes `offset..offset + len` of the host arena.
    Arena { offset: usize, len: usize },
    /// Handle number `n` of the working memory.
    Handle(usize),
}

/// One execution's buffers.
struct WorkingMemory {
    /// The arena's words, a cache line longer than the plan needs: the plan's offsets are
    /// multiples of [`crate::memory_plan::ALIGNMENT`] from `arena_start`, the first word on a
    /// 64-byte boundary (a large allocation starts 16 bytes into a page, and kernels writing
    /// 64-byte strips of a tensor then split every line with the strip beside it).
    arena: Vec<u64>,
    /// First word of the arena proper.
    arena_start: usize,
    handles: Vec<Option<Box<dyn TensorHandle>>>,
}

impl WorkingMemory {
    /// The arena proper, from its aligned start.
    fn arena(&self) -> &[u8] {
        bytemuck_bytes_ref(self.arena.get(self.arena_start..).unwrap_or(&[]))
    }
}

/// The arena proper of `words` from word `start`, writable (a function of the field, not of
/// the whole working memory, so its handles stay borrowable beside it).
fn arena_mut(words: &mut [u64], start: usize) -> &mut [u8] {
    bytemuck_bytes(words.get_mut(start..).unwrap_or(&mut []))
}

/// How an output reached the caller's buffer in `Runtime::execute_into`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputWrite {
    /// The output's name.
    pub name: String,
    /// Written in place by the layer that computes it (true), or copied once at the end.
    pub in_place: bool,
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

/// Where each host tensor goes in the arena.
#[derive(Debug, Clone)]
pub(crate) struct HostLayout {
    /// Absolute byte offset of each host tensor (`None` for tensors elsewhere and for
    /// MemImport outputs, which share their input's memory).
    pub offsets: Vec<Option<usize>>,
    /// The arena plan.
    pub plan: MemoryPlan,
    /// Layers that need not run because their outputs are views of their inputs' memory
    /// (Concat written in place by its producers, Split read in place by its consumers).
    pub elided: Vec<bool>,
    /// Tensors that are a sub-tensor of another or have sub-tensors.
    pub aliased: Vec<bool>,
}

/// Plan the host arena. Concat and Split along an axis with nothing but size-1 axes before
/// it are *sub-tensor* layers: each part is a contiguous range of the whole, so the parts are
/// placed inside the whole and the layer copies nothing.
pub(crate) fn plan_host_memory(network: &Network, factories: &[FactoryId]) -> Result<HostLayout> {
    let host = FactoryId::host();
    let n = network.tensors().len();
    // Follow MemImport chains to the tensor that owns the memory.
    let owner = |mut t: TensorId| loop {
        match network.tensor(t).kind {
            TensorKind::Produced { layer, .. } if network.layer(layer).op == Op::MemImport => {
                t = network.layer(layer).inputs[0];
            }
            _ => return t,
        }
    };
    let in_arena = |t: TensorId| {
        matches!(network.tensor(t).kind, TensorKind::Produced { .. })
            && owner(t) == t
            && factories.get(t.0).unwrap_or(&host) == &host
    };
    let is_output = |t: TensorId| network.outputs().contains(&t);
    // Prefix of `dims` before `axis` is all ones: the parts along `axis` are contiguous.
    let contiguous = |dims: &[usize], axis: i64| {
        backplane_core::shape::normalize_axis(axis, dims.len())
            .map(|a| dims[..a].iter().all(|&d| d == 1))
            .unwrap_or(false)
    };
    let mut parent: Vec<Option<(TensorId, usize)>> = vec![None; n];
    let mut has_children = vec![false; n];
    let mut elided = vec![false; network.layers().len()];
    for (i, layer) in network.layers().iter().enumerate() {
        match &layer.op {
            Op::Concat { axis } => {
                let out = layer.outputs[0];
                let ins = &layer.inputs;
                let distinct = ins.iter().enumerate().all(|(k, t)| !ins[..k].contains(t));
                let ok = in_arena(out)
                    && parent[out.0].is_none()
                    && contiguous(network.tensor(out).info.shape.dims(), *axis)
                    && distinct
                    && ins.iter().all(|t| {
                        in_arena(*t)
                            && parent[t.0].is_none()
                            && !has_children[t.0]
                            && !is_output(*t)
                    });
                if ok {
                    let mut offset = 0usize;
                    for t in ins {
                        parent[t.0] = Some((out, offset));
                        offset = offset.saturating_add(network.tensor(*t).info.num_bytes()?);
                    }
                    has_children[out.0] = true;
                    elided[i] = true;
                }
            }
            Op::Split { axis, .. } => {
                let x = layer.inputs[0];
                let ok = in_arena(x)
                    && parent[x.0].is_none()
                    && contiguous(network.tensor(x).info.shape.dims(), *axis)
                    && layer
                        .outputs
                        .iter()
                        .all(|t| in_arena(*t) && parent[t.0].is_none());
                if ok {
                    let mut offset = 0usize;
                    for t in &layer.outputs {
                        parent[t.0] = Some((x, offset));
                        offset = offset.saturating_add(network.tensor(*t).info.num_bytes()?);
                    }
                    has_children[x.0] = true;
                    elided[i] = true;
                }
            }
            _ => {}
        }
    }
    // The tensor whose memory holds `t`, and where in it.
    let root = |t: TensorId| {
        let t = owner(t);
        match parent[t.0] {
            Some((p, off)) => (p, off),
            None => (t, 0),
        }
    };
    let steps = network.layers().len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, layer) in network.layers().iter().enumerate() {
        for t in &layer.outputs {
            let r = root(*t).0;
            first[r.0] = first[r.0].min(i);
            last[r.0] = last[r.0].max(i);
        }
        for t in &layer.inputs {
            let r = root(*t).0;
            last[r.0] = last[r.0].max(i);
        }
    }
    for t in network.outputs() {
        last[root(*t).0 .0] = steps;
    }
    let mut planned = Vec::new();
    let mut lifetimes = Vec::new();
    for t in 0..n {
        if in_arena(TensorId(t)) && parent[t].is_none() {
            planned.push(t);
            lifetimes.push(Lifetime {
                bytes: network.tensors()[t].info.num_bytes()?,
                first: first[t].min(last[t]),
                last: last[t],
            });
        }
    }
    let mut plan = memory_plan::plan(&lifetimes);
    plan.sub_tensor_layers = elided.iter().filter(|e| **e).count();
    let mut root_offset = vec![None; n];
    for (k, &t) in planned.iter().enumerate() {
        root_offset[t] = Some(plan.offsets[k]);
    }
    let offsets: Vec<Option<usize>> = (0..n)
        .map(|t| {
            if in_arena(TensorId(t)) {
                let (r, sub) = root(TensorId(t));
                root_offset[r.0].map(|o: usize| o + sub)
            } else {
                None
            }
        })
        .collect();
    let aliased = (0..n)
        .map(|t| parent[t].is_some() || has_children[t])
        .collect();
    Ok(HostLayout {
        offsets,
        plan,
        elided,
        aliased,
    })
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

/// What `LoadedNetwork::new` needs besides the workloads.
pub(crate) struct LoadParts {
    pub id: NetworkId,
    pub network: Network,
    pub assignment: Vec<BackendId>,
    pub steps: Vec<Step>,
    pub memory_managers: Vec<(BackendId, Arc<dyn MemoryManager>)>,
    pub backends_used: Vec<BackendId>,
    pub factories: Vec<FactoryId>,
    pub registry: TensorHandleFactoryRegistry,
    /// The host-memory plan the optimizer made for this network.
    pub layout: HostLayout,
}

impl LoadedNetwork {
    pub(crate) fn new(parts: LoadParts) -> Result<Self> {
        let LoadParts {
            id,
            network,
            assignment,
            steps,
            memory_managers,
            backends_used,
            factories,
            registry,
            layout,
        } = parts;
        let HostLayout {
            offsets,
            plan,
            elided,
            aliased,
        } = layout;
        // Outputs nothing else reads, in plain arena memory, can be written straight into a
        // caller's buffer.
        let consumers = network.consumers();
        let direct_output: Vec<Option<usize>> = (0..network.tensors().len())
            .map(|t| {
                let k = network.outputs().iter().position(|o| o.0 == t)?;
                let plain = offsets[t].is_some() && !aliased[t] && consumers[t].is_empty();
                let produced_once = network.outputs().iter().filter(|o| o.0 == t).count() == 1;
                (plain && produced_once).then_some(k)
            })
            .collect();
        let host = FactoryId::host();
        let mut slots = Vec::with_capacity(network.tensors().len());
        let mut handle_specs = Vec::new();
        for (t, e) in network.tensors().iter().enumerate() {
            let slot = match &e.kind {
                TensorKind::Input => {
                    let pos = network.inputs().iter().position(|i| i.0 == t).unwrap_or(0);
                    Slot::Input(pos)
                }
                TensorKind::Constant(_) => Slot::Constant(TensorId(t)),
                TensorKind::Released => Slot::Released,
                TensorKind::Produced { layer, .. } if network.layer(*layer).op == Op::MemImport => {
                    // Same memory as the input: resolved below, once that slot exists.
                    let src = network.layer(*layer).inputs[0];
                    slots.get(src.0).cloned().unwrap_or(Slot::Constant(src))
                }
                TensorKind::Produced { .. } => match offsets[t] {
                    Some(offset) => Slot::Arena {
                        offset,
                        len: e.info.num_bytes()?,
                    },
                    None => {
                        let f = factories.get(t).cloned().unwrap_or_else(|| host.clone());
                        if registry.get(&f).is_none() {
                            return Err(RuntimeError::NoTensorStrategy {
                                tensor: e.name.clone(),
                                reason: format!("its factory '{f}' is not registered"),
                            });
                        }
                        handle_specs.push((f, TensorId(t)));
                        Slot::Handle(handle_specs.len() - 1)
                    }
                },
            };
            slots.push(slot);
        }
        Ok(LoadedNetwork {
            id,
            network,
            assignment,
            steps,
            memory_managers,
            backends_used,
            slots,
            elided,
            direct_output,
            arena_bytes: plan.arena_bytes,
            plan,
            handle_specs,
            factories: registry,
            pool: Mutex::new(Vec::new()),
            allocations: std::sync::atomic::AtomicUsize::new(0),
            subgraphs: Vec::new(),
            max_execution_time: None,
        })
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

    fn allocate(&self) -> Result<WorkingMemory> {
        self.allocations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut handles = Vec::with_capacity(self.handle_specs.len());
        for (f, t) in &self.handle_specs {
            let factory = self
                .factories
                .get(f)
                .ok_or_else(|| RuntimeError::NoTensorStrategy {
                    tensor: self.network.tensor(*t).name.clone(),
                    reason: format!("its factory '{f}' is not registered"),
                })?;
            let handle = factory
                .create_tensor_handle(&self.network.tensor(*t).info)
                .map_err(|e| RuntimeError::Backend {
                    backend: self
                        .assignment
                        .first()
                        .cloned()
                        .unwrap_or_else(crate::BuiltinBackend::backend_id),
                    layer: None,
                    source: Box::new(e),
                })?;
            handles.push(Some(handle));
        }
        let line_words = crate::memory_plan::ALIGNMENT / 8;
        let words = self.arena_bytes.div_ceil(8).saturating_add(line_words);
        let mut arena = Vec::new();
        arena
            .try_reserve_exact(words)
            .map_err(|_| RuntimeError::OutOfMemory {
                what: format!("the working memory of network {}", self.id.0),
                bytes: self.arena_bytes,
            })?;
        arena.resize(words, 0u64);
        let misaligned = arena.as_ptr() as usize % crate::memory_plan::ALIGNMENT;
        let arena_start =
            (crate::memory_plan::ALIGNMENT - misaligned) % crate::memory_plan::ALIGNMENT / 8;
        Ok(WorkingMemory {
            arena,
            arena_start,
            handles,
        })
    }

    /// Check the inputs and run every workload in order; outputs come back in the network's
    /// output order, named.
    pub(crate) fn execute(
        &self,
        inputs: &[(&str, &Tensor)],
        profile: Option<&mut Vec<LayerTiming>>,
    ) -> Result<NamedTensors> {
        let _deadline = DeadlineGuard::start(self.max_execution_time);
        let bound = self.bind_inputs(inputs)?;
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut mem = match taken {
            Some(m) => m,
            None => self.allocate()?,
        };
        let outputs = self
            .run(&bound, &mut mem, profile, &mut [])
            .and_then(|()| self.collect_outputs(&bound, &mem));
        if outputs.is_ok() {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mem);
        }
        outputs
    }

    /// Like `execute`, writing the outputs into the caller's tensors. Outputs that no layer
    /// reads are written in place by the layer that computes them; the others are copied once
    /// at the end. On error, the caller's tensors hold unspecified values: the error is the
    /// mark that they are invalid.
    pub(crate) fn execute_into(
        &self,
        inputs: &[(&str, &Tensor)],
        outputs: &mut [(&str, &mut Tensor)],
    ) -> Result<Vec<OutputWrite>> {
        let _deadline = DeadlineGuard::start(self.max_execution_time);
        let bound = self.bind_inputs(inputs)?;
        // Every output, once, with its exact description, in the network's order.
        let mut order = Vec::with_capacity(self.network.outputs().len());
        for &t in self.network.outputs() {
            let e = self.network.tensor(t);
            let pos = outputs
                .iter()
                .position(|(n, _)| *n == e.name)
                .ok_or_else(|| RuntimeError::MissingInput {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    all: "output buffers for every network output".into(),
                })?;
            if !outputs[pos].1.info().same_layout(&e.info) {
                return Err(RuntimeError::InputMismatch {
                    name: e.name.clone(),
                    expected: e.info.to_string(),
                    actual: outputs[pos].1.info().to_string(),
                });
            }
            order.push(pos);
        }
        if outputs.len() != order.len() {
            return Err(RuntimeError::UnknownInput {
                name: "an output buffer".into(),
                all: "one buffer per network output".into(),
            });
        }
        let mut buffers: Vec<Option<&mut [u8]>> = Vec::with_capacity(order.len());
        let mut taken_out: Vec<Option<&mut Tensor>> =
            outputs.iter_mut().map(|(_, t)| Some(&mut **t)).collect();
        for &pos in &order {
            buffers.push(taken_out[pos].take().map(|t| t.bytes_mut()));
        }
        let in_place = self.run_into(&bound, buffers)?;
        Ok(self
            .network
            .outputs()
            .iter()
            .zip(in_place)
            .map(|(t, in_place)| OutputWrite {
                name: self.network.tensor(*t).name.clone(),
                in_place,
            })
            .collect())
    }

    /// Run on `inputs` (checked), writing each network output into the buffer of the same
    /// position; returns, per output, whether its layer wrote it in place.
    fn run_into(
        &self,
        bound: &[TensorView<'_>],
        buffers: Vec<Option<&mut [u8]>>,
    ) -> Result<Vec<bool>> {
        let taken = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut mem = match taken {
            Some(m) => m,
            None => self.allocate()?,
        };
        let mut in_place = Vec::with_capacity(buffers.len());
        let result = {
            // Buffers the computing layers write into, by network output index.
            let mut direct: Vec<Option<&mut [u8]>> = Vec::with_capacity(buffers.len());
            let mut copy_later = Vec::new();
            for (k, buffer) in buffers.into_iter().enumerate() {
                let t = self.network.outputs()[k];
                match (self.direct_output[t.0], buffer) {
                    (Some(_), Some(buffer)) => {
                        direct.push(Some(buffer));
                        in_place.push(true);
                    }
                    (_, buffer) => {
                        direct.push(None);
                        copy_later.push((k, buffer));
                        in_place.push(false);
                    }
                }
            }
            self.run(bound, &mut mem, None, &mut direct).and_then(|()| {
                drop(direct);
                // Only the outputs not written in place are copied, once.
                for (k, buffer) in copy_later {
                    if let Some(buffer) = buffer {
                        let bytes = self.output_bytes(self.network.outputs()[k], bound, &mem)?;
                        if bytes.len() != buffer.len() {
                            return Err(RuntimeError::Core(
                                backplane_core::CoreError::InvalidNetwork(format!(
                                    "output '{}' has {} bytes, its buffer {}",
                                    self.network.tensor(self.network.outputs()[k]).name,
                                    bytes.len(),
                                    buffer.len()
                                )),
                            ));
                        }
                        buffer.copy_from_slice(bytes);
                    }
                }
                Ok(())
            })
        };
        if result.is_ok() {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mem);
        }
        result.map(|()| in_place)
    }

    /// Run on inputs and outputs given by position (the network's input and output order),
    /// each exactly matching its description: how nested networks (control-flow bodies)
    /// run, without names or new tensors.
    pub fn execute_views(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> Result<()> {
        let check = |what: &str, expected: &[TensorId], given: Vec<&backplane_core::TensorInfo>| {
            if expected.len() != given.len() {
                return Err(RuntimeError::InputMismatch {
                    name: what.to_string(),
                    expected: format!("{} tensors", expected.len()),
                    actual: format!("{} tensors", given.len()),
                });
            }
            for (t, info) in expected.iter().zip(given) {
                let e = self.network.tensor(*t);
                if !info.same_layout(&e.info) {
                    return Err(RuntimeError::InputMismatch {
                        name: e.name.clone(),
                        expected: e.info.to_string(),
                        actual: info.to_string(),
                    });
                }
            }
            Ok(())
        };
        check(
            "inputs",
            self.network.inputs(),
            inputs.iter().map(|v| v.info).collect(),
        )?;
        check(
            "outputs",
            self.network.outputs(),
            outputs.iter().map(|v| v.info).collect(),
        )?;
        let buffers = outputs.iter_mut().map(|v| Some(&mut *v.data)).collect();
        self.run_into(inputs, buffers).map(|_| ())
    }

    /// For each network input (in order), the caller's tensor, after checking names, types
    /// and shapes.
    fn bind_inputs<'a>(&self, given: &[(&str, &'a Tensor)]) -> Result<Vec<TensorView<'a>>> {
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
            bound.push(tensor.view());
        }
        Ok(bound)
    }

    fn constant(&self, t: TensorId) -> Option<&Tensor> {
        self.network.tensor(t).constant().map(|c| c.as_ref())
    }

    fn run(
        &self,
        inputs: &[TensorView<'_>],
        mem: &mut WorkingMemory,
        mut profile: Option<&mut Vec<LayerTiming>>,
        direct: &mut [Option<&mut [u8]>],
    ) -> Result<()> {
        let started = Instant::now();
        for step in &self.steps {
            let layer = &self.network.layers()[step.layer];
            if layer.op == Op::MemImport || self.elided.get(step.layer).copied().unwrap_or(false) {
                // Its outputs are the same memory as its inputs: nothing to do.
                continue;
            }
            if let Some((deadline, limit)) = DEADLINE.with(|d| d.get()) {
                if Instant::now() > deadline {
                    return Err(RuntimeError::TimeLimit {
                        limit,
                        layer: layer.name.clone(),
                    });
                }
            }
            let fail = |source: BackendError| RuntimeError::Backend {
                backend: self.assignment[step.layer].clone(),
                layer: Some(layer.name.clone()),
                source: Box::new(source),
            };
            let began = Instant::now();
            let outcome = self.run_step(step, inputs, mem, direct).map_err(fail)?;
            if let Some(p) = profile.as_deref_mut() {
                p.push(LayerTiming {
                    layer: layer.name.clone(),
                    op: layer.op.name().to_string(),
                    backend: self.assignment[step.layer].clone(),
                    start: began.duration_since(started),
                    duration: began.elapsed(),
                });
            }
            match outcome {
                Ok(()) => {}
                Err(panic) => {
                    return Err(fail(BackendError::Other(format!(
                        "the workload panicked: {panic}"
                    ))))
                }
            }
        }
        Ok(())
    }

    /// Run one step; the outer error is the backend's, the inner one a caught panic.
    fn run_step(
        &self,
        step: &Step,
        inputs: &[TensorView<'_>],
        mem: &mut WorkingMemory,
        direct: &mut [Option<&mut [u8]>],
    ) -> std::result::Result<std::result::Result<(), String>, BackendError> {
        let layer = &self.network.layers()[step.layer];
        // Carve the arena into disjoint slices, one per union of overlapping regions this
        // step touches. Outputs never overlap anything alive (the planner guarantees it); two
        // inputs may (a whole and one of its sub-tensors), and are only read.
        let mut spans: Vec<(usize, usize)> = layer
            .inputs
            .iter()
            .chain(&layer.outputs)
            .filter_map(|t| match self.slots[t.0] {
                Slot::Arena { offset, len } if len > 0 => Some((offset, offset + len)),
                _ => None,
            })
            .collect();
        spans.sort_unstable();
        let mut unions: Vec<(usize, usize)> = Vec::new();
        for (start, end) in spans {
            match unions.last_mut() {
                Some(u) if start < u.1 => u.1 = u.1.max(end),
                _ => unions.push((start, end)),
            }
        }
        let arena = arena_mut(&mut mem.arena, mem.arena_start);
        let mut pieces: Vec<Option<&mut [u8]>> = Vec::with_capacity(unions.len());
        let mut rest: &mut [u8] = arena;
        let mut consumed = 0usize;
        for &(start, end) in &unions {
            let skip = start.saturating_sub(consumed);
            if rest.len() < skip + (end - start) {
                return Err(BackendError::Other(
                    "an arena region lies outside the arena".into(),
                ));
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(skip);
            let (piece, tail) = tail.split_at_mut(end - start);
            pieces.push(Some(piece));
            rest = tail;
            consumed = end;
        }
        let union_of = |offset: usize, len: usize| {
            unions
                .iter()
                .position(|u| u.0 <= offset && offset + len <= u.1)
        };

        // Outputs first: writable slices or handles taken out of the working memory.
        let mut out_arena: Vec<Option<&mut [u8]>> = Vec::with_capacity(layer.outputs.len());
        let mut out_handles: Vec<Option<(usize, Box<dyn TensorHandle>)>> =
            Vec::with_capacity(layer.outputs.len());
        for t in &layer.outputs {
            match self.slots[t.0] {
                Slot::Arena { len: 0, .. } => {
                    out_arena.push(Some(&mut []));
                    out_handles.push(None);
                }
                Slot::Arena { .. }
                    if self.direct_output[t.0]
                        .is_some_and(|k| direct.get(k).is_some_and(|d| d.is_some())) =>
                {
                    let k = self.direct_output[t.0].unwrap_or(0);
                    let buffer = direct.get_mut(k).and_then(|d| d.take());
                    out_arena.push(Some(buffer.ok_or_else(|| {
                        BackendError::Other("an output buffer is used twice".into())
                    })?));
                    out_handles.push(None);
                }
                Slot::Arena { offset, len } => {
                    // An output owns its whole union: nothing else it overlaps is alive.
                    let k = union_of(offset, len)
                        .filter(|&k| unions[k] == (offset, offset + len))
                        .ok_or_else(|| {
                            BackendError::Other(
                                "an output overlaps another tensor of its step".into(),
                            )
                        })?;
                    let piece = pieces[k].take().ok_or_else(|| {
                        BackendError::Other("an output region is used twice".into())
                    })?;
                    out_arena.push(Some(piece));
                    out_handles.push(None);
                }
                Slot::Handle(k) => {
                    let h = mem.handles[k].take().ok_or_else(|| {
                        BackendError::Other("an output handle is used twice".into())
                    })?;
                    out_arena.push(None);
                    out_handles.push(Some((k, h)));
                }
                _ => {
                    return Err(BackendError::Other(format!(
                        "output '{}' has no writable memory",
                        self.network.tensor(*t).name
                    )))
                }
            }
        }
        let shared: Vec<Option<&[u8]>> = pieces.into_iter().map(|p| p.map(|s| &*s)).collect();
        let all_host = layer
            .inputs
            .iter()
            .chain(&layer.outputs)
            .all(|t| !matches!(self.slots[t.0], Slot::Handle(_)));
        let outcome = if all_host {
            let mut in_views = Vec::with_capacity(layer.inputs.len());
            for t in &layer.inputs {
                in_views.push(self.host_view(*t, inputs, &shared, &unions)?);
            }
            let mut out_views: Vec<TensorViewMut<'_>> = Vec::with_capacity(layer.outputs.len());
            for (t, piece) in layer.outputs.iter().zip(out_arena.iter_mut()) {
                let data = piece
                    .take()
                    .ok_or_else(|| BackendError::Other("missing output region".into()))?;
                out_views.push(TensorViewMut {
                    info: &self.network.tensor(*t).info,
                    data,
                });
            }
            catch_unwind(AssertUnwindSafe(|| {
                step.workload.execute(&in_views, &mut out_views)
            }))
        } else {
            let mut in_handles: Vec<Box<dyn TensorHandle + '_>> =
                Vec::with_capacity(layer.inputs.len());
            for t in &layer.inputs {
                match self.slots[t.0] {
                    Slot::Handle(k) => {
                        let h = mem.handles[k].as_deref().ok_or_else(|| {
                            BackendError::Other("an input handle is missing".into())
                        })?;
                        in_handles.push(Box::new(Borrowed(h)));
                    }
                    _ => in_handles.push(Box::new(HostView(
                        self.host_view(*t, inputs, &shared, &unions)?,
                    ))),
                }
            }
            let mut outs: Vec<Box<dyn TensorHandle + '_>> = Vec::with_capacity(layer.outputs.len());
            for ((t, piece), handle) in layer
                .outputs
                .iter()
                .zip(out_arena.iter_mut())
                .zip(out_handles.iter_mut())
            {
                if let Some(data) = piece.take() {
                    outs.push(Box::new(HostViewMut(TensorViewMut {
                        info: &self.network.tensor(*t).info,
                        data,
                    })));
                } else if let Some((_, h)) = handle.as_mut() {
                    outs.push(Box::new(BorrowedMut(h.as_mut())));
                }
            }
            let in_refs: Vec<&dyn TensorHandle> = in_handles.iter().map(|b| b.as_ref()).collect();
            let mut out_refs: Vec<&mut dyn TensorHandle> = outs
                .iter_mut()
                .map(|b| b.as_mut() as &mut dyn TensorHandle)
                .collect();
            catch_unwind(AssertUnwindSafe(|| {
                step.workload.execute_handles(&in_refs, &mut out_refs)
            }))
        };
        for (k, h) in out_handles.into_iter().flatten() {
            mem.handles[k] = Some(h);
        }
        match outcome {
            Ok(Ok(())) => Ok(Ok(())),
            Ok(Err(e)) => Err(e),
            Err(panic) => Ok(Err(panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into()))),
        }
    }

    fn host_view<'a>(
        &'a self,
        t: TensorId,
        inputs: &[TensorView<'a>],
        shared: &[Option<&'a [u8]>],
        unions: &[(usize, usize)],
    ) -> std::result::Result<TensorView<'a>, BackendError> {
        let info = &self.network.tensor(t).info;
        let missing = || {
            BackendError::Other(format!(
                "input '{}' is not available",
                self.network.tensor(t).name
            ))
        };
        match self.slots[t.0] {
            Slot::Input(k) => inputs.get(k).copied().ok_or_else(missing),
            Slot::Constant(c) => self.constant(c).map(|x| x.view()).ok_or_else(missing),
            Slot::Arena { len: 0, .. } | Slot::Released => Ok(TensorView { info, data: &[] }),
            Slot::Arena { offset, len } => {
                let k = unions
                    .iter()
                    .position(|u| u.0 <= offset && offset + len <= u.1)
                    .ok_or_else(missing)?;
                let whole = shared.get(k).copied().flatten().ok_or_else(missing)?;
                let start = offset - unions[k].0;
                let data = whole.get(start..start + len).ok_or_else(missing)?;
                Ok(TensorView { info, data })
            }
            Slot::Handle(_) => Err(missing()),
        }
    }

    /// The bytes of output `t` after a run, wherever they are.
    fn output_bytes<'a>(
        &'a self,
        t: TensorId,
        inputs: &[TensorView<'a>],
        mem: &'a WorkingMemory,
    ) -> Result<&'a [u8]> {
        let not_computed = || {
            RuntimeError::Core(backplane_core::CoreError::InvalidNetwork(format!(
                "output '{}' was not computed",
                self.network.tensor(t).name
            )))
        };
        match self.slots[t.0] {
            Slot::Input(k) => inputs.get(k).map(|x| x.data).ok_or_else(not_computed),
            Slot::Constant(c) => self.constant(c).map(Tensor::bytes).ok_or_else(not_computed),
            Slot::Released => Err(not_computed()),
            Slot::Arena { offset, len } => mem
                .arena()
                .get(offset..offset + len)
                .ok_or_else(not_computed),
            Slot::Handle(k) => {
                let h = mem
                    .handles
                    .get(k)
                    .and_then(|h| h.as_deref())
                    .ok_or_else(not_computed)?;
                Ok(h.map().ok_or_else(not_computed)?.data)
            }
        }
    }

    fn collect_outputs(
        &self,
        inputs: &[TensorView<'_>],
        mem: &WorkingMemory,
    ) -> Result<NamedTensors> {
        let mut out = Vec::with_capacity(self.network.outputs().len());
        for &t in self.network.outputs() {
            let e = self.network.tensor(t);
            let tensor = Tensor::from_bytes(e.info.clone(), self.output_bytes(t, inputs, mem)?)?;
            out.push((e.name.clone(), tensor));
        }
        Ok(out)
    }
}

fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    bytemuck::cast_slice_mut(words)
}

fn bytemuck_bytes_ref(words: &[u64]) -> &[u8] {
    bytemuck::cast_slice(words)
}

/// A borrowed handle, so that handles owned by the working memory can be passed by reference.
struct Borrowed<'a>(&'a dyn TensorHandle);

impl TensorHandle for Borrowed<'_> {
    fn info(&self) -> &backplane_core::TensorInfo {
        self.0.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        self.0.map()
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        None
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.0.as_any()
    }
}

/// A writable borrowed handle.
struct BorrowedMut<'a>(&'a mut dyn TensorHandle);

impl TensorHandle for BorrowedMut<'_> {
    fn info(&self) -> &backplane_core::TensorInfo {
        self.0.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        self.0.map()
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        self.0.map_mut()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.0.as_any()
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        self.0.as_any_mut()
    }
}

impl backplane_backend_api::NestedNetwork for LoadedNetwork {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> std::result::Result<(), BackendError> {
        self.execute_views(inputs, outputs)
            .map_err(|e| BackendError::Execution(e.to_string()))
    }
}

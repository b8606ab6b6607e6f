//! The runtime: owns a backend registry and the backend contexts, loads and runs networks.

use crate::loaded::{LayerTiming, LoadParts, LoadedNetwork, Step};
use crate::optimizer::{self, OptimizedNetwork, OptimizerOptions};
use crate::{BackendRegistry, NamedTensors, Result, RuntimeError};
use backplane_backend_api::{
    Backend, BackendContext, BackendId, BackendOptions, CustomAllocator, LayerDesc, MemoryManager,
    NestedNetwork, NetworkId, Workload,
};
use backplane_core::{Network, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Options for creating a [`Runtime`].
#[derive(Clone, Default)]
pub struct RuntimeOptions {
    /// Options per backend, handed to its context.
    pub backend_options: BTreeMap<BackendId, BackendOptions>,
    /// An application allocator per backend; a backend that cannot use it makes
    /// [`Runtime::new`] fail with the backend's reason.
    pub custom_allocators: BTreeMap<BackendId, Arc<dyn CustomAllocator>>,
    /// Where to look for dynamic backends (default: the build-time paths).
    pub dynamic_backends: crate::dynamic::DynamicBackendsOption,
    /// The most iterations a Loop or Scan may run, those of the Loops and Scans nested in it
    /// included, before its execution fails (default:
    /// [`crate::builtin::DEFAULT_MAX_LOOP_ITERATIONS`]).
    pub max_loop_iterations: Option<u64>,
    /// How long one execution may run: checked before every layer (control-flow bodies
    /// included); past it, the execution stops with [`RuntimeError::TimeLimit`] and the
    /// runtime keeps working. `None` (the default): no limit.
    pub max_execution_time: Option<std::time::Duration>,
    /// The most bytes one execution's working memory may take: the planned host arena of the
    /// network and of its control-flow bodies, plus the tensors other memories hold. A network
    /// that needs more fails at load with [`RuntimeError::MemoryBudget`], naming its largest
    /// tensor and the layer computing it, instead of failing (or aborting) at its first
    /// execution. `None` (the default): the memory the machine has available when the runtime
    /// is created ([`available_memory`]), and no budget where that is unknown. Each concurrent
    /// execution takes a working memory of its own.
    pub max_memory: Option<usize>,
}

/// The memory available to new allocations on this machine, in bytes: `MemAvailable` from
/// `/proc/meminfo` (Linux); `None` where it cannot be read.
pub fn available_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("backend_options", &self.backend_options)
            .field(
                "custom_allocators",
                &self.custom_allocators.keys().collect::<Vec<_>>(),
            )
            .field("dynamic_backends", &self.dynamic_backends)
            .field("max_loop_iterations", &self.max_loop_iterations)
            .field("max_execution_time", &self.max_execution_time)
            .field("max_memory", &self.max_memory)
            .finish()
    }
}

/// Loads networks onto backends and runs them. Safe to share between threads.
pub struct Runtime {
    registry: BackendRegistry,
    contexts: Vec<(BackendId, Box<dyn BackendContext>)>,
    networks: RwLock<BTreeMap<NetworkId, Arc<LoadedNetwork>>>,
    next_id: AtomicU64,
    networks_built: std::sync::atomic::AtomicUsize,
    max_execution_time: Option<std::time::Duration>,
    /// The working-memory budget of one execution, if any.
    max_memory: Option<usize>,
    dynamic: crate::dynamic::DynamicBackendReport,
    /// What the plan caches serving models on this runtime hold and did.
    plan_caches: crate::plan_cache::PlanCacheCounters,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("registry", &self.registry)
            .finish()
    }
}

impl Runtime {
    /// A runtime over `registry`: creates every backend's context (kept for the runtime's
    /// life). A backend whose context cannot be created is an error naming it.
    pub fn new(registry: BackendRegistry, options: RuntimeOptions) -> Result<Self> {
        // The builtin backend is part of every runtime; its id is reserved.
        let mut registry = registry;
        let builtin = crate::BuiltinBackend {
            max_loop_iterations: options
                .max_loop_iterations
                .unwrap_or(crate::builtin::DEFAULT_MAX_LOOP_ITERATIONS),
        };
        registry.register(
            crate::BuiltinBackend::backend_id(),
            Arc::new(move || Box::new(builtin) as Box<dyn Backend>),
        )?;
        // Dynamic backends join the registry before anything else uses it; ids already taken
        // (static backends, the builtin one) are reported, not overridden.
        let dynamic = crate::dynamic::load_dynamic_backends(&mut registry, &options);
        // Every backend object of a backend with a custom allocator gets it, as it is created.
        for (id, allocator) in &options.custom_allocators {
            let factory = registry
                .factory(id)
                .ok_or_else(|| RuntimeError::UnknownBackend {
                    id: id.to_string(),
                    registered: registry
                        .ids()
                        .iter()
                        .map(|b| b.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            registry
                .create(id)?
                .use_custom_allocator(allocator.clone())
                .map_err(|reason| RuntimeError::CustomAllocatorRefused {
                    backend: id.clone(),
                    reason,
                })?;
            let allocator = allocator.clone();
            let wrapped: crate::BackendFactory = Arc::new(move || {
                let backend = factory();
                // Accepted above; a backend that changes its mind keeps its default memory.
                let _ = backend.use_custom_allocator(allocator.clone());
                backend
            });
            registry.replace(id, wrapped);
        }
        let mut contexts = Vec::new();
        for id in registry.ids() {
            let backend = registry.create(&id)?;
            let opts = options
                .backend_options
                .get(&id)
                .cloned()
                .unwrap_or_default();
            let ctx =
                backend
                    .create_backend_context(&opts)
                    .map_err(|source| RuntimeError::Backend {
                        backend: id.clone(),
                        layer: None,
                        source: Box::new(source),
                    })?;
            if let Some(ctx) = ctx {
                contexts.push((id, ctx));
            }
        }
        Ok(Runtime {
            registry,
            contexts,
            networks: RwLock::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            networks_built: std::sync::atomic::AtomicUsize::new(0),
            max_execution_time: options.max_execution_time,
            max_memory: options.max_memory.or_else(available_memory),
            dynamic,
            plan_caches: crate::plan_cache::PlanCacheCounters::default(),
        })
    }

    /// What dynamic-backend loading did: the backends loaded (id, version, file) and the files
    /// skipped, with the reason.
    pub fn dynamic_backends(&self) -> &crate::dynamic::DynamicBackendReport {
        &self.dynamic
    }

    /// The backends this runtime knows.
    pub fn registry(&self) -> &BackendRegistry {
        &self.registry
    }

    /// Create a backend object by id (e.g. to show its version and capabilities).
    pub fn backend(&self, id: &BackendId) -> Result<Box<dyn Backend>> {
        self.registry.create(id)
    }

    /// Assign layers to backends and let each backend optimize its part. A network whose
    /// working memory ([`OptimizedNetwork::working_bytes`]) exceeds the memory budget is
    /// refused with [`RuntimeError::MemoryBudget`].
    pub fn optimize(
        &self,
        network: &Network,
        options: &OptimizerOptions,
    ) -> Result<OptimizedNetwork> {
        let optimized = optimizer::optimize(&self.registry, network, options)?;
        // Refused here already, before a host loads it: the same check runs at load.
        if let Some(budget) = self.max_memory {
            optimized.check_memory_budget(budget)?;
        }
        Ok(optimized)
    }

    /// Optimize `network` by replaying one of `records`, the decisions of earlier
    /// optimizations of networks of the same structure ([`backplane_core::StructuralKey`])
    /// at other shapes, the preferred first: every layer's backend is chosen again (support
    /// answers not kept for every shape asked at these shapes), the first record with those
    /// backends is replayed, each backend re-making only the substitutions it made then
    /// (see [`crate::ReplayOutcome`]). `Refused` when no record's decisions hold at these
    /// shapes: the caller optimizes in full ([`Runtime::optimize`]). The memory budget is
    /// checked as by [`Runtime::optimize`].
    pub fn replay_optimization(
        &self,
        network: &Network,
        options: &OptimizerOptions,
        records: &[&crate::OptimizationRecord],
    ) -> Result<crate::ReplayOutcome> {
        let outcome = optimizer::replay(&self.registry, network, options, records)?;
        if let (crate::ReplayOutcome::Replayed(optimized), Some(budget)) =
            (&outcome, self.max_memory)
        {
            optimized.check_memory_budget(budget)?;
        }
        Ok(outcome)
    }

    /// The memory budget in force (`RuntimeOptions::max_memory`, or the memory available
    /// when the runtime was created; `None` when neither is known).
    pub fn max_memory(&self) -> Option<usize> {
        self.max_memory
    }

    /// The totals of every plan cache serving models on this runtime (the facade's
    /// `DynamicNetwork`s and the nested networks after their cuts): entries and bytes held
    /// now; hits, misses, evictions and optimizer runs since the runtime was created.
    pub fn plan_cache_stats(&self) -> crate::PlanCacheTotals {
        self.plan_caches.snapshot()
    }

    /// The counters plan caches on this runtime report into (see
    /// [`Runtime::plan_cache_stats`]); for code that keeps plans of its own.
    pub fn plan_cache_counters(&self) -> &crate::PlanCacheCounters {
        &self.plan_caches
    }

    fn context(&self, id: &BackendId) -> Option<&dyn BackendContext> {
        self.contexts
            .iter()
            .find(|(b, _)| b == id)
            .map(|(_, c)| c.as_ref())
    }

    /// Create the workloads of an optimized network and make it ready to execute.
    pub fn load_network(&self, optimized: OptimizedNetwork) -> Result<NetworkId> {
        let id = NetworkId(self.next_id.fetch_add(1, Ordering::Relaxed));
        // Every backend the network or its control-flow bodies use, in order of first use.
        let mut used: Vec<BackendId> = Vec::new();
        backends_of(&optimized, &mut used);
        let ctx_err = |backend: &BackendId, source: backplane_backend_api::BackendError| {
            RuntimeError::Backend {
                backend: backend.clone(),
                layer: None,
                source: Box::new(source),
            }
        };
        for b in &used {
            if let Some(ctx) = self.context(b) {
                ctx.before_load_network(id).map_err(|e| ctx_err(b, e))?;
            }
        }
        let mut memory_managers = Vec::new();
        let mut working_bytes = 0usize;
        let mut loaded = self.build(id, optimized, &mut memory_managers, &mut working_bytes)?;
        for (i, (b, mm)) in memory_managers.iter().enumerate() {
            if let Err(e) = mm.acquire() {
                for (_, m) in &memory_managers[..i] {
                    m.release();
                }
                return Err(ctx_err(b, e));
            }
        }
        loaded.memory_managers = memory_managers;
        loaded.max_execution_time = self.max_execution_time;
        loaded.backends_used = used.clone();
        self.networks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::new(loaded));
        for b in &used {
            if let Some(ctx) = self.context(b) {
                if let Err(e) = ctx.after_load_network(id) {
                    // A context that cannot finish the load gets the network unloaded again.
                    let _ = self.unload_network(id);
                    return Err(ctx_err(b, e));
                }
            }
        }
        tracing::info!(
            network = id.0,
            "loaded on [{}]",
            used.iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(id)
    }

    /// Check that `network`'s planned memory, added to `working_bytes` (the bodies' so far),
    /// fits the memory budget, before any workload is created.
    fn check_budget(&self, optimized: &OptimizedNetwork, working_bytes: &mut usize) -> Result<()> {
        *working_bytes = working_bytes.saturating_add(optimized.own_working_bytes());
        match self.max_memory {
            Some(budget) if *working_bytes > budget => {
                Err(optimized.over_budget(*working_bytes, budget))
            }
            _ => Ok(()),
        }
    }

    /// Create the workloads of `optimized` (loading its control-flow bodies first, as nested
    /// networks) and plan its memory; memory managers are collected, not yet acquired.
    /// `working_bytes` adds up the working memory of the network and its bodies, checked
    /// against the memory budget before each creates workloads.
    fn build(
        &self,
        id: NetworkId,
        optimized: OptimizedNetwork,
        memory_managers: &mut Vec<(BackendId, Arc<dyn MemoryManager>)>,
        working_bytes: &mut usize,
    ) -> Result<LoadedNetwork> {
        self.check_budget(&optimized, working_bytes)?;
        self.networks_built.fetch_add(1, Ordering::Relaxed);
        let OptimizedNetwork {
            mut network,
            assignment,
            factories: tensor_factories,
            handle_factories,
            layout,
            subgraphs,
            ..
        } = optimized;
        let mut used: Vec<BackendId> = Vec::new();
        for b in &assignment {
            if !used.contains(b) {
                used.push(b.clone());
            }
        }
        let mut nested: HashMap<usize, Vec<Arc<LoadedNetwork>>> = HashMap::new();
        for (layer, bodies) in subgraphs {
            let mut loaded = Vec::with_capacity(bodies.len());
            for body in bodies {
                loaded.push(Arc::new(self.build(
                    id,
                    body,
                    memory_managers,
                    working_bytes,
                )?));
            }
            nested.insert(layer, loaded);
        }
        let mut factories = HashMap::new();
        for b in &used {
            let backend = self.registry.create(b)?;
            let mm = backend.create_memory_manager();
            let factory =
                backend
                    .create_workload_factory(mm.clone())
                    .map_err(|e| RuntimeError::Backend {
                        backend: b.clone(),
                        layer: None,
                        source: Box::new(e),
                    })?;
            if let Some(mm) = mm {
                memory_managers.push((b.clone(), mm));
            }
            factories.insert(b.clone(), factory);
        }
        let mut steps = Vec::with_capacity(network.layers().len());
        let mut bodies_of = Vec::new();
        let mut constants = ConstantReaders::new(&network);
        for (i, b) in assignment.iter().enumerate() {
            let layer = &network.layers()[i];
            let factory = factories
                .get(b)
                .ok_or_else(|| RuntimeError::UnknownBackend {
                    id: b.to_string(),
                    registered: String::new(),
                })?;
            let desc = LayerDesc::from_layer(&network, layer);
            let created = match nested.remove(&i) {
                Some(bodies) => {
                    let handed: Vec<Arc<dyn NestedNetwork>> = bodies
                        .iter()
                        .map(|n| n.clone() as Arc<dyn NestedNetwork>)
                        .collect();
                    bodies_of.push((i, bodies));
                    factory.create_workload_with_subgraphs(&desc, handed)
                }
                None => factory.create_workload(&desc),
            };
            let workload = created.map_err(|source| RuntimeError::Backend {
                backend: b.clone(),
                layer: Some(layer.name.clone()),
                source: Box::new(source),
            })?;
            constants.created(&mut network, i, workload.as_ref());
            steps.push(Step { layer: i, workload });
        }
        if constants.released_bytes > 0 {
            tracing::debug!(
                network = id.0,
                bytes = constants.released_bytes,
                "released constants the workloads copied at load"
            );
        }
        let mut loaded = LoadedNetwork::new(LoadParts {
            id,
            network,
            assignment,
            steps,
            memory_managers: Vec::new(),
            backends_used: used,
            factories: tensor_factories,
            registry: handle_factories,
            layout,
        })?;
        loaded.subgraphs = bodies_of;
        Ok(loaded)
    }

    /// How many networks (main networks and control-flow bodies) this runtime has built
    /// workloads and memory plans for. Executions never add to it: plans are made at load.
    pub fn networks_built(&self) -> usize {
        self.networks_built.load(Ordering::Relaxed)
    }

    /// A loaded network.
    pub fn network(&self, id: NetworkId) -> Result<Arc<LoadedNetwork>> {
        self.networks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
            .ok_or(RuntimeError::UnknownNetwork(id))
    }

    /// Run a loaded network on named inputs; returns the outputs, named, in the network's
    /// output order. Inputs are checked against the network's descriptions first.
    pub fn execute(&self, id: NetworkId, inputs: &[(&str, &Tensor)]) -> Result<NamedTensors> {
        let net = self.network(id)?;
        let result = net.execute(inputs, None);
        self.end_execution(id, &net, result)
    }

    /// Tell the contexts of the backends `net` uses that an execution of it ended
    /// (`BackendContext::after_execute_network`), then answer `result`, or the first
    /// context's error when the execution itself succeeded.
    fn end_execution<T>(&self, id: NetworkId, net: &LoadedNetwork, result: Result<T>) -> Result<T> {
        let mut ended = Ok(());
        for b in net.backends_used() {
            if let Some(ctx) = self.context(b) {
                if let Err(source) = ctx.after_execute_network(id) {
                    if ended.is_ok() {
                        ended = Err(RuntimeError::Backend {
                            backend: b.clone(),
                            layer: None,
                            source: Box::new(source),
                        });
                    }
                }
            }
        }
        let value = result?;
        ended.map(|()| value)
    }

    /// Run a loaded network writing its outputs into the caller's tensors (one per network
    /// output, by name, with the exact type and shape). Outputs that no layer reads are
    /// written in place by the layer that computes them, others copied once; the result says
    /// which. On error the tensors' contents are unspecified.
    pub fn execute_into(
        &self,
        id: NetworkId,
        inputs: &[(&str, &Tensor)],
        outputs: &mut [(&str, &mut Tensor)],
    ) -> Result<Vec<crate::OutputWrite>> {
        let net = self.network(id)?;
        let result = net.execute_into(inputs, outputs);
        self.end_execution(id, &net, result)
    }

    /// Like [`Runtime::execute`], also returning how long each workload took, in execution
    /// order.
    pub fn execute_profiled(
        &self,
        id: NetworkId,
        inputs: &[(&str, &Tensor)],
    ) -> Result<(NamedTensors, Vec<LayerTiming>)> {
        let mut timings = Vec::new();
        let net = self.network(id)?;
        let result = net.execute(inputs, Some(&mut timings));
        let outputs = self.end_execution(id, &net, result)?;
        Ok((outputs, timings))
    }

    /// Unload a network: contexts of its backends are asked first (and may refuse), memory
    /// managers released after.
    pub fn unload_network(&self, id: NetworkId) -> Result<()> {
        let net = self.network(id)?;
        for b in net.backends_used() {
            if let Some(ctx) = self.context(b) {
                ctx.before_unload_network(id)
                    .map_err(|source| RuntimeError::Backend {
                        backend: b.clone(),
                        layer: None,
                        source: Box::new(source),
                    })?;
            }
        }
        self.networks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        tracing::info!(network = id.0, "unloaded");
        for (_, mm) in &net.memory_managers {
            mm.release();
        }
        for b in net.backends_used() {
            if let Some(ctx) = self.context(b) {
                ctx.after_unload_network(id);
            }
        }
        Ok(())
    }

    /// Ids of the loaded networks.
    pub fn loaded_networks(&self) -> Vec<NetworkId> {
        self.networks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect()
    }
}

/// Collect the backends `optimized` and its bodies use, in order of first use.
fn backends_of(optimized: &OptimizedNetwork, used: &mut Vec<BackendId>) {
    for (i, b) in optimized.assignment.iter().enumerate() {
        if !used.contains(b) {
            used.push(b.clone());
        }
        if let Some((_, bodies)) = optimized.subgraphs.iter().find(|(l, _)| *l == i) {
            for body in bodies {
                backends_of(body, used);
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for id in self.loaded_networks() {
            // Contexts may veto an unload; at drop the memory is released regardless.
            if self.unload_network(id).is_err() {
                if let Some(net) = self
                    .networks
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id)
                {
                    for (_, mm) in &net.memory_managers {
                        mm.release();
                    }
                }
            }
        }
    }
}

/// Which constants a loaded network still needs: a constant is released as soon as the last
/// layer reading it has its workload, if none of those workloads reads it at execution
/// ([`Workload::reads_constant_input`]: weights packed at load) and it is not an output, so
/// that packed weights never sit beside their originals, even while loading.
struct ConstantReaders {
    /// Per tensor: layers (input slots) that read it whose workloads are not created yet.
    pending: Vec<usize>,
    /// Per tensor: some workload reads it at execution, or it is a network output.
    kept: Vec<bool>,
    /// Bytes of the constants released so far.
    released_bytes: usize,
}

impl ConstantReaders {
    fn new(network: &Network) -> Self {
        let pending = network.consumers().iter().map(Vec::len).collect();
        let mut kept = vec![false; network.tensors().len()];
        for t in network.outputs() {
            kept[t.0] = true;
        }
        ConstantReaders {
            pending,
            kept,
            released_bytes: 0,
        }
    }

    /// Layer `layer`'s workload was created: count its constant inputs as read, and release
    /// those no later layer or workload needs.
    fn created(&mut self, network: &mut Network, layer: usize, workload: &dyn Workload) {
        let inputs = network.layers()[layer].inputs.clone();
        for (slot, t) in inputs.into_iter().enumerate() {
            if network.tensor(t).constant().is_none() {
                continue;
            }
            if workload.reads_constant_input(slot) {
                self.kept[t.0] = true;
            }
            self.pending[t.0] = self.pending[t.0].saturating_sub(1);
            if self.pending[t.0] == 0 && !self.kept[t.0] {
                if let Some(value) = network.release_constant(t) {
                    self.released_bytes += value.bytes().len();
                }
            }
        }
    }
}

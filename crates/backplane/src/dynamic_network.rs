//! One model served for every input shape: plans per concrete shape, built on demand and
//! kept in a bounded cache.
//!
//! A backplane `Network` has static shapes. [`DynamicNetwork`] keeps the *unspecialized*
//! model and, for each new set of concrete input shapes (and, for the inputs the model needs
//! at import, their values), builds a concrete plan: import specialized to those shapes,
//! optimize, load. Plans are kept in a least-recently-used cache keyed by the bound shapes
//! and values ([`DynamicNetwork::with_capacity`]); an evicted plan is unloaded. Every import
//! shares the model's initializers ([`onnx::SharedInitializers`]), so the plans hold one copy
//! of the weights, and backends that derive data from a weight (CpuAcc's packed operands)
//! can share it across plans by its identity. A model whose shapes are all fixed has one plan
//! and pays only the key lookup per execution.
//!
//! An input the import needs the value of is bound (and part of the key) when it is a small
//! integer tensor ([`crate::staged::binds_at_import`]); when a node needs the values of data
//! (NonZero, NonMaxSuppression, TopK with a computed k, ...), the plan is split at that node
//! instead ([`crate::staged`]): the part before it is a static network, the node runs on its
//! values, and the rest is a nested `DynamicNetwork` keyed by the shapes produced.

use crate::cache_budget::{CacheBudget, Owner};
use crate::node_cache::{self, NodeCache, NodeCacheStats, SharedNodeStats};
use crate::onnx::{self, proto::ModelProto, SharedInitializers};
use crate::runtime_ref::RuntimeRef;
use crate::staged::{self, Split};
use crate::{Error, ImportOptions, OptimizedNetwork, OptimizerOptions, Tensor};
use backplane_backend_api::NetworkId;
use backplane_core::symbolic::{Bindings, DimExpr, SymbolicSignature};
use backplane_core::StructuralKey;
use backplane_runtime::{CacheKind, NamedTensors, OptimizationRecord, ReplayOutcome};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod cache;
mod stats;
use cache::{Cache, PlanKey, Records};
pub(crate) use stats::ByteSize;
pub use stats::{CutSummary, PlanCacheStats, PlanTimings};

/// The default number of plans a [`DynamicNetwork`] keeps.
pub const DEFAULT_PLAN_CAPACITY: usize = 8;

/// One concrete plan: the model imported for one set of input shapes (and bound values),
/// optimized and loaded; for a model with data-dependent shapes, the part before the first
/// node that needs run-time values, and the [`Split`] that runs that node and the rest.
#[derive(Debug)]
pub struct Plan<'r> {
    /// The loaded network (`None` for a split plan whose first part computes nothing).
    pub id: Option<NetworkId>,
    /// The optimizer's result (assignment, report), with `id`.
    pub optimized: Option<OptimizedNetwork>,
    /// Where the plan stops for run-time values, if it does.
    pub split: Option<Split<'r>>,
    /// Graph inputs bound at import (their values are part of the plan's key).
    pub bound: Vec<String>,
    /// The working memory one execution of the loaded network needs (bytes, by its memory
    /// plan: [`OptimizedNetwork::working_bytes`]); what the plan counts against the budget.
    pub bytes: usize,
    /// The concrete input shapes the plan was built for, in the order given.
    pub shapes: Vec<(String, Vec<usize>)>,
    /// The values of the model's symbolic input dimensions for this plan (`seq=7`).
    pub symbols: Bindings,
    /// How long building the plan took, phase by phase (the cost of its miss).
    pub timings: PlanTimings,
    /// The structure of the imported network apart from its shapes (`None` when the plan
    /// loads none): plans of equal keys are what one optimization could serve.
    pub structure: Option<StructuralKey>,
    /// Whether the plan was optimized by replaying the recorded optimization of an earlier
    /// plan of the same structure (re-shaped: its support answers checked at these shapes,
    /// its substitutions made again; see [`backplane_runtime::Runtime::replay_optimization`])
    /// rather than by a full optimizer run.
    pub reshaped: bool,
    /// The loaded network's inputs (a given input it does not read is not fed).
    feeds: Vec<String>,
    /// Where `id` is loaded: the network is unloaded when the plan is dropped (once its cache
    /// let it go and no execution holds it).
    runtime: RuntimeRef<'r>,
}

impl Drop for Plan<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            if let Err(e) = self.runtime.unload_network(id) {
                tracing::warn!(network = id.0, "plan not unloaded: {e}");
            }
        }
    }
}

/// The model a [`DynamicNetwork`] imports its plans from. Before the first import, every
/// initializer is decoded into the network's [`SharedInitializers`] and its data taken out of
/// the kept model (name, type and dimensions stay), so that no import copies the weights and
/// they live once, decoded, in the shared set.
/// The nodes are kept apart from the graph ([`staged::Nodes`]): a rest of the model after a
/// split shares its parent's list.
#[derive(Debug)]
struct KeptModel {
    /// The model, its graph without nodes.
    model: Arc<ModelProto>,
    /// The graph's nodes.
    nodes: staged::Nodes,
    /// The bytes of initializer data the kept model still holds.
    weight_bytes: usize,
}

impl KeptModel {
    fn new(mut model: ModelProto) -> Self {
        let weight_bytes = model
            .graph
            .as_ref()
            .map_or(0, |g| g.initializer.iter().map(data_bytes).sum());
        let nodes = model
            .graph
            .as_mut()
            .map(|g| std::mem::take(&mut g.node))
            .unwrap_or_default();
        KeptModel {
            model: Arc::new(model),
            nodes: staged::Nodes::new(nodes),
            weight_bytes,
        }
    }
}

/// The `inputs` a plan's network takes (`feeds`, by name), in the order given. A split
/// model's rests take hundreds of inputs: when `feeds` follow the order of `inputs` (as a
/// plan's own do), one pass finds them; otherwise they are looked up by name.
fn fed_inputs<'a>(
    inputs: &[(&'a str, &'a Tensor)],
    feeds: &[String],
) -> Vec<(&'a str, &'a Tensor)> {
    let mut fed = Vec::with_capacity(feeds.len());
    let mut next = feeds.iter().peekable();
    for &(name, t) in inputs {
        if next.peek().is_some_and(|f| f.as_str() == name) {
            fed.push((name, t));
            next.next();
        }
    }
    if next.peek().is_none() {
        return fed;
    }
    let wanted: std::collections::HashSet<&str> = feeds.iter().map(String::as_str).collect();
    inputs
        .iter()
        .filter(|(n, _)| wanted.contains(n))
        .copied()
        .collect()
}

/// The bytes of data an initializer holds (in any of its fields).
fn data_bytes(t: &onnx::proto::TensorProto) -> usize {
    t.raw_data.as_ref().map_or(0, Vec::len)
        + 4 * (t.float_data.len() + t.int32_data.len())
        + 8 * (t.int64_data.len() + t.double_data.len() + t.uint64_data.len())
        + t.string_data.iter().map(Vec::len).sum::<usize>()
}

/// An ONNX model served for any input shape that fits its declaration, on one runtime.
/// See the [module documentation](self).
pub struct DynamicNetwork<'r> {
    runtime: RuntimeRef<'r>,
    /// The model every plan is imported from: whole until the first plan is built, then
    /// without the data of the initializers the shared set holds ([`KeptModel`]).
    model: Mutex<KeptModel>,
    base_dir: Option<PathBuf>,
    import: ImportOptions,
    optimizer: OptimizerOptions,
    cache: Arc<Mutex<Cache<'r>>>,
    /// The networks serving the rest of the model after each split node (keyed by the node
    /// and the types and ranks of the rest's inputs), shared by every plan splitting there.
    rests: Mutex<Vec<(String, Arc<DynamicNetwork<'r>>)>>,
    /// The counts of the split nodes' caches (every split of every plan).
    node_stats: SharedNodeStats,
    /// How many specialisations each split node keeps.
    node_capacity: usize,
    /// Whether a plan of an earlier plan's structure replays its optimization
    /// ([`DynamicNetwork::with_replay`]).
    replay: bool,
    /// The model's inputs and outputs with symbolic dimensions.
    signature: SymbolicSignature,
    /// The inputs whose shapes the bound symbols determine (every dimension a number or a
    /// plain symbol): plans are keyed by the symbols alone for them.
    described: Vec<String>,
    /// The memory budget shared by every cache of this network and its nested ones (plans and
    /// split nodes): least recently used entries of any of them are evicted first.
    budget: CacheBudget<'r>,
}

impl std::fmt::Debug for DynamicNetwork<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicNetwork")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<'r> DynamicNetwork<'r> {
    /// Serve the model file at `path` on `runtime` (borrowed, `&Runtime`, or shared,
    /// `Arc<Runtime>`: see [`RuntimeRef`]). `import` applies to every plan (its
    /// symbolic dimension values and input shapes are overridden by the given inputs';
    /// CpuRef folds constants when it names no evaluator); `optimizer` chooses the backends.
    pub fn from_file(
        runtime: impl Into<RuntimeRef<'r>>,
        path: &Path,
        import: &ImportOptions,
        optimizer: OptimizerOptions,
    ) -> Result<Self, Error> {
        let model = onnx::decode_model_file(path)?;
        Ok(Self::from_model(
            runtime,
            model,
            Some(onnx::model_base_dir(path)),
            import,
            optimizer,
        ))
    }

    /// Serve an already decoded model; `base_dir` is where its external data lies.
    pub fn from_model(
        runtime: impl Into<RuntimeRef<'r>>,
        model: ModelProto,
        base_dir: Option<PathBuf>,
        import: &ImportOptions,
        optimizer: OptimizerOptions,
    ) -> Self {
        let mut optimizer = optimizer;
        // One set of support answers for every plan (and nested network): answers a backend
        // says hold at every shape are asked once.
        if optimizer.support_answers.is_none() {
            optimizer.support_answers =
                Some(Arc::new(backplane_runtime::SupportAnswers::default()));
        }
        let mut import = import.clone();
        if import.evaluator.is_none() {
            import.evaluator = Some(Arc::new(backplane_cpu_ref::CpuRefEvaluator));
        }
        import.shared_initializers = Some(Arc::new(SharedInitializers::new()));
        let signature = onnx::symbolic_signature(&model);
        let described = signature
            .inputs
            .iter()
            .filter(|(_, shape)| {
                shape.as_ref().is_some_and(|s| {
                    s.iter()
                        .all(|d| matches!(d, DimExpr::Const(_) | DimExpr::Sym(_)))
                })
            })
            .map(|(n, _)| n.clone())
            .collect();
        let runtime: RuntimeRef<'r> = runtime.into();
        runtime.plan_cache_counters().network_created();
        let budget = CacheBudget::default();
        let cache = Arc::new_cyclic(|me: &std::sync::Weak<Mutex<Cache<'r>>>| {
            let me: Owner<'r> = me.clone();
            Mutex::new(Cache {
                stats: PlanCacheStats {
                    capacity: DEFAULT_PLAN_CAPACITY,
                    networks: 1,
                    ..PlanCacheStats::default()
                },
                plans: Vec::new(),
                records: Records::default(),
                valued: Vec::new(),
                runtime: runtime.clone(),
                budget: budget.clone(),
                me,
            })
        });
        DynamicNetwork {
            runtime,
            model: Mutex::new(KeptModel::new(model)),
            base_dir,
            import,
            optimizer,
            cache,
            rests: Mutex::new(Vec::new()),
            node_stats: SharedNodeStats::default(),
            node_capacity: DEFAULT_PLAN_CAPACITY,
            replay: true,
            signature,
            described,
            budget,
        }
    }

    /// How many recorded optimizations the plan cache keeps for replay: at most eight, and
    /// only those of structures some cached plan has (a structure's records are dropped with
    /// its last plan).
    pub fn kept_records(&self) -> usize {
        self.lock().records.len()
    }

    /// Keep at most `capacity` plans (at least 1; default [`DEFAULT_PLAN_CAPACITY`]).
    pub fn with_capacity(self, capacity: usize) -> Self {
        self.lock().stats.capacity = capacity.max(1);
        self
    }

    /// Keep at most `capacity` specialisations of each node a plan is cut at (default
    /// [`DEFAULT_PLAN_CAPACITY`]; 0 imports the node at every run, as a baseline to measure
    /// the cache against). See [`crate::node_cache`].
    pub fn with_node_cache(mut self, capacity: usize) -> Self {
        self.node_capacity = capacity;
        self
    }

    /// Whether a plan whose import has the structure of an earlier plan's replays that plan's
    /// optimization (default `true`; see [`Plan::reshaped`]); `false` optimizes every plan in
    /// full, as a baseline to measure the replay against (its records are still kept and
    /// compared: [`PlanCacheStats::same_decisions`]).
    pub fn with_replay(mut self, replay: bool) -> Self {
        self.replay = replay;
        self
    }

    /// The model's inputs and outputs with their symbolic dimensions (`[batch, seq]`), as
    /// symbolic shape inference finds them; executions are checked against the inputs'.
    pub fn signature(&self) -> &SymbolicSignature {
        &self.signature
    }

    /// The network serving the rest of this model after a split (`key` names the split),
    /// made from `model` the first time: same runtime, options (shared initializers
    /// included) and capacity.
    pub(crate) fn rest_network(
        &self,
        key: String,
        model: impl FnOnce() -> (ModelProto, staged::Nodes),
    ) -> Arc<DynamicNetwork<'r>> {
        let mut rests = self.rests.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, rest)) = rests.iter().find(|(k, _)| *k == key) {
            return rest.clone();
        }
        let (model, nodes) = model();
        let rest = Arc::new(self.nested(model, nodes));
        rests.push((key, rest.clone()));
        rest
    }

    /// A network serving `model` (a graph without nodes) whose nodes are `nodes`. Its
    /// signature describes the inputs only (a rest's outputs are never shown).
    fn nested(&self, model: ModelProto, nodes: staged::Nodes) -> DynamicNetwork<'r> {
        let capacity = self.lock().stats.capacity;
        let mut net = DynamicNetwork::from_model(
            self.runtime.clone(),
            model,
            self.base_dir.clone(),
            &self.import,
            self.optimizer.clone(),
        );
        net.model.get_mut().unwrap_or_else(|e| e.into_inner()).nodes = nodes;
        net.import = self.import.clone();
        // The rest's inputs are other tensors: shapes given for the model's inputs do not apply.
        net.import.input_shapes.clear();
        net.import.input_values.clear();
        net.node_capacity = self.node_capacity;
        net.replay = self.replay;
        net.share_budget(&self.budget);
        net.with_capacity(capacity)
    }

    /// Count this (new, empty) network's caches in `budget` (its parent's).
    fn share_budget(&mut self, budget: &CacheBudget<'r>) {
        self.budget = budget.clone();
        self.lock().budget = budget.clone();
    }

    /// The backend-support answers its plans share (see
    /// [`backplane_runtime::SupportAnswers`]): how many were asked and replayed.
    pub fn support_answers(&self) -> Option<&backplane_runtime::SupportAnswers> {
        self.optimizer.support_answers.as_deref()
    }

    /// The bytes every cache of this network and of its nested ones (plans and cut nodes'
    /// entries) holds now, together: what the memory budget bounds.
    pub fn held_bytes(&self) -> usize {
        self.budget.held()
    }

    /// The import options every plan uses.
    pub(crate) fn import_options(&self) -> &ImportOptions {
        &self.import
    }

    /// The runtime the plans are loaded on.
    pub fn runtime(&self) -> &RuntimeRef<'r> {
        &self.runtime
    }

    /// The counts of the caches of the nodes this network's plans split at (each keeps its
    /// one-node imports, see [`crate::node_cache`]); the nested networks' are not included.
    pub fn node_stats(&self) -> NodeCacheStats {
        *node_cache::lock(&self.node_stats)
    }

    /// [`DynamicNetwork::node_stats`] summed with those of the nested networks serving the
    /// rest after each split.
    pub fn total_node_stats(&self) -> NodeCacheStats {
        self.nested_networks()
            .iter()
            .fold(self.node_stats(), |total, rest| {
                total.plus(rest.total_node_stats())
            })
    }

    /// The nodes the cached plans were cut at, each once, in the order runs meet them
    /// (a cut of the rest after a cut follows it); empty for a model with no data-dependent
    /// shapes or before its first run.
    pub fn cuts(&self) -> Vec<CutSummary> {
        let plans: Vec<Arc<Plan<'r>>> = self.lock().plans.iter().map(|p| p.1.clone()).collect();
        let mut out: Vec<CutSummary> = Vec::new();
        for plan in plans {
            let Some(split) = &plan.split else { continue };
            if out.iter().any(|c| c.label == split.label) {
                continue;
            }
            let rest = split.rest();
            out.push(CutSummary {
                label: split.label.clone(),
                op_type: split.op_type.clone(),
                rest: rest.as_ref().map(|r| r.stats()),
            });
            for cut in rest.map(|r| r.cuts()).unwrap_or_default() {
                if !out.iter().any(|c| c.label == cut.label) {
                    out.push(cut);
                }
            }
        }
        out
    }

    /// The nested networks serving the rest after each split.
    pub(crate) fn nested_networks(&self) -> Vec<Arc<DynamicNetwork<'r>>> {
        self.rests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Where the model's external data lies.
    pub(crate) fn base_dir(&self) -> Option<&Path> {
        self.base_dir.as_deref()
    }

    /// The cache's counts summed with those of the nested networks serving the rest after
    /// each split (each has a cache of its own).
    pub fn total_stats(&self) -> PlanCacheStats {
        let mut total = self.stats();
        for rest in self.nested_networks() {
            {
                let s = rest.total_stats();
                total.size += s.size;
                total.capacity += s.capacity;
                total.bytes += s.bytes;
                total.networks += s.networks;
                total.hits += s.hits;
                total.misses += s.misses;
                total.evictions += s.evictions;
                total.optimizer_runs += s.optimizer_runs;
                total.plans_reshaped += s.plans_reshaped;
                total.same_structure += s.same_structure;
                total.same_decisions += s.same_decisions;
            }
        }
        total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache<'r>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache's counts.
    pub fn stats(&self) -> PlanCacheStats {
        let cache = self.lock();
        PlanCacheStats {
            size: cache.plans.len(),
            ..cache.stats
        }
    }

    /// The plan for these inputs (all of the model's tensor inputs, by name), and whether it
    /// was cached. A miss imports, optimizes and loads the model for the inputs' shapes.
    ///
    /// The inputs are first checked against the model's symbolic signature
    /// ([`DynamicNetwork::signature`]): a dimension that differs from a declared number, or a
    /// symbol given two values, is refused naming it, before anything is planned.
    pub fn plan(&self, inputs: &[(&str, &Tensor)]) -> Result<(Arc<Plan<'r>>, bool), Error> {
        // A plan built for these very shapes (and bound values) binds them as before: found
        // without binding the signature again (a split model runs a nested network per cut).
        let mut cache = self.lock();
        let mut symbols = None;
        let found = match cache
            .plans
            .iter()
            .rposition(|(key, plan, _)| key.fits(inputs, &plan.shapes))
        {
            Some(at) => Some(at),
            None => {
                let bound = self.bind(inputs)?;
                let key = PlanKey::of(inputs, &bound, &self.described, &cache.valued);
                symbols = Some(bound);
                cache.plans.iter().position(|p| p.0 == key)
            }
        };
        if let Some(at) = found {
            let entry = cache.plans.remove(at);
            let plan = entry.1.clone();
            cache.budget.touch(entry.2);
            cache.plans.push(entry);
            cache.stats.hits += 1;
            self.runtime.plan_cache_counters().hit(CacheKind::Plans);
            tracing::debug!(symbols = %plan.symbols, shapes = ?plan.shapes, "plan cache hit");
            return Ok((plan, true));
        }
        // Built under the lock: concurrent misses for one shape build it once.
        let symbols = match symbols {
            Some(symbols) => symbols,
            None => self.bind(inputs)?,
        };
        let plan = self.build(inputs, symbols.clone(), &cache.records)?;
        cache.stats.misses += 1;
        if let Some(optimized) = &plan.optimized {
            if plan.reshaped {
                cache.stats.plans_reshaped += 1;
                self.runtime.plan_cache_counters().plan_reshaped();
            } else {
                cache.stats.optimizer_runs += 1;
                self.runtime.plan_cache_counters().optimizer_ran();
                if let Some(key) = plan.structure {
                    let cache = &mut *cache;
                    cache
                        .records
                        .optimized(key, optimized.record(), &mut cache.stats);
                }
            }
        }
        for name in &plan.bound {
            if !cache.valued.contains(name) {
                cache.valued.push(name.clone());
            }
        }
        let key = PlanKey::of(inputs, &symbols, &self.described, &cache.valued);
        // Evicted plans are dropped (their networks unloaded) once the lock is let go.
        let mut evicted: Vec<Arc<Plan<'r>>> = Vec::new();
        while !cache.plans.is_empty() && cache.plans.len() >= cache.stats.capacity {
            evicted.push(cache.remove_at(0, true));
        }
        let me = cache.me.clone();
        let budget = cache.budget.clone();
        let id = budget.admit(
            &me,
            plan.bytes,
            self.runtime.max_memory(),
            &|| format!("the plan for {}", plan.symbols),
            &mut |victim| match cache.plans.iter().position(|p| p.2 == victim) {
                Some(at) => {
                    evicted.push(cache.remove_at(at, true));
                    true
                }
                None => false,
            },
        );
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                // The plans evicted for it are gone: so are their structures' records.
                cache.forget_unplanned_records();
                return Err(e);
            }
        };
        let plan = Arc::new(plan);
        cache.stats.bytes += plan.bytes;
        self.runtime
            .plan_cache_counters()
            .inserted(CacheKind::Plans, plan.bytes);
        cache.plans.push((key, plan.clone(), id));
        cache.forget_unplanned_records();
        tracing::info!(
            symbols = %plan.symbols,
            shapes = ?plan.shapes,
            "plan cache miss: built a plan ({})",
            PlanCacheStats {
                size: cache.plans.len(),
                ..cache.stats
            }
        );
        drop(cache);
        drop(evicted);
        Ok((plan, false))
    }

    /// Import, optimize and load the model for these inputs; split it at the first node
    /// that needs the values of data. An import with the structure of an earlier plan's
    /// replays that plan's optimization (`records`) when its decisions hold.
    fn build(
        &self,
        inputs: &[(&str, &Tensor)],
        symbols: Bindings,
        records: &Records,
    ) -> Result<Plan<'r>, Error> {
        let mut options = self.import.clone();
        // A plan that splits imports only the part before the split: finding the first node
        // that needs values is enough (the rest is imported when it is planned).
        options.stop_at_value_need = true;
        let shapes: Vec<(String, Vec<usize>)> = inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.shape().dims().to_vec()))
            .collect();
        for (name, dims) in &shapes {
            options.input_shapes.insert(name.clone(), dims.clone());
        }
        // Only small integer inputs are bound: a shape, a count. Data is never a constant.
        let values: Vec<(String, Tensor)> = inputs
            .iter()
            .filter(|(_, t)| staged::binds_at_import(t))
            .map(|(n, t)| (n.to_string(), (*t).clone()))
            .collect();
        let started = std::time::Instant::now();
        self.share_weights()?;
        let (model, nodes) = self.kept_model();
        options.node_names = nodes.names_at();
        // The kept graph is borrowed, not copied (its weights are in the shared set).
        match onnx::import_model_specialized_with_nodes(
            &model,
            nodes.get(),
            self.base_dir.as_deref(),
            &options,
            &values,
        ) {
            Ok((network, bound)) => {
                let structure = StructuralKey::of(&network);
                let mut timings = PlanTimings {
                    import: started.elapsed(),
                    ..PlanTimings::default()
                };
                let kept = self.replayable(records, &structure);
                let (id, optimized, reshaped) = self.load_with(&network, &kept, &mut timings)?;
                tracing::info!(symbols = %symbols, reshaped, "built a plan: {timings}");
                Ok(Plan {
                    timings,
                    id: Some(id),
                    bytes: optimized.working_bytes(),
                    optimized: Some(optimized),
                    structure: Some(structure),
                    reshaped,
                    split: None,
                    bound,
                    shapes,
                    symbols,
                    feeds: Self::feeds(&network),
                    runtime: self.runtime.clone(),
                })
            }
            Err(onnx::OnnxError::NeedsInputValues {
                nodes: reported, ..
            }) => {
                let needing: Vec<(String, String)> = reported
                    .iter()
                    .map(|n| (n.node.clone(), n.op_type.clone()))
                    .collect();
                let given: Vec<String> = shapes.iter().map(|(n, _)| n.clone()).collect();
                let node_cache = NodeCache::new(
                    self.runtime.clone(),
                    self.node_capacity,
                    self.node_stats.clone(),
                    self.budget.clone(),
                );
                let cut = staged::cut(&model, &nodes, &needing, &given, node_cache)?;
                tracing::info!(
                    node = %cut.split.label,
                    op = %cut.split.op_type,
                    "the plan stops at a node whose shapes need run-time values: the part \
                     before it is planned, the node runs, the rest is planned for the shapes \
                     it produces"
                );
                let mut timings = PlanTimings::default();
                let (id, optimized, bound, feeds, structure, reshaped) = match cut.prefix {
                    Some(prefix) => {
                        let (network, bound) = onnx::import_model_specialized(
                            prefix,
                            self.base_dir.as_deref(),
                            &options,
                            &values,
                        )?;
                        let structure = StructuralKey::of(&network);
                        timings.import = started.elapsed();
                        let kept = self.replayable(records, &structure);
                        let (id, optimized, reshaped) =
                            self.load_with(&network, &kept, &mut timings)?;
                        let feeds = Self::feeds(&network);
                        let structure = Some(structure);
                        (Some(id), Some(optimized), bound, feeds, structure, reshaped)
                    }
                    None => (None, None, Vec::new(), Vec::new(), None, false),
                };
                if timings.import.is_zero() {
                    timings.import = started.elapsed();
                }
                Ok(Plan {
                    timings,
                    id,
                    bytes: optimized
                        .as_ref()
                        .map_or(0, OptimizedNetwork::working_bytes),
                    optimized,
                    structure,
                    reshaped,
                    split: Some(cut.split),
                    bound,
                    shapes,
                    symbols,
                    feeds,
                    runtime: self.runtime.clone(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The records a plan of this structure may replay (none without replay).
    fn replayable<'a>(
        &self,
        records: &'a Records,
        structure: &StructuralKey,
    ) -> Vec<&'a OptimizationRecord> {
        if self.replay {
            records.of(structure)
        } else {
            Vec::new()
        }
    }

    /// The model plans are imported from and its nodes (see [`KeptModel`]).
    pub(crate) fn kept_model(&self) -> (Arc<ModelProto>, staged::Nodes) {
        let kept = self.model.lock().unwrap_or_else(|e| e.into_inner());
        (kept.model.clone(), kept.nodes.clone())
    }

    /// Move the kept model's weights into the shared initializers, once, before its first
    /// import: decoded there, taken out of the model without a copy, so that no import (the
    /// first included) clones them.
    fn share_weights(&self) -> Result<(), Error> {
        let Some(shared) = self.import.shared_initializers.as_ref() else {
            return Ok(());
        };
        let mut kept = self.model.lock().unwrap_or_else(|e| e.into_inner());
        if kept.weight_bytes == 0 {
            return Ok(());
        }
        let placeholder = Arc::new(ModelProto::default());
        let full = std::mem::replace(&mut kept.model, placeholder);
        // Only this network holds it (plans are built under the cache's lock); a copy otherwise.
        let mut model = Arc::try_unwrap(full).unwrap_or_else(|a| (*a).clone());
        let shared_now = shared.take_from(&mut model, self.base_dir.as_deref(), &self.import);
        let left = model
            .graph
            .as_ref()
            .map_or(0, |g| g.initializer.iter().map(data_bytes).sum());
        tracing::debug!(
            shared = kept.weight_bytes.saturating_sub(left),
            left,
            "the model's weights are decoded once and shared: no import copies them"
        );
        kept.model = Arc::new(model);
        kept.weight_bytes = left;
        Ok(shared_now?)
    }

    /// The bytes of initializer data the model kept for imports still holds: the whole of the
    /// model's weights until the first plan is built (they are then decoded once, shared by
    /// every plan, and taken out of the kept model), 0 after it when every initializer
    /// decodes.
    pub fn kept_weight_bytes(&self) -> usize {
        self.model
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .weight_bytes
    }

    /// The values of the symbols of these inputs' shapes, checked against the signature.
    fn bind(&self, inputs: &[(&str, &Tensor)]) -> Result<Bindings, Error> {
        let dims: Vec<(&str, &[usize])> =
            inputs.iter().map(|(n, t)| (*n, t.shape().dims())).collect();
        self.signature.bind(&dims).map_err(|e| {
            Error::Invalid(format!(
                "the inputs do not fit the model's symbolic signature: {e}"
            ))
        })
    }

    /// The names of a network's inputs.
    fn feeds(network: &crate::Network) -> Vec<String> {
        network
            .inputs()
            .iter()
            .map(|&t| network.tensor(t).name.clone())
            .collect()
    }

    /// Optimize and load an imported network, adding the time of each to `timings`.
    pub(crate) fn load(
        &self,
        network: &crate::Network,
        timings: &mut PlanTimings,
    ) -> Result<(NetworkId, OptimizedNetwork), Error> {
        let (id, optimized, _) = self.load_with(network, &[], timings)?;
        Ok((id, optimized))
    }

    /// [`DynamicNetwork::load`], replaying one of `records` (earlier plans' optimizations of
    /// networks of the same structure, the preferred first) when its decisions hold at these
    /// shapes, in full otherwise; also says whether a record was replayed (the plan
    /// re-shaped).
    fn load_with(
        &self,
        network: &crate::Network,
        records: &[&OptimizationRecord],
        timings: &mut PlanTimings,
    ) -> Result<(NetworkId, OptimizedNetwork, bool), Error> {
        let started = std::time::Instant::now();
        let replayed = match records {
            [] => None,
            records => {
                match self
                    .runtime
                    .replay_optimization(network, &self.optimizer, records)?
                {
                    ReplayOutcome::Replayed(optimized) => Some(*optimized),
                    ReplayOutcome::Refused(why) => {
                        tracing::info!(
                            "the earlier plan's optimization of this structure is not replayed \
                             ({why}): optimizing in full"
                        );
                        None
                    }
                }
            }
        };
        let reshaped = replayed.is_some();
        let optimized = match replayed {
            Some(optimized) => optimized,
            None => self.runtime.optimize(network, &self.optimizer)?,
        };
        let optimized_at = started.elapsed();
        let id = self.runtime.load_network(optimized.clone())?;
        timings.optimize += optimized_at;
        timings.load += started.elapsed().saturating_sub(optimized_at);
        Ok((id, optimized, reshaped))
    }

    /// Run the model on these inputs (every tensor input of the model, by name, of any shape
    /// its declaration allows), through the plan for their shapes.
    pub fn execute(&self, inputs: &[(&str, &Tensor)]) -> Result<NamedTensors, Error> {
        let (plan, _) = self.plan(inputs)?;
        self.execute_plan(&plan, inputs)
    }

    /// Run `plan` (from [`DynamicNetwork::plan`] for these inputs); the inputs it bound at
    /// import (or does not read) are left out.
    pub fn execute_plan(
        &self,
        plan: &Plan<'r>,
        inputs: &[(&str, &Tensor)],
    ) -> Result<NamedTensors, Error> {
        let fed = fed_inputs(inputs, &plan.feeds);
        let produced = match plan.id {
            Some(id) => self.runtime.execute(id, &fed)?,
            None => Vec::new(),
        };
        let Some(split) = &plan.split else {
            return Ok(produced);
        };
        // What the part before the cut produced is held while the rest runs: counted against
        // the memory budget (the inputs are the caller's, borrowed, never copied).
        let held = produced
            .iter()
            .map(|(_, t)| t.bytes().len())
            .fold(0usize, usize::saturating_add);
        if let Some(budget) = self.runtime.max_memory() {
            if held > budget {
                return Err(Error::Invalid(format!(
                    "the values held at the cut at node '{}' ({}) take {held} bytes, over the \
                     memory budget of {budget} bytes",
                    split.label, split.op_type
                )));
            }
        }
        split.run(self, inputs, produced)
    }
}

impl Drop for DynamicNetwork<'_> {
    fn drop(&mut self) {
        // The plans leave the counts and the budget now (each network is unloaded as its
        // last holder lets it go), whoever else still reaches the cache.
        let plans: Vec<Arc<Plan<'_>>> = {
            let mut cache = self.lock();
            let mut out = Vec::with_capacity(cache.plans.len());
            while !cache.plans.is_empty() {
                out.push(cache.remove_at(0, false));
            }
            cache.forget_unplanned_records();
            out
        };
        drop(plans);
        self.runtime.plan_cache_counters().network_dropped();
    }
}

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

use crate::onnx::{self, proto::ModelProto, SharedInitializers};
use crate::{Error, ImportOptions, OptimizedNetwork, OptimizerOptions, Runtime, Tensor};
use backplane_backend_api::NetworkId;
use backplane_runtime::NamedTensors;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The default number of plans a [`DynamicNetwork`] keeps.
pub const DEFAULT_PLAN_CAPACITY: usize = 8;

/// One concrete plan: the model imported for one set of input shapes (and bound values),
/// optimized and loaded.
#[derive(Debug)]
pub struct Plan {
    /// The loaded network.
    pub id: NetworkId,
    /// The optimizer's result (assignment, report).
    pub optimized: OptimizedNetwork,
    /// Graph inputs bound at import (their values are part of the plan's key).
    pub bound: Vec<String>,
    /// The concrete input shapes the plan was built for, in the order given.
    pub shapes: Vec<(String, Vec<usize>)>,
}

/// Counts of a [`DynamicNetwork`]'s plan cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Plans held now.
    pub size: usize,
    /// The most plans held at once.
    pub capacity: usize,
    /// Executions (or plan look-ups) that found their plan.
    pub hits: u64,
    /// Look-ups that built a plan.
    pub misses: u64,
    /// Plans unloaded to make room.
    pub evictions: u64,
}

impl std::fmt::Display for PlanCacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} plan{} cached (capacity {}), {} hit{}, {} miss{}, {} evicted",
            self.size,
            if self.size == 1 { "" } else { "s" },
            self.capacity,
            self.hits,
            if self.hits == 1 { "" } else { "s" },
            self.misses,
            if self.misses == 1 { "" } else { "es" },
            self.evictions
        )
    }
}

/// What identifies a plan: every given input's name and shape, and the bytes of those the
/// model needs at import.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlanKey(Vec<(String, Vec<usize>, Option<Vec<u8>>)>);

impl PlanKey {
    fn of(inputs: &[(&str, &Tensor)], valued: &[String]) -> PlanKey {
        let mut parts: Vec<_> = inputs
            .iter()
            .map(|(name, t)| {
                let value = valued.iter().any(|v| v == name).then(|| t.bytes().to_vec());
                (name.to_string(), t.shape().dims().to_vec(), value)
            })
            .collect();
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        PlanKey(parts)
    }
}

/// The cache: plans in least-recently-used order (the last is the newest), the inputs whose
/// values the model needed at import so far, and the counts.
#[derive(Default)]
struct Cache {
    plans: Vec<(PlanKey, Arc<Plan>)>,
    valued: Vec<String>,
    stats: PlanCacheStats,
}

/// An ONNX model served for any input shape that fits its declaration, on one runtime.
/// See the [module documentation](self).
pub struct DynamicNetwork<'r> {
    runtime: &'r Runtime,
    model: ModelProto,
    base_dir: Option<PathBuf>,
    import: ImportOptions,
    optimizer: OptimizerOptions,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for DynamicNetwork<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicNetwork")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<'r> DynamicNetwork<'r> {
    /// Serve the model file at `path` on `runtime`. `import` applies to every plan (its
    /// symbolic dimension values and input shapes are overridden by the given inputs';
    /// CpuRef folds constants when it names no evaluator); `optimizer` chooses the backends.
    pub fn from_file(
        runtime: &'r Runtime,
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
        runtime: &'r Runtime,
        model: ModelProto,
        base_dir: Option<PathBuf>,
        import: &ImportOptions,
        optimizer: OptimizerOptions,
    ) -> Self {
        let mut import = import.clone();
        if import.evaluator.is_none() {
            import.evaluator = Some(Arc::new(backplane_cpu_ref::CpuRefEvaluator));
        }
        import.shared_initializers = Some(Arc::new(SharedInitializers::new()));
        DynamicNetwork {
            runtime,
            model,
            base_dir,
            import,
            optimizer,
            cache: Mutex::new(Cache {
                stats: PlanCacheStats {
                    capacity: DEFAULT_PLAN_CAPACITY,
                    ..PlanCacheStats::default()
                },
                ..Cache::default()
            }),
        }
    }

    /// Keep at most `capacity` plans (at least 1; default [`DEFAULT_PLAN_CAPACITY`]).
    pub fn with_capacity(self, capacity: usize) -> Self {
        self.lock().stats.capacity = capacity.max(1);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
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
    pub fn plan(&self, inputs: &[(&str, &Tensor)]) -> Result<(Arc<Plan>, bool), Error> {
        let mut cache = self.lock();
        let key = PlanKey::of(inputs, &cache.valued);
        if let Some(at) = cache.plans.iter().position(|(k, _)| *k == key) {
            let entry = cache.plans.remove(at);
            let plan = entry.1.clone();
            cache.plans.push(entry);
            cache.stats.hits += 1;
            tracing::debug!(shapes = ?plan.shapes, "plan cache hit");
            return Ok((plan, true));
        }
        // Built under the lock: concurrent misses for one shape build it once.
        let plan = self.build(inputs)?;
        cache.stats.misses += 1;
        for name in &plan.bound {
            if !cache.valued.contains(name) {
                cache.valued.push(name.clone());
            }
        }
        let key = PlanKey::of(inputs, &cache.valued);
        while cache.plans.len() >= cache.stats.capacity {
            let (_, old) = cache.plans.remove(0);
            cache.stats.evictions += 1;
            if let Err(e) = self.runtime.unload_network(old.id) {
                tracing::warn!(network = old.id.0, "evicted plan not unloaded: {e}");
            }
        }
        let plan = Arc::new(plan);
        cache.plans.push((key, plan.clone()));
        tracing::info!(
            shapes = ?plan.shapes,
            "plan cache miss: built a plan ({})",
            PlanCacheStats {
                size: cache.plans.len(),
                ..cache.stats
            }
        );
        Ok((plan, false))
    }

    /// Import, optimize and load the model for these inputs.
    fn build(&self, inputs: &[(&str, &Tensor)]) -> Result<Plan, Error> {
        let mut options = self.import.clone();
        let shapes: Vec<(String, Vec<usize>)> = inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.shape().dims().to_vec()))
            .collect();
        for (name, dims) in &shapes {
            options.input_shapes.insert(name.clone(), dims.clone());
        }
        let values: Vec<(String, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.to_string(), (*t).clone()))
            .collect();
        let (network, bound) = onnx::import_model_specialized(
            self.model.clone(),
            self.base_dir.as_deref(),
            &options,
            &values,
        )?;
        let optimized = self.runtime.optimize(&network, &self.optimizer)?;
        let id = self.runtime.load_network(optimized.clone())?;
        Ok(Plan {
            id,
            optimized,
            bound,
            shapes,
        })
    }

    /// Run the model on these inputs (every tensor input of the model, by name, of any shape
    /// its declaration allows), through the plan for their shapes.
    pub fn execute(&self, inputs: &[(&str, &Tensor)]) -> Result<NamedTensors, Error> {
        let (plan, _) = self.plan(inputs)?;
        self.execute_plan(&plan, inputs)
    }

    /// Run `plan` (from [`DynamicNetwork::plan`] for these inputs); the inputs it bound at
    /// import are left out.
    pub fn execute_plan(
        &self,
        plan: &Plan,
        inputs: &[(&str, &Tensor)],
    ) -> Result<NamedTensors, Error> {
        let fed: Vec<(&str, &Tensor)> = inputs
            .iter()
            .filter(|(n, _)| !plan.bound.iter().any(|b| b == n))
            .copied()
            .collect();
        Ok(self.runtime.execute(plan.id, &fed)?)
    }
}

impl Drop for DynamicNetwork<'_> {
    fn drop(&mut self) {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, plan) in cache.plans.drain(..) {
            if let Err(e) = self.runtime.unload_network(plan.id) {
                tracing::warn!(network = plan.id.0, "plan not unloaded: {e}");
            }
        }
    }
}

//! The counts and timings a [`DynamicNetwork`](super::DynamicNetwork) reports: what each
//! plan's miss cost ([`PlanTimings`]), the plan cache's counts ([`PlanCacheStats`]) and the
//! nodes its plans were cut at ([`CutSummary`]).

#[cfg(doc)]
use super::{DynamicNetwork, Plan};

/// The time a plan's miss spent in each phase of building it ([`Plan::timings`]); for a split
/// plan, the phases of its part before the cut (the failed first import included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanTimings {
    /// Importing the model for the plan's shapes (shape inference and constant folding over
    /// the graph; the weights are decoded by the first import only).
    pub import: std::time::Duration,
    /// The optimizer: backend assignment, fusions, layout, tensor-handle strategy and memory
    /// plan; for a re-shaped plan ([`Plan::reshaped`]), the replay of an earlier plan's
    /// optimization (with the strategy and memory plan).
    pub optimize: std::time::Duration,
    /// Loading: workloads (packing weights not packed yet) and memory.
    pub load: std::time::Duration,
}

impl std::fmt::Display for PlanTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "import {:.1} ms, optimize {:.1} ms, load {:.1} ms",
            ms(self.import),
            ms(self.optimize),
            ms(self.load)
        )
    }
}

/// Counts of a [`DynamicNetwork`]'s plan cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Plans held now.
    pub size: usize,
    /// The most plans the counted caches hold at once: one network's capacity for
    /// [`DynamicNetwork::stats`], the sum over the networks for
    /// [`DynamicNetwork::total_stats`].
    pub capacity: usize,
    /// The working memory of the plans held ([`Plan::bytes`] summed). Plans are also evicted
    /// to keep every cache of a network (plans and split nodes, nested ones included) within
    /// the runtime's memory budget ([`crate::Runtime::max_memory`]).
    pub bytes: usize,
    /// The networks whose caches are counted: 1 for [`DynamicNetwork::stats`]; with
    /// [`DynamicNetwork::total_stats`], also the nested ones serving the rest after each cut
    /// (each holds up to `capacity` plans).
    pub networks: usize,
    /// Executions (or plan look-ups) that found their plan.
    pub hits: u64,
    /// Look-ups that built a plan.
    pub misses: u64,
    /// Plans unloaded to make room.
    pub evictions: u64,
    /// Full optimizer runs (backend assignment, fusions, layout, tensor-handle strategy and
    /// memory plan) made to build plans: one per miss whose plan loads a network (a split plan
    /// whose part before the cut computes nothing runs none) and is not re-shaped.
    pub optimizer_runs: u64,
    /// Plans whose imported network had the structure of an earlier plan's
    /// ([`Plan::structure`]) and were built by replaying that plan's optimization
    /// ([`Plan::reshaped`]): its support answers checked at the new shapes, its
    /// substitutions made again, then only the tensor-handle strategy, memory plan and load.
    /// Not counted in `optimizer_runs`.
    pub plans_reshaped: u64,
    /// Optimizer runs whose imported network had the structure of an earlier plan's: plans
    /// of a kept structure whose replay was refused (a decision did not hold at the new
    /// shapes) and that were optimized in full.
    pub same_structure: u64,
    /// Of `same_structure`, the runs whose decisions (backend per layer, substitutions,
    /// order, cancelled permutes: [`backplane_runtime::OptimizationRecord`]) were an earlier
    /// plan's of that structure (a replay refused where the full optimization then decided
    /// the same).
    pub same_decisions: u64,
}

impl std::fmt::Display for PlanCacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let capacity = if self.networks > 1 {
            format!(
                " in {} networks (capacity {} in all)",
                self.networks, self.capacity
            )
        } else {
            format!(" (capacity {})", self.capacity)
        };
        write!(
            f,
            "{} plan{} cached{capacity}, {} hit{}, {} miss{}, {} evicted, {} held, {} optimizer \
             run{}, {} plan{} reshaped",
            self.size,
            if self.size == 1 { "" } else { "s" },
            self.hits,
            if self.hits == 1 { "" } else { "s" },
            self.misses,
            if self.misses == 1 { "" } else { "es" },
            self.evictions,
            ByteSize(self.bytes),
            self.optimizer_runs,
            if self.optimizer_runs == 1 { "" } else { "s" },
            self.plans_reshaped,
            if self.plans_reshaped == 1 { "" } else { "s" }
        )
    }
}

/// A byte count for people: `512 B`, `3.5 KiB`, `12.0 MiB`.
pub(crate) struct ByteSize(pub usize);

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const KIB: f64 = 1024.0;
        let b = self.0 as f64;
        if b < KIB {
            write!(f, "{} B", self.0)
        } else if b < KIB * KIB {
            write!(f, "{:.1} KiB", b / KIB)
        } else {
            write!(f, "{:.1} MiB", b / (KIB * KIB))
        }
    }
}

/// A node the plans of a [`DynamicNetwork`] were cut at ([`DynamicNetwork::cuts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutSummary {
    /// The node's name (or `<op_type>_<index>`).
    pub label: String,
    /// The node's operator.
    pub op_type: String,
    /// The plan cache of the network serving the rest after it, once a run built it.
    pub rest: Option<PlanCacheStats>,
}

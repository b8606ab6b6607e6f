//! The plan cache of a [`DynamicNetwork`](super::DynamicNetwork): plans by key in
//! least-recently-used order, their entries in the shared memory budget, and the recorded
//! optimizations of the structures seen (replayed for later plans of the same structure).

use super::{Plan, PlanCacheStats};
use crate::cache_budget::{CacheBudget, EntryId, Evict, Owner};
use crate::runtime_ref::RuntimeRef;
use crate::Tensor;
use backplane_core::symbolic::Bindings;
use backplane_core::StructuralKey;
use backplane_runtime::{CacheKind, OptimizationRecord};
use std::sync::{Arc, Mutex};

/// What identifies a plan: the values of the symbols of the model's inputs, the shapes of the
/// inputs the symbolic signature does not determine (a derived or undeclared dimension), and
/// the bytes of the inputs the model needs at import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PlanKey(Bindings, Vec<KeyPart>);

/// One input's part of a [`PlanKey`]: its name, its shape (when the symbols do not determine
/// it) and its bytes (when the model needs its value at import).
type KeyPart = (String, Option<Vec<usize>>, Option<Vec<u8>>);

impl PlanKey {
    /// The key of these inputs (see [`PlanKey`]).
    pub(super) fn of(
        inputs: &[(&str, &Tensor)],
        symbols: &Bindings,
        described: &[String],
        valued: &[String],
    ) -> PlanKey {
        let mut parts: Vec<_> = inputs
            .iter()
            .map(|(name, t)| {
                let value = valued.iter().any(|v| v == name).then(|| t.bytes().to_vec());
                let dims =
                    (!described.iter().any(|d| d == name)).then(|| t.shape().dims().to_vec());
                (name.to_string(), dims, value)
            })
            .collect();
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        PlanKey(symbols.clone(), parts)
    }
}

/// The cache: plans in least-recently-used order (the last is the newest) with their ids in
/// the memory budget, the recorded optimizations of the structures seen, the inputs whose
/// values the model needed at import so far, and the counts (`stats.bytes`: the plans' bytes).
pub(super) struct Cache<'r> {
    pub(super) plans: Vec<(PlanKey, Arc<Plan<'r>>, EntryId)>,
    pub(super) records: Records,
    pub(super) valued: Vec<String>,
    pub(super) stats: PlanCacheStats,
    pub(super) runtime: RuntimeRef<'r>,
    /// The budget shared by every cache of the network and its nested ones.
    pub(super) budget: CacheBudget<'r>,
    /// This cache, as the budget reaches it.
    pub(super) me: Owner<'r>,
}

/// How many optimization records a plan cache keeps (for all structures together).
const KEPT_RECORDS: usize = 8;

/// The decisions of the full optimizations of a plan cache, by the structure of the network
/// they optimized ([`StructuralKey`]): at most [`KEPT_RECORDS`], distinct, the most recently
/// made or matched last. A later plan of a kept structure replays the first of its records
/// (the latest first) whose backend choices hold at its shapes
/// ([`backplane_runtime::Runtime::replay_optimization`]) instead of running the optimizer.
#[derive(Debug, Default)]
pub(super) struct Records {
    kept: Vec<(StructuralKey, OptimizationRecord)>,
}

impl Records {
    /// The records to replay for a network of this structure, the latest first.
    pub(super) fn of(&self, key: &StructuralKey) -> Vec<&OptimizationRecord> {
        self.kept
            .iter()
            .rev()
            .filter(|(k, _)| k == key)
            .map(|(_, r)| r)
            .collect()
    }

    /// Note a full optimization of a network of structure `key` (its replay, if one was
    /// tried, was refused) and count it in `stats`: `same_structure` when a record of that
    /// structure was kept, `same_decisions` when one of them has its decisions (that one
    /// becomes the latest). A new record is kept while there is room.
    pub(super) fn optimized(
        &mut self,
        key: StructuralKey,
        record: OptimizationRecord,
        stats: &mut PlanCacheStats,
    ) {
        if !self.kept.iter().any(|(k, _)| *k == key) {
            if self.kept.len() < KEPT_RECORDS {
                self.kept.push((key, record));
            }
            return;
        }
        stats.same_structure += 1;
        let same = self
            .kept
            .iter()
            .position(|(k, r)| *k == key && *r == record);
        tracing::info!(
            same_decisions = same.is_some(),
            "the plan's import has an earlier plan's structure, but that plan's optimization              was not replayed"
        );
        match same {
            Some(at) => {
                stats.same_decisions += 1;
                let entry = self.kept.remove(at);
                self.kept.push(entry);
            }
            None if self.kept.len() < KEPT_RECORDS => self.kept.push((key, record)),
            None => {}
        }
    }
}

impl<'r> Cache<'r> {
    /// Take the plan at `at` out (`evicted`: to make room): its bytes leave the budget and
    /// the counts. Its network is unloaded when the returned plan is dropped (let the cache's
    /// lock go first) and no execution holds it.
    pub(super) fn remove_at(&mut self, at: usize, evicted: bool) -> Arc<Plan<'r>> {
        let (_, plan, id) = self.plans.remove(at);
        self.budget.forget(id);
        self.stats.bytes = self.stats.bytes.saturating_sub(plan.bytes);
        if evicted {
            self.stats.evictions += 1;
        }
        self.runtime
            .plan_cache_counters()
            .removed(CacheKind::Plans, plan.bytes, evicted);
        plan
    }
}

impl Evict for Mutex<Cache<'_>> {
    fn try_evict(&self, entry: EntryId) -> bool {
        let removed = {
            // Busy (a thread is building a plan in it): its plans stay.
            let Ok(mut cache) = self.try_lock() else {
                return false;
            };
            match cache.plans.iter().position(|p| p.2 == entry) {
                Some(at) => cache.remove_at(at, true),
                None => return false,
            }
        };
        drop(removed);
        true
    }
}

impl Drop for Cache<'_> {
    fn drop(&mut self) {
        while !self.plans.is_empty() {
            drop(self.remove_at(0, false));
        }
    }
}

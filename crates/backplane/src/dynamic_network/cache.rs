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

    /// Whether `inputs` are those a plan was built for: the same names and shapes, in order,
    /// as `shapes` (the plan's), and the same bytes for every input this key holds the value
    /// of. Such inputs bind the symbols as the plan's did, so they have this key.
    pub(super) fn fits(&self, inputs: &[(&str, &Tensor)], shapes: &[(String, Vec<usize>)]) -> bool {
        inputs.len() == shapes.len()
            && inputs
                .iter()
                .zip(shapes)
                .all(|((n, t), (name, dims))| n == name && t.shape().dims() == dims.as_slice())
            && self.1.iter().all(|(name, _, value)| match value {
                None => true,
                Some(bytes) => inputs
                    .iter()
                    .any(|(n, t)| n == name && t.bytes() == bytes.as_slice()),
            })
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
///
/// A structure's records live as long as the cache holds a plan of that structure: when the
/// last one leaves (evicted, or dropped with the network), they go with it
/// ([`Records::retain_structures`], called by the cache after every removal), so the records
/// are bounded by the plans' lifetime as well as by their count.
#[derive(Debug, Default)]
pub(super) struct Records {
    kept: Vec<(StructuralKey, OptimizationRecord)>,
}

impl Records {
    /// How many records are kept.
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }

    /// Drop the records of every structure `live` says no plan has any more.
    pub(super) fn retain_structures(&mut self, live: impl Fn(&StructuralKey) -> bool) {
        self.kept.retain(|(k, _)| live(k));
    }

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
    /// Drop the records of the structures no cached plan has (see [`Records`]). Called once
    /// the plans removed to make room are out and the new plan is in, so a plan replacing
    /// the last of its structure keeps the structure's records.
    pub(super) fn forget_unplanned_records(&mut self) {
        let plans = &self.plans;
        self.records.retain_structures(|k| {
            plans
                .iter()
                .any(|(_, p, _)| p.structure.as_ref() == Some(k))
        });
    }

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
                Some(at) => {
                    let plan = cache.remove_at(at, true);
                    cache.forget_unplanned_records();
                    plan
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use backplane_core::{DataType, Network, Op, TensorInfo};

    /// The structure of a one-MatMul network whose layer is `name`.
    fn structure(name: &str) -> StructuralKey {
        let mut net = Network::new();
        let x = net
            .add_input("x", TensorInfo::new(DataType::F32, vec![2, 2]))
            .unwrap_or_else(|e| panic!("{e}"));
        let y = net
            .add_layer(name, Op::MatMul, &[x, x])
            .unwrap_or_else(|e| panic!("{e}"))[0];
        net.mark_output(y).unwrap_or_else(|e| panic!("{e}"));
        StructuralKey::of(&net)
    }

    fn record(permutes_cancelled: usize) -> OptimizationRecord {
        OptimizationRecord {
            layers: Vec::new(),
            substitutions: Vec::new(),
            permutes_cancelled,
            replayable: true,
        }
    }

    /// Records of the structures still planned stay (every one of theirs); the others go.
    #[test]
    fn records_of_unplanned_structures_are_dropped() {
        let (a, b) = (structure("a"), structure("b"));
        assert_ne!(a, b);
        let mut stats = PlanCacheStats::default();
        let mut records = Records::default();
        records.optimized(a, record(0), &mut stats);
        records.optimized(b, record(0), &mut stats);
        records.optimized(b, record(1), &mut stats);
        assert_eq!((records.len(), stats.same_structure), (3, 1));
        records.retain_structures(|k| *k == b);
        assert!(records.of(&a).is_empty());
        assert_eq!(records.of(&b), vec![&record(1), &record(0)]);
        records.retain_structures(|_| false);
        assert_eq!(records.len(), 0);
    }
}

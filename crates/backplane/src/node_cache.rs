//! The cache of a split node's runs ([`crate::staged::Split`]): the one-node model of a
//! data-dependent node, imported for what it was specialised on, kept for the next run.
//!
//! A split node is imported alone with the values of the inputs its import needs bound (all
//! of NonZero's, only the `k` of a TopK with a computed k, the trip count of a Loop). What it
//! was specialised on is the types and shapes of every input it reads and the bytes of the
//! bound ones; that is the key. An entry is either the node's outputs, when the import
//! computed them (every input it reads was bound), or a loaded one-node network (the bound
//! inputs are constants in it, the others are fed at each run). Entries are kept in
//! least-recently-used order, at most a capacity per node and within the runtime's memory
//! budget (an entry counts its key's bound bytes and its folded outputs' bytes, or its
//! network's working memory, in the budget shared by every cache of the same
//! `DynamicNetwork`: `crate::cache_budget`); an evicted network is unloaded.

use crate::cache_budget::{CacheBudget, EntryId, Evict, Owner};
use crate::dynamic_network::ByteSize;
use crate::runtime_ref::RuntimeRef;
use crate::{Runtime, Tensor};
use backplane_backend_api::NetworkId;
use backplane_runtime::CacheKind;
use std::sync::{Arc, Mutex};

/// Counts of the split nodes' caches of one [`crate::DynamicNetwork`] (every node it splits
/// at, not the nested networks').
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCacheStats {
    /// Entries held now (all split nodes together).
    pub size: usize,
    /// The most entries one split node keeps.
    pub capacity_per_node: usize,
    /// Runs of a split node that found their entry.
    pub hits: u64,
    /// Runs that imported the node.
    pub misses: u64,
    /// Entries dropped to make room.
    pub evictions: u64,
    /// The bytes the entries held now count (bound input bytes of their keys, folded outputs,
    /// loaded networks' working memory).
    pub bytes: usize,
}

impl NodeCacheStats {
    /// The sum of two networks' counts (the capacity per node is the larger).
    pub fn plus(self, other: NodeCacheStats) -> NodeCacheStats {
        NodeCacheStats {
            size: self.size + other.size,
            capacity_per_node: self.capacity_per_node.max(other.capacity_per_node),
            hits: self.hits + other.hits,
            misses: self.misses + other.misses,
            evictions: self.evictions + other.evictions,
            bytes: self.bytes + other.bytes,
        }
    }
}

impl std::fmt::Display for NodeCacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} node run{} cached (at most {} per node), {} hit{}, {} import{}, {} evicted, {} \
             held",
            self.size,
            if self.size == 1 { "" } else { "s" },
            self.capacity_per_node,
            self.hits,
            if self.hits == 1 { "" } else { "s" },
            self.misses,
            if self.misses == 1 { "" } else { "s" },
            self.evictions,
            ByteSize(self.bytes)
        )
    }
}

/// The counts shared by every split of one network.
pub(crate) type SharedNodeStats = Arc<Mutex<NodeCacheStats>>;

/// What identifies one specialisation of a node: each input it reads (in the node's order)
/// with its type code, shape and, for the inputs bound at import, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeKey(Vec<(i64, Vec<usize>, Option<Vec<u8>>)>);

impl NodeKey {
    /// The bytes of the bound inputs the key holds.
    fn bytes(&self) -> usize {
        self.0
            .iter()
            .map(|(_, _, b)| b.as_ref().map_or(0, Vec::len))
            .sum()
    }

    /// The key of `inputs` (name and value, in the node's order) when `valued` are bound.
    pub(crate) fn of(inputs: &[(&str, &Tensor)], valued: &[String]) -> NodeKey {
        NodeKey(
            inputs
                .iter()
                .map(|(name, t)| {
                    let bytes = valued.iter().any(|v| v == name).then(|| t.bytes().to_vec());
                    (t.dtype().onnx_code(), t.shape().dims().to_vec(), bytes)
                })
                .collect(),
        )
    }
}

/// One specialisation of a node.
#[derive(Debug)]
pub(crate) enum NodeEntry {
    /// The import computed the node's outputs (by name, in order).
    Folded(Vec<(String, Tensor)>),
    /// The import made a network of the node; it is loaded.
    Loaded {
        /// The loaded network.
        id: NetworkId,
        /// Its inputs (the node's inputs not bound at import), fed at each run.
        feeds: Vec<String>,
        /// The node's outputs in order (the network's outputs by name).
        outputs: Vec<String>,
        /// The network's working memory (bytes).
        bytes: usize,
    },
}

impl NodeEntry {
    /// The bytes the entry holds: its outputs', or its network's working memory.
    fn bytes(&self) -> usize {
        match self {
            NodeEntry::Folded(values) => values.iter().map(|(_, t)| t.bytes().len()).sum(),
            NodeEntry::Loaded { bytes, .. } => *bytes,
        }
    }
}

/// One split node's cache (shared with the memory budget, which may evict from it).
pub(crate) type SharedNodeCache<'r> = Arc<Mutex<NodeCache<'r>>>;

/// One entry: its key, the entry, the bytes it counts and its id in the budget.
type Kept = (NodeKey, Arc<NodeEntry>, usize, EntryId);

/// One split node's cache.
pub(crate) struct NodeCache<'r> {
    runtime: RuntimeRef<'r>,
    /// The entries, least recently used first.
    entries: Vec<Kept>,
    /// The inputs any import of the node bound so far (their bytes are in the key).
    valued: Vec<String>,
    capacity: usize,
    stats: SharedNodeStats,
    /// The budget shared by every cache of the network (plans and cut nodes, nested ones
    /// included).
    budget: CacheBudget<'r>,
    /// This cache, as the budget reaches it.
    me: Owner<'r>,
}

impl std::fmt::Debug for NodeCache<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCache")
            .field("entries", &self.entries.len())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<'r> NodeCache<'r> {
    /// An empty cache keeping at most `capacity` entries (0: each is dropped once it has
    /// run, see [`NodeCache::settle`]), counting in `stats` and within `budget`.
    pub(crate) fn new(
        runtime: RuntimeRef<'r>,
        capacity: usize,
        stats: SharedNodeStats,
        budget: CacheBudget<'r>,
    ) -> SharedNodeCache<'r> {
        lock(&stats).capacity_per_node = capacity;
        Arc::new_cyclic(|me: &std::sync::Weak<Mutex<NodeCache<'r>>>| {
            let me: Owner<'r> = me.clone();
            Mutex::new(NodeCache {
                runtime,
                entries: Vec::new(),
                valued: Vec::new(),
                capacity,
                stats,
                budget,
                me,
            })
        })
    }

    /// The entry for these inputs, if cached (counted as a hit, made the newest).
    pub(crate) fn get(&mut self, inputs: &[(&str, &Tensor)]) -> Option<Arc<NodeEntry>> {
        let key = NodeKey::of(inputs, &self.valued);
        let at = self.entries.iter().position(|(k, ..)| *k == key)?;
        let entry = self.entries.remove(at);
        let found = entry.1.clone();
        self.budget.touch(entry.3);
        self.entries.push(entry);
        lock(&self.stats).hits += 1;
        self.runtime.plan_cache_counters().hit(CacheKind::Nodes);
        Some(found)
    }

    /// Keep `entry`, made for these inputs with `bound` bound at import (counted as a miss),
    /// dropping the least recently used entry when full and the least recently used entries
    /// of the network's caches to stay within the memory budget; an entry larger than the
    /// whole budget is refused ([`crate::Error::CacheBudget`]).
    pub(crate) fn insert(
        &mut self,
        inputs: &[(&str, &Tensor)],
        bound: &[String],
        entry: NodeEntry,
        label: &str,
    ) -> Result<Arc<NodeEntry>, crate::Error> {
        for name in bound {
            if !self.valued.contains(name) {
                self.valued.push(name.clone());
            }
        }
        let key = NodeKey::of(inputs, &self.valued);
        let bytes = key.bytes().saturating_add(entry.bytes());
        while !self.entries.is_empty() && self.entries.len() >= self.capacity.max(1) {
            self.remove_at(0, true);
        }
        let me = self.me.clone();
        let budget = self.budget.clone();
        let id = budget.admit(
            &me,
            bytes,
            self.runtime.max_memory(),
            &|| format!("the run of node '{label}' (its outputs or network)"),
            &mut |victim| match self.entries.iter().position(|e| e.3 == victim) {
                Some(at) => {
                    self.remove_at(at, true);
                    true
                }
                None => false,
            },
        );
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                release(&self.runtime, &entry);
                return Err(e);
            }
        };
        let entry = Arc::new(entry);
        self.entries.push((key, entry.clone(), bytes, id));
        let mut stats = lock(&self.stats);
        stats.misses += 1;
        stats.size += 1;
        stats.bytes += bytes;
        self.runtime
            .plan_cache_counters()
            .inserted(CacheKind::Nodes, bytes);
        Ok(entry)
    }

    /// Drop the entries beyond the capacity (with a capacity of 0, the one just run).
    pub(crate) fn settle(&mut self) {
        while self.entries.len() > self.capacity {
            self.remove_at(0, true);
        }
    }

    /// Let the entry at `at` go (`evicted`: to make room): its bytes leave the budget and the
    /// counts, its network is unloaded.
    fn remove_at(&mut self, at: usize, evicted: bool) {
        let (_, entry, bytes, id) = self.entries.remove(at);
        self.budget.forget(id);
        release(&self.runtime, &entry);
        {
            let mut stats = lock(&self.stats);
            stats.size = stats.size.saturating_sub(1);
            stats.bytes = stats.bytes.saturating_sub(bytes);
            if evicted {
                stats.evictions += 1;
            }
        }
        self.runtime
            .plan_cache_counters()
            .removed(CacheKind::Nodes, bytes, evicted);
    }
}

/// Unload an entry's network, if it has one.
fn release(runtime: &Runtime, entry: &NodeEntry) {
    if let NodeEntry::Loaded { id, .. } = entry {
        if let Err(e) = runtime.unload_network(*id) {
            tracing::warn!(network = id.0, "split node network not unloaded: {e}");
        }
    }
}

impl Evict for Mutex<NodeCache<'_>> {
    fn try_evict(&self, entry: EntryId) -> bool {
        // Busy (a thread runs or fills it): its entries stay.
        let Ok(mut cache) = self.try_lock() else {
            return false;
        };
        match cache.entries.iter().position(|e| e.3 == entry) {
            Some(at) => {
                cache.remove_at(at, true);
                true
            }
            None => false,
        }
    }
}

impl Drop for NodeCache<'_> {
    fn drop(&mut self) {
        while !self.entries.is_empty() {
            self.remove_at(0, false);
        }
    }
}

/// The counts, whatever a panicking holder left.
pub(crate) fn lock(stats: &SharedNodeStats) -> std::sync::MutexGuard<'_, NodeCacheStats> {
    stats.lock().unwrap_or_else(|e| e.into_inner())
}

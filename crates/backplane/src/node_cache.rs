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
//! network's working memory, together with every other cache of the same `DynamicNetwork`);
//! an evicted network is unloaded.

use crate::dynamic_network::{ByteSize, HeldBytes};
use crate::runtime_ref::RuntimeRef;
use crate::Tensor;
use backplane_backend_api::NetworkId;
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

/// One split node's cache.
#[derive(Debug)]
pub(crate) struct NodeCache<'r> {
    runtime: RuntimeRef<'r>,
    /// Each entry with the bytes it counts.
    entries: Vec<(NodeKey, Arc<NodeEntry>, usize)>,
    /// The inputs any import of the node bound so far (their bytes are in the key).
    valued: Vec<String>,
    capacity: usize,
    stats: SharedNodeStats,
    /// The bytes of every cache of the network, against the runtime's memory budget.
    held: HeldBytes,
}

impl<'r> NodeCache<'r> {
    /// An empty cache keeping at most `capacity` entries (0: each is dropped once it has
    /// run, see [`NodeCache::settle`]), counting in `stats` and `held`.
    pub(crate) fn new(
        runtime: RuntimeRef<'r>,
        capacity: usize,
        stats: SharedNodeStats,
        held: HeldBytes,
    ) -> Self {
        lock(&stats).capacity_per_node = capacity;
        NodeCache {
            runtime,
            entries: Vec::new(),
            valued: Vec::new(),
            capacity,
            stats,
            held,
        }
    }

    /// The entry for these inputs, if cached (counted as a hit, made the newest).
    pub(crate) fn get(&mut self, inputs: &[(&str, &Tensor)]) -> Option<Arc<NodeEntry>> {
        let key = NodeKey::of(inputs, &self.valued);
        let at = self.entries.iter().position(|(k, _, _)| *k == key)?;
        let entry = self.entries.remove(at);
        let found = entry.1.clone();
        self.entries.push(entry);
        lock(&self.stats).hits += 1;
        Some(found)
    }

    /// Keep `entry`, made for these inputs with `bound` bound at import (counted as a miss),
    /// dropping the least recently used entry when full.
    pub(crate) fn insert(
        &mut self,
        inputs: &[(&str, &Tensor)],
        bound: &[String],
        entry: NodeEntry,
    ) -> Arc<NodeEntry> {
        for name in bound {
            if !self.valued.contains(name) {
                self.valued.push(name.clone());
            }
        }
        let key = NodeKey::of(inputs, &self.valued);
        let bytes = key.bytes().saturating_add(entry.bytes());
        let budget = self.runtime.max_memory();
        let mut evicted = 0;
        let mut freed = 0usize;
        while !self.entries.is_empty()
            && (self.entries.len() >= self.capacity.max(1) || self.held.over(budget, bytes))
        {
            let (_, old, old_bytes) = self.entries.remove(0);
            self.release(&old, old_bytes);
            freed += old_bytes;
            evicted += 1;
        }
        let entry = Arc::new(entry);
        self.held.take(bytes);
        self.entries.push((key, entry.clone(), bytes));
        let mut stats = lock(&self.stats);
        stats.misses += 1;
        stats.evictions += evicted;
        stats.size = (stats.size + 1).saturating_sub(evicted as usize);
        stats.bytes = (stats.bytes + bytes).saturating_sub(freed);
        entry
    }

    /// Drop the entries beyond the capacity (with a capacity of 0, the one just run).
    pub(crate) fn settle(&mut self) {
        let mut evicted = 0;
        let mut freed = 0usize;
        while self.entries.len() > self.capacity {
            let (_, old, old_bytes) = self.entries.remove(0);
            self.release(&old, old_bytes);
            freed += old_bytes;
            evicted += 1;
        }
        if evicted > 0 {
            let mut stats = lock(&self.stats);
            stats.evictions += evicted;
            stats.size = stats.size.saturating_sub(evicted as usize);
            stats.bytes = stats.bytes.saturating_sub(freed);
        }
    }

    /// Let an entry's bytes go and unload its network, if it has one.
    fn release(&self, entry: &NodeEntry, bytes: usize) {
        self.held.release(bytes);
        if let NodeEntry::Loaded { id, .. } = entry {
            if let Err(e) = self.runtime.unload_network(*id) {
                tracing::warn!(network = id.0, "split node network not unloaded: {e}");
            }
        }
    }
}

impl Drop for NodeCache<'_> {
    fn drop(&mut self) {
        let entries = std::mem::take(&mut self.entries);
        let mut freed = 0usize;
        for (_, entry, bytes) in &entries {
            self.release(entry, *bytes);
            freed += bytes;
        }
        let mut stats = lock(&self.stats);
        stats.size = stats.size.saturating_sub(entries.len());
        stats.bytes = stats.bytes.saturating_sub(freed);
    }
}

/// The counts, whatever a panicking holder left.
pub(crate) fn lock(stats: &SharedNodeStats) -> std::sync::MutexGuard<'_, NodeCacheStats> {
    stats.lock().unwrap_or_else(|e| e.into_inner())
}

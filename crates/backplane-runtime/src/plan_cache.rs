//! The totals of the plan caches built on one [`Runtime`](crate::Runtime).
//!
//! A runtime loads networks; callers that serve one model for many input shapes (the facade's
//! `DynamicNetwork`) keep those networks in caches of their own: plans per concrete shape and
//! the imports of the nodes a plan is cut at. Each cache reports into its runtime's
//! [`PlanCacheCounters`], so that [`Runtime::plan_cache_stats`](crate::Runtime::plan_cache_stats)
//! answers for every cache on the runtime at once (a server with several models, a model whose
//! plans are cut into nested networks), not only per network.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counts of one kind of cache entry ([`PlanCacheTotals::plans`] or [`PlanCacheTotals::nodes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    /// Entries held now.
    pub entries: usize,
    /// The bytes the entries held now count (a plan: its working memory).
    pub bytes: usize,
    /// Look-ups that found their entry, since the runtime was created.
    pub hits: u64,
    /// Look-ups that built an entry, since the runtime was created.
    pub misses: u64,
    /// Entries dropped to make room (by count or by the memory budget), since the runtime was
    /// created; entries dropped with their network are not evictions.
    pub evictions: u64,
}

/// The plan caches of every network served on a runtime, together: what they hold now and
/// what they did since the runtime was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCacheTotals {
    /// The networks with a plan cache alive now (a served model and each nested network
    /// serving the rest of it after a cut).
    pub networks: usize,
    /// The plans (one per concrete input shape of a network).
    pub plans: CacheCounts,
    /// The cached runs of the nodes plans are cut at (data-dependent shapes).
    pub nodes: CacheCounts,
    /// Optimizer runs made to build plans, since the runtime was created.
    pub optimizer_runs: u64,
    /// Plans built by replaying an earlier plan's optimization of the same structure
    /// (re-shaped: no optimizer search), since the runtime was created.
    pub plans_reshaped: u64,
}

impl std::fmt::Display for PlanCacheTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |n: u64, one: &str, many: &str| if n == 1 { one } else { many }.to_string();
        write!(
            f,
            "{} network{}, {} plan{} held ({}), {} hit{}, {} miss{}, {} evicted, {} optimizer \
             run{}, {} plan{} reshaped; split nodes: {} held ({}), {} hit{}, {} import{}, {} \
             evicted",
            self.networks,
            s(self.networks as u64, "", "s"),
            self.plans.entries,
            s(self.plans.entries as u64, "", "s"),
            human(self.plans.bytes),
            self.plans.hits,
            s(self.plans.hits, "", "s"),
            self.plans.misses,
            s(self.plans.misses, "", "es"),
            self.plans.evictions,
            self.optimizer_runs,
            s(self.optimizer_runs, "", "s"),
            self.plans_reshaped,
            s(self.plans_reshaped, "", "s"),
            self.nodes.entries,
            human(self.nodes.bytes),
            self.nodes.hits,
            s(self.nodes.hits, "", "s"),
            self.nodes.misses,
            s(self.nodes.misses, "", "s"),
            self.nodes.evictions,
        )
    }
}

/// A byte count for people: `512 B`, `3.5 KiB`, `12.0 MiB`.
fn human(bytes: usize) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

/// Which counts an event goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// A plan cache.
    Plans,
    /// A cut node's cache.
    Nodes,
}

/// One kind's counters.
#[derive(Debug, Default)]
struct Counters {
    entries: AtomicUsize,
    bytes: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> CacheCounts {
        CacheCounts {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

/// Subtract without going below zero (a cache never removes more than it added; this keeps a
/// counter sane should one do so).
fn decrease(counter: &AtomicUsize, by: usize) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(by))
    });
}

/// The counters every plan cache on a runtime reports into (one per runtime,
/// [`Runtime::plan_cache_counters`](crate::Runtime::plan_cache_counters)); lock-free.
#[derive(Debug, Default)]
pub struct PlanCacheCounters {
    networks: AtomicUsize,
    plans: Counters,
    nodes: Counters,
    optimizer_runs: AtomicU64,
    plans_reshaped: AtomicU64,
}

impl PlanCacheCounters {
    fn of(&self, kind: CacheKind) -> &Counters {
        match kind {
            CacheKind::Plans => &self.plans,
            CacheKind::Nodes => &self.nodes,
        }
    }

    /// A network with a plan cache was created.
    pub fn network_created(&self) {
        self.networks.fetch_add(1, Ordering::Relaxed);
    }

    /// A network with a plan cache was dropped (after removing its entries).
    pub fn network_dropped(&self) {
        decrease(&self.networks, 1);
    }

    /// A look-up found its entry.
    pub fn hit(&self, kind: CacheKind) {
        self.of(kind).hits.fetch_add(1, Ordering::Relaxed);
    }

    /// A look-up missed and an entry of `bytes` was built and kept.
    pub fn inserted(&self, kind: CacheKind, bytes: usize) {
        let c = self.of(kind);
        c.misses.fetch_add(1, Ordering::Relaxed);
        c.entries.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// An entry of `bytes` left its cache: `evicted` to make room, else with its cache.
    pub fn removed(&self, kind: CacheKind, bytes: usize, evicted: bool) {
        let c = self.of(kind);
        decrease(&c.entries, 1);
        decrease(&c.bytes, bytes);
        if evicted {
            c.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The optimizer ran to build a plan.
    pub fn optimizer_ran(&self) {
        self.optimizer_runs.fetch_add(1, Ordering::Relaxed);
    }

    /// A plan was built by replaying an earlier plan's optimization.
    pub fn plan_reshaped(&self) {
        self.plans_reshaped.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> PlanCacheTotals {
        PlanCacheTotals {
            networks: self.networks.load(Ordering::Relaxed),
            plans: self.plans.snapshot(),
            nodes: self.nodes.snapshot(),
            optimizer_runs: self.optimizer_runs.load(Ordering::Relaxed),
            plans_reshaped: self.plans_reshaped.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_and_never_go_negative() {
        let c = PlanCacheCounters::default();
        c.network_created();
        c.inserted(CacheKind::Plans, 100);
        c.inserted(CacheKind::Plans, 50);
        c.hit(CacheKind::Plans);
        c.optimizer_ran();
        c.plan_reshaped();
        c.removed(CacheKind::Plans, 100, true);
        c.inserted(CacheKind::Nodes, 8);
        c.removed(CacheKind::Nodes, 8, false);
        c.removed(CacheKind::Nodes, 8, false);
        let t = c.snapshot();
        assert_eq!(t.networks, 1);
        assert_eq!(
            t.plans,
            CacheCounts {
                entries: 1,
                bytes: 50,
                hits: 1,
                misses: 2,
                evictions: 1
            }
        );
        assert_eq!((t.nodes.entries, t.nodes.bytes, t.nodes.misses), (0, 0, 1));
        assert_eq!((t.optimizer_runs, t.plans_reshaped), (1, 1));
        let line = t.to_string();
        assert!(
            line.contains(
                "1 plan held (50 B), 1 hit, 2 misses, 1 evicted, 1 optimizer run, 1 plan reshaped;"
            ),
            "{line}"
        );
    }
}

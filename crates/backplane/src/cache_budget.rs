//! One memory budget for every cache of a [`crate::DynamicNetwork`]: its plans, the plans of
//! the nested networks serving the rest after each cut, and the cut nodes' entries.
//!
//! Each cache registers its entries here with the bytes they hold. An entry about to be kept
//! is admitted only once the entries of *all* the caches fit the runtime's memory budget with
//! it: the least recently used entries, whichever cache holds them, are evicted first (an
//! entry is used when it is kept and at every hit). The cache being filled evicts its own
//! entries itself (its lock is held); another cache is asked through [`Evict`], which skips it
//! when it is busy (locked by a thread running one of its entries, or filling it). An entry
//! larger than the whole budget is refused with [`Error::CacheBudget`]; when the entries in
//! use leave no room, the new one is kept anyway and the excess logged (it is needed to run).

use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// An entry of some cache, as the budget knows it.
pub(crate) type EntryId = u64;

/// A cache whose entries the budget may evict.
pub(crate) trait Evict: Send + Sync {
    /// Evict `entry` unless the cache is busy (its lock taken); true when it was evicted.
    /// The cache calls [`CacheBudget::forget`] for it, as for any entry it lets go.
    fn try_evict(&self, entry: EntryId) -> bool;
}

/// A cache, as the budget reaches it to evict (held weakly: a dropped cache forgets its
/// entries itself).
pub(crate) type Owner<'r> = Weak<dyn Evict + 'r>;

/// One entry of some cache.
struct Tracked<'r> {
    owner: Owner<'r>,
    bytes: usize,
    /// The budget's clock when the entry was last used.
    used: u64,
}

#[derive(Default)]
struct State<'r> {
    held: usize,
    clock: u64,
    next: EntryId,
    entries: HashMap<EntryId, Tracked<'r>>,
}

/// The budget shared by the caches of one network and its nested ones (cheap to clone).
#[derive(Clone, Default)]
pub(crate) struct CacheBudget<'r>(Arc<Mutex<State<'r>>>);

impl std::fmt::Debug for CacheBudget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("CacheBudget")
            .field("held", &s.held)
            .field("entries", &s.entries.len())
            .finish()
    }
}

impl<'r> CacheBudget<'r> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<'r>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes every cache's entries hold now.
    pub(crate) fn held(&self) -> usize {
        self.lock().held
    }

    /// Make room for an entry of `bytes` of the cache `owner` within `limit` (none: no
    /// budget), evicting the least recently used entries of every cache (`own` evicts the
    /// caller's own entries, whose lock it holds; it returns whether it did), then count it.
    /// `what` names the entry in the error when it alone is over the budget.
    pub(crate) fn admit(
        &self,
        owner: &Owner<'r>,
        bytes: usize,
        limit: Option<usize>,
        what: &dyn Fn() -> String,
        own: &mut dyn FnMut(EntryId) -> bool,
    ) -> Result<EntryId, Error> {
        if let Some(budget) = limit {
            if bytes > budget {
                return Err(Error::CacheBudget {
                    what: what(),
                    bytes,
                    budget,
                });
            }
            let mut tried: Vec<EntryId> = Vec::new();
            loop {
                // The lock is let go before evicting: an evicted entry's cache forgets it (and
                // dropping a plan drops its cut nodes' caches, which forget theirs).
                let victim = {
                    let state = self.lock();
                    if state.held.saturating_add(bytes) <= budget {
                        break;
                    }
                    state
                        .entries
                        .iter()
                        .filter(|(id, _)| !tried.contains(id))
                        .min_by_key(|(_, t)| t.used)
                        .map(|(id, t)| (*id, t.owner.clone()))
                };
                let Some((id, from)) = victim else {
                    tracing::warn!(
                        held = self.held(),
                        bytes,
                        budget,
                        "the caches' entries in use leave no room within the memory budget: \
                         {} is kept over it",
                        what()
                    );
                    break;
                };
                tried.push(id);
                let evicted = if Weak::ptr_eq(&from, owner) {
                    own(id)
                } else if let Some(cache) = from.upgrade() {
                    cache.try_evict(id)
                } else {
                    // Its cache is gone (it forgets its entries as it drops).
                    self.forget(id);
                    true
                };
                if evicted {
                    tracing::debug!(entry = id, "evicted to stay within the memory budget");
                }
            }
        }
        let mut state = self.lock();
        state.clock += 1;
        state.next += 1;
        let (id, used) = (state.next, state.clock);
        state.held = state.held.saturating_add(bytes);
        state.entries.insert(
            id,
            Tracked {
                owner: owner.clone(),
                bytes,
                used,
            },
        );
        Ok(id)
    }

    /// `entry` was used (a hit): it is now the most recently used.
    pub(crate) fn touch(&self, entry: EntryId) {
        let mut state = self.lock();
        state.clock += 1;
        let now = state.clock;
        if let Some(t) = state.entries.get_mut(&entry) {
            t.used = now;
        }
    }

    /// `entry` left its cache: its bytes are no longer held.
    pub(crate) fn forget(&self, entry: EntryId) {
        let mut state = self.lock();
        if let Some(t) = state.entries.remove(&entry) {
            state.held = state.held.saturating_sub(t.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of ids that evicts when not marked busy.
    struct Fake {
        budget: CacheBudget<'static>,
        held: Mutex<Vec<EntryId>>,
        busy: std::sync::atomic::AtomicBool,
    }

    impl Evict for Fake {
        fn try_evict(&self, entry: EntryId) -> bool {
            if self.busy.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.retain(|e| *e != entry);
            self.budget.forget(entry);
            true
        }
    }

    fn fake(budget: &CacheBudget<'static>) -> Arc<Fake> {
        Arc::new(Fake {
            budget: budget.clone(),
            held: Mutex::new(Vec::new()),
            busy: false.into(),
        })
    }

    fn add(
        budget: &CacheBudget<'static>,
        cache: &Arc<Fake>,
        bytes: usize,
        limit: usize,
    ) -> EntryId {
        let owner: Owner<'static> = Arc::downgrade(cache) as Owner<'static>;
        // The caller's own entries are evicted by the caller (here: as another cache would).
        let id = budget
            .admit(&owner, bytes, Some(limit), &|| "entry".into(), &mut |own| {
                cache.try_evict(own)
            })
            .unwrap();
        cache.held.lock().unwrap().push(id);
        id
    }

    #[test]
    fn the_least_recently_used_entry_of_any_cache_goes_first() {
        let budget = CacheBudget::default();
        let (a, b, c) = (fake(&budget), fake(&budget), fake(&budget));
        let a1 = add(&budget, &a, 40, 100);
        let b1 = add(&budget, &b, 40, 100);
        budget.touch(a1);
        // 40 + 40 + 40 > 100: b1 (older than a1's hit) goes, from the other cache.
        let _b2 = add(&budget, &b, 40, 100);
        assert_eq!(budget.held(), 80);
        assert!(!b.held.lock().unwrap().contains(&b1));
        // A busy cache is skipped: a1 (the least recent) stays, b2 goes.
        a.busy.store(true, std::sync::atomic::Ordering::Relaxed);
        let _c1 = add(&budget, &c, 30, 100);
        assert!(a.held.lock().unwrap().contains(&a1));
        assert!(b.held.lock().unwrap().is_empty());
        assert_eq!(budget.held(), 70);
    }

    #[test]
    fn an_entry_over_the_whole_budget_is_refused() {
        let budget = CacheBudget::default();
        let a = fake(&budget);
        let owner: Owner<'static> = Arc::downgrade(&a) as Owner<'static>;
        let err = budget
            .admit(&owner, 101, Some(100), &|| "plan x".into(), &mut |_| false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("plan x") && err.contains("101"), "{err}");
        assert_eq!(budget.held(), 0);
    }
}

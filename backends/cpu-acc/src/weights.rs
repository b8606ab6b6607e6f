//! Packed weights shared between the workloads of several loaded networks.
//!
//! A model served for several input shapes is loaded once per shape (one plan per set of
//! concrete shapes). Its constant weights are the same `Arc<Tensor>`s in every plan, so the
//! B operands CpuAcc packs from them need packing only once: a [`PackedWeights`] cache, kept
//! by the backend object (shared by every clone the registry hands out), maps a constant's
//! identity and the packing parameters to the packed operand (a form made from several
//! constants, `shared_from`, by all their identities). Entries hold the constants and
//! the packed operand weakly: a packed operand lives as long as a workload (or a plan's
//! network, for constants a fusion makes) uses it, and an entry whose constant has gone can
//! never match a new tensor at the same address.
//! The workload factory installs the cache for the duration of each workload creation
//! ([`scoped`]), and `optimize_subgraph` for its fusions' (a BatchNormalization folded into a
//! convolution, an int8 layer's folded bias: the same tensors in every plan); outside such a
//! call (kit tests building workloads directly) every operand is packed afresh.

use crate::gemm::Packed;
use crate::options::{self, CpuAccOptions};
use backplane_backend_api::Result;
use backplane_core::Tensor;
use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What a packed form was made from and how: the constant's address, the kind of packing,
/// the Rust type of the packed form, its parameters, and the backend options in force (a
/// switch such as `split_halves` or `winograd` may change the layout or the path).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    tensor: usize,
    kind: &'static str,
    form: TypeId,
    params: Box<[usize]>,
    options: CpuAccOptions,
    /// For a constant derived from another ([`derived`]): how (its derivation's name, its
    /// other inputs' addresses and its parameters); `tensor` is then the original's address.
    derivation: Option<(&'static str, Box<[usize]>)>,
    /// The addresses of the other constants a form is made from ([`shared_from`]).
    others: Box<[usize]>,
}

impl Hash for Key {
    /// Everything but the options (which are not `Hash`; equal keys still hash equally).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.tensor.hash(state);
        self.kind.hash(state);
        self.form.hash(state);
        self.params.hash(state);
        self.derivation.hash(state);
        self.others.hash(state);
    }
}

/// A constant made from another at optimization (a convolution's weights with a
/// BatchNormalization folded in): new in every plan, so its packings are keyed by the
/// original and the derivation instead. All held weakly.
struct Origin {
    derived: Weak<Tensor>,
    source: Weak<Tensor>,
    inputs: Vec<Weak<Tensor>>,
    how: &'static str,
    params: Box<[usize]>,
}

/// One cached form: the constants it came from and the form, all held weakly.
struct Entry {
    source: Weak<Tensor>,
    others: Vec<Weak<Tensor>>,
    packed: Weak<dyn Any + Send + Sync>,
}

impl Entry {
    /// Whether the entry was made from `source` and `others` (the same tensors, all live).
    fn made_from(&self, source: &Arc<Tensor>, others: &[&Arc<Tensor>]) -> bool {
        let same =
            |w: &Weak<Tensor>, t: &Arc<Tensor>| w.upgrade().is_some_and(|w| Arc::ptr_eq(&w, t));
        same(&self.source, source)
            && self.others.len() == others.len()
            && self.others.iter().zip(others).all(|(w, t)| same(w, t))
    }

    /// Whether every constant it came from and the form are still live.
    fn live(&self) -> bool {
        self.packed.strong_count() > 0
            && self.source.strong_count() > 0
            && self.others.iter().all(|o| o.strong_count() > 0)
    }
}

/// A cache of packed constant operands (any packed or transformed form of a constant: GEMM
/// panels, a convolution's Winograd-domain weights, int8 weights with their folded
/// requantization), with counts of packings and reuses.
#[derive(Default)]
pub struct PackedWeights {
    entries: Mutex<HashMap<Key, Entry>>,
    packed: AtomicU64,
    reused: AtomicU64,
    /// The same counts per kind of packing.
    kinds: Mutex<HashMap<&'static str, PackingStats>>,
    /// Derived constants by address ([`derived`]).
    origins: Mutex<HashMap<usize, Origin>>,
}

impl std::fmt::Debug for PackedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct("PackedWeights")
            .field("packed", &s.packed)
            .field("reused", &s.reused)
            .finish()
    }
}

/// How often constant operands were packed and how often a packed one was reused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackingStats {
    /// Operands packed (a miss of the cache, or a creation outside it).
    pub packed: u64,
    /// Workloads that took an operand another workload had already packed.
    pub reused: u64,
}

impl PackedWeights {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counts so far.
    pub fn stats(&self) -> PackingStats {
        PackingStats {
            packed: self.packed.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
        }
    }

    /// The counts so far per kind of packing (`"matmul_b"`, `"conv_winograd_f4"`,
    /// `"qconv_nhwc_b"`, ...), sorted by kind.
    pub fn stats_by_kind(&self) -> Vec<(&'static str, PackingStats)> {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = kinds.iter().map(|(k, s)| (*k, *s)).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }

    /// Note that `derived` was made from `source` (and `inputs`) by `how` with `params`.
    fn note_derived(
        &self,
        derived: &Arc<Tensor>,
        source: &Arc<Tensor>,
        inputs: &[&Arc<Tensor>],
        how: &'static str,
        params: &[usize],
    ) {
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        origins.retain(|_, o| o.derived.strong_count() > 0);
        origins.insert(
            Arc::as_ptr(derived) as usize,
            Origin {
                derived: Arc::downgrade(derived),
                source: Arc::downgrade(source),
                inputs: inputs.iter().map(|t| Arc::downgrade(t)).collect(),
                how,
                params: params.into(),
            },
        );
    }

    /// The original of a derived constant and the derivation's part of the key (`None`,
    /// `None` for a constant not derived, or whose original or inputs are gone).
    #[allow(clippy::type_complexity)]
    fn origin_of(
        &self,
        t: &Arc<Tensor>,
    ) -> (Option<Arc<Tensor>>, Option<(&'static str, Box<[usize]>)>) {
        let origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = origins.get(&(Arc::as_ptr(t) as usize)) else {
            return (None, None);
        };
        let same = o.derived.upgrade().is_some_and(|d| Arc::ptr_eq(&d, t));
        let (Some(source), true) = (o.source.upgrade(), same) else {
            return (None, None);
        };
        let mut how: Vec<usize> = o.params.to_vec();
        for input in &o.inputs {
            match input.upgrade() {
                Some(i) => how.push(Arc::as_ptr(&i) as usize),
                None => return (None, None),
            }
        }
        (Some(source), Some((o.how, how.into())))
    }

    /// Count a packing (`reused` false) or a reuse of `kind`.
    fn count(&self, kind: &'static str, reused: bool) {
        let total = if reused { &self.reused } else { &self.packed };
        total.fetch_add(1, Ordering::Relaxed);
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let s = kinds.entry(kind).or_default();
        if reused {
            s.reused += 1;
        } else {
            s.packed += 1;
        }
    }

    /// The form packed from `source` (and `others`) as `kind` with `params`: the cached
    /// one while any workload still holds it, else `pack()`'s result, cached.
    fn get_or_pack<T: Any + Send + Sync>(
        &self,
        source: &Arc<Tensor>,
        others: &[&Arc<Tensor>],
        kind: &'static str,
        params: &[usize],
        pack: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let (origin, derivation) = self.origin_of(source);
        let source = origin.as_ref().unwrap_or(source);
        let key = Key {
            tensor: Arc::as_ptr(source) as usize,
            kind,
            form: TypeId::of::<T>(),
            params: params.into(),
            options: options::current(),
            derivation,
            others: others.iter().map(|t| Arc::as_ptr(t) as usize).collect(),
        };
        {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = entries.get(&key) {
                let same = e.made_from(source, others);
                let live = e.packed.upgrade().and_then(|p| p.downcast::<T>().ok());
                if let (true, Some(p)) = (same, live) {
                    drop(entries);
                    self.count(kind, true);
                    return Ok(p);
                }
            }
        }
        // Packed outside the lock: two creations racing for one operand may both pack it
        // (the later one's is kept); neither waits on the other's packing.
        let packed = Arc::new(pack()?);
        self.count(kind, false);
        let erased: Arc<dyn Any + Send + Sync> = packed.clone();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| e.live());
        entries.insert(
            key,
            Entry {
                source: Arc::downgrade(source),
                others: others.iter().map(|t| Arc::downgrade(t)).collect(),
                packed: Arc::downgrade(&erased),
            },
        );
        Ok(packed)
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<PackedWeights>>> = const { RefCell::new(None) };
}

/// Run `f` with `cache` as the packed-weights cache of this thread's workload creations
/// (restored afterwards, also when calls nest).
pub fn scoped<R>(cache: &Arc<PackedWeights>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<PackedWeights>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(cache.clone())));
    f()
}

/// The form `pack` makes from the constant `source`, as `kind` with `params` (everything
/// else the form depends on besides the constant's values and the backend options: shapes,
/// geometry, tile layout, quantization parameters as bits): shared through the cache
/// [`scoped`] installed, or made afresh. Any type can be cached; `kind` names the packing
/// (one kind, one meaning of `params`).
pub(crate) fn shared<T: Any + Send + Sync>(
    source: &Arc<Tensor>,
    kind: &'static str,
    params: &[usize],
    pack: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    shared_from(source, &[], kind, params, pack)
}

/// [`shared`] for a form made from several constants: `source` and `others` (all held
/// weakly by the entry, all part of its key by identity).
pub(crate) fn shared_from<T: Any + Send + Sync>(
    source: &Arc<Tensor>,
    others: &[&Arc<Tensor>],
    kind: &'static str,
    params: &[usize],
    pack: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    match CURRENT.with(|c| c.borrow().clone()) {
        Some(cache) => cache.get_or_pack(source, others, kind, params, pack),
        None => Ok(Arc::new(pack()?)),
    }
}

/// Note that the constant `derived` was computed from the constant `source` (and the
/// constants `inputs`) by `how` with `params` (every other value it depends on), so that
/// [`shared`] keys its packings by `source` and the derivation: a constant folded anew in
/// every plan (a BatchNormalization folded into a convolution's weights) is then packed
/// once for all of them. Outside a cache's scope nothing is noted.
pub(crate) fn derived(
    derived: &Arc<Tensor>,
    source: &Arc<Tensor>,
    inputs: &[&Arc<Tensor>],
    how: &'static str,
    params: &[usize],
) {
    if let Some(cache) = CURRENT.with(|c| c.borrow().clone()) {
        cache.note_derived(derived, source, inputs, how, params);
    }
}

/// A GEMM B operand packed from the constant `source` ([`shared`] for [`Packed`]).
pub(crate) fn packed(
    source: &Arc<Tensor>,
    kind: &'static str,
    params: [usize; 4],
    pack: impl FnOnce() -> Result<Packed>,
) -> Result<Arc<Packed>> {
    shared(source, kind, &params, pack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::MatView;
    use backplane_core::{DataType, TensorInfo};

    fn weight(values: &[f32], k: usize, n: usize) -> Arc<Tensor> {
        let info = TensorInfo::new(DataType::F32, vec![k, n]);
        let v: Vec<f64> = values.iter().map(|&x| f64::from(x)).collect();
        Arc::new(Tensor::from_f64_values(info, &v).unwrap_or_else(|e| panic!("{e}")))
    }

    fn pack_of(t: &Tensor, k: usize, n: usize) -> Result<Packed> {
        let data = t.as_slice::<f32>()?;
        Ok(Packed::pack_b(k, n, MatView { data, rs: n, cs: 1 }))
    }

    /// The same constant and parameters pack once while the first operand lives; other
    /// parameters, another constant or no cache pack again.
    #[test]
    fn one_constant_is_packed_once_per_parameters() {
        let cache = Arc::new(PackedWeights::new());
        let w = weight(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3);
        let other = weight(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3);
        let (a, b, c, d) = scoped(&cache, || {
            let a = packed(&w, "b", [2, 3, 0, 0], || pack_of(&w, 2, 3))?;
            let b = packed(&w, "b", [2, 3, 0, 0], || pack_of(&w, 2, 3))?;
            let c = packed(&w, "b", [2, 3, 1, 0], || pack_of(&w, 2, 3))?;
            let d = packed(&other, "b", [2, 3, 0, 0], || pack_of(&other, 2, 3))?;
            Ok::<_, backplane_backend_api::BackendError>((a, b, c, d))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c) && !Arc::ptr_eq(&a, &d));
        assert_eq!(
            cache.stats(),
            PackingStats {
                packed: 3,
                reused: 1
            }
        );
        // Once no workload holds the operand, it is packed again.
        drop((a, b));
        scoped(&cache, || {
            packed(&w, "b", [2, 3, 0, 0], || pack_of(&w, 2, 3))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cache.stats().packed, 4);
        // Outside a scope nothing is counted.
        packed(&w, "b", [2, 3, 0, 0], || pack_of(&w, 2, 3)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cache.stats().packed, 4);
        drop((c, d));
    }

    /// Any form can be cached: forms of other types under one kind and parameters are kept
    /// apart, and the options in force are part of the key.
    #[test]
    fn forms_are_keyed_by_type_and_options() {
        let cache = Arc::new(PackedWeights::new());
        let w = weight(&[1.0, 2.0, 3.0, 4.0], 2, 2);
        let run = || {
            scoped(&cache, || {
                let a = shared(&w, "conv", &[2, 2, 7], || Ok(vec![1u8, 2]))?;
                let b = shared(&w, "conv", &[2, 2, 7], || Ok(vec![3.0f32]))?;
                let c = shared(&w, "conv", &[2, 2, 7], || Ok(vec![9u8]))?;
                Ok::<_, backplane_backend_api::BackendError>((a, b, c))
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let (a, b, c) = run();
        assert!(Arc::ptr_eq(&a, &c), "one form of one type is reused");
        assert_eq!((a.as_slice(), b.as_slice()), (&[1u8, 2][..], &[3.0f32][..]));
        assert_eq!(
            cache.stats(),
            PackingStats {
                packed: 2,
                reused: 1
            }
        );
        let other = CpuAccOptions {
            winograd: false,
            ..CpuAccOptions::default()
        };
        let (d, _, _) = options::scoped(other, run);
        assert!(!Arc::ptr_eq(&a, &d), "other options pack again");
        assert_eq!(
            cache.stats(),
            PackingStats {
                packed: 4,
                reused: 2
            }
        );
        drop((a, b, c, d));
    }

    /// A form made from several constants is shared only by creations from the same ones:
    /// another second constant (equal values, another tensor) makes its own, and one whose
    /// second constant has gone is made again.
    #[test]
    fn forms_of_several_constants_are_keyed_by_all_of_them() {
        let cache = Arc::new(PackedWeights::new());
        let w = weight(&[1.0, 2.0], 1, 2);
        let (a, b) = (weight(&[3.0], 1, 1), weight(&[3.0], 1, 1));
        let form = |other: &Arc<Tensor>| {
            scoped(&cache, || {
                shared_from(&w, &[other], "two", &[1], || {
                    Ok(vec![other.as_slice::<f32>()?[0]])
                })
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let (x, y, z) = (form(&a), form(&a), form(&b));
        assert!(Arc::ptr_eq(&x, &y), "the same constants share one form");
        assert!(
            !Arc::ptr_eq(&x, &z),
            "another second constant makes its own"
        );
        assert_eq!(
            cache.stats(),
            PackingStats {
                packed: 2,
                reused: 1
            }
        );
        // Without its second constant the entry no longer matches anything.
        drop((b, z));
        let c = weight(&[4.0], 1, 1);
        let v = form(&c);
        assert_eq!(v.as_slice(), &[4.0]);
        assert_eq!(cache.stats().packed, 3);
        drop((x, y, v));
    }

    /// Constants derived anew from one original with the same inputs and parameters share
    /// one packing; another parameter, or no note, packs again.
    #[test]
    fn derived_constants_are_keyed_by_their_original() {
        let cache = Arc::new(PackedWeights::new());
        let w = weight(&[1.0, 2.0, 3.0, 4.0], 2, 2);
        let scale = weight(&[2.0, 3.0], 1, 2);
        let form = |t: &Arc<Tensor>, eps: Option<usize>| {
            scoped(&cache, || {
                if let Some(eps) = eps {
                    derived(t, &w, &[&scale], "batch_norm", &[eps]);
                }
                shared(t, "conv", &[2], || Ok(t.as_slice::<f32>()?.to_vec()))
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        // Two plans' folds: equal values, new tensors.
        let (one, two) = (
            weight(&[2.0, 6.0, 6.0, 12.0], 2, 2),
            weight(&[2.0, 6.0, 6.0, 12.0], 2, 2),
        );
        let a = form(&one, Some(1));
        let b = form(&two, Some(1));
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second fold reuses the first's packing"
        );
        let c = form(&weight(&[0.0; 4], 2, 2), Some(2));
        assert!(
            !Arc::ptr_eq(&a, &c),
            "another epsilon is another derivation"
        );
        let d = form(&weight(&[2.0, 6.0, 6.0, 12.0], 2, 2), None);
        assert!(!Arc::ptr_eq(&a, &d), "a constant with no note is its own");
        assert_eq!(
            cache.stats(),
            PackingStats {
                packed: 3,
                reused: 1
            }
        );
    }
}

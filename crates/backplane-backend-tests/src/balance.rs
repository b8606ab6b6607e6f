//! Balance checks: a backend's memory managers are acquired and released in pairs, and its
//! tensor handles are all destroyed (and, for a loaded shared object, unmapped) once the
//! network that used them is unloaded.
//!
//! The backend under test is wrapped in [`Counting`], which forwards every call and counts
//! acquire/release, handle creation/destruction and mappings, so the check works on any
//! [`Backend`] value: compiled in or a loaded plugin's adapter. The wrapped backend runs in a
//! runtime of its own (the builtin backend and nothing else), on claimed sweep cases.

use crate::report::{Outcome, Report};
use crate::sweeps::{network, Rng, FAMILIES};
use backplane::backend_api::{
    Backend, BackendContext, BackendId, BackendOptions, BackendVersion, Capabilities,
    CustomAllocator, FactoryId, FactoryProperties, LayerDesc, LayerSupport, MemoryManager,
    OptimizationViews, Result, SubgraphView, Support, TensorHandle, TensorHandleFactory,
    TensorHandleFactoryRegistry, WorkloadFactory,
};
use backplane::core::{TensorInfo, TensorView, TensorViewMut};
use backplane::{OptimizerOptions, Runtime, RuntimeBuilder, Tensor};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The suite's name in reports (the checks are reported under the contract suite's name).
pub const SUITE: &str = "contract";

/// What the wrapped backend saw.
#[derive(Debug, Default)]
pub struct Counters {
    /// Memory managers created.
    pub managers: AtomicUsize,
    /// Successful `acquire` calls.
    pub acquires: AtomicUsize,
    /// `release` calls.
    pub releases: AtomicUsize,
    /// Set when a manager was released more often than acquired.
    pub release_without_acquire: AtomicBool,
    /// Tensor handles created by the backend's factories.
    pub handles_created: AtomicUsize,
    /// Those handles dropped.
    pub handles_dropped: AtomicUsize,
    /// `map`/`map_mut` calls on those handles.
    pub maps: AtomicUsize,
}

impl Counters {
    /// What is unbalanced once everything the backend made is gone, or `None`.
    pub fn imbalance(&self) -> Option<String> {
        let (a, r) = (
            self.acquires.load(Ordering::SeqCst),
            self.releases.load(Ordering::SeqCst),
        );
        let mut why = Vec::new();
        if self.release_without_acquire.load(Ordering::SeqCst) {
            why.push("a memory manager was released without being acquired".to_string());
        }
        if a != r {
            why.push(format!(
                "memory managers acquired {a} times, released {r} times"
            ));
        }
        let (c, d) = (
            self.handles_created.load(Ordering::SeqCst),
            self.handles_dropped.load(Ordering::SeqCst),
        );
        if c != d {
            why.push(format!("{c} tensor handles created, {d} destroyed"));
        }
        if why.is_empty() {
            None
        } else {
            Some(why.join("; "))
        }
    }
}

/// A backend that forwards to `inner` and counts into `counters`.
pub struct Counting {
    inner: Arc<dyn Backend>,
    counters: Arc<Counters>,
    /// The managers handed out, to give the inner backend back its own.
    managers: Mutex<Vec<Weak<CountingManager>>>,
}

impl Counting {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Backend>, counters: Arc<Counters>) -> Self {
        Counting {
            inner,
            counters,
            managers: Mutex::new(Vec::new()),
        }
    }

    /// The inner manager behind one of ours (a backend may only accept its own).
    fn unwrap_manager(&self, mm: Arc<dyn MemoryManager>) -> Arc<dyn MemoryManager> {
        let wanted = Arc::as_ptr(&mm).cast::<u8>();
        let list = self.managers.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .filter_map(Weak::upgrade)
            .find(|m| Arc::as_ptr(m).cast::<u8>() == wanted)
            .map(|m| m.inner.clone())
            .unwrap_or(mm)
    }

    fn wrap_manager(&self, inner: Arc<dyn MemoryManager>) -> Arc<dyn MemoryManager> {
        self.counters.managers.fetch_add(1, Ordering::SeqCst);
        let m = Arc::new(CountingManager {
            inner,
            counters: self.counters.clone(),
            held: AtomicUsize::new(0),
        });
        self.managers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&m));
        m
    }
}

impl Backend for Counting {
    fn id(&self) -> BackendId {
        self.inner.id()
    }
    fn api_version(&self) -> BackendVersion {
        self.inner.api_version()
    }
    fn version(&self) -> String {
        self.inner.version()
    }
    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        self.inner.layer_support()
    }
    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        self.inner
            .create_memory_manager()
            .map(|m| self.wrap_manager(m))
    }
    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        let inner = memory_manager.map(|m| self.unwrap_manager(m));
        self.inner.create_workload_factory(inner)
    }
    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> Result<Option<Box<dyn BackendContext>>> {
        self.inner.create_backend_context(options)
    }
    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        self.inner.optimize_subgraph(subgraph)
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        let mut own = TensorHandleFactoryRegistry::new();
        self.inner.register_tensor_handle_factories(&mut own);
        for id in own.ids() {
            if let Some(f) = own.get(&id) {
                registry.register_factory(Arc::new(CountingFactory {
                    inner: f.clone(),
                    counters: self.counters.clone(),
                }));
            }
        }
        for m in own.memory_managers() {
            registry.register_memory_manager(self.wrap_manager(m.clone()));
        }
    }
    fn use_custom_allocator(
        &self,
        allocator: Arc<dyn CustomAllocator>,
    ) -> std::result::Result<(), String> {
        self.inner.use_custom_allocator(allocator)
    }
    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        self.inner.handle_factory_preferences()
    }
}

/// A memory manager that counts acquire and release.
struct CountingManager {
    inner: Arc<dyn MemoryManager>,
    counters: Arc<Counters>,
    /// Acquisitions not yet released.
    held: AtomicUsize,
}

impl MemoryManager for CountingManager {
    fn acquire(&self) -> Result<()> {
        self.inner.acquire()?;
        self.held.fetch_add(1, Ordering::SeqCst);
        self.counters.acquires.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn release(&self) {
        let was = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| h.checked_sub(1));
        if was.is_err() {
            self.counters
                .release_without_acquire
                .store(true, Ordering::SeqCst);
        }
        self.counters.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release();
    }
}

/// A tensor-handle factory whose handles are counted.
struct CountingFactory {
    inner: Arc<dyn TensorHandleFactory>,
    counters: Arc<Counters>,
}

impl TensorHandleFactory for CountingFactory {
    fn id(&self) -> FactoryId {
        self.inner.id()
    }
    fn properties(&self) -> FactoryProperties {
        self.inner.properties()
    }
    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        let inner = self.inner.create_tensor_handle(info)?;
        self.counters.handles_created.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(CountingHandle {
            inner,
            counters: self.counters.clone(),
        }))
    }
}

/// A handle that counts its mappings and its destruction. `as_any` reaches the inner handle,
/// so a backend's workloads still recognise their own handles.
struct CountingHandle {
    inner: Box<dyn TensorHandle>,
    counters: Arc<Counters>,
}

impl TensorHandle for CountingHandle {
    fn info(&self) -> &TensorInfo {
        self.inner.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        self.counters.maps.fetch_add(1, Ordering::SeqCst);
        self.inner.map()
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        self.counters.maps.fetch_add(1, Ordering::SeqCst);
        self.inner.map_mut()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        self.inner.as_any_mut()
    }
}

impl Drop for CountingHandle {
    fn drop(&mut self) {
        self.counters.handles_dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Run the balance checks on up to `cases` claimed sweep cases of `backend` into `report`.
pub fn run(runtime: &Runtime, backend: &BackendId, seed: u64, cases: usize, report: &mut Report) {
    let inner: Arc<dyn Backend> = match runtime.backend(backend) {
        Ok(b) => Arc::from(b),
        Err(e) => {
            report.record(
                SUITE,
                "memory and handles balanced",
                "the backend object",
                Outcome::Failed {
                    why: format!("cannot create the backend: {e}"),
                    worst: None,
                },
            );
            return;
        }
    };
    let plugin_file = runtime
        .dynamic_backends()
        .backend(backend)
        .map(|b| b.file.clone());
    let support = inner.layer_support();
    let mut done = 0;
    'families: for (fi, (family, generate)) in FAMILIES.iter().enumerate() {
        for i in 0..4u64 {
            if done >= cases {
                break 'families;
            }
            let case_seed = seed.wrapping_add(8_000_000 + fi as u64 * 100 + i);
            let Ok(case) = generate(&mut Rng::new(case_seed)) else {
                continue;
            };
            let Ok((net, feed)) = network(&case) else {
                continue;
            };
            let Some(layer) = net.layers().first() else {
                continue;
            };
            if support.is_layer_supported(&LayerDesc::from_layer(&net, layer)) != Support::Supported
            {
                continue;
            }
            done += 1;
            let name = format!("{family} (case seed {case_seed})");
            let outcome = balanced(&inner, backend, &net, &feed, plugin_file.as_deref());
            report.record(SUITE, "memory and handles balanced", &name, outcome);
            // One claimed case per family is enough.
            continue 'families;
        }
    }
}

/// Load `net` on the wrapped backend in a runtime of its own, run it twice, unload it, drop
/// the runtime, and check the counts (and, for a plugin, that none of its handles is still
/// mapped).
fn balanced(
    inner: &Arc<dyn Backend>,
    id: &BackendId,
    net: &backplane::Network,
    feed: &[(String, Tensor)],
    plugin_file: Option<&std::path::Path>,
) -> Outcome {
    let fail = |why: String| Outcome::Failed { why, worst: None };
    let counters = Arc::new(Counters::default());
    let mapped_before = plugin_file.map(backplane::runtime::dynamic::mapped_handles);
    let result = (|| -> std::result::Result<(), String> {
        let wrapped = inner.clone();
        let c = counters.clone();
        let factory: backplane::BackendFactory =
            Arc::new(move || Box::new(Counting::new(wrapped.clone(), c.clone())));
        let rt = RuntimeBuilder::empty()
            .backend(id.clone(), factory)
            .and_then(|b| b.build())
            .map_err(|e| format!("a runtime with the wrapped backend: {e}"))?;
        let optimized = rt
            .optimize(net, &OptimizerOptions::new(vec![id.clone()]))
            .map_err(|e| format!("optimize of a claimed layer: {e}"))?;
        let nid = rt
            .load_network(optimized)
            .map_err(|e| format!("load: {e}"))?;
        let named: Vec<(&str, &Tensor)> = feed.iter().map(|(n, t)| (n.as_str(), t)).collect();
        for _ in 0..2 {
            rt.execute(nid, &named)
                .map_err(|e| format!("execute: {e}"))?;
        }
        rt.unload_network(nid).map_err(|e| format!("unload: {e}"))?;
        Ok(())
    })();
    if let Err(why) = result {
        return fail(why);
    }
    if let Some(why) = counters.imbalance() {
        return fail(why);
    }
    if let (Some(file), Some(before)) = (plugin_file, mapped_before) {
        let after = backplane::runtime::dynamic::mapped_handles(file);
        if after != before {
            return fail(format!(
                "the plugin's handles mapped before: {before}, after unloading: {after} (map and unmap not paired)"
            ));
        }
    }
    Outcome::Passed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manager released once more than acquired is reported.
    #[test]
    fn an_unpaired_release_is_an_imbalance() {
        struct Nothing;
        impl MemoryManager for Nothing {
            fn acquire(&self) -> Result<()> {
                Ok(())
            }
            fn release(&self) {}
        }
        let counters = Arc::new(Counters::default());
        let m = CountingManager {
            inner: Arc::new(Nothing),
            counters: counters.clone(),
            held: AtomicUsize::new(0),
        };
        assert!(m.acquire().is_ok());
        m.release();
        assert_eq!(counters.imbalance(), None);
        m.release();
        let why = counters.imbalance().unwrap_or_default();
        assert!(why.contains("released without being acquired"), "{why}");
        assert!(why.contains("acquired 1 times, released 2 times"), "{why}");
    }
}

//! GpuAcc: backplane's GPU backend, on `wgpu` over Vulkan.
//!
//! Tensors between two GPU layers live in device memory (`Backplane/GpuAcc/Device`); border
//! tensors in staging memory (`Backplane/GpuAcc/Staging`), which the runtime copies to and
//! from host memory once per border ([`memory`]). Layers are planned in one exhaustive match
//! ([`plan`]) into WGSL compute steps ([`kernels`]); layers it does not run fall to the next
//! backend. `optimize_subgraph` fuses an activation into the Conv, Gemm or MatMul before it
//! ([`fusion`]). The device is opened on first use with our own adapter selection ([`device`]):
//! a GPU is preferred; a software adapter (lavapipe) only with `allow_software=true`.
//! Without a usable adapter the backend stays registered and refuses every layer with the
//! reason ("no GPU adapter: ..."), so the runtime never fails because of it.

pub mod device;
pub mod error;
pub mod fusion;
pub mod kernels;
pub mod memory;
pub mod options;
pub mod plan;
mod timing;
pub mod workload;

pub use device::{AdapterDesc, GpuDevice, GpuStats};
pub use error::GpuError;
pub use memory::{DEVICE_FACTORY, STAGING_FACTORY};
pub use options::GpuAccOptions;

use backplane_backend_api::{
    Backend, BackendContext, BackendError, BackendId, BackendOptions, Capabilities,
    CapabilityValue, FactoryId, LayerDesc, LayerSupport, MemoryManager, NetworkId,
    OptimizationViews, Result, SubgraphView, Support, TensorHandleFactoryRegistry, Workload,
    WorkloadFactory,
};
use std::sync::{Arc, Mutex};

/// The backend id.
pub const GPU_ACC_ID: &str = "GpuAcc";

/// The options and, once opened, the device (or why there is none).
#[derive(Default)]
struct Shared {
    options: GpuAccOptions,
    device: Option<std::result::Result<Arc<GpuDevice>, String>>,
}

/// The GPU backend. Clones share the options and the device, so the options a runtime hands
/// to one backend object's context reach the others its registry factory creates, and a
/// runtime opens one device.
#[derive(Clone, Default)]
pub struct GpuAccBackend {
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for GpuAccBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuAccBackend").finish_non_exhaustive()
    }
}

impl GpuAccBackend {
    /// The backend with these options (the runtime's backend options apply on top).
    pub fn with_options(options: GpuAccOptions) -> Self {
        GpuAccBackend {
            shared: Arc::new(Mutex::new(Shared {
                options,
                device: None,
            })),
        }
    }

    /// A registry factory: every backend object it creates shares options and device.
    pub fn factory() -> impl Fn() -> Box<dyn Backend> + Send + Sync + 'static {
        let shared = GpuAccBackend::default();
        move || Box::new(shared.clone()) as Box<dyn Backend>
    }

    /// The device, opened on first use; the error says why there is none.
    pub fn device(&self) -> std::result::Result<Arc<GpuDevice>, String> {
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if s.device.is_none() {
            s.device = Some(
                device::open(&s.options)
                    .map(Arc::new)
                    .map_err(|e| e.to_string()),
            );
        }
        match &s.device {
            Some(d) => d.clone(),
            None => Err("no GPU adapter: the device was not opened".into()),
        }
    }

    /// The device, if one is open (never opens one).
    fn opened_device(&self) -> Option<Arc<GpuDevice>> {
        let s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        match &s.device {
            Some(Ok(d)) => Some(d.clone()),
            _ => None,
        }
    }

    /// The device's counters (submits, layers, dispatches, bind groups, uploads); zero when no
    /// device is open.
    pub fn stats(&self) -> GpuStats {
        let s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        match &s.device {
            Some(Ok(d)) => d.stats(),
            _ => GpuStats::default(),
        }
    }

    /// The options in force.
    pub fn options(&self) -> GpuAccOptions {
        self.shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .options
            .clone()
    }
}

/// GpuAcc's context: when an execution ends, it submits the work GPU layers recorded that no
/// border had submitted yet (the layers after the last read-back, whose outputs nobody on
/// the host reads), so no recorded work waits for the next execution; when profiling with
/// timestamp queries, the execution's layer times are kept for the profile's notes.
struct GpuContext(GpuAccBackend);

impl BackendContext for GpuContext {
    fn after_execute_network(&self, _id: NetworkId) -> Result<()> {
        match self.0.opened_device() {
            Some(device) => device.end_execution().map_err(BackendError::from),
            None => Ok(()),
        }
    }
}

/// Layer support: the device exists and the plan succeeds.
struct GpuSupport(GpuAccBackend);

impl LayerSupport for GpuSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        let device = match self.0.device() {
            Ok(d) => d,
            Err(e) => return Support::no(e),
        };
        let half = device.shader_f16.as_ref().map_err(String::as_str).copied();
        match plan::plan(layer, self.0.options().tiles, half) {
            Ok(_) => Support::Supported,
            Err(reason) => Support::no(reason),
        }
    }
}

/// Creates GpuAcc's workloads on the backend's device, in the `tiles` layout option.
struct GpuFactory(Arc<GpuDevice>, kernels::tiles::Tiles);

impl WorkloadFactory for GpuFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        let half = self.0.shader_f16.as_ref().map_err(String::as_str).copied();
        let planned =
            plan::plan(layer, self.1, half).map_err(|reason| BackendError::Unsupported {
                layer: layer.name.clone(),
                op: layer.op.name().to_string(),
                reason,
            })?;
        Ok(Box::new(workload::GpuWorkload::new(
            self.0.clone(),
            layer,
            planned.steps,
        )?))
    }
}

impl Backend for GpuAccBackend {
    fn id(&self) -> BackendId {
        BackendId::new(GPU_ACC_ID).unwrap_or_else(|_| unreachable!("a valid constant id"))
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(GpuSupport(self.clone()))
    }

    fn create_workload_factory(
        &self,
        _memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        let device = self.device().map_err(BackendError::Other)?;
        Ok(Box::new(GpuFactory(device, self.options().tiles)))
    }

    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> Result<Option<Box<dyn BackendContext>>> {
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let merged = s.options.merged(options).map_err(BackendError::Other)?;
        if merged != s.options {
            s.options = merged;
            s.device = None;
        }
        Ok(Some(Box::new(GpuContext(self.clone()))))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        let support = GpuSupport(self.clone());
        fusion::optimize(subgraph, |desc| {
            support.is_layer_supported(desc).is_supported()
        })
    }

    fn capabilities(&self) -> Capabilities {
        let (adapter, stamps, profiling, f16) = match self.device() {
            Ok(d) => {
                let f16 = match &d.shader_f16 {
                    Ok(()) => "yes".to_string(),
                    Err(why) => format!("no ({why})"),
                };
                (
                    d.adapter.to_string(),
                    d.timestamp_query,
                    d.profiling_note(),
                    f16,
                )
            }
            Err(e) => (e.clone(), false, e.clone(), format!("no ({e})")),
        };
        let stats = self.stats();
        let count = |n: u64| CapabilityValue::Int(i64::try_from(n).unwrap_or(i64::MAX));
        Capabilities::default()
            .with("Adapter", CapabilityValue::Text(adapter))
            .with("Submits", count(stats.submits))
            .with("GpuLayerRuns", count(stats.layers))
            .with("Dispatches", count(stats.dispatches))
            .with("BindGroups", count(stats.bind_groups))
            .with("PendingLayers", count(stats.pending_layers))
            .with("UploadedBytes", count(stats.uploaded_bytes))
            .with("TimestampQuery", CapabilityValue::Bool(stamps))
            .with("F16", CapabilityValue::Text(f16))
            .with("Profiling", CapabilityValue::Text(profiling))
            .with("NonConstWeights", CapabilityValue::Bool(true))
            .with("DeviceMemory", CapabilityValue::Bool(true))
    }

    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        if let Ok(device) = self.device() {
            registry.register_factory(Arc::new(memory::DeviceFactory(device.clone())));
            registry.register_factory(Arc::new(memory::StagingFactory(device)));
        }
    }

    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        vec![
            memory::factory_id(DEVICE_FACTORY),
            memory::factory_id(STAGING_FACTORY),
        ]
    }
}

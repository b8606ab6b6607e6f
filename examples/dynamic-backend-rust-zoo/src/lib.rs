//! A test fixture for the loader: a Rust dynamic backend (id `RustZoo`, CpuRef inside) that
//! panics where its backend option `panic` says: `create` (in its constructor, i.e. the
//! factory), `support` (in layer support), `optimize` (in `optimize_subgraph`) or `execute`
//! (in every workload). It reports the
//! host information it received as capabilities (`PluginPath`, `HostAbi`, and `option.NAME`
//! for each option), so tests can check what crossed the boundary.

use backplane_backend_api::{
    Backend, BackendId, Capabilities, CapabilityValue, LayerDesc, LayerSupport, MemoryManager,
    Result, Support, Workload, WorkloadFactory,
};
use backplane_core::{TensorView, TensorViewMut};
use backplane_cpu_ref::CpuRefBackend;
use backplane_plugin::backend_api::core as backplane_core;
use backplane_plugin::sdk::Host;
use std::sync::Arc;

/// The fixture backend.
#[derive(Debug, Clone)]
pub struct RustZoo {
    host: Host,
    panic: String,
}

impl RustZoo {
    /// The constructor the SDK calls with the host's information.
    #[allow(clippy::panic)]
    pub fn create(host: &Host) -> std::result::Result<RustZoo, String> {
        let panic = host.options.get("panic").unwrap_or("").to_string();
        if panic == "create" {
            panic!("RustZoo was told to panic in its factory");
        }
        if panic == "fail" {
            return Err("RustZoo was told to fail in its factory".into());
        }
        Ok(RustZoo {
            host: host.clone(),
            panic,
        })
    }
}

struct ZooSupport(bool);

impl LayerSupport for ZooSupport {
    #[allow(clippy::panic)]
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        if self.0 {
            panic!("RustZoo was told to panic in layer support");
        }
        CpuRefBackend.layer_support().is_layer_supported(layer)
    }
}

struct ZooFactory(Box<dyn WorkloadFactory>, bool);

impl WorkloadFactory for ZooFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        Ok(Box::new(ZooWorkload(
            self.0.create_workload(layer)?,
            self.1,
        )))
    }
}

struct ZooWorkload(Box<dyn Workload>, bool);

impl Workload for ZooWorkload {
    #[allow(clippy::panic)]
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        if self.1 {
            panic!("RustZoo was told to panic in execute");
        }
        self.0.execute(inputs, outputs)
    }
}

impl Backend for RustZoo {
    #[allow(clippy::expect_used)]
    fn id(&self) -> BackendId {
        // A constant made of ASCII letters: always valid.
        BackendId::new("RustZoo").expect("RustZoo is a valid backend id")
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(ZooSupport(self.panic == "support"))
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        CpuRefBackend.create_memory_manager()
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(ZooFactory(
            CpuRefBackend.create_workload_factory(memory_manager)?,
            self.panic == "execute",
        )))
    }

    #[allow(clippy::panic)]
    fn optimize_subgraph(
        &self,
        subgraph: &backplane_backend_api::SubgraphView<'_>,
    ) -> backplane_backend_api::OptimizationViews {
        if self.panic == "optimize" {
            panic!("RustZoo was told to panic in optimize_subgraph");
        }
        backplane_backend_api::OptimizationViews::untouched(subgraph)
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::default()
            .with(
                "PluginPath",
                CapabilityValue::Text(self.host.plugin_path.display().to_string()),
            )
            .with(
                "HostAbi",
                CapabilityValue::Text(self.host.host_abi.to_string()),
            )
            .with("Abi", CapabilityValue::Text(self.host.abi.to_string()));
        for (k, v) in &self.host.options.values {
            caps = caps.with(&format!("option.{k}"), CapabilityValue::Text(v.clone()));
        }
        caps
    }
}

backplane_plugin::export_backend!(RustZoo, id = "RustZoo", create = RustZoo::create);

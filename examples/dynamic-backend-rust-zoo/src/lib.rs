//! A test fixture for the loader: a Rust dynamic backend (id `RustZoo`, CpuRef inside) that
//! panics where its backend option `panic` says: `create` (in its constructor, i.e. the
//! factory), `support` (in layer support), `optimize` (in `optimize_subgraph`) or `execute`
//! (in every workload). It reports the
//! host information it received as capabilities (`PluginPath`, `HostAbi`, and `option.NAME`
//! for each option), so tests can check what crossed the boundary.
//!
//! Its option `wrong` makes it a deliberately broken backend for the backend test kit:
//! `add` computes an Add whose output has an odd number of elements (more than one) as a
//! subtraction; `refusal` refuses Mul without giving a reason.

use backplane_backend_api::{
    Backend, BackendId, Capabilities, CapabilityValue, LayerDesc, LayerSupport, MemoryManager,
    Result, Support, Workload, WorkloadFactory,
};
use backplane_core::ops::BinaryOp;
use backplane_core::{Op, TensorView, TensorViewMut};
use backplane_cpu_ref::CpuRefBackend;
use backplane_plugin::backend_api::core as backplane_core;
use backplane_plugin::sdk::Host;
use std::sync::Arc;

/// The fixture backend.
#[derive(Debug, Clone)]
pub struct RustZoo {
    host: Host,
    panic: String,
    wrong: String,
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
            wrong: host.options.get("wrong").unwrap_or("").to_string(),
        })
    }
}

struct ZooSupport {
    panic: bool,
    silent_refusal: bool,
}

impl LayerSupport for ZooSupport {
    #[allow(clippy::panic)]
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        if self.panic {
            panic!("RustZoo was told to panic in layer support");
        }
        if self.silent_refusal && layer.op == Op::Binary(BinaryOp::Mul) {
            return Support::Unsupported(String::new());
        }
        CpuRefBackend.layer_support().is_layer_supported(layer)
    }
}

struct ZooFactory {
    inner: Box<dyn WorkloadFactory>,
    panic: bool,
    wrong_add: bool,
}

impl WorkloadFactory for ZooFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        let odd = layer
            .outputs
            .first()
            .is_some_and(|o| o.shape.elements() % 2 == 1 && o.shape.elements() > 1);
        let workload = if self.wrong_add && layer.op == Op::Binary(BinaryOp::Add) && odd {
            let mut sub = layer.clone();
            sub.op = Op::Binary(BinaryOp::Sub);
            self.inner.create_workload(&sub)?
        } else {
            self.inner.create_workload(layer)?
        };
        Ok(Box::new(ZooWorkload(workload, self.panic)))
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
        Arc::new(ZooSupport {
            panic: self.panic == "support",
            silent_refusal: self.wrong == "refusal",
        })
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        CpuRefBackend.create_memory_manager()
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(ZooFactory {
            inner: CpuRefBackend.create_workload_factory(memory_manager)?,
            panic: self.panic == "execute",
            wrong_add: self.wrong == "add",
        }))
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

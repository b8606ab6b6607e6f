//! Two backends in one network: a custom backend that runs only activations (reusing CpuRef's
//! kernels) and CpuRef for the rest. Shows registration, assignment, fallback and a
//! per-layer override.
//!
//! ```sh
//! cargo run -p backplane --example two_backends
//! ```

use backplane::backend_api::{
    Backend, BackendId, LayerDesc, LayerSupport, MemoryManager, Result, Support, WorkloadFactory,
};
use backplane::{ImportOptions, OptimizerOptions};
use std::path::PathBuf;
use std::sync::Arc;

/// A backend that claims only Relu layers and runs them with CpuRef's kernels.
struct ActivationsOnly;

struct ActivationSupport;

impl LayerSupport for ActivationSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        if layer.op.name() == "Relu" {
            backplane::cpu_ref::CpuRefBackend
                .layer_support()
                .is_layer_supported(layer)
        } else {
            Support::no(format!(
                "ActivationsOnly runs Relu only, not {}",
                layer.op.name()
            ))
        }
    }
}

impl Backend for ActivationsOnly {
    fn id(&self) -> BackendId {
        BackendId::new("ActivationsOnly").unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(ActivationSupport)
    }

    fn create_workload_factory(
        &self,
        mm: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        backplane::cpu_ref::CpuRefBackend.create_workload_factory(mm)
    }
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let runtime = backplane::RuntimeBuilder::new()
        .backend(
            BackendId::new("ActivationsOnly")?,
            Arc::new(|| Box::new(ActivationsOnly) as Box<dyn Backend>),
        )?
        .build()?;
    let network = backplane::load_onnx(
        &repo.join("models/digits/model.onnx"),
        &ImportOptions::default().with_dim("batch", 1),
    )?;

    // Prefer the custom backend; what it refuses falls back to CpuRef. Keep relu2 on CpuRef.
    let mut options = OptimizerOptions::new(vec![
        BackendId::new("ActivationsOnly")?,
        BackendId::new("CpuRef")?,
    ]);
    options
        .layer_backends
        .push(("relu2".into(), BackendId::new("CpuRef")?));
    let optimized = runtime.optimize(&network, &options)?;
    for (layer, backend) in optimized
        .network()
        .layers()
        .iter()
        .zip(optimized.assignment())
    {
        println!("{:<8} {:<20} -> {backend}", layer.name, layer.op.name());
    }

    let id = runtime.load_network(optimized)?;
    let image = backplane::npy::read_file(&repo.join("models/digits/samples/digit_4.npy"))?;
    let outputs = runtime.execute(id, &[("input", &image)])?;
    let probabilities = outputs[0].1.as_slice::<f32>()?;
    let best =
        (0..probabilities.len()).max_by(|&a, &b| probabilities[a].total_cmp(&probabilities[b]));
    println!("predicted digit: {best:?}");
    Ok(())
}

//! Shared test helpers: the repository root and comparing tensors with tolerances. (The op
//! table runs in the backend test kit, crates/backplane-backend-tests.)
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane::{DataType, Tensor, TensorInfo};
use std::path::PathBuf;
use std::sync::Arc;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compare `actual` with `expected` by the facade's one rule ([`backplane::compare`]).
pub fn compare(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    backplane::compare::compare(actual, expected, rtol, atol)
        .map(|_| ())
        .map_err(|m| m.message)
}

/// The case folders under `root` holding a `model.tflite` each (laid out as
/// testdata/tflite's: `input_<k>.npy`, `output_<k>.npy` beside it), sorted.
pub fn tflite_cases(root: &std::path::Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.tflite").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The tensors `<prefix>_0.npy`, `<prefix>_1.npy`, ... of a case folder, until one is missing.
pub fn read_npys(dir: &std::path::Path, prefix: &str) -> Vec<Tensor> {
    (0..)
        .map(|k| dir.join(format!("{prefix}_{k}.npy")))
        .take_while(|p| p.is_file())
        .map(|p| backplane::npy::read_file(&p).unwrap())
        .collect()
}

/// The dynamic BERT-tiny test model (testdata/dynamic/bert_tiny.onnx) served by `rt` with
/// these backends in order of preference.
pub fn bert_tiny_on<'r>(
    rt: &'r backplane::Runtime,
    backends: &[&str],
) -> backplane::DynamicNetwork<'r> {
    backplane::DynamicNetwork::from_file(
        rt,
        &repo().join("testdata/dynamic/bert_tiny.onnx"),
        &backplane::ImportOptions::default(),
        backplane::OptimizerOptions::new(
            backends
                .iter()
                .map(|b| backplane::BackendId::new(*b).unwrap())
                .collect(),
        ),
    )
    .unwrap()
}

/// BERT-shaped token ids `[1, seq]`: `(i·step + seq) mod 64`, so each length (and each
/// test's `step`) gives other ids.
pub fn token_ids(seq: usize, step: usize) -> Tensor {
    let values: Vec<f64> = (0..seq).map(|i| ((i * step + seq) % 64) as f64).collect();
    Tensor::from_f64_values(TensorInfo::new(DataType::I64, vec![1, seq]), &values).unwrap()
}

/// Maps a backend's support answers to the ones a test backend gives.
pub type SupportMap = Arc<
    dyn Fn(
            Arc<dyn backplane::backend_api::LayerSupport>,
        ) -> Arc<dyn backplane::backend_api::LayerSupport>
        + Send
        + Sync,
>;

/// A shipped backend under another name whose support answers pass through `support` (to
/// count, record or restrict them); everything else is `inner`'s.
#[derive(Clone)]
pub struct WithSupport {
    pub name: &'static str,
    pub inner: Arc<dyn backplane::Backend>,
    pub support: SupportMap,
}

impl WithSupport {
    /// A factory making this backend, to register it with a runtime.
    pub fn factory(self) -> backplane::BackendFactory {
        Arc::new(move || Box::new(self.clone()) as Box<dyn backplane::Backend>)
    }
}

impl backplane::Backend for WithSupport {
    fn id(&self) -> backplane::BackendId {
        backplane::BackendId::new(self.name).unwrap()
    }

    fn layer_support(&self) -> Arc<dyn backplane::backend_api::LayerSupport> {
        (self.support)(self.inner.layer_support())
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn backplane::backend_api::MemoryManager>> {
        self.inner.create_memory_manager()
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn backplane::backend_api::MemoryManager>>,
    ) -> backplane::backend_api::Result<Box<dyn backplane::backend_api::WorkloadFactory>> {
        self.inner.create_workload_factory(memory_manager)
    }

    fn create_backend_context(
        &self,
        options: &backplane::BackendOptions,
    ) -> backplane::backend_api::Result<Option<Box<dyn backplane::backend_api::BackendContext>>>
    {
        self.inner.create_backend_context(options)
    }

    fn optimize_subgraph(
        &self,
        subgraph: &backplane::backend_api::SubgraphView<'_>,
    ) -> backplane::backend_api::OptimizationViews {
        self.inner.optimize_subgraph(subgraph)
    }

    fn capabilities(&self) -> backplane::backend_api::Capabilities {
        self.inner.capabilities()
    }

    fn register_tensor_handle_factories(
        &self,
        registry: &mut backplane::backend_api::TensorHandleFactoryRegistry,
    ) {
        self.inner.register_tensor_handle_factories(registry)
    }

    fn handle_factory_preferences(&self) -> Vec<backplane::backend_api::FactoryId> {
        self.inner.handle_factory_preferences()
    }
}

/// A runtime with CpuRef and the given CpuAcc object (kept by the caller to read its packing
/// counts).
pub fn runtime_with(acc: &backplane::cpu_acc::CpuAccBackend) -> backplane::Runtime {
    let acc = acc.clone();
    let factory: backplane::BackendFactory =
        Arc::new(move || Box::new(acc.clone()) as Box<dyn backplane::Backend>);
    let cpu_ref: backplane::BackendFactory =
        Arc::new(|| Box::new(backplane::cpu_ref::CpuRefBackend) as Box<dyn backplane::Backend>);
    backplane::RuntimeBuilder::empty()
        .backend(backplane::BackendId::new("CpuRef").unwrap(), cpu_ref)
        .unwrap()
        .backend(backplane::BackendId::new("CpuAcc").unwrap(), factory)
        .unwrap()
        .build()
        .unwrap()
}

/// An ONNX dimension: a number, or else a named symbol.
pub fn onnx_dim(d: &str) -> backplane::onnx::proto::tensor_shape_proto::Dimension {
    use backplane::onnx::proto::tensor_shape_proto::{dimension::Value, Dimension};
    let value = match d.parse::<i64>() {
        Ok(v) => Value::DimValue(v),
        Err(_) => Value::DimParam(d.into()),
    };
    Dimension {
        value: Some(value),
        ..Default::default()
    }
}

/// A float tensor value-info `name` of dimensions `dims` (numbers or symbols).
pub fn onnx_f32_input(name: &str, dims: &[&str]) -> backplane::onnx::proto::ValueInfoProto {
    use backplane::onnx::proto::{type_proto, TensorShapeProto, TypeProto, ValueInfoProto};
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|d| onnx_dim(d)).collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

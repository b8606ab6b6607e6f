//! An example dynamic backend in Rust: the reference backend (CpuRef) exported through the C
//! ABI under its own id, `CpuRefDyn`, as Arm NN's RefDynamicBackend wraps its reference
//! backend.
//!
//! Two backend options show the ABI 1.2 parts (both off by default, so that `CpuRefDyn` is
//! exactly CpuRef):
//!
//! * `memory=device`: the tensors its layers compute live in its own "device" memory, a
//!   tensor-handle factory ([`DEVICE_FACTORY`], mappable) whose handles are allocations
//!   separate from the runtime's arena. The runtime copies tensors to and from it.
//! * `fuse=true`: `optimize_subgraph` replaces each Add whose only reader is a Relu by one
//!   layer, the custom op `CpuRefDyn:AddRelu`.
//!
//! Build it with `cargo build --release -p dynamic-backend-rust`, then install
//! `target/release/libbackplane_cpuref_dyn.so` under a name the runtime accepts, e.g.
//! `Backplane_CpuRefDyn_backend.so`, in a dynamic-backends directory.

use backplane_backend_api::{
    Backend, BackendError, BackendId, Capabilities, CapabilityValue, FactoryId, FactoryProperties,
    LayerDesc, LayerSupport, MemoryManager, OptimizationViews, ReplacementLayer, Result,
    SubgraphView, Substitution, Support, TensorHandle, TensorHandleFactory,
    TensorHandleFactoryRegistry, ValueRef, Workload, WorkloadFactory,
};
use backplane_cpu_ref::CpuRefBackend;
use backplane_plugin::backend_api::core::ops::{BinaryOp, CustomOp, UnaryOp};
use backplane_plugin::backend_api::core::{
    DataType, LayerId, Op, Tensor, TensorInfo, TensorKind, TensorView, TensorViewMut,
};
use backplane_plugin::sdk::Host;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The id this backend registers under.
pub const ID: &str = "CpuRefDyn";

/// The id of its device-memory factory (with `memory=device`).
pub const DEVICE_FACTORY: &str = "Backplane/CpuRefDyn/Device";

/// The domain and type of its fused layer (with `fuse=true`).
pub const FUSED_DOMAIN: &str = "CpuRefDyn";
/// See [`FUSED_DOMAIN`].
pub const FUSED_TYPE: &str = "AddRelu";

/// CpuRef under another id: every method delegates to [`CpuRefBackend`], except where the
/// options ask for device memory or fusion.
#[derive(Debug, Default, Clone)]
pub struct CpuRefDyn {
    inner: CpuRefBackend,
    device: bool,
    fuse: bool,
    /// Device handles created by this instance's factory (a capability, for tests).
    handles_created: Arc<AtomicUsize>,
    /// Device tensors its workloads were handed (a capability, for tests).
    device_tensors_seen: Arc<AtomicUsize>,
}

impl CpuRefDyn {
    /// The constructor the SDK calls with the host's information (options `memory` and
    /// `fuse`).
    pub fn create(host: &Host) -> std::result::Result<CpuRefDyn, String> {
        let device = match host.options.get("memory") {
            None | Some("host") => false,
            Some("device") => true,
            Some(other) => return Err(format!("memory must be host or device, not '{other}'")),
        };
        let fuse = match host.options.get("fuse") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(format!("fuse must be true or false, not '{other}'")),
        };
        Ok(CpuRefDyn {
            device,
            fuse,
            ..CpuRefDyn::default()
        })
    }

    /// The device factory's id.
    #[allow(clippy::expect_used)]
    fn device_factory() -> FactoryId {
        // A constant of three valid parts: always valid.
        FactoryId::new(DEVICE_FACTORY).expect("a valid factory id")
    }
}

fn is_fused(op: &Op) -> bool {
    matches!(op, Op::Custom(c) if c.domain == FUSED_DOMAIN && c.op_type == FUSED_TYPE)
}

/// CpuRef's layer support, plus the fused layer.
struct DynSupport(Arc<dyn LayerSupport>);

impl LayerSupport for DynSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        if is_fused(&layer.op) {
            let add = LayerDesc {
                op: Op::Binary(BinaryOp::Add),
                ..layer.clone()
            };
            return match self.0.is_layer_supported(&add) {
                Support::Supported if layer.outputs.iter().all(|o| o.dtype == DataType::F32) => {
                    Support::Supported
                }
                Support::Supported => Support::no("AddRelu computes f32 only"),
                no => no,
            };
        }
        self.0.is_layer_supported(layer)
    }
}

/// CpuRef's workloads, plus the fused layer's; with device memory, each counts the device
/// tensors it is handed.
struct DynFactory(Box<dyn WorkloadFactory>, Option<Arc<AtomicUsize>>);

impl WorkloadFactory for DynFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        let workload = if is_fused(&layer.op) {
            let add = LayerDesc {
                op: Op::Binary(BinaryOp::Add),
                ..layer.clone()
            };
            Box::new(AddRelu(self.0.create_workload(&add)?))
        } else {
            self.0.create_workload(layer)?
        };
        Ok(match &self.1 {
            Some(seen) => Box::new(OnDevice(workload, seen.clone())),
            None => workload,
        })
    }
}

/// A workload on device memory: reaches its tensors through its own handles (as a GPU
/// backend reaches its buffers), then runs the CpuRef kernel on them.
struct OnDevice(Box<dyn Workload>, Arc<AtomicUsize>);

impl Workload for OnDevice {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.0.execute(inputs, outputs)
    }

    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> Result<()> {
        let not_mapped = || BackendError::Execution("a tensor cannot be mapped".into());
        let mut device = 0;
        let mut ins = Vec::with_capacity(inputs.len());
        for h in inputs {
            match h.as_any().and_then(|a| a.downcast_ref::<DeviceHandle>()) {
                Some(d) => {
                    device += 1;
                    ins.push(d.0.view());
                }
                None => ins.push(h.map().ok_or_else(not_mapped)?),
            }
        }
        let mut outs = Vec::with_capacity(outputs.len());
        for h in outputs.iter_mut() {
            if h.as_any().is_some_and(|a| a.is::<DeviceHandle>()) {
                device += 1;
                let d = h
                    .as_any_mut()
                    .and_then(|a| a.downcast_mut::<DeviceHandle>())
                    .ok_or_else(not_mapped)?;
                outs.push(d.0.view_mut());
            } else {
                outs.push(h.map_mut().ok_or_else(not_mapped)?);
            }
        }
        self.1.fetch_add(device, Ordering::SeqCst);
        self.0.execute(&ins, &mut outs)
    }
}

/// Add, then Relu over the sum in place.
struct AddRelu(Box<dyn Workload>);

impl Workload for AddRelu {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> Result<()> {
        self.0.execute(inputs, outputs)?;
        let out = outputs
            .first_mut()
            .ok_or_else(|| BackendError::Execution("AddRelu has one output".into()))?;
        for v in out.as_mut_slice::<f32>()? {
            *v = v.max(0.0);
        }
        Ok(())
    }
}

/// "Device" memory: an allocation of its own, separate from the runtime's arena, that the
/// host can map (as a GPU's host-visible memory).
struct DeviceHandle(Tensor);

impl TensorHandle for DeviceHandle {
    fn info(&self) -> &TensorInfo {
        self.0.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        Some(self.0.view())
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        Some(self.0.view_mut())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

/// Makes [`DeviceHandle`]s.
struct DeviceFactory(Arc<AtomicUsize>);

impl TensorHandleFactory for DeviceFactory {
    fn id(&self) -> FactoryId {
        CpuRefDyn::device_factory()
    }
    fn properties(&self) -> FactoryProperties {
        FactoryProperties {
            mappable: true,
            ..FactoryProperties::default()
        }
    }
    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        let memory = Tensor::zeros(info.clone())?;
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(DeviceHandle(memory)))
    }
}

impl Backend for CpuRefDyn {
    #[allow(clippy::expect_used)]
    fn id(&self) -> BackendId {
        // A constant made of ASCII letters: always valid (checked by the loader's tests).
        BackendId::new(ID).expect("CpuRefDyn is a valid backend id")
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(DynSupport(self.inner.layer_support()))
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        self.inner.create_memory_manager()
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(DynFactory(
            self.inner.create_workload_factory(memory_manager)?,
            self.device.then(|| self.device_tensors_seen.clone()),
        )))
    }

    fn capabilities(&self) -> Capabilities {
        let caps = self.inner.capabilities();
        if self.device {
            let count = |c: &AtomicUsize| {
                CapabilityValue::Int(i64::try_from(c.load(Ordering::SeqCst)).unwrap_or(i64::MAX))
            };
            caps.with("DeviceHandlesCreated", count(&self.handles_created))
                .with("DeviceTensorsSeen", count(&self.device_tensors_seen))
        } else {
            caps
        }
    }

    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        if self.device {
            registry.register_factory(Arc::new(DeviceFactory(self.handles_created.clone())));
        }
    }

    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        if self.device {
            vec![CpuRefDyn::device_factory()]
        } else {
            vec![FactoryId::host()]
        }
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        if !self.fuse {
            return OptimizationViews::untouched(subgraph);
        }
        let net = subgraph.network();
        let consumers = net.consumers();
        let mut views = OptimizationViews::default();
        let mut fused: Vec<LayerId> = Vec::new();
        for &l in subgraph.layers() {
            let add = net.layer(l);
            if add.op != Op::Binary(BinaryOp::Add) || add.outputs.len() != 1 {
                continue;
            }
            let sum = add.outputs[0];
            // Only reader: one Relu of the subgraph; the sum is not needed outside.
            let readers = consumers.get(sum.0).map_or(&[][..], |c| c.as_slice());
            let [(relu, _)] = readers else { continue };
            let relu_layer = net.layer(*relu);
            if relu_layer.op != Op::Unary(UnaryOp::Relu)
                || !subgraph.layers().contains(relu)
                || net.outputs().contains(&sum)
                || net.tensor(sum).info.dtype != DataType::F32
            {
                continue;
            }
            let Some(&out) = relu_layer.outputs.first() else {
                continue;
            };
            if !matches!(net.tensor(out).kind, TensorKind::Produced { .. }) {
                continue;
            }
            views.substitutions.push(Substitution {
                replaced: vec![l, *relu],
                replacement: vec![ReplacementLayer {
                    name: format!("{}+{}", add.name, relu_layer.name),
                    op: Op::Custom(CustomOp {
                        domain: FUSED_DOMAIN.into(),
                        op_type: FUSED_TYPE.into(),
                        attributes: Vec::new(),
                        outputs: vec![net.tensor(out).info.clone()],
                        payload: None,
                    }),
                    inputs: add.inputs.iter().map(|&t| ValueRef::Existing(t)).collect(),
                    outputs: vec![Some(out)],
                }],
            });
            fused.extend([l, *relu]);
        }
        let rest: Vec<LayerId> = subgraph
            .layers()
            .iter()
            .copied()
            .filter(|l| !fused.contains(l))
            .collect();
        if !rest.is_empty() {
            views.untouched.push(rest);
        }
        views
    }
}

backplane_plugin::export_backend!(CpuRefDyn, id = "CpuRefDyn", create = CpuRefDyn::create);

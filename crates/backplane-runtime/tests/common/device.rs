//! A simulated discrete device: device memory it cannot map (as a GPU's), plus a mappable
//! staging factory, as the tensor-handle proposal's GPU example. Runs Add/Mul/Relu on f32.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane_backend_api::*;
use backplane_core::ops::{BinaryOp, UnaryOp};
use backplane_core::{Op, TensorInfo, TensorView, TensorViewMut};
use std::any::Any;
use std::sync::Arc;

pub fn local() -> FactoryId {
    FactoryId::new("Sim/Device/Local").unwrap()
}
pub fn staging() -> FactoryId {
    FactoryId::new("Sim/Device/Staging").unwrap()
}
pub fn importing() -> FactoryId {
    FactoryId::new("Sim/Device/Import").unwrap()
}

/// Device memory: values the host cannot map.
pub struct DeviceHandle {
    info: TensorInfo,
    pub values: Vec<f32>,
}

impl TensorHandle for DeviceHandle {
    fn info(&self) -> &TensorInfo {
        &self.info
    }
    fn map(&self) -> Option<TensorView<'_>> {
        None
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        None
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn Any> {
        Some(self)
    }
}

struct LocalFactory {
    allocator: Option<Arc<dyn CustomAllocator>>,
}

impl TensorHandleFactory for LocalFactory {
    fn id(&self) -> FactoryId {
        local()
    }
    fn properties(&self) -> FactoryProperties {
        FactoryProperties::default()
    }
    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        if let Some(a) = &self.allocator {
            // Device memory comes from the application's allocator.
            let buffer = a
                .allocate(info.num_bytes()?, 64)
                .map_err(BackendError::Other)?;
            a.free(buffer);
        }
        Ok(Box::new(DeviceHandle {
            info: info.clone(),
            values: vec![0.0; info.shape.elements()],
        }))
    }
}

/// Mappable memory of the device (like pinned staging buffers).
struct StagingFactory {
    id: FactoryId,
    import: MemorySources,
}

impl TensorHandleFactory for StagingFactory {
    fn id(&self) -> FactoryId {
        self.id.clone()
    }
    fn properties(&self) -> FactoryProperties {
        FactoryProperties {
            mappable: true,
            import_sources: self.import,
            ..Default::default()
        }
    }
    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        Ok(Box::new(backplane_runtime::OwnedHostHandle(
            backplane_core::Tensor::zeros(info.clone())?,
        )))
    }
}

/// The device backend. With `import_host`, its preferred memory can wrap host buffers.
#[derive(Clone, Default)]
pub struct Device {
    pub import_host: bool,
    pub allocator: Arc<std::sync::Mutex<Option<Arc<dyn CustomAllocator>>>>,
}

struct DeviceSupport;

impl LayerSupport for DeviceSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match layer.op {
            Op::Binary(BinaryOp::Add) | Op::Binary(BinaryOp::Mul) | Op::Unary(UnaryOp::Relu) => {
                Support::Supported
            }
            _ => Support::no("the device runs Add, Mul and Relu"),
        }
    }
}

struct DeviceWorkload(Op);

fn read(h: &dyn TensorHandle) -> Vec<f32> {
    if let Some(d) = h.as_any().and_then(|a| a.downcast_ref::<DeviceHandle>()) {
        return d.values.clone();
    }
    h.map().unwrap().as_slice::<f32>().unwrap().to_vec()
}

impl Workload for DeviceWorkload {
    fn execute(&self, _i: &[TensorView<'_>], _o: &mut [TensorViewMut<'_>]) -> Result<()> {
        Err(BackendError::Other(
            "the device only runs on handles".into(),
        ))
    }

    fn execute_handles(
        &self,
        inputs: &[&dyn TensorHandle],
        outputs: &mut [&mut dyn TensorHandle],
    ) -> Result<()> {
        let a = read(inputs[0]);
        let b = inputs.get(1).map(|h| read(*h));
        let out: Vec<f32> = (0..a.len())
            .map(|i| match self.0 {
                Op::Binary(BinaryOp::Add) => a[i] + b.as_ref().unwrap()[i],
                Op::Binary(BinaryOp::Mul) => a[i] * b.as_ref().unwrap()[i],
                _ => a[i].max(0.0),
            })
            .collect();
        let o = &mut outputs[0];
        if let Some(d) = o
            .as_any_mut()
            .and_then(|a| a.downcast_mut::<DeviceHandle>())
        {
            d.values = out;
            return Ok(());
        }
        o.map_mut()
            .unwrap()
            .as_mut_slice::<f32>()?
            .copy_from_slice(&out);
        Ok(())
    }
}

struct DeviceFactory;

impl WorkloadFactory for DeviceFactory {
    fn create_workload(&self, layer: &LayerDesc) -> Result<Box<dyn Workload>> {
        Ok(Box::new(DeviceWorkload(layer.op.clone())))
    }
}

impl Backend for Device {
    fn id(&self) -> BackendId {
        BackendId::new("Device").unwrap()
    }
    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(DeviceSupport)
    }
    fn create_workload_factory(
        &self,
        _mm: Option<Arc<dyn MemoryManager>>,
    ) -> Result<Box<dyn WorkloadFactory>> {
        Ok(Box::new(DeviceFactory))
    }
    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        let allocator = self.allocator.lock().unwrap().clone();
        registry.register_factory(Arc::new(LocalFactory { allocator }));
        registry.register_factory(Arc::new(StagingFactory {
            id: staging(),
            import: MemorySources::NONE,
        }));
        if self.import_host {
            registry.register_factory(Arc::new(StagingFactory {
                id: importing(),
                import: MemorySources::HOST,
            }));
        }
    }
    fn use_custom_allocator(
        &self,
        allocator: Arc<dyn CustomAllocator>,
    ) -> std::result::Result<(), String> {
        *self.allocator.lock().unwrap() = Some(allocator);
        Ok(())
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default().with("ProtectedContentAllocation", CapabilityValue::Bool(true))
    }
    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        if self.import_host {
            vec![local(), importing(), staging()]
        } else {
            vec![local(), staging()]
        }
    }
}

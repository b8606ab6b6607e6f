//! GpuAcc's memory, as the runtime's tensor-handle strategy sees it.
//!
//! - **Device** (`Backplane/GpuAcc/Device`): a device-local storage buffer, not mappable.
//!   Tensors between two GPU layers live here, so they never leave the device.
//! - **Staging** (`Backplane/GpuAcc/Staging`): for borders with host backends. A staging
//!   tensor has a device buffer that GPU layers read and write, and a host mirror the runtime
//!   maps (so it is mappable and the strategy copies it to and from host memory with one
//!   `MemCopy`). A GPU layer writing a staging tensor reads it back into the mirror; a GPU
//!   layer reading one uploads the mirror first if the host wrote it since. Staging imports
//!   host memory: a host tensor a GPU layer reads (a network input, a weight, a CPU layer's
//!   output) is handed over without a runtime copy, and the GPU layer uploads it itself.
//!
//! Handles are created once per working memory, and the runtime pools working memories per
//! loaded network, so no buffer is allocated per execution after the first.

use crate::device::GpuDevice;
use backplane_backend_api::{
    BackendError, DataLayout, FactoryId, FactoryProperties, MemorySources, Result, TensorHandle,
    TensorHandleFactory,
};
use backplane_core::{Tensor, TensorInfo, TensorView, TensorViewMut};
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The id of the device-memory factory.
pub const DEVICE_FACTORY: &str = "Backplane/GpuAcc/Device";
/// The id of the staging-memory factory.
pub const STAGING_FACTORY: &str = "Backplane/GpuAcc/Staging";

/// A factory id from a constant known to be valid.
pub(crate) fn factory_id(id: &str) -> FactoryId {
    FactoryId::new(id).unwrap_or_else(|_| FactoryId::host())
}

/// A tensor in device-local memory.
pub struct DeviceHandle {
    info: TensorInfo,
    pub(crate) buffer: wgpu::Buffer,
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

/// A border tensor: a device buffer plus the host mirror the runtime maps.
pub struct StagingHandle {
    pub(crate) mirror: Tensor,
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) readback: wgpu::Buffer,
    /// The host wrote the mirror since the device buffer was last in step with it.
    pub(crate) device_stale: AtomicBool,
}

impl StagingHandle {
    /// The device buffer, uploading the mirror first when the host changed it.
    pub(crate) fn device_buffer(&self, device: &GpuDevice) -> &wgpu::Buffer {
        if self.device_stale.swap(false, Ordering::AcqRel) {
            device.upload(&self.buffer, self.mirror.bytes());
        }
        &self.buffer
    }
}

impl TensorHandle for StagingHandle {
    fn info(&self) -> &TensorInfo {
        self.mirror.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        Some(self.mirror.view())
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        self.device_stale.store(true, Ordering::Release);
        Some(self.mirror.view_mut())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn Any> {
        Some(self)
    }
}

/// Makes device-memory handles.
pub struct DeviceFactory(pub(crate) Arc<GpuDevice>);

impl TensorHandleFactory for DeviceFactory {
    fn id(&self) -> FactoryId {
        factory_id(DEVICE_FACTORY)
    }

    fn properties(&self) -> FactoryProperties {
        FactoryProperties {
            mappable: false,
            sub_tensors: false,
            import_sources: MemorySources::NONE,
            export_sources: MemorySources::NONE,
            in_place: false,
            layout: DataLayout::Standard,
        }
    }

    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        let bytes = info.num_bytes()?;
        let buffer = self.0.storage("GpuAcc device tensor", bytes)?;
        Ok(Box::new(DeviceHandle {
            info: info.clone(),
            buffer,
        }))
    }
}

/// Makes staging handles (device buffer + host mirror) for border tensors.
pub struct StagingFactory(pub(crate) Arc<GpuDevice>);

impl TensorHandleFactory for StagingFactory {
    fn id(&self) -> FactoryId {
        factory_id(STAGING_FACTORY)
    }

    fn properties(&self) -> FactoryProperties {
        FactoryProperties {
            mappable: true,
            sub_tensors: false,
            import_sources: MemorySources::HOST,
            export_sources: MemorySources::NONE,
            in_place: false,
            layout: DataLayout::Standard,
        }
    }

    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        let bytes = info.num_bytes()?;
        let mirror = Tensor::zeros(info.clone()).map_err(BackendError::from)?;
        let buffer = self.0.storage("GpuAcc staging tensor", bytes)?;
        let readback = self.0.readback("GpuAcc staging read-back", bytes)?;
        Ok(Box::new(StagingHandle {
            mirror,
            buffer,
            readback,
            device_stale: AtomicBool::new(true),
        }))
    }
}

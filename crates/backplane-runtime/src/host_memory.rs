//! The host factory: plain CPU memory, available to every backend. Tensors of the host
//! factory are planned into one arena per execution; handles made by the factory itself own
//! their memory.

use backplane_backend_api::{
    FactoryId, FactoryProperties, Result, TensorHandle, TensorHandleFactory,
};
use backplane_core::{Tensor, TensorInfo, TensorView, TensorViewMut};
use std::any::Any;

/// The runtime's host-memory factory.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostFactory;

impl TensorHandleFactory for HostFactory {
    fn id(&self) -> FactoryId {
        FactoryId::host()
    }

    fn properties(&self) -> FactoryProperties {
        FactoryProperties::host()
    }

    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>> {
        Ok(Box::new(OwnedHostHandle(Tensor::zeros(info.clone())?)))
    }
}

/// A host handle that owns its memory.
#[derive(Debug)]
pub struct OwnedHostHandle(pub Tensor);

impl TensorHandle for OwnedHostHandle {
    fn info(&self) -> &TensorInfo {
        self.0.info()
    }
    fn map(&self) -> Option<TensorView<'_>> {
        Some(self.0.view())
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        Some(self.0.view_mut())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn Any> {
        Some(self)
    }
}

/// Host memory borrowed for one step (an arena region, a caller's input, a constant).
pub(crate) struct HostView<'a>(pub TensorView<'a>);

impl TensorHandle for HostView<'_> {
    fn info(&self) -> &TensorInfo {
        self.0.info
    }
    fn map(&self) -> Option<TensorView<'_>> {
        Some(self.0)
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        None
    }
}

/// Writable host memory borrowed for one step.
pub(crate) struct HostViewMut<'a>(pub TensorViewMut<'a>);

impl TensorHandle for HostViewMut<'_> {
    fn info(&self) -> &TensorInfo {
        self.0.info
    }
    fn map(&self) -> Option<TensorView<'_>> {
        Some(self.0.as_view())
    }
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>> {
        Some(TensorViewMut {
            info: self.0.info,
            data: &mut *self.0.data,
        })
    }
}

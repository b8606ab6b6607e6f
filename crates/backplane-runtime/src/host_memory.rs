//! The host factory: plain CPU memory, available to every backend. Tensors of the host
//! factory are planned into one arena per execution; handles made by the factory itself own
//! their memory.

pub use backplane_backend_api::OwnedHostHandle;
use backplane_backend_api::{
    FactoryId, FactoryProperties, Result, TensorHandle, TensorHandleFactory,
};
pub(crate) use backplane_backend_api::{
    HostViewHandle as HostView, HostViewHandleMut as HostViewMut,
};
use backplane_core::{Tensor, TensorInfo};

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

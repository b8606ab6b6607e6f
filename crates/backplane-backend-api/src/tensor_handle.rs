//! Tensor handles and the factories that make them: where a tensor's memory lives.
//!
//! A backend may keep tensors in several kinds of memory (a discrete GPU: device memory it
//! cannot map, plus mappable staging memory). Each kind is a [`TensorHandleFactory`] with a
//! globally unique [`FactoryId`] and [`FactoryProperties`]. A backend lists, best first, the
//! factories its workloads can read and write ([`crate::Backend::handle_factory_preferences`]),
//! including other backends' factories. The optimizer picks one factory per tensor so that as
//! few bytes as possible are copied between backends: two backends that both list a factory
//! share its tensors with no copy at all.
//!
//! Every runtime provides the host factory ([`FactoryId::host`]): plain, mappable CPU memory
//! planned into arenas by the runtime. A backend that registers no factory of its own uses it.

use crate::{MemoryManager, Result};
use backplane_core::{Tensor, TensorInfo, TensorView, TensorViewMut};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// A factory's globally unique id: `Vendor/Backend/Factory`, each part non-empty
/// letters, digits, `-` or `_`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FactoryId(String);

impl FactoryId {
    /// Validate and wrap an id.
    pub fn new(id: impl Into<String>) -> std::result::Result<Self, String> {
        let id = id.into();
        let parts: Vec<&str> = id.split('/').collect();
        let ok = parts.len() == 3
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if ok {
            Ok(FactoryId(id))
        } else {
            Err(format!(
                "invalid tensor-handle factory id '{id}': use Vendor/Backend/Factory"
            ))
        }
    }

    /// The runtime's host-memory factory, available to every backend.
    pub fn host() -> Self {
        FactoryId(String::from("Backplane/Host/Cpu"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FactoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Kinds of memory a factory can import from or export to, as a set of flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MemorySources(pub u32);

impl MemorySources {
    /// None.
    pub const NONE: MemorySources = MemorySources(0);
    /// Ordinary CPU memory (e.g. an application's buffer).
    pub const HOST: MemorySources = MemorySources(1);
    /// A Linux dma-buf file descriptor.
    pub const DMA_BUF: MemorySources = MemorySources(2);
    /// Protected (secure) memory.
    pub const PROTECTED: MemorySources = MemorySources(4);

    /// Whether the two sets share a kind.
    pub fn intersects(self, other: MemorySources) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for MemorySources {
    type Output = MemorySources;
    fn bitor(self, rhs: Self) -> Self {
        MemorySources(self.0 | rhs.0)
    }
}

/// How a factory lays out elements in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataLayout {
    /// Row-major in the logical (ONNX) axis order, e.g. NCHW.
    #[default]
    Standard,
    /// Channels last for rank-4 tensors (NHWC); other ranks standard.
    ChannelsLast,
}

/// What handles of a factory can do; the optimizer's strategy reads these.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FactoryProperties {
    /// Handles can be mapped to CPU memory (required for copies to and from other memory).
    pub mappable: bool,
    /// Sub-tensor handles (views into a parent) are supported.
    pub sub_tensors: bool,
    /// Memory kinds the factory can wrap without copying.
    pub import_sources: MemorySources,
    /// Memory kinds the factory's handles can hand out without copying.
    pub export_sources: MemorySources,
    /// A workload may write its output over one of its inputs.
    pub in_place: bool,
    /// Element layout.
    pub layout: DataLayout,
}

impl FactoryProperties {
    /// The host factory's properties: mappable, sub-tensors, imports and exports host memory.
    pub fn host() -> Self {
        FactoryProperties {
            mappable: true,
            sub_tensors: true,
            import_sources: MemorySources::HOST,
            export_sources: MemorySources::HOST,
            in_place: false,
            layout: DataLayout::Standard,
        }
    }
}

/// A tensor's memory, as a workload sees it.
pub trait TensorHandle: Send + Sync {
    /// Type and shape.
    fn info(&self) -> &TensorInfo;
    /// The data as host memory, if this memory can be mapped.
    fn map(&self) -> Option<TensorView<'_>>;
    /// The data as writable host memory, if this memory can be mapped.
    fn map_mut(&mut self) -> Option<TensorViewMut<'_>>;
    /// The concrete handle, for the backend that made it (e.g. to reach device memory).
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
    /// The concrete handle, writable.
    fn as_any_mut(&mut self) -> Option<&mut dyn Any> {
        None
    }
}

/// A handle that owns host memory (a plain [`Tensor`]): what the runtime's host factory
/// makes, and a ready-made handle for backends whose memory is host memory.
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

/// Host memory borrowed for one call, read-only (an arena region, a caller's input, a
/// constant), for workloads that take handles.
#[derive(Debug)]
pub struct HostViewHandle<'a>(pub TensorView<'a>);

impl TensorHandle for HostViewHandle<'_> {
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

/// Writable host memory borrowed for one call, for workloads that take handles.
#[derive(Debug)]
pub struct HostViewHandleMut<'a>(pub TensorViewMut<'a>);

impl TensorHandle for HostViewHandleMut<'_> {
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

/// Makes tensor handles of one kind of memory.
pub trait TensorHandleFactory: Send + Sync {
    /// Its globally unique id.
    fn id(&self) -> FactoryId;
    /// What its handles can do.
    fn properties(&self) -> FactoryProperties;
    /// A new handle for a tensor of `info`.
    fn create_tensor_handle(&self, info: &TensorInfo) -> Result<Box<dyn TensorHandle>>;
}

/// Where a backend registers its factories and memory managers for the optimizer and
/// runtime to use.
#[derive(Default, Clone)]
pub struct TensorHandleFactoryRegistry {
    factories: Vec<Arc<dyn TensorHandleFactory>>,
    memory_managers: Vec<Arc<dyn MemoryManager>>,
}

impl fmt::Debug for TensorHandleFactoryRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.factories.iter().map(|x| x.id()))
            .finish()
    }
}

impl TensorHandleFactoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a factory; a second factory with the same id is ignored (the first wins).
    pub fn register_factory(&mut self, factory: Arc<dyn TensorHandleFactory>) {
        let id = factory.id();
        if self.get(&id).is_none() {
            self.factories.push(factory);
        }
    }

    /// Register a memory manager that factories' handles draw on.
    pub fn register_memory_manager(&mut self, manager: Arc<dyn MemoryManager>) {
        self.memory_managers.push(manager);
    }

    /// A factory by id.
    pub fn get(&self, id: &FactoryId) -> Option<&Arc<dyn TensorHandleFactory>> {
        self.factories.iter().find(|f| &f.id() == id)
    }

    /// The registered factory ids, in registration order.
    pub fn ids(&self) -> Vec<FactoryId> {
        self.factories.iter().map(|f| f.id()).collect()
    }

    /// The registered memory managers.
    pub fn memory_managers(&self) -> &[Arc<dyn MemoryManager>] {
        &self.memory_managers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_ids_have_three_parts() {
        assert!(FactoryId::new("Acme/Gpu/Staging").is_ok());
        assert!(FactoryId::new("Acme/Gpu").is_err());
        assert!(FactoryId::new("Acme//Staging").is_err());
        assert!(FactoryId::new("Acme/Gpu/Sta ging").is_err());
        assert_eq!(FactoryId::host().as_str(), "Backplane/Host/Cpu");
    }

    #[test]
    fn memory_sources_combine() {
        let both = MemorySources::HOST | MemorySources::DMA_BUF;
        assert!(both.intersects(MemorySources::HOST));
        assert!(!MemorySources::PROTECTED.intersects(both));
    }
}

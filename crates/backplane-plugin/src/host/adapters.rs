//! Thin adapters over the plugin's layer support, memory managers and backend context.

use super::instance::{backend_error, PluginInstance};
use crate::abi::{self};
use crate::convert::{crosses_the_abi, OwnedLayerDesc};
use backplane_backend_api::{
    BackendContext, BackendError, LayerDesc, LayerSupport, MemoryManager, NetworkId, Support,
};
use std::sync::Arc;

/// Layer support through the plugin.
pub(super) struct DynamicLayerSupport {
    pub(super) instance: Arc<PluginInstance>,
}

impl LayerSupport for DynamicLayerSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        let Some(f) = self.instance.table().is_layer_supported else {
            return Support::no("the plugin has no layer support");
        };
        if !crosses_the_abi(&layer.op) {
            return Support::no(format!(
                "{} runs nested networks, which cannot cross the plugin ABI",
                layer.op.name()
            ));
        }
        let desc = OwnedLayerDesc::new(layer);
        let raw = self.instance.raw;
        let call = |msg| {
            // SAFETY: a live instance, a description valid for the call, a valid buffer.
            unsafe { f(raw, desc.as_ptr(), msg) }
        };
        match self.instance.call(call) {
            Ok(()) => Support::Supported,
            Err(e) if e.status == abi::STATUS_UNSUPPORTED => Support::Unsupported(e.message),
            Err(e) => Support::Unsupported(format!("the plugin failed: {}", e.message)),
        }
    }
}

/// A memory manager of the plugin.
pub(super) struct DynamicMemoryManager {
    pub(super) instance: Arc<PluginInstance>,
    pub(super) raw: *mut abi::MemoryManager,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the pointer is only handed back.
unsafe impl Send for DynamicMemoryManager {}
// SAFETY: as above.
unsafe impl Sync for DynamicMemoryManager {}

impl MemoryManager for DynamicMemoryManager {
    fn acquire(&self) -> backplane_backend_api::Result<()> {
        let f = self
            .instance
            .table()
            .memory_manager_acquire
            .ok_or_else(|| BackendError::Other("memory_manager_acquire is null".into()))?;
        let raw = self.raw;
        // SAFETY: a live manager of this instance and a valid buffer.
        self.instance
            .call(|msg| unsafe { f(raw, msg) })
            .map_err(|e| backend_error(e, None))
    }

    fn release(&self) {
        if let Some(f) = self.instance.table().memory_manager_release {
            let raw = self.raw;
            let _ = self.instance.call(|_| {
                // SAFETY: a live manager of this instance.
                unsafe { f(raw) };
                abi::STATUS_OK
            });
        }
    }
}

impl Drop for DynamicMemoryManager {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_memory_manager {
            // SAFETY: made by this instance's `create_memory_manager`, destroyed once; the
            // factories that used it hold this object, so they are gone.
            unsafe { f(self.raw) };
        }
    }
}

/// The plugin's workload factory object, destroyed when the last of the host's factory and
/// the workloads it created lets go of it: a plugin's workloads may keep a pointer to their
/// A backend context of the plugin.
pub(super) struct DynamicContext {
    pub(super) instance: Arc<PluginInstance>,
    pub(super) raw: *mut abi::Context,
}

// SAFETY: the ABI makes plugin objects usable from any thread; the pointer is only handed back.
unsafe impl Send for DynamicContext {}
// SAFETY: as above.
unsafe impl Sync for DynamicContext {}

impl DynamicContext {
    pub(super) fn hook(
        &self,
        f: Option<abi::ContextHookFn>,
        id: NetworkId,
    ) -> backplane_backend_api::Result<()> {
        let Some(f) = f else { return Ok(()) };
        let raw = self.raw;
        self.instance
            // SAFETY: a live context and a valid buffer.
            .call(|msg| unsafe { f(raw, id.0, msg) })
            .map_err(|e| backend_error(e, None))
    }
}

impl BackendContext for DynamicContext {
    fn before_load_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_before_load, id)
    }

    fn after_load_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_after_load, id)
    }

    fn before_unload_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_before_unload, id)
    }

    fn after_execute_network(&self, id: NetworkId) -> backplane_backend_api::Result<()> {
        self.hook(self.instance.table().context_after_execute, id)
    }

    fn after_unload_network(&self, id: NetworkId) {
        if let Some(f) = self.instance.table().context_after_unload {
            let raw = self.raw;
            let _ = self.instance.call(|_| {
                // SAFETY: a live context.
                unsafe { f(raw, id.0) };
                abi::STATUS_OK
            });
        }
    }
}

impl Drop for DynamicContext {
    fn drop(&mut self) {
        if let Some(f) = self.instance.table().destroy_context {
            // SAFETY: made by this instance's `create_context`, destroyed once.
            unsafe { f(self.raw) };
        }
    }
}

//! [`DynamicBackend`]: the plugin as an ordinary [`Backend`].

use super::adapters::{DynamicContext, DynamicLayerSupport, DynamicMemoryManager};
use super::instance::{backend_error, COptions, PluginInstance};
use super::tensor_handle::DynamicTensorHandleFactory;
use super::workload::{DynamicWorkloadFactory, RawWorkloadFactory};
use super::MESSAGE_BYTES;
use crate::abi::{self};
use crate::convert::{c_string, crosses_the_abi, with_message_text};
use backplane_backend_api::{
    Backend, BackendContext, BackendError, BackendId, BackendOptions, BackendVersion, Capabilities,
    CapabilityValue, FactoryId, LayerSupport, MemoryManager, OptimizationViews, SubgraphView,
    TensorHandleFactoryRegistry, WorkloadFactory,
};
use backplane_core::LayerId;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Weak};

/// A dynamic backend as an ordinary [`Backend`]: every method goes through the plugin's
/// function table. Cheap to create; the instance behind it is shared.
#[derive(Debug, Clone)]
pub struct DynamicBackend {
    pub(super) instance: Arc<PluginInstance>,
}

impl DynamicBackend {
    /// The backend over an instance.
    pub fn new(instance: Arc<PluginInstance>) -> Self {
        DynamicBackend { instance }
    }

    /// The instance behind it.
    pub fn instance(&self) -> &Arc<PluginInstance> {
        &self.instance
    }
}

impl Backend for DynamicBackend {
    fn id(&self) -> BackendId {
        self.instance.lib.id.clone()
    }

    /// For a dynamic backend: the plugin ABI version it was built against.
    fn api_version(&self) -> BackendVersion {
        self.instance.lib.version
    }

    fn version(&self) -> String {
        let Some(f) = self.instance.table().backend_version else {
            return String::from("0.0.0");
        };
        if self.instance.is_poisoned() {
            return String::from("0.0.0");
        }
        let raw = self.instance.raw;
        // SAFETY: a live instance and a valid message buffer for the call.
        let (status, text) = with_message_text::<MESSAGE_BYTES>(|msg| unsafe { f(raw, msg) });
        if status == abi::STATUS_OK && !text.is_empty() {
            text
        } else {
            String::from("0.0.0")
        }
    }

    fn layer_support(&self) -> Arc<dyn LayerSupport> {
        Arc::new(DynamicLayerSupport {
            instance: self.instance.clone(),
        })
    }

    fn create_memory_manager(&self) -> Option<Arc<dyn MemoryManager>> {
        let t = self.instance.table();
        let create = t.create_memory_manager?;
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::MemoryManager = std::ptr::null_mut();
        // SAFETY: a live instance, a local out-pointer and a valid message buffer.
        let ok = self
            .instance
            .call(|msg| unsafe { create(raw_inst, &mut raw, msg) })
            .is_ok();
        if !ok || raw.is_null() {
            return None;
        }
        let mm = Arc::new(DynamicMemoryManager {
            instance: self.instance.clone(),
            raw,
        });
        let mut list = self
            .instance
            .memory_managers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&mm));
        Some(mm)
    }

    fn create_workload_factory(
        &self,
        memory_manager: Option<Arc<dyn MemoryManager>>,
    ) -> backplane_backend_api::Result<Box<dyn WorkloadFactory>> {
        let create = self
            .instance
            .table()
            .create_workload_factory
            .ok_or_else(|| BackendError::Other("create_workload_factory is null".into()))?;
        // Only a memory manager this instance created can be handed back to the plugin.
        let (mm_raw, mm_keep) = match &memory_manager {
            Some(mm) => {
                let wanted = Arc::as_ptr(mm).cast::<u8>();
                let list = self
                    .instance
                    .memory_managers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match list
                    .iter()
                    .filter_map(Weak::upgrade)
                    .find(|m| Arc::as_ptr(m).cast::<u8>() == wanted)
                {
                    Some(m) => (m.raw, Some(m)),
                    None => (std::ptr::null_mut(), None),
                }
            }
            None => (std::ptr::null_mut(), None),
        };
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::WorkloadFactory = std::ptr::null_mut();
        self.instance
            // SAFETY: a live instance, a memory manager of this instance (kept alive by
            // `mm_keep`) or null, a local out-pointer and a valid message buffer.
            .call(|msg| unsafe { create(raw_inst, mm_raw, &mut raw, msg) })
            .map_err(|e| backend_error(e, None))?;
        if raw.is_null() {
            return Err(BackendError::Other(
                "create_workload_factory succeeded but returned no factory".into(),
            ));
        }
        Ok(Box::new(DynamicWorkloadFactory {
            factory: Arc::new(RawWorkloadFactory {
                instance: self.instance.clone(),
                raw,
                _memory_manager: mm_keep,
            }),
        }))
    }

    fn create_backend_context(
        &self,
        options: &BackendOptions,
    ) -> backplane_backend_api::Result<Option<Box<dyn BackendContext>>> {
        let Some(create) = self.instance.table().create_context else {
            return Ok(None);
        };
        let opts = COptions::new(options);
        let raw_inst = self.instance.raw;
        let mut raw: *mut abi::Context = std::ptr::null_mut();
        self.instance
            // SAFETY: a live instance, options valid for the call, a local out-pointer and a
            // valid message buffer.
            .call(|msg| unsafe {
                create(raw_inst, opts.ptrs.as_ptr(), opts.ptrs.len(), &mut raw, msg)
            })
            .map_err(|e| backend_error(e, None))?;
        if raw.is_null() {
            return Ok(None);
        }
        Ok(Some(Box::new(DynamicContext {
            instance: self.instance.clone(),
            raw,
        })))
    }

    fn register_tensor_handle_factories(&self, registry: &mut TensorHandleFactoryRegistry) {
        for (id, props) in self.instance.factories() {
            registry.register_factory(Arc::new(DynamicTensorHandleFactory {
                instance: self.instance.clone(),
                id: id.clone(),
                c_id: c_string(id.as_str()),
                properties: props.clone(),
            }));
        }
    }

    fn handle_factory_preferences(&self) -> Vec<FactoryId> {
        let host = || vec![FactoryId::host()];
        let Some(f) = self.instance.table().handle_factory_preferences else {
            return host();
        };
        /// Receives one factory id from the plugin.
        ///
        /// # Safety
        /// `user` is the `Vec` passed below; `text` is null or NUL-terminated.
        unsafe extern "C" fn sink(user: *mut c_void, text: *const std::ffi::c_char) {
            // SAFETY: `user` is `&mut Vec<FactoryId>` for the duration of the call that
            // invokes this sink, per the caller.
            let Some(list) = (unsafe { user.cast::<Vec<FactoryId>>().as_mut() }) else {
                return;
            };
            // SAFETY: null or NUL-terminated per the ABI.
            if let Ok(id) = unsafe { crate::convert::text(text, "factory id") } {
                if let Ok(id) = FactoryId::new(id) {
                    if !list.contains(&id) {
                        list.push(id);
                    }
                }
            }
        }
        let mut list: Vec<FactoryId> = Vec::new();
        let raw = self.instance.raw;
        let user = (&mut list as *mut Vec<FactoryId>).cast::<c_void>();
        // SAFETY: a live instance; `sink` matches the ABI's type and `user` points to `list`,
        // alive and not otherwise borrowed during the call.
        let ok = self
            .instance
            .call(|_| unsafe { f(raw, sink, user) })
            .is_ok();
        if ok && !list.is_empty() {
            list
        } else {
            host()
        }
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> OptimizationViews {
        let Some(f) = self.instance.table().optimize_subgraph else {
            return OptimizationViews::untouched(subgraph);
        };
        let network = subgraph.network();
        let mut views = OptimizationViews::default();
        // Layers whose op cannot cross the ABI (nested networks) are not shown to the plugin
        // and stay as they are; the plugin sees each run of the others (consecutive layers
        // of a convex run in topological order: convex too).
        let mut segment: Vec<LayerId> = Vec::new();
        for &l in subgraph.layers() {
            if crosses_the_abi(&network.layer(l).op) {
                segment.push(l);
            } else {
                self.optimize_segment(f, network, &std::mem::take(&mut segment), &mut views);
                views.untouched.push(vec![l]);
            }
        }
        self.optimize_segment(f, network, &segment, &mut views);
        views
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::default();
        let Some(f) = self.instance.table().capabilities else {
            return caps;
        };
        /// Receives one capability from the plugin.
        ///
        /// # Safety
        /// `user` is the `Capabilities` passed below; `cap` is null or valid for the call.
        unsafe extern "C" fn sink(user: *mut c_void, cap: *const abi::Capability) {
            // SAFETY: `user` is `&mut Capabilities` for the duration of the call that
            // invokes this sink, per the caller.
            let Some(caps) = (unsafe { user.cast::<Capabilities>().as_mut() }) else {
                return;
            };
            // SAFETY: null or valid per the ABI.
            let Some(c) = (unsafe { cap.as_ref() }) else {
                return;
            };
            if (c.struct_size as usize) < field_end!(abi::Capability, text) || c.name.is_null() {
                return;
            }
            // SAFETY: non-null and NUL-terminated per the ABI.
            let name = unsafe { CStr::from_ptr(c.name) }
                .to_string_lossy()
                .into_owned();
            let value = match c.kind {
                abi::CAP_BOOL => CapabilityValue::Bool(c.int_value != 0),
                abi::CAP_INT => CapabilityValue::Int(c.int_value),
                abi::CAP_TEXT if !c.text.is_null() => CapabilityValue::Text(
                    // SAFETY: non-null and NUL-terminated per the ABI.
                    unsafe { CStr::from_ptr(c.text) }
                        .to_string_lossy()
                        .into_owned(),
                ),
                _ => return,
            };
            caps.0.insert(name, value);
        }
        let raw_inst = self.instance.raw;
        let user = (&mut caps as *mut Capabilities).cast::<c_void>();
        // SAFETY: a live instance; `sink` matches the ABI's type and `user` points to `caps`,
        // alive and not otherwise borrowed during the call.
        let _ = self.instance.call(|_| unsafe { f(raw_inst, sink, user) });
        caps
    }
}

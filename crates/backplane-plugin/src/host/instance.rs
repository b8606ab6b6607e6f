//! One backend instance of a plugin: calls through its table with a message buffer, and
//! the poisoning that disables it after a panic.

use super::adapters::DynamicMemoryManager;
use super::library::PluginLibrary;
use super::MESSAGE_BYTES;
use crate::abi::{self, BackendVTable};
use crate::convert::{c_string, with_message};
use backplane_backend_api::{
    BackendError, BackendOptions, DataLayout, FactoryId, FactoryProperties, LayerDesc,
    MemorySources,
};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Backend options as C structs.
pub(super) struct COptions {
    pub(super) _strings: Vec<(std::ffi::CString, std::ffi::CString)>,
    pub(super) _structs: Vec<abi::BackendOption>,
    pub(super) ptrs: Vec<*const abi::BackendOption>,
}

impl COptions {
    pub(super) fn new(options: &BackendOptions) -> Self {
        let strings: Vec<_> = options
            .values
            .iter()
            .map(|(k, v)| (c_string(k), c_string(v)))
            .collect();
        let structs: Vec<abi::BackendOption> = strings
            .iter()
            .map(|(k, v)| abi::BackendOption {
                struct_size: abi::size_u32::<abi::BackendOption>(),
                reserved: 0,
                name: k.as_ptr(),
                value: v.as_ptr(),
            })
            .collect();
        // The vector is never touched again, so these addresses stay valid.
        let ptrs = structs
            .iter()
            .map(|s| s as *const abi::BackendOption)
            .collect();
        COptions {
            _strings: strings,
            _structs: structs,
            ptrs,
        }
    }
}

/// One backend instance of a plugin (one per runtime). Everything it creates holds it, so it
/// is destroyed after them, when the runtime that created it is gone.
pub struct PluginInstance {
    pub(super) lib: Arc<PluginLibrary>,
    pub(super) raw: *mut abi::Instance,
    pub(super) minor: u32,
    pub(super) poisoned: Mutex<Option<String>>,
    pub(super) panicked: AtomicBool,
    pub(super) memory_managers: Mutex<Vec<Weak<DynamicMemoryManager>>>,
    pub(super) factories: OnceLock<Vec<(FactoryId, FactoryProperties)>>,
}

// SAFETY: the ABI requires every plugin function to be callable from any thread and
// concurrently (except destroy, called once after all others); the pointer is only handed
// back to the plugin.
unsafe impl Send for PluginInstance {}
// SAFETY: as above.
unsafe impl Sync for PluginInstance {}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginInstance")
            .field("library", &self.lib)
            .field("abi_minor", &self.minor)
            .finish()
    }
}

impl Drop for PluginInstance {
    fn drop(&mut self) {
        if let Some(destroy) = self.lib.table.destroy_instance {
            // SAFETY: `raw` came from this library's `create_instance`; every object made from
            // it holds an `Arc` to this instance, so all are gone, and it is destroyed once.
            unsafe { destroy(self.raw) };
        }
        self.lib.counts.instances.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A failed plugin call: its status and message.
pub(super) struct CallError {
    pub(super) status: abi::Status,
    pub(super) message: String,
}

impl PluginInstance {
    /// The library it came from.
    pub fn library(&self) -> &Arc<PluginLibrary> {
        &self.lib
    }

    /// The ABI minor version negotiated with the plugin.
    pub fn abi_minor(&self) -> u32 {
        self.minor
    }

    /// Whether the plugin panicked earlier (every later call fails).
    pub fn is_poisoned(&self) -> bool {
        self.panicked.load(Ordering::SeqCst)
    }

    pub(super) fn table(&self) -> &BackendVTable {
        &self.lib.table
    }

    /// The plugin's own tensor-handle factories, asked once (1.2). Entries with an invalid
    /// id or an id reported twice are left out.
    pub(super) fn factories(&self) -> &[(FactoryId, FactoryProperties)] {
        self.factories.get_or_init(|| {
            let Some(f) = self.table().tensor_handle_factories else {
                return Vec::new();
            };
            /// Receives one factory from the plugin.
            ///
            /// # Safety
            /// `user` is the `Vec` passed below; `desc` is null or valid for the call.
            unsafe extern "C" fn sink(
                user: *mut c_void,
                desc: *const abi::TensorHandleFactoryDesc,
            ) {
                // SAFETY: `user` is `&mut Vec<_>` for the duration of the call that invokes
                // this sink, per the caller.
                let Some(list) =
                    (unsafe { user.cast::<Vec<(FactoryId, FactoryProperties)>>().as_mut() })
                else {
                    return;
                };
                // SAFETY: null or valid per the ABI.
                let Some(d) = (unsafe { desc.as_ref() }) else {
                    return;
                };
                if (d.struct_size as usize) < field_end!(abi::TensorHandleFactoryDesc, layout) {
                    return;
                }
                // SAFETY: null or NUL-terminated per the ABI.
                let Ok(text) = (unsafe { crate::convert::text(d.id, "factory id") }) else {
                    return;
                };
                let Ok(id) = FactoryId::new(text) else {
                    return;
                };
                if list.iter().any(|(f, _)| f == &id) {
                    return;
                }
                let props = FactoryProperties {
                    mappable: d.flags & abi::FACTORY_MAPPABLE != 0,
                    sub_tensors: d.flags & abi::FACTORY_SUB_TENSORS != 0,
                    in_place: d.flags & abi::FACTORY_IN_PLACE != 0,
                    import_sources: MemorySources(d.import_sources),
                    export_sources: MemorySources(d.export_sources),
                    layout: if d.layout == abi::LAYOUT_CHANNELS_LAST {
                        DataLayout::ChannelsLast
                    } else {
                        DataLayout::Standard
                    },
                };
                list.push((id, props));
            }
            let mut list: Vec<(FactoryId, FactoryProperties)> = Vec::new();
            let raw = self.raw;
            let user = (&mut list as *mut Vec<(FactoryId, FactoryProperties)>).cast::<c_void>();
            // SAFETY: a live instance; `sink` matches the ABI's type and `user` points to
            // `list`, alive and not otherwise borrowed during the call.
            let ok = self.call(|_| unsafe { f(raw, sink, user) }).is_ok();
            if ok {
                list
            } else {
                Vec::new()
            }
        })
    }

    /// Call the plugin with a message buffer; poisons the instance on a panic.
    pub(super) fn call(
        &self,
        f: impl FnOnce(*mut abi::Message) -> abi::Status,
    ) -> Result<(), CallError> {
        if self.panicked.load(Ordering::Relaxed) {
            let why = self
                .poisoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default();
            return Err(CallError {
                status: abi::STATUS_PANICKED,
                message: format!(
                    "backend '{}' ({}) is disabled because it panicked earlier: {why}",
                    self.lib.id,
                    self.lib.path.display()
                ),
            });
        }
        let (status, message) = with_message::<MESSAGE_BYTES>(f);
        if status == abi::STATUS_OK {
            return Ok(());
        }
        if status == abi::STATUS_PANICKED {
            *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
            self.panicked.store(true, Ordering::SeqCst);
        }
        Err(CallError { status, message })
    }
}

/// A backend error for a failed call.
pub(super) fn backend_error(e: CallError, layer: Option<&LayerDesc>) -> BackendError {
    match e.status {
        abi::STATUS_UNSUPPORTED => BackendError::Unsupported {
            layer: layer.map(|l| l.name.clone()).unwrap_or_default(),
            op: layer.map(|l| l.op.name().to_string()).unwrap_or_default(),
            reason: e.message,
        },
        abi::STATUS_EXECUTION_FAILED => BackendError::Execution(e.message),
        abi::STATUS_PANICKED => BackendError::Execution(e.message),
        _ => BackendError::Other(e.message),
    }
}

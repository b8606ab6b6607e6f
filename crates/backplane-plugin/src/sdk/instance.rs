//! The exported backend instance: creation from the host's options, version, layer support,
//! workload factories and capabilities.

use crate::abi;
use crate::convert::{c_string, read_layer_desc, slice, text, write_message};
use backplane_backend_api::{
    Backend, BackendOptions, BackendVersion, CapabilityValue, LayerSupport, Support,
    TensorHandleFactoryRegistry,
};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;

use super::memory::PluginMemoryManager;
use super::workload::PluginFactory;
use super::{destroy, guard, invalid, object, put, quietly, status_of, Export, Host};

/// A backend instance: the backend and its layer support, created once.
pub(super) struct PluginInstance<B> {
    pub(super) backend: B,
    pub(super) layer_support: Arc<dyn LayerSupport>,
    pub(super) factories: std::sync::OnceLock<TensorHandleFactoryRegistry>,
}

/// Read the options of a C option array.
///
/// # Safety
/// `options` has `n` valid entries.
pub(super) unsafe fn read_options(
    options: *const *const abi::BackendOption,
    n: usize,
) -> Result<BackendOptions, String> {
    let mut out = BackendOptions::default();
    // SAFETY: `n` entries per the caller.
    for &o in unsafe { slice(options, n) }? {
        // SAFETY: each entry is null or valid per the ABI.
        let o = unsafe { o.as_ref() }.ok_or("an option is null")?;
        if (o.struct_size as usize) < field_end!(abi::BackendOption, value) {
            return Err("an option's struct_size is too small".into());
        }
        // SAFETY: NUL-terminated per the ABI.
        let name = unsafe { text(o.name, "option name") }?;
        // SAFETY: as above.
        let value = unsafe { text(o.value, "option value") }?;
        out.values.insert(name.to_string(), value.to_string());
    }
    Ok(out)
}

/// # Safety
/// Pointers as the ABI documents for `create_instance`.
pub(super) unsafe extern "C" fn create_instance<E: Export>(
    host: *const abi::HostInfo,
    out_instance: *mut *mut abi::Instance,
    out_abi_minor: *mut u32,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: null or valid per the ABI.
        let h = unsafe { host.as_ref() }.ok_or_else(|| invalid("host info is null"))?;
        if (h.struct_size as usize) < field_end!(abi::HostInfo, num_options) {
            return Err(invalid("host info struct_size is too small"));
        }
        if h.abi_major != abi::ABI_VERSION_MAJOR {
            return Err(invalid(format!(
                "the host speaks ABI {}.{}, this plugin {}.{}",
                h.abi_major,
                h.abi_minor,
                abi::ABI_VERSION_MAJOR,
                abi::ABI_VERSION_MINOR
            )));
        }
        let minor = abi::ABI_VERSION_MINOR.min(h.abi_minor);
        // SAFETY: NUL-terminated per the ABI.
        let path = unsafe { text(h.plugin_path, "plugin path") }.map_err(invalid)?;
        // SAFETY: `num_options` entries per the ABI.
        let options = unsafe { read_options(h.options, h.num_options) }.map_err(invalid)?;
        let info = Host {
            host_abi: BackendVersion {
                major: h.abi_major,
                minor: h.abi_minor,
            },
            abi: BackendVersion {
                major: abi::ABI_VERSION_MAJOR,
                minor,
            },
            plugin_path: PathBuf::from(path),
            options,
        };
        let backend = E::create(&info).map_err(|m| (abi::STATUS_FAILED, m))?;
        let id_ptr = E::backend_id();
        // SAFETY: `backend_id` returns null or a static NUL-terminated string.
        let exported = unsafe { text(id_ptr, "the exported id") }.map_err(invalid)?;
        let id = backend.id();
        if id.as_str() != exported {
            return Err((
                abi::STATUS_FAILED,
                format!("GetBackendId says '{exported}' but the backend calls itself '{id}'"),
            ));
        }
        let layer_support = backend.layer_support();
        let instance = Box::new(PluginInstance {
            backend,
            layer_support,
            factories: std::sync::OnceLock::new(),
        });
        let raw = Box::into_raw(instance).cast::<abi::Instance>();
        // SAFETY: valid for writes per the ABI.
        if let Err(e) = unsafe { put(out_instance, raw) } {
            // SAFETY: just made by `Box::into_raw`, not handed out.
            unsafe { destroy::<PluginInstance<E::Backend>>(raw.cast()) };
            return Err(e);
        }
        if !out_abi_minor.is_null() {
            // SAFETY: non-null and valid for writes per the ABI.
            unsafe { out_abi_minor.write(minor) };
        }
        Ok(())
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// `instance` was made by `create_instance::<E>` and is not used again.
pub(super) unsafe extern "C" fn destroy_instance<E: Export>(instance: *mut abi::Instance) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginInstance<E::Backend>>(instance.cast()) }
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn backend_version<E: Export>(
    instance: *mut abi::Instance,
    out: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        // SAFETY: `out` is null or valid per the ABI.
        unsafe { write_message(out, &inst.backend.version()) };
        Ok(())
    };
    // SAFETY: `out` is null or valid per the ABI.
    unsafe { guard(std::ptr::null_mut(), body) }
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn is_layer_supported<E: Export>(
    instance: *mut abi::Instance,
    layer: *const abi::LayerDesc,
    reason: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        // SAFETY: a valid description per the ABI. A layer the SDK cannot read (an op it
        // does not know, one with nested networks) is one the backend cannot run.
        let desc = unsafe { read_layer_desc(layer) }.map_err(|e| {
            (
                abi::STATUS_UNSUPPORTED,
                format!("cannot read the layer: {e}"),
            )
        })?;
        match inst.layer_support.is_layer_supported(&desc) {
            Support::Supported => Ok(()),
            Support::Unsupported(why) => Err((abi::STATUS_UNSUPPORTED, why)),
        }
    };
    // SAFETY: `reason` is null or valid per the ABI.
    unsafe { guard(reason, body) }
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn create_workload_factory<E: Export>(
    instance: *mut abi::Instance,
    memory_manager: *mut abi::MemoryManager,
    out_factory: *mut *mut abi::WorkloadFactory,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        let mm = if memory_manager.is_null() {
            None
        } else {
            // SAFETY: a live memory manager of this instance per the ABI.
            let mm =
                unsafe { object::<PluginMemoryManager>(memory_manager.cast(), "memory manager") }?;
            Some(mm.0.clone())
        };
        let factory = inst
            .backend
            .create_workload_factory(mm)
            .map_err(status_of)?;
        let raw = Box::into_raw(Box::new(PluginFactory(factory))).cast::<abi::WorkloadFactory>();
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_factory, raw) }.inspect_err(|_| {
            // SAFETY: just made, not handed out.
            unsafe { destroy::<PluginFactory>(raw.cast()) }
        })
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// Pointers as the ABI documents; `sink` may be called with `user`.
pub(super) unsafe extern "C" fn capabilities<E: Export>(
    instance: *mut abi::Instance,
    sink: abi::CapabilitySink,
    user: *mut c_void,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        for (name, value) in &inst.backend.capabilities().0 {
            let name = c_string(name);
            let (kind, int_value, text) = match value {
                CapabilityValue::Bool(b) => (abi::CAP_BOOL, i64::from(*b), None),
                CapabilityValue::Int(i) => (abi::CAP_INT, *i, None),
                CapabilityValue::Text(t) => (abi::CAP_TEXT, 0, Some(c_string(t))),
            };
            let cap = abi::Capability {
                struct_size: abi::size_u32::<abi::Capability>(),
                kind,
                name: name.as_ptr(),
                int_value,
                text: text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            };
            // SAFETY: `sink` and `user` come from the host, which expects exactly this
            // call; `cap` and its strings live across it.
            unsafe { sink(user, &cap) };
        }
        Ok(())
    };
    // SAFETY: a null error buffer is allowed.
    unsafe { guard(std::ptr::null_mut(), body) }
}

impl<B: Backend> PluginInstance<B> {
    /// The backend's tensor-handle factories, registered once per instance.
    pub(super) fn factories(&self) -> &TensorHandleFactoryRegistry {
        self.factories.get_or_init(|| {
            let mut registry = TensorHandleFactoryRegistry::new();
            // A panic while registering leaves the factories registered so far.
            quietly(|| self.backend.register_tensor_handle_factories(&mut registry));
            registry
        })
    }
}

//! Exported memory: the backend's memory managers and its tensor-handle factories and handles.

use crate::abi;
use crate::convert::{c_string, read_tensor_info, text};
use backplane_backend_api::{Backend, DataLayout, FactoryId, MemoryManager, TensorHandle};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

use super::instance::PluginInstance;
use super::{destroy, guard, invalid, object, put, quietly, status_of, Export};

/// A memory manager handed to the host.
pub(super) struct PluginMemoryManager(pub(super) Arc<dyn MemoryManager>);

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn create_memory_manager<E: Export>(
    instance: *mut abi::Instance,
    out_manager: *mut *mut abi::MemoryManager,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        let raw = match inst.backend.create_memory_manager() {
            Some(mm) => Box::into_raw(Box::new(PluginMemoryManager(mm))).cast(),
            None => std::ptr::null_mut(),
        };
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_manager, raw) }.inspect_err(|_| {
            // SAFETY: just made (or null), not handed out.
            unsafe { destroy::<PluginMemoryManager>(raw.cast()) }
        })
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn memory_manager_acquire(
    manager: *mut abi::MemoryManager,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live manager per the ABI.
        let mm = unsafe { object::<PluginMemoryManager>(manager.cast(), "memory manager") }?;
        mm.0.acquire().map_err(status_of)
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// `manager` is a live memory manager.
pub(super) unsafe extern "C" fn memory_manager_release(manager: *mut abi::MemoryManager) {
    quietly(|| {
        // SAFETY: a live manager per the caller.
        if let Ok(mm) = unsafe { object::<PluginMemoryManager>(manager.cast(), "memory manager") } {
            mm.0.release();
        }
    })
}

/// # Safety
/// `manager` was made by `create_memory_manager` and is not used again.
pub(super) unsafe extern "C" fn destroy_memory_manager(manager: *mut abi::MemoryManager) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginMemoryManager>(manager.cast()) }
}

/// # Safety
/// Pointers as the ABI documents; `sink` may be called with `user`.
pub(super) unsafe extern "C" fn tensor_handle_factories<E: Export>(
    instance: *mut abi::Instance,
    sink: abi::FactorySink,
    user: *mut c_void,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        let registry = inst.factories();
        for id in registry.ids() {
            let Some(factory) = registry.get(&id) else {
                continue;
            };
            let p = factory.properties();
            let c_id = c_string(id.as_str());
            let flags = [
                (p.mappable, abi::FACTORY_MAPPABLE),
                (p.sub_tensors, abi::FACTORY_SUB_TENSORS),
                (p.in_place, abi::FACTORY_IN_PLACE),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .fold(0, |a, (_, f)| a | f);
            let desc = abi::TensorHandleFactoryDesc {
                struct_size: abi::size_u32::<abi::TensorHandleFactoryDesc>(),
                flags,
                id: c_id.as_ptr(),
                import_sources: p.import_sources.0,
                export_sources: p.export_sources.0,
                layout: match p.layout {
                    DataLayout::Standard => abi::LAYOUT_STANDARD,
                    DataLayout::ChannelsLast => abi::LAYOUT_CHANNELS_LAST,
                },
                reserved: 0,
            };
            // SAFETY: `sink` and `user` come from the host, which expects exactly this call;
            // `desc` and its string live across it.
            unsafe { sink(user, &desc) };
        }
        Ok(())
    };
    // SAFETY: a null error buffer is allowed.
    unsafe { guard(std::ptr::null_mut(), body) }
}

/// # Safety
/// Pointers as the ABI documents; `sink` may be called with `user`.
pub(super) unsafe extern "C" fn handle_factory_preferences<E: Export>(
    instance: *mut abi::Instance,
    sink: abi::TextSink,
    user: *mut c_void,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        for id in inst.backend.handle_factory_preferences() {
            let c_id = c_string(id.as_str());
            // SAFETY: `sink` and `user` come from the host, which expects exactly this call;
            // the string lives across it.
            unsafe { sink(user, c_id.as_ptr()) };
        }
        Ok(())
    };
    // SAFETY: a null error buffer is allowed.
    unsafe { guard(std::ptr::null_mut(), body) }
}

/// A tensor handle made by one of the backend's factories.
pub(super) struct PluginTensorHandle {
    pub(super) handle: Box<dyn TensorHandle>,
    pub(super) num_bytes: usize,
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn create_tensor_handle<E: Export>(
    instance: *mut abi::Instance,
    factory_id: *const c_char,
    info: *const abi::TensorInfo,
    out_handle: *mut *mut abi::TensorHandle,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        // SAFETY: NUL-terminated per the ABI.
        let id = unsafe { text(factory_id, "factory id") }.map_err(invalid)?;
        // SAFETY: a valid description per the ABI.
        let info = unsafe { read_tensor_info(info) }.map_err(invalid)?;
        let num_bytes = info.num_bytes().map_err(|e| invalid(e.to_string()))?;
        let id = FactoryId::new(id).map_err(invalid)?;
        let factory = inst
            .factories()
            .get(&id)
            .ok_or_else(|| invalid(format!("the backend has no factory '{id}'")))?;
        let handle = factory.create_tensor_handle(&info).map_err(status_of)?;
        let raw = Box::into_raw(Box::new(PluginTensorHandle { handle, num_bytes }))
            .cast::<abi::TensorHandle>();
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_handle, raw) }.inspect_err(|_| {
            // SAFETY: just made, not handed out.
            unsafe { destroy::<PluginTensorHandle>(raw.cast()) }
        })
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// `handle` was made by `create_tensor_handle` and is not used again.
pub(super) unsafe extern "C" fn destroy_tensor_handle(handle: *mut abi::TensorHandle) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginTensorHandle>(handle.cast()) }
}

/// # Safety
/// Pointers as the ABI documents; the host makes no other call on `handle` during this one.
pub(super) unsafe extern "C" fn map_tensor_handle(
    handle: *mut abi::TensorHandle,
    writable: u32,
    out_data: *mut *mut c_void,
    out_num_bytes: *mut usize,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        let handle = handle.cast::<PluginTensorHandle>();
        if handle.is_null() {
            return Err(invalid("the tensor handle is null"));
        }
        let unmappable = || {
            (
                abi::STATUS_FAILED,
                String::from("this tensor handle cannot be mapped"),
            )
        };
        // The bytes stay where the handle keeps them after the view is dropped: a view
        // borrows the handle's own memory, which the SDK does not touch until unmap.
        let (data, len, expected) = if writable != 0 {
            // SAFETY: a live handle that nothing else uses during the call (the host maps
            // it writable only when it holds no other mapping of it), per the ABI.
            let h = unsafe { &mut *handle };
            let v = h.handle.map_mut().ok_or_else(unmappable)?;
            (v.data.as_mut_ptr(), v.data.len(), h.num_bytes)
        } else {
            // SAFETY: a live handle, only read here, per the ABI.
            let h = unsafe { &*handle };
            let v = h.handle.map().ok_or_else(unmappable)?;
            (v.data.as_ptr().cast_mut(), v.data.len(), h.num_bytes)
        };
        if len != expected {
            return Err((
                abi::STATUS_FAILED,
                format!("the mapping has {len} bytes, the tensor {expected}"),
            ));
        }
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_data, data.cast::<c_void>()) }?;
        // SAFETY: as above.
        unsafe { put(out_num_bytes, len) }
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// `handle` is a live, mapped handle.
pub(super) unsafe extern "C" fn unmap_tensor_handle(_handle: *mut abi::TensorHandle) {
    // A Rust tensor handle's mapping is a borrow of its memory: nothing to end.
}

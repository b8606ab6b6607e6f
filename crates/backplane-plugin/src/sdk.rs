//! The Rust SDK: export an ordinary [`Backend`] as a dynamic backend.
//!
//! ```ignore
//! // In a crate with `crate-type = ["cdylib"]`:
//! #[derive(Default)]
//! struct MyBackend;
//! impl backplane_backend_api::Backend for MyBackend { /* ... */ }
//! backplane_plugin::export_backend!(MyBackend);
//! ```
//!
//! The macro exports `GetBackendId`, `GetVersion` and `BackendFactory` with C linkage. The
//! table it returns reaches every method of the backend: layer support, workload factories
//! and workloads, memory managers, the backend context, capabilities, and (ABI 1.2) its
//! tensor-handle factories and preferences (registered once per instance; its workloads'
//! `execute_handles` receives its own handles) and `optimize_subgraph` (the subgraph is
//! rebuilt as a network of its own: external tensors become inputs and constants, tensors
//! used outside become outputs; the answer is translated back to the host's ids). Every exported
//! function runs inside [`std::panic::catch_unwind`]: a panic becomes
//! [`abi::STATUS_PANICKED`] with the panic message, and nothing unwinds into the host.
//!
//! A backend that needs its own file's path (to find data files beside it) or the options the
//! application set for it uses the second form, with a constructor that receives a [`Host`]:
//!
//! ```ignore
//! backplane_plugin::export_backend!(MyBackend, id = "MyBackend", create = MyBackend::create);
//! // where: fn create(host: &backplane_plugin::sdk::Host) -> Result<MyBackend, String>
//! ```

use crate::abi;
use crate::convert::{
    c_string, read_layer_desc, read_subgraph, read_tensor_info, slice, text, write_message,
    OwnedSubstitution,
};
use backplane_backend_api::{
    Backend, BackendContext, BackendError, BackendOptions, BackendVersion, CapabilityValue,
    DataLayout, FactoryId, HostViewHandle, HostViewHandleMut, LayerSupport, MemoryManager,
    NetworkId, SubgraphView, Support, TensorHandle, TensorHandleFactoryRegistry, Workload,
    WorkloadFactory,
};
use backplane_core::{LayerId, TensorInfo, TensorView, TensorViewMut};
use std::any::Any;
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

/// What the host told the plugin when it created the backend instance.
#[derive(Debug, Clone)]
pub struct Host {
    /// The host's ABI version.
    pub host_abi: BackendVersion,
    /// The ABI version both sides speak: the lower minor of the two.
    pub abi: BackendVersion,
    /// The plugin's own file.
    pub plugin_path: PathBuf,
    /// The backend options the application set for this backend.
    pub options: BackendOptions,
}

/// What [`export_backend!`](crate::export_backend) implements for the exported type; not for direct use.
pub trait Export: 'static {
    /// The backend.
    type Backend: Backend;
    /// The id as a NUL-terminated string with static lifetime, or null if it cannot be had.
    fn backend_id() -> *const c_char;
    /// Create the backend for one runtime.
    fn create(host: &Host) -> Result<Self::Backend, String>;
}

/// Text of a panic payload.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        String::from("(no message)")
    }
}

/// Run `f`, turning an error into its status and message, and a panic into
/// [`abi::STATUS_PANICKED`].
///
/// # Safety
/// `error` is null or a valid [`abi::Message`].
unsafe fn guard(
    error: *mut abi::Message,
    f: impl FnOnce() -> Result<(), (abi::Status, String)>,
) -> abi::Status {
    let (status, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return abi::STATUS_OK,
        Ok(Err(e)) => e,
        Err(payload) => (
            abi::STATUS_PANICKED,
            format!("the backend panicked: {}", panic_text(payload.as_ref())),
        ),
    };
    // SAFETY: null or valid per the caller.
    unsafe { write_message(error, &message) };
    status
}

/// Run `f` for a function that reports nothing; a panic is swallowed (there is no channel to
/// report it, and it must not unwind into the host).
fn quietly(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// The status and message for a backend error.
fn status_of(e: BackendError) -> (abi::Status, String) {
    match e {
        BackendError::Unsupported { reason, .. } => (abi::STATUS_UNSUPPORTED, reason),
        BackendError::Execution(m) => (abi::STATUS_EXECUTION_FAILED, m),
        other => (abi::STATUS_FAILED, other.to_string()),
    }
}

fn invalid(m: impl Into<String>) -> (abi::Status, String) {
    (abi::STATUS_INVALID_ARGUMENT, m.into())
}

/// Reference to the object behind an opaque pointer.
///
/// # Safety
/// `ptr` is null or was made by `Box::into_raw` of a `T` that is still alive.
unsafe fn object<'a, T>(ptr: *mut c_void, what: &str) -> Result<&'a T, (abi::Status, String)> {
    // SAFETY: null or a live `T` per the caller.
    unsafe { ptr.cast::<T>().cast_const().as_ref() }
        .ok_or_else(|| invalid(format!("{what} is null")))
}

/// Drop the object behind an opaque pointer.
///
/// # Safety
/// `ptr` is null or was made by `Box::into_raw` of a `T` and is not used again.
unsafe fn destroy<T>(ptr: *mut c_void) {
    if !ptr.is_null() {
        // SAFETY: made by `Box::into_raw` and given back once, per the caller.
        quietly(|| drop(unsafe { Box::from_raw(ptr.cast::<T>()) }));
    }
}

/// Store `value` behind an out-pointer.
///
/// # Safety
/// `out` is null or valid for writes.
unsafe fn put<T>(out: *mut T, value: T) -> Result<(), (abi::Status, String)> {
    if out.is_null() {
        return Err(invalid("an out-pointer is null"));
    }
    // SAFETY: non-null and valid for writes per the caller.
    unsafe { out.write(value) };
    Ok(())
}

/// A backend instance: the backend and its layer support, created once.
struct PluginInstance<B> {
    backend: B,
    layer_support: Arc<dyn LayerSupport>,
    factories: std::sync::OnceLock<TensorHandleFactoryRegistry>,
}

struct PluginFactory(Box<dyn WorkloadFactory>);

struct PluginWorkload {
    workload: Box<dyn Workload>,
    inputs: Vec<(TensorInfo, usize)>,
    outputs: Vec<(TensorInfo, usize)>,
}

struct PluginMemoryManager(Arc<dyn MemoryManager>);

struct PluginContext(Box<dyn BackendContext>);

/// Read the options of a C option array.
///
/// # Safety
/// `options` has `n` valid entries.
unsafe fn read_options(
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
unsafe extern "C" fn create_instance<E: Export>(
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
unsafe extern "C" fn destroy_instance<E: Export>(instance: *mut abi::Instance) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginInstance<E::Backend>>(instance.cast()) }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn backend_version<E: Export>(
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
unsafe extern "C" fn is_layer_supported<E: Export>(
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
unsafe extern "C" fn create_workload_factory<E: Export>(
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
/// `factory` was made by `create_workload_factory` and is not used again.
unsafe extern "C" fn destroy_workload_factory(factory: *mut abi::WorkloadFactory) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginFactory>(factory.cast()) }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn create_workload(
    factory: *mut abi::WorkloadFactory,
    layer: *const abi::LayerDesc,
    out_workload: *mut *mut abi::Workload,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live factory per the ABI.
        let f = unsafe { object::<PluginFactory>(factory.cast(), "workload factory") }?;
        // SAFETY: a valid description per the ABI.
        let desc = unsafe { read_layer_desc(layer) }.map_err(invalid)?;
        let sized = |infos: &[TensorInfo]| {
            infos
                .iter()
                .map(|i| i.num_bytes().map(|n| (i.clone(), n)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(e.to_string()))
        };
        let inputs = sized(&desc.inputs)?;
        let outputs = sized(&desc.outputs)?;
        let workload = f.0.create_workload(&desc).map_err(status_of)?;
        let raw = Box::into_raw(Box::new(PluginWorkload {
            workload,
            inputs,
            outputs,
        }))
        .cast::<abi::Workload>();
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_workload, raw) }.inspect_err(|_| {
            // SAFETY: just made, not handed out.
            unsafe { destroy::<PluginWorkload>(raw.cast()) }
        })
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// Where a host view's tensor is.
enum Checked {
    /// Host memory.
    Data(*mut u8),
    /// One of this backend's tensor handles (1.2).
    Handle(*mut PluginTensorHandle),
}

/// Check a host view against the description it must match. The view is `what` number
/// `index` (for messages, formatted only on failure).
///
/// # Safety
/// `view` is null or a valid [`abi::TensorView`].
unsafe fn checked_view(
    view: *const abi::TensorView,
    expected: &(TensorInfo, usize),
    what: &str,
    index: usize,
) -> Result<Checked, (abi::Status, String)> {
    // SAFETY: null or valid per the caller.
    let v = unsafe { view.as_ref() }.ok_or_else(|| invalid(format!("{what} {index} is null")))?;
    if (v.struct_size as usize) < field_end!(abi::TensorView, num_bytes) {
        return Err(invalid(format!("{what} {index}: struct_size is too small")));
    }
    if v.num_bytes != expected.1 {
        return Err(invalid(format!(
            "{what} {index} has {} bytes but {} needs {}",
            v.num_bytes, expected.0, expected.1
        )));
    }
    if (v.struct_size as usize) >= field_end!(abi::TensorView, handle) && !v.handle.is_null() {
        return Ok(Checked::Handle(v.handle.cast::<PluginTensorHandle>()));
    }
    if v.data.is_null() && expected.1 > 0 {
        return Err(invalid(format!("{what} {index} has no data")));
    }
    Ok(Checked::Data(v.data.cast::<u8>()))
}

/// One input of a workload that takes handles.
enum InputArg<'a> {
    Host(HostViewHandle<'a>),
    Handle(&'a PluginTensorHandle),
}

/// One output of a workload that takes handles.
enum OutputArg<'a> {
    Host(HostViewHandleMut<'a>),
    Handle(&'a mut PluginTensorHandle),
}

/// # Safety
/// Pointers as the ABI documents: views of the sizes the workload's layer describes, outputs
/// writable and not overlapping each other or the inputs; handles are live handles of this
/// backend, none of them an output twice or both an input and an output.
unsafe extern "C" fn execute_workload(
    workload: *mut abi::Workload,
    inputs: *const *const abi::TensorView,
    num_inputs: usize,
    outputs: *const *const abi::TensorView,
    num_outputs: usize,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live workload per the ABI.
        let w = unsafe { object::<PluginWorkload>(workload.cast(), "workload") }?;
        if num_inputs != w.inputs.len() || num_outputs != w.outputs.len() {
            return Err(invalid(format!(
                "expected {} inputs and {} outputs, got {num_inputs} and {num_outputs}",
                w.inputs.len(),
                w.outputs.len()
            )));
        }
        // SAFETY: `num_inputs` entries per the ABI.
        let ins = unsafe { slice(inputs, num_inputs) }.map_err(invalid)?;
        // SAFETY: `num_outputs` entries per the ABI.
        let outs = unsafe { slice(outputs, num_outputs) }.map_err(invalid)?;
        let mut in_checked = Vec::with_capacity(num_inputs);
        for (i, (&v, expected)) in ins.iter().zip(&w.inputs).enumerate() {
            // SAFETY: a valid view per the ABI.
            in_checked.push(unsafe { checked_view(v, expected, "input", i) }?);
        }
        let mut out_checked = Vec::with_capacity(num_outputs);
        for (i, (&v, expected)) in outs.iter().zip(&w.outputs).enumerate() {
            // SAFETY: a valid view per the ABI.
            out_checked.push(unsafe { checked_view(v, expected, "output", i) }?);
        }
        let handles = in_checked
            .iter()
            .chain(&out_checked)
            .any(|c| matches!(c, Checked::Handle(_)));
        if !handles {
            let mut in_views = Vec::with_capacity(num_inputs);
            for (c, expected) in in_checked.iter().zip(&w.inputs) {
                let Checked::Data(data) = *c else {
                    return Err(invalid("unreachable: a handle"));
                };
                in_views.push(TensorView {
                    info: &expected.0,
                    // SAFETY: checked non-null (or empty) with `expected.1` readable bytes.
                    data: unsafe { slice(data.cast_const(), expected.1) }.map_err(invalid)?,
                });
            }
            let mut out_views = Vec::with_capacity(num_outputs);
            for (c, expected) in out_checked.iter().zip(&w.outputs) {
                let Checked::Data(data) = *c else {
                    return Err(invalid("unreachable: a handle"));
                };
                out_views.push(TensorViewMut {
                    info: &expected.0,
                    // SAFETY: non-null (or empty), `expected.1` writable bytes that nothing
                    // else references during the call (outputs never overlap), per the ABI.
                    data: unsafe { slice_mut(data, expected.1) },
                });
            }
            return w
                .workload
                .execute(&in_views, &mut out_views)
                .map_err(status_of);
        }
        // Some tensors are in the backend's own handles: the workload gets handles.
        let out_handles: Vec<*mut PluginTensorHandle> = out_checked
            .iter()
            .filter_map(|c| match c {
                Checked::Handle(h) => Some(*h),
                Checked::Data(_) => None,
            })
            .collect();
        for (i, h) in out_handles.iter().enumerate() {
            let twice = out_handles[..i].contains(h)
                || in_checked
                    .iter()
                    .any(|c| matches!(c, Checked::Handle(x) if x == h));
            if twice {
                return Err(invalid(
                    "an output handle is also another output or an input",
                ));
            }
        }
        let mut in_args = Vec::with_capacity(num_inputs);
        for (c, expected) in in_checked.iter().zip(&w.inputs) {
            in_args.push(match *c {
                Checked::Data(data) => InputArg::Host(HostViewHandle(TensorView {
                    info: &expected.0,
                    // SAFETY: checked non-null (or empty) with `expected.1` readable bytes.
                    data: unsafe { slice(data.cast_const(), expected.1) }.map_err(invalid)?,
                })),
                Checked::Handle(h) => InputArg::Handle(
                    // SAFETY: a live handle of this backend per the ABI, only read here.
                    unsafe { h.as_ref() }.ok_or_else(|| invalid("null handle"))?,
                ),
            });
        }
        let mut out_args = Vec::with_capacity(num_outputs);
        for (c, expected) in out_checked.iter().zip(&w.outputs) {
            out_args.push(match *c {
                Checked::Data(data) => OutputArg::Host(HostViewHandleMut(TensorViewMut {
                    info: &expected.0,
                    // SAFETY: as in the host-memory path above.
                    data: unsafe { slice_mut(data, expected.1) },
                })),
                Checked::Handle(h) => OutputArg::Handle(
                    // SAFETY: a live handle of this backend per the ABI, checked above to
                    // appear once among the tensors of this call: this is its only reference.
                    unsafe { h.as_mut() }.ok_or_else(|| invalid("null handle"))?,
                ),
            });
        }
        let in_refs: Vec<&dyn TensorHandle> = in_args
            .iter()
            .map(|a| match a {
                InputArg::Host(h) => h as &dyn TensorHandle,
                InputArg::Handle(h) => h.handle.as_ref(),
            })
            .collect();
        let mut out_refs: Vec<&mut dyn TensorHandle> = out_args
            .iter_mut()
            .map(|a| match a {
                OutputArg::Host(h) => h as &mut dyn TensorHandle,
                OutputArg::Handle(h) => h.handle.as_mut(),
            })
            .collect();
        w.workload
            .execute_handles(&in_refs, &mut out_refs)
            .map_err(status_of)
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// A writable slice from a C pointer; empty when `len` is 0.
///
/// # Safety
/// When `len > 0`, `data` is non-null with `len` writable bytes that nothing else references
/// for `'a`.
unsafe fn slice_mut<'a>(data: *mut u8, len: usize) -> &'a mut [u8] {
    if len == 0 || data.is_null() {
        &mut []
    } else {
        // SAFETY: per the caller.
        unsafe { std::slice::from_raw_parts_mut(data, len) }
    }
}

/// # Safety
/// `workload` was made by `create_workload` and is not used again.
unsafe extern "C" fn destroy_workload(workload: *mut abi::Workload) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginWorkload>(workload.cast()) }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn create_memory_manager<E: Export>(
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
unsafe extern "C" fn memory_manager_acquire(
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
unsafe extern "C" fn memory_manager_release(manager: *mut abi::MemoryManager) {
    quietly(|| {
        // SAFETY: a live manager per the caller.
        if let Ok(mm) = unsafe { object::<PluginMemoryManager>(manager.cast(), "memory manager") } {
            mm.0.release();
        }
    })
}

/// # Safety
/// `manager` was made by `create_memory_manager` and is not used again.
unsafe extern "C" fn destroy_memory_manager(manager: *mut abi::MemoryManager) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginMemoryManager>(manager.cast()) }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn create_context<E: Export>(
    instance: *mut abi::Instance,
    options: *const *const abi::BackendOption,
    num_options: usize,
    out_context: *mut *mut abi::Context,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        // SAFETY: `num_options` entries per the ABI.
        let options = unsafe { read_options(options, num_options) }.map_err(invalid)?;
        let raw = match inst
            .backend
            .create_backend_context(&options)
            .map_err(status_of)?
        {
            Some(ctx) => Box::into_raw(Box::new(PluginContext(ctx))).cast(),
            None => std::ptr::null_mut(),
        };
        // SAFETY: valid for writes per the ABI.
        unsafe { put(out_context, raw) }.inspect_err(|_| {
            // SAFETY: just made (or null), not handed out.
            unsafe { destroy::<PluginContext>(raw.cast()) }
        })
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// # Safety
/// `context` was made by `create_context` and is not used again.
unsafe extern "C" fn destroy_context(context: *mut abi::Context) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginContext>(context.cast()) }
}

/// Run one context hook.
///
/// # Safety
/// `context` is a live context; `error` null or valid.
unsafe fn hook(
    context: *mut abi::Context,
    error: *mut abi::Message,
    f: impl FnOnce(&dyn BackendContext) -> backplane_backend_api::Result<()>,
) -> abi::Status {
    let body = || {
        // SAFETY: a live context per the caller.
        let ctx = unsafe { object::<PluginContext>(context.cast(), "context") }?;
        f(ctx.0.as_ref()).map_err(status_of)
    };
    // SAFETY: `error` is null or valid per the caller.
    unsafe { guard(error, body) }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn context_before_load(
    context: *mut abi::Context,
    network: u64,
    error: *mut abi::Message,
) -> abi::Status {
    // SAFETY: per the ABI.
    unsafe {
        hook(context, error, |c| {
            c.before_load_network(NetworkId(network))
        })
    }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn context_after_load(
    context: *mut abi::Context,
    network: u64,
    error: *mut abi::Message,
) -> abi::Status {
    // SAFETY: per the ABI.
    unsafe { hook(context, error, |c| c.after_load_network(NetworkId(network))) }
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn context_before_unload(
    context: *mut abi::Context,
    network: u64,
    error: *mut abi::Message,
) -> abi::Status {
    // SAFETY: per the ABI.
    unsafe {
        hook(context, error, |c| {
            c.before_unload_network(NetworkId(network))
        })
    }
}

/// # Safety
/// `context` is a live context.
unsafe extern "C" fn context_after_unload(context: *mut abi::Context, network: u64) {
    // SAFETY: per the ABI; the null error buffer is allowed.
    let _ = unsafe {
        hook(context, std::ptr::null_mut(), |c| {
            c.after_unload_network(NetworkId(network));
            Ok(())
        })
    };
}

/// # Safety
/// Pointers as the ABI documents; `sink` may be called with `user`.
unsafe extern "C" fn capabilities<E: Export>(
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
    fn factories(&self) -> &TensorHandleFactoryRegistry {
        self.factories.get_or_init(|| {
            let mut registry = TensorHandleFactoryRegistry::new();
            // A panic while registering leaves the factories registered so far.
            quietly(|| self.backend.register_tensor_handle_factories(&mut registry));
            registry
        })
    }
}

/// # Safety
/// Pointers as the ABI documents; `sink` may be called with `user`.
unsafe extern "C" fn tensor_handle_factories<E: Export>(
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
unsafe extern "C" fn handle_factory_preferences<E: Export>(
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
struct PluginTensorHandle {
    handle: Box<dyn TensorHandle>,
    num_bytes: usize,
}

/// # Safety
/// Pointers as the ABI documents.
unsafe extern "C" fn create_tensor_handle<E: Export>(
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
unsafe extern "C" fn destroy_tensor_handle(handle: *mut abi::TensorHandle) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginTensorHandle>(handle.cast()) }
}

/// # Safety
/// Pointers as the ABI documents; the host makes no other call on `handle` during this one.
unsafe extern "C" fn map_tensor_handle(
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
unsafe extern "C" fn unmap_tensor_handle(_handle: *mut abi::TensorHandle) {
    // A Rust tensor handle's mapping is a borrow of its memory: nothing to end.
}

/// # Safety
/// Pointers as the ABI documents; `sink`'s functions may be called with its `user`.
unsafe extern "C" fn optimize_subgraph<E: Export>(
    instance: *mut abi::Instance,
    subgraph: *const abi::Subgraph,
    sink: *const abi::OptimizationSink,
    error: *mut abi::Message,
) -> abi::Status {
    let body = || {
        // SAFETY: a live instance per the ABI.
        let inst = unsafe { object::<PluginInstance<E::Backend>>(instance.cast(), "instance") }?;
        // SAFETY: null or valid per the ABI.
        let sink = unsafe { sink.as_ref() }.ok_or_else(|| invalid("the sink is null"))?;
        if (sink.struct_size as usize) < field_end!(abi::OptimizationSink, add_untouched) {
            return Err(invalid("the sink's struct_size is too small"));
        }
        let (Some(add_sub), Some(add_failed), Some(add_untouched)) =
            (sink.add_substitution, sink.add_failed, sink.add_untouched)
        else {
            return Err(invalid("the sink lacks a function"));
        };
        // SAFETY: a valid subgraph per the ABI.
        let read = unsafe { read_subgraph(subgraph) }.map_err(invalid)?;
        let layers: Vec<LayerId> = (0..read.network.layers().len()).map(LayerId).collect();
        let view = SubgraphView::new(&read.network, layers);
        let views = inst.backend.optimize_subgraph(&view);
        let host_layers = |ls: &[LayerId]| -> Result<Vec<u64>, (abi::Status, String)> {
            ls.iter()
                .map(|l| {
                    read.layer_ids.get(l.0).copied().ok_or_else(|| {
                        (
                            abi::STATUS_FAILED,
                            format!("optimize_subgraph names unknown layer #{}", l.0),
                        )
                    })
                })
                .collect()
        };
        let check = |status: abi::Status| {
            if status == abi::STATUS_OK {
                Ok(())
            } else {
                Err((
                    abi::STATUS_FAILED,
                    String::from("the host refused part of the answer"),
                ))
            }
        };
        for sub in &views.substitutions {
            let c = OwnedSubstitution::new(&read, sub).map_err(|m| (abi::STATUS_FAILED, m))?;
            // SAFETY: the host's function with its `user`; `c` lives across the call.
            check(unsafe { add_sub(sink.user, c.as_ptr()) })?;
        }
        for part in &views.failed {
            let ids = host_layers(part)?;
            // SAFETY: as above; `ids` lives across the call.
            check(unsafe { add_failed(sink.user, ids.as_ptr(), ids.len()) })?;
        }
        for part in &views.untouched {
            let ids = host_layers(part)?;
            // SAFETY: as above.
            check(unsafe { add_untouched(sink.user, ids.as_ptr(), ids.len()) })?;
        }
        Ok(())
    };
    // SAFETY: `error` is null or valid per the ABI.
    unsafe { guard(error, body) }
}

/// The function table for `E`, as `BackendFactory` returns it.
pub const fn vtable<E: Export>() -> abi::BackendVTable {
    abi::BackendVTable {
        struct_size: abi::size_u32::<abi::BackendVTable>(),
        abi_major: abi::ABI_VERSION_MAJOR,
        abi_minor: abi::ABI_VERSION_MINOR,
        reserved: 0,
        create_instance: Some(create_instance::<E>),
        destroy_instance: Some(destroy_instance::<E>),
        backend_version: Some(backend_version::<E>),
        is_layer_supported: Some(is_layer_supported::<E>),
        create_workload_factory: Some(create_workload_factory::<E>),
        destroy_workload_factory: Some(destroy_workload_factory),
        create_workload: Some(create_workload),
        execute_workload: Some(execute_workload),
        destroy_workload: Some(destroy_workload),
        create_memory_manager: Some(create_memory_manager::<E>),
        memory_manager_acquire: Some(memory_manager_acquire),
        memory_manager_release: Some(memory_manager_release),
        destroy_memory_manager: Some(destroy_memory_manager),
        create_context: Some(create_context::<E>),
        destroy_context: Some(destroy_context),
        context_before_load: Some(context_before_load),
        context_after_load: Some(context_after_load),
        context_before_unload: Some(context_before_unload),
        context_after_unload: Some(context_after_unload),
        capabilities: Some(capabilities::<E>),
        tensor_handle_factories: Some(tensor_handle_factories::<E>),
        handle_factory_preferences: Some(handle_factory_preferences::<E>),
        create_tensor_handle: Some(create_tensor_handle::<E>),
        destroy_tensor_handle: Some(destroy_tensor_handle),
        map_tensor_handle: Some(map_tensor_handle),
        unmap_tensor_handle: Some(unmap_tensor_handle),
        optimize_subgraph: Some(optimize_subgraph::<E>),
    }
}

/// `GetVersion`'s body: the ABI version this SDK was built with.
///
/// # Safety
/// Each pointer is null or valid for writes.
pub unsafe fn write_version(major: *mut u32, minor: *mut u32) {
    if !major.is_null() {
        // SAFETY: non-null and valid for writes per the caller.
        unsafe { major.write(abi::ABI_VERSION_MAJOR) };
    }
    if !minor.is_null() {
        // SAFETY: as above.
        unsafe { minor.write(abi::ABI_VERSION_MINOR) };
    }
}

/// `GetBackendId`'s body for the `Default` form: the id of a default-constructed backend,
/// computed once; null if constructing it panics or the id has a NUL.
pub fn default_id<B: Backend + Default>(
    cell: &'static std::sync::OnceLock<Option<std::ffi::CString>>,
) -> *const c_char {
    cell.get_or_init(|| {
        catch_unwind(|| std::ffi::CString::new(B::default().id().as_str().to_string()).ok())
            .ok()
            .flatten()
    })
    .as_ref()
    .map_or(std::ptr::null(), |s| s.as_ptr())
}

/// Run a plugin-side function that returns a pointer, returning null if it panics.
pub fn or_null<T>(f: impl FnOnce() -> *const T) -> *const T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(std::ptr::null())
}

/// Export a [`Backend`] from a `cdylib` as a dynamic backend.
///
/// `export_backend!(MyBackend)` needs `MyBackend: Backend + Default`; its id is that of a
/// default-constructed value. `export_backend!(MyBackend, id = "Id", create = f)` takes the id
/// as a literal and a constructor `f(&Host) -> Result<MyBackend, String>`, for a backend that
/// needs its file's path or its options. Use it once per library.
#[macro_export]
macro_rules! export_backend {
    ($backend:ty) => {
        $crate::export_backend!(@emit $backend,
            fn backend_id() -> *const ::std::ffi::c_char {
                static ID: ::std::sync::OnceLock<::std::option::Option<::std::ffi::CString>> =
                    ::std::sync::OnceLock::new();
                $crate::sdk::default_id::<$backend>(&ID)
            }
            fn create(
                _host: &$crate::sdk::Host,
            ) -> ::std::result::Result<$backend, ::std::string::String> {
                ::std::result::Result::Ok(<$backend as ::std::default::Default>::default())
            }
        );
    };
    ($backend:ty, id = $id:literal, create = $create:expr) => {
        $crate::export_backend!(@emit $backend,
            fn backend_id() -> *const ::std::ffi::c_char {
                ::std::concat!($id, "\0").as_ptr().cast()
            }
            fn create(
                host: &$crate::sdk::Host,
            ) -> ::std::result::Result<$backend, ::std::string::String> {
                ($create)(host)
            }
        );
    };
    (@emit $backend:ty, $($body:item)*) => {
        #[doc(hidden)]
        pub struct __BackplaneExport;

        impl $crate::sdk::Export for __BackplaneExport {
            type Backend = $backend;
            $($body)*
        }

        #[doc(hidden)]
        static __BACKPLANE_VTABLE: $crate::abi::BackendVTable =
            $crate::sdk::vtable::<__BackplaneExport>();

        /// The backend's id (C linkage, for the backplane runtime).
        #[no_mangle]
        pub extern "C" fn GetBackendId() -> *const ::std::ffi::c_char {
            $crate::sdk::or_null(<__BackplaneExport as $crate::sdk::Export>::backend_id)
        }

        /// The ABI version this backend was built against (C linkage).
        ///
        /// # Safety
        /// Each pointer is null or valid for writes.
        #[no_mangle]
        pub unsafe extern "C" fn GetVersion(major: *mut u32, minor: *mut u32) {
            // SAFETY: forwarded from the caller, who guarantees the pointers.
            unsafe { $crate::sdk::write_version(major, minor) }
        }

        /// The backend's function table (C linkage).
        #[no_mangle]
        pub extern "C" fn BackendFactory() -> *const $crate::abi::BackendVTable {
            &__BACKPLANE_VTABLE
        }
    };
}

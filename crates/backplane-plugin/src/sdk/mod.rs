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
use crate::convert::write_message;
use backplane_backend_api::{Backend, BackendError, BackendOptions, BackendVersion};
use std::any::Any;
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

mod context;
mod instance;
mod memory;
mod optimize;
mod workload;

use context::{
    context_after_execute, context_after_load, context_after_unload, context_before_load,
    context_before_unload, create_context, destroy_context,
};
use instance::{
    backend_version, capabilities, create_instance, create_workload_factory, destroy_instance,
    is_layer_supported,
};
use memory::{
    create_memory_manager, create_tensor_handle, destroy_memory_manager, destroy_tensor_handle,
    handle_factory_preferences, map_tensor_handle, memory_manager_acquire, memory_manager_release,
    tensor_handle_factories, unmap_tensor_handle,
};
use optimize::optimize_subgraph;
use workload::{create_workload, destroy_workload, destroy_workload_factory, execute_workload};

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
        context_after_execute: Some(context_after_execute),
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

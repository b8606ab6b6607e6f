//! The exported backend context: load, unload and end-of-execution hooks.

use crate::abi;
use backplane_backend_api::{Backend, BackendContext, NetworkId};

use super::instance::{read_options, PluginInstance};
use super::{destroy, guard, invalid, object, put, status_of, Export};

/// The backend context handed to the host.
pub(super) struct PluginContext(pub(super) Box<dyn BackendContext>);

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn create_context<E: Export>(
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
pub(super) unsafe extern "C" fn destroy_context(context: *mut abi::Context) {
    // SAFETY: per the caller.
    unsafe { destroy::<PluginContext>(context.cast()) }
}

/// Run one context hook.
///
/// # Safety
/// `context` is a live context; `error` null or valid.
pub(super) unsafe fn hook(
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
pub(super) unsafe extern "C" fn context_before_load(
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
pub(super) unsafe extern "C" fn context_after_load(
    context: *mut abi::Context,
    network: u64,
    error: *mut abi::Message,
) -> abi::Status {
    // SAFETY: per the ABI.
    unsafe { hook(context, error, |c| c.after_load_network(NetworkId(network))) }
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn context_before_unload(
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
pub(super) unsafe extern "C" fn context_after_unload(context: *mut abi::Context, network: u64) {
    // SAFETY: per the ABI; the null error buffer is allowed.
    let _ = unsafe {
        hook(context, std::ptr::null_mut(), |c| {
            c.after_unload_network(NetworkId(network));
            Ok(())
        })
    };
}

/// # Safety
/// Pointers as the ABI documents.
pub(super) unsafe extern "C" fn context_after_execute(
    context: *mut abi::Context,
    network: u64,
    error: *mut abi::Message,
) -> abi::Status {
    // SAFETY: per the ABI.
    unsafe {
        hook(context, error, |c| {
            c.after_execute_network(NetworkId(network))
        })
    }
}

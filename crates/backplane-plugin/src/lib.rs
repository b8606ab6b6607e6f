//! backplane-plugin: dynamic backends through a versioned C ABI.
//!
//! * [`abi`]: the `#[repr(C)]` types and entry-point signatures that cross the boundary
//!   (mirrored by the hand-written C header `include/backplane/backend.h`).
//! * [`sdk`]: for backend authors in Rust. Implement the ordinary
//!   [`Backend`](backplane_backend_api::Backend) trait, write
//!   `backplane_plugin::export_backend!(MyBackend);` in a `cdylib`, and the crate exports
//!   `GetBackendId`, `GetVersion` and `BackendFactory`; panics never cross the boundary.
//!   The backend's tensor-handle factories and `optimize_subgraph` are forwarded too (ABI
//!   1.2).
//! * [`host`]: for the runtime. Opens a shared object, checks its entry points and version,
//!   and wraps it in [`host::DynamicBackend`], an ordinary `Backend`, so the optimizer and
//!   runtime never know a backend is dynamic.
//!
//! # Unsafe policy
//!
//! This is the only crate of the workspace that contains `unsafe` code or `extern "C"`
//! functions. Every `unsafe` block carries a `// SAFETY:` comment saying why it is sound;
//! every `unsafe fn` has a `# Safety` section; `unsafe_op_in_unsafe_fn` is denied so an
//! `unsafe fn`'s body gets no blanket permission. Raw pointers from the other side are
//! checked for null and their `struct_size` before any field is read.
//!
//! # Libraries are never closed
//!
//! A loaded shared object stays mapped until the process exits (see [`host`]): closing a Rust
//! library whose code registered thread-local destructors (std's own, rayon's pools) crashes
//! the process later, and a function pointer that outlives its library is a use-after-free.
//! Backend *instances* are destroyed when the runtime that created them is dropped.

#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// The offset just past field `$f` of `$t`: a struct whose `struct_size` is at least this has
/// the field.
macro_rules! field_end {
    ($t:ty, $f:ident) => {{
        fn size_of_field<T, F>(_: fn(&T) -> &F) -> usize {
            std::mem::size_of::<F>()
        }
        std::mem::offset_of!($t, $f) + size_of_field(|s: &$t| &s.$f)
    }};
}

pub mod abi;
mod convert;
pub mod host;
pub mod sdk;

pub use backplane_backend_api as backend_api;

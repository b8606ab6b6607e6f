//! [`RuntimeRef`]: the runtime a [`crate::DynamicNetwork`] plans on, borrowed or shared.
//!
//! A `DynamicNetwork<'r>` borrowing its runtime suits Rust callers that keep the runtime on
//! the stack; bindings and servers that hand the network to code with no such scope (Python
//! objects, tasks) give it an `Arc<Runtime>` instead and get a `DynamicNetwork<'static>`
//! that owns its share of the runtime. Both are one type with one API.

use crate::Runtime;
use std::sync::Arc;

/// A runtime borrowed for `'r` or shared by reference counting.
#[derive(Debug, Clone)]
pub enum RuntimeRef<'r> {
    /// Borrowed: the network lives no longer than the runtime.
    Borrowed(&'r Runtime),
    /// Shared: the network keeps the runtime alive.
    Shared(Arc<Runtime>),
}

impl std::ops::Deref for RuntimeRef<'_> {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        match self {
            RuntimeRef::Borrowed(r) => r,
            RuntimeRef::Shared(r) => r,
        }
    }
}

impl<'r> From<&'r Runtime> for RuntimeRef<'r> {
    fn from(runtime: &'r Runtime) -> Self {
        RuntimeRef::Borrowed(runtime)
    }
}

impl From<Arc<Runtime>> for RuntimeRef<'static> {
    fn from(runtime: Arc<Runtime>) -> Self {
        RuntimeRef::Shared(runtime)
    }
}

impl<'r> From<&'r Arc<Runtime>> for RuntimeRef<'r> {
    fn from(runtime: &'r Arc<Runtime>) -> Self {
        RuntimeRef::Borrowed(runtime)
    }
}

//! The backend registry: backend factories by id.

use crate::{Result, RuntimeError};
use backplane_backend_api::{Backend, BackendId};
use std::sync::Arc;

/// Creates a backend object. Called whenever the runtime needs one; the object is cheap and
/// stateless.
pub type BackendFactory = Arc<dyn Fn() -> Box<dyn Backend> + Send + Sync>;

/// Backend factories by id, in registration order. Each runtime owns its own registry:
/// registering or dropping backends in one never affects another.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    entries: Vec<(BackendId, BackendFactory)>,
}

impl std::fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(id, _)| id))
            .finish()
    }
}

impl BackendRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a factory under `id`; a second registration of the same id is an error.
    pub fn register(&mut self, id: BackendId, factory: BackendFactory) -> Result<()> {
        if self.is_registered(&id) {
            return Err(RuntimeError::DuplicateBackend(id));
        }
        self.entries.push((id, factory));
        Ok(())
    }

    /// Remove a backend; returns whether it was registered.
    pub fn unregister(&mut self, id: &BackendId) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(i, _)| i != id);
        before != self.entries.len()
    }

    /// The factory registered under `id`.
    pub fn factory(&self, id: &BackendId) -> Option<BackendFactory> {
        self.entries
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, f)| f.clone())
    }

    /// Replace the factory of a registered backend (keeping its place in the order).
    pub(crate) fn replace(&mut self, id: &BackendId, factory: BackendFactory) {
        if let Some(entry) = self.entries.iter_mut().find(|(i, _)| i == id) {
            entry.1 = factory;
        }
    }

    /// Whether `id` is registered.
    pub fn is_registered(&self, id: &BackendId) -> bool {
        self.entries.iter().any(|(i, _)| i == id)
    }

    /// The registered ids, in registration order.
    pub fn ids(&self) -> Vec<BackendId> {
        self.entries.iter().map(|(i, _)| i.clone()).collect()
    }

    /// Create a backend object, checking that it reports the id it was registered under.
    pub fn create(&self, id: &BackendId) -> Result<Box<dyn Backend>> {
        let factory = self
            .entries
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, f)| f)
            .ok_or_else(|| self.unknown(id.as_str()))?;
        let backend = factory();
        let actual = backend.id();
        if &actual != id {
            return Err(RuntimeError::BackendIdMismatch {
                registered: id.clone(),
                actual,
            });
        }
        Ok(backend)
    }

    /// Parse and check a backend name against the registry.
    pub fn resolve(&self, name: &str) -> Result<BackendId> {
        self.entries
            .iter()
            .find(|(i, _)| i.as_str() == name)
            .map(|(i, _)| i.clone())
            .ok_or_else(|| self.unknown(name))
    }

    fn unknown(&self, name: &str) -> RuntimeError {
        RuntimeError::UnknownBackend {
            id: name.to_string(),
            registered: self
                .entries
                .iter()
                .map(|(i, _)| i.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

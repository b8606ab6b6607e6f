//! Support answers kept across the optimizations of one model at many shapes.
//!
//! A dynamic network optimizes a network per concrete input shape; the layers are the same
//! from one shape to the next (same names, operators, data types and ranks). A backend that
//! says its support answer for a layer holds at every shape
//! ([`LayerSupport::answer_holds_for_every_shape`]) is asked once: the answer is kept here and
//! replayed for the other shapes. Other answers are asked again per shape, as without it.

use backplane_backend_api::{BackendId, LayerDesc, LayerSupport, Support};
use backplane_core::{DataType, Layer, Network};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What identifies a layer across shapes, with the backend asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    backend: BackendId,
    layer: String,
    op: String,
    inputs: Vec<(DataType, usize)>,
}

impl Key {
    /// The key of a layer of `network`, read from the graph (no `LayerDesc` built).
    fn of_layer(backend: &BackendId, network: &Network, layer: &Layer) -> Key {
        Key {
            backend: backend.clone(),
            layer: layer.name.clone(),
            op: layer.op.name().to_string(),
            inputs: layer
                .inputs
                .iter()
                .map(|&t| {
                    let info = &network.tensor(t).info;
                    (info.dtype, info.shape.rank())
                })
                .collect(),
        }
    }

    fn of(backend: &BackendId, desc: &LayerDesc) -> Key {
        Key {
            backend: backend.clone(),
            layer: desc.name.clone(),
            op: desc.op.name().to_string(),
            inputs: desc
                .inputs
                .iter()
                .map(|i| (i.dtype, i.shape.dims().len()))
                .collect(),
        }
    }
}

/// The shape-independent support answers of the optimizations that share it
/// ([`crate::OptimizerOptions::support_answers`]); safe to share between threads.
#[derive(Debug, Default)]
pub struct SupportAnswers {
    answers: Mutex<HashMap<Key, Support>>,
    asked: AtomicU64,
    replayed: AtomicU64,
}

impl SupportAnswers {
    /// `support`'s answer for `desc`: replayed when a shape-independent answer for the layer
    /// is kept, else asked (and kept when the backend says it holds at every shape).
    pub(crate) fn answer(
        &self,
        backend: &BackendId,
        support: &dyn LayerSupport,
        desc: &LayerDesc,
    ) -> Support {
        let key = Key::of(backend, desc);
        let lock = || self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = lock().get(&key) {
            self.replayed.fetch_add(1, Ordering::Relaxed);
            return found.clone();
        }
        self.asked.fetch_add(1, Ordering::Relaxed);
        let answer = support.is_layer_supported(desc);
        if support.answer_holds_for_every_shape(desc) {
            lock().insert(key, answer.clone());
        }
        answer
    }

    /// The kept shape-independent answer of `backend` for a layer of `network`, if any
    /// (counted as replayed): found from the graph, so a replayed layer needs no
    /// `LayerDesc`.
    pub(crate) fn kept(
        &self,
        backend: &BackendId,
        network: &Network,
        layer: &Layer,
    ) -> Option<Support> {
        let key = Key::of_layer(backend, network, layer);
        let found = self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if found.is_some() {
            self.replayed.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Support queries answered by the backends (through this set).
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }

    /// Support queries answered from a kept shape-independent answer.
    pub fn replayed(&self) -> u64 {
        self.replayed.load(Ordering::Relaxed)
    }

    /// The answers kept.
    pub fn len(&self) -> usize {
        self.answers.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

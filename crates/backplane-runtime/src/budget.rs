//! The memory budget: the working memory one execution of an optimized network needs (its
//! planned host arena plus the tensors computed into other memories, with its control-flow
//! bodies'), checked against `RuntimeOptions::max_memory` when the network is optimized and
//! again, body by body, when it is loaded, so that an impossible network is a typed error
//! naming its largest tensor instead of an aborted allocation.

use crate::optimizer::OptimizedNetwork;
use crate::{Result, RuntimeError};
use backplane_backend_api::FactoryId;
use backplane_core::{Op, TensorKind};

impl OptimizedNetwork {
    /// Bytes one execution of this network needs, its control-flow bodies left out: the
    /// planned host arena plus every tensor a layer computes into another memory than the
    /// host's (a `MemImport` output shares its input's memory and is not counted).
    pub fn own_working_bytes(&self) -> usize {
        let network = &self.network;
        let host = FactoryId::host();
        let mut bytes = self.layout.plan.arena_bytes;
        for (t, e) in network.tensors().iter().enumerate() {
            let elsewhere = self.layout.offsets.get(t).is_some_and(Option::is_none)
                && self.factories.get(t).is_some_and(|f| *f != host);
            let own_memory = matches!(e.kind, TensorKind::Produced { layer, .. }
                if network.layer(layer).op != Op::MemImport);
            if elsewhere && own_memory {
                bytes = bytes.saturating_add(e.info.num_bytes().unwrap_or(usize::MAX));
            }
        }
        bytes
    }

    /// [`own_working_bytes`](Self::own_working_bytes) with every control-flow body's added:
    /// bodies are loaded as nested networks, each with its own memory.
    pub fn working_bytes(&self) -> usize {
        self.subgraphs
            .iter()
            .flat_map(|(_, bodies)| bodies)
            .fold(self.own_working_bytes(), |sum, body| {
                sum.saturating_add(body.working_bytes())
            })
    }

    /// Refuse the network when its [`working_bytes`](Self::working_bytes) exceed `budget`,
    /// with [`RuntimeError::MemoryBudget`] naming its largest tensor and that tensor's layer.
    pub fn check_memory_budget(&self, budget: usize) -> Result<()> {
        let bytes = self.working_bytes();
        if bytes <= budget {
            return Ok(());
        }
        Err(self.over_budget(bytes, budget))
    }

    /// The error for `bytes` over `budget`, naming the largest tensor a layer of this network
    /// computes.
    pub(crate) fn over_budget(&self, bytes: usize, budget: usize) -> RuntimeError {
        let network = &self.network;
        let mut largest = (String::new(), 0usize, String::new());
        for e in network.tensors() {
            if let TensorKind::Produced { layer, .. } = e.kind {
                let b = e.info.num_bytes().unwrap_or(usize::MAX);
                if b >= largest.1 {
                    largest = (e.name.clone(), b, network.layer(layer).name.clone());
                }
            }
        }
        RuntimeError::MemoryBudget {
            bytes,
            budget,
            tensor: largest.0,
            tensor_bytes: largest.1,
            layer: largest.2,
        }
    }
}

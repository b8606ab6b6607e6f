//! What one optimization decided, in a form to compare across the optimizations of one model
//! at several shapes, and to replay ([`super::replay`]).

use super::{OptimizedNetwork, SubstitutionRecord, SUBGRAPH_REFUSAL};
use backplane_backend_api::BackendId;

/// The decisions of one optimization ([`OptimizedNetwork::record`]): the backend of every
/// layer in the order the network runs (which is the grouped order), each backend's
/// substitutions and the inverse permutes cancelled. Two optimizations of imports with equal
/// [`backplane_core::StructuralKey`]s whose records are equal made the same decisions; only
/// their shapes (and the replacements' shape-dependent parameters) differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimizationRecord {
    /// Every layer of the optimized network (replacements and inserted copies included), by
    /// name, with its backend, in execution order.
    pub layers: Vec<(String, BackendId)>,
    /// The substitutions applied, in order.
    pub substitutions: Vec<SubstitutionRecord>,
    /// Pairs of adjacent inverse layout permutes removed.
    pub permutes_cancelled: usize,
    /// Whether the optimization can be replayed for a network of the same structure
    /// ([`crate::Runtime::replay_optimization`]): no backend rejected a layer or returned an
    /// invalid answer in `optimize_subgraph`, so every decision follows from the support
    /// answers and the substitutions alone.
    pub replayable: bool,
}

impl OptimizedNetwork {
    /// What this optimization decided, without the shapes.
    pub fn record(&self) -> OptimizationRecord {
        let refused_in_subgraph = self
            .report
            .refusals
            .iter()
            .any(|(_, _, why)| why == SUBGRAPH_REFUSAL);
        OptimizationRecord {
            layers: self
                .network
                .layers()
                .iter()
                .zip(&self.assignment)
                .map(|(l, b)| (l.name.clone(), b.clone()))
                .collect(),
            substitutions: self.report.substitutions.clone(),
            permutes_cancelled: self.report.permutes_cancelled,
            replayable: self.report.rejected.is_empty() && !refused_in_subgraph,
        }
    }
}

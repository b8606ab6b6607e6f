//! Subgraph views and the optimization results a backend returns for them.

use crate::LayerDesc;
use backplane_core::{LayerId, Network, Op, Tensor, TensorId, TensorKind};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A connected part of a network assigned to one backend: a set of layers plus the network
/// they live in, for looking at tensors, constants and neighbours.
#[derive(Debug, Clone)]
pub struct SubgraphView<'a> {
    network: &'a Network,
    layers: Vec<LayerId>,
}

impl<'a> SubgraphView<'a> {
    /// A view of `layers` (in topological order) of `network`.
    pub fn new(network: &'a Network, layers: Vec<LayerId>) -> Self {
        SubgraphView { network, layers }
    }

    /// The whole network the subgraph belongs to.
    pub fn network(&self) -> &'a Network {
        self.network
    }

    /// The layers, in topological order.
    pub fn layers(&self) -> &[LayerId] {
        &self.layers
    }

    /// The description of one layer, as layer support sees it.
    pub fn layer_desc(&self, id: LayerId) -> LayerDesc {
        LayerDesc::from_layer(self.network, self.network.layer(id))
    }

    /// Tensors read by the subgraph but computed outside it (network inputs, constants, other
    /// backends' outputs), in first-use order.
    pub fn input_tensors(&self) -> Vec<TensorId> {
        let inside: BTreeSet<LayerId> = self.layers.iter().copied().collect();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for &l in &self.layers {
            for &t in &self.network.layer(l).inputs {
                let internal = matches!(self.network.tensor(t).kind, TensorKind::Produced { layer, .. } if inside.contains(&layer));
                if !internal && seen.insert(t) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Tensors computed inside the subgraph and used outside it (or network outputs).
    pub fn output_tensors(&self) -> Vec<TensorId> {
        let inside: BTreeSet<LayerId> = self.layers.iter().copied().collect();
        let consumers = self.network.consumers();
        let mut out = Vec::new();
        for &l in &self.layers {
            for &t in &self.network.layer(l).outputs {
                let used_outside = consumers[t.0].iter().any(|(c, _)| !inside.contains(c))
                    || self.network.outputs().contains(&t);
                if used_outside {
                    out.push(t);
                }
            }
        }
        out
    }
}

/// A value read by a replacement layer.
#[derive(Debug, Clone)]
pub enum ValueRef {
    /// A tensor of the original network (an input of the replaced layers, or a constant).
    Existing(TensorId),
    /// A new constant (e.g. folded or prepacked weights).
    NewConstant(Arc<Tensor>),
    /// Output `slot` of an earlier layer (by index) of the same replacement.
    Produced {
        /// Index into the replacement list.
        layer: usize,
        /// Which output.
        slot: usize,
    },
}

/// One layer of a replacement subgraph.
#[derive(Debug, Clone)]
pub struct ReplacementLayer {
    /// Layer name (should say what it replaced, e.g. `conv1+relu1`).
    pub name: String,
    /// What it computes.
    pub op: Op,
    /// What it reads.
    pub inputs: Vec<ValueRef>,
    /// For each output: the original tensor it takes over, or `None` for a new internal one.
    pub outputs: Vec<Option<TensorId>>,
}

/// A substitution: these layers are replaced by those.
#[derive(Debug, Clone)]
pub struct Substitution {
    /// The replaced layers (all from the subgraph the backend was given).
    pub replaced: Vec<LayerId>,
    /// The replacement, in execution order. Every tensor of `replaced` that is used outside
    /// of it must be taken over by exactly one replacement output with the same description.
    pub replacement: Vec<ReplacementLayer>,
}

/// What a backend did with a subgraph: each layer ends up in exactly one of the three lists.
#[derive(Debug, Clone, Default)]
pub struct OptimizationViews {
    /// Parts replaced by optimized layers.
    pub substitutions: Vec<Substitution>,
    /// Parts the backend rejects: the optimizer re-assigns them to the next backends.
    pub failed: Vec<Vec<LayerId>>,
    /// Parts the backend runs as they are.
    pub untouched: Vec<Vec<LayerId>>,
}

impl OptimizationViews {
    /// Leave the whole subgraph as it is.
    pub fn untouched(subgraph: &SubgraphView<'_>) -> Self {
        OptimizationViews {
            untouched: vec![subgraph.layers().to_vec()],
            ..Default::default()
        }
    }

    /// Replace some layers and run every other layer of the subgraph as it is: the answer of a
    /// backend that fuses (its untouched part is derived from what the substitutions replace).
    pub fn with_substitutions(
        subgraph: &SubgraphView<'_>,
        substitutions: Vec<Substitution>,
    ) -> Self {
        let replaced: BTreeSet<LayerId> = substitutions
            .iter()
            .flat_map(|s| s.replaced.iter().copied())
            .collect();
        let untouched: Vec<LayerId> = subgraph
            .layers()
            .iter()
            .copied()
            .filter(|l| !replaced.contains(l))
            .collect();
        OptimizationViews {
            substitutions,
            failed: Vec::new(),
            untouched: if untouched.is_empty() {
                Vec::new()
            } else {
                vec![untouched]
            },
        }
    }
}

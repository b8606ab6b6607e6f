//! Layer support: can a backend run a layer, and if not, why.

use backplane_core::{Layer, Network, Op, Tensor, TensorInfo};
use std::sync::Arc;

/// Everything a backend needs to know about one layer: its op and attributes, input and
/// output descriptions, and the values of inputs that are constants (weights).
#[derive(Debug, Clone)]
pub struct LayerDesc {
    /// Layer name (for messages).
    pub name: String,
    /// The operation.
    pub op: Op,
    /// Input descriptions, by slot.
    pub inputs: Vec<TensorInfo>,
    /// Output descriptions, by slot.
    pub outputs: Vec<TensorInfo>,
    /// For each input slot, its value if it is a constant.
    pub constants: Vec<Option<Arc<Tensor>>>,
}

impl LayerDesc {
    /// Describe `layer` of `network`.
    pub fn from_layer(network: &Network, layer: &Layer) -> Self {
        LayerDesc {
            name: layer.name.clone(),
            op: layer.op.clone(),
            inputs: layer
                .inputs
                .iter()
                .map(|t| network.tensor(*t).info.clone())
                .collect(),
            outputs: layer
                .outputs
                .iter()
                .map(|t| network.tensor(*t).info.clone())
                .collect(),
            constants: layer
                .inputs
                .iter()
                .map(|t| network.constant_value(*t).cloned())
                .collect(),
        }
    }

    /// The constant value of input `slot`, if it is one.
    pub fn constant(&self, slot: usize) -> Option<&Tensor> {
        self.constants.get(slot).and_then(|c| c.as_deref())
    }
}

/// A layer-support answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// The backend can run the layer.
    Supported,
    /// It cannot, and this says why (shown to users when no backend accepts a layer).
    Unsupported(String),
}

impl Support {
    /// True for [`Support::Supported`].
    pub fn is_supported(&self) -> bool {
        matches!(self, Support::Supported)
    }

    /// An unsupported answer with a reason.
    pub fn no(reason: impl Into<String>) -> Self {
        Support::Unsupported(reason.into())
    }
}

/// A backend's layer-support oracle.
pub trait LayerSupport: Send + Sync {
    /// Whether the layer, with these tensor descriptions and attributes, can run here.
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support;

    /// Whether the answer of [`LayerSupport::is_layer_supported`] for `layer` holds for the
    /// layer at every concrete shape: for any layer of the same name, operator, input data
    /// types and ranks in a network imported from the same model for other input shapes. An
    /// optimizer planning one model for many shapes (a dynamic network) then asks once and
    /// replays the answer for the other shapes. The default, `false`, keeps answers per shape
    /// (a backend whose support depends on sizes, or on attributes that follow the shapes).
    fn answer_holds_for_every_shape(&self, _layer: &LayerDesc) -> bool {
        false
    }
}

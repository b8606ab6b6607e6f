//! The Network: a graph of layers connected by tensors.
//!
//! Tensors are the edges: each is a network input, a constant (weights), or the output of
//! exactly one layer's output slot. Layers read tensors by id through their input slots.
//! Layers are kept in insertion order, which the builder methods guarantee is topological.

use crate::{CoreError, Op, Result, Tensor, TensorInfo};
use std::collections::HashMap;
use std::sync::Arc;

/// Index of a tensor in its [`Network`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// Index of a layer in its [`Network`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LayerId(pub usize);

/// Where a tensor's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorKind {
    /// Given by the caller at execution.
    Input,
    /// Known when the network is built (weights, folded constants).
    Constant(Arc<Tensor>),
    /// A constant whose value was let go once every layer reading it had copied it (weights
    /// packed by their workloads when a network was loaded): its description stays, its bytes
    /// are gone. Only a loaded network's own copy of its graph holds these.
    Released,
    /// Computed by output slot `slot` of `layer`.
    Produced {
        /// The producing layer.
        layer: LayerId,
        /// Which of its outputs.
        slot: usize,
    },
}

/// A tensor of the network: its name, description and origin.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    /// Unique name (the ONNX value name when imported).
    pub name: String,
    /// Type and shape.
    pub info: TensorInfo,
    /// Where the value comes from.
    pub kind: TensorKind,
}

impl TensorEntry {
    /// The constant value, if this tensor is a constant.
    pub fn constant(&self) -> Option<&Arc<Tensor>> {
        match &self.kind {
            TensorKind::Constant(t) => Some(t),
            _ => None,
        }
    }
}

/// One operation of the network.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Unique name (the ONNX node name, or a generated one).
    pub name: String,
    /// What it computes.
    pub op: Op,
    /// Input slots, in the op's order.
    pub inputs: Vec<TensorId>,
    /// Output slots, in the op's order.
    pub outputs: Vec<TensorId>,
}

/// A graph of layers, as importers build it and the optimizer reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Network {
    tensors: Vec<TensorEntry>,
    layers: Vec<Layer>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    names: HashMap<String, TensorId>,
    layer_names: HashMap<String, LayerId>,
}

impl Network {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn add_tensor(&mut self, name: &str, info: TensorInfo, kind: TensorKind) -> Result<TensorId> {
        info.num_bytes()?;
        if self.names.contains_key(name) {
            return Err(CoreError::InvalidNetwork(format!(
                "tensor name '{name}' is used twice"
            )));
        }
        let id = TensorId(self.tensors.len());
        self.tensors.push(TensorEntry {
            name: name.to_string(),
            info,
            kind,
        });
        self.names.insert(name.to_string(), id);
        Ok(id)
    }

    /// Declare a network input.
    pub fn add_input(&mut self, name: &str, info: TensorInfo) -> Result<TensorId> {
        let id = self.add_tensor(name, info, TensorKind::Input)?;
        self.inputs.push(id);
        Ok(id)
    }

    /// Add a constant tensor (weights, folded values).
    pub fn add_constant(&mut self, name: &str, value: Tensor) -> Result<TensorId> {
        self.add_shared_constant(name, Arc::new(value))
    }

    /// Add a constant tensor whose value is shared with other networks (no copy).
    pub fn add_shared_constant(&mut self, name: &str, value: Arc<Tensor>) -> Result<TensorId> {
        let info = value.info().clone();
        self.add_tensor(name, info, TensorKind::Constant(value))
    }

    /// Let go of constant `id`'s value, keeping its name and description
    /// ([`TensorKind::Released`]); the value is returned (dropped by the caller unless shared
    /// elsewhere). `None`, and no change, when the tensor is not a constant.
    pub fn release_constant(&mut self, id: TensorId) -> Option<Arc<Tensor>> {
        let entry = self.tensors.get_mut(id.0)?;
        if !matches!(entry.kind, TensorKind::Constant(_)) {
            return None;
        }
        match std::mem::replace(&mut entry.kind, TensorKind::Released) {
            TensorKind::Constant(value) => Some(value),
            _ => None,
        }
    }

    /// Add a layer; output tensors are named `<layer>:<slot>` and their shapes inferred.
    pub fn add_layer(&mut self, name: &str, op: Op, inputs: &[TensorId]) -> Result<Vec<TensorId>> {
        let infos = self.infer_layer(name, &op, inputs)?;
        let names: Vec<String> = (0..infos.len()).map(|i| format!("{name}:{i}")).collect();
        self.push_layer(name, op, inputs, names, infos)
    }

    /// Add a layer whose output tensors get the given names (as ONNX value names).
    pub fn add_layer_named(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[TensorId],
        output_names: &[String],
    ) -> Result<Vec<TensorId>> {
        let infos = self.infer_layer(name, &op, inputs)?;
        if infos.len() != output_names.len() {
            return Err(CoreError::InvalidLayer {
                layer: name.to_string(),
                op: op.name().to_string(),
                message: format!(
                    "produces {} outputs but {} names were given",
                    infos.len(),
                    output_names.len()
                ),
            });
        }
        self.push_layer(name, op, inputs, output_names.to_vec(), infos)
    }

    fn infer_layer(&self, name: &str, op: &Op, inputs: &[TensorId]) -> Result<Vec<TensorInfo>> {
        let mut infos = Vec::with_capacity(inputs.len());
        for &t in inputs {
            let e = self.tensors.get(t.0).ok_or_else(|| {
                CoreError::InvalidNetwork(format!("layer '{name}' reads unknown tensor #{}", t.0))
            })?;
            infos.push(&e.info);
        }
        op.infer(&infos).map_err(|e| CoreError::InvalidLayer {
            layer: name.to_string(),
            op: op.name().to_string(),
            message: match e {
                CoreError::InvalidOp { message, .. } => message,
                other => other.to_string(),
            },
        })
    }

    fn push_layer(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[TensorId],
        names: Vec<String>,
        infos: Vec<TensorInfo>,
    ) -> Result<Vec<TensorId>> {
        if self.layer_names.contains_key(name) {
            return Err(CoreError::InvalidNetwork(format!(
                "layer name '{name}' is used twice"
            )));
        }
        for n in &names {
            if self.names.contains_key(n) {
                return Err(CoreError::InvalidNetwork(format!(
                    "tensor name '{n}' is used twice"
                )));
            }
        }
        let layer = LayerId(self.layers.len());
        let mut outputs = Vec::with_capacity(infos.len());
        for (slot, (n, info)) in names.iter().zip(infos).enumerate() {
            outputs.push(self.add_tensor(n, info, TensorKind::Produced { layer, slot })?);
        }
        self.layers.push(Layer {
            name: name.to_string(),
            op,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        self.layer_names.insert(name.to_string(), layer);
        Ok(outputs)
    }

    /// Mark a tensor as a network output.
    pub fn mark_output(&mut self, id: TensorId) -> Result<()> {
        if id.0 >= self.tensors.len() {
            return Err(CoreError::InvalidNetwork(format!(
                "output tensor #{} does not exist",
                id.0
            )));
        }
        if !self.outputs.contains(&id) {
            self.outputs.push(id);
        }
        Ok(())
    }

    /// All tensors, indexed by [`TensorId`].
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    /// All layers, indexed by [`LayerId`], in topological order.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// One tensor.
    pub fn tensor(&self, id: TensorId) -> &TensorEntry {
        &self.tensors[id.0]
    }

    /// The constant value of a tensor: a constant itself, or the output of `MemImport`
    /// layers that hand a constant over to another backend's memory without copying it
    /// (the same bytes, so a backend with its own memory may copy them once, at load).
    pub fn constant_value(&self, id: TensorId) -> Option<&Arc<Tensor>> {
        let mut entry = self.tensors.get(id.0)?;
        // Each step goes to an earlier tensor, so this ends; the bound guards a malformed graph.
        for _ in 0..=self.layers.len() {
            match &entry.kind {
                TensorKind::Constant(t) => return Some(t),
                TensorKind::Produced { layer, .. } => {
                    let l = self.layers.get(layer.0)?;
                    if l.op != Op::MemImport {
                        return None;
                    }
                    entry = self.tensors.get(l.inputs.first()?.0)?;
                }
                _ => return None,
            }
        }
        None
    }

    /// One layer.
    pub fn layer(&self, id: LayerId) -> &Layer {
        &self.layers[id.0]
    }

    /// The network inputs, in declaration order.
    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    /// The network outputs, in declaration order.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Look a tensor up by name.
    pub fn find_tensor(&self, name: &str) -> Option<TensorId> {
        self.names.get(name).copied()
    }

    /// Look a layer up by name.
    pub fn find_layer(&self, name: &str) -> Option<LayerId> {
        self.layer_names.get(name).copied()
    }

    /// For each tensor, the (layer, input slot) pairs that read it.
    pub fn consumers(&self) -> Vec<Vec<(LayerId, usize)>> {
        let mut c = vec![Vec::new(); self.tensors.len()];
        for (li, l) in self.layers.iter().enumerate() {
            for (slot, t) in l.inputs.iter().enumerate() {
                c[t.0].push((LayerId(li), slot));
            }
        }
        c
    }

    /// Check the graph: at least one output, every layer re-infers to its recorded output
    /// descriptions, inputs are produced before use.
    pub fn validate(&self) -> Result<()> {
        if self.outputs.is_empty() {
            return Err(CoreError::InvalidNetwork(
                "the network has no outputs".into(),
            ));
        }
        for (li, l) in self.layers.iter().enumerate() {
            for t in &l.inputs {
                if let TensorKind::Produced { layer, .. } = self.tensors[t.0].kind {
                    if layer.0 >= li {
                        return Err(CoreError::InvalidNetwork(format!(
                            "layer '{}' reads '{}' before it is computed",
                            l.name, self.tensors[t.0].name
                        )));
                    }
                }
            }
            let infos = self.infer_layer(&l.name, &l.op, &l.inputs)?;
            for (t, info) in l.outputs.iter().zip(&infos) {
                if !self.tensors[t.0].info.same_layout(info) {
                    return Err(CoreError::InvalidLayer {
                        layer: l.name.clone(),
                        op: l.op.name().to_string(),
                        message: format!(
                            "output '{}' is recorded as {} but infers to {info}",
                            self.tensors[t.0].name, self.tensors[t.0].info
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::BinaryOp;
    use crate::DataType;

    #[test]
    fn build_and_validate() {
        let mut n = Network::new();
        let a = n
            .add_input("a", TensorInfo::new(DataType::F32, vec![2, 3]))
            .unwrap();
        let b = n
            .add_constant(
                "b",
                Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap(),
            )
            .unwrap();
        let y = n
            .add_layer("add", Op::Binary(BinaryOp::Add), &[a, b])
            .unwrap();
        n.mark_output(y[0]).unwrap();
        n.validate().unwrap();
        assert_eq!(n.tensor(y[0]).info.shape.dims(), &[2, 3]);
        assert_eq!(n.consumers()[a.0], vec![(LayerId(0), 0)]);
        assert_eq!(n.find_tensor("add:0"), Some(y[0]));
    }

    #[test]
    fn errors_name_the_layer() {
        let mut n = Network::new();
        let a = n
            .add_input("a", TensorInfo::new(DataType::F32, vec![2, 3]))
            .unwrap();
        let b = n
            .add_input("b", TensorInfo::new(DataType::F32, vec![4]))
            .unwrap();
        let err = n
            .add_layer("bad_add", Op::Binary(BinaryOp::Add), &[a, b])
            .unwrap_err();
        assert!(err.to_string().contains("bad_add"), "{err}");
        assert!(n
            .add_input("a", TensorInfo::new(DataType::F32, vec![1]))
            .is_err());
        assert!(n.validate().is_err(), "no outputs");
    }

    #[test]
    fn release_constant_keeps_the_description_and_hands_back_the_value() {
        let mut n = Network::new();
        let a = n
            .add_input("a", TensorInfo::new(DataType::F32, vec![3]))
            .unwrap();
        let w = Arc::new(Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap());
        let b = n.add_shared_constant("b", w.clone()).unwrap();
        let y = n
            .add_layer("add", Op::Binary(BinaryOp::Add), &[a, b])
            .unwrap();
        n.mark_output(y[0]).unwrap();
        assert_eq!(Arc::strong_count(&w), 2);
        let taken = n.release_constant(b).unwrap();
        drop(taken);
        assert_eq!(
            Arc::strong_count(&w),
            1,
            "the network let go of its reference"
        );
        assert_eq!(n.tensor(b).kind, TensorKind::Released);
        assert!(n.tensor(b).constant().is_none());
        assert_eq!(n.tensor(b).info.shape.dims(), &[3]);
        assert!(n.release_constant(b).is_none(), "already released");
        assert!(n.release_constant(a).is_none(), "not a constant");
        n.validate().unwrap();
    }
}

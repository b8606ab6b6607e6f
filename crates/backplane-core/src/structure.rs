//! The structure of a network apart from its shapes.
//!
//! One model imported at several input shapes gives networks with the same layers (names,
//! operators, wiring, data types, ranks) whose shapes differ, and whose attributes differ
//! where they were folded from the shapes: a Reshape's or Expand's target, Slice bounds, Tile
//! repeats, pads computed from `Shape` arithmetic. [`StructuralKey`] identifies what stays:
//! two imports have equal keys when they differ at most in shapes, constant values and the
//! attributes [`Op::without_shape_attributes`] clears. A cache of optimizations keyed by it
//! may replay one optimization at another shape, re-shaping what depends on the shapes.

use crate::{Network, Op, TensorId, TensorKind};
use std::borrow::Cow;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Whether an operator's attributes can follow the input shapes of the model it was imported
/// from (see [`Op::shape_attributes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeAttributes {
    /// Its attributes are the model's own: equal at every input shape.
    Fixed,
    /// Some attributes may have been computed from the shapes at import (their values differ
    /// from one input shape to the next); [`Op::without_shape_attributes`] clears them.
    FollowShapes,
    /// It runs nested networks (If, Loop, Scan): their structure is compared instead of the
    /// op, with the trip count and scan lengths left out.
    Nested,
}

impl Op {
    /// Which kind of attributes this operator has, as far as input shapes go.
    pub fn shape_attributes(&self) -> ShapeAttributes {
        match self {
            Op::Reshape { .. }
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::Split { .. }
            | Op::Slice(_)
            | Op::Pad(_)
            | Op::Resize(_)
            | Op::OneHot { .. }
            | Op::TopK(_)
            | Op::ConvTranspose(_)
            | Op::MaxUnpool(_)
            | Op::Col2Im(_)
            | Op::AffineGrid(_)
            | Op::Dft(_)
            | Op::Custom(_) => ShapeAttributes::FollowShapes,
            Op::If(_) | Op::Loop(_) | Op::Scan(_) => ShapeAttributes::Nested,
            Op::Identity
            | Op::MemCopy
            | Op::MemImport
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Conv(_)
            | Op::BatchNormalization { .. }
            | Op::MatMul
            | Op::Gemm(_)
            | Op::Pool(_)
            | Op::GlobalPool(_)
            | Op::IntegerAveragePool(_)
            | Op::Lookup
            | Op::Flatten { .. }
            | Op::Transpose { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Concat { .. }
            | Op::Gather { .. }
            | Op::Softmax { .. }
            | Op::LayerNormalization { .. }
            | Op::Reduce(_)
            | Op::Cast { .. }
            | Op::Math(_)
            | Op::BinaryExt(_)
            | Op::Where
            | Op::ArgReduce(_)
            | Op::Trilu { .. }
            | Op::GatherElements { .. }
            | Op::GatherND { .. }
            | Op::ScatterND { .. }
            | Op::ScatterElements { .. }
            | Op::CumSum { .. }
            | Op::LogSoftmax { .. }
            | Op::Hardmax { .. }
            | Op::InstanceNormalization { .. }
            | Op::Lrn { .. }
            | Op::QuantizeLinear { .. }
            | Op::DequantizeLinear { .. }
            | Op::DynamicQuantizeLinear
            | Op::Permute { .. }
            | Op::NegativeLogLikelihoodLoss(_)
            | Op::GridSample(_)
            | Op::Einsum(_)
            | Op::Det
            | Op::Rnn(_)
            | Op::MaxPoolWithIndices(_)
            | Op::Optimizer(_)
            | Op::TfIdfVectorizer(_)
            | Op::TreeEnsemble(_)
            | Op::Stft(_)
            | Op::RoiAlign(_)
            | Op::DeformConv(_) => ShapeAttributes::Fixed,
        }
    }

    /// This operator with the attributes that may follow the input shapes emptied (a
    /// Reshape's target, Slice's starts and ends, a custom op's output descriptions and
    /// payload, ...): what two imports of one model at different shapes share. Borrowed when
    /// nothing follows the shapes.
    pub fn without_shape_attributes(&self) -> Cow<'_, Op> {
        use crate::ops::{
            AffineGridDesc, Col2ImDesc, ConvTransposeDesc, CustomOp, DftDesc, MaxUnpoolDesc,
            PadDesc, ResizeDesc, SliceDesc, TopKDesc,
        };
        let owned = match self {
            Op::Reshape { .. } => Op::Reshape { shape: Vec::new() },
            Op::Expand { .. } => Op::Expand { shape: Vec::new() },
            Op::Tile { .. } => Op::Tile {
                repeats: Vec::new(),
            },
            Op::Split { axis, .. } => Op::Split {
                axis: *axis,
                splits: Vec::new(),
            },
            Op::Slice(d) => Op::Slice(SliceDesc {
                starts: Vec::new(),
                ends: Vec::new(),
                ..d.clone()
            }),
            Op::Pad(d) => Op::Pad(PadDesc {
                pads: Vec::new(),
                ..d.clone()
            }),
            Op::Resize(d) => Op::Resize(ResizeDesc {
                output_shape: Vec::new(),
                scales: Vec::new(),
                ..d.clone()
            }),
            Op::OneHot { axis, .. } => Op::OneHot {
                axis: *axis,
                depth: 0,
            },
            Op::TopK(d) => Op::TopK(TopKDesc { k: 0, ..*d }),
            Op::ConvTranspose(d) => Op::ConvTranspose(ConvTransposeDesc {
                output_shape: Vec::new(),
                ..d.clone()
            }),
            // Both of its attributes are shapes.
            Op::MaxUnpool(_) => Op::MaxUnpool(MaxUnpoolDesc {
                unpooled: Vec::new(),
                output: Vec::new(),
            }),
            Op::Col2Im(d) => Op::Col2Im(Col2ImDesc {
                image_shape: Vec::new(),
                ..d.clone()
            }),
            Op::AffineGrid(d) => Op::AffineGrid(AffineGridDesc {
                size: Vec::new(),
                ..d.clone()
            }),
            Op::Dft(d) => Op::Dft(DftDesc { length: 0, ..*d }),
            Op::Custom(c) => Op::Custom(CustomOp {
                outputs: Vec::new(),
                payload: None,
                ..c.clone()
            }),
            _ => return Cow::Borrowed(self),
        };
        Cow::Owned(owned)
    }
}

/// What identifies a network's structure apart from its shapes (see the module docs): equal
/// for two imports of one model at different input shapes when nothing but shapes, constant
/// values and shape-following attributes differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StructuralKey {
    digest: [u64; 2],
    layers: usize,
    tensors: usize,
}

impl StructuralKey {
    /// The key of `network`: its layers in order (names, operators without their
    /// shape-following attributes, nested networks' keys), each layer's input and output
    /// tensors (names, element types, quantization, ranks, where they come from), and the
    /// network's inputs and outputs.
    pub fn of(network: &Network) -> StructuralKey {
        // Two differently seeded digests: a collision would need both to collide.
        let mut a = DefaultHasher::new();
        let mut b = DefaultHasher::new();
        0x5eed_u64.hash(&mut b);
        let mut both = Both(&mut a, &mut b);
        hash_network(network, &mut both);
        StructuralKey {
            digest: [a.finish(), b.finish()],
            layers: network.layers().len(),
            tensors: network.tensors().len(),
        }
    }

    /// The number of layers of the network it was taken of.
    pub fn layers(&self) -> usize {
        self.layers
    }
}

/// Two hashers fed the same bytes.
struct Both<'a>(&'a mut DefaultHasher, &'a mut DefaultHasher);

impl Hasher for Both<'_> {
    fn finish(&self) -> u64 {
        self.0.finish() ^ self.1.finish()
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
        self.1.write(bytes);
    }
}

/// Feeds `Debug` text into a hasher without building a string.
struct DebugHash<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> std::fmt::Write for DebugHash<'_, H> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

fn hash_debug<H: Hasher>(value: &dyn std::fmt::Debug, h: &mut H) {
    use std::fmt::Write;
    // Writing into a hasher cannot fail; a Debug impl that errs only shortens the text.
    let _ = write!(DebugHash(h), "{value:?}");
    0xffu8.hash(h);
}

fn hash_tensor<H: Hasher>(network: &Network, t: TensorId, h: &mut H) {
    let e = network.tensor(t);
    e.name.hash(h);
    hash_debug(&e.info.dtype, h);
    hash_debug(&e.info.quant, h);
    e.info.shape.rank().hash(h);
    match &e.kind {
        TensorKind::Input => 0u8.hash(h),
        // A constant's value may follow the shapes (indices folded from a sequence length).
        TensorKind::Constant(_) | TensorKind::Released => 1u8.hash(h),
        TensorKind::Produced { layer, slot } => {
            2u8.hash(h);
            layer.0.hash(h);
            slot.hash(h);
        }
    }
}

fn hash_network<H: Hasher>(network: &Network, h: &mut H) {
    network.layers().len().hash(h);
    for layer in network.layers() {
        layer.name.hash(h);
        layer.op.name().hash(h);
        match layer.op.shape_attributes() {
            ShapeAttributes::Nested => {
                match &layer.op {
                    Op::Loop(d) => d.num_carried.hash(h),
                    Op::Scan(d) => {
                        hash_debug(
                            &(
                                d.num_state,
                                d.num_scan_inputs,
                                &d.input_axes,
                                &d.input_reverse,
                                &d.output_axes,
                                &d.output_reverse,
                                d.batched,
                            ),
                            h,
                        );
                    }
                    _ => {}
                }
                for body in layer.op.subgraphs() {
                    hash_network(body, h);
                }
            }
            ShapeAttributes::Fixed | ShapeAttributes::FollowShapes => {
                hash_debug(&*layer.op.without_shape_attributes(), h);
            }
        }
        layer.inputs.len().hash(h);
        for &t in &layer.inputs {
            hash_tensor(network, t, h);
        }
        layer.outputs.len().hash(h);
        for &t in &layer.outputs {
            hash_tensor(network, t, h);
        }
    }
    for list in [network.inputs(), network.outputs()] {
        list.len().hash(h);
        for &t in list {
            hash_tensor(network, t, h);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{DataType, Shape, TensorInfo};

    /// x [1, n, 4] → Reshape [n, 4] → Relu; the Reshape's target follows n.
    fn net(n: usize, act: crate::ops::UnaryOp) -> Network {
        let mut net = Network::new();
        let x = net
            .add_input(
                "x",
                TensorInfo::new(DataType::F32, Shape::new(vec![1, n, 4])),
            )
            .unwrap();
        let r = net
            .add_layer("r", Op::Reshape { shape: vec![n, 4] }, &[x])
            .unwrap()[0];
        let y = net.add_layer("act", Op::Unary(act), &[r]).unwrap()[0];
        net.mark_output(y).unwrap();
        net
    }

    #[test]
    fn shapes_and_shape_attributes_do_not_change_the_key() {
        use crate::ops::UnaryOp;
        assert_eq!(
            StructuralKey::of(&net(3, UnaryOp::Relu)),
            StructuralKey::of(&net(17, UnaryOp::Relu))
        );
        assert_ne!(
            StructuralKey::of(&net(3, UnaryOp::Relu)),
            StructuralKey::of(&net(3, UnaryOp::Sigmoid))
        );
    }

    #[test]
    fn fixed_attributes_change_the_key() {
        let transpose = |perm: Vec<usize>| {
            let mut net = Network::new();
            let x = net
                .add_input(
                    "x",
                    TensorInfo::new(DataType::F32, Shape::new(vec![2, 3, 4])),
                )
                .unwrap();
            let y = net.add_layer("t", Op::Transpose { perm }, &[x]).unwrap()[0];
            net.mark_output(y).unwrap();
            StructuralKey::of(&net)
        };
        assert_eq!(transpose(vec![0, 2, 1]), transpose(vec![0, 2, 1]));
        assert_ne!(transpose(vec![0, 2, 1]), transpose(vec![1, 0, 2]));
    }

    #[test]
    fn classification_matches_what_is_cleared() {
        let reshape = Op::Reshape { shape: vec![2, 3] };
        assert_eq!(reshape.shape_attributes(), ShapeAttributes::FollowShapes);
        assert!(matches!(reshape.without_shape_attributes(), Cow::Owned(_)));
        assert_eq!(Op::MatMul.shape_attributes(), ShapeAttributes::Fixed);
        assert!(matches!(
            Op::MatMul.without_shape_attributes(),
            Cow::Borrowed(_)
        ));
    }
}

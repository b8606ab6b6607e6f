//! Layer support: CpuAcc claims only what it runs fast (f32 compute ops, data movement);
//! everything else is refused with a reason so the optimizer hands it to the next backend.
//! The answer is whether [`crate::plan::plan`] succeeds: the plan the workload factory
//! builds from.

use crate::plan;
use backplane_backend_api::{LayerDesc, LayerSupport, Support};
use backplane_core::Op;

/// CpuAcc's layer-support oracle.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuAccLayerSupport;

impl LayerSupport for CpuAccLayerSupport {
    fn is_layer_supported(&self, layer: &LayerDesc) -> Support {
        match check(layer) {
            Ok(()) => Support::Supported,
            Err(reason) => Support::no(reason),
        }
    }

    fn answer_holds_for_every_shape(&self, layer: &LayerDesc) -> bool {
        holds_for_every_shape(&layer.op)
    }
}

/// Why CpuAcc cannot run `layer`, if it cannot: the reason its planning refuses it.
pub fn check(layer: &LayerDesc) -> Result<(), String> {
    plan::plan(layer).map(|_| ())
}

/// Whether [`check`]'s answer for a layer of this operator depends only on what a dynamic
/// network's replay key holds (operator, input data types and ranks; quantization and
/// attributes come from the model and are the same at every shape), not on sizes or constant
/// values. Decided per operator, mirroring [`plan::plan`]: a planning function that reads
/// dimensions or constants answers `false`.
pub fn holds_for_every_shape(op: &Op) -> bool {
    match op {
        // Copies and strided moves: refused only for sub-byte element types.
        Op::Identity | Op::Reshape { .. } | Op::Flatten { .. } => true,
        Op::Squeeze { .. } | Op::Unsqueeze { .. } | Op::Transpose { .. } => true,
        Op::Concat { .. } | Op::Slice(_) | Op::Gather { .. } | Op::Where => true,
        Op::Expand { .. } | Op::Tile { .. } | Op::Pad(_) | Op::Split { .. } => true,
        // Types (and the function) only.
        Op::Cast { .. } | Op::Unary(_) | Op::Math(_) | Op::Binary(_) | Op::BinaryExt(_) => true,
        Op::DynamicQuantizeLinear => true,
        Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LayerNormalization { .. } => true,
        Op::MatMul | Op::Gemm(_) | Op::GlobalPool(_) => true,
        // Types and the input's rank (part of the key).
        Op::InstanceNormalization { .. } | Op::BatchNormalization { .. } => true,
        // Refused for an empty axis or axes: sizes.
        Op::ArgReduce(_) | Op::Reduce(_) => false,
        // Window, padding and weight geometry are checked against the dimensions.
        Op::Conv(_) | Op::ConvTranspose(_) | Op::Pool(_) | Op::Resize(_) => false,
        // Checked against the weights' shapes and constant inputs.
        Op::Rnn(_) | Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => false,
        // CpuAcc's fused and quantized layers encode concrete shapes and views.
        Op::Custom(_) => false,
        // Always refused: the builtin backend's, or not implemented by CpuAcc.
        Op::MemCopy | Op::MemImport | Op::Permute { .. } => true,
        Op::If(_) | Op::Loop(_) | Op::Scan(_) => true,
        Op::Trilu { .. } | Op::GatherElements { .. } | Op::GatherND { .. } => true,
        Op::ScatterND { .. } | Op::ScatterElements { .. } | Op::OneHot { .. } => true,
        Op::TopK(_) | Op::CumSum { .. } | Op::Hardmax { .. } | Op::Lrn { .. } => true,
        Op::NegativeLogLikelihoodLoss(_) | Op::GridSample(_) => true,
        Op::Einsum(_) | Op::Det | Op::MaxPoolWithIndices(_) | Op::MaxUnpool(_) => true,
        Op::Optimizer(_) | Op::TfIdfVectorizer(_) | Op::TreeEnsemble(_) => true,
        Op::Dft(_) | Op::Stft(_) | Op::Col2Im(_) | Op::AffineGrid(_) => true,
        Op::RoiAlign(_) | Op::DeformConv(_) => true,
        // Checked against the window's geometry, and the table's constant.
        Op::IntegerAveragePool(_) | Op::Lookup => false,
    }
}

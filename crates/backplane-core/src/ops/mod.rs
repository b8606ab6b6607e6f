//! The operator set: one closed enum of plain-data descriptors, plus shape inference.
//!
//! Descriptors hold attributes already resolved by the importer (e.g. Reshape's target shape,
//! Clip's bounds): every parameter that ONNX passes as a constant input lives here, so kernels
//! receive only data tensors (and weights). Shape inference ([`Op::infer`]) validates inputs;
//! kernels may assume valid inputs.

mod attributes;
mod control;
mod einsum;
mod elementwise;
mod flat;
mod image;
mod indexing;
mod layout;
mod linalg;
mod loss;
mod math;
mod ml;
mod nn;
mod payload;
mod pooling;
mod qint;
mod recurrent;
mod reduce;
mod resize;
mod sampling;
mod signal;
mod spatial;
mod training;

pub use attributes::{dtype_from_onnx_code, onnx_dtype_code};
pub use control::{IfDesc, LoopDesc, ScanDesc};
pub use einsum::{EinsumDesc, EinsumPlan};
pub use elementwise::{BinaryOp, UnaryOp};
pub use image::{sliding_output_len, AffineGridDesc, Col2ImDesc, DeformConvDesc, RoiAlignDesc};
pub use indexing::{ArgReduceDesc, ScatterReduction, TopKDesc};
pub use layout::{PadDesc, PadMode, SliceDesc, SliceRange};
pub use loss::{LossReduction, NllLossDesc};
pub use math::{BinaryExtOp, MathOp};
pub use ml::{
    TfIdfDesc, TfIdfMode, TreeAggregate, TreeBranch, TreeEnsembleDesc, TreeLeaf, TreeNode,
    TreeNodeMode, TreePostTransform,
};
pub use nn::{
    matmul_shape, require_dtype, ConvDesc, ConvTransposeDesc, GemmDesc, PoolDesc, PoolKind,
};
pub use payload::CustomPayload;
pub use pooling::{MaxPoolIndicesDesc, MaxUnpoolDesc};
pub use qint::{div_round_half_away, lookup_index, LOOKUP_ENTRIES};
pub use recurrent::{RnnActivation, RnnActivationKind, RnnDesc, RnnDirection, RnnKind};
pub use reduce::{ReduceDesc, ReduceKind};
pub use resize::{
    clamp_index, crop_coordinate, linear_neighbours, CoordinateTransform, NearestMode, ResizeDesc,
    ResizeMode,
};
pub use sampling::{GridSampleDesc, GridSampleMode, GridSamplePadding};
pub use signal::{DftDesc, StftDesc};
pub use spatial::{AutoPad, Geometry, Window};
pub use training::{OptimizerDesc, OptimizerKind};

use crate::{CoreError, DataType, Result, Tensor, TensorInfo};

/// An attribute value of a [`CustomOp`], or of any op in its flat form ([`Op::to_attributes`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// Integer.
    Int(i64),
    /// Float.
    Float(f32),
    /// Double-precision float (e.g. Pad's fill value).
    Double(f64),
    /// String.
    String(String),
    /// Integer list.
    Ints(Vec<i64>),
    /// Float list.
    Floats(Vec<f32>),
}

/// An operator outside the standard set, e.g. a fused layer a backend substitutes in
/// `optimize_subgraph`. Its output descriptions are given, not inferred.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomOp {
    /// Namespace, e.g. the backend id that understands it.
    pub domain: String,
    /// Operator name within the domain.
    pub op_type: String,
    /// Attributes.
    pub attributes: Vec<(String, AttrValue)>,
    /// The output descriptions.
    pub outputs: Vec<TensorInfo>,
    /// The typed parameters of a layer a backend substituted, for that backend alone
    /// (`None` for custom ops from a model file or a plugin, which carry attributes).
    pub payload: Option<CustomPayload>,
}

/// A layer's operation and its attributes.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): every backend matches each variant by
/// name, so adding one fails to compile until every backend decides what to do with it
/// (see "Adding an op" in ARCHITECTURE.md).
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Copy the input.
    Identity,
    /// Copy a tensor from one kind of memory to another (inserted by the optimizer between
    /// backends that cannot share memory; run by the builtin backend).
    MemCopy,
    /// Hand a tensor to another kind of memory without copying, where the producer's memory
    /// can be exported and the consumer's imported (inserted by the optimizer).
    MemImport,
    /// One-input elementwise function.
    Unary(UnaryOp),
    /// Two-input elementwise function with broadcasting.
    Binary(BinaryOp),
    /// Convolution: X, W, optional B.
    Conv(ConvDesc),
    /// Transposed convolution: X, W, optional B.
    ConvTranspose(ConvTransposeDesc),
    /// Inference batch normalization: X, scale, bias, mean, var.
    BatchNormalization {
        /// Added to the variance.
        epsilon: f32,
    },
    /// numpy-style matrix product (batched, broadcasting).
    MatMul,
    /// General matrix multiply: A, B, optional C.
    Gemm(GemmDesc),
    /// Max or average pooling.
    Pool(PoolDesc),
    /// Pooling over all spatial axes.
    GlobalPool(PoolKind),
    /// Average pooling of 8-bit integers by TFLite's integer rule (its int8/uint8
    /// AVERAGE_POOL_2D): each output is the sum of the window's stored integers (no zero
    /// point subtracted) over the number of taps counted (inside the input unless
    /// `count_include_pad`), rounded to nearest with ties away from zero
    /// ([`div_round_half_away`]), saturated to the type. Input and output share one
    /// quantization (TFLite requires it), so nothing is rescaled. `kind` must be `Average`.
    IntegerAveragePool(PoolDesc),
    /// Byte table lookup: X (int8 or uint8), table (256 values of an 8-bit type) → Y of X's
    /// shape and the table's type, `y = table[byte of x]` (an int8 value by its
    /// two's-complement byte: -1 reads entry 255, [`lookup_index`]). How an importer carries
    /// an 8-bit elementwise function whose integer rule the model format defines (TFLite's
    /// int8 HARD_SWISH): it evaluates the rule on the 256 inputs.
    Lookup,
    /// Collapse to 2-D around `axis`.
    Flatten {
        /// Dimensions before it form the rows.
        axis: i64,
    },
    /// Reinterpret with a new shape (already resolved: no 0 or -1).
    Reshape {
        /// Target shape.
        shape: Vec<usize>,
    },
    /// Permute axes.
    Transpose {
        /// Output axis `i` is input axis `perm[i]`.
        perm: Vec<usize>,
    },
    /// Remove size-1 axes.
    Squeeze {
        /// Axes to remove (empty: all size-1 axes).
        axes: Vec<i64>,
    },
    /// Insert size-1 axes.
    Unsqueeze {
        /// Positions in the output.
        axes: Vec<i64>,
    },
    /// Join along an axis.
    Concat {
        /// The axis.
        axis: i64,
    },
    /// Cut along an axis into pieces of the given sizes.
    Split {
        /// The axis.
        axis: i64,
        /// Size of each output along `axis`.
        splits: Vec<usize>,
    },
    /// Strided slice.
    Slice(SliceDesc),
    /// Take entries along an axis by index (second input).
    Gather {
        /// The axis.
        axis: i64,
    },
    /// Softmax along one axis.
    Softmax {
        /// The axis.
        axis: i64,
    },
    /// Layer normalization over axes `axis..`: X, scale, optional bias.
    LayerNormalization {
        /// First normalized axis.
        axis: i64,
        /// Added to the variance.
        epsilon: f32,
    },
    /// Reduction.
    Reduce(ReduceDesc),
    /// Element type conversion (see [`crate::scalar`] for the rounding rules).
    Cast {
        /// Target type.
        to: DataType,
        /// For float8 targets: out-of-range values (and infinities) become the largest finite
        /// value (true, ONNX's default) or infinity / NaN (false). Ignored for other types.
        saturate: bool,
    },
    /// Padding.
    Pad(PadDesc),
    /// Resize.
    Resize(ResizeDesc),
    /// One-input math function or activation beyond [`UnaryOp`] (Floor, Sin, Elu, IsNaN, ...).
    Math(MathOp),
    /// Two-input comparison, logical, bitwise, Mod or PRelu, with broadcasting.
    BinaryExt(BinaryExtOp),
    /// Select from X or Y by a bool condition: condition, X, Y (broadcasting).
    Where,
    /// ArgMax / ArgMin.
    ArgReduce(ArgReduceDesc),
    /// Broadcast to a shape (resolved from ONNX's shape input).
    Expand {
        /// The shape broadcast with the input's.
        shape: Vec<usize>,
    },
    /// Repeat the input along each axis.
    Tile {
        /// Repeats per axis.
        repeats: Vec<usize>,
    },
    /// Keep the upper or lower triangle of the last two axes, zeroing the rest.
    Trilu {
        /// Upper (true) or lower triangle.
        upper: bool,
        /// Diagonal offset.
        k: i64,
    },
    /// Gather single elements along an axis: data, indices (same rank).
    GatherElements {
        /// The axis.
        axis: i64,
    },
    /// Gather slices by index tuples: data, indices.
    GatherND {
        /// Leading dimensions shared by data and indices.
        batch_dims: usize,
    },
    /// Scatter slices by index tuples: data, indices, updates.
    ScatterND {
        /// How updates combine with the data.
        reduction: ScatterReduction,
    },
    /// Scatter single elements along an axis: data, indices, updates.
    ScatterElements {
        /// The axis.
        axis: i64,
        /// How updates combine with the data.
        reduction: ScatterReduction,
    },
    /// One-hot encoding: indices, values ([off, on]).
    OneHot {
        /// Where the new axis goes.
        axis: i64,
        /// Its size.
        depth: usize,
    },
    /// The k largest or smallest entries along an axis: values and i64 indices.
    TopK(TopKDesc),
    /// Cumulative sum along an axis.
    CumSum {
        /// The axis.
        axis: i64,
        /// Exclude the current element.
        exclusive: bool,
        /// Sum from the end.
        reverse: bool,
    },
    /// log(softmax(x)) along one axis.
    LogSoftmax {
        /// The axis.
        axis: i64,
    },
    /// 1 at the first maximum along an axis, 0 elsewhere.
    Hardmax {
        /// The axis.
        axis: i64,
    },
    /// Per-instance, per-channel normalization: X [N, C, ...], scale `[C]`, bias `[C]`.
    InstanceNormalization {
        /// Added to the variance.
        epsilon: f32,
    },
    /// Local response normalization across channels.
    Lrn {
        /// Scale.
        alpha: f32,
        /// Exponent.
        beta: f32,
        /// Offset.
        bias: f32,
        /// Number of channels summed.
        size: usize,
    },
    /// Quantize: x, scale, optional zero point → `to` (round half to even, saturate).
    /// Scales are per tensor (a scalar), per axis (`[d_axis]`) or blocked (`block_size` > 0:
    /// the scale has x's shape except `ceil(d_axis / block_size)` along `axis`).
    QuantizeLinear {
        /// The axis of per-axis and blocked scales.
        axis: i64,
        /// The quantized type (8/16-bit integers, int4/uint4 or a float8 type).
        to: DataType,
        /// Block length along `axis` for blocked scales; 0 for per-tensor / per-axis.
        block_size: usize,
        /// For float8 results: clamp to the largest finite value (true) or overflow to
        /// infinity / NaN (false), as Cast's `saturate`.
        saturate: bool,
        /// How a backend that folds the quantized chain ending here (a convolution or
        /// product of dequantized 8-bit values) into integer arithmetic requantizes the
        /// exact sum; computing the chain in f32 ignores it. The TFLite importer sets it to
        /// the rule of the reference LiteRT would run (`docs/tflite.md`).
        requant: crate::quant::Requantization,
    },
    /// Dequantize: x, scale, optional zero point → `to` ((x - zero point) * scale), with
    /// the same scale layouts as [`Op::QuantizeLinear`].
    DequantizeLinear {
        /// The axis of per-axis and blocked scales.
        axis: i64,
        /// The real type (f32 or f16).
        to: DataType,
        /// Block length along `axis` for blocked scales; 0 for per-tensor / per-axis.
        block_size: usize,
    },
    /// Quantize f32 to u8 with scale and zero point computed from the data: outputs y, scale,
    /// zero point.
    DynamicQuantizeLinear,
    /// Change a tensor's memory layout between backends whose tensor-handle factories
    /// declare different layouts (inserted by the optimizer; run by the builtin backend).
    /// The logical type and shape stay the same; the bytes are reordered. An *order* lists,
    /// outermost first, the logical axis stored at each physical position: `[0, 1, 2, 3]` is
    /// row-major (standard), `[0, 2, 3, 1]` channels-last for NCHW tensors.
    Permute {
        /// The input's physical axis order.
        from: Vec<usize>,
        /// The output's physical axis order.
        to: Vec<usize>,
    },
    /// Run one of two nested networks by a condition.
    If(IfDesc),
    /// Run a nested network repeatedly, carrying values and stacking per-iteration outputs.
    Loop(LoopDesc),
    /// Run a nested network over slices of its inputs, carrying state.
    Scan(ScanDesc),
    /// Negative log-likelihood loss: input [N, C, ...], target [N, ...], optional weight `[C]`.
    NegativeLogLikelihoodLoss(NllLossDesc),
    /// Sample X at the normalized positions of a grid: X, grid.
    GridSample(GridSampleDesc),
    /// Sum of products over the labels of an equation (any number of inputs).
    Einsum(EinsumDesc),
    /// Determinant of the matrices of the last two axes: X [*, M, M] → `[*]`.
    Det,
    /// RNN, GRU or LSTM (see [`RnnDesc`] for the inputs and outputs).
    Rnn(RnnDesc),
    /// MaxPool with its Indices output: X → Y, Indices (see [`MaxPoolIndicesDesc`]).
    MaxPoolWithIndices(MaxPoolIndicesDesc),
    /// Scatter pooled values back to their positions: X, I → Y (see [`MaxUnpoolDesc`]).
    MaxUnpool(MaxUnpoolDesc),
    /// Adagrad, Adam or Momentum (see [`OptimizerDesc`] for the inputs and outputs).
    Optimizer(OptimizerDesc),
    /// n-gram counts of integer tokens (see [`TfIdfDesc`]).
    TfIdfVectorizer(TfIdfDesc),
    /// Regression with an ensemble of decision trees (see [`TreeEnsembleDesc`]).
    TreeEnsemble(TreeEnsembleDesc),
    /// Discrete Fourier transform along one axis (see [`DftDesc`]).
    Dft(DftDesc),
    /// Short-time Fourier transform (see [`StftDesc`]).
    Stft(StftDesc),
    /// Column blocks summed back into an image (see [`Col2ImDesc`]).
    Col2Im(Col2ImDesc),
    /// Sampling grid of an affine transform (see [`AffineGridDesc`]).
    AffineGrid(AffineGridDesc),
    /// Region-of-interest pooling with bilinear sampling (see [`RoiAlignDesc`]).
    RoiAlign(RoiAlignDesc),
    /// Deformable convolution (see [`DeformConvDesc`]).
    DeformConv(DeformConvDesc),
    /// An operator outside the standard set.
    Custom(CustomOp),
}

impl Op {
    /// The nested networks this op runs (If's branches, a Loop's or Scan's body), in order.
    pub fn subgraphs(&self) -> Vec<&std::sync::Arc<crate::Network>> {
        match self {
            Op::If(d) => vec![&d.then_branch, &d.else_branch],
            Op::Loop(d) => vec![&d.body],
            Op::Scan(d) => vec![&d.body],
            _ => Vec::new(),
        }
    }

    /// The ONNX-style operator name.
    pub fn name(&self) -> &str {
        match self {
            Op::Identity => "Identity",
            Op::MemCopy => "MemCopy",
            Op::MemImport => "MemImport",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Conv(_) => "Conv",
            Op::ConvTranspose(_) => "ConvTranspose",
            Op::BatchNormalization { .. } => "BatchNormalization",
            Op::MatMul => "MatMul",
            Op::Gemm(_) => "Gemm",
            Op::Pool(p) => match p.kind {
                PoolKind::Max => "MaxPool",
                PoolKind::Average => "AveragePool",
            },
            Op::GlobalPool(PoolKind::Max) => "GlobalMaxPool",
            Op::GlobalPool(PoolKind::Average) => "GlobalAveragePool",
            Op::IntegerAveragePool(_) => "IntegerAveragePool",
            Op::Lookup => "Lookup",
            Op::Flatten { .. } => "Flatten",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Squeeze { .. } => "Squeeze",
            Op::Unsqueeze { .. } => "Unsqueeze",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice(_) => "Slice",
            Op::Gather { .. } => "Gather",
            Op::Softmax { .. } => "Softmax",
            Op::LayerNormalization { .. } => "LayerNormalization",
            Op::Reduce(r) => r.kind.name(),
            Op::Cast { .. } => "Cast",
            Op::Pad(_) => "Pad",
            Op::Resize(_) => "Resize",
            Op::Math(m) => m.name(),
            Op::BinaryExt(b) => b.name(),
            Op::Where => "Where",
            Op::ArgReduce(a) => {
                if a.max {
                    "ArgMax"
                } else {
                    "ArgMin"
                }
            }
            Op::Expand { .. } => "Expand",
            Op::Tile { .. } => "Tile",
            Op::Trilu { .. } => "Trilu",
            Op::GatherElements { .. } => "GatherElements",
            Op::GatherND { .. } => "GatherND",
            Op::ScatterND { .. } => "ScatterND",
            Op::ScatterElements { .. } => "ScatterElements",
            Op::OneHot { .. } => "OneHot",
            Op::TopK(_) => "TopK",
            Op::CumSum { .. } => "CumSum",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::Hardmax { .. } => "Hardmax",
            Op::InstanceNormalization { .. } => "InstanceNormalization",
            Op::Lrn { .. } => "LRN",
            Op::QuantizeLinear { .. } => "QuantizeLinear",
            Op::DequantizeLinear { .. } => "DequantizeLinear",
            Op::DynamicQuantizeLinear => "DynamicQuantizeLinear",
            Op::Permute { .. } => "Permute",
            Op::If(_) => "If",
            Op::Loop(_) => "Loop",
            Op::Scan(_) => "Scan",
            Op::NegativeLogLikelihoodLoss(_) => "NegativeLogLikelihoodLoss",
            Op::GridSample(_) => "GridSample",
            Op::Einsum(_) => "Einsum",
            Op::Det => "Det",
            Op::Rnn(d) => d.name(),
            Op::MaxPoolWithIndices(_) => "MaxPool",
            Op::MaxUnpool(_) => "MaxUnpool",
            Op::Optimizer(d) => d.kind.name(),
            Op::TfIdfVectorizer(_) => "TfIdfVectorizer",
            Op::TreeEnsemble(_) => "TreeEnsemble",
            Op::Dft(_) => "DFT",
            Op::Stft(_) => "STFT",
            Op::Col2Im(_) => "Col2Im",
            Op::AffineGrid(_) => "AffineGrid",
            Op::RoiAlign(_) => "RoiAlign",
            Op::DeformConv(_) => "DeformConv",
            Op::Custom(c) => &c.op_type,
        }
    }

    /// How many inputs the op takes: (minimum, maximum).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Binary(_) | Op::MatMul | Op::Gather { .. } | Op::Lookup => (2, 2),
            Op::BinaryExt(_)
            | Op::GatherElements { .. }
            | Op::GatherND { .. }
            | Op::OneHot { .. } => (2, 2),
            Op::Where | Op::ScatterND { .. } | Op::ScatterElements { .. } => (3, 3),
            Op::InstanceNormalization { .. } => (3, 3),
            Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } => (2, 3),
            Op::Conv(_) | Op::ConvTranspose(_) | Op::Gemm(_) => (2, 3),
            Op::LayerNormalization { .. } => (2, 3),
            Op::BatchNormalization { .. } => (5, 5),
            Op::Concat { .. } => (1, usize::MAX),
            Op::Custom(_) => (0, usize::MAX),
            Op::If(_) => (1, usize::MAX),
            Op::Loop(_) => (2, usize::MAX),
            Op::Scan(_) => (1, usize::MAX),
            Op::NegativeLogLikelihoodLoss(_) => (2, 3),
            Op::GridSample(_) => (2, 2),
            Op::Einsum(_) => (1, usize::MAX),
            Op::Rnn(d) => (d.kind.num_inputs(), d.kind.num_inputs()),
            Op::MaxUnpool(_) => (2, 2),
            Op::Stft(_) => (1, 2),
            Op::RoiAlign(_) => (3, 3),
            Op::DeformConv(_) => (3, 5),
            Op::Optimizer(d) => (d.num_inputs(), d.num_inputs()),
            // No catch-all: a new variant must state its arity here.
            Op::Identity
            | Op::MemCopy
            | Op::MemImport
            | Op::Unary(_)
            | Op::Pool(_)
            | Op::GlobalPool(_)
            | Op::IntegerAveragePool(_)
            | Op::Flatten { .. }
            | Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Split { .. }
            | Op::Slice(_)
            | Op::Softmax { .. }
            | Op::Reduce(_)
            | Op::Cast { .. }
            | Op::Pad(_)
            | Op::Resize(_)
            | Op::Math(_)
            | Op::ArgReduce(_)
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::Trilu { .. }
            | Op::TopK(_)
            | Op::CumSum { .. }
            | Op::LogSoftmax { .. }
            | Op::Hardmax { .. }
            | Op::Lrn { .. }
            | Op::DynamicQuantizeLinear
            | Op::Permute { .. }
            | Op::Det
            | Op::MaxPoolWithIndices(_)
            | Op::TfIdfVectorizer(_)
            | Op::TreeEnsemble(_)
            | Op::Dft(_)
            | Op::Col2Im(_)
            | Op::AffineGrid(_) => (1, 1),
        }
    }

    /// Infer and validate the output descriptions from the input descriptions.
    pub fn infer(&self, inputs: &[&TensorInfo]) -> Result<Vec<TensorInfo>> {
        let (lo, hi) = self.arity();
        if inputs.len() < lo || inputs.len() > hi {
            return Err(CoreError::InvalidOp {
                op: "arity",
                message: format!(
                    "{} takes {lo}..={} inputs, got {}",
                    self.name(),
                    if hi == usize::MAX {
                        "n".to_string()
                    } else {
                        hi.to_string()
                    },
                    inputs.len()
                ),
            });
        }
        match self {
            Op::Identity | Op::MemCopy | Op::MemImport => Ok(vec![inputs[0].clone()]),
            Op::Unary(_) => elementwise::infer_unary(inputs),
            Op::Binary(b) => elementwise::infer_binary(*b, inputs),
            Op::Conv(c) => c.infer(inputs),
            Op::ConvTranspose(c) => c.infer(inputs),
            Op::BatchNormalization { .. } => nn::infer_batch_norm(inputs),
            Op::MatMul => nn::infer_matmul(inputs),
            Op::Gemm(g) => g.infer(inputs),
            Op::Pool(p) => p.infer(inputs),
            Op::GlobalPool(_) => nn::infer_global_pool(inputs),
            Op::IntegerAveragePool(p) => qint::infer_integer_average_pool(p, inputs),
            Op::Lookup => qint::infer_lookup(inputs),
            Op::Flatten { axis } => layout::infer_flatten(*axis, inputs),
            Op::Reshape { shape } => layout::infer_reshape(shape, inputs),
            Op::Transpose { perm } => layout::infer_transpose(perm, inputs),
            Op::Squeeze { axes } => layout::infer_squeeze(axes, inputs),
            Op::Unsqueeze { axes } => layout::infer_unsqueeze(axes, inputs),
            Op::Concat { axis } => layout::infer_concat(*axis, inputs),
            Op::Split { axis, splits } => layout::infer_split(*axis, splits, inputs),
            Op::Slice(s) => layout::infer_slice(s, inputs),
            Op::Gather { axis } => layout::infer_gather(*axis, inputs),
            Op::Softmax { axis } => nn::infer_softmax(*axis, inputs),
            Op::LayerNormalization { axis, .. } => nn::infer_layer_norm(*axis, inputs),
            Op::Reduce(r) => r.infer(inputs),
            Op::Cast { to, .. } => Ok(vec![TensorInfo::new(*to, inputs[0].shape.clone())]),
            Op::Pad(p) => layout::infer_pad(p, inputs),
            Op::Resize(r) => r.infer(inputs),
            Op::Math(m) => math::infer_math(*m, inputs),
            Op::BinaryExt(b) => math::infer_binary_ext(*b, inputs),
            Op::Where => math::infer_where(inputs),
            Op::ArgReduce(a) => indexing::infer_arg_reduce(a, inputs),
            Op::Expand { shape } => indexing::infer_expand(shape, inputs),
            Op::Tile { repeats } => indexing::infer_tile(repeats, inputs),
            Op::Trilu { .. } => indexing::infer_trilu(inputs),
            Op::GatherElements { axis } => indexing::infer_gather_elements(*axis, inputs),
            Op::GatherND { batch_dims } => indexing::infer_gather_nd(*batch_dims, inputs),
            Op::ScatterND { .. } => indexing::infer_scatter_nd(inputs),
            Op::ScatterElements { axis, .. } => indexing::infer_scatter_elements(*axis, inputs),
            Op::OneHot { axis, depth } => indexing::infer_one_hot(*axis, *depth, inputs),
            Op::TopK(t) => indexing::infer_top_k(t, inputs),
            Op::CumSum { axis, .. } => indexing::infer_cum_sum(*axis, inputs),
            Op::LogSoftmax { axis } => indexing::infer_axis_float("LogSoftmax", *axis, inputs),
            Op::Hardmax { axis } => indexing::infer_axis_float("Hardmax", *axis, inputs),
            Op::InstanceNormalization { .. } => indexing::infer_instance_norm(inputs),
            Op::Lrn { .. } => indexing::infer_lrn(inputs),
            Op::QuantizeLinear {
                axis,
                to,
                block_size,
                ..
            } => math::infer_quantize("QuantizeLinear", *axis, *to, *block_size, inputs),
            Op::DequantizeLinear {
                axis,
                to,
                block_size,
            } => math::infer_quantize("DequantizeLinear", *axis, *to, *block_size, inputs),
            Op::DynamicQuantizeLinear => math::infer_dynamic_quantize(inputs),
            Op::Permute { from, to } => layout::infer_permute(from, to, inputs),
            Op::If(d) => d.infer(inputs),
            Op::Loop(d) => d.infer(inputs),
            Op::Scan(d) => d.infer(inputs),
            Op::NegativeLogLikelihoodLoss(d) => d.infer(inputs),
            Op::GridSample(d) => d.infer(inputs),
            Op::Einsum(d) => d.infer(inputs),
            Op::Det => linalg::infer_det(inputs),
            Op::Rnn(d) => d.infer(inputs),
            Op::MaxPoolWithIndices(d) => d.infer(inputs),
            Op::MaxUnpool(d) => d.infer(inputs),
            Op::Optimizer(d) => d.infer(inputs),
            Op::TfIdfVectorizer(d) => d.infer(inputs),
            Op::TreeEnsemble(d) => d.infer(inputs),
            Op::Dft(d) => d.infer(inputs),
            Op::Stft(d) => d.infer(inputs),
            Op::Col2Im(d) => d.infer(inputs),
            Op::AffineGrid(d) => d.infer(inputs),
            Op::RoiAlign(d) => d.infer(inputs),
            Op::DeformConv(d) => d.infer(inputs),
            Op::Custom(c) => Ok(c.outputs.clone()),
        }
    }
}

/// Something that can compute an op on constant tensors: the importer uses it to fold
/// constant subgraphs (e.g. Shape → Gather → Concat chains), and CpuRef provides one.
pub trait Evaluator {
    /// Compute `op` on `inputs`, returning its outputs.
    fn evaluate(&self, op: &Op, inputs: &[&Tensor]) -> std::result::Result<Vec<Tensor>, String>;
}

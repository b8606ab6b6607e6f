//! Translation of ONNX nodes into backplane ops.
//!
//! A translator reads the node's attributes and (through [`NodeCx`]) its inputs' static
//! descriptions and constant values, and returns a [`Lowering`]: either constant outputs
//! (Shape, Size) or a short list of [`Step`]s, each one backplane op, that the importer turns
//! into layers or folds. Parameters that ONNX passes as constant inputs are resolved here into
//! the op descriptor; when such a parameter is not constant the node is unsupported.

mod elementwise;
mod generate;
mod indexing;
mod layout;
mod loss;
mod ml;
mod nn;
mod opsets;
mod qlinear_conv;
mod quantize;
mod recurrent;
mod reduce;
mod resize;
mod sampling;
mod signal;
mod training;
mod versions;

pub(crate) use opsets::{domain_op_supported, earliest_opset, known_domain};
pub(crate) use versions::{too_new, NEWEST_IR_VERSION};

use crate::attrs::Attrs;
use crate::import::{not_a_tensor, Importer, Value};
use crate::proto::NodeProto;
use crate::OnnxError;
use backplane_core::{DataType, Op, Tensor, TensorInfo};
use std::sync::Arc;

/// Why a node was not translated.
#[derive(Debug)]
pub(crate) enum TxError {
    /// The node uses something backplane does not support (reported to the user).
    Unsupported(String),
    /// A parameter (or a data-dependent shape) needs the value of a runtime tensor, which
    /// depends on these graph inputs: the model can be imported specialized on their values.
    NeedsValues {
        /// What is needed (e.g. "dynamic shape").
        reason: String,
        /// The graph inputs the value depends on.
        inputs: Vec<String>,
    },
    /// An input comes from a node that could not be imported: skip silently.
    Skip,
    /// The model is invalid or cannot be read: abort the import.
    Fatal(OnnxError),
}

impl From<OnnxError> for TxError {
    fn from(e: OnnxError) -> Self {
        TxError::Fatal(e)
    }
}

pub(crate) type Tx<T> = Result<T, TxError>;

/// Where a step reads an input from.
#[derive(Debug, Clone)]
pub(crate) enum Src {
    /// The node's input of that index.
    Input(usize),
    /// A value produced by an earlier step of the same lowering.
    Temp(usize),
    /// A constant made by the translator.
    Const(Arc<Tensor>),
}

/// Where a step writes an output to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dst {
    /// The node's output of that index.
    Output(usize),
    /// A value for later steps of the same lowering.
    Temp(usize),
}

/// One backplane op of a lowering.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// The op.
    pub op: Op,
    /// Its inputs.
    pub inputs: Vec<Src>,
    /// Its outputs, one per output slot of the op.
    pub outputs: Vec<Dst>,
    /// Appended to the node name to name the layer (`None` for the node's main layer).
    pub suffix: Option<String>,
}

/// What a node becomes.
#[derive(Debug)]
pub(crate) enum Lowering {
    /// Constant outputs, one per node output (folded by the importer itself).
    Constants(Vec<Tensor>),
    /// Ops to add (or fold).
    Steps(Vec<Step>),
}

impl Lowering {
    /// One op from the given node inputs to output 0.
    pub(crate) fn single(op: Op, inputs: Vec<Src>) -> Self {
        Lowering::Steps(vec![Step {
            op,
            inputs,
            outputs: vec![Dst::Output(0)],
            suffix: None,
        }])
    }
}

/// One node being translated, with access to the values it reads.
pub(crate) struct NodeCx<'a> {
    /// The node.
    pub node: &'a NodeProto,
    /// The layer name (node name or generated).
    pub name: &'a str,
    /// The opset version of the node's domain (the default domain, except for the
    /// `ai.onnx.ml` and training-domain operators).
    pub opset: i64,
    /// The node's attributes.
    pub attrs: Attrs<'a>,
    pub(crate) imp: &'a Importer<'a>,
}

/// Largest window parameter (kernel, stride, dilation, pad) accepted, to keep all size
/// arithmetic far away from overflow.
pub(crate) const MAX_WINDOW_PARAM: i64 = 1 << 24;

impl NodeCx<'_> {
    /// The operator type.
    pub fn op_type(&self) -> &str {
        self.node.op_type.as_deref().unwrap_or("")
    }

    /// An invalid-model error naming this node.
    pub fn invalid(&self, message: impl std::fmt::Display) -> TxError {
        TxError::Fatal(OnnxError::InvalidModel(format!(
            "node '{}' ({}): {message}",
            self.name,
            self.op_type()
        )))
    }

    /// Turn an attribute error into an invalid-model error.
    pub fn attr<T>(&self, r: Result<T, String>) -> Tx<T> {
        r.map_err(|m| self.invalid(m))
    }

    /// The name of input `i`, or `None` when it is absent or empty (an omitted optional input).
    pub fn input_name(&self, i: usize) -> Option<&str> {
        self.node
            .input
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Number of inputs listed (including omitted ones before the last).
    pub fn num_inputs(&self) -> usize {
        self.node.input.len()
    }

    /// Whether output `i` exists and is read by a later node or is a graph output.
    pub fn output_used(&self, i: usize) -> bool {
        self.node
            .output
            .get(i)
            .is_some_and(|n| !n.is_empty() && self.imp.is_consumed(n))
    }

    /// Whether output `i` is named (present and non-empty).
    pub fn output_named(&self, i: usize) -> bool {
        self.node.output.get(i).is_some_and(|n| !n.is_empty())
    }

    fn value(&self, i: usize) -> Tx<Option<&Value>> {
        let Some(name) = self.input_name(i) else {
            return Ok(None);
        };
        match self.imp.value(name) {
            Some(v) => Ok(Some(v)),
            None => Err(self.invalid(format!(
                "input '{name}' is not defined before the node (nodes must be in topological order)"
            ))),
        }
    }

    /// The description of a required input.
    pub fn info(&self, i: usize) -> Tx<TensorInfo> {
        match self.value(i)? {
            None => Err(self.invalid(format!("required input #{i} is missing"))),
            Some(Value::Known(t)) => Ok(t.info().clone()),
            Some(Value::Runtime(id)) => Ok(self.imp.network().tensor(*id).info.clone()),
            Some(Value::Poisoned) => Err(TxError::Skip),
            Some(Value::Structured(s)) => Err(not_a_tensor(self.input_name(i).unwrap_or(""), s)),
            Some(Value::Unsupported { reason, .. }) => Err(TxError::Unsupported(format!(
                "{reason}, which backplane does not support"
            ))),
        }
    }

    /// The value of a constant-parameter input as f64 numbers: `None` when the input is absent,
    /// unsupported when it is computed at run time.
    pub fn const_values(&self, i: usize, param: &str) -> Tx<Option<(Vec<usize>, Vec<f64>)>> {
        match self.value(i)? {
            None => Ok(None),
            Some(Value::Known(t)) => Ok(Some((t.shape().dims().to_vec(), t.to_f64_vec()))),
            Some(Value::Runtime(id)) => Err(TxError::NeedsValues {
                reason: format!("dynamic {param} (computed at run time)"),
                inputs: self.imp.inputs_behind(*id),
            }),
            Some(Value::Poisoned) => Err(TxError::Skip),
            Some(Value::Structured(s)) => Err(not_a_tensor(self.input_name(i).unwrap_or(""), s)),
            Some(Value::Unsupported { reason, values, .. }) => match values {
                Some(v) => Ok(Some((vec![v.len()], v.clone()))),
                None => Err(TxError::Unsupported(format!(
                    "{param}: {reason}, which backplane does not support"
                ))),
            },
        }
    }

    /// The constant value of input `i`, for ops whose output shape depends on their input
    /// values (NonZero, Unique): `NeedsValues` when it is computed at run time.
    pub fn known(&self, i: usize, what: &str) -> Tx<Arc<Tensor>> {
        match self.value(i)? {
            None => Err(self.invalid(format!("required input #{i} is missing"))),
            Some(Value::Known(t)) => Ok(t.clone()),
            Some(Value::Runtime(id)) => Err(TxError::NeedsValues {
                reason: format!("{what} depends on the values of a run-time tensor"),
                inputs: self.imp.inputs_behind(*id),
            }),
            Some(Value::Poisoned) => Err(TxError::Skip),
            Some(Value::Structured(s)) => Err(not_a_tensor(self.input_name(i).unwrap_or(""), s)),
            Some(Value::Unsupported { reason, .. }) => Err(TxError::Unsupported(format!(
                "{reason}, which backplane does not support"
            ))),
        }
    }

    /// A constant integer-list parameter (i64 or i32 tensor).
    pub fn const_ints(&self, i: usize, param: &str) -> Tx<Option<Vec<i64>>> {
        if let Some(Value::Known(t)) = self.value(i)? {
            return match t.dtype() {
                DataType::I64 => Ok(Some(
                    t.as_slice::<i64>().map_err(|e| self.invalid(e))?.to_vec(),
                )),
                DataType::I32 => Ok(Some(
                    t.as_slice::<i32>()
                        .map_err(|e| self.invalid(e))?
                        .iter()
                        .map(|&v| i64::from(v))
                        .collect(),
                )),
                other => {
                    Err(self.invalid(format!("{param} must be an integer tensor, not {other}")))
                }
            };
        }
        let Some((_, values)) = self.const_values(i, param)? else {
            return Ok(None);
        };
        values
            .into_iter()
            .map(|v| {
                if v.fract() == 0.0 && v.abs() < 9.0e18 {
                    Ok(v as i64)
                } else {
                    Err(self.invalid(format!("{param} must hold integers, got {v}")))
                }
            })
            .collect::<Tx<Vec<i64>>>()
            .map(Some)
    }

    /// A constant float-list parameter.
    pub fn const_floats(&self, i: usize, param: &str) -> Tx<Option<Vec<f64>>> {
        Ok(self.const_values(i, param)?.map(|(_, v)| v))
    }

    /// A constant scalar parameter (a tensor of exactly one element).
    pub fn const_scalar(&self, i: usize, param: &str) -> Tx<Option<f64>> {
        match self.const_floats(i, param)? {
            None => Ok(None),
            Some(v) if v.len() == 1 => Ok(Some(v[0])),
            Some(v) => {
                Err(self.invalid(format!("{param} must be a scalar, got {} values", v.len())))
            }
        }
    }

    /// Error out unless the model's opset has this operator.
    pub fn require_opset(&self, min: i64) -> Tx<()> {
        if self.opset >= min {
            Ok(())
        } else {
            Err(TxError::Unsupported(format!(
                "{} is defined from opset {min} on, but the model imports opset {}",
                self.op_type(),
                self.opset
            )))
        }
    }

    /// The data inputs of an op: `required` leading inputs that must be present, then up to
    /// `optional` more, which stop at the first omitted one.
    pub fn data_inputs(&self, required: usize, optional: usize) -> Tx<Vec<Src>> {
        let mut v = Vec::with_capacity(required + optional);
        for i in 0..required {
            if self.input_name(i).is_none() {
                return Err(self.invalid(format!("required input #{i} is missing")));
            }
            v.push(Src::Input(i));
        }
        for i in required..required + optional {
            if self.input_name(i).is_none() {
                if (i + 1..self.num_inputs()).any(|j| self.input_name(j).is_some()) {
                    return Err(TxError::Unsupported(format!(
                        "optional input #{i} is omitted but a later one is given"
                    )));
                }
                break;
            }
            v.push(Src::Input(i));
        }
        Ok(v)
    }
}

/// Convert a non-negative ONNX integer to usize, bounded by `max`.
pub(crate) fn to_usize(cx: &NodeCx<'_>, what: &str, v: i64, max: i64) -> Tx<usize> {
    if (0..=max).contains(&v) {
        usize::try_from(v).map_err(|_| cx.invalid(format!("{what} {v} is too large")))
    } else {
        Err(cx.invalid(format!("{what} must be in 0..={max}, got {v}")))
    }
}

fn math(_cx: &NodeCx<'_>, op: backplane_core::ops::MathOp) -> Tx<Lowering> {
    Ok(Lowering::single(Op::Math(op), vec![Src::Input(0)]))
}

fn binary_ext(cx: &NodeCx<'_>, op: backplane_core::ops::BinaryExtOp) -> Tx<Lowering> {
    Ok(Lowering::single(Op::BinaryExt(op), cx.data_inputs(2, 0)?))
}

/// Translate one node of the default domain (or of a domain [`known_domain`] accepts).
pub(crate) fn translate(cx: &NodeCx<'_>) -> Tx<Lowering> {
    use backplane_core::ops::{BinaryExtOp, BinaryOp, MathOp, PoolKind, ReduceKind, UnaryOp};
    if let Some(lowering) = opsets::translate_other_domain(cx) {
        return lowering;
    }
    let op = cx.op_type().to_string();
    match op.as_str() {
        "Conv" => nn::conv(cx),
        "ConvTranspose" => nn::conv_transpose(cx),
        "BatchNormalization" => nn::batch_norm(cx),
        "MatMul" => Ok(Lowering::single(
            Op::MatMul,
            vec![Src::Input(0), Src::Input(1)],
        )),
        "Gemm" => nn::gemm(cx),
        "MaxPool" => nn::pool(cx, PoolKind::Max),
        "MaxUnpool" => nn::max_unpool(cx),
        "TfIdfVectorizer" => ml::tfidf_vectorizer(cx),
        "AveragePool" => nn::pool(cx, PoolKind::Average),
        "LpPool" => nn::lp_pool(cx),
        "GlobalAveragePool" => Ok(Lowering::single(
            Op::GlobalPool(PoolKind::Average),
            vec![Src::Input(0)],
        )),
        "GlobalMaxPool" => Ok(Lowering::single(
            Op::GlobalPool(PoolKind::Max),
            vec![Src::Input(0)],
        )),
        "Softmax" => nn::softmax(cx, |axis| Op::Softmax { axis }),
        "LogSoftmax" => nn::softmax(cx, |axis| Op::LogSoftmax { axis }),
        "Hardmax" => nn::softmax(cx, |axis| Op::Hardmax { axis }),
        "InstanceNormalization" => {
            let epsilon = cx.attr(cx.attrs.float_or("epsilon", 1e-5))?;
            Ok(Lowering::single(
                Op::InstanceNormalization { epsilon },
                cx.data_inputs(3, 0)?,
            ))
        }
        "LRN" => indexing::lrn(cx),
        "LayerNormalization" => nn::layer_norm(cx),
        "MeanVarianceNormalization" => nn::mean_variance_normalization(cx),
        "GroupNormalization" => nn::group_normalization(cx),

        "Relu" => elementwise::unary(cx, UnaryOp::Relu),
        "Sigmoid" => elementwise::unary(cx, UnaryOp::Sigmoid),
        "Tanh" => elementwise::unary(cx, UnaryOp::Tanh),
        "Erf" => elementwise::unary(cx, UnaryOp::Erf),
        "Sqrt" => elementwise::unary(cx, UnaryOp::Sqrt),
        "Exp" => elementwise::unary(cx, UnaryOp::Exp),
        "Log" => elementwise::unary(cx, UnaryOp::Log),
        "Neg" => elementwise::unary(cx, UnaryOp::Neg),
        "Abs" => elementwise::unary(cx, UnaryOp::Abs),
        "LeakyRelu" => {
            let alpha = cx.attr(cx.attrs.float_or("alpha", 0.01))?;
            elementwise::unary(cx, UnaryOp::LeakyRelu { alpha })
        }
        "Gelu" => elementwise::gelu(cx),
        "Clip" => elementwise::clip(cx),
        "Add" => elementwise::binary(cx, BinaryOp::Add),
        "Sub" => elementwise::binary(cx, BinaryOp::Sub),
        "Mul" => elementwise::binary(cx, BinaryOp::Mul),
        "Div" => elementwise::binary(cx, BinaryOp::Div),
        "Pow" => elementwise::binary(cx, BinaryOp::Pow),
        "Max" => elementwise::variadic(cx, BinaryOp::Max, false),
        "Min" => elementwise::variadic(cx, BinaryOp::Min, false),
        "Sum" => elementwise::variadic(cx, BinaryOp::Add, false),
        "Mean" => elementwise::variadic(cx, BinaryOp::Add, true),

        "Identity" => Ok(Lowering::single(Op::Identity, vec![Src::Input(0)])),
        "Dropout" => layout::dropout(cx),
        "Cast" => layout::cast(cx),
        "Flatten" => layout::flatten(cx),
        "Reshape" => layout::reshape(cx),
        "Transpose" => layout::transpose(cx),
        "Squeeze" => layout::squeeze(cx),
        "Unsqueeze" => layout::unsqueeze(cx),
        "Concat" => layout::concat(cx),
        "Split" => layout::split(cx),
        "Slice" => layout::slice(cx),
        "Gather" => {
            let axis = cx.attr(cx.attrs.int_or("axis", 0))?;
            Ok(Lowering::single(
                Op::Gather { axis },
                vec![Src::Input(0), Src::Input(1)],
            ))
        }
        "Pad" => layout::pad(cx),
        "Shape" => layout::shape(cx),
        "Size" => layout::size(cx),

        "ReduceMean" => reduce::reduce(cx, ReduceKind::Mean),
        "ReduceSum" => reduce::reduce(cx, ReduceKind::Sum),
        "ReduceMax" => reduce::reduce(cx, ReduceKind::Max),
        "ReduceMin" => reduce::reduce(cx, ReduceKind::Min),
        "ReduceProd" => reduce::reduce(cx, ReduceKind::Prod),
        "ReduceL1" => reduce::reduce(cx, ReduceKind::L1),
        "ReduceL2" => reduce::reduce(cx, ReduceKind::L2),
        "ReduceLogSum" => reduce::reduce(cx, ReduceKind::LogSum),
        "ReduceLogSumExp" => reduce::reduce(cx, ReduceKind::LogSumExp),
        "ReduceSumSquare" => reduce::reduce(cx, ReduceKind::SumSquare),

        "Floor" => math(cx, MathOp::Floor),
        "Ceil" => math(cx, MathOp::Ceil),
        "Round" => math(cx, MathOp::Round),
        "Sign" => math(cx, MathOp::Sign),
        "Reciprocal" => math(cx, MathOp::Reciprocal),
        "Sin" => math(cx, MathOp::Sin),
        "Cos" => math(cx, MathOp::Cos),
        "Tan" => math(cx, MathOp::Tan),
        "Asin" => math(cx, MathOp::Asin),
        "Acos" => math(cx, MathOp::Acos),
        "Atan" => math(cx, MathOp::Atan),
        "Sinh" => math(cx, MathOp::Sinh),
        "Cosh" => math(cx, MathOp::Cosh),
        "Asinh" => math(cx, MathOp::Asinh),
        "Acosh" => math(cx, MathOp::Acosh),
        "Atanh" => math(cx, MathOp::Atanh),
        "Softplus" => math(cx, MathOp::Softplus),
        "Softsign" => math(cx, MathOp::Softsign),
        "Mish" => math(cx, MathOp::Mish),
        "HardSwish" => math(cx, MathOp::HardSwish),
        "IsNaN" => math(cx, MathOp::IsNaN),
        "Not" => math(cx, MathOp::Not),
        "BitwiseNot" => math(cx, MathOp::BitwiseNot),
        "HardSigmoid" => {
            let alpha = cx.attr(cx.attrs.float_or("alpha", 0.2))?;
            let beta = cx.attr(cx.attrs.float_or("beta", 0.5))?;
            math(cx, MathOp::HardSigmoid { alpha, beta })
        }
        "Selu" => {
            let alpha = cx.attr(cx.attrs.float_or("alpha", 1.673_263_2))?;
            let gamma = cx.attr(cx.attrs.float_or("gamma", 1.050_701))?;
            math(cx, MathOp::Selu { alpha, gamma })
        }
        "Elu" => {
            let alpha = cx.attr(cx.attrs.float_or("alpha", 1.0))?;
            math(cx, MathOp::Elu { alpha })
        }
        "Celu" => {
            let alpha = cx.attr(cx.attrs.float_or("alpha", 1.0))?;
            math(cx, MathOp::Celu { alpha })
        }
        "ThresholdedRelu" => {
            let alpha = cx.attr(cx.attrs.float_or("alpha", 1.0))?;
            math(cx, MathOp::ThresholdedRelu { alpha })
        }
        "Shrink" => {
            let bias = cx.attr(cx.attrs.float_or("bias", 0.0))?;
            let lambd = cx.attr(cx.attrs.float_or("lambd", 0.5))?;
            math(cx, MathOp::Shrink { bias, lambd })
        }
        "IsInf" => {
            let detect_negative = cx.attr(cx.attrs.flag("detect_negative", true))?;
            let detect_positive = cx.attr(cx.attrs.flag("detect_positive", true))?;
            math(
                cx,
                MathOp::IsInf {
                    detect_negative,
                    detect_positive,
                },
            )
        }
        "Equal" => binary_ext(cx, BinaryExtOp::Equal),
        "Less" => binary_ext(cx, BinaryExtOp::Less),
        "LessOrEqual" => binary_ext(cx, BinaryExtOp::LessOrEqual),
        "Greater" => binary_ext(cx, BinaryExtOp::Greater),
        "GreaterOrEqual" => binary_ext(cx, BinaryExtOp::GreaterOrEqual),
        "And" => binary_ext(cx, BinaryExtOp::And),
        "Or" => binary_ext(cx, BinaryExtOp::Or),
        "Xor" => binary_ext(cx, BinaryExtOp::Xor),
        "BitwiseAnd" => binary_ext(cx, BinaryExtOp::BitwiseAnd),
        "BitwiseOr" => binary_ext(cx, BinaryExtOp::BitwiseOr),
        "BitwiseXor" => binary_ext(cx, BinaryExtOp::BitwiseXor),
        "PRelu" => binary_ext(cx, BinaryExtOp::PRelu),
        "BitShift" => match cx.attr(cx.attrs.string("direction"))?.as_deref() {
            Some("LEFT") => binary_ext(cx, BinaryExtOp::BitShiftLeft),
            Some("RIGHT") => binary_ext(cx, BinaryExtOp::BitShiftRight),
            other => Err(cx.invalid(format!("direction must be LEFT or RIGHT, got {other:?}"))),
        },
        "Mod" => {
            if cx.attr(cx.attrs.flag("fmod", false))? {
                binary_ext(cx, BinaryExtOp::Fmod)
            } else {
                binary_ext(cx, BinaryExtOp::Mod)
            }
        }
        "Where" => Ok(Lowering::single(Op::Where, cx.data_inputs(3, 0)?)),
        "CastLike" => {
            let to = cx.info(1)?.dtype;
            let saturate = cx.attr(cx.attrs.flag("saturate", true))?;
            Ok(Lowering::single(
                Op::Cast { to, saturate },
                vec![Src::Input(0)],
            ))
        }
        "ArgMax" => indexing::arg_reduce(cx, true),
        "ArgMin" => indexing::arg_reduce(cx, false),
        "Expand" => indexing::expand(cx),
        "Tile" => indexing::tile(cx),
        "Trilu" => indexing::trilu(cx),
        "GatherElements" => {
            let axis = cx.attr(cx.attrs.int_or("axis", 0))?;
            Ok(Lowering::single(
                Op::GatherElements { axis },
                cx.data_inputs(2, 0)?,
            ))
        }
        "GatherND" => indexing::gather_nd(cx),
        "Compress" => indexing::compress(cx),
        "ReverseSequence" => indexing::reverse_sequence(cx),
        "CenterCropPad" => layout::center_crop_pad(cx),
        "ScatterND" => indexing::scatter_nd(cx),
        "ScatterElements" | "Scatter" => indexing::scatter_elements(cx),
        "OneHot" => indexing::one_hot(cx),
        "TopK" => indexing::top_k(cx),
        "CumSum" => indexing::cum_sum(cx),
        "DepthToSpace" => indexing::depth_to_space(cx),
        "SpaceToDepth" => indexing::space_to_depth(cx),
        "QuantizeLinear" => quantize::quantize_linear(cx),
        "DequantizeLinear" => quantize::dequantize_linear(cx),
        "DynamicQuantizeLinear" => quantize::dynamic_quantize_linear(cx),
        "QLinearMatMul" => quantize::qlinear_matmul(cx),
        "MatMulInteger" => quantize::matmul_integer(cx),
        "ConvInteger" => quantize::conv_integer(cx),
        "QLinearConv" => qlinear_conv::qlinear_conv(cx),
        "ConstantOfShape" => generate::constant_of_shape(cx),
        "Range" => generate::range(cx),
        "NonZero" => generate::non_zero(cx),
        "HannWindow" => generate::window_function(cx, generate::WindowKind::Hann),
        "HammingWindow" => generate::window_function(cx, generate::WindowKind::Hamming),
        "BlackmanWindow" => generate::window_function(cx, generate::WindowKind::Blackman),
        "EyeLike" => generate::eye_like(cx),
        "NonMaxSuppression" => generate::non_max_suppression(cx),
        "Unique" => generate::unique(cx),

        "Resize" => resize::resize(cx),
        "GridSample" => sampling::grid_sample(cx),
        "DFT" => signal::dft(cx),
        "STFT" => signal::stft(cx),
        "MelWeightMatrix" => signal::mel_weight_matrix(cx),
        "Col2Im" => signal::col2im(cx),
        "AffineGrid" => signal::affine_grid(cx),
        "RoiAlign" => signal::roi_align(cx),
        "DeformConv" => signal::deform_conv(cx),
        "Det" => Ok(Lowering::single(Op::Det, vec![Src::Input(0)])),
        "Einsum" => {
            cx.require_opset(12)?;
            let equation = cx
                .attr(cx.attrs.string("equation"))?
                .ok_or_else(|| cx.invalid("the equation attribute is required"))?;
            let inputs = (0..cx.num_inputs()).map(Src::Input).collect();
            Ok(Lowering::single(
                Op::Einsum(backplane_core::ops::EinsumDesc { equation }),
                inputs,
            ))
        }
        "NegativeLogLikelihoodLoss" => loss::nll_loss(cx),
        "RNN" | "GRU" | "LSTM" => recurrent::recurrent(cx),
        "SoftmaxCrossEntropyLoss" => loss::softmax_cross_entropy_loss(cx),
        "Upsample" => resize::upsample(cx),

        _ => Err(TxError::Unsupported(format!(
            "operator {op} is not supported"
        ))),
    }
}

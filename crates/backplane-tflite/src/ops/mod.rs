//! TFLite operators lowered onto the core's `Op`s, one family per file.
//!
//! Each lowering reads its operator's inputs through [`Cx`], which knows the forms of every
//! tensor (see [`crate::layout`]) and the quantization of TFLite's integer tensors. Quantized
//! arithmetic runs as TFLite's reference semantics describe it: the integer inputs are
//! dequantized (`DequantizeLinear`), the operator computes in f32, and the result is quantized
//! with the output tensor's scale and zero point (`QuantizeLinear`, which saturates). Weights
//! and biases are dequantized once, at import. Pure data movement (reshapes, slices, gathers)
//! moves the integers themselves.

mod arith;
mod conv;
mod qint;
mod shape;

use crate::error::TfliteError;
use crate::fbs::Table;
use crate::layout::Graph;
use crate::model::{Code, Model, OpDef, TensorDef};
use crate::schema::{activation, BUILTIN_NAMES};
use backplane_core::ops::{BinaryOp, MathOp, UnaryOp};
use backplane_core::{CoreError, DataType, Op, Quantization, Tensor, TensorId, TensorInfo};
use std::collections::HashMap;

/// Why one operator could not be lowered.
pub(crate) enum OpError {
    /// The operator (or this variant of it) is not supported: reported with the others.
    Unsupported(String),
    /// The model is broken: the import stops.
    Fatal(TfliteError),
}

impl From<TfliteError> for OpError {
    fn from(e: TfliteError) -> Self {
        OpError::Fatal(e)
    }
}

impl From<CoreError> for OpError {
    fn from(e: CoreError) -> Self {
        OpError::Fatal(TfliteError::Core(e))
    }
}

/// The result of a lowering step.
pub(crate) type Tx<T> = std::result::Result<T, OpError>;

/// Refuse with a reason.
pub(crate) fn unsupported<T>(reason: impl Into<String>) -> Tx<T> {
    Err(OpError::Unsupported(reason.into()))
}

/// Fail as an invalid model.
pub(crate) fn invalid<T>(reason: impl Into<String>) -> Tx<T> {
    Err(OpError::Fatal(TfliteError::Invalid(reason.into())))
}

/// What every lowering shares: the graph, the model and the operator.
pub(crate) struct Cx<'g, 'm, 'a> {
    pub g: &'g mut Graph,
    pub m: &'m Model<'a>,
    pub op: &'m OpDef<'a>,
    /// The layer-name prefix of this operator.
    pub name: String,
    /// Dequantized forms already made: (tensor, nchw) → f32 tensor.
    pub dq_cache: &'g mut HashMap<(usize, bool), TensorId>,
    /// The requantization rule of the model's quantized outputs.
    pub requant: backplane_core::quant::Requantization,
}

impl<'a> Cx<'_, '_, 'a> {
    /// The operator's options table, when it is of union type `ty`.
    pub fn options(&self, ty: u8) -> Option<Table<'a>> {
        match self.op.options {
            Some((k, t)) if k == ty => Some(t),
            _ => None,
        }
    }

    /// The TFLite tensor index of input `k` (required).
    pub fn input(&self, k: usize) -> Tx<usize> {
        match self.op.inputs.get(k) {
            Some(Some(t)) => Ok(*t),
            _ => invalid(format!("{}: input #{k} is missing", self.name)),
        }
    }

    /// The TFLite tensor index of optional input `k`.
    pub fn opt_input(&self, k: usize) -> Option<usize> {
        self.op.inputs.get(k).copied().flatten()
    }

    /// The TFLite tensor index of output `k`.
    pub fn output(&self, k: usize) -> Tx<usize> {
        match self.op.outputs.get(k) {
            Some(t) => Ok(*t),
            None => invalid(format!("{}: output #{k} is missing", self.name)),
        }
    }

    /// The definition of TFLite tensor `t`.
    pub fn tensor(&self, t: usize) -> Tx<&TensorDef<'a>> {
        match self.m.tensors.get(t) {
            Some(d) => Ok(d),
            None => invalid(format!("tensor index {t} out of range")),
        }
    }

    /// The core data type of tensor `t`, or a refusal naming TFLite's type.
    pub fn dtype(&self, t: usize) -> Tx<DataType> {
        let d = self.tensor(t)?;
        match d.dtype {
            Some(dt) => Ok(dt),
            None => unsupported(format!(
                "tensor '{}' has type {}, which backplane does not support",
                d.name, d.type_name
            )),
        }
    }

    /// A fresh layer name under this operator.
    pub fn fresh(&mut self, what: &str) -> String {
        let base = format!("{}/{what}", self.name);
        self.g.fresh(&base)
    }

    /// Tensor `t` placed in the graph (constants are added on first use), in the form it has.
    pub fn any(&mut self, t: usize) -> Tx<(TensorId, bool)> {
        self.place(t)?;
        Ok(self.g.any(t)?)
    }

    /// Tensor `t` in TFLite's layout.
    pub fn nhwc(&mut self, t: usize) -> Tx<TensorId> {
        self.place(t)?;
        Ok(self.g.nhwc(t)?)
    }

    /// Tensor `t` in the requested form.
    pub fn form(&mut self, t: usize, nchw: bool) -> Tx<TensorId> {
        self.place(t)?;
        Ok(self.g.form(t, nchw)?)
    }

    /// Whether tensor `t` is available channels-first without a new transpose.
    pub fn is_nchw(&self, t: usize) -> bool {
        self.g.is_nchw(t)
    }

    /// The TFLite shape of tensor `t`.
    pub fn shape(&self, t: usize) -> Tx<Vec<usize>> {
        Ok(self.tensor(t)?.shape.clone())
    }

    fn place(&mut self, t: usize) -> Tx<()> {
        if self.g.has(t) {
            return Ok(());
        }
        let value = self.constant(t)?;
        let name = self.tensor(t)?.name.clone();
        let name = self.g.fresh(&format!("const/{name}"));
        let id = self.g.net.add_constant(&name, value)?;
        self.g.set_nhwc(t, id);
        Ok(())
    }

    /// The value of constant tensor `t` (quantization parameters carried in its info).
    pub fn constant(&self, t: usize) -> Tx<Tensor> {
        let d = self.tensor(t)?;
        let Some(data) = d.data.as_deref() else {
            return invalid(format!("tensor '{}' is read before it is computed", d.name));
        };
        let dtype = self.dtype(t)?;
        let info = TensorInfo {
            dtype,
            shape: d.shape.clone().into(),
            quant: d.quant.clone(),
        };
        let want = info.num_bytes()?;
        if data.len() != want {
            return invalid(format!(
                "tensor '{}' {info} needs {want} bytes but its buffer holds {}",
                d.name,
                data.len()
            ));
        }
        Ok(Tensor::from_bytes(info, data)?)
    }

    /// The one operator reading the values of tensor `t`, when exactly one does (as one
    /// input) and `t` is not a model output: a lowering may then pick the form that reader
    /// wants. A SHAPE reads only the declared shape (see `shape::shape`), so it does not count.
    pub fn sole_reader(&self, t: usize) -> Option<&OpDef<'a>> {
        if self.m.outputs.contains(&t) {
            return None;
        }
        let mut readers = self.m.operators.iter().filter(|op| {
            !op.folded
                && code_name(&op.code) != "SHAPE"
                && op.inputs.iter().flatten().any(|&i| i == t)
        });
        let reader = readers.next()?;
        let reads = reader.inputs.iter().flatten().filter(|&&i| i == t).count();
        (readers.next().is_none() && reads == 1).then_some(reader)
    }

    /// Whether tensor `t` has constant data.
    pub fn is_constant(&self, t: usize) -> bool {
        self.m.tensors.get(t).is_some_and(|d| d.data.is_some())
    }

    /// Constant integer tensor `t` (int32 or int64) as i64 values.
    pub fn const_ints(&self, t: usize) -> Tx<Vec<i64>> {
        if !self.is_constant(t) {
            return unsupported(format!(
                "'{}' must be a constant (computed parameters are not supported)",
                self.tensor(t)?.name
            ));
        }
        let value = self.constant(t)?;
        match value.dtype() {
            DataType::I32 => Ok(value
                .as_slice::<i32>()?
                .iter()
                .map(|&v| i64::from(v))
                .collect()),
            DataType::I64 => Ok(value.as_slice::<i64>()?.to_vec()),
            other => invalid(format!(
                "'{}' is {other}, expected int32",
                self.tensor(t)?.name
            )),
        }
    }

    /// Whether tensor `t` holds quantized integers (TFLite int8/uint8/int16 with a scale).
    pub fn quantized(&self, t: usize) -> bool {
        self.m.tensors.get(t).is_some_and(|d| {
            matches!(d.dtype, Some(DataType::I8 | DataType::U8 | DataType::I16))
                && !matches!(d.quant, Quantization::None)
        })
    }

    /// The per-tensor scale and zero point of quantized tensor `t`.
    pub fn per_tensor(&self, t: usize) -> Tx<(f32, i32)> {
        let d = self.tensor(t)?;
        match &d.quant {
            Quantization::PerTensor { scale, zero_point } => Ok((*scale, *zero_point)),
            Quantization::PerAxis { .. } => unsupported(format!(
                "tensor '{}' is quantized per axis where TFLite uses one scale",
                d.name
            )),
            Quantization::None => invalid(format!("tensor '{}' has no quantization", d.name)),
        }
    }

    /// Tensor `t` as f32 in the requested form (`None`: the form it has). Quantized activations
    /// get a DequantizeLinear (made once per form); quantized constants are dequantized now.
    pub fn float(&mut self, t: usize, nchw: Option<bool>) -> Tx<(TensorId, bool)> {
        let (id, is_nchw) = match nchw {
            Some(n) => (self.form(t, n)?, n),
            None => self.any(t)?,
        };
        let dtype = self.dtype(t)?;
        if dtype == DataType::F32 {
            return Ok((id, is_nchw));
        }
        if !self.quantized(t) {
            if dtype == DataType::F16 && self.is_constant(t) {
                let value = self.constant(t)?;
                let f: Vec<f32> = value.to_f64_vec().iter().map(|&v| v as f32).collect();
                let mut out = Tensor::from_vec(value.shape().clone(), f)?;
                if is_nchw {
                    out = crate::layout::permute(&out, &crate::layout::TO_NCHW)?;
                }
                let c = self.g.constant(&format!("{}/f32", self.name), out)?;
                return Ok((c, is_nchw));
            }
            return unsupported(format!(
                "tensor '{}' is {dtype} without quantization where a real value is expected",
                self.tensor(t)?.name
            ));
        }
        if let Some(&done) = self.dq_cache.get(&(t, is_nchw)) {
            return Ok((done, is_nchw));
        }
        let (scale, zp) = self.per_tensor(t)?;
        let out = if self.is_constant(t) {
            let value = self.g.net.tensor(id).constant().cloned();
            let Some(value) = value else {
                return invalid("a constant lost its value");
            };
            let f: Vec<f32> = value
                .to_f64_vec()
                .iter()
                .map(|&q| (q as f32 - zp as f32) * scale)
                .collect();
            let out = Tensor::from_vec(value.shape().clone(), f)?;
            self.g
                .constant(&format!("{}/dequantized", self.name), out)?
        } else {
            let s = self.g.constant("scale", Tensor::scalar(scale))?;
            let z = self.g.constant("zero_point", zero_point(dtype, zp)?)?;
            let name = self.fresh("dequantize");
            self.g.layer(
                &name,
                Op::DequantizeLinear {
                    axis: 1,
                    to: DataType::F32,
                    block_size: 0,
                },
                &[id, s, z],
            )?
        };
        self.dq_cache.insert((t, is_nchw), out);
        Ok((out, is_nchw))
    }

    /// Place the f32 result `id` as output tensor `t` (quantizing it when `t` is quantized).
    pub fn emit(&mut self, t: usize, id: TensorId, nchw: bool) -> Tx<()> {
        let id = self.finish(t, id)?;
        let got = self.g.info(id).clone();
        let want = self.shape(t)?;
        let want_here = if nchw && want.len() == 4 {
            crate::layout::TO_NCHW.iter().map(|&a| want[a]).collect()
        } else {
            want.clone()
        };
        if got.shape.dims() != want_here.as_slice() {
            return invalid(format!(
                "{}: computes shape {:?} where the model declares '{}' as {want:?}",
                self.name,
                got.shape.dims(),
                self.tensor(t)?.name
            ));
        }
        self.g.set(t, id, nchw);
        Ok(())
    }

    /// Place `id`, the NCHW `[N, C, 1, 1]` result of an operator whose output tensor `t` is
    /// `[N, C]` (the same bytes), as `t` (quantized when `t` is): `t`'s own form is then a
    /// Reshape made only when an operator asks for it (see `Graph::set_expanded`).
    pub fn emit_expanded(&mut self, t: usize, id: TensorId) -> Tx<()> {
        let id = self.finish(t, id)?;
        let want = self.shape(t)?;
        let got = self.g.info(id).shape.dims().to_vec();
        if want.len() != 2 || got != [want[0], want[1], 1, 1] {
            return invalid(format!(
                "{}: computes shape {got:?} where the model declares '{}' as {want:?}",
                self.name,
                self.tensor(t)?.name
            ));
        }
        self.g.set_expanded(t, id, want);
        Ok(())
    }

    /// The f32 result `id` quantized as output tensor `t` is (when it is), checked to have
    /// `t`'s data type.
    fn finish(&mut self, t: usize, id: TensorId) -> Tx<TensorId> {
        let dtype = self.dtype(t)?;
        let id = if self.quantized(t) && self.g.info(id).dtype == DataType::F32 {
            let (scale, zp) = self.per_tensor(t)?;
            let s = self.g.constant("scale", Tensor::scalar(scale))?;
            let z = self.g.constant("zero_point", zero_point(dtype, zp)?)?;
            let name = self.fresh("quantize");
            self.g.layer(
                &name,
                Op::QuantizeLinear {
                    axis: 1,
                    to: dtype,
                    block_size: 0,
                    saturate: true,
                    requant: self.requant,
                },
                &[id, s, z],
            )?
        } else {
            id
        };
        let got = self.g.info(id).dtype;
        if got != dtype {
            return invalid(format!(
                "{}: computes {got} where the model declares '{}' as {dtype}",
                self.name,
                self.tensor(t)?.name
            ));
        }
        Ok(id)
    }

    /// Apply a fused activation to the f32 tensor `id`.
    pub fn activation(&mut self, id: TensorId, act: i8) -> Tx<TensorId> {
        let op = match act {
            activation::NONE => return Ok(id),
            activation::RELU => Op::Unary(UnaryOp::Relu),
            activation::RELU_N1_TO_1 => Op::Unary(UnaryOp::Clip {
                min: -1.0,
                max: 1.0,
            }),
            activation::RELU6 => Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
            activation::TANH => Op::Unary(UnaryOp::Tanh),
            other => return unsupported(format!("fused activation #{other} is not supported")),
        };
        let name = self.fresh(op.name());
        Ok(self.g.layer(&name, op, &[id])?)
    }
}

/// A scalar zero point of the given integer type.
pub(crate) fn zero_point(dtype: DataType, zp: i32) -> Tx<Tensor> {
    let bad = || {
        OpError::Fatal(TfliteError::Invalid(format!(
            "zero point {zp} does not fit {dtype}"
        )))
    };
    Ok(match dtype {
        DataType::I8 => Tensor::scalar(i8::try_from(zp).map_err(|_| bad())?),
        DataType::U8 => Tensor::scalar(u8::try_from(zp).map_err(|_| bad())?),
        DataType::I16 => Tensor::scalar(i16::try_from(zp).map_err(|_| bad())?),
        other => return unsupported(format!("quantized {other} tensors are not supported")),
    })
}

/// Lower one operator.
pub(crate) fn lower(cx: &mut Cx<'_, '_, '_>) -> Tx<()> {
    let code = match &cx.op.code {
        Code::Builtin(c) => *c,
        Code::Custom(name) if name == "Convolution2DTransposeBias" => {
            return conv::transpose_conv_bias(cx)
        }
        Code::Custom(name) => return unsupported(format!("custom operator '{name}'")),
    };
    let Some(name) = usize::try_from(code)
        .ok()
        .and_then(|c| BUILTIN_NAMES.get(c))
    else {
        return unsupported(format!(
            "builtin operator code {code} is newer than the schema"
        ));
    };
    match *name {
        "CONV_2D" => conv::conv_2d(cx),
        "DEPTHWISE_CONV_2D" => conv::depthwise_conv_2d(cx),
        "TRANSPOSE_CONV" => conv::transpose_conv(cx),
        "FULLY_CONNECTED" => conv::fully_connected(cx),
        "AVERAGE_POOL_2D" => conv::pool_2d(cx, false),
        "MAX_POOL_2D" => conv::pool_2d(cx, true),
        "RESIZE_BILINEAR" => conv::resize(cx, false),
        "RESIZE_NEAREST_NEIGHBOR" => conv::resize(cx, true),
        "BATCH_MATMUL" => conv::batch_matmul(cx),
        "ADD" => arith::binary(cx, BinaryOp::Add),
        "SUB" => arith::binary(cx, BinaryOp::Sub),
        "MUL" => arith::binary(cx, BinaryOp::Mul),
        "DIV" => arith::binary(cx, BinaryOp::Div),
        "MAXIMUM" => arith::binary(cx, BinaryOp::Max),
        "MINIMUM" => arith::binary(cx, BinaryOp::Min),
        "RELU" => arith::unary(cx, Op::Unary(UnaryOp::Relu)),
        "RELU6" => arith::unary(cx, Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })),
        "RELU_N1_TO_1" => arith::unary(
            cx,
            Op::Unary(UnaryOp::Clip {
                min: -1.0,
                max: 1.0,
            }),
        ),
        "LOGISTIC" => arith::unary(cx, Op::Unary(UnaryOp::Sigmoid)),
        "TANH" => arith::unary(cx, Op::Unary(UnaryOp::Tanh)),
        "HARD_SWISH" => {
            if qint::hard_swish(cx)? {
                Ok(())
            } else {
                arith::unary(cx, Op::Math(MathOp::HardSwish))
            }
        }
        "EXP" => arith::unary(cx, Op::Unary(UnaryOp::Exp)),
        "ABS" => arith::unary(cx, Op::Unary(UnaryOp::Abs)),
        "NEG" => arith::unary(cx, Op::Unary(UnaryOp::Neg)),
        "SQRT" => arith::unary(cx, Op::Unary(UnaryOp::Sqrt)),
        "LEAKY_RELU" => arith::leaky_relu(cx),
        "PRELU" => arith::prelu(cx),
        "QUANTIZE" => arith::quantize(cx),
        "DEQUANTIZE" => arith::dequantize(cx),
        "SOFTMAX" => arith::softmax(cx),
        "MEAN" => arith::mean(cx),
        "CONCATENATION" => shape::concatenation(cx),
        "PAD" | "PADV2" => shape::pad(cx),
        "RESHAPE" | "SQUEEZE" | "EXPAND_DIMS" => shape::reshape(cx),
        "TRANSPOSE" => shape::transpose(cx),
        "STRIDED_SLICE" => shape::strided_slice(cx),
        "GATHER" => shape::gather(cx),
        "SPLIT" => shape::split(cx, false),
        "SPLIT_V" => shape::split(cx, true),
        "PACK" => shape::pack(cx),
        "UNPACK" => shape::unpack(cx),
        "TILE" => shape::tile(cx),
        "SHAPE" => shape::shape(cx),
        "DEPTH_TO_SPACE" => shape::depth_to_space(cx),
        other => unsupported(format!("{other} is not supported")),
    }
}

/// The builtin operators [`lower`] knows (some variants of them may still be refused).
const LOWERED: &[&str] = &[
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "TRANSPOSE_CONV",
    "FULLY_CONNECTED",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR",
    "BATCH_MATMUL",
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "MAXIMUM",
    "MINIMUM",
    "RELU",
    "RELU6",
    "RELU_N1_TO_1",
    "LOGISTIC",
    "TANH",
    "HARD_SWISH",
    "EXP",
    "ABS",
    "NEG",
    "SQRT",
    "LEAKY_RELU",
    "PRELU",
    "QUANTIZE",
    "DEQUANTIZE",
    "SOFTMAX",
    "MEAN",
    "CONCATENATION",
    "PAD",
    "PADV2",
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "TRANSPOSE",
    "STRIDED_SLICE",
    "GATHER",
    "SPLIT",
    "SPLIT_V",
    "PACK",
    "UNPACK",
    "TILE",
    "SHAPE",
    "DEPTH_TO_SPACE",
];

/// The custom operators [`lower`] knows: mediapipe's transposed convolution with bias.
const CUSTOM_LOWERED: &[&str] = &["Convolution2DTransposeBias"];

/// Why an operator of this code cannot be lowered whatever its inputs, if so: used for the
/// operators after an unsupported one, so that the listing names every unsupported one.
pub(crate) fn code_refusal(code: &Code) -> Option<String> {
    match code {
        Code::Custom(name) if CUSTOM_LOWERED.contains(&name.as_str()) => None,
        Code::Custom(name) => Some(format!("custom operator '{name}'")),
        Code::Builtin(_) => {
            let name = code_name(code);
            (!LOWERED.contains(&name.as_str())).then(|| format!("{name} is not supported"))
        }
    }
}

/// TFLite's name of a builtin operator code, for messages.
pub(crate) fn code_name(code: &Code) -> String {
    match code {
        Code::Builtin(c) => usize::try_from(*c)
            .ok()
            .and_then(|i| BUILTIN_NAMES.get(i))
            .map_or_else(|| format!("builtin #{c}"), |n| n.to_string()),
        Code::Custom(n) => format!("CUSTOM '{n}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lowered_name_is_a_builtin_of_the_schema() {
        for name in LOWERED {
            assert!(BUILTIN_NAMES.contains(name), "{name}");
        }
        assert!(code_refusal(&Code::Builtin(3)).is_none()); // CONV_2D
        assert!(code_refusal(&Code::Builtin(16)).is_some()); // LSTM
        assert!(code_refusal(&Code::Builtin(100_000)).is_some());
    }
}

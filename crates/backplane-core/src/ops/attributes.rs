//! Ops as `(op type, attributes)`: the flat, language-neutral form an op takes when it crosses
//! a boundary that cannot carry Rust types (the C ABI of dynamic backends).
//!
//! Attribute names follow ONNX where ONNX has the attribute (`kernel_shape`, `strides`,
//! `auto_pad`, `transA`, `keepdims`, ...). Parameters that ONNX passes as inputs and the
//! importer resolves into the descriptor get plain names: Reshape's `shape`, Slice's
//! `starts`/`ends`/`axes`/`steps`, Split's `splits`, Clip's `min`/`max`, Pad's
//! `pads`/`mode`/`value`, Resize's `sizes`/`scales`. Cast's `to` is the ONNX data-type number.
//!
//! A [`CustomOp`] travels as op type `<domain>:<op_type>` (standard op types never contain a
//! colon) with its own attributes, plus its output descriptions under reserved names that
//! start with `__output` (see [`Op::to_attributes`]).
//!
//! [`Op::from_attributes`] is the exact inverse: every op round-trips.

use super::{
    ArgReduceDesc, AttrValue, AutoPad, BinaryExtOp, BinaryOp, ConvDesc, ConvTransposeDesc,
    CoordinateTransform, CustomOp, GemmDesc, MathOp, NearestMode, Op, PadDesc, PadMode, PoolDesc,
    PoolKind, ReduceDesc, ReduceKind, ResizeDesc, ResizeMode, ScatterReduction, SliceDesc,
    TopKDesc, UnaryOp, Window,
};
use crate::{CoreError, DataType, Quantization, Result, Shape, TensorInfo};

/// The ONNX `TensorProto.DataType` number of a data type (see [`DataType::onnx_code`]).
pub fn onnx_dtype_code(dtype: DataType) -> i64 {
    dtype.onnx_code()
}

/// The data type of an ONNX `TensorProto.DataType` number (see [`DataType::from_onnx_code`]).
pub fn dtype_from_onnx_code(code: i64) -> Option<DataType> {
    DataType::from_onnx_code(code)
}

const UNARY: [&str; 12] = [
    "Relu",
    "LeakyRelu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Gelu",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
];

const BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Pow,
    BinaryOp::Max,
    BinaryOp::Min,
];

const REDUCE: [ReduceKind; 10] = [
    ReduceKind::Mean,
    ReduceKind::Sum,
    ReduceKind::Max,
    ReduceKind::Min,
    ReduceKind::Prod,
    ReduceKind::L1,
    ReduceKind::L2,
    ReduceKind::LogSum,
    ReduceKind::LogSumExp,
    ReduceKind::SumSquare,
];

/// Builds an attribute list.
#[derive(Default)]
struct Attrs(Vec<(String, AttrValue)>);

impl Attrs {
    fn int(mut self, name: &str, v: i64) -> Self {
        self.0.push((name.to_string(), AttrValue::Int(v)));
        self
    }
    fn flag(self, name: &str, v: bool) -> Self {
        self.int(name, i64::from(v))
    }
    fn usize(self, name: &str, v: usize) -> Self {
        self.int(name, i64::try_from(v).unwrap_or(i64::MAX))
    }
    fn float(mut self, name: &str, v: f32) -> Self {
        self.0.push((name.to_string(), AttrValue::Float(v)));
        self
    }
    fn double(mut self, name: &str, v: f64) -> Self {
        self.0.push((name.to_string(), AttrValue::Double(v)));
        self
    }
    fn string(mut self, name: &str, v: &str) -> Self {
        self.0
            .push((name.to_string(), AttrValue::String(v.to_string())));
        self
    }
    fn ints(mut self, name: &str, v: &[i64]) -> Self {
        self.0.push((name.to_string(), AttrValue::Ints(v.to_vec())));
        self
    }
    fn usizes(self, name: &str, v: &[usize]) -> Self {
        let v: Vec<i64> = v
            .iter()
            .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
            .collect();
        self.ints(name, &v)
    }
    fn floats(mut self, name: &str, v: &[f32]) -> Self {
        self.0
            .push((name.to_string(), AttrValue::Floats(v.to_vec())));
        self
    }
    fn window(self, w: &Window) -> Self {
        self.usizes("kernel_shape", &w.kernel)
            .usizes("strides", &w.strides)
            .usizes("dilations", &w.dilations)
            .usizes("pads", &w.pads)
            .string("auto_pad", auto_pad_name(w.auto_pad))
    }
}

fn auto_pad_name(a: AutoPad) -> &'static str {
    match a {
        AutoPad::NotSet => "NOTSET",
        AutoPad::SameUpper => "SAME_UPPER",
        AutoPad::SameLower => "SAME_LOWER",
        AutoPad::Valid => "VALID",
    }
}

fn pad_mode_name(m: PadMode) -> &'static str {
    match m {
        PadMode::Constant => "constant",
        PadMode::Reflect => "reflect",
        PadMode::Edge => "edge",
        PadMode::Wrap => "wrap",
    }
}

fn resize_mode_name(m: ResizeMode) -> &'static str {
    match m {
        ResizeMode::Nearest => "nearest",
        ResizeMode::Linear => "linear",
        ResizeMode::Cubic => "cubic",
    }
}

fn transform_name(t: CoordinateTransform) -> &'static str {
    match t {
        CoordinateTransform::HalfPixel => "half_pixel",
        CoordinateTransform::PytorchHalfPixel => "pytorch_half_pixel",
        CoordinateTransform::AlignCorners => "align_corners",
        CoordinateTransform::Asymmetric => "asymmetric",
        CoordinateTransform::HalfPixelSymmetric => "half_pixel_symmetric",
        CoordinateTransform::TfCropAndResize => "tf_crop_and_resize",
    }
}

fn nearest_mode_name(m: NearestMode) -> &'static str {
    match m {
        NearestMode::RoundPreferFloor => "round_prefer_floor",
        NearestMode::RoundPreferCeil => "round_prefer_ceil",
        NearestMode::Floor => "floor",
        NearestMode::Ceil => "ceil",
    }
}

/// Reserved attribute-name prefix for a custom op's output descriptions.
const OUTPUT_PREFIX: &str = "__output";

fn custom_outputs(mut attrs: Attrs, outputs: &[TensorInfo]) -> Attrs {
    for (i, info) in outputs.iter().enumerate() {
        let p = format!("{OUTPUT_PREFIX}{i}_");
        attrs = attrs
            .int(&format!("{p}dtype"), onnx_dtype_code(info.dtype))
            .usizes(&format!("{p}shape"), info.shape.dims());
        match &info.quant {
            Quantization::None => {}
            Quantization::PerTensor { scale, zero_point } => {
                attrs = attrs
                    .floats(&format!("{p}scales"), &[*scale])
                    .ints(&format!("{p}zero_points"), &[i64::from(*zero_point)]);
            }
            Quantization::PerAxis {
                axis,
                scales,
                zero_points,
            } => {
                let zps: Vec<i64> = zero_points.iter().map(|&z| i64::from(z)).collect();
                attrs = attrs
                    .floats(&format!("{p}scales"), scales)
                    .ints(&format!("{p}zero_points"), &zps)
                    .usize(&format!("{p}axis"), *axis);
            }
        }
    }
    attrs
}

impl Op {
    /// This op as its type name and attributes (names as described in this module: ONNX names where ONNX has the attribute).
    pub fn to_attributes(&self) -> (String, Vec<(String, AttrValue)>) {
        if let Some(ext) = ext_to_attributes(self) {
            return ext;
        }
        if let Some(more) = super::flat::to_attributes(self) {
            return more;
        }
        if let Some(more) = super::image::to_attributes(self) {
            return more;
        }
        let a = Attrs::default();
        let attrs = match self {
            Op::Identity
            | Op::MemCopy
            | Op::MemImport
            | Op::Binary(_)
            | Op::MatMul
            | Op::GlobalPool(_) => a,
            Op::Unary(u) => match *u {
                UnaryOp::LeakyRelu { alpha } => a.float("alpha", alpha),
                UnaryOp::Clip { min, max } => a.float("min", min).float("max", max),
                UnaryOp::Gelu { tanh_approximation } => a.string(
                    "approximate",
                    if tanh_approximation { "tanh" } else { "none" },
                ),
                UnaryOp::Relu
                | UnaryOp::Sigmoid
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Sqrt
                | UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Neg
                | UnaryOp::Abs => a,
            },
            Op::Conv(c) => a.window(&c.window).usize("group", c.group),
            Op::ConvTranspose(c) => a
                .window(&c.window)
                .usize("group", c.group)
                .usizes("output_padding", &c.output_padding)
                .usizes("output_shape", &c.output_shape),
            Op::BatchNormalization { epsilon } => a.float("epsilon", *epsilon),
            Op::Gemm(g) => a
                .float("alpha", g.alpha)
                .float("beta", g.beta)
                .flag("transA", g.trans_a)
                .flag("transB", g.trans_b),
            Op::Pool(p) => a
                .window(&p.window)
                .flag("ceil_mode", p.ceil_mode)
                .flag("count_include_pad", p.count_include_pad),
            Op::Flatten { axis }
            | Op::Concat { axis }
            | Op::Gather { axis }
            | Op::Softmax { axis } => a.int("axis", *axis),
            Op::Reshape { shape } => a.usizes("shape", shape),
            Op::Transpose { perm } => a.usizes("perm", perm),
            Op::Squeeze { axes } | Op::Unsqueeze { axes } => a.ints("axes", axes),
            Op::Split { axis, splits } => a.int("axis", *axis).usizes("splits", splits),
            Op::Slice(s) => a
                .ints("starts", &s.starts)
                .ints("ends", &s.ends)
                .ints("axes", &s.axes)
                .ints("steps", &s.steps),
            Op::LayerNormalization { axis, epsilon } => {
                a.int("axis", *axis).float("epsilon", *epsilon)
            }
            Op::Reduce(r) => a
                .ints("axes", &r.axes)
                .flag("keepdims", r.keepdims)
                .flag("noop_with_empty_axes", r.noop_with_empty_axes),
            Op::Cast { to, saturate } => a
                .int("to", onnx_dtype_code(*to))
                .flag("saturate", *saturate),
            Op::Pad(p) => a
                .ints("pads", &p.pads)
                .string("mode", pad_mode_name(p.mode))
                .double("value", p.value),
            Op::Resize(r) => a
                .string("mode", resize_mode_name(r.mode))
                .string(
                    "coordinate_transformation_mode",
                    transform_name(r.coordinate_transform),
                )
                .string("nearest_mode", nearest_mode_name(r.nearest_mode))
                .float("cubic_coeff_a", r.cubic_coeff_a)
                .flag("exclude_outside", r.exclude_outside)
                .usizes("sizes", &r.output_shape)
                .floats("scales", &r.scales)
                .flag("antialias", r.antialias)
                .floats("roi", &r.roi)
                .float("extrapolation_value", r.extrapolation_value),
            Op::Math(_)
            | Op::BinaryExt(_)
            | Op::Where
            | Op::ArgReduce(_)
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::Trilu { .. }
            | Op::GatherElements { .. }
            | Op::GatherND { .. }
            | Op::ScatterND { .. }
            | Op::ScatterElements { .. }
            | Op::OneHot { .. }
            | Op::TopK(_)
            | Op::CumSum { .. }
            | Op::LogSoftmax { .. }
            | Op::Hardmax { .. }
            | Op::InstanceNormalization { .. }
            | Op::Lrn { .. }
            | Op::QuantizeLinear { .. }
            | Op::DequantizeLinear { .. }
            | Op::DynamicQuantizeLinear
            | Op::Permute { .. }
            | Op::If(_)
            | Op::Loop(_)
            | Op::Scan(_)
            | Op::NegativeLogLikelihoodLoss(_)
            | Op::GridSample(_)
            | Op::Einsum(_)
            | Op::Det
            | Op::Rnn(_) => a, // handled by ext_to_attributes
            Op::MaxPoolWithIndices(_)
            | Op::MaxUnpool(_)
            | Op::Optimizer(_)
            | Op::TfIdfVectorizer(_)
            | Op::TreeEnsemble(_) => a, // handled by flat::to_attributes
            Op::Dft(_)
            | Op::Stft(_)
            | Op::Col2Im(_)
            | Op::AffineGrid(_)
            | Op::RoiAlign(_)
            | Op::DeformConv(_) => a, // handled by image::to_attributes
            Op::Custom(c) => {
                let mut a = a;
                a.0.extend(c.attributes.iter().cloned());
                let a = custom_outputs(a, &c.outputs);
                return (format!("{}:{}", c.domain, c.op_type), a.0);
            }
        };
        (self.name().to_string(), attrs.0)
    }

    /// Rebuild an op from its type name and attributes, the inverse of
    /// [`Op::to_attributes`]. Unknown op types, missing or mistyped attributes and values out
    /// of range are errors naming the op and attribute.
    pub fn from_attributes(op_type: &str, attrs: &[(String, AttrValue)]) -> Result<Op> {
        if let Some((domain, name)) = op_type.split_once(':') {
            return custom_from_attributes(domain, name, attrs);
        }
        if let Some(op) = super::flat::from_attributes(op_type, attrs)? {
            return Ok(op);
        }
        if let Some(op) = super::image::from_attributes(op_type, attrs)? {
            return Ok(op);
        }
        let r = Reader { op_type, attrs };
        if let Some(op) = ext_from_attributes(op_type, &r)? {
            return Ok(op);
        }
        if let Some(&b) = BINARY.iter().find(|b| b.name() == op_type) {
            return Ok(Op::Binary(b));
        }
        if let Some(&k) = REDUCE.iter().find(|k| k.name() == op_type) {
            return Ok(Op::Reduce(ReduceDesc {
                kind: k,
                axes: r.ints("axes")?,
                keepdims: r.flag("keepdims")?,
                noop_with_empty_axes: r.flag("noop_with_empty_axes")?,
            }));
        }
        if UNARY.contains(&op_type) {
            return Ok(Op::Unary(match op_type {
                "LeakyRelu" => UnaryOp::LeakyRelu {
                    alpha: r.float("alpha")?,
                },
                "Clip" => UnaryOp::Clip {
                    min: r.float("min")?,
                    max: r.float("max")?,
                },
                "Gelu" => UnaryOp::Gelu {
                    tanh_approximation: match r.string("approximate")? {
                        "tanh" => true,
                        "none" => false,
                        other => return Err(r.bad("approximate", other)),
                    },
                },
                "Sigmoid" => UnaryOp::Sigmoid,
                "Tanh" => UnaryOp::Tanh,
                "Erf" => UnaryOp::Erf,
                "Sqrt" => UnaryOp::Sqrt,
                "Exp" => UnaryOp::Exp,
                "Log" => UnaryOp::Log,
                "Neg" => UnaryOp::Neg,
                "Abs" => UnaryOp::Abs,
                _ => UnaryOp::Relu,
            }));
        }
        Ok(match op_type {
            "Identity" => Op::Identity,
            "MemCopy" => Op::MemCopy,
            "MemImport" => Op::MemImport,
            "MatMul" => Op::MatMul,
            "GlobalMaxPool" => Op::GlobalPool(PoolKind::Max),
            "GlobalAveragePool" => Op::GlobalPool(PoolKind::Average),
            "Conv" => Op::Conv(ConvDesc {
                window: r.window()?,
                group: r.usize("group")?,
            }),
            "ConvTranspose" => Op::ConvTranspose(ConvTransposeDesc {
                window: r.window()?,
                group: r.usize("group")?,
                output_padding: r.usizes("output_padding")?,
                output_shape: r.usizes("output_shape")?,
            }),
            "BatchNormalization" => Op::BatchNormalization {
                epsilon: r.float("epsilon")?,
            },
            "Gemm" => Op::Gemm(GemmDesc {
                alpha: r.float("alpha")?,
                beta: r.float("beta")?,
                trans_a: r.flag("transA")?,
                trans_b: r.flag("transB")?,
            }),
            "MaxPool" | "AveragePool" => Op::Pool(PoolDesc {
                kind: if op_type == "MaxPool" {
                    PoolKind::Max
                } else {
                    PoolKind::Average
                },
                window: r.window()?,
                ceil_mode: r.flag("ceil_mode")?,
                count_include_pad: r.flag("count_include_pad")?,
            }),
            "Flatten" => Op::Flatten {
                axis: r.int("axis")?,
            },
            "Concat" => Op::Concat {
                axis: r.int("axis")?,
            },
            "Gather" => Op::Gather {
                axis: r.int("axis")?,
            },
            "Softmax" => Op::Softmax {
                axis: r.int("axis")?,
            },
            "Reshape" => Op::Reshape {
                shape: r.usizes("shape")?,
            },
            "Transpose" => Op::Transpose {
                perm: r.usizes("perm")?,
            },
            "Squeeze" => Op::Squeeze {
                axes: r.ints("axes")?,
            },
            "Unsqueeze" => Op::Unsqueeze {
                axes: r.ints("axes")?,
            },
            "Split" => Op::Split {
                axis: r.int("axis")?,
                splits: r.usizes("splits")?,
            },
            "Slice" => Op::Slice(SliceDesc {
                starts: r.ints("starts")?,
                ends: r.ints("ends")?,
                axes: r.ints("axes")?,
                steps: r.ints("steps")?,
            }),
            "LayerNormalization" => Op::LayerNormalization {
                axis: r.int("axis")?,
                epsilon: r.float("epsilon")?,
            },
            "Cast" => {
                let code = r.int("to")?;
                Op::Cast {
                    to: dtype_from_onnx_code(code).ok_or_else(|| r.bad("to", code))?,
                    // Absent in attributes written before it existed: ONNX's default.
                    saturate: r.get("saturate").is_none() || r.flag("saturate")?,
                }
            }
            "Pad" => Op::Pad(PadDesc {
                pads: r.ints("pads")?,
                mode: match r.string("mode")? {
                    "constant" => PadMode::Constant,
                    "reflect" => PadMode::Reflect,
                    "edge" => PadMode::Edge,
                    "wrap" => PadMode::Wrap,
                    other => return Err(r.bad("mode", other)),
                },
                value: r.double("value")?,
            }),
            "Resize" => Op::Resize(ResizeDesc {
                mode: match r.string("mode")? {
                    "nearest" => ResizeMode::Nearest,
                    "linear" => ResizeMode::Linear,
                    "cubic" => ResizeMode::Cubic,
                    other => return Err(r.bad("mode", other)),
                },
                coordinate_transform: match r.string("coordinate_transformation_mode")? {
                    "half_pixel" => CoordinateTransform::HalfPixel,
                    "pytorch_half_pixel" => CoordinateTransform::PytorchHalfPixel,
                    "align_corners" => CoordinateTransform::AlignCorners,
                    "asymmetric" => CoordinateTransform::Asymmetric,
                    "half_pixel_symmetric" => CoordinateTransform::HalfPixelSymmetric,
                    "tf_crop_and_resize" => CoordinateTransform::TfCropAndResize,
                    other => return Err(r.bad("coordinate_transformation_mode", other)),
                },
                nearest_mode: match r.string("nearest_mode")? {
                    "round_prefer_floor" => NearestMode::RoundPreferFloor,
                    "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                    "floor" => NearestMode::Floor,
                    "ceil" => NearestMode::Ceil,
                    other => return Err(r.bad("nearest_mode", other)),
                },
                cubic_coeff_a: r.float("cubic_coeff_a")?,
                exclude_outside: r.flag("exclude_outside")?,
                output_shape: r.usizes("sizes")?,
                scales: r.floats("scales")?,
                antialias: r.flag("antialias")?,
                roi: r.floats("roi")?,
                extrapolation_value: r.float("extrapolation_value")?,
            }),
            other => {
                return Err(CoreError::op(
                    "attributes",
                    format!("unknown op type '{other}'"),
                ))
            }
        })
    }
}

const MATH: [MathOp; 30] = [
    MathOp::Floor,
    MathOp::Ceil,
    MathOp::Round,
    MathOp::Sign,
    MathOp::Reciprocal,
    MathOp::Sin,
    MathOp::Cos,
    MathOp::Tan,
    MathOp::Asin,
    MathOp::Acos,
    MathOp::Atan,
    MathOp::Sinh,
    MathOp::Cosh,
    MathOp::Asinh,
    MathOp::Acosh,
    MathOp::Atanh,
    MathOp::Softplus,
    MathOp::Softsign,
    MathOp::Mish,
    MathOp::HardSigmoid {
        alpha: 0.0,
        beta: 0.0,
    },
    MathOp::HardSwish,
    MathOp::Selu {
        alpha: 0.0,
        gamma: 0.0,
    },
    MathOp::Elu { alpha: 0.0 },
    MathOp::Celu { alpha: 0.0 },
    MathOp::ThresholdedRelu { alpha: 0.0 },
    MathOp::Shrink {
        bias: 0.0,
        lambd: 0.0,
    },
    MathOp::IsNaN,
    MathOp::IsInf {
        detect_negative: true,
        detect_positive: true,
    },
    MathOp::Not,
    MathOp::BitwiseNot,
];

const BINARY_EXT: [BinaryExtOp; 16] = [
    BinaryExtOp::Equal,
    BinaryExtOp::Less,
    BinaryExtOp::LessOrEqual,
    BinaryExtOp::Greater,
    BinaryExtOp::GreaterOrEqual,
    BinaryExtOp::And,
    BinaryExtOp::Or,
    BinaryExtOp::Xor,
    BinaryExtOp::BitwiseAnd,
    BinaryExtOp::BitwiseOr,
    BinaryExtOp::BitwiseXor,
    BinaryExtOp::BitShiftLeft,
    BinaryExtOp::BitShiftRight,
    BinaryExtOp::Mod,
    BinaryExtOp::Fmod,
    BinaryExtOp::PRelu,
];

/// The attribute form of the ops added for ONNX conformance (math, comparison, indexing).
fn ext_to_attributes(op: &Op) -> Option<(String, Vec<(String, AttrValue)>)> {
    let a = Attrs::default();
    let attrs = match op {
        Op::Math(m) => match *m {
            MathOp::HardSigmoid { alpha, beta } => a.float("alpha", alpha).float("beta", beta),
            MathOp::Selu { alpha, gamma } => a.float("alpha", alpha).float("gamma", gamma),
            MathOp::Elu { alpha } | MathOp::Celu { alpha } | MathOp::ThresholdedRelu { alpha } => {
                a.float("alpha", alpha)
            }
            MathOp::Shrink { bias, lambd } => a.float("bias", bias).float("lambd", lambd),
            MathOp::IsInf {
                detect_negative,
                detect_positive,
            } => a
                .flag("detect_negative", detect_negative)
                .flag("detect_positive", detect_positive),
            _ => a,
        },
        Op::BinaryExt(b) => match b {
            BinaryExtOp::BitShiftLeft => a.string("direction", "LEFT"),
            BinaryExtOp::BitShiftRight => a.string("direction", "RIGHT"),
            BinaryExtOp::Mod => a.flag("fmod", false),
            BinaryExtOp::Fmod => a.flag("fmod", true),
            _ => a,
        },
        Op::Where => a,
        Op::ArgReduce(d) => a
            .int("axis", d.axis)
            .flag("keepdims", d.keepdims)
            .flag("select_last_index", d.select_last_index),
        Op::Expand { shape } => a.usizes("shape", shape),
        Op::Tile { repeats } => a.usizes("repeats", repeats),
        Op::Trilu { upper, k } => a.flag("upper", *upper).int("k", *k),
        Op::GatherElements { axis } | Op::LogSoftmax { axis } | Op::Hardmax { axis } => {
            a.int("axis", *axis)
        }
        Op::GatherND { batch_dims } => a.usize("batch_dims", *batch_dims),
        Op::ScatterND { reduction } => a.string("reduction", reduction.name()),
        Op::ScatterElements { axis, reduction } => {
            a.int("axis", *axis).string("reduction", reduction.name())
        }
        Op::OneHot { axis, depth } => a.int("axis", *axis).usize("depth", *depth),
        Op::TopK(t) => a
            .int("axis", t.axis)
            .usize("k", t.k)
            .flag("largest", t.largest)
            .flag("sorted", t.sorted),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => a
            .int("axis", *axis)
            .flag("exclusive", *exclusive)
            .flag("reverse", *reverse),
        Op::InstanceNormalization { epsilon } => a.float("epsilon", *epsilon),
        Op::QuantizeLinear {
            axis,
            to,
            block_size,
            saturate,
        } => a
            .int("axis", *axis)
            .int("to", onnx_dtype_code(*to))
            .usize("block_size", *block_size)
            .flag("saturate", *saturate),
        Op::DequantizeLinear {
            axis,
            to,
            block_size,
        } => a
            .int("axis", *axis)
            .int("to", onnx_dtype_code(*to))
            .usize("block_size", *block_size),
        Op::DynamicQuantizeLinear => a,
        Op::Lrn {
            alpha,
            beta,
            bias,
            size,
        } => a
            .float("alpha", *alpha)
            .float("beta", *beta)
            .float("bias", *bias)
            .usize("size", *size),
        Op::Permute { from, to } => a.usizes("from", from).usizes("to", to),
        // Nested networks have no attribute form: only the counts are described, and
        // `from_attributes` refuses these ops.
        Op::If(_) => a,
        Op::Loop(d) => a
            .usize("num_carried", d.num_carried)
            .usize("scan_length", d.scan_length),
        Op::Scan(d) => a
            .usize("num_state", d.num_state)
            .usize("num_scan_inputs", d.num_scan_inputs),
        Op::NegativeLogLikelihoodLoss(d) => {
            let a = a.string("reduction", d.reduction.name());
            match d.ignore_index {
                Some(i) => a.int("ignore_index", i),
                None => a,
            }
        }
        Op::GridSample(d) => a
            .string("mode", d.mode.name())
            .string("padding_mode", d.padding.name())
            .flag("align_corners", d.align_corners),
        Op::Einsum(d) => a.string("equation", &d.equation),
        Op::Det => a,
        Op::Rnn(d) => {
            let names: Vec<&str> = d.activations.iter().map(|f| f.kind.name()).collect();
            let alphas: Vec<f32> = d.activations.iter().map(|f| f.alpha).collect();
            let betas: Vec<f32> = d.activations.iter().map(|f| f.beta).collect();
            let a = a
                .string("direction", d.direction.name())
                .usize("hidden_size", d.hidden_size)
                .string("activations", &names.join(","))
                .floats("activation_alpha", &alphas)
                .floats("activation_beta", &betas)
                .flag("linear_before_reset", d.linear_before_reset)
                .flag("input_forget", d.input_forget)
                .int("layout", i64::from(d.batch_first))
                .ints("outputs", &d.outputs.map(i64::from));
            match d.clip {
                Some(c) => a.float("clip", c),
                None => a,
            }
        }
        _ => return None,
    };
    Some((op.name().to_string(), attrs.0))
}

fn reduction(r: &Reader<'_>) -> Result<ScatterReduction> {
    Ok(match r.string("reduction")? {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" => ScatterReduction::Max,
        "min" => ScatterReduction::Min,
        other => return Err(r.bad("reduction", other)),
    })
}

/// The inverse of [`ext_to_attributes`]; `None` for op types it does not know.
fn ext_from_attributes(op_type: &str, r: &Reader<'_>) -> Result<Option<Op>> {
    if let Some(m) = MATH.iter().find(|m| m.name() == op_type) {
        return Ok(Some(Op::Math(match m {
            MathOp::HardSigmoid { .. } => MathOp::HardSigmoid {
                alpha: r.float("alpha")?,
                beta: r.float("beta")?,
            },
            MathOp::Selu { .. } => MathOp::Selu {
                alpha: r.float("alpha")?,
                gamma: r.float("gamma")?,
            },
            MathOp::Elu { .. } => MathOp::Elu {
                alpha: r.float("alpha")?,
            },
            MathOp::Celu { .. } => MathOp::Celu {
                alpha: r.float("alpha")?,
            },
            MathOp::ThresholdedRelu { .. } => MathOp::ThresholdedRelu {
                alpha: r.float("alpha")?,
            },
            MathOp::Shrink { .. } => MathOp::Shrink {
                bias: r.float("bias")?,
                lambd: r.float("lambd")?,
            },
            MathOp::IsInf { .. } => MathOp::IsInf {
                detect_negative: r.flag("detect_negative")?,
                detect_positive: r.flag("detect_positive")?,
            },
            other => *other,
        })));
    }
    if let Some(b) = BINARY_EXT.iter().find(|b| b.name() == op_type) {
        return Ok(Some(Op::BinaryExt(match b {
            BinaryExtOp::BitShiftLeft | BinaryExtOp::BitShiftRight => {
                match r.string("direction")? {
                    "LEFT" => BinaryExtOp::BitShiftLeft,
                    "RIGHT" => BinaryExtOp::BitShiftRight,
                    other => return Err(r.bad("direction", other)),
                }
            }
            BinaryExtOp::Mod | BinaryExtOp::Fmod => {
                if r.flag("fmod")? {
                    BinaryExtOp::Fmod
                } else {
                    BinaryExtOp::Mod
                }
            }
            other => *other,
        })));
    }
    Ok(Some(match op_type {
        "Where" => Op::Where,
        "ArgMax" | "ArgMin" => Op::ArgReduce(ArgReduceDesc {
            max: op_type == "ArgMax",
            axis: r.int("axis")?,
            keepdims: r.flag("keepdims")?,
            select_last_index: r.flag("select_last_index")?,
        }),
        "Expand" => Op::Expand {
            shape: r.usizes("shape")?,
        },
        "Tile" => Op::Tile {
            repeats: r.usizes("repeats")?,
        },
        "Trilu" => Op::Trilu {
            upper: r.flag("upper")?,
            k: r.int("k")?,
        },
        "GatherElements" => Op::GatherElements {
            axis: r.int("axis")?,
        },
        "LogSoftmax" => Op::LogSoftmax {
            axis: r.int("axis")?,
        },
        "Hardmax" => Op::Hardmax {
            axis: r.int("axis")?,
        },
        "GatherND" => Op::GatherND {
            batch_dims: r.usize("batch_dims")?,
        },
        "ScatterND" => Op::ScatterND {
            reduction: reduction(r)?,
        },
        "ScatterElements" => Op::ScatterElements {
            axis: r.int("axis")?,
            reduction: reduction(r)?,
        },
        "OneHot" => Op::OneHot {
            axis: r.int("axis")?,
            depth: r.usize("depth")?,
        },
        "TopK" => Op::TopK(TopKDesc {
            axis: r.int("axis")?,
            k: r.usize("k")?,
            largest: r.flag("largest")?,
            sorted: r.flag("sorted")?,
        }),
        "CumSum" => Op::CumSum {
            axis: r.int("axis")?,
            exclusive: r.flag("exclusive")?,
            reverse: r.flag("reverse")?,
        },
        "QuantizeLinear" | "DequantizeLinear" => {
            let code = r.int("to")?;
            let to = dtype_from_onnx_code(code).ok_or_else(|| r.bad("to", code))?;
            let axis = r.int("axis")?;
            // Absent in attributes written before they existed: per-axis, saturating.
            let block_size = match r.get("block_size") {
                Some(_) => r.usize("block_size")?,
                None => 0,
            };
            if op_type == "QuantizeLinear" {
                let saturate = r.get("saturate").is_none() || r.flag("saturate")?;
                Op::QuantizeLinear {
                    axis,
                    to,
                    block_size,
                    saturate,
                }
            } else {
                Op::DequantizeLinear {
                    axis,
                    to,
                    block_size,
                }
            }
        }
        "DynamicQuantizeLinear" => Op::DynamicQuantizeLinear,
        "Permute" => Op::Permute {
            from: r.usizes("from")?,
            to: r.usizes("to")?,
        },
        "If" | "Loop" | "Scan" => {
            return Err(
                r.err("it runs nested networks, which cannot be described by attributes".into())
            )
        }
        "InstanceNormalization" => Op::InstanceNormalization {
            epsilon: r.float("epsilon")?,
        },
        "LRN" => Op::Lrn {
            alpha: r.float("alpha")?,
            beta: r.float("beta")?,
            bias: r.float("bias")?,
            size: r.usize("size")?,
        },
        "NegativeLogLikelihoodLoss" => {
            let name = r.string("reduction")?;
            Op::NegativeLogLikelihoodLoss(super::NllLossDesc {
                reduction: super::LossReduction::from_name(name)
                    .ok_or_else(|| r.bad("reduction", name))?,
                ignore_index: match r.get("ignore_index") {
                    Some(_) => Some(r.int("ignore_index")?),
                    None => None,
                },
            })
        }
        "GridSample" => {
            let mode = r.string("mode")?;
            let padding = r.string("padding_mode")?;
            Op::GridSample(super::GridSampleDesc {
                mode: super::GridSampleMode::from_name(mode).ok_or_else(|| r.bad("mode", mode))?,
                padding: super::GridSamplePadding::from_name(padding)
                    .ok_or_else(|| r.bad("padding_mode", padding))?,
                align_corners: r.flag("align_corners")?,
            })
        }
        "Det" => Op::Det,
        "RNN" | "GRU" | "LSTM" => Op::Rnn(rnn_from_attributes(op_type, r)?),
        "Einsum" => Op::Einsum(super::EinsumDesc {
            equation: r.string("equation")?.to_string(),
        }),
        _ => return Ok(None),
    }))
}

/// The inverse of the RNN/GRU/LSTM arm of [`ext_to_attributes`].
fn rnn_from_attributes(op_type: &str, r: &Reader<'_>) -> Result<super::RnnDesc> {
    use super::{RnnActivation, RnnActivationKind, RnnDirection, RnnKind};
    let kind = RnnKind::from_name(op_type).ok_or_else(|| r.err("not a recurrent op".into()))?;
    let direction = r.string("direction")?;
    let names = r.string("activations")?;
    let alphas = r.floats("activation_alpha")?;
    let betas = r.floats("activation_beta")?;
    let mut activations = Vec::new();
    if !names.is_empty() {
        for (i, name) in names.split(',').enumerate() {
            let kind =
                RnnActivationKind::from_name(name).ok_or_else(|| r.bad("activations", name))?;
            let (Some(&alpha), Some(&beta)) = (alphas.get(i), betas.get(i)) else {
                return Err(r.bad("activation_alpha", alphas.len()));
            };
            activations.push(RnnActivation { kind, alpha, beta });
        }
    }
    let outputs = r.ints("outputs")?;
    let outputs = match outputs.as_slice() {
        &[y, y_h, y_c] => [y != 0, y_h != 0, y_c != 0],
        _ => return Err(r.bad("outputs", format!("{outputs:?}"))),
    };
    Ok(super::RnnDesc {
        kind,
        direction: RnnDirection::from_name(direction)
            .ok_or_else(|| r.bad("direction", direction))?,
        hidden_size: r.usize("hidden_size")?,
        activations,
        clip: match r.get("clip") {
            Some(_) => Some(r.float("clip")?),
            None => None,
        },
        linear_before_reset: r.flag("linear_before_reset")?,
        input_forget: r.flag("input_forget")?,
        batch_first: r.flag("layout")?,
        outputs,
    })
}

fn custom_from_attributes(domain: &str, name: &str, attrs: &[(String, AttrValue)]) -> Result<Op> {
    let r = Reader {
        op_type: name,
        attrs,
    };
    let mut outputs = Vec::new();
    for i in 0.. {
        let p = format!("{OUTPUT_PREFIX}{i}_");
        let dtype_name = format!("{p}dtype");
        if r.get(&dtype_name).is_none() {
            break;
        }
        let code = r.int(&dtype_name)?;
        let dtype = dtype_from_onnx_code(code).ok_or_else(|| r.bad(&dtype_name, code))?;
        let shape = Shape::new(r.usizes(&format!("{p}shape"))?);
        let scales_name = format!("{p}scales");
        let axis_name = format!("{p}axis");
        let quant = if r.get(&scales_name).is_none() {
            Quantization::None
        } else {
            let scales = r.floats(&scales_name)?;
            let zps_name = format!("{p}zero_points");
            let zero_points = r
                .ints(&zps_name)?
                .into_iter()
                .map(|z| i32::try_from(z).map_err(|_| r.bad(&zps_name, z)))
                .collect::<Result<Vec<i32>>>()?;
            if r.get(&axis_name).is_some() {
                Quantization::PerAxis {
                    axis: r.usize(&axis_name)?,
                    scales,
                    zero_points,
                }
            } else {
                match (scales.as_slice(), zero_points.as_slice()) {
                    ([scale], [zero_point]) => Quantization::PerTensor {
                        scale: *scale,
                        zero_point: *zero_point,
                    },
                    _ => return Err(r.bad(&scales_name, "per-tensor values")),
                }
            }
        };
        outputs.push(TensorInfo {
            dtype,
            shape,
            quant,
        });
    }
    Ok(Op::Custom(CustomOp {
        domain: domain.to_string(),
        op_type: name.to_string(),
        attributes: attrs
            .iter()
            .filter(|(n, _)| !n.starts_with(OUTPUT_PREFIX))
            .cloned()
            .collect(),
        outputs,
    }))
}

/// Reads typed attributes of one op, with errors naming the op and attribute.
struct Reader<'a> {
    op_type: &'a str,
    attrs: &'a [(String, AttrValue)],
}

impl Reader<'_> {
    fn get(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn err(&self, message: String) -> CoreError {
        CoreError::op("attributes", format!("{}: {message}", self.op_type))
    }

    fn bad(&self, name: &str, value: impl std::fmt::Display) -> CoreError {
        self.err(format!("attribute '{name}' has an invalid value '{value}'"))
    }

    fn need(&self, name: &str) -> Result<&AttrValue> {
        self.get(name)
            .ok_or_else(|| self.err(format!("attribute '{name}' is missing")))
    }

    fn wrong(&self, name: &str, kind: &str, got: &AttrValue) -> CoreError {
        self.err(format!(
            "attribute '{name}' must be {kind}, got {}",
            kind_of(got)
        ))
    }

    fn int(&self, name: &str) -> Result<i64> {
        match self.need(name)? {
            AttrValue::Int(v) => Ok(*v),
            other => Err(self.wrong(name, "an integer", other)),
        }
    }

    fn flag(&self, name: &str) -> Result<bool> {
        match self.int(name)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(name, v)),
        }
    }

    fn usize(&self, name: &str) -> Result<usize> {
        let v = self.int(name)?;
        usize::try_from(v).map_err(|_| self.bad(name, v))
    }

    fn float(&self, name: &str) -> Result<f32> {
        match self.need(name)? {
            AttrValue::Float(v) => Ok(*v),
            other => Err(self.wrong(name, "a float", other)),
        }
    }

    fn double(&self, name: &str) -> Result<f64> {
        match self.need(name)? {
            AttrValue::Double(v) => Ok(*v),
            AttrValue::Float(v) => Ok(f64::from(*v)),
            other => Err(self.wrong(name, "a double", other)),
        }
    }

    fn string(&self, name: &str) -> Result<&str> {
        match self.need(name)? {
            AttrValue::String(v) => Ok(v),
            other => Err(self.wrong(name, "a string", other)),
        }
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>> {
        match self.need(name)? {
            AttrValue::Ints(v) => Ok(v.clone()),
            other => Err(self.wrong(name, "a list of integers", other)),
        }
    }

    fn usizes(&self, name: &str) -> Result<Vec<usize>> {
        self.ints(name)?
            .into_iter()
            .map(|v| usize::try_from(v).map_err(|_| self.bad(name, v)))
            .collect()
    }

    fn floats(&self, name: &str) -> Result<Vec<f32>> {
        match self.need(name)? {
            AttrValue::Floats(v) => Ok(v.clone()),
            other => Err(self.wrong(name, "a list of floats", other)),
        }
    }

    fn window(&self) -> Result<Window> {
        Ok(Window {
            kernel: self.usizes("kernel_shape")?,
            strides: self.usizes("strides")?,
            dilations: self.usizes("dilations")?,
            pads: self.usizes("pads")?,
            auto_pad: match self.string("auto_pad")? {
                "NOTSET" => AutoPad::NotSet,
                "SAME_UPPER" => AutoPad::SameUpper,
                "SAME_LOWER" => AutoPad::SameLower,
                "VALID" => AutoPad::Valid,
                other => return Err(self.bad("auto_pad", other)),
            },
        })
    }
}

fn kind_of(v: &AttrValue) -> &'static str {
    match v {
        AttrValue::Int(_) => "an integer",
        AttrValue::Float(_) => "a float",
        AttrValue::Double(_) => "a double",
        AttrValue::String(_) => "a string",
        AttrValue::Ints(_) => "a list of integers",
        AttrValue::Floats(_) => "a list of floats",
    }
}

#[cfg(test)]
mod tests;

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
//! start with `__output` (see [`Op::to_attributes`]). Its typed payload, if any, does not
//! cross: it belongs to the backend that made the layer, which never hands it to another.
//!
//! [`Op::from_attributes`] is the exact inverse: every op without a payload round-trips.
//!
//! Split by concern: [`codec`] builds and reads attribute lists, `ext` holds the ops added for
//! conformance (math, comparison, indexing, recurrent), `custom` the custom ops' form, and this
//! file the core ops.

mod codec;
mod custom;
mod ext;

use codec::{Attrs, Reader};
use custom::{custom_from_attributes, custom_outputs};
use ext::{ext_from_attributes, ext_to_attributes};
#[cfg(test)]
use ext::{BINARY_EXT, MATH};

use super::{
    AttrValue, AutoPad, BinaryOp, ConvDesc, ConvTransposeDesc, CoordinateTransform, GemmDesc,
    NearestMode, Op, PadDesc, PadMode, PoolDesc, PoolKind, ReduceDesc, ReduceKind, ResizeDesc,
    ResizeMode, SliceDesc, UnaryOp,
};
use crate::{CoreError, DataType, Result};

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
            Op::Pool(p) | Op::IntegerAveragePool(p) => a
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
            | Op::Lookup
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
            "IntegerAveragePool" => Op::IntegerAveragePool(PoolDesc {
                kind: PoolKind::Average,
                window: r.window()?,
                ceil_mode: r.flag("ceil_mode")?,
                count_include_pad: r.flag("count_include_pad")?,
            }),
            "Lookup" => Op::Lookup,
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

#[cfg(test)]
mod tests;

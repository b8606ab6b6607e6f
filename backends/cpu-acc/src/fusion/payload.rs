//! The typed payload of CpuAcc's fused layers and its encoding.
//!
//! A fused layer travels through the network as an `Op::Custom` (the core knows no CpuAcc
//! types), so its parameters are written as attributes. This module is the only place that
//! knows those attribute names: the patterns build a [`Fused`] and [`Fused::encode`] it, and
//! the checks and the planner [`Fused::decode`] it once and work on the typed value.

use crate::act::Activation;
use crate::matmul::{MatMulViews, StridedView};
use crate::CPU_ACC_ID;
use backplane_core::ops::{AttrValue, AutoPad, ConvDesc, CustomOp, GemmDesc, Window};
use backplane_core::{DataType, Op, TensorInfo};

/// Custom op: convolution with folded batch norm, bias and activation. Inputs X, W, B?, or
/// X, W, B, R with attribute `residual` = 1: `act(conv(X) + B + R)`. Attribute `layout`
/// (see [`ConvLayout`]): absent for NCHW tensors, `nhwc` or `nchw_to_nhwc` in a
/// channels-last region (`crate::layout`).
pub const FUSED_CONV: &str = "FusedConv";
/// Custom op: two channels-last `FusedConv`s, a pointwise and a depthwise one, the second
/// alone reading the first's output (a MobileNet block's expansion and its depthwise
/// convolution, or the depthwise convolution and its projection), run a band of rows at a
/// time so that the tensor between them never leaves the cache (see
/// `crate::conv::nhwc::NhwcPairWorkload`). Inputs X, W1, B1, W2, B2, and R when the second (only a
/// projection) has a residual; the first convolution's attributes as `FusedConv`'s, the
/// second's prefixed with `then_`, and `mid_dims`, the `[N, H, W, C]` dims of the tensor
/// between them. Formed by `crate::layout`.
pub const FUSED_CONV_PAIR: &str = "FusedConvPair";
/// Custom op: `act(alpha·A·B + bias)`. Inputs A, B, bias?; attributes `alpha` and, for
/// operands read or a result written through a `matmul::StridedView`, `a_dims`/`a_strides`,
/// `b_dims`/`b_strides`, `y_dims`/`y_strides`.
pub const FUSED_MATMUL: &str = "FusedMatMul";
/// Custom op: Gemm + activation. Inputs A, B, C?.
pub const FUSED_GEMM: &str = "FusedGemm";
/// Custom op: `LayerNormalization(A + B)`, A and B of one shape. Inputs A, B, scale, bias?;
/// attributes `axis` and `epsilon` (LayerNormalization's).
pub const FUSED_ADD_LAYER_NORM: &str = "FusedAddLayerNorm";

/// Prefix of the second convolution's attributes in a `FusedConvPair`.
const THEN: &str = "then_";

/// The tensor layouts of a `FusedConv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvLayout {
    /// X and Y are `[N, C, H, W]`.
    Nchw,
    /// X and Y (and the residual) are `[N, H, W, C]` (see `crate::conv::nhwc`).
    Nhwc,
    /// X is `[N, C, H, W]`, Y is `[N, H, W, C]`: a channels-last region's first layer.
    NchwToNhwc,
}

impl ConvLayout {
    fn name(self) -> &'static str {
        match self {
            ConvLayout::Nchw => "nchw",
            ConvLayout::Nhwc => "nhwc",
            ConvLayout::NchwToNhwc => "nchw_to_nhwc",
        }
    }
}

/// One fused convolution: `act(conv(X) + B [+ R])` in some layout.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvSpec {
    /// The convolution.
    pub desc: ConvDesc,
    /// The activation applied to its output.
    pub act: Activation,
    /// Whether it takes a residual (input 3) added before the activation.
    pub residual: bool,
    /// The layouts of its tensors.
    pub layout: ConvLayout,
}

/// A CpuAcc fused layer, decoded: what its custom op means.
#[derive(Debug, Clone, PartialEq)]
pub enum Fused {
    /// A `FusedConv`.
    Conv(ConvSpec),
    /// A `FusedConvPair`: two channels-last convolutions, the second reading the first's
    /// output, described by `mid` (`[N, H, W, C]`).
    ConvPair {
        /// The convolution reading X.
        first: ConvSpec,
        /// The convolution reading the first's output.
        second: ConvSpec,
        /// The tensor between them.
        mid: TensorInfo,
    },
    /// A `FusedMatMul`: `act(alpha·A·B + bias)` through the views.
    MatMul {
        /// How the operands are read, the result written, and the scale.
        views: MatMulViews,
        /// The activation.
        act: Activation,
    },
    /// A `FusedGemm`: Gemm + activation.
    Gemm {
        /// The Gemm.
        desc: GemmDesc,
        /// The activation.
        act: Activation,
    },
    /// A `FusedAddLayerNorm`: `LayerNormalization(A + B)`.
    AddLayerNorm {
        /// LayerNormalization's axis.
        axis: i64,
        /// LayerNormalization's epsilon.
        epsilon: f32,
    },
}

impl Fused {
    /// The custom op type naming this kind of fused layer.
    pub fn op_type(&self) -> &'static str {
        match self {
            Fused::Conv(_) => FUSED_CONV,
            Fused::ConvPair { .. } => FUSED_CONV_PAIR,
            Fused::MatMul { .. } => FUSED_MATMUL,
            Fused::Gemm { .. } => FUSED_GEMM,
            Fused::AddLayerNorm { .. } => FUSED_ADD_LAYER_NORM,
        }
    }

    /// The custom op carrying this payload, with output description `y`.
    pub fn encode(&self, y: TensorInfo) -> Op {
        let mut attributes = Vec::new();
        match self {
            Fused::Conv(spec) => conv_attrs(spec, "", true, &mut attributes),
            Fused::ConvPair { first, second, mid } => {
                conv_attrs(first, "", false, &mut attributes);
                conv_attrs(second, THEN, false, &mut attributes);
                attributes.push(("mid_dims".into(), ints(mid.shape.dims())));
            }
            Fused::MatMul { views, act } => {
                act_attrs(*act, "", &mut attributes);
                if views.alpha != 1.0 {
                    attributes.push(("alpha".into(), AttrValue::Float(views.alpha)));
                }
                for (name, view) in [("a", &views.a), ("b", &views.b), ("y", &views.y)] {
                    if let Some(view) = view {
                        attributes.push((format!("{name}_dims"), ints(&view.dims)));
                        attributes.push((format!("{name}_strides"), ints(&view.strides)));
                    }
                }
            }
            Fused::Gemm { desc, act } => {
                attributes.push(("alpha".into(), AttrValue::Float(desc.alpha)));
                attributes.push(("beta".into(), AttrValue::Float(desc.beta)));
                let flag = |b: bool| AttrValue::Int(i64::from(b));
                attributes.push(("trans_a".into(), flag(desc.trans_a)));
                attributes.push(("trans_b".into(), flag(desc.trans_b)));
                act_attrs(*act, "", &mut attributes);
            }
            Fused::AddLayerNorm { axis, epsilon } => {
                attributes.push(("axis".into(), AttrValue::Int(*axis)));
                attributes.push(("epsilon".into(), AttrValue::Float(*epsilon)));
            }
        }
        Op::Custom(CustomOp {
            domain: CPU_ACC_ID.into(),
            op_type: self.op_type().into(),
            attributes,
            outputs: vec![y],
        })
    }

    /// The payload of a CpuAcc custom op (its domain checked by the caller).
    pub fn decode(c: &CustomOp) -> Result<Fused, String> {
        let attrs = Attrs { c, prefix: "" };
        Ok(match c.op_type.as_str() {
            FUSED_CONV => Fused::Conv(attrs.conv(attrs.layout()?)?),
            FUSED_CONV_PAIR => Fused::ConvPair {
                first: attrs.conv(ConvLayout::Nhwc)?,
                second: Attrs { c, prefix: THEN }.conv(ConvLayout::Nhwc)?,
                mid: TensorInfo::new(DataType::F32, attrs.ints("mid_dims")?),
            },
            FUSED_MATMUL => Fused::MatMul {
                views: attrs.matmul_views()?,
                act: attrs.act()?,
            },
            FUSED_GEMM => Fused::Gemm {
                desc: GemmDesc {
                    alpha: attrs.float("alpha")?,
                    beta: attrs.float("beta")?,
                    trans_a: attrs.int("trans_a")? != 0,
                    trans_b: attrs.int("trans_b")? != 0,
                },
                act: attrs.act()?,
            },
            FUSED_ADD_LAYER_NORM => Fused::AddLayerNorm {
                axis: attrs.int("axis")?,
                epsilon: attrs.float("epsilon")?,
            },
            other => return Err(format!("CpuAcc has no custom operator '{other}'")),
        })
    }
}

fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

fn act_attrs(act: Activation, prefix: &str, out: &mut Vec<(String, AttrValue)>) {
    out.push((
        format!("{prefix}activation"),
        AttrValue::String(act.name().into()),
    ));
    out.push((
        format!("{prefix}act_params"),
        AttrValue::Floats(act.params()),
    ));
}

fn auto_pad_code(a: AutoPad) -> i64 {
    match a {
        AutoPad::NotSet => 0,
        AutoPad::SameUpper => 1,
        AutoPad::SameLower => 2,
        AutoPad::Valid => 3,
    }
}

/// The attributes of one fused convolution, names prefixed with `prefix`; its layout only
/// when `with_layout` (a pair's halves are channels-last by definition).
fn conv_attrs(
    spec: &ConvSpec,
    prefix: &str,
    with_layout: bool,
    out: &mut Vec<(String, AttrValue)>,
) {
    let w = &spec.desc.window;
    let mut push = |name: &str, v: AttrValue| out.push((format!("{prefix}{name}"), v));
    push("kernel_shape", ints(&w.kernel));
    push("strides", ints(&w.strides));
    push("dilations", ints(&w.dilations));
    push("pads", ints(&w.pads));
    push("auto_pad", AttrValue::Int(auto_pad_code(w.auto_pad)));
    push("group", AttrValue::Int(spec.desc.group as i64));
    act_attrs(spec.act, prefix, out);
    if spec.residual {
        out.push((format!("{prefix}residual"), AttrValue::Int(1)));
    }
    if with_layout && spec.layout != ConvLayout::Nchw {
        out.push((
            format!("{prefix}layout"),
            AttrValue::String(spec.layout.name().into()),
        ));
    }
}

/// The attributes of a custom op whose names start with `prefix`.
struct Attrs<'a> {
    c: &'a CustomOp,
    prefix: &'static str,
}

impl Attrs<'_> {
    fn get(&self, name: &str) -> Option<&AttrValue> {
        let full = format!("{}{name}", self.prefix);
        self.c
            .attributes
            .iter()
            .find(|(n, _)| *n == full)
            .map(|(_, v)| v)
    }

    fn missing(&self, name: &str) -> String {
        format!("{} lacks attribute {}{name}", self.c.op_type, self.prefix)
    }

    fn ints(&self, name: &str) -> Result<Vec<usize>, String> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => v
                .iter()
                .map(|&x| usize::try_from(x).map_err(|_| format!("{name}: negative value")))
                .collect(),
            _ => Err(self.missing(name)),
        }
    }

    fn int(&self, name: &str) -> Result<i64, String> {
        match self.get(name) {
            Some(AttrValue::Int(v)) => Ok(*v),
            _ => Err(self.missing(name)),
        }
    }

    fn float(&self, name: &str) -> Result<f32, String> {
        match self.get(name) {
            Some(AttrValue::Float(v)) => Ok(*v),
            _ => Err(self.missing(name)),
        }
    }

    /// The activation (none when absent).
    fn act(&self) -> Result<Activation, String> {
        let name = match self.get("activation") {
            Some(AttrValue::String(s)) => s.as_str(),
            _ => "none",
        };
        let params = match self.get("act_params") {
            Some(AttrValue::Floats(f)) => f.as_slice(),
            _ => &[],
        };
        Activation::from_name(name, params).ok_or_else(|| format!("unknown activation '{name}'"))
    }

    /// The layouts of a `FusedConv` (NCHW when absent).
    fn layout(&self) -> Result<ConvLayout, String> {
        match self.get("layout") {
            None => Ok(ConvLayout::Nchw),
            Some(AttrValue::String(s)) => {
                [ConvLayout::Nchw, ConvLayout::Nhwc, ConvLayout::NchwToNhwc]
                    .into_iter()
                    .find(|l| l.name() == s)
                    .ok_or_else(|| format!("FusedConv: unknown layout '{s}'"))
            }
            Some(_) => Err("FusedConv: layout is a string".into()),
        }
    }

    fn conv(&self, layout: ConvLayout) -> Result<ConvSpec, String> {
        let desc = ConvDesc {
            window: Window {
                kernel: self.ints("kernel_shape")?,
                strides: self.ints("strides")?,
                dilations: self.ints("dilations")?,
                pads: self.ints("pads")?,
                auto_pad: match self.int("auto_pad")? {
                    1 => AutoPad::SameUpper,
                    2 => AutoPad::SameLower,
                    3 => AutoPad::Valid,
                    _ => AutoPad::NotSet,
                },
            },
            group: usize::try_from(self.int("group")?).map_err(|_| "negative group")?,
        };
        Ok(ConvSpec {
            desc,
            act: self.act()?,
            residual: matches!(self.get("residual"), Some(AttrValue::Int(1))),
            layout,
        })
    }

    fn matmul_views(&self) -> Result<MatMulViews, String> {
        let view = |name: &str| -> Result<Option<StridedView>, String> {
            let (dims, strides) = (format!("{name}_dims"), format!("{name}_strides"));
            if self.get(&dims).is_none() && self.get(&strides).is_none() {
                return Ok(None);
            }
            let v = StridedView {
                dims: self.ints(&dims)?,
                strides: self.ints(&strides)?,
            };
            if v.dims.len() != v.strides.len() {
                return Err(format!("{dims} and {strides} differ in length"));
            }
            Ok(Some(v))
        };
        Ok(MatMulViews {
            a: view("a")?,
            b: view("b")?,
            y: view("y")?,
            alpha: match self.get("alpha") {
                None => 1.0,
                Some(_) => self.float("alpha")?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(layout: ConvLayout, residual: bool, group: usize) -> ConvSpec {
        ConvSpec {
            desc: ConvDesc {
                window: Window {
                    kernel: vec![3, 5],
                    strides: vec![2, 1],
                    dilations: vec![1, 3],
                    pads: vec![1, 2, 1, 2],
                    auto_pad: AutoPad::SameLower,
                },
                group,
            },
            act: Activation::Clip { min: 0.0, max: 6.0 },
            residual,
            layout,
        }
    }

    /// Every payload survives its encoding, and the encoding names the op type.
    #[test]
    fn payloads_round_trip_through_their_custom_op() {
        let y = TensorInfo::new(DataType::F32, vec![1, 7, 7, 8]);
        let view = StridedView {
            dims: vec![2, 3],
            strides: vec![1, 2],
        };
        let cases = [
            Fused::Conv(conv(ConvLayout::Nchw, false, 1)),
            Fused::Conv(conv(ConvLayout::NchwToNhwc, true, 8)),
            Fused::ConvPair {
                first: conv(ConvLayout::Nhwc, false, 1),
                second: conv(ConvLayout::Nhwc, true, 8),
                mid: TensorInfo::new(DataType::F32, vec![1, 14, 14, 8]),
            },
            Fused::MatMul {
                views: MatMulViews {
                    a: None,
                    b: Some(view.clone()),
                    y: Some(view),
                    alpha: 0.125,
                },
                act: Activation::Gelu {
                    tanh_approximation: false,
                },
            },
            Fused::Gemm {
                desc: GemmDesc {
                    alpha: 2.0,
                    beta: 0.5,
                    trans_a: false,
                    trans_b: true,
                },
                act: Activation::LeakyRelu { alpha: 0.1 },
            },
            Fused::AddLayerNorm {
                axis: -1,
                epsilon: 1e-5,
            },
        ];
        for fused in cases {
            let Op::Custom(c) = fused.encode(y.clone()) else {
                panic!("a fused layer encodes as a custom op");
            };
            assert_eq!(c.op_type, fused.op_type());
            assert_eq!(c.outputs, vec![y.clone()]);
            assert_eq!(Fused::decode(&c), Ok(fused));
        }
    }

    /// A malformed encoding is an error naming what is wrong, not a default.
    #[test]
    fn malformed_attributes_are_errors() {
        let Op::Custom(mut c) = Fused::AddLayerNorm {
            axis: 1,
            epsilon: 1e-5,
        }
        .encode(TensorInfo::new(DataType::F32, vec![2])) else {
            panic!("a fused layer encodes as a custom op");
        };
        c.attributes.retain(|(n, _)| n != "epsilon");
        let err = Fused::decode(&c).err().unwrap_or_default();
        assert!(err.contains("epsilon"), "{err}");
        c.op_type = "FusedNothing".into();
        assert!(Fused::decode(&c).is_err());
    }
}

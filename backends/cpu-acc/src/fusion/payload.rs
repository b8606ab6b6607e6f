//! The typed payload of CpuAcc's fused layers.
//!
//! A fused layer travels through the network as an `Op::Custom` whose `payload` carries a
//! [`Fused`] value as it is (core's `CustomPayload`): the patterns build a `Fused` and
//! [`Fused::encode`] it, and the checks and the planner take it back with [`Fused::decode`].
//! Nothing is written out as attributes and parsed again.

use crate::act::Activation;
use crate::matmul::MatMulViews;
use crate::CPU_ACC_ID;
use backplane_core::ops::{ConvDesc, CustomOp, CustomPayload, GemmDesc, PoolDesc};
use backplane_core::{Op, TensorInfo};

/// Custom op: convolution with folded batch norm, bias and activation. Inputs X, W, B?, or
/// X, W, B, R with a residual: `act(conv(X) + B + R)`, in the layouts of its [`ConvLayout`]
/// (channels-last ones in a region made by `crate::layout`).
pub const FUSED_CONV: &str = "FusedConv";
/// Custom op: two channels-last `FusedConv`s, a pointwise and a depthwise one, the second
/// alone reading the first's output (a MobileNet block's expansion and its depthwise
/// convolution, or the depthwise convolution and its projection), run a band of rows at a
/// time so that the tensor between them never leaves the cache (see
/// `crate::conv::nhwc::NhwcPairWorkload`). Inputs X, W1, B1, W2, B2, and R when the second (only a
/// projection) has a residual. Formed by `crate::layout`.
pub const FUSED_CONV_PAIR: &str = "FusedConvPair";
/// Custom op: `act(alpha·A·B + bias)`, operands read and the result written through
/// `matmul::StridedView`s where attention's head reshapes folded in. Inputs A, B, bias?.
pub const FUSED_MATMUL: &str = "FusedMatMul";
/// Custom op: Gemm + activation. Inputs A, B, C?.
pub const FUSED_GEMM: &str = "FusedGemm";
/// Custom op: `LayerNormalization(A + B)`, A and B of one shape. Inputs A, B, scale, bias?.
pub const FUSED_ADD_LAYER_NORM: &str = "FusedAddLayerNorm";
/// Custom op: `MaxPool(act(conv(X) + B))`, a network's first convolution and the max pooling
/// after it, NCHW in and out (see `crate::conv::stem_pool`). Inputs X, W, B?.
pub const FUSED_CONV_MAX_POOL: &str = "FusedConvMaxPool";
/// Custom op: `act(BatchNormalization(X))` in one pass (DenseNet's pre-activation before each
/// convolution). Inputs X, scale, bias, mean, variance.
pub const FUSED_BATCH_NORM: &str = "FusedBatchNorm";

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

/// A per-input-channel affine map and activation applied to a convolution's input before it
/// is convolved: `act(X[c] · scale[c] + shift[c])`, an inference BatchNormalization (folded
/// to its affine map) and the activation after it, whose sole reader was the convolution
/// (DenseNet's pre-activation before each 1×1 convolution). The NCHW pointwise GEMM applies
/// it while packing its B operand, so the normalized tensor is never stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PreNorm {
    /// Multiplier per input channel.
    pub scale: Vec<f32>,
    /// Addend per input channel.
    pub shift: Vec<f32>,
    /// Applied after the affine map.
    pub act: Activation,
}

/// One fused convolution: `act(conv(pre(X)) + B [+ R])` in some layout.
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
    /// A normalization of X before the convolution (NCHW layers only).
    pub pre: Option<PreNorm>,
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
    /// A `FusedConvMaxPool`: an NCHW convolution (no residual) and the max pooling of its
    /// output.
    ConvMaxPool {
        /// The convolution (layout NCHW).
        conv: ConvSpec,
        /// The pooling (a max pooling).
        pool: PoolDesc,
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
    /// A `FusedBatchNorm`: BatchNormalization + activation.
    BatchNorm {
        /// BatchNormalization's epsilon.
        epsilon: f32,
        /// The activation.
        act: Activation,
    },
}

impl Fused {
    /// The custom op type naming this kind of fused layer.
    pub fn op_type(&self) -> &'static str {
        match self {
            Fused::Conv(_) => FUSED_CONV,
            Fused::ConvPair { .. } => FUSED_CONV_PAIR,
            Fused::ConvMaxPool { .. } => FUSED_CONV_MAX_POOL,
            Fused::MatMul { .. } => FUSED_MATMUL,
            Fused::Gemm { .. } => FUSED_GEMM,
            Fused::AddLayerNorm { .. } => FUSED_ADD_LAYER_NORM,
            Fused::BatchNorm { .. } => FUSED_BATCH_NORM,
        }
    }

    /// The custom op carrying this payload, with output description `y`.
    pub fn encode(&self, y: TensorInfo) -> Op {
        Op::Custom(CustomOp {
            domain: CPU_ACC_ID.into(),
            op_type: self.op_type().into(),
            attributes: Vec::new(),
            outputs: vec![y],
            payload: Some(CustomPayload::new(self.clone())),
        })
    }

    /// The payload of a CpuAcc custom op (its domain checked by the caller).
    pub fn decode(c: &CustomOp) -> Result<Fused, String> {
        let fused = c
            .payload
            .as_ref()
            .and_then(|p| p.get::<Fused>())
            .ok_or_else(|| format!("CpuAcc has no custom operator '{}'", c.op_type))?;
        if fused.op_type() != c.op_type {
            return Err(format!(
                "custom operator '{}' carries a {} payload",
                c.op_type,
                fused.op_type()
            ));
        }
        Ok(fused.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::StridedView;
    use backplane_core::ops::{AutoPad, Window};
    use backplane_core::DataType;

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
            pre: None,
        }
    }

    /// Every payload comes back from its custom op as it went in, under its op type.
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
            Fused::Conv(ConvSpec {
                pre: Some(PreNorm {
                    scale: vec![0.5, -1.0],
                    shift: vec![0.0, 2.0],
                    act: Activation::Relu,
                }),
                ..conv(ConvLayout::Nchw, false, 1)
            }),
            Fused::ConvMaxPool {
                conv: conv(ConvLayout::Nchw, false, 1),
                pool: PoolDesc {
                    kind: backplane_core::ops::PoolKind::Max,
                    window: Window {
                        kernel: vec![3, 3],
                        strides: vec![2, 2],
                        dilations: vec![1, 1],
                        pads: vec![0, 0, 0, 0],
                        auto_pad: AutoPad::NotSet,
                    },
                    ceil_mode: true,
                    count_include_pad: false,
                },
            },
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
            assert!(c.attributes.is_empty());
            assert_eq!(Fused::decode(&c), Ok(fused));
        }
    }

    /// A custom op without a CpuAcc payload, or whose op type disagrees with it, is an error
    /// naming the op, not a default.
    #[test]
    fn foreign_or_mismatched_custom_ops_are_errors() {
        let Op::Custom(mut c) = Fused::AddLayerNorm {
            axis: 1,
            epsilon: 1e-5,
        }
        .encode(TensorInfo::new(DataType::F32, vec![2])) else {
            panic!("a fused layer encodes as a custom op");
        };
        c.op_type = FUSED_GEMM.into();
        let err = Fused::decode(&c).err().unwrap_or_default();
        assert!(err.contains("FusedGemm"), "{err}");
        c.payload = Some(CustomPayload::new(3_u8));
        assert!(Fused::decode(&c).is_err());
        c.payload = None;
        assert!(Fused::decode(&c).is_err());
    }
}

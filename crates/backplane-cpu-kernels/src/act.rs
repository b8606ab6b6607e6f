//! Activations: the unary functions run standalone or fused into GEMM and convolution
//! outputs (the in-register ones by the micro-kernels' epilogues).

/// A unary function on f32 values.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Activation {
    /// Identity.
    #[default]
    None,
    /// max(x, 0) (NaN stays NaN).
    Relu,
    /// min(max(x, min), max).
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// x if x >= 0 else alpha * x.
    LeakyRelu {
        /// Negative slope.
        alpha: f32,
    },
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// tanh(x).
    Tanh,
    /// Gauss error function.
    Erf,
    /// GELU, exact (erf) or tanh approximation.
    Gelu {
        /// Use the tanh approximation.
        tanh_approximation: bool,
    },
    /// e^x.
    Exp,
    /// ln x.
    Log,
    /// sqrt x.
    Sqrt,
    /// -x.
    Neg,
    /// |x|.
    Abs,
    /// max(0, min(1, alpha·x + beta)) (MobileNetV3's gates).
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// x · max(0, min(1, x/6 + 1/2)) (MobileNetV3's activation).
    HardSwish,
    /// x · sigmoid(x) (SiLU or swish: EfficientNet's activation, exported as a Sigmoid
    /// and a Mul).
    Silu,
    /// x if x >= 0 else alpha·(e^x - 1).
    Elu {
        /// Negative-side scale.
        alpha: f32,
    },
    /// gamma · (x if x > 0 else alpha·(e^x - 1)).
    Selu {
        /// Negative-side scale.
        alpha: f32,
        /// Overall scale.
        gamma: f32,
    },
    /// ln(1 + e^x).
    Softplus,
    /// x · tanh(ln(1 + e^x)) (YOLOv4's activation).
    Mish,
    /// Round down to an integer.
    Floor,
    /// Round up to an integer.
    Ceil,
    /// Round to the nearest integer, ties to even.
    Round,
    /// -1, 0 or 1 by sign (±0 and NaN kept).
    Sign,
    /// 1 / x.
    Reciprocal,
    /// x / (1 + |x|).
    Softsign,
    /// sin x.
    Sin,
    /// cos x.
    Cos,
    /// tan x.
    Tan,
    /// asin x.
    Asin,
    /// acos x.
    Acos,
    /// atan x.
    Atan,
    /// sinh x.
    Sinh,
    /// cosh x.
    Cosh,
    /// asinh x.
    Asinh,
    /// acosh x.
    Acosh,
    /// atanh x.
    Atanh,
    /// max(x, 0) + min(0, alpha·(e^(x/alpha) - 1)).
    Celu {
        /// Negative-side scale.
        alpha: f32,
    },
    /// x if x > alpha else 0.
    ThresholdedRelu {
        /// Threshold.
        alpha: f32,
    },
    /// x + bias below -lambd, x - bias above lambd, else 0.
    Shrink {
        /// Offset applied outside the band.
        bias: f32,
        /// Half width of the zero band.
        lambd: f32,
    },
}

impl Activation {
    /// Whether the GEMM micro-kernel applies it in registers (else the caller applies it).
    #[inline]
    pub fn in_kernel(self) -> bool {
        matches!(
            self,
            Activation::None
                | Activation::Relu
                | Activation::Clip { .. }
                | Activation::LeakyRelu { .. }
        )
    }

    /// Whether the channels-last depthwise rows' AVX-512 and AVX2 kernels
    /// ([`crate::nhwc_depthwise`]) apply it in registers: the in-kernel ones and the
    /// sigmoid, SiLU and hard sigmoid and swish of MobileNetV3 and EfficientNet
    /// ([`crate::act_vec`]), whose separate pass over a large output cost as much as the
    /// convolution.
    #[inline]
    pub fn in_registers(self) -> bool {
        self.in_kernel()
            || matches!(
                self,
                Activation::Sigmoid
                    | Activation::Silu
                    | Activation::HardSwish
                    | Activation::HardSigmoid { .. }
            )
    }

    /// The part a kernel applies in registers: itself when [`Activation::in_kernel`], else
    /// nothing (the caller applies it to the stored result).
    #[inline]
    pub fn kernel_part(self) -> Activation {
        if self.in_kernel() {
            self
        } else {
            Activation::None
        }
    }

    /// Whether it is worth fusing after a Conv/Gemm (functions computed element by element
    /// with no cross-element state; all of them are).
    #[inline]
    pub fn fusable(self) -> bool {
        !matches!(self, Activation::None)
    }

    /// The simple activations on one value (the others are returned unchanged: callers use
    /// `crate::math` for those).
    #[inline(always)]
    pub fn apply_simple(self, x: f32) -> f32 {
        match self {
            Activation::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Activation::Clip { min, max } => {
                let lower = if x < min { min } else { x };
                if lower > max {
                    max
                } else {
                    lower
                }
            }
            Activation::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha * x
                } else {
                    x
                }
            }
            _ => x,
        }
    }

    /// A short name, for messages and tests.
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::Clip { .. } => "clip",
            Activation::LeakyRelu { .. } => "leaky_relu",
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Erf => "erf",
            Activation::Gelu {
                tanh_approximation: false,
            } => "gelu",
            Activation::Gelu {
                tanh_approximation: true,
            } => "gelu_tanh",
            Activation::Exp => "exp",
            Activation::Log => "log",
            Activation::Sqrt => "sqrt",
            Activation::Neg => "neg",
            Activation::Abs => "abs",
            Activation::HardSigmoid { .. } => "hard_sigmoid",
            Activation::HardSwish => "hard_swish",
            Activation::Silu => "silu",
            Activation::Elu { .. } => "elu",
            Activation::Selu { .. } => "selu",
            Activation::Softplus => "softplus",
            Activation::Mish => "mish",
            Activation::Floor => "floor",
            Activation::Ceil => "ceil",
            Activation::Round => "round",
            Activation::Sign => "sign",
            Activation::Reciprocal => "reciprocal",
            Activation::Softsign => "softsign",
            Activation::Sin => "sin",
            Activation::Cos => "cos",
            Activation::Tan => "tan",
            Activation::Asin => "asin",
            Activation::Acos => "acos",
            Activation::Atan => "atan",
            Activation::Sinh => "sinh",
            Activation::Cosh => "cosh",
            Activation::Asinh => "asinh",
            Activation::Acosh => "acosh",
            Activation::Atanh => "atanh",
            Activation::Celu { .. } => "celu",
            Activation::ThresholdedRelu { .. } => "thresholded_relu",
            Activation::Shrink { .. } => "shrink",
        }
    }
}

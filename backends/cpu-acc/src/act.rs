//! Activations: the unary functions CpuAcc runs standalone or fuses into GEMM/conv outputs.
//! The type lives in the kernel crate (its micro-kernels apply it in registers); the mapping
//! from the core's ops is here.

use backplane_core::ops::{MathOp, UnaryOp};

pub use backplane_cpu_kernels::act::Activation;

/// The [`Activation`] computing one of the core's unary or math ops.
pub trait FromOp: Sized {
    /// The activation computing a unary op.
    fn from_unary(op: UnaryOp) -> Self;
    /// The activation computing a math op, for the ones CpuAcc runs (activations of real
    /// networks; the rest stay on CpuRef).
    fn from_math(op: MathOp) -> Option<Self>;
}

impl FromOp for Activation {
    fn from_unary(op: UnaryOp) -> Self {
        match op {
            UnaryOp::Relu => Activation::Relu,
            UnaryOp::LeakyRelu { alpha } => Activation::LeakyRelu { alpha },
            UnaryOp::Clip { min, max } => Activation::Clip { min, max },
            UnaryOp::Sigmoid => Activation::Sigmoid,
            UnaryOp::Tanh => Activation::Tanh,
            UnaryOp::Erf => Activation::Erf,
            UnaryOp::Gelu { tanh_approximation } => Activation::Gelu { tanh_approximation },
            UnaryOp::Sqrt => Activation::Sqrt,
            UnaryOp::Exp => Activation::Exp,
            UnaryOp::Log => Activation::Log,
            UnaryOp::Neg => Activation::Neg,
            UnaryOp::Abs => Activation::Abs,
        }
    }

    fn from_math(op: MathOp) -> Option<Self> {
        Some(match op {
            MathOp::HardSigmoid { alpha, beta } => Activation::HardSigmoid { alpha, beta },
            MathOp::HardSwish => Activation::HardSwish,
            MathOp::Elu { alpha } => Activation::Elu { alpha },
            MathOp::Selu { alpha, gamma } => Activation::Selu { alpha, gamma },
            MathOp::Softplus => Activation::Softplus,
            MathOp::Mish => Activation::Mish,
            MathOp::Floor => Activation::Floor,
            MathOp::Ceil => Activation::Ceil,
            MathOp::Round => Activation::Round,
            MathOp::Sign => Activation::Sign,
            MathOp::Reciprocal => Activation::Reciprocal,
            MathOp::Softsign => Activation::Softsign,
            MathOp::Sin => Activation::Sin,
            MathOp::Cos => Activation::Cos,
            MathOp::Tan => Activation::Tan,
            MathOp::Asin => Activation::Asin,
            MathOp::Acos => Activation::Acos,
            MathOp::Atan => Activation::Atan,
            MathOp::Sinh => Activation::Sinh,
            MathOp::Cosh => Activation::Cosh,
            MathOp::Asinh => Activation::Asinh,
            MathOp::Acosh => Activation::Acosh,
            MathOp::Atanh => Activation::Atanh,
            MathOp::Celu { alpha } => Activation::Celu { alpha },
            MathOp::ThresholdedRelu { alpha } => Activation::ThresholdedRelu { alpha },
            MathOp::Shrink { bias, lambd } => Activation::Shrink { bias, lambd },
            // Bool or integer results: left to the next backend.
            MathOp::IsNaN | MathOp::IsInf { .. } | MathOp::Not | MathOp::BitwiseNot => return None,
        })
    }
}
